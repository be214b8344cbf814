//! Open-loop arrivals and ramps against a server that timestamps each request it reads:
//! poisson keeps the rate with exponential gaps (uniform's are even), its latency still counts
//! from the intended time, and `--ramp` shows in the per-second lines.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use stairbench::load::arrivals::{Arrivals, Ramp};
use stairbench::load::{self, LoadConfig};
use stairbench::record::load::{IntervalLine, IntervalSink, LoadReport};

use crate::common;

/// An HTTP server (thread per connection) that answers each GET with an empty 200 after
/// `delay(now)`, and records when it read each request.
fn server(delay: fn() -> Duration) -> (u16, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let log = log.clone();
            thread::spawn(move || answer(stream, &log, delay));
        }
    });
    (port, seen)
}

fn answer(mut s: TcpStream, log: &Mutex<Vec<Instant>>, delay: fn() -> Duration) {
    s.set_nodelay(true).unwrap();
    let mut pending = Vec::new();
    let mut chunk = [0u8; 16384];
    while let Ok(n) = s.read(&mut chunk) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        pending.extend_from_slice(&chunk[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            pending.drain(..end + 4);
            log.lock().unwrap().push(now);
            thread::sleep(delay());
            if s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                .is_err()
            {
                return;
            }
        }
    }
}

struct Lines(Vec<IntervalLine>);

