//! Fuzzes the load engine's HTTP/1.1 reply framing: no input may panic, a whole reply lies
//! within the bytes given (the engine advances by its length), and the parser that keeps its
//! place across reads says what a parser given all the bytes at once says.
//!
//! The first byte picks: bit 0, the request was HEAD; the rest, how many bytes each read
//! brings (1 to 128). The reply is the bytes after it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::load::protocol::http::Framer;
use stairbench::load::protocol::Reply;

fuzz_target!(|input: &[u8]| {
    let Some((&pick, reply)) = input.split_first() else {
        return;
    };
    let head_request = pick & 1 == 1;
    let step = 1 + usize::from(pick >> 1);
    let at_once = Framer::default().frame(reply, head_request);
    if let Reply::Done { len, .. } = at_once {
        assert!(
            len > 0 && len <= reply.len(),
            "len {len} of {}",
            reply.len()
        );
    }
    let mut framer = Framer::default();
    let mut upto = 0;
    let in_reads = loop {
        upto = (upto + step).min(reply.len());
        let r = framer.frame(&reply[..upto], head_request);
        if r != Reply::Incomplete || upto == reply.len() {
            break r;
        }
    };
    assert_eq!(in_reads, at_once, "read {step} bytes at a time");
});
