//! `serve kvd` with two ranks on loopback (two processes), clients in this process and in
//! `stairbench load kvd://` processes; a killed peer; bad input.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use stairbench::wire::kvd::{attach, decode, encode_hello, encode_response, Frame, ST_PEER_DOWN};
use stairbench::wire::shmkv::msg::{OP_GET, OP_SET, ST_NOT_FOUND, ST_OK};
use stairbench::wire::shmkv::per_worker::Client;
use stairbench::wire::shmkv::region_path;

const T: Duration = Duration::from_secs(5);

fn unique(tag: &str) -> String {
    common::unique_name(&format!("kvd-{tag}"))
}

/// A `stairbench serve kvd` process, killed when dropped.
struct Rank {
    child: Child,
    name: String,
}

impl Rank {
    fn spawn(rank: u32, ranks: &str, name: &str, extra: &[&str]) -> Rank {
        let child = common::cli_cmd()
            .args([
                "serve",
                "kvd",
                "--rank",
                &rank.to_string(),
                "--ranks",
                ranks,
            ])
            .args(["--name", name])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start serve kvd");
        Rank {
            child,
            name: name.to_string(),
        }
    }

    /// A slot on this rank's daemon, once its region is up (a stale one may be there until
    /// the daemon replaces it).
    fn client(&self) -> Client {
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            match attach(&self.name, Duration::from_secs(15)) {
                Ok(a) => return Client::attach(a.region).expect("a slot"),
                Err(e) if Instant::now() > until => panic!("rank never ready: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// SIGTERM, the exit status within 10 s (no hang), and stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.finish()
    }

    /// The exit status within 15 s (no hang) and stderr.
    fn finish(&mut self) -> (std::process::ExitStatus, String) {
        let until = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < until, "serve kvd did not exit");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        (status, err)
    }
}

impl Drop for Rank {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(p) = region_path(&self.name) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn two_addrs() -> String {
    format!(
        "127.0.0.1:{},127.0.0.1:{}",
        common::free_port(),
        common::free_port()
    )
}

fn key(k: u64) -> Vec<u8> {
    format!("key:{k:04}").into_bytes()
}

/// (status, value) of one request.
fn call(c: &mut Client, op: u32, k: u64, value: &[u8]) -> (u32, Vec<u8>) {
    let r = c.call(op, &key(k), value, T).expect("an answer");
    (r.status, r.value[..r.value_len as usize].to_vec())
}

#[test]
fn a_set_on_one_rank_is_seen_by_a_get_on_the_other() {
    let ranks = two_addrs();
    let (n0, n1) = (unique("see0"), unique("see1"));
    let metrics = tempfile::tempdir().unwrap();
    let m0 = metrics.path().join("r0.json");
    let pings = ["--ping-pong", "300"];
    let r0 = Rank::spawn(
        0,
        &ranks,
        &n0,
        &[&["--metrics", m0.to_str().unwrap()][..], &pings].concat(),
    );
    let r1 = Rank::spawn(1, &ranks, &n1, &["--no-batch"]);
    // A key never SET is a miss, on either rank, local or remote.
    let mut probe = r0.client();
    assert_eq!(call(&mut probe, OP_GET, 2046, b"").0, ST_NOT_FOUND);
    assert_eq!(call(&mut probe, OP_GET, 2047, b"").0, ST_NOT_FOUND);
    // Stress: writers on both ranks, each key written by one writer only, each value read
    // back through the other rank's daemon right after its SET was answered.
    let writers = 4u64;
    let until = Instant::now() + Duration::from_millis(1500);
    let threads: Vec<_> = (0..writers)
        .map(|w| {
            let (mut mine, mut other) = if w % 2 == 0 {
                (r0.client(), r1.client())
            } else {
                (r1.client(), r0.client())
            };
            std::thread::spawn(move || {
                let mut checked = 0u64;
                let mut n = 0u64;
                while Instant::now() < until {
                    let k = (n * writers + w) % 2000;
                    let value = format!("w{w}-n{n}").into_bytes();
                    assert_eq!(call(&mut mine, OP_SET, k, &value).0, ST_OK);
                    let (st, got) = call(&mut other, OP_GET, k, b"");
                    assert_eq!((st, &got), (ST_OK, &value), "key {k}");
                    checked += 1;
                    n += 1;
                }
                checked
            })
        })
        .collect();
    let checked: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(checked > 100, "only {checked} SET/GET pairs checked");
    // The load generator against rank 0, its JSON as for every protocol.
    let out = common::cli(&[
        "load",
        &format!("kvd://{n0}"),
        "--connections",
        "2",
        "--duration",
        "1s",
        "--warmup",
        "0s",
        "--read-ratio",
        "0.5",
        "--json",
        "-",
    ]);
    common::assert_success(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(report["requests"].as_u64().unwrap() > 50, "{report}");
    assert_eq!(report["errors"], serde_json::json!({}), "{report}");
    // The daemon's metrics: remote requests timed, in each phase.
    std::thread::sleep(Duration::from_millis(400));
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&m0).unwrap()).unwrap();
    assert!(m["counters"]["remote_done"].as_u64().unwrap() > 50, "{m}");
    for h in ["rtt", "call_to_flush", "flush_to_cb", "incoming_turnaround"] {
        let hist =
            stairbench::record::hist_b64::decode(m["histograms"][h].as_str().unwrap()).unwrap();
        assert!(hist.len() > 50, "{h}: {}", hist.len());
    }
    let rtt =
        stairbench::record::hist_b64::decode(m["histograms"]["rtt"].as_str().unwrap()).unwrap();
    let f2c =
        stairbench::record::hist_b64::decode(m["histograms"]["flush_to_cb"].as_str().unwrap())
            .unwrap();
    assert!(f2c.value_at_quantile(0.5) <= rtt.value_at_quantile(0.5));
    // The ping-pong at start: rank 0 pinged rank 1 exactly 300 times (the last ping, which
    // ends it, is not timed).
    let ping = stairbench::record::hist_b64::decode(m["histograms"]["ping_pong"].as_str().unwrap())
        .unwrap();
    assert_eq!(ping.len(), 300);
    assert!(ping.min() > 0);
    let (s0, e0) = r0.stop();
    let (s1, _) = r1.stop();
    assert!(s0.success() && s1.success(), "{e0}");
    assert!(e0.contains("remote"), "{e0}");
}

#[test]
fn a_killed_peer_fails_its_requests_and_local_keys_keep_working() {
    let ranks = two_addrs();
    let (n0, n1) = (unique("kill0"), unique("kill1"));
    let mut r0 = Rank::spawn(0, &ranks, &n0, &[]);
    let r1 = Rank::spawn(1, &ranks, &n1, &[]);
    let mut c = r0.client();
    assert_eq!(call(&mut c, OP_SET, 1, b"remote").0, ST_OK);
    // A load running while rank 1 dies: it ends on time, with peer_down errors.
    let load = common::cli_cmd()
        .args(["load", &format!("kvd://{n0}"), "--connections", "2"])
        .args(["--duration", "2s", "--warmup", "0s", "--json", "-"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(700));
    drop(r1);
    let began = Instant::now();
    let out = load.wait_with_output().unwrap();
    assert!(began.elapsed() < Duration::from_secs(10), "the load hung");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["errors"]["peer_down"].as_u64().unwrap_or(0) > 0,
        "{report}"
    );
    assert!(report["requests"].as_u64().unwrap() > 0, "{report}");
    // Remote keys fail at once, local ones are served.
    assert_eq!(call(&mut c, OP_GET, 1, b"").0, ST_PEER_DOWN);
    assert_eq!(call(&mut c, OP_SET, 2, b"local").0, ST_OK);
    assert_eq!(call(&mut c, OP_GET, 2, b""), (ST_OK, b"local".to_vec()));
    drop(c);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(r0.child.id() as i32, libc::SIGTERM) };
    let (status, err) = r0.finish();
    assert!(status.success(), "{err}");
    assert!(err.contains("rank 1 (127.0.0.1:"), "{err}");
    assert!(err.contains("failed"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn rank_lists_that_differ_are_refused_on_both_sides() {
    let a = two_addrs();
    let b = format!("{a},127.0.0.1:{}", common::free_port());
    let mut r0 = Rank::spawn(0, &a, &unique("mis0"), &["--peer-wait-ms", "5000"]);
    let mut r1 = Rank::spawn(1, &b, &unique("mis1"), &["--peer-wait-ms", "5000"]);
    let (s0, e0) = r0.finish();
    let (s1, e1) = r1.finish();
    for (s, e) in [(s0, e0), (s1, e1)] {
        assert_eq!(s.code(), Some(2), "{e}");
        assert!(e.contains("rank list mismatch"), "{e}");
        assert!(!e.contains("panicked"), "{e}");
    }
}

#[test]
fn a_peer_down_at_start_is_named() {
    let ranks = two_addrs();
    let peer = ranks.split(',').next().unwrap().to_string();
    let mut r1 = Rank::spawn(1, &ranks, &unique("down1"), &["--peer-wait-ms", "500"]);
    let (s, e) = r1.finish();
    assert_eq!(s.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("could not reach rank 0 at {peer} within 0.5 s")),
        "{e}"
    );
    let mut r0 = Rank::spawn(0, &ranks, &unique("down0"), &["--peer-wait-ms", "500"]);
    let (s, e) = r0.finish();
    assert_eq!(s.code(), Some(1), "{e}");
    assert!(e.contains("rank 1 (127.0.0.1:"), "{e}");
    assert!(e.contains("did not connect within 0.5 s"), "{e}");
}

#[test]
fn a_malformed_frame_drops_the_peer_and_nothing_else() {
    let ranks = two_addrs();
    let n0 = unique("bad0");
    let r0 = Rank::spawn(0, &ranks, &n0, &[]);
    // This test plays rank 1: a proper hello, then a frame of an unknown kind.
    let addr0 = ranks.split(',').next().unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let mut s = loop {
        match TcpStream::connect(addr0) {
            Ok(s) => break s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("rank 0 never listened: {e}"),
        }
    };
    let mut hello = Vec::new();
    encode_hello(&mut hello, 1, &ranks);
    s.write_all(&hello).unwrap();
    let mut theirs = vec![0u8; hello.len()];
    s.read_exact(&mut theirs).unwrap();
    // Rank 0's ping-pong at start: its last ping (36 bytes), echoed, so the bad frame below
    // reaches its poll loop.
    let mut ping = [0u8; 36];
    s.read_exact(&mut ping).unwrap();
    let Ok(Some((Frame::Request { id, op, value, .. }, 36))) = decode(&ping) else {
        panic!("not a ping: {ping:?}");
    };
    let mut echo = Vec::new();
    encode_response(&mut echo, id, op, value);
    s.write_all(&echo).unwrap();
    let mut c = r0.client();
    assert_eq!(call(&mut c, OP_SET, 6, b"y").0, ST_OK);
    s.write_all(&[8, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]).unwrap();
    // The daemon drops the connection and keeps serving.
    let mut rest = Vec::new();
    s.set_read_timeout(Some(T)).unwrap();
    let _ = s.read_to_end(&mut rest);
    assert_eq!(call(&mut c, OP_SET, 4, b"x").0, ST_OK);
    assert_eq!(call(&mut c, OP_GET, 5, b"").0, ST_PEER_DOWN);
    drop(c);
    let (status, err) = r0.stop();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("rank 1 (127.0.0.1:") && err.contains("malformed frame: unknown frame kind 9"),
        "{err}"
    );
}

#[test]
fn foreign_and_stale_regions_are_refused() {
    // Foreign: not a stairbench region at all.
    let name = unique("foreign");
    let path = region_path(&name).unwrap();
    std::fs::write(&path, vec![7u8; 8192]).unwrap();
    let out = common::cli(&["load", &format!("kvd://{name}"), "--duration", "1s"]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is not a usable stairbench shmkv region"),
        "{err}"
    );
    // Stale: a daemon killed without cleaning up.
    let name = unique("stale");
    let mut r = Rank::spawn(0, "127.0.0.1:0", &name, &[]);
    drop(r.client());
    r.child.kill().unwrap();
    let _ = r.child.wait();
    let out = common::cli(&["load", &format!("kvd://{name}"), "--duration", "1s"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("is stale"), "{err}");
    // A new daemon of that name replaces the stale region and serves.
    let r = Rank::spawn(0, "127.0.0.1:0", &name, &[]);
    let mut c = r.client();
    assert_eq!(call(&mut c, OP_SET, 3, b"v").0, ST_OK);
    assert_eq!(call(&mut c, OP_GET, 3, b""), (ST_OK, b"v".to_vec()));
}

#[test]
fn the_two_rank_example_runs_small_and_reports_seed_004s_tables() {
    let _turn = common::kvd_staircase_turn();
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kvd-two-ranks.toml"),
    )
    .unwrap();
    let (p0, p1) = (common::free_port(), common::free_port());
    let name = unique("example");
    let small = example
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace("warmup = \"1s\"", "warmup = \"200ms\"")
        .replace("clients = [2, 4, 8, 16, 32]", "clients = [2, 4]")
        .replace(
            "127.0.0.1:17301,127.0.0.1:17302",
            &format!("127.0.0.1:{p0},127.0.0.1:{p1}"),
        )
        .replace("sb-kvd", &name);
    assert!(small.contains(&name) && small.contains("clients = [2, 4]"));
    let spec = dir.path().join("kvd.toml");
    std::fs::write(&spec, small).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 4);
    for s in &steps {
        assert_eq!(s["status"], "ok", "{s}");
        // Both ranks' daemons: rank 0 is the target, rank 1 the process it started.
        for (label, rank) in [("kvd", 0), ("kvd.r1", 1)] {
            let m = &s["target_metrics"][label];
            assert!(m["histograms"]["rtt"]["count"].as_u64().unwrap() > 0, "{m}");
            assert_eq!(m["gauges"]["ranks"], 2, "{m}");
            assert_eq!(m["gauges"]["rank"], rank, "{m}");
        }
    }
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    for p in ["shared", "separated"] {
        for rank in ["rank 0", "rank 1"] {
            for t in ["RTT scaling", "Little's law", "Phases"] {
                let title = format!("### {t} ({p}, {rank})");
                assert!(report.contains(&title), "{title}: {report}");
            }
        }
    }
    assert!(
        report.contains("RTT histogram at 2 clients/rank (shared, rank 1)"),
        "{report}"
    );
    assert!(report.contains("| 1 | "), "clients/rank 1 row: {report}");
}

