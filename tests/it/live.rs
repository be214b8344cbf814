//! Live outputs and shell conventions: `--json-lines` streamed from `load` and `run`,
//! `--metrics-listen` scraped during a real run of the built-in msgr server (its counters
//! checked against steps.jsonl), completions for three shells, the man page, `--version`, and
//! no progress bar or escape codes under `CI=true`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

const SPEC: &str = r#"name = "live"
clients = [1, 2]
duration = "1s"
warmup = "200ms"
placements = ["shared"]
[[targets]]
name = "reactor"
builtin = "msgr --arch reactor --threads 1"
"#;

/// GET /metrics, the body; None when nothing answers.
fn scrape(addr: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("application/openmetrics-text"), "{head}");
    Some(body.to_string())
}

/// The value of a sample `name{labels}` in an exposition.
fn sample(body: &str, name: &str, labels: &str) -> Option<f64> {
    let key = format!("{name}{{{labels}}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map(|v| v.trim().parse().unwrap())
}

fn step_labels(step: &Value) -> String {
    format!(
        "target=\"{}\",placement=\"{}\",clients=\"{}\",rep=\"{}\"",
        step["target"].as_str().unwrap(),
        step["placement"].as_str().unwrap(),
        step["clients"],
        step["rep"]
    )
}

/// Requests of the measured-window lines, summed per (clients, rep).
fn requests_by_step(lines: &[Value]) -> BTreeMap<(u64, u64), u64> {
    let mut sums = BTreeMap::new();
    for l in lines {
        if let Some(n) = l["requests"].as_u64() {
            let key = (l["clients"].as_u64().unwrap(), l["rep"].as_u64().unwrap());
            *sums.entry(key).or_insert(0) += n;
        }
    }
    sums
}

#[test]
fn a_run_streams_json_lines_and_serves_metrics_consistent_with_its_steps() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("spec.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let out_dir = tmp.path().join("run");
    let mut child = common::cli_cmd()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out_dir)
        .args(["--json-lines", "-", "--metrics-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Standard error: the endpoint's address first, then the progress lines and the summary.
    let (addr_tx, addr_rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let stderr_reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.strip_prefix("metrics: http://") {
                let _ = addr_tx.send(url.trim_end_matches("/metrics").to_string());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    let stdout = child.stdout.take().unwrap();
    let stdout_reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            lines.push((Instant::now(), line));
        }
        lines
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the metrics address on standard error");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    // Scraped until the run ends; the last answer is kept.
    let mut last = None;
    let mut scrapes = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        if let Some(body) = scrape(&addr) {
            last = Some(body);
            scrapes += 1;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = child.wait().unwrap();
    let stderr = stderr_reader.join().unwrap();
    let lines = stdout_reader.join().unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(scrapes >= 5, "{scrapes} scrapes");
    // The summary went to standard error; standard output holds JSON lines only, streamed
    // (they came over more than the length of one step, not all at the end).
    assert!(stderr.contains("run directory:"), "{stderr}");
    let json: Vec<Value> = lines
        .iter()
        .map(|(_, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let spread = lines.last().unwrap().0 - lines[0].0;
    assert!(spread > Duration::from_millis(800), "{spread:?}");
    for l in &json {
        assert_eq!(
            (l["target"].as_str(), l["placement"].as_str()),
            (Some("reactor"), Some("shared"))
        );
        assert!(
            l["elapsed_s"].is_number() && l["ops_per_s"].is_number(),
            "{l}"
        );
    }

    // Per step: the lines' requests add up to its steps.jsonl figure, and so does the
    // endpoint's counter (the last step's only as far as the last scrape saw it).
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 2);
    let sums = requests_by_step(&json);
    let body = last.expect("a scrape");
    for (i, step) in steps.iter().enumerate() {
        let requests = step["requests"].as_u64().unwrap();
        assert!(requests > 0);
        let key = (
            step["clients"].as_u64().unwrap(),
            step["rep"].as_u64().unwrap(),
        );
        assert_eq!(sums[&key], requests, "json lines of {key:?}");
        let labels = step_labels(step);
        let counted = sample(&body, "stairbench_requests_total", &labels);
        let latencies = sample(&body, "stairbench_latency_seconds_count", &labels);
        if i + 1 < steps.len() {
            assert_eq!(counted, Some(requests as f64), "{labels}\n{body}");
            assert_eq!(latencies, Some(requests as f64), "{labels}\n{body}");
        } else {
            assert!(
                counted.unwrap_or(0.0) <= requests as f64,
                "{labels}\n{body}"
            );
        }
        let errors = sample(&body, "stairbench_errors_live_total", &labels);
        if i + 1 < steps.len() {
            assert_eq!(errors, Some(0.0), "{body}");
        }
    }
    assert!(
        body.contains("# TYPE stairbench_latency_seconds histogram"),
        "{body}"
    );
    assert!(
        body.contains("stairbench_latency_seconds_bucket{"),
        "{body}"
    );
    assert!(body.contains("# TYPE stairbench_inflight gauge"), "{body}");
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
}

#[test]
fn load_streams_json_lines_to_stdout_and_its_summary_to_stderr() {
    let server = stairbench::serve::msgr::spawn_msgr(Default::default()).unwrap();
    let url = format!("msgr://{}", server.addr());
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("load.json");
    let out = common::cli_cmd()
        .args(["load", &url, "-c", "2", "-d", "1s", "--msg-size", "64"])
        .args(["--json-lines", "-", "--json"])
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("latency: mean "), "{stderr}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert!(!lines.is_empty());
    assert!(lines
        .iter()
        .all(|l| l["target"] == url.as_str() && l["clients"] == 2));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let sum: u64 = lines.iter().filter_map(|l| l["requests"].as_u64()).sum();
    assert_eq!(Some(sum), report["requests"].as_u64());
}

#[test]
fn metrics_listen_warns_on_a_reachable_address_and_refuses_a_bad_one() {
    let server = stairbench::serve::msgr::spawn_msgr(Default::default()).unwrap();
    let url = format!("msgr://{}", server.addr());
    let out = common::cli(&[
        "load",
        &url,
        "-d",
        "200ms",
        "-q",
        "--metrics-listen",
        "0.0.0.0:0",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("is reachable from other hosts and has no authentication"),
        "{stderr}"
    );
    let out = common::cli(&["load", &url, "-d", "200ms", "--metrics-listen", "nowhere"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected PORT or HOST:PORT"), "{stderr}");
}

#[test]
fn completions_for_three_shells_and_the_man_page() {
    for shell in ["bash", "zsh", "fish"] {
        let out = common::cli(&["completions", shell]);
        common::assert_success(&out);
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains("stairbench") && script.contains("metrics-listen"),
            "{shell}"
        );
        match common::find_program(shell) {
            Some(program) => {
                let tmp = tempfile::NamedTempFile::new().unwrap();
                std::fs::write(tmp.path(), &script).unwrap();
                let check = std::process::Command::new(program)
                    .arg("-n")
                    .arg(tmp.path())
                    .output()
                    .unwrap();
                assert!(
                    check.status.success(),
                    "{shell}: {}",
                    String::from_utf8_lossy(&check.stderr)
                );
            }
            None if shell == "bash" => common::skip_or_fail(common::not_installed("bash")),
            None => {} // zsh and fish are optional: their scripts are checked for content only.
        }
    }
    let bad = common::cli(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));

    let man = common::cli(&["man"]);
    common::assert_success(&man);
    let page = String::from_utf8(man.stdout).unwrap();
    assert!(page.contains(".TH stairbench 1"), "{page}");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    let args = [
        OsString::from("man"),
        "--dir".into(),
        dir.clone().into_os_string(),
    ];
    let out = common::cli(&args);
    common::assert_success(&out);
    for page in [
        "stairbench.1",
        "stairbench-run.1",
        "stairbench-load.1",
        "stairbench-compare.1",
    ] {
        let text = std::fs::read_to_string(dir.join(page)).unwrap();
        assert!(text.contains(".TH"), "{page}");
    }
    let run_page = std::fs::read_to_string(dir.join("stairbench-run.1")).unwrap();
    assert!(run_page.contains("junit"), "{run_page}");
}

#[test]
fn version_names_the_git_revision_when_built_from_git() {
    let out = common::cli(&["--version"]);
    common::assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    let re = regex::Regex::new(r"^stairbench \d+\.\d+\.\d+( \([0-9a-f]{7,40}\))?\n$").unwrap();
    assert!(re.is_match(&text), "{text:?}");
    let in_git = Path::new(env!("CARGO_MANIFEST_DIR")).join(".git").exists()
        && common::find_program("git").is_some();
    assert_eq!(text.contains('('), in_git, "{text:?}");
}

#[test]
fn ci_and_pipes_get_plain_lines_and_quiet_gets_none() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("spec.toml");
    std::fs::write(
        &spec,
        SPEC.replace("duration = \"1s\"", "duration = \"500ms\""),
    )
    .unwrap();
    let run = |extra: &[&str], name: &str| {
        common::cli_cmd()
            .arg("run")
            .arg(&spec)
            .arg("--out")
            .arg(tmp.path().join(name))
            .args(extra)
            .env("CI", "true")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--clients", "1"], "plain");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        regex::Regex::new(
            r"\[step 1/1 \(repetition 1/1\), ETA \d+s\] reactor shared c=1: \d+ requests/s"
        )
        .unwrap()
        .is_match(&stderr),
        "{stderr}"
    );
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\r'),
        "{stderr:?}"
    );
    let out = run(&["--clients", "1", "-q"], "quiet");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("[step 1/1"), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("run directory:"));
    let out = run(&["--clients", "1", "-v"], "verbose");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ops/s") && stderr.contains("in flight"),
        "{stderr}"
    );
    let both = run(&["-q", "-v"], "both");
    assert_eq!(both.status.code(), Some(2));
}

/// The status line of what `s` is answered (after `request`, if any), within 5 s.
fn status_of(s: &mut TcpStream, request: &[u8]) -> String {
    if !request.is_empty() {
        s.write_all(request).unwrap();
    }
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut text = Vec::new();
    let _ = s.read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text);
    text.lines().next().unwrap_or("").to_string()
}

