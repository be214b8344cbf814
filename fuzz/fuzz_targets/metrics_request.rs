//! Fuzzes the `--metrics-listen` request reader on the bytes a scraper sends: no input may
//! panic, and a head that reached the 8 KiB bound always has an answer (never waits for more).
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::cli::metrics::{parse_request, MAX_REQUEST_BYTES};

fuzz_target!(|input: &[u8]| {
    let open = parse_request(input, false);
    assert!(parse_request(input, true).is_some());
    if input.len() >= MAX_REQUEST_BYTES {
        assert!(open.is_some());
    }
});
