//! `stairbench demo` measures the servers, not the load generator: the quick demo's series
//! climb to steps where the server's CPU is the busier side, few steps saturate the generator,
//! and the report carries the comparison's verdict.

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The server's CPU seconds over a step's window: perf's task clock where perf ran (exact),
/// else /proc's user + system time (10-ms ticks: coarse when a loaded machine leaves the server
/// a few percent of a CPU).
fn server_cpu_s(step: &Value) -> f64 {
    let server = &step["server"];
    match server["perf"]["task_clock_ms"].as_f64() {
        Some(ms) => ms / 1000.0,
        None => {
            let proc = &server["server"];
            proc["user_s"].as_f64().unwrap() + proc["sys_s"].as_f64().unwrap()
        }
    }
}

/// A step's server CPU share (its process tree's CPU over the window, per server CPU) and its
/// generator's (the busiest generator thread), both as fractions of a CPU.
fn busy_shares(step: &Value) -> (f64, f64) {
    let window_s = step["server"]["window_s"].as_f64().unwrap();
    let server_cpus = stairbench::cpuset::parse(step["server_cpus"].as_str().unwrap())
        .unwrap()
        .len() as f64;
    let client = step["client_cpu"]["per_core_busy"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_f64)
        .fold(0.0, f64::max)
        / 100.0;
    (server_cpu_s(step) / window_s / server_cpus, client)
}

/// Server-limited: the generator was not saturated and the server spent more of its CPUs than
/// the generator did of its own (on a loaded machine neither reaches 100%, but the side that
/// costs more per request is the one that runs out first).
fn server_limited(step: &Value) -> bool {
    let (server, client) = busy_shares(step);
    step["client_saturated"] == Value::Bool(false) && server >= client
}

/// The dry run's `estimated time: about 0m21s`, in seconds.
fn estimated_s(dry_run: &str) -> f64 {
    let line = dry_run
        .lines()
        .find(|l| l.starts_with("estimated time: about "))
        .unwrap_or_else(|| panic!("no estimate in {dry_run}"));
    let about = line.trim_start_matches("estimated time: about ");
    let (m, rest) = about.split_once('m').unwrap();
    m.parse::<f64>().unwrap() * 60.0 + rest[..2].parse::<f64>().unwrap()
}

/// Seconds the demo waited for its CPUs to settle, from its first line (`after waiting 0.5 s`
/// or `for the 3 s the demo waits`).
fn settle_wait_s(stdout: &str) -> f64 {
    let re = regex::Regex::new(r"(after waiting|for the) (\d+(\.\d+)?) s").unwrap();
    let caps = re.captures(stdout).unwrap_or_else(|| panic!("{stdout}"));
    caps[2].parse().unwrap()
}

