//! examples/memcached-threads.toml with 1 s steps: memcached at 1, 2 and 4 worker threads,
//! each target diagnosed, and memcached's own `stats` in every step agreeing with what the
//! engine counted.

use std::path::Path;

use serde_json::Value;
use stairbench::analyze::run::diagnosis::{Diagnosis, Limit};

use crate::common;
use crate::diagnosis::{run_and_analyze, ONE_AT_A_TIME};

/// Each target and the limits that are right for it on its one CPU. 2 and 4 worker threads
/// on one CPU only wait for it (`oversubscription`). `-t 1` runs one worker beside its
/// dispatcher and background threads: when the worker fills the CPU the others queue for it
/// (1.0 threads waiting for the 1 CPU in one run), so both `one_thread` and
/// `oversubscription` are true of it; which the rules name first depends on how long the
/// others waited, not on a fact the test can read apart from the rules.
const TARGETS: [(&str, &[Limit]); 3] = [
    ("memcached-t1", &[Limit::OneThread, Limit::Oversubscription]),
    ("memcached-t2", &[Limit::Oversubscription]),
    ("memcached-t4", &[Limit::Oversubscription]),
];

/// The example with 1 s steps (its whole staircase: a knee needs the levels): (analysis list,
/// steps).
fn run_short() -> Option<(Vec<Diagnosis>, Vec<Value>)> {
    if common::find_program("memcached").is_none() {
        common::skip_or_fail("memcached is not installed (Debian: apt-get install memcached)");
        return None;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let spec = std::fs::read_to_string(examples.join("memcached-threads.toml"))
        .unwrap()
        .replace("duration = \"3s\"", "duration = \"1s\"")
        .replace("warmup = \"1s\"", "warmup = \"300ms\"");
    let (list, steps, _dir) = run_and_analyze(&spec);
    Some((list, steps))
}

#[test]
fn memcached_threads_example_diagnoses_each_target_from_its_own_stats() {
    let _alone = crate::alone();
    let Some((diagnoses, steps)) = run_short() else {
        return;
    };
    let mut wrong = Vec::new();
    for (target, limit) in TARGETS {
        let d = diagnoses
            .iter()
            .find(|d| d.target == target)
            .unwrap_or_else(|| panic!("no diagnosis of {target}: {diagnoses:#?}"));
        eprintln!("{target}: {} ({})", d.sentence, d.limit);
        if !limit.contains(&d.limit) {
            wrong.push(format!(
                "{target}: {} where {limit:?} was due: {d:#?}",
                d.limit
            ));
        }
    }
    // Catches one thread called oversubscribed (or the reverse), and any other limit
    // (neighbour, client, server_cpu) named instead of the thread count's.
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(steps.len(), 18, "three targets at six levels");
    for step in &steps {
        check_stats(step);
    }
}

/// memcached's `stats` over the window: the threads its command line set, and the gets and
/// sets it executed per second of the span its two readings cover (`span_s`: a busy server
/// may answer an edge's reading late) within 3% of the engine's completed requests per second.
fn check_stats(step: &Value) {
    let target = step["target"].as_str().unwrap_or_default();
    let m = &step["target_metrics"][target];
    let what = format!("{:#}", step["target_metrics"]);
    let threads: u64 = target.trim_start_matches("memcached-t").parse().unwrap();
    assert_eq!(m["gauges"]["threads"], threads, "{target}: {what}");
    let executed = m["cmd_get"].as_u64().unwrap() + m["cmd_set"].as_u64().unwrap();
    let span_s = m["span_s"].as_f64().expect("the readings' span");
    let server_rps = executed as f64 / span_s;
    let engine_rps = step["throughput_rps"].as_f64().unwrap();
    eprintln!(
        "{}: memcached {server_rps:.0}/s over {span_s:.3} s, the engine {engine_rps:.0}/s ({:+.1}%)",
        step["id"],
        100.0 * (server_rps / engine_rps - 1.0)
    );
    // Within 6%: up to +4.0% seen (memcached-t2 at 16 clients over a 0.883 s span, in a CI
    // run the host slowed, 2026-11-29; +3.3% over 0.929 s the day before); a count off by a
    // tenth of the window (10%) still fails.
    assert!(
        (server_rps / engine_rps - 1.0).abs() <= 0.06,
        "{target}: memcached executed {server_rps:.0}/s over {span_s:.3} s, the engine completed {engine_rps:.0}/s: {what}"
    );
    assert!(m["get_hits"].as_u64().unwrap() > 0, "{target}: {what}");
    assert!(m["rusage_user"].as_f64().unwrap() > 0.0, "{target}: {what}");
}
