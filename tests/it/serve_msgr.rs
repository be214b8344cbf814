//! The built-in msgr servers, in-process through `spawn_msgr`, and the real binary once.

use crate::common;

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stairbench::load::protocol::msgr::MsgrProto;
use stairbench::load::protocol::{Protocol, Reply};
use stairbench::load::LoadConfig;
use stairbench::record::load::{IntervalLine, IntervalSink};
use stairbench::serve::{spawn_msgr, Arch, MsgrOptions, MsgrServer};
use stairbench::wire::msgr::{FrameHeader, HEADER_LEN};

/// The memory test reads the process's RSS: the other tests must not allocate meanwhile.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn server(arch: Arch, threads: usize, io_threads: usize, max_frame: u32) -> MsgrServer {
    spawn_msgr(MsgrOptions {
        arch,
        threads,
        io_threads,
        max_frame,
        ..MsgrOptions::default()
    })
    .expect("server starts")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

fn request(payload_len: u32, reply_len: u32) -> Vec<u8> {
    let mut out = FrameHeader {
        payload_len,
        reply_len,
    }
    .encode()
    .to_vec();
    out.resize(out.len() + payload_len as usize, 0xab);
    out
}

/// Reads one reply and returns its payload length, checking the header's second word.
fn read_reply(s: &mut TcpStream) -> u32 {
    let mut header = [0u8; HEADER_LEN];
    s.read_exact(&mut header).expect("reply header");
    let h = FrameHeader::decode(&header).unwrap();
    assert_eq!(h.reply_len, 0, "reply header's second word");
    let mut body = vec![0u8; h.payload_len as usize];
    s.read_exact(&mut body).expect("reply body");
    h.payload_len
}

