//! Fuzzes the spec loader with its validation (SpecFile::parse then Plan::new): no input may
//! panic; a bad spec is an error.
#![no_main]

use std::path::{Path, PathBuf};

use libfuzzer_sys::fuzz_target;
use stairbench::sweep::plan::Plan;
use stairbench::sweep::spec::SpecFile;

fuzz_target!(|input: &[u8]| {
    let Ok(text) = std::str::from_utf8(input) else {
        return;
    };
    if let Ok(spec) = SpecFile::parse(Path::new("fuzz.toml"), text) {
        let _ = Plan::new(spec, PathBuf::from("/nonexistent/stairbench"));
    }
});
