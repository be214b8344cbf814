//! The shared-memory hash-table server, both architectures: real server processes, clients
//! in this process and in `stairbench load` processes.

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stairbench::serve::shmkv::{spawn_shmkv, ShmkvArgs};
use stairbench::wire::shmkv::region::{Header, MAGIC};
use stairbench::wire::shmkv::{region_path, Arch, ShmkvClient};

const ARCHS: [&str; 2] = ["single", "per-worker"];

fn unique(tag: &str) -> String {
    common::unique_name(&format!("shmkv-{tag}"))
}

/// A `stairbench serve shmkv` process, stopped with SIGTERM when dropped.
struct Server {
    child: Child,
    name: String,
}

impl Server {
    fn start(arch: &str, workers: usize, tag: &str) -> Server {
        Server::start_named(arch, workers, &unique(tag))
    }

    /// Starts a server and waits until a client can attach (retrying any error: a stale
    /// region may be there until the server replaces it).
    fn start_named(arch: &str, workers: usize, name: &str) -> Server {
        let child = common::cli_cmd()
            .args(["serve", "shmkv", "--arch", arch, "--name", name])
            .args(["--workers", &workers.to_string()])
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the server");
        let server = Server {
            child,
            name: name.to_string(),
        };
        let until = Instant::now() + Duration::from_secs(10);
        while let Err(e) = ShmkvClient::attach(name) {
            assert!(
                Instant::now() < until,
                "server {arch} never became ready: {e}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    fn client(&self) -> ShmkvClient {
        let mut c = ShmkvClient::attach(&self.name).expect("attach");
        c.set_timeout(Duration::from_secs(5));
        c
    }

    /// SIGTERM, then the exit status and stderr.
    fn stop(mut self) -> (std::process::ExitStatus, String) {
        signal(&self.child, libc::SIGTERM);
        let status = wait_for(&mut self.child, Duration::from_secs(10));
        let mut err = String::new();
        let _ = self.child.stderr.take().unwrap().read_to_string(&mut err);
        (status, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Ok(p) = region_path(&self.name) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}

fn wait_for(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let until = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < until, "process did not exit in {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_stops_the_server_and_removes_its_private_region() {
    for arch in ARCHS {
        let server = Server::start(arch, 1, &format!("term-{arch}"));
        let path = region_path(&server.name).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{arch}: region mode {mode:o}");
        let (status, err) = server.stop();
        assert!(status.success(), "{arch}: exit {status:?}, stderr {err}");
        assert!(!std::path::Path::new(&path).exists(), "{arch}: {path} left");
    }
}

/// Each thread writes keys of its own and must read back its last SET; one writer
/// publishes an increasing counter and readers must never see one older than published.
fn stress(name: &str, threads: usize, rounds: usize) {
    let published = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (name, published) = (name.to_string(), published.clone());
            std::thread::spawn(move || {
                let mut c = ShmkvClient::attach(&name).expect("attach");
                c.set_timeout(Duration::from_secs(5));
                let mut last = vec![None; 8];
                let mut out = Vec::new();
                for round in 0..rounds {
                    let k = round % last.len();
                    let key = format!("own-{t}-{k}");
                    let value = format!("{t}:{k}:{round}:{}", "v".repeat(round % 50));
                    c.set(key.as_bytes(), value.as_bytes()).unwrap();
                    last[k] = Some(value);
                    let j = (round * 7 + 3) % last.len();
                    let found = c.get(format!("own-{t}-{j}").as_bytes(), &mut out).unwrap();
                    match &last[j] {
                        Some(v) => assert_eq!(out, v.as_bytes(), "thread {t} key {j}"),
                        None => assert!(!found, "thread {t} key {j} set by nobody"),
                    }
                    if t == 0 {
                        c.set(b"shared", round.to_string().as_bytes()).unwrap();
                        published.store(round as u64, Ordering::Release);
                    } else {
                        let floor = published.load(Ordering::Acquire);
                        if c.get(b"shared", &mut out).unwrap() {
                            let seen: u64 = String::from_utf8_lossy(&out).parse().unwrap();
                            assert!(seen >= floor, "GET saw {seen} after {floor} was set");
                        } else {
                            assert_eq!(floor, 0, "published SET not visible");
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a checker thread failed");
    }
}

#[test]
fn every_set_is_seen_by_a_later_get_under_concurrent_load() {
    for arch in ARCHS {
        // More clients than workers, so per-worker cells are shared by several clients.
        let server = Server::start(arch, 2, &format!("stress-{arch}"));
        stress(&server.name, 5, 400);
        let (status, _) = server.stop();
        assert!(status.success());
    }
}

#[test]
fn in_process_server_serves_many_clients_per_worker_and_cleans_up() {
    for arch in [Arch::Single, Arch::PerWorker] {
        let name = unique(&format!("inproc-{}", arch.name()));
        let opts = ShmkvArgs {
            arch,
            workers: 1,
            name: name.clone(),
            buckets: 8,
            cpuset: None,
            port: None,
        };
        let server = spawn_shmkv(&opts).unwrap();
        let path = server.path().to_string();
        let mut c = ShmkvClient::attach(&name).unwrap();
        assert_eq!(c.arch(), arch);
        let mut out = Vec::new();
        assert!(!c.get(b"missing", &mut out).unwrap());
        stress(&name, 3, 200);
        assert!(c.get(b"shared", &mut out).unwrap());
        assert_eq!(out, b"199");
        drop(server);
        assert!(!std::path::Path::new(&path).exists());
        let err = c.get(b"shared", &mut out).unwrap_err().to_string();
        assert!(err.contains("stopped"), "{err}");
    }
}

#[test]
fn load_process_reports_sub_microsecond_latency_fields() {
    for arch in ARCHS {
        let server = Server::start(arch, 1, &format!("load-{arch}"));
        let url = format!("shm://{}", server.name);
        let out = common::cli_cmd()
            .args(["load", &url, "-c", "2", "-d", "1s", "--keys", "100"])
            .args([
                "--read-ratio",
                "0.5",
                "--value-size",
                "32",
                "-q",
                "--json",
                "-",
            ])
            .output()
            .unwrap();
        common::assert_success(&out);
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let requests = json["requests"].as_u64().unwrap();
        assert!(requests > 100, "{arch}: {requests} requests");
        assert!(json["sent"].as_u64().unwrap() >= requests);
        assert_eq!(json["errors"], serde_json::json!({}), "{arch}");
        assert_eq!(json["connections"], 2);
        let p50 = json["latency_us"]["p50"].as_f64().unwrap();
        assert!(
            p50 > 0.0 && p50.fract() != 0.0,
            "{arch}: p50 {p50} not a fine float"
        );
        assert_eq!(
            json["client_cpu"]["per_core_busy"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert!(json["client_saturated"].is_boolean());
    }
}

#[test]
fn a_killed_client_process_does_not_wedge_the_server() {
    for arch in ARCHS {
        let server = Server::start(arch, 1, &format!("kill-{arch}"));
        let url = format!("shm://{}", server.name);
        for round in 0..3 {
            let mut load = common::cli_cmd()
                .args([
                    "load",
                    &url,
                    "-c",
                    "3",
                    "-d",
                    "30s",
                    "-q",
                    "--read-ratio",
                    "0.5",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(300 + 100 * round));
            signal(&load, libc::SIGKILL);
            load.wait().unwrap();
        }
        let mut c = server.client();
        c.set_timeout(Duration::from_secs(3));
        let mut out = Vec::new();
        for i in 0..200u32 {
            let key = format!("after-{}", i % 10);
            c.set(key.as_bytes(), &i.to_le_bytes())
                .unwrap_or_else(|e| panic!("{arch}: SET {i} after the kills: {e}"));
            assert!(c.get(key.as_bytes(), &mut out).unwrap());
            assert_eq!(out, i.to_le_bytes());
        }
        let (status, _) = server.stop();
        assert!(status.success(), "{arch}");
    }
}

fn write_region(name: &str, bytes: &[u8]) -> String {
    let path = region_path(name).unwrap();
    std::fs::write(&path, bytes).unwrap();
    path
}

fn serve_stderr(name: &str) -> (bool, String) {
    let out = common::cli_cmd()
        .args(["serve", "shmkv", "--name", name])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn foreign_and_malformed_regions_are_refused_with_the_reason() {
    let attach_err = |name: &str| match ShmkvClient::attach(name) {
        Ok(_) => panic!("attached to a bad region"),
        Err(e) => e.to_string(),
    };
    let name = unique("foreign");
    let path = write_region(&name, &[0xab; 8192]);
    let err = attach_err(&name);
    assert!(err.contains("not a usable stairbench shmkv region") && err.contains("bad magic"));
    let (ok, err) = serve_stderr(&name);
    assert!(!ok && err.contains("left alone"), "{err}");
    assert!(
        std::path::Path::new(&path).exists(),
        "a foreign region was removed"
    );

    write_region(&name, b"tiny");
    assert!(attach_err(&name).contains("smaller than a header"));

    let mut header = vec![0u8; 8192];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    header[8..12].copy_from_slice(&99u32.to_le_bytes());
    write_region(&name, &header);
    assert!(attach_err(&name).contains("layout version 99"));
    std::fs::remove_file(&path).unwrap();

    let missing = attach_err(&unique("nobody"));
    assert!(
        missing.contains("is `stairbench serve shmkv --name"),
        "{missing}"
    );
}

#[test]
fn a_stale_region_is_replaced_and_a_live_one_is_not() {
    let name = unique("stale");
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id() as i32;
    dead.wait().unwrap();
    let mut header = vec![0u8; 8192];
    header[..8].copy_from_slice(&MAGIC.to_le_bytes());
    let at = std::mem::offset_of!(Header, server_pid);
    header[at..at + 4].copy_from_slice(&dead_pid.to_le_bytes());
    write_region(&name, &header);
    let server = Server::start_named("per-worker", 1, &name);
    let (ok, err) = serve_stderr(&name);
    assert!(!ok && err.contains("in use by a running server"), "{err}");
    let (status, err) = server.stop();
    assert!(status.success());
    assert!(err.contains("replacing stale region"), "{err}");
}

#[test]
fn server_stop_releases_clients_waiting_in_both_designs() {
    for arch in ARCHS {
        let server = Server::start(arch, 1, &format!("release-{arch}"));
        let name = server.name.clone();
        let running = Arc::new(AtomicBool::new(true));
        let r = running.clone();
        let h = std::thread::spawn(move || {
            let mut c = ShmkvClient::attach(&name).unwrap();
            c.set_timeout(Duration::from_secs(30));
            let mut errors = 0;
            while r.load(Ordering::Relaxed) && errors == 0 {
                errors += usize::from(c.set(b"k", b"v").is_err());
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        let started = Instant::now();
        let (status, _) = server.stop();
        assert!(status.success());
        h.join().unwrap();
        running.store(false, Ordering::Relaxed);
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{arch}: client hung"
        );
    }
}

#[test]
fn the_example_spec_names_real_targets_and_valid_server_options() {
    use clap::Parser;
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/shmkv.toml"))
        .unwrap();
    let spec: toml::Table = toml::from_str(&text).unwrap();
    let targets = spec["targets"].as_array().unwrap();
    let mut names = Vec::new();
    for t in targets {
        let builtin = t["builtin"].as_str().unwrap();
        // As a runner starts it: its options plus a cpuset and a port.
        let mut argv = vec!["stairbench", "serve"];
        argv.extend(builtin.split_whitespace());
        argv.extend(["--cpuset", "0", "--port", "4000"]);
        let cli = stairbench::cli::Cli::try_parse_from(&argv);
        assert!(cli.is_ok(), "{builtin}: {}", cli.err().unwrap());
        let name = builtin
            .split("--name ")
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap();
        assert_eq!(t["url"].as_str().unwrap(), format!("shm://{name}"));
        names.push(t["name"].as_str().unwrap().to_string());
    }
    let comparisons = spec["comparisons"].as_array().unwrap();
    assert!(comparisons.len() >= 12);
    for c in comparisons {
        for side in ["a", "b"] {
            let target = c[side].as_str().unwrap().split('@').next().unwrap();
            assert!(names.iter().any(|n| n == target), "{target} is no target");
        }
    }
}
