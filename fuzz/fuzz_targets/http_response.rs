//! Fuzzes the load engine's HTTP/1.1 response framing: no input may panic, and a whole reply
//! lies within the bytes given (the engine advances by its length).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::load::protocol::http::parse_response;
use stairbench::load::protocol::Reply;

fuzz_target!(|input: &[u8]| {
    if let Reply::Done { len, .. } = parse_response(input) {
        assert!(
            len > 0 && len <= input.len(),
            "len {len} of {}",
            input.len()
        );
    }
});