/// The pid of the process whose command line holds `word`, if one runs.
fn pid_with_arg(word: &str) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmd = std::fs::read(e.path().join("cmdline")).ok()?;
        cmd.split(|&b| b == 0)
            .any(|a| a == word.as_bytes())
            .then_some(pid)
    })
}

#[test]
fn a_spawned_rank_killed_mid_step_fails_the_step_with_the_reason() {
    let _turn = common::kvd_staircase_turn();
    let dir = tempfile::tempdir().unwrap();
    let (p0, p1) = (common::free_port(), common::free_port());
    let name = unique("midrun");
    let spec = dir.path().join("kvd.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "kvd-killed"
duration = "4s"
warmup = "0s"
clients = [2]
depth = 1

[[targets]]
name = "kvd"
builtin = "kvd --spawn-peers --ranks 127.0.0.1:{p0},127.0.0.1:{p1} --name {name}"
url = "kvd://{name},{name}-r1"
ready = {{ log = "^kvd: rank 0" }}

[client]
keys = 2048
"#
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let rank1 = format!("{name}-r1");
    let killer = std::thread::spawn(move || {
        // Rank 1 once the step's load is under way.
        let until = Instant::now() + Duration::from_secs(30);
        while Instant::now() < until {
            if let Some(pid) = pid_with_arg(&rank1) {
                if region_path(&rank1).is_ok_and(|p| std::path::Path::new(&p).exists()) {
                    std::thread::sleep(Duration::from_millis(1500));
                    // SAFETY: a process this test's run started.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    });
    let began = Instant::now();
    let out = common::run_spec(&spec, &out_dir);
    assert!(killer.join().unwrap(), "rank 1 never ran");
    assert!(began.elapsed() < Duration::from_secs(40), "the run hung");
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 1, "{}", String::from_utf8_lossy(&out.stderr));
    let s = &steps[0];
    assert_eq!(s["status"], "failed", "{s}");
    let reason = s["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("rank 1 (pid"), "{reason}");
    assert!(reason.contains("signal: 9"), "{reason}");
    assert!(
        reason.contains(&format!("rank 1 (127.0.0.1:{p1}) failed")),
        "{reason}"
    );
    // Nothing is left in /dev/shm: rank 0 removed its own region, and the one rank 1 could
    // not remove (SIGKILL) was removed by rank 0, which started it.
    for n in [name.as_str(), &format!("{name}-r1")] {
        let path = region_path(n).unwrap();
        let left = std::path::Path::new(&path).exists();
        let _ = std::fs::remove_file(&path);
        assert!(!left, "{path} was left behind");
    }
}

/// Connects to `addr`, retrying until it listens (10 s).
fn connect_when_listening(addr: &str) -> TcpStream {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("{addr} never listened: {e}"),
        }
    }
}

/// Whether the daemon closed `s` within `limit` (reading what it sent, if anything).
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

#[test]
fn strangers_at_the_peer_port_during_start_up_are_closed_and_logged_once() {
    let ranks = two_addrs();
    let addr0 = ranks.split(',').next().unwrap().to_string();
    let (n0, n1) = (unique("probe0"), unique("probe1"));
    let wait = ["--peer-wait-ms", "20000"];
    let r0 = Rank::spawn(0, &ranks, &n0, &wait);
    // A port probe: connect and close (this also waits for the listener).
    drop(connect_when_listening(&addr0));
    // Garbage: an HTTP health check, refused at its first byte.
    let mut http = TcpStream::connect(&addr0).unwrap();
    http.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert!(closed_within(&mut http, T), "the HTTP probe was not closed");
    // A right hello from a rank that should not connect here (rank 0 itself).
    let mut me_too = TcpStream::connect(&addr0).unwrap();
    let mut hello = Vec::new();
    encode_hello(&mut hello, 0, &ranks);
    me_too.write_all(&hello).unwrap();
    assert!(
        closed_within(&mut me_too, T),
        "the rank-0 hello was not closed"
    );
    // Silence: closed after a second.
    let mut silent = TcpStream::connect(&addr0).unwrap();
    let began = Instant::now();
    assert!(
        closed_within(&mut silent, T),
        "the silent probe was not closed"
    );
    assert!(
        began.elapsed() >= Duration::from_millis(900),
        "closed before its second"
    );
    // Silence held open while the real rank 1 comes: it delays nobody, and is closed once
    // every peer is there.
    let mut held = TcpStream::connect(&addr0).unwrap();
    let r1 = Rank::spawn(1, &ranks, &n1, &wait);
    let (mut c0, mut c1) = (r0.client(), r1.client());
    assert_eq!(call(&mut c0, OP_SET, 1, b"via-rank-0").0, ST_OK);
    assert_eq!(
        call(&mut c1, OP_GET, 1, b""),
        (ST_OK, b"via-rank-0".to_vec())
    );
    assert_eq!(call(&mut c1, OP_SET, 2, b"via-rank-1").0, ST_OK);
    assert_eq!(
        call(&mut c0, OP_GET, 2, b""),
        (ST_OK, b"via-rank-1".to_vec())
    );
    assert!(closed_within(&mut held, T), "the held probe was not closed");
    drop((c0, c1));
    let (s0, e0) = r0.stop();
    let (s1, e1) = r1.stop();
    assert!(s0.success() && s1.success(), "{e0}\n{e1}");
    let refused: Vec<&str> = e0
        .lines()
        .filter(|l| l.contains("closed a connection from 127.0.0.1:"))
        .collect();
    assert_eq!(refused.len(), 5, "{e0}");
    let one = |what: &str| {
        let n = refused.iter().filter(|l| l.contains(what)).count();
        assert_eq!(n, 1, "{what}: {e0}");
    };
    one("it closed the connection before a whole hello; it sent nothing");
    one("not a kvd hello");
    one("it sent \"GET /health HTTP/1.1\\r\\n");
    one("it says it is rank 0, which should not connect here");
    one("it sent no whole hello within 1 s; it sent nothing");
    one("every peer had connected before its hello came; it sent nothing");
    assert!(!e0.contains("panicked") && !e0.contains("error"), "{e0}");
}

#[test]
fn sigterm_while_connecting_removes_the_region_at_once() {
    let ranks = two_addrs();
    // Rank 0 waits for rank 1 to connect; rank 1 (on its own) dials rank 0, which is absent.
    for rank in [0, 1] {
        let name = unique(&format!("term{rank}"));
        let path = region_path(&name).unwrap();
        let mut r = Rank::spawn(rank, &ranks, &name, &["--peer-wait-ms", "60000"]);
        let until = Instant::now() + Duration::from_secs(10);
        while !std::path::Path::new(&path).exists() {
            assert!(Instant::now() < until, "rank {rank}: no region {path}");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: signalling our own child.
        unsafe { libc::kill(r.child.id() as i32, libc::SIGTERM) };
        let began = Instant::now();
        let status = loop {
            if let Some(s) = r.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                began.elapsed() < Duration::from_secs(3),
                "rank {rank} went on waiting for its peers after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let (_, err) = r.finish();
        assert!(status.success(), "rank {rank}: {err}");
        assert!(
            err.contains("stopped while connecting to its peers"),
            "{err}"
        );
        assert!(
            !std::path::Path::new(&path).exists(),
            "rank {rank} left {path}"
        );
    }
}

#[test]
fn a_start_up_error_says_its_reason_once() {
    // Rank 0's port is taken: the bind fails with the OS's reason, said once.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let ranks = format!(
        "{},127.0.0.1:{}",
        taken.local_addr().unwrap(),
        common::free_port()
    );
    let mut r0 = Rank::spawn(0, &ranks, &unique("taken"), &["--peer-wait-ms", "500"]);
    let (status, err) = r0.finish();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("cannot listen on"), "{err}");
    assert_eq!(err.matches("Address already in use").count(), 1, "{err}");
}
