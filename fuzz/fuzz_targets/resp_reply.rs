//! Fuzzes the load engine's RESP reply framing: no input may panic, and a whole reply lies
//! within the bytes given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::load::protocol::redis::{KeySpace, Redis};
use stairbench::load::protocol::{Protocol, Reply};
use stairbench::load::Distribution;

fuzz_target!(|input: &[u8]| {
    let space = KeySpace::new(16, Distribution::Uniform).expect("key space");
    let mut proto = Redis::new(space, 1.0, 16, 1);
    if let Reply::Done { len, .. } = proto.parse_reply(input) {
        assert!(
            len > 0 && len <= input.len(),
            "len {len} of {}",
            input.len()
        );
    }
});
