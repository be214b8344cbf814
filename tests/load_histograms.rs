//! The built-in client's tails, logs, saturation and pinning: interval logs that
//! HdrHistogram's own readers decode, both payload forms read back, open-loop late sends,
//! per-CPU client saturation, and pins that fail loudly.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::Histogram;

fn stairbench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_stairbench"))
}

/// `stairbench serve msgr` on a free port, killed when dropped.
struct Msgr {
    child: Child,
    addr: SocketAddr,
}

impl Msgr {
    fn start(extra: &[&str]) -> Msgr {
        let mut child = stairbench()
            .args(["serve", "msgr", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .strip_prefix("listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("first line: {line:?}"))
            .parse()
            .unwrap();
        Msgr { child, addr }
    }

    fn url(&self) -> String {
        format!("msgr://{}", self.addr)
    }
}

impl Drop for Msgr {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `stairbench load URL ARGS --json FILE`, its report.
fn load_json(url: &str, args: &[&str], dir: &Path) -> (Output, serde_json::Value) {
    let json = dir.join("load.json");
    let out = stairbench()
        .args(["load", url, "-q", "--msg-size", "32"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    common::assert_success(&out);
    let report = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (out, report)
}

/// Python with HdrHistogram's own port (`pip install hdrhistogram`), or None (a skip, which
/// CI does not allow).
fn python_with_hdrh() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import hdrh.log"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some("python3");
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI must have python3 with the hdrhistogram package (.ci/run installs it)"
    );
    eprintln!("skipping: python3 -m pip install hdrhistogram");
    None
}

/// HdrHistogram's Python `HistogramLogReader` over the log: intervals, count, p99 (ns).
const READ_WITH_HDRH: &str = r#"
import sys
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
total = HdrHistogram(1, 3600 * 10**9, 3)
reader = HistogramLogReader(sys.argv[1], total)
intervals = 0
while reader.add_next_interval_histogram(total) is not None:
    intervals += 1
print(intervals, total.get_total_count(), total.get_value_at_percentile(99))
"#;

#[test]
fn hist_log_is_read_by_hdrhistograms_own_python_reader() {
    let Some(python) = python_with_hdrh() else {
        return;
    };
    let server = Msgr::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let hlog = dir.path().join("r.hlog");
    let hlog_arg = hlog.to_str().unwrap();
    let (_, report) = load_json(
        &server.url(),
        &["-c", "2", "-d", "2", "--rate", "2000", "--hist-log", hlog_arg],
        dir.path(),
    );
    let out = Command::new(python)
        .args(["-c", READ_WITH_HDRH, hlog_arg])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields: Vec<f64> = stdout
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    let (intervals, count, p99_us) = (fields[0], fields[1], fields[2] / 1e3);
    assert_eq!(intervals, 2.0, "one histogram per second: {stdout}");
    assert_eq!(count, report["requests"].as_f64().unwrap(), "{stdout}");
    let json_p99_us = report["latency_us"]["p99"].as_f64().unwrap();
    assert!(
        (p99_us - json_p99_us).abs() <= json_p99_us * 0.01 + 0.01,
        "python p99 {p99_us} us, json p99 {json_p99_us} us"
    );
}

/// An interval log as stairbench wrote it before payloads were compressed (cookie 0x1c849303).
fn legacy_log(path: &Path, hists: &[Histogram<u64>]) {
    let mut out = Vec::new();
    let mut serializer = V2Serializer::new();
    let mut log = IntervalLogWriterBuilder::new()
        .with_start_time(SystemTime::now())
        .begin_log_with(&mut out, &mut serializer)
        .unwrap();
    for (i, h) in hists.iter().enumerate() {
        let start = Duration::from_secs(i as u64);
        log.write_histogram(h, start, Duration::from_secs(1), Tag::new("latency"))
            .unwrap();
    }
    drop(log);
    assert!(String::from_utf8_lossy(&out).contains(",HISTEw"));
    std::fs::write(path, out).unwrap();
}

#[test]
fn readers_take_compressed_and_legacy_uncompressed_logs() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = Histogram::<u64>::new(3).unwrap();
    a.record_n(20_000, 10).unwrap();
    let mut b = Histogram::<u64>::new(3).unwrap();
    b.record(7_000_000_000).unwrap();
    let (old, new) = (dir.path().join("old.hlog"), dir.path().join("new.hlog"));
    legacy_log(&old, &[a.clone(), b.clone()]);
    let mut out = Vec::new();
    let halves = [(1.0, a), (2.0, b)];
    stairbench::load::hlog::write_log(&mut out, SystemTime::now(), &halves).unwrap();
    assert!(String::from_utf8_lossy(&out).contains(",HISTFA"));
    std::fs::write(&new, out).unwrap();
    for path in [&old, &new] {
        let h = stairbench::report::analysis::read_hlog(path).unwrap();
        assert_eq!((h.len(), h.max() / 1_000_000_000), (11, 7), "{path:?}");
        let h = stairbench::report::html::adapter::read_hlog(path)
            .unwrap()
            .unwrap();
        assert_eq!((h.len(), h.max() / 1_000_000_000), (11, 7), "{path:?}");
    }
}
