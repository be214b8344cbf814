//! Fuzzes what a kvd rank reads from a TCP peer: the hello (as the listening side reads it
//! from whatever connects) and the frames after it. No input may panic; a hello or frame
//! lies within the bytes given, the hello reader never asks for bytes past a whole hello,
//! and a decoded frame re-encodes to its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::wire::kvd::{
    decode, decode_hello, encode_hello, encode_request, encode_response, hello_wants, Frame,
};

fuzz_target!(|input: &[u8]| {
    match decode_hello(input) {
        Ok(Some((h, len))) => {
            assert!(len <= input.len());
            assert_eq!(hello_wants(&input[..len]), 0);
            let mut again = Vec::new();
            encode_hello(&mut again, h.rank, h.list);
            assert_eq!(&again[..], &input[..len]);
        }
        Ok(None) => assert!(hello_wants(input) > 0),
        Err(_) => {}
    }
    let mut at = 0;
    while let Ok(Some((frame, len))) = decode(&input[at..]) {
        assert!(len > 0 && at + len <= input.len());
        let mut again = Vec::new();
        match frame {
            Frame::Request { id, op, key, value } => encode_request(&mut again, id, op, key, value),
            Frame::Response { id, status, value } => encode_response(&mut again, id, status, value),
        }
        assert_eq!(&again[..], &input[at..at + len]);
        at += len;
    }
});