#[test]
fn the_quick_demo_measures_the_servers_and_says_which_is_faster() {
    let dry = common::cli(&["demo", "--quick", "--dry-run"]);
    common::assert_success(&dry);
    let estimate_s = estimated_s(&String::from_utf8_lossy(&dry.stdout));
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("demo");
    let start = Instant::now();
    let out = common::cli_cmd()
        .args(["demo", "--quick", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let took = start.elapsed();
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 30 s alone; other developers' builds share these cores.
    assert!(took < Duration::from_secs(60), "--quick took {took:?}");
    // The dry run's estimate, from the plan's time model, within 25% of the time the demo
    // took, its wait for busy CPUs to settle aside (the estimate counts none: idle CPUs
    // settle at once).
    let measured_s = took.as_secs_f64() - settle_wait_s(&stdout);
    assert!(
        (estimate_s - measured_s).abs() <= 0.25 * measured_s,
        "estimated {estimate_s} s, took {measured_s:.1} s besides settling"
    );

    let steps = common::steps_json(&out_dir);
    let mut series: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for s in steps.iter().filter(|s| s["status"] == "ok") {
        let key = format!("{}/{}", s["target"], s["placement"]);
        series.entry(key).or_default().push(s);
    }
    assert!(series.len() >= 2, "{series:?}");
    assert!(
        series.values().map(Vec::len).sum::<usize>() >= 8,
        "{stdout}"
    );
    for (name, steps) in &series {
        // The servers' calibrated work per message is a floor under their CPU per request.
        for s in steps {
            let cpu_us = server_cpu_s(s) * 1e6 / s["requests"].as_f64().unwrap();
            let floor_us = stairbench::cli::demo::WORK_NS as f64 / 1000.0;
            assert!(cpu_us >= 0.9 * floor_us, "{}: {cpu_us} µs/request", s["id"]);
        }
        let saturated = steps
            .iter()
            .filter(|s| s["client_saturated"] == true)
            .count();
        assert!(
            saturated * 4 <= steps.len(),
            "{name}: {saturated} of {} steps saturated the generator",
            steps.len()
        );
        let best = steps
            .iter()
            .max_by(|a, b| {
                let rps = |s: &Value| s["throughput_rps"].as_f64().unwrap();
                rps(a).total_cmp(&rps(b))
            })
            .unwrap();
        assert!(
            server_limited(best),
            "{name}: best step {} is not server-limited: (server, client) busy {:?}",
            best["id"],
            busy_shares(best)
        );
    }

    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    let sentence = regex::Regex::new(
        r"reactor (is faster than|is slower than|is as fast as|and pool are level within noise:) (pool: )?\d+\.\d\dx \[\d+\.\d\d, \d+\.\d\d\] \((no difference found at 95%|a difference at 95%|equal: )",
    )
    .unwrap();
    assert!(sentence.is_match(&report), "{report}");
    assert!(
        stdout.contains("verdict: throughput at 8 clients: reactor "),
        "{stdout}"
    );
    // stdout's diagnosis and verdict sentences are the reports' own, word for word.
    let said: Vec<&str> = stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("diagnosis: ")
                .or_else(|| l.strip_prefix("verdict: "))
        })
        .collect();
    assert!(said.len() >= 4, "{stdout}");
    for sentence in said {
        assert!(report.contains(sentence), "not in report.md: {sentence}");
    }
    assert!(stdout.contains("the demo started with CPUs "), "{stdout}");
    let notes = std::fs::read_to_string(out_dir.join("notes.txt")).unwrap();
    assert!(notes.starts_with("the demo started with CPUs "), "{notes}");
    assert!(stdout.contains(&format!(
        "report:        {}",
        out_dir.join("report.html").display()
    )));
    assert_eq!(schema_errors(&steps), Vec::<String>::new());

    let again = common::cli_cmd()
        .args(["demo", "--quick", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr)
        .contains("already holds a run: continue it with --resume"));
}

fn schema_errors(steps: &[Value]) -> Vec<String> {
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    steps
        .iter()
        .flat_map(|s| crate::schema::validate(&schema, s))
        .collect()
}

#[test]
fn on_one_cpu_the_demo_names_no_winner() {
    let Some(taskset) = common::find_program("taskset") else {
        return common::skip_or_fail(common::not_installed("taskset"));
    };
    let out = Command::new(taskset)
        .args(["-c", "0"])
        .arg(common::stairbench_bin())
        .args(["demo", "--quick", "--dry-run"])
        .output()
        .unwrap();
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("cannot be compared cleanly here") && stdout.contains("names no winner"),
        "{stdout}"
    );
    assert!(stdout.contains("reactor / shared:"), "{stdout}");
    assert!(!stdout.contains("separated"), "{stdout}");
}

#[test]
fn the_working_server_answers_every_frame_on_both_architectures() {
    use stairbench::serve::{spawn_msgr, Arch, MsgrOptions};
    use std::io::{Read, Write};
    for arch in [Arch::Reactor, Arch::Pool] {
        let server = spawn_msgr(MsgrOptions {
            arch,
            work_ns: 5_000,
            ..MsgrOptions::default()
        })
        .unwrap();
        let mut conn = std::net::TcpStream::connect(server.addr()).unwrap();
        let mut frames = Vec::new();
        for reply_len in [0u32, 1, 70_000] {
            frames.extend_from_slice(&64u32.to_le_bytes());
            frames.extend_from_slice(&reply_len.to_le_bytes());
            frames.extend_from_slice(&[7u8; 64]);
        }
        conn.write_all(&frames).unwrap();
        for reply_len in [0usize, 1, 70_000] {
            let mut header = [0u8; 8];
            conn.read_exact(&mut header).unwrap();
            let len = u32::from_le_bytes(header[..4].try_into().unwrap()) as usize;
            assert_eq!(len, reply_len, "{arch:?}");
            conn.read_exact(&mut vec![0u8; len]).unwrap();
        }
        assert_eq!(server.stats().ops, 3, "{arch:?}");
    }
}
