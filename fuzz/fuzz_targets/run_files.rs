//! Fuzzes the run directory's readers: histogram logs (.hlog), steps.jsonl, custom cpuset
//! tables and CPU lists. No input may panic. The first byte picks the reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::placement::policy::load_custom_table;
use stairbench::record::hlog::read_hlog;
use stairbench::record::steps::read_steps;

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    match selector % 4 {
        0 | 1 => {
            // The readers take paths: one file per fuzzing process, rewritten each run.
            let path = std::env::temp_dir().join(format!("stairbench-fuzz-{}", std::process::id()));
            std::fs::write(&path, rest).expect("write");
            if selector % 4 == 0 {
                let _ = read_hlog(&path);
            } else {
                let _ = read_steps(&path);
            }
        }
        2 => {
            let _ = load_custom_table(&String::from_utf8_lossy(rest));
        }
        _ => {
            let _ = stairbench::cpuset::parse(&String::from_utf8_lossy(rest));
        }
    }
});
