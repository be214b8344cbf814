//! The load engine against small servers started by the test: accounting of `sent`,
//! `Connection: close`, garbage replies, timeouts, and coordinated omission through a
//! stalling proxy.

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use stairbench::load::{self, LoadConfig, LoadOutcome};
use stairbench::record::load::{IntervalLine, IntervalSink};

struct NoLines;
impl IntervalSink for NoLines {
    fn interval(&mut self, _: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {}
}

/// Counts the per-second lines of the measured window (the warm-up's last one ends at 0).
#[derive(Default)]
struct MeasuredLines(usize);
impl IntervalSink for MeasuredLines {
    fn interval(&mut self, line: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {
        self.0 += usize::from(line.elapsed_s > 0.0);
    }
}

fn run(config: LoadConfig) -> LoadOutcome {
    load::run(&config, &mut NoLines, &AtomicBool::new(false)).expect("load runs")
}

fn config(url: String) -> LoadConfig {
    LoadConfig {
        url,
        connections: 4,
        duration: Duration::from_millis(1500),
        timeout: Duration::from_secs(2),
        ..LoadConfig::default()
    }
}

/// A thread-per-connection server: `handler` turns one connection's bytes into replies.
fn serve<F>(handler: F) -> u16
where
    F: Fn(TcpStream) + Send + Sync + Clone + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let h = handler.clone();
            thread::spawn(move || h(stream));
        }
    });
    port
}

/// msgr echo: answers each frame with a reply of the asked size; counts frames received.
fn msgr_echo(frames: Arc<AtomicU64>) -> u16 {
    serve(move |mut s: TcpStream| {
        s.set_nodelay(true).unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 65536];
        loop {
            let n = match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            let mut out = Vec::new();
            while buf.len() >= 8 {
                let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
                let reply = u32::from_le_bytes(buf[4..8].try_into().unwrap()) as usize;
                if buf.len() < 8 + len {
                    break;
                }
                buf.drain(..8 + len);
                frames.fetch_add(1, Ordering::SeqCst);
                out.extend_from_slice(&(reply as u32).to_le_bytes());
                out.extend_from_slice(&0u32.to_le_bytes());
                out.resize(out.len() + reply, 7);
            }
            if s.write_all(&out).is_err() {
                return;
            }
        }
    })
}

#[test]
fn closed_loop_sent_equals_what_the_server_received() {
    let frames = Arc::new(AtomicU64::new(0));
    let port = msgr_echo(frames.clone());
    let mut c = config(format!("msgr://127.0.0.1:{port}"));
    c.depth = 4;
    c.warmup = Duration::from_millis(300);
    c.proto.msg_size = 100;
    let mut lines = MeasuredLines::default();
    let out = load::run(&c, &mut lines, &AtomicBool::new(false)).expect("load runs");
    let r = &out.report;
    assert!(r.requests > 100, "{r:?}");
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(
        r.sent,
        frames.load(Ordering::SeqCst),
        "sent must equal frames received"
    );
    assert!(
        r.sent > r.requests,
        "warm-up and drain are sent but not measured"
    );
    assert_eq!(
        out.hist_ns.len(),
        r.requests,
        "one latency sample per measured request"
    );
    assert!((r.duration_s - 1.5).abs() < 0.05, "{}", r.duration_s);
    assert!(r.latency_us.p50 > 0.0 && r.latency_us.p50 <= r.latency_us.p99);
    assert!(r.bytes_received >= r.requests * 108);
    // 1.5 s: a line for the first second, one for the half second left.
    assert_eq!(lines.0, 2);
}

/// HTTP server answering 200, announcing `Connection: close` on every `close_every`-th
/// response of a connection (as nginx's keepalive_requests does), counting requests.
fn http_closing(close_every: u64, requests: Arc<AtomicU64>) -> u16 {
    serve(move |mut s: TcpStream| {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let mut served: u64 = 0;
        loop {
            let n = match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            buf.extend_from_slice(&chunk[..n]);
            while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                buf.drain(..end + 4);
                requests.fetch_add(1, Ordering::SeqCst);
                served += 1;
                let close = served.is_multiple_of(close_every);
                let head = if close { "Connection: close\r\n" } else { "" };
                let reply = format!("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n{head}\r\nok");
                if s.write_all(reply.as_bytes()).is_err() || close {
                    return;
                }
            }
        }
    })
}

