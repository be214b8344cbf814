//! Fuzzes the msgr frame header and the load engine's reply framing: no input may panic, a
//! whole reply lies within the bytes given, and a header re-encodes to its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::load::protocol::msgr::MsgrProto;
use stairbench::load::protocol::{Protocol, Reply};
use stairbench::wire::msgr::{FrameHeader, DEFAULT_MAX_FRAME, HEADER_LEN};

fuzz_target!(|input: &[u8]| {
    if let Some(h) = FrameHeader::decode(input) {
        assert_eq!(&h.encode()[..], &input[..HEADER_LEN]);
        let _ = h.check_request(DEFAULT_MAX_FRAME);
    }
    let mut proto = MsgrProto::new(64);
    if let Reply::Done { len, .. } = proto.parse_reply(input) {
        assert!(len >= HEADER_LEN && len <= input.len());
    }
});
