//! `stairbench load grpc://` against grpcio's server (Debian's python3-grpcio, with a generic
//! handler: examples/grpc_server.py), which counts its calls: the calls sent equal its count
//! at depths 1, 8 and 16; a method that fails counts as `grpc_status` errors with its code and
//! message; and against a raw HTTP/2 server whose replies break gRPC (no trailers, a wrong
//! length prefix, a compressed flag with no encoding, a Trailers-Only error): each an error of
//! its kind, the calls still accounted for, no panic.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;
use crate::hostile_h2::{frame, Conn};

const PYTHON: &str = "/usr/bin/python3";

/// grpcio's server (examples/grpc_server.py) on a free port, asked for its counts on stdin.
pub struct GrpcServer {
    pub port: u16,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl GrpcServer {
    /// Starts it with `workers` threads; `None` (after `skip_or_fail`) without grpcio.
    pub fn start(workers: usize) -> Option<GrpcServer> {
        Self::start_with(workers, &[])
    }

    /// [`GrpcServer::start`] with more arguments (a certificate and key: TLS).
    fn start_with(workers: usize, more: &[&Path]) -> Option<GrpcServer> {
        let has_grpc = Command::new(PYTHON)
            // A name from the package, not the import alone: an emptied package directory (a
            // half-removed install) still imports, as a namespace package.
            .args(["-c", "from grpc import server"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has_grpc {
            common::skip_or_fail(
                "no grpcio for /usr/bin/python3 (Debian: apt-get install python3-grpcio)",
            );
            return None;
        }
        let port = common::free_port();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grpc_server.py");
        let mut child = Command::new(PYTHON)
            .arg(script)
            .args([port.to_string(), workers.to_string()])
            .args(more)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting grpc_server.py");
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("listening"),
            "grpc_server.py said {line:?}"
        );
        Some(GrpcServer {
            port,
            child,
            stdin,
            stdout,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn url(&self, method: &str) -> String {
        format!("grpc://127.0.0.1:{}/bench.Echo/{method}", self.port)
    }

    /// The calls each method has received so far, by the server's own count.
    pub fn counts(&mut self) -> Value {
        writeln!(self.stdin, "count").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn load(url: &str, args: &[&str]) -> Value {
    let (code, _, stderr, doc) = common::load_json(url, args);
    assert!(matches!(code, Some(0 | 3)), "{code:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    doc.unwrap_or_else(|| panic!("no JSON: {stderr}"))
}

fn u(doc: &Value, key: &str) -> u64 {
    doc[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {doc:#}"))
}

#[test]
fn grpc_calls_sent_equal_grpcios_count_at_depths_1_8_and_16() {
    let Some(mut server) = GrpcServer::start(8) else {
        return;
    };
    let message = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(message.path(), b"\x0a\x05hello").unwrap();
    let body = message.path().to_str().unwrap();
    for depth in ["1", "8", "16"] {
        let before = server.counts()["Echo"].as_u64().unwrap();
        let doc = load(
            &server.url("Echo"),
            &["-c", "2", "-d", "1s", "--depth", depth, "--body-file", body],
        );
        let after = server.counts()["Echo"].as_u64().unwrap();
        eprintln!(
            "depth {depth}: sent {} grpcio counted {}",
            u(&doc, "sent"),
            after - before
        );
        assert_eq!(u(&doc, "sent"), after - before, "depth {depth}: {doc:#}");
        assert!(u(&doc, "requests") > 100, "depth {depth}: {doc:#}");
        assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
        // Each reply is the 12-byte echo framed (5 + 7) in DATA, with its headers.
        assert!(
            u(&doc, "bytes_received") > 12 * u(&doc, "requests"),
            "{doc:#}"
        );
    }
}

/// A spec's target gives its message with `body_file = "{spec_dir}/..."`: every call grpcio
/// received carried it (its byte count is the calls' times the file's length), and the
/// calls sent over the staircase equal grpcio's count. Before, a spec could not give a
/// gRPC message at all (`body_file` was an unknown key).
#[test]
fn a_spec_targets_body_file_is_the_message_of_every_call_grpcio_counts() {
    let Some(mut server) = GrpcServer::start(4) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let message = b"\x0a\x0bhello spec\x10\x2a".repeat(20);
    std::fs::write(dir.path().join("msg.bin"), &message).unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"grpc-body\"\nclients = [1, 2]\nduration = \"1s\"\nwarmup = \"200ms\"\n\
             [[targets]]\nname = \"grpcio\"\nurl = \"{}\"\npid = {}\ndepth = 4\n\
             body_file = \"{{spec_dir}}/msg.bin\"\n",
            server.url("Echo"),
            server.pid()
        ),
    )
    .unwrap();
    let out = dir.path().join("run");
    common::assert_success(&common::run_spec(&spec, &out));
    let steps = common::steps_json(&out);
    assert_eq!(steps.len(), 2, "{steps:#?}");
    let sent: u64 = steps.iter().map(|s| u(s, "sent")).sum();
    let counts = server.counts();
    let calls = counts["Echo"].as_u64().unwrap();
    eprintln!(
        "sent {sent}, grpcio counted {calls} calls, {} bytes",
        counts["bytes"]["Echo"]
    );
    assert_eq!(sent, calls, "{counts}");
    assert!(calls > 100, "{counts}");
    assert_eq!(
        counts["bytes"]["Echo"].as_u64().unwrap(),
        calls * message.len() as u64,
        "{counts}"
    );
}

/// `body_file` is checked by the dry run where it is written: a missing file, a file for an
/// HTTP target, a file for an external client command.
#[test]
fn dry_run_refuses_a_body_file_at_its_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let dry_run = |text: &str| {
        let spec = dir.path().join("s.toml");
        std::fs::write(&spec, text).unwrap();
        let out = common::cli(&["run".as_ref(), spec.as_os_str(), "--dry-run".as_ref()]);
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        let printed = String::from_utf8_lossy(&out.stdout).to_string();
        (out.status.code(), format!("{printed}{err}"))
    };
    let target = "name = \"x\"\nclients = [1]\n[[targets]]\nname = \"g\"\ncommand = \"sleep 60\"\n";
    let grpc = format!("{target}url = \"grpc://127.0.0.1:{{port}}/bench.Echo/Echo\"\n");
    let (code, err) = dry_run(&format!("{grpc}body_file = \"{{spec_dir}}/missing.bin\"\n"));
    let missing = dir.path().join("missing.bin");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "s.toml:7:13: targets[0].body_file: reading {}: No such file or directory",
            missing.display()
        )),
        "{err}"
    );
    std::fs::write(dir.path().join("m.bin"), b"\x0a\x01x").unwrap();
    // `[client] body_file`, relative to the spec: its size is on the step's client line.
    let (code, out) = dry_run(&format!("{grpc}[client]\nbody_file = \"m.bin\"\n"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("depth 1, a 3-byte gRPC message"), "{out}");
    let http = format!("{target}url = \"http://127.0.0.1:{{port}}/\"\nbody_file = \"m.bin\"\n");
    let (code, err) = dry_run(&http);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("targets[0].body_file: body_file is a gRPC request message, but target \"g\" is loaded at \"http://127.0.0.1:{port}/\""),
        "{err}"
    );
    let wrk = "[client]\ncommand = \"wrk {url}\"\nparser = \"wrk\"\nbody_file = \"m.bin\"\n";
    let (code, err) = dry_run(&format!("{grpc}{wrk}"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("client.body_file: body_file is an option of the built-in engine"),
        "{err}"
    );
}

#[test]
fn grpcs_calls_sent_equal_grpcios_count_over_tls_at_depth_8() {
    let Some(certs) = crate::certs::make_certs() else {
        return;
    };
    let Some(mut server) = GrpcServer::start_with(4, &[&certs.cert(), &certs.key()]) else {
        return;
    };
    let url = format!("grpcs://localhost:{}/bench.Echo/Echo", server.port);
    let ca = certs.ca();
    let ca = ca.to_str().unwrap();
    let doc = load(
        &url,
        &["-c", "2", "-d", "1s", "--depth", "8", "--cacert", ca],
    );
    let count = server.counts()["Echo"].as_u64().unwrap();
    eprintln!(
        "grpcs depth 8: sent {} grpcio counted {count}",
        u(&doc, "sent")
    );
    assert_eq!(u(&doc, "sent"), count, "{doc:#}");
    assert!(u(&doc, "requests") > 100, "{doc:#}");
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    assert_eq!(u(&doc, "tls_handshakes"), 2, "{doc:#}");
}

#[test]
fn a_failing_method_counts_grpc_status_errors_with_code_and_message() {
    let Some(mut server) = GrpcServer::start(4) else {
        return;
    };
    let doc = load(
        &server.url("Fail"),
        &[
            "-c",
            "2",
            "-d",
            "1s",
            "--depth",
            "4",
            "--max-error-ratio",
            "1",
        ],
    );
    let counts = server.counts();
    assert_eq!(u(&doc, "sent"), counts["Fail"].as_u64().unwrap(), "{doc:#}");
    let errors = doc["errors"].as_object().unwrap();
    assert_eq!(errors.len(), 1, "{doc:#}");
    let n = errors["grpc_status 5 NOT_FOUND: no such key"]
        .as_u64()
        .unwrap();
    assert!(n > 100 && n <= u(&doc, "sent"), "{doc:#}");
    assert_eq!(u(&doc, "requests"), 0, "{doc:#}");
}

#[test]
fn grpc_bad_input_is_one_sentence() {
    let cases: [(&str, &[&str], &str); 4] = [
        (
            "grpc://127.0.0.1:1/NoMethod",
            &[],
            "/PACKAGE.SERVICE/METHOD",
        ),
        ("grpc://127.0.0.1:1/a.B/C", &["--body", "x"], "--body-file"),
        ("grpc://127.0.0.1:1/a.B/C", &["--method", "PUT"], "POSTs"),
        (
            "http://127.0.0.1:1/",
            &["--body-file", "/dev/null"],
            "grpc://",
        ),
    ];
    for (url, args, says) in cases {
        let (code, _, stderr, _) = common::load_json(url, args);
        assert_eq!(code, Some(2), "{url} {args:?}: {stderr}");
        assert!(stderr.contains(says), "{url} {args:?}: {stderr}");
    }
}

/// An HPACK literal field without indexing (names and values under 127 bytes).
fn field(name: &str, value: &str, out: &mut Vec<u8>) {
    out.push(0);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.push(value.len() as u8);
    out.extend_from_slice(value.as_bytes());
}

fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    // `:status 200` (static index 8).
    let mut b = vec![0x88];
    for (n, v) in fields {
        field(n, v, &mut b);
    }
    b
}

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;

/// A server answering every call on stream `id` with `reply(id)`'s bytes; the port and the
/// calls it answered.
fn serve(reply: fn(u32) -> Vec<u8>) -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let answered = Arc::new(AtomicU64::new(0));
    let count = answered.clone();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let count = count.clone();
            thread::spawn(move || {
                let Some(mut c) = Conn::start(stream) else {
                    return;
                };
                let goaways = Mutex::new(Vec::new());
                while let Some(id) = c.request(&goaways) {
                    count.fetch_add(1, Ordering::Relaxed);
                    if c.send(&reply(id)).is_none() {
                        return;
                    }
                }
            });
        }
    });
    (port, answered)
}