#[test]
fn connection_close_is_honoured_without_losing_requests() {
    let requests = Arc::new(AtomicU64::new(0));
    let port = http_closing(7, requests.clone());
    let out = run(config(format!("http://127.0.0.1:{port}/")));
    let r = &out.report;
    assert!(r.requests > 50, "{r:?}");
    assert!(
        r.errors.is_empty(),
        "closing connections are not errors: {:?}",
        r.errors
    );
    assert_eq!(r.sent, requests.load(Ordering::SeqCst));
}

#[test]
fn garbage_and_hostile_lengths_are_errors_not_crashes() {
    // Replies with a 4 GB length and nothing else, then garbage.
    let port = serve(|mut s: TcpStream| {
        let mut chunk = [0u8; 4096];
        let mut n = 0u32;
        while let Ok(k) = s.read(&mut chunk) {
            if k == 0 {
                return;
            }
            n += 1;
            let reply: &[u8] = if n.is_multiple_of(2) {
                b"\xff\xff\xff\xff\0\0\0\0"
            } else {
                b"garbage!"
            };
            if s.write_all(reply).is_err() {
                return;
            }
        }
    });
    let mut c = config(format!("msgr://127.0.0.1:{port}"));
    c.duration = Duration::from_millis(500);
    let r = run(c).report;
    assert_eq!(r.requests, 0);
    assert!(
        r.errors.get("bad_frame").copied().unwrap_or(0) > 10,
        "{:?}",
        r.errors
    );
}

#[test]
fn silent_server_times_out_and_drain_is_bounded() {
    let port = serve(|mut s: TcpStream| {
        let mut chunk = [0u8; 4096];
        while matches!(s.read(&mut chunk), Ok(k) if k > 0) {}
    });
    let mut c = config(format!("msgr://127.0.0.1:{port}"));
    c.duration = Duration::from_millis(1000);
    c.timeout = Duration::from_millis(200);
    let started = std::time::Instant::now();
    let r = run(c).report;
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "drain waited too long"
    );
    assert_eq!(r.requests, 0);
    assert!(
        r.errors.get("timeout").copied().unwrap_or(0) >= 4,
        "{:?}",
        r.errors
    );
}

#[test]
fn a_target_that_is_down_is_a_clear_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = load::run(
        &config(format!("msgr://127.0.0.1:{port}")),
        &mut NoLines,
        &AtomicBool::new(false),
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot connect"), "{err}");
}

