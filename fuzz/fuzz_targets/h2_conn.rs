//! Fuzzes the HTTP/2 client connection (frames, flow control, streams, HPACK): a connection
//! fed arbitrary server bytes. No input may panic or loop; every stream opened is accounted
//! for (ended or in flight) after each read.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let _ = stairbench::load::fuzz_client_connection(input);
});