/// Whether `s` is still open with nothing to read (the endpoint is still waiting on it).
fn still_waiting(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut byte = [0u8; 1];
    let open = matches!(s.peek(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    open
}

#[test]
fn metrics_listen_answers_scrapers_at_once_and_bounds_each_request() {
    let server = stairbench::serve::msgr::spawn_msgr(Default::default()).unwrap();
    let url = format!("msgr://{}", server.addr());
    let mut load = common::cli_cmd()
        .args(["load", &url, "-c", "1", "-d", "30s", "-q"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(load.stderr.take().unwrap());
    let mut line = String::new();
    let addr = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no metrics line");
        if let Some(rest) = line.trim().strip_prefix("metrics: http://") {
            break rest.trim_end_matches("/metrics").to_string();
        }
    };
    std::thread::spawn(move || std::io::copy(&mut err, &mut std::io::sink()));
    // Two stalled scrapers: half a request line, and nothing at all.
    let mut half = TcpStream::connect(&addr).unwrap();
    half.write_all(b"GET /met").unwrap();
    let mut silent = TcpStream::connect(&addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // A third is answered at once, while both still wait.
    let began = Instant::now();
    let body = scrape(&addr).expect("an answer");
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(
        began.elapsed() < Duration::from_millis(1500),
        "{:?}",
        began.elapsed()
    );
    assert!(
        still_waiting(&half) && still_waiting(&silent),
        "a stalled scraper was dropped first"
    );
    // A request line of 9 KiB is refused without reading on.
    let mut long = b"GET /".to_vec();
    long.resize(9 * 1024, b'a');
    long.extend_from_slice(b" HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut s = TcpStream::connect(&addr).unwrap();
    let status = status_of(&mut s, &long);
    assert!(status.starts_with("HTTP/1.1 431"), "{status:?}");
    // The stalled ones time out with an answer saying so.
    for s in [&mut half, &mut silent] {
        let status = status_of(s, b"");
        assert!(status.starts_with("HTTP/1.1 408"), "{status:?}");
    }
    // At most 16 at once: the 17th is told so, and served again once they have gone. (A
    // second for the threads that answered above to end: they count until then.)
    std::thread::sleep(Duration::from_secs(1));
    let held: Vec<TcpStream> = (0..16)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(held.iter().all(still_waiting), "one of 16 was answered");
    let mut extra = TcpStream::connect(&addr).unwrap();
    let status = status_of(&mut extra, b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(status.starts_with("HTTP/1.1 503"), "{status:?}");
    drop(held);
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(&addr).unwrap();
        let status = status_of(&mut s, b"GET /metrics HTTP/1.1\r\n\r\n");
        if status.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < until, "{status:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(load.id() as i32, libc::SIGINT) };
    let _ = load.wait();
}