/// Forwards to `backend`, stalling all traffic for `stall` at the start of every second.
pub fn stalling_proxy(backend: u16, stall: Duration) -> u16 {
    let stalled = Arc::new(AtomicBool::new(false));
    let flag = stalled.clone();
    thread::spawn(move || loop {
        thread::sleep(Duration::from_secs(1) - stall);
        flag.store(true, Ordering::SeqCst);
        thread::sleep(stall);
        flag.store(false, Ordering::SeqCst);
    });
    serve(move |client: TcpStream| {
        let server = TcpStream::connect(("127.0.0.1", backend)).unwrap();
        for (mut from, mut to) in [
            (client.try_clone().unwrap(), server.try_clone().unwrap()),
            (server, client),
        ] {
            let stalled = stalled.clone();
            thread::spawn(move || {
                from.set_nodelay(true).ok();
                to.set_nodelay(true).ok();
                let mut chunk = [0u8; 65536];
                while let Ok(n) = from.read(&mut chunk) {
                    while stalled.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(1));
                    }
                    if n == 0 || to.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    })
}

#[test]
fn open_loop_corrects_for_coordinated_omission() {
    let backend = msgr_echo(Arc::new(AtomicU64::new(0)));
    let port = stalling_proxy(backend, Duration::from_millis(200));
    let mut c = config(format!("msgr://127.0.0.1:{port}"));
    c.connections = 2;
    c.rate_rps = Some(500.0);
    c.duration = Duration::from_secs(3);
    c.proto.msg_size = 16;
    let r = run(c).report;
    let corrected = r.latency_us.p99;
    let uncorrected = r
        .uncorrected_latency_us
        .clone()
        .expect("open loop has it")
        .p99;
    // A fifth of each second is stalled: the slowest 1% waited most of the 200 ms stall.
    assert!(
        corrected > 100_000.0,
        "corrected p99 {corrected} us should show the stall"
    );
    assert!(
        uncorrected < 50_000.0,
        "uncorrected p99 {uncorrected} us hides the stall"
    );
    assert!(
        r.omitted.unwrap() > 0,
        "requests due during a stall leave late"
    );
    assert!(
        (r.throughput_rps - 500.0).abs() < 60.0,
        "{}",
        r.throughput_rps
    );
}

#[test]
fn json_matches_the_checked_in_schema() {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/load.schema.json")).unwrap();
    let port = msgr_echo(Arc::new(AtomicU64::new(0)));
    for rate in [None, Some(2000.0)] {
        let mut c = config(format!("msgr://127.0.0.1:{port}"));
        c.duration = Duration::from_millis(400);
        c.rate_rps = rate;
        let doc = serde_json::to_value(run(c).report).unwrap();
        let errors = crate::schema::validate(&schema, &doc);
        assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    }
    // The checker does catch a broken document.
    let broken = serde_json::json!({"schema": 1, "requests": -1});
    let errors = crate::schema::validate(&schema, &broken);
    assert!(
        errors.iter().any(|e| e.starts_with("/requests: ")),
        "{errors:#?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("missing properties")),
        "{errors:#?}"
    );
}

#[test]
fn cli_writes_json_and_an_interval_log_that_reads_back() {
    let port = msgr_echo(Arc::new(AtomicU64::new(0)));
    let dir = tempfile::tempdir().unwrap();
    let (json, hlog) = (dir.path().join("r.json"), dir.path().join("r.hlog"));
    let out = common::cli_cmd()
        .args([
            "load",
            &format!("msgr://127.0.0.1:{port}"),
            "-c",
            "2",
            "-d",
            "2",
            "--msg-size",
            "32",
            "--cpuset",
            "0",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--hist-log")
        .arg(&hlog)
        .output()
        .unwrap();
    common::assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ops/s") && stderr.contains("mean lat"),
        "per-second lines: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let requests = report["requests"].as_u64().unwrap();
    assert!(requests > 0);
    // The interval log holds one histogram per second whose counts add up to `requests`.
    let text = std::fs::read(&hlog).unwrap();
    let mut deserializer = hdrhistogram::serialization::Deserializer::new();
    let mut total = 0;
    let mut intervals = 0;
    for item in hdrhistogram::serialization::interval_log::IntervalLogIterator::new(&text) {
        if let hdrhistogram::serialization::interval_log::LogEntry::Interval(h) = item.unwrap() {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(h.encoded_histogram())
                .unwrap();
            let hist: hdrhistogram::Histogram<u64> =
                deserializer.deserialize(&mut decoded.as_slice()).unwrap();
            total += hist.len();
            intervals += 1;
        }
    }
    assert_eq!(intervals, 2);
    assert_eq!(total, requests);
}

#[test]
fn cli_bad_input_is_one_sentence_and_exit_2() {
    for args in [
        vec!["load", "ftp://127.0.0.1:1"],
        vec!["load", "msgr://127.0.0.1:1", "--cpuset", "3-1"],
        vec!["load", "msgr://127.0.0.1:1", "-d", "5 parsecs"],
        vec!["load", "redis://127.0.0.1:1", "--distribution", "zipf:2"],
    ] {
        let out = common::cli(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(stderr.contains("error"), "{args:?}: {stderr}");
    }
}