/// The response headers, then `data` in one DATA frame, then (if any) trailers.
fn reply(id: u32, data: &[u8], trailers: Option<&[(&str, &str)]>) -> Vec<u8> {
    let headers = block(&[("content-type", "application/grpc")]);
    let mut out = frame(HEADERS, END_HEADERS, id, &headers);
    let end = if trailers.is_none() { END_STREAM } else { 0 };
    out.extend(frame(DATA, end, id, data));
    if let Some(t) = trailers {
        let mut b = Vec::new();
        for (n, v) in t {
            field(n, v, &mut b);
        }
        out.extend(frame(HEADERS, END_HEADERS | END_STREAM, id, &b));
    }
    out
}

/// Loads `reply`'s server for 1 s at depth 4: every call an error of `kind` alone, every
/// call the server answered sent (none lost), no panic.
#[track_caller]
fn assert_every_call_fails_as(reply: fn(u32) -> Vec<u8>, kind: &str) {
    let (port, answered) = serve(reply);
    let started = Instant::now();
    let doc = load(
        &format!("grpc://127.0.0.1:{port}/bench.Echo/Echo"),
        &["-c", "2", "-d", "1s", "--depth", "4", "--timeout", "2s"],
    );
    assert!(started.elapsed() < Duration::from_secs(20));
    let errors = doc["errors"].as_object().unwrap();
    assert_eq!(errors.keys().collect::<Vec<_>>(), vec![kind], "{doc:#}");
    assert!(errors[kind].as_u64().unwrap() > 10, "{doc:#}");
    assert_eq!(u(&doc, "requests"), 0, "{doc:#}");
    // The server counted each call once it read its HEADERS; the load stopped after its own
    // count of sent, so they are equal once the server read everything.
    thread::sleep(Duration::from_millis(200));
    assert_eq!(u(&doc, "sent"), answered.load(Ordering::Relaxed), "{doc:#}");
}

#[test]
fn a_reply_without_trailers_is_grpc_no_status() {
    assert_every_call_fails_as(|id| reply(id, b"\0\0\0\0\x02hi", None), "grpc_no_status");
}

#[test]
fn a_wrong_length_prefix_is_grpc_framing() {
    // The prefix promises 10 bytes; 2 come before the trailers.
    assert_every_call_fails_as(
        |id| reply(id, b"\0\0\0\0\x0ahi", Some(&[("grpc-status", "0")])),
        "grpc_framing",
    );
}

#[test]
fn a_compressed_flag_without_grpc_encoding_is_an_error() {
    assert_every_call_fails_as(
        |id| reply(id, b"\x01\0\0\0\x02hi", Some(&[("grpc-status", "0")])),
        "grpc_compressed_unannounced",
    );
}

#[test]
fn a_trailers_only_error_keeps_its_status_and_message() {
    assert_every_call_fails_as(
        |id| {
            let only = block(&[
                ("content-type", "application/grpc"),
                ("grpc-status", "14"),
                ("grpc-message", "too%20busy"),
            ]);
            frame(HEADERS, END_HEADERS | END_STREAM, id, &only)
        },
        "grpc_status 14 UNAVAILABLE: too busy",
    );
}
