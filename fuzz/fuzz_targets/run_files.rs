//! Fuzzes the run directory's readers: histogram logs (.hlog), steps.jsonl, custom cpuset
//! tables and CPU lists, in memory (the file readers are thin wrappers over these). No input
//! may panic. The first byte picks the reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::placement::policy::load_custom_table;
use stairbench::record::hlog::parse_hlog;
use stairbench::record::steps::parse_steps;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    match selector % 4 {
        0 => {
            let _ = parse_hlog(rest);
        }
        1 => {
            let _ = parse_steps(&String::from_utf8_lossy(rest));
        }
        2 => {
            let _ = load_custom_table(&String::from_utf8_lossy(rest));
        }
        _ => {
            let _ = stairbench::cpuset::parse(&String::from_utf8_lossy(rest));
        }
    }
});