impl IntervalSink for Lines {
    fn interval(&mut self, line: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {
        self.0.push(line.clone());
    }
}

fn run(config: &LoadConfig) -> (LoadReport, Vec<IntervalLine>) {
    let mut lines = Lines(Vec::new());
    let out = load::run(config, &mut lines, &AtomicBool::new(false)).expect("load runs");
    (out.report, lines.0)
}

fn open_loop(port: u16, rate: f64, arrivals: Arrivals) -> LoadConfig {
    LoadConfig {
        url: format!("http://127.0.0.1:{port}/"),
        connections: 16,
        duration: Duration::from_secs(2),
        timeout: Duration::from_secs(2),
        rate_rps: Some(rate),
        arrivals,
        ..LoadConfig::default()
    }
}

/// Mean rate (per second) and coefficient of variation of the gaps between arrivals.
fn rate_and_cv(times: &[Instant]) -> (f64, f64) {
    let mut t = times.to_vec();
    t.sort();
    let gaps: Vec<f64> = t.windows(2).map(|w| (w[1] - w[0]).as_secs_f64()).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    (1.0 / mean, var.sqrt() / mean)
}

#[test]
fn poisson_keeps_the_rate_with_exponential_gaps() {
    let (port, seen) = server(|| Duration::ZERO);
    // The server reads each request on a thread of its own: on a busy machine that blurs the
    // gaps (reads delayed then coalesced), so few connections, wide gaps, and bounds that
    // still tell exponential gaps (cv 1) from even ones (cv 0); the schedule's own cv is
    // checked exactly in `load::arrivals`' unit tests.
    for (arrivals, cv_range) in [
        (Arrivals::Poisson, 0.75..1.6),
        (Arrivals::Uniform, 0.0..0.6),
    ] {
        seen.lock().unwrap().clear();
        let mut config = open_loop(port, 500.0, arrivals);
        config.connections = 4;
        let (r, _) = run(&config);
        let times = seen.lock().unwrap().clone();
        assert_eq!(times.len() as u64, r.sent, "{arrivals:?}");
        let (rate, cv) = rate_and_cv(&times);
        assert!((rate - 500.0).abs() < 50.0, "{arrivals:?}: {rate} req/s");
        assert!(cv_range.contains(&cv), "{arrivals:?}: gaps' cv {cv}");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert!(
            (r.throughput_rps - 500.0).abs() < 50.0,
            "{}",
            r.throughput_rps
        );
    }
}

#[test]
fn poisson_latency_counts_from_the_intended_time() {
    // Every request read in the first 200 ms of a second waits until that 200 ms is over.
    let (port, _) = server(|| {
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        Duration::from_millis(200).saturating_sub(Duration::from_nanos(epoch.subsec_nanos().into()))
    });
    let mut c = open_loop(port, 500.0, Arrivals::Poisson);
    c.connections = 2;
    c.duration = Duration::from_secs(3);
    let (r, _) = run(&c);
    let uncorrected = r.uncorrected_latency_us.clone().expect("open loop").p99;
    assert!(
        r.latency_us.p99 > 100_000.0,
        "corrected p99 {} us",
        r.latency_us.p99
    );
    assert!(
        uncorrected < r.latency_us.p99 / 2.0,
        "uncorrected p99 {uncorrected} us"
    );
    assert!(r.omitted.unwrap() > 0, "requests due in a stall left late");
    assert!(
        (r.throughput_rps - 500.0).abs() < 75.0,
        "{}",
        r.throughput_rps
    );
}

#[test]
fn a_rate_ramp_shows_in_the_per_second_lines() {
    let (port, seen) = server(|| Duration::ZERO);
    let mut c = open_loop(port, 1.0, Arrivals::Uniform);
    c.duration = Duration::from_secs(3);
    c.ramp = Some("200:1400:2s".parse::<Ramp>().unwrap());
    let (r, lines) = run(&c);
    assert_eq!(
        r.rate_rps,
        Some(1400.0),
        "the ramp sets the rate it ends at"
    );
    let ops: Vec<f64> = lines.iter().map(|l| l.ops_per_s).collect();
    assert_eq!(ops.len(), 3, "{ops:?}");
    // Means of 200→800, 800→1400, then 1400.
    for (got, want) in ops.iter().zip([500.0, 1100.0, 1400.0]) {
        assert!((got - want).abs() < want * 0.15, "{ops:?}");
    }
    assert_eq!(seen.lock().unwrap().len() as u64, r.sent);
}

#[test]
fn a_connection_ramp_from_the_cli_rises_line_by_line() {
    // Each request takes 20 ms: one connection does about 50 requests/s.
    let (port, _) = server(|| Duration::from_millis(20));
    let url = format!("http://127.0.0.1:{port}/");
    let out = common::cli(&["load", &url, "-d", "3s", "--ramp", "1:9:2s"]);
    common::assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ops: Vec<f64> = stderr
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect();
    assert_eq!(ops.len(), 3, "{stderr}");
    // Mean connections over each second: 3, 7, then 9.
    assert!(ops[0] < ops[1] && ops[1] < ops[2], "{ops:?}");
    assert!(ops[2] > 300.0 && ops[0] < 250.0, "{ops:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("requests"), "{stdout}");
}

#[test]
fn bad_arrivals_and_ramps_are_usage_errors() {
    for args in [
        vec!["load", "http://127.0.0.1:1/", "--arrivals", "bursty"],
        vec!["load", "http://127.0.0.1:1/", "--arrivals", "poisson"],
        vec!["load", "http://127.0.0.1:1/", "--ramp", "1:2"],
        vec![
            "load",
            "http://127.0.0.1:1/",
            "--rate",
            "10",
            "--ramp",
            "10:0:1s",
        ],
    ] {
        let out = common::cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("arrivals") || stderr.contains("ramp"),
            "{stderr}"
        );
    }
}

/// A spec's `[client] arrivals = "poisson"` spaces its rate series' requests by exponential
/// gaps (the target: this test's own server, already running); `ramp` and Poisson arrivals
/// without a rate series are refused where they are written.
#[test]
fn a_spec_spaces_its_rate_series_by_poisson_arrivals() {
    let (port, seen) = server(|| Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    let text = format!(
        "name = \"poisson\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = 4\nrate = [500]\n\n[[targets]]\nname = \"t\"\nurl = \"http://127.0.0.1:{port}/\"\n\n[client]\narrivals = \"poisson\"\n"
    );
    std::fs::write(&spec, &text).unwrap();
    let dry = common::cli(&[
        std::ffi::OsStr::new("run"),
        std::ffi::OsStr::new("--dry-run"),
        spec.as_os_str(),
    ]);
    assert!(String::from_utf8_lossy(&dry.stdout).contains("arrivals: poisson"));
    let out = dir.path().join("out");
    common::assert_success(&common::run_spec(&spec, &out));
    let steps = common::steps_json(&out);
    let times = seen.lock().unwrap().clone();
    assert_eq!(times.len() as u64, steps[0]["sent"].as_u64().unwrap());
    let (rate, cv) = rate_and_cv(&times);
    assert!((rate - 500.0).abs() < 50.0, "{rate} req/s");
    assert!((0.75..1.6).contains(&cv), "gaps' cv {cv}: not exponential");

    for (client, expected) in [
        (
            "ramp = \"100:500:1s\"",
            "a ramp inside a step would mix levels",
        ),
        ("arrivals = \"bursty\"", "use uniform or poisson"),
    ] {
        let bad = text.replace("arrivals = \"poisson\"", client);
        let err = plan_error(&bad);
        assert!(
            err.contains(expected) && err.contains("spec.toml:12:"),
            "{err}"
        );
    }
    let closed = text.replace("rate = [500]", "");
    let err = plan_error(&closed);
    assert!(
        err.contains("needs a rate series") && err.contains("client.arrivals"),
        "{err}"
    );
}

fn plan_error(text: &str) -> String {
    let spec =
        stairbench::sweep::spec::SpecFile::parse(std::path::Path::new("spec.toml"), text).unwrap();
    match stairbench::sweep::plan::Plan::new(spec, "/bin/true".into()) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e.to_string(),
    }
}
