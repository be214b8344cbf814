//! Fuzzes the load engine's memcached reply framing (text and meta replies): no input may
//! panic, a whole reply lies within the bytes given, and its bytes alone frame the same way
//! while one byte fewer is still incomplete (the engine reads replies cut anywhere).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::load::protocol::memcache::parse_memcache;
use stairbench::load::protocol::Reply;

fuzz_target!(|input: &[u8]| {
    let reply = parse_memcache(input);
    if let Reply::Done { len, .. } = reply {
        assert!(
            len > 0 && len <= input.len(),
            "len {len} of {}",
            input.len()
        );
        assert_eq!(parse_memcache(&input[..len]), reply);
        assert_eq!(parse_memcache(&input[..len - 1]), Reply::Incomplete);
    }
});