/// True once the server has closed `s` (EOF or reset) within the read timeout.
fn closed_by_server(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Several clients, each writing batches of pipelined frames of varied sizes in one write.
fn echo_sizes(server: &MsgrServer) {
    let sizes = [0u32, 1, 7, 64, 4096, 65_537, 300_000];
    let clients: Vec<_> = (0..4u32)
        .map(|c| {
            let addr = server.addr();
            std::thread::spawn(move || {
                let mut s = connect(addr);
                for round in 0..5u32 {
                    let mut batch = Vec::new();
                    for (i, &size) in sizes.iter().enumerate() {
                        batch.extend(request((i as u32 * 13 + c + round) % 5000, size));
                    }
                    s.write_all(&batch).unwrap();
                    for &size in &sizes {
                        assert_eq!(read_reply(&mut s), size, "client {c} round {round}");
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client thread");
    }
    let expected = 4 * 5 * sizes.len() as u64;
    assert_eq!(server.stats().ops, expected);
}

#[test]
fn reactor_answers_every_size_in_order() {
    let _g = serial();
    echo_sizes(&server(Arch::Reactor, 2, 1, 1 << 20));
}

#[test]
fn pool_answers_every_size_in_order() {
    let _g = serial();
    let s = server(Arch::Pool, 3, 2, 1 << 20);
    assert_eq!(s.thread_names().len(), 5);
    echo_sizes(&s);
}

#[test]
fn garbage_closes_only_its_connection() {
    let _g = serial();
    for arch in [Arch::Reactor, Arch::Pool] {
        let server = server(arch, 1, 1, 1 << 20);
        let mut good = connect(server.addr());
        good.write_all(&request(4, 4)).unwrap();
        assert_eq!(read_reply(&mut good), 4);
        let mut bad = connect(server.addr());
        bad.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert!(
            closed_by_server(&mut bad),
            "{arch:?}: garbage connection left open"
        );
        good.write_all(&request(4, 10)).unwrap();
        assert_eq!(
            read_reply(&mut good),
            10,
            "{arch:?}: other connection still served"
        );
        assert_eq!(server.stats().refused, 1);
    }
}

#[test]
fn frames_over_max_frame_are_refused() {
    let _g = serial();
    for arch in [Arch::Reactor, Arch::Pool] {
        let server = server(arch, 1, 1, 1024);
        let mut at_limit = connect(server.addr());
        at_limit.write_all(&request(1024, 1024)).unwrap();
        assert_eq!(read_reply(&mut at_limit), 1024);
        for (payload, reply) in [(1025, 0), (0, 1025)] {
            let mut s = connect(server.addr());
            s.write_all(&request(0, 1)).unwrap();
            assert_eq!(read_reply(&mut s), 1, "served before the oversize frame");
            s.write_all(
                &FrameHeader {
                    payload_len: payload,
                    reply_len: reply,
                }
                .encode(),
            )
            .unwrap();
            assert!(
                closed_by_server(&mut s),
                "{arch:?}: {payload}/{reply} accepted"
            );
        }
        assert_eq!(server.stats().refused, 2);
        at_limit.write_all(&request(1, 1)).unwrap();
        assert_eq!(read_reply(&mut at_limit), 1);
    }
}

#[test]
fn truncated_frame_is_counted_when_the_peer_closes() {
    let _g = serial();
    let server = server(Arch::Reactor, 1, 1, 1 << 20);
    let mut s = connect(server.addr());
    s.write_all(&request(100, 1)[..50]).unwrap();
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.stats().truncated == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(server.stats().truncated, 1);
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

/// Hostile lengths: 4 GB headers are refused at once; legal 16 MiB payloads sent in part are
/// not buffered; a client asking for 4 MiB replies without reading them stalls its own
/// connection instead of growing the server.
#[test]
fn memory_stays_bounded_against_hostile_lengths() {
    let _g = serial();
    for arch in [Arch::Reactor, Arch::Pool] {
        let server = server(arch, 1, 1, 16 << 20);
        let mut first_quarter = request(0, 1);
        first_quarter[..4].copy_from_slice(&(16u32 << 20).to_le_bytes());
        first_quarter.resize(HEADER_LEN + (4 << 20), 0xab);
        let before = rss_bytes();
        let mut hostile = connect(server.addr());
        hostile.write_all(&[0xff; HEADER_LEN]).unwrap();
        assert!(
            closed_by_server(&mut hostile),
            "{arch:?}: 4 GB length accepted"
        );

        let mut partial = Vec::new();
        for _ in 0..4 {
            let mut s = connect(server.addr());
            s.write_all(&first_quarter).unwrap();
            partial.push(s);
        }
        let mut greedy = connect(server.addr());
        let mut asks = Vec::new();
        for _ in 0..64 {
            asks.extend(request(0, 4 << 20));
        }
        greedy.write_all(&asks).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let grown = rss_bytes().saturating_sub(before);
        eprintln!(
            "{arch:?}: RSS grew {} KiB under hostile lengths",
            grown >> 10
        );
        assert!(
            grown < 48 << 20,
            "{arch:?}: RSS grew {} MiB (a server that buffers would take 16+256)",
            grown >> 20
        );
        let mut healthy = connect(server.addr());
        healthy.write_all(&request(8, 8)).unwrap();
        assert_eq!(read_reply(&mut healthy), 8);
        for _ in 0..64 {
            assert_eq!(
                read_reply(&mut greedy),
                4 << 20,
                "{arch:?}: greedy replies resume"
            );
        }
    }
}

#[test]
fn stop_closes_connections_and_frees_the_port() {
    let _g = serial();
    for arch in [Arch::Reactor, Arch::Pool] {
        let server = server(arch, 2, 1, 1024);
        let addr = server.addr();
        let mut s = connect(addr);
        s.write_all(&request(1, 1)).unwrap();
        assert_eq!(read_reply(&mut s), 1);
        server.stop();
        assert!(
            closed_by_server(&mut s),
            "{arch:?}: connection outlived the server"
        );
        assert!(
            TcpStream::connect(addr).is_err(),
            "{arch:?}: port still open"
        );
    }
}

#[test]
fn bad_cpuset_is_one_sentence_and_exit_2() {
    for args in [
        &["--cpuset", "0-x"][..],
        &["--cpuset", "4095"],
        &["--arch", "fork"],
        &["--threads", "0"],
    ] {
        let out = common::cli_cmd()
            .args(["serve", "msgr"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        let first = stderr.lines().next().unwrap_or("");
        assert!(
            first.starts_with("error:") || first.starts_with("stairbench: error:"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn binary_prints_its_port_serves_and_exits_0_on_sigterm() {
    let _g = serial();
    for arch in ["reactor", "pool"] {
        let mut child = common::cli_cmd()
            .args([
                "serve",
                "msgr",
                "--arch",
                arch,
                "--threads",
                "2",
                "--port",
                "0",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let rest = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {line:?}"));
        assert!(rest.contains(&format!("arch={arch} threads=2")), "{line:?}");
        let addr: SocketAddr = rest.split_whitespace().next().unwrap().parse().unwrap();
        let mut s = connect(addr);
        s.write_all(&request(3, 5)).unwrap();
        assert_eq!(read_reply(&mut s), 5);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let status = wait_with_deadline(&mut child, Duration::from_secs(5));
        assert_eq!(status.code(), Some(0), "{arch}: exit status");
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        assert!(stderr.contains("served 1 requests"), "{arch}: {stderr}");
    }
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    limit: Duration,
) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("server did not exit within {limit:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn load_protocol_codec_talks_to_the_server() {
    let _g = serial();
    let server = server(Arch::Reactor, 1, 1, 1 << 20);
    let mut proto = MsgrProto::new(300);
    let mut s = connect(server.addr());
    for _ in 0..3 {
        let req = proto.next_request().to_vec();
        s.write_all(&req).unwrap();
    }
    let mut buf = Vec::new();
    let mut replies = 0;
    let mut chunk = [0u8; 97];
    while replies < 3 {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "server closed");
        buf.extend_from_slice(&chunk[..n]);
        while let Reply::Done {
            len, error, close, ..
        } = proto.parse_reply(&buf)
        {
            assert_eq!((len, error, close), (HEADER_LEN + 300, None, false));
            buf.drain(..len);
            replies += 1;
        }
    }
    assert!(buf.is_empty());
}

struct NoLines;
impl IntervalSink for NoLines {
    fn interval(&mut self, _: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {}
}

/// The load engine's `sent` (warm-up and drain included) is exactly what each architecture
/// answered, with pipelining and no errors.
#[test]
fn load_engine_sent_equals_what_each_architecture_answered() {
    let _g = serial();
    for arch in [Arch::Reactor, Arch::Pool] {
        let server = server(arch, 2, 1, 1 << 20);
        let config = LoadConfig {
            url: format!("msgr://{}", server.addr()),
            connections: 6,
            depth: 4,
            duration: Duration::from_millis(500),
            warmup: Duration::from_millis(100),
            timeout: Duration::from_secs(2),
            ..LoadConfig::default()
        };
        let mut config = config;
        config.proto.msg_size = 64;
        let stop = std::sync::atomic::AtomicBool::new(false);
        let out = stairbench::load::run(&config, &mut NoLines, &stop).expect("load runs");
        let r = &out.report;
        assert!(r.errors.is_empty(), "{arch:?}: {:?}", r.errors);
        assert!(r.requests > 100, "{arch:?}: {r:?}");
        let deadline = Instant::now() + Duration::from_secs(2);
        while server.stats().ops < r.sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(server.stats().ops, r.sent, "{arch:?}");
    }
}

/// The binary's reactor-0 counters in its metrics file; `None` while the file is missing.
/// Every read must parse: the file is replaced whole, never seen half-written.
fn reactor_counters(path: &std::path::Path) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("half a metrics file? {e}: {text}"));
    let t = &v["threads"]["msgr-reactor-0"];
    Some((t["ops"].as_u64()?, t["busy_ns"].as_u64()?))
}

/// Pipelines requests on one connection until `stop`.
fn keep_busy(addr: SocketAddr, stop: &std::sync::atomic::AtomicBool) {
    const DEPTH: usize = 64;
    let mut s = connect(addr);
    let batch: Vec<u8> = (0..DEPTH).flat_map(|_| request(16, 16)).collect();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        s.write_all(&batch).unwrap();
        for _ in 0..DEPTH {
            read_reply(&mut s);
        }
    }
}

/// Started as the sweep starts a split instance (the whole process confined to the one CPU
/// its reactor is pinned to), the server still rewrites its metrics file while that reactor
/// is kept busy by three pipelining clients: each rewrite shows more requests served.
#[test]
fn metrics_file_is_rewritten_while_the_reactor_is_busy() {
    use std::os::unix::process::CommandExt;
    let _g = serial();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    let cpu = stairbench::cpuset::allowed()[0];
    let mut cmd = common::cli_cmd();
    cmd.args(["serve", "msgr", "--threads", "1", "--port", "0"])
        .args(["--cpuset", &cpu.to_string(), "--metrics"])
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only sched_setaffinity, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: SocketAddr = line
        .strip_prefix("listening on ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .parse()
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let seen = std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| keep_busy(addr, &stop));
        }
        // Rewrites come every 200 ms; 5 s bounds a machine too loaded to give three.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut seen: Vec<(u64, u64)> = Vec::new();
        while seen.len() < 4 && Instant::now() < deadline {
            if let Some(now) = reactor_counters(&path) {
                if seen.last().is_none_or(|last| now.0 > last.0) {
                    seen.push(now);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        seen
    });
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = wait_with_deadline(&mut child, Duration::from_secs(5));
    assert_eq!(status.code(), Some(0));
    // The first reading may predate the load; three rewrites after it each served more.
    assert_eq!(
        seen.len(),
        4,
        "(ops, busy_ns) of each rewrite seen: {seen:?}"
    );
    assert!(seen[3].1 > seen[1].1, "the reactor used CPU: {seen:?}");
}
