//! Fuzzes the external tools' output parsers (wrk, redis-benchmark, crimson-msgr, json,
//! regex, stairbench's own JSON): no output may panic. The first byte picks the parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::load::external::{by_name, OutputParser};

fn parser(selector: u8) -> Box<dyn OutputParser> {
    let (name, opts) = match selector % 6 {
        0 => ("wrk", ""),
        1 => ("redis-benchmark", ""),
        2 => ("crimson-msgr", ""),
        3 => ("json", "fields = { throughput_rps = \"/rps\", \"latency_us.p99\" = \"/lat/p99\" }\nscale = { \"latency_us.p99\" = 1000.0 }"),
        4 => ("regex", "pattern = '(?P<throughput_rps>[0-9.]+) req/s.*p99 (?P<latency_us.p99>[0-9.]+)'"),
        _ => ("stairbench", ""),
    };
    let opts: toml::Table = opts.parse().expect("options");
    by_name(name, &opts).expect("parser")
}

fuzz_target!(|input: &[u8]| {
    let Some((&selector, rest)) = input.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let p = parser(selector);
    let _ = p.parse(&text);
    let _ = p.parse_report(&text);
});
