//! Fuzzes the external tools' output parsers (wrk, redis-benchmark, crimson-msgr, json,
//! regex, stairbench's own JSON): no output may panic. The first byte picks the parser.
//! The parsers are built once (as a sweep does): building one per input compiled the regex
//! and parsed the options each time, which was most of the target's time.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stairbench::load::external::{by_name, OutputParser};

const PARSERS: [(&str, &str); 6] = [
    ("wrk", ""),
    ("redis-benchmark", ""),
    ("crimson-msgr", ""),
    ("json", "fields = { throughput_rps = \"/rps\", \"latency_us.p99\" = \"/lat/p99\" }\nscale = { \"latency_us.p99\" = 1000.0 }"),
    ("regex", "pattern = '(?P<throughput_rps>[0-9.]+) req/s.*p99 (?P<latency_us.p99>[0-9.]+)'"),
    ("stairbench", ""),
];

static BUILT: OnceLock<Vec<Box<dyn OutputParser>>> = OnceLock::new();

fn parsers() -> &'static [Box<dyn OutputParser>] {
    BUILT.get_or_init(|| {
        PARSERS
            .iter()
            .map(|(name, opts)| {
                let opts: toml::Table = opts.parse().expect("options");
                by_name(name, &opts).expect("parser")
            })
            .collect()
    })
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let p = &parsers()[selector as usize % PARSERS.len()];
    let _ = p.parse(&text);
    let _ = p.parse_report(&text);
});
