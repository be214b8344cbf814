//! Support shared by the integration tests (`crate::common`): nginx and redis on loopback,
//! each in the foreground in its own process group on a free port, with its counters read
//! over a plain TCP connection; running the stairbench binary ([`cli`], [`cli_cmd`]);
//! golden files, rewritten under `STAIRBENCH_BLESS=1` ([`bless_or_compare`]).
//!
//! A server is ended with its whole process group when dropped, and also when the thread that
//! started it ends (PR_SET_PDEATHSIG): keep it inside the test that uses it, not in a static.
//! `start_*` return `None` (and say why) only when the program is not installed; a server
//! that is installed but fails to start is a test failure, with its log.
//!
//! A test that cannot run here (a missing tool, permission or namespace support) calls
//! [`skip_or_fail`]: outside CI it prints `SKIPPED <test>: <reason>`, is recorded and returns
//! (the binary ends with the count and names of its skips); in CI (`CI=true`), where
//! `.ci/run` installs everything, it fails with the reason instead.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// How long a server may take to answer on its port.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// True when running in CI: the program's own test (`stairbench::cli::shell::in_ci`: `CI` set
/// to anything but empty, `0` or `false`; `.ci/run` and GitHub Actions set `CI=true`). The one
/// place tests read `CI`: a skip there fails instead.
pub fn in_ci() -> bool {
    stairbench::cli::shell::in_ci()
}

/// The variable naming a file every skip appends its line to (`.ci/run` sets it and prints the
/// count and names of the skipped tests after the test command).
pub const SKIPS_FILE_VAR: &str = "STAIRBENCH_SKIPS_FILE";

/// The skips of this test binary, printed again as a summary when it exits.
static SKIPPED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// A test cannot run here because of `reason` (the missing tool and how to install it).
/// In CI, fails the test with the reason: a skip there would hide that the test never ran.
/// Outside CI, prints one line `SKIPPED <test>: <reason>` past libtest's output capture,
/// appends it to `$STAIRBENCH_SKIPS_FILE` when set, and returns; the caller returns too. The
/// test binary ends with the count and the names of its skipped tests.
#[track_caller]
pub fn skip_or_fail(reason: impl std::fmt::Display) {
    assert!(!in_ci(), "cannot run in CI (CI=true never skips): {reason}");
    let test = std::thread::current()
        .name()
        .unwrap_or("(a test's unnamed thread)")
        .to_string();
    let line = format!("SKIPPED {test}: {reason}\n");
    // Straight to the stream: libtest captures print! and eprint! of a passing test.
    let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    if let Some(path) = std::env::var_os(SKIPS_FILE_VAR) {
        // One write of one line with O_APPEND: tests on other threads append whole lines.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        if let Ok(mut file) = file {
            let _ = std::io::Write::write_all(&mut file, line.as_bytes());
        }
    }
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    if skipped.is_empty() {
        // SAFETY: registers a plain extern "C" function; it runs once, at exit.
        unsafe { libc::atexit(print_skip_summary) };
    }
    if !skipped.contains(&test) {
        skipped.push(test);
    }
}

/// At exit (after libtest's `test result:` line, on success or failure): how many tests of
/// this binary skipped, and which.
extern "C" fn print_skip_summary() {
    let mut skipped = SKIPPED.lock().unwrap_or_else(|e| e.into_inner());
    skipped.sort();
    let mut text = format!(
        "\n{} test(s) of {} SKIPPED (a tool or permission missing; CI=true fails them instead):\n",
        skipped.len(),
        std::env::args().next().unwrap_or_default()
    );
    for name in skipped.iter() {
        text += &format!("  SKIPPED {name}\n");
    }
    // SAFETY: write(2) on the standard error descriptor, with a valid buffer and length.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// "`program` is not installed (Debian: apt-get install PACKAGE)", with the package that
/// provides it: a skip's reason names what to install.
pub fn not_installed(program: &str) -> String {
    let package = match program {
        "nginx" => "nginx-light",
        "redis-benchmark" => "redis-tools",
        "perf" => "linux-perf",
        "pgbench" | "psql" => "postgresql-client",
        "postgres" => "postgresql",
        "taskset" | "setsid" | "chrt" | "nsenter" | "unshare" | "setpriv" => "util-linux",
        "nice" => "coreutils",
        "pgrep" => "procps",
        "ss" | "ip" | "tc" => "iproute2",
        "ssh" | "scp" | "ssh-keygen" => "openssh-client",
        "sshd" => "openssh-server",
        "java" => "default-jre-headless",
        "javac" => "default-jdk-headless",
        "gunicorn" => "python3-gunicorn",
        "cc" => "gcc",
        "srun" | "salloc" | "sbcast" | "scontrol" | "scancel" | "squeue" | "sinfo" => {
            "slurm-client"
        }
        "inferno-collapse-perf" => {
            return format!("{program} is not installed (cargo install inferno)")
        }
        other => other,
    };
    format!("{program} is not installed (Debian: apt-get install {package})")
}

/// The stairbench binary Cargo built for these tests.
pub fn stairbench_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_stairbench"))
}

/// A `Command` for the stairbench binary, for a test that sets env, stdin or spawns it.
pub fn cli_cmd() -> Command {
    let mut cmd = Command::new(stairbench_bin());
    // Tests run beside each other: a step whose CPUs a sibling test shared stays in the
    // analysis, marked, as a user on a machine that is never quiet asks with
    // --keep-disturbed. Tests of the disturbed status remove it.
    cmd.env("STAIRBENCH_KEEP_DISTURBED", "true");
    cmd
}

/// `stairbench ARGS...`, finished, its standard input closed (a command that reads stdin
/// must not wait on the test harness's).
pub fn cli<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    cli_cmd()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running stairbench")
}

/// `stairbench run SPEC --out OUT_DIR`, finished, its standard input closed.
pub fn run_spec(spec: &Path, out_dir: &Path) -> Output {
    cli(&[
        OsStr::new("run"),
        spec.as_os_str(),
        OsStr::new("--out"),
        out_dir.as_os_str(),
    ])
}

/// The variable that rewrites golden files instead of comparing with them.
pub const BLESS_VAR: &str = "STAIRBENCH_BLESS";

/// True under `STAIRBENCH_BLESS=1`: tests rewrite their golden files and generated fixtures.
pub fn blessing() -> bool {
    std::env::var_os(BLESS_VAR).is_some()
}

/// Compares `actual` with the golden file at `path`, or writes it there under
/// `STAIRBENCH_BLESS=1` (also creating its directory).
#[track_caller]
pub fn bless_or_compare(path: &Path, actual: &str) {
    if blessing() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} ({BLESS_VAR}=1 writes it)", path.display()));
    assert_eq!(
        actual,
        expected,
        "{} differs ({BLESS_VAR}=1 accepts the new output)",
        path.display()
    );
}

/// The planned steps of a run directory's steps.jsonl, as JSON: a series that fell past its
/// peak adds a drift check (its peak measured again, `drift_check`), which tests counting a
/// spec's steps leave out ([`all_steps_json`] keeps it).
pub fn steps_json(dir: &Path) -> Vec<serde_json::Value> {
    all_steps_json(dir)
        .into_iter()
        .filter(|s| s["drift_check"] != true)
        .collect()
}

/// Every line of a run directory's steps.jsonl, as JSON.
pub fn all_steps_json(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("steps.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `stairbench load URL -q ARGS... --json FILE`: (exit status, stdout, stderr, the JSON if
/// any was written).
pub fn load_json(
    url: &str,
    args: &[&str],
) -> (Option<i32>, String, String, Option<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = cli_cmd()
        .args(["load", url, "-q"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let doc = std::fs::read(&json)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap());
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        doc,
    )
}

/// Fails the test, with the command's standard error, unless it exited with status 0.
#[track_caller]
pub fn assert_success(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Copies a directory tree (files and subdirectories), e.g. a checked-in run directory into a
/// temp dir before a command writes into it.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// `name` on PATH or in /usr/sbin, /sbin (where Debian puts nginx, off a user's PATH).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A name no other test of this run gives anything (`sbt-TAG-PID-N`, N counted per process):
/// for what is named machine-wide, such as a shared-memory region (/dev/shm is the same for
/// every test and every namespace host, and a region whose server lives is refused): two
/// tests never share one, whatever the filter and order.
pub fn unique_name(tag: &str) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("sbt-{tag}-{}-{n}", std::process::id())
}

/// Held by each test that runs a staircase against `serve kvd` ranks (whose daemon threads
/// poll without sleeping): two such runs at once on 2 CPUs starve each other's ranks, and a
/// rank that made no progress in a window fails its step's checks.
pub fn kvd_staircase_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it poisons it; the next still takes its turn.
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held by the two tests here that load every CPU for long (the minute-long soak, the test
/// that spins hogs on every CPU), so they do not overlap: each judges what it measured while
/// the other's load would be a neighbour. Tests that judge a pinned generator's timing need
/// the machine to themselves and live in tests/solo.
pub fn busy_machine_turn() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 for a free port")
}

/// A child process group ended (TERM, then KILL) and reaped on drop.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    name: &'static str,
}

impl ServerProcess {
    /// Spawns `cmd` as the leader of a new process group, output to `log`.
    fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> ServerProcess {
        let out = std::fs::File::create(log).expect("creating the server's log file");
        let err = out.try_clone().expect("cloning the log file handle");
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        ServerProcess { child, name }
    }

    /// The process group id (the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits until `port` accepts a connection. An error holds the reason and `log`'s tail.
    fn wait_ready(&mut self, port: u16, log: &Path) -> Result<(), NotReady> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = tail(log);
                return Err(NotReady {
                    port_taken: log.contains("in use"),
                    message: format!(
                        "{} exited ({status}) before listening on port {port}:\n{log}",
                        self.name
                    ),
                });
            }
            if Instant::now() > deadline {
                return Err(NotReady {
                    port_taken: false,
                    message: format!(
                        "{} not listening on port {port} after {READY_TIMEOUT:?}:\n{}",
                        self.name,
                        tail(log)
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Why a server did not come up.
struct NotReady {
    /// Another process took the free port first: worth another try on another port.
    port_taken: bool,
    message: String,
}

/// Starts a server on a free port, trying again on another port if that one was taken
/// between choosing it and binding it; panics with the server's log if it cannot start.
fn start_on_free_port(
    mut start: impl FnMut(u16) -> (ServerProcess, PathBuf),
) -> (ServerProcess, u16) {
    for _ in 0..3 {
        let port = free_port();
        let (mut process, log) = start(port);
        match process.wait_ready(port, &log) {
            Ok(()) => return (process, port),
            Err(e) if e.port_taken => eprintln!("{}; trying another port", e.message),
            Err(e) => panic!("{}", e.message),
        }
    }
    panic!("no free port could be bound in 3 attempts");
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let group = Pid::from_raw(self.pgid());
        let _ = killpg(group, Signal::SIGTERM);
        if !wait_for(Duration::from_secs(5), || {
            matches!(self.child.try_wait(), Ok(Some(_)))
        }) {
            let _ = killpg(group, Signal::SIGKILL);
            let _ = self.child.wait();
        }
        // Workers of the group (nginx's) exit after their master: give them a moment.
        if !wait_for(Duration::from_secs(2), || {
            group_members(self.pgid()).is_empty()
        }) {
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

/// Polls `done` every 10 ms until it holds or `limit` passes; true if it held.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    done()
}

/// Live processes (not zombies) whose process group is `pgid`, from /proc.
pub fn group_members(pgid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            // Fields after the command name (which may hold spaces): state, ppid, pgrp.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string()
        })
        .collect()
}

/// The last lines of a log file, for error messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// nginx on 127.0.0.1: `/` answers `hello\n` (a static file), `/status500` answers 500,
/// `/stub_status` gives the counters.
#[derive(Debug)]
pub struct Nginx {
    /// Its listening port on 127.0.0.1.
    pub port: u16,
    /// Config, logs, pid file and the served file.
    #[allow(dead_code)] // held, not read: the dir lives as long as the server
    pub dir: tempfile::TempDir,
    /// The master process (leader of the group its worker is in).
    pub process: ServerProcess,
}

/// Starts nginx (one worker, foreground); `None` when nginx is not installed.
pub fn start_nginx() -> Option<Nginx> {
    start_nginx_with("")
}

/// As [`start_nginx`], with `server_extra` added inside the `server { }` block
/// (e.g. `keepalive_requests 100;` or another `location`).
pub fn start_nginx_with(server_extra: &str) -> Option<Nginx> {
    let Some(program) = find_program("nginx") else {
        skip_or_fail("nginx is not installed (Debian: apt-get install nginx-light)");
        return None;
    };
    let dir = world_readable_tempdir();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("creating nginx's root");
    std::fs::write(root.join("index.html"), "hello\n").expect("writing index.html");
    let (process, port) = start_on_free_port(|port| {
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, nginx_conf(dir.path(), port, server_extra))
            .expect("writing nginx.conf");
        let mut cmd = Command::new(&program);
        cmd.arg("-c").arg(&conf).arg("-p").arg(dir.path());
        let process = ServerProcess::spawn("nginx", cmd, &dir.path().join("nginx.out"));
        (process, dir.path().join("error.log"))
    });
    Some(Nginx { port, dir, process })
}

/// nginx's workers run as `nobody` when started by root: they must be able to read the root.
fn world_readable_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("stairbench-nginx-")
        .tempdir()
        .expect("creating a temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("opening the temp dir to nginx's worker");
    dir
}

fn nginx_conf(dir: &Path, port: u16, server_extra: &str) -> String {
    let d = dir.display();
    format!(
        "daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 8192;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    default_type text/plain;
    server {{
        listen 127.0.0.1:{port};
        root {d}/root;
        location / {{ index index.html; }}
        location /stub_status {{ stub_status; }}
        location /status500 {{ return 500 \"boom\\n\"; }}
        {server_extra}
    }}
}}
"
    )
}

impl Nginx {
    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// nginx's `requests` counter from /stub_status: every request handled so far, this
    /// status request included (so two calls in a row differ by 1).
    pub fn stub_requests(&self) -> u64 {
        let (status, body) = http_get(self.port, "/stub_status");
        assert_eq!(status, 200, "GET /stub_status: {body}");
        parse_stub_requests(&body).unwrap_or_else(|| panic!("no requests count in {body:?}"))
    }
}

/// One `GET path` with `Connection: close`: the status code and the body.
pub fn http_get(port: u16, path: &str) -> (u16, String) {
    let mut stream =
        TcpStream::connect((Ipv4Addr::LOCALHOST, port)).expect("connecting to the HTTP server");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reply = String::new();
    stream
        .read_to_string(&mut reply)
        .expect("reading the HTTP reply");
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in HTTP reply {head:?}"));
    (status, body.to_string())
}

/// `server accepts handled requests` is followed by a line of three numbers; the third.
pub fn parse_stub_requests(body: &str) -> Option<u64> {
    let mut lines = body
        .lines()
        .skip_while(|l| !l.contains("accepts handled requests"));
    lines.next()?;
    lines.next()?.split_whitespace().nth(2)?.parse().ok()
}

/// redis-server on 127.0.0.1, no persistence.
#[derive(Debug)]
pub struct Redis {
    /// Its listening port on 127.0.0.1.
    pub port: u16,
    /// Its working directory and log.
    #[allow(dead_code)] // held, not read: the dir lives as long as the server
    pub dir: tempfile::TempDir,
    /// The server process (leader of its own group).
    pub process: ServerProcess,
}

/// Starts redis-server in the foreground; `None` when it is not installed.
pub fn start_redis() -> Option<Redis> {
    let Some(program) = find_program("redis-server") else {
        skip_or_fail("redis-server is not installed (Debian: apt-get install redis-server)");
        return None;
    };
    let dir = tempfile::Builder::new()
        .prefix("stairbench-redis-")
        .tempdir()
        .expect("creating a temp dir");
    let log = dir.path().join("redis.log");
    let (process, port) = start_on_free_port(|port| {
        let mut cmd = Command::new(&program);
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path());
        (ServerProcess::spawn("redis-server", cmd, &log), log.clone())
    });
    let redis = Redis { port, dir, process };
    redis.wait_pong(&log);
    Some(redis)
}

impl Redis {
    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `total_commands_processed` from `INFO stats`: every command before this INFO (the
    /// INFO itself is counted after it runs, so two calls in a row differ by 1).
    pub fn commands_processed(&self) -> u64 {
        let info = self.command(&["INFO", "stats"]);
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total_commands_processed in INFO stats: {info:?}"))
    }

    /// Sends one command and returns its reply as text (a bulk string's content, or the
    /// status/error/integer line); panics if redis cannot be reached.
    pub fn command(&self, args: &[&str]) -> String {
        self.try_command(args)
            .unwrap_or_else(|e| panic!("redis command {args:?}: {e}"))
    }

    /// As [`Redis::command`], with the I/O error instead of a panic.
    pub fn try_command(&self, args: &[&str]) -> std::io::Result<String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        stream.write_all(req.as_bytes())?;
        read_resp_reply(&mut stream)
    }

    fn wait_pong(&self, log: &Path) {
        let ok = wait_for(READY_TIMEOUT, || {
            self.try_command(&["PING"]).is_ok_and(|r| r == "+PONG")
        });
        assert!(ok, "redis-server does not answer PING:\n{}", tail(log));
    }
}

/// memcached on 127.0.0.1 (Debian's package), `-t THREADS` worker threads, no UDP.
#[derive(Debug)]
pub struct Memcached {
    /// Its listening port on 127.0.0.1.
    pub port: u16,
    /// Its log.
    #[allow(dead_code)] // held, not read: the dir lives as long as the server
    pub dir: tempfile::TempDir,
    /// The server process (leader of its own group).
    #[allow(dead_code)] // held, not read: dropping it stops the server
    pub process: ServerProcess,
}

/// Starts memcached with `threads` worker threads; `None` when it is not installed.
pub fn start_memcached(threads: usize) -> Option<Memcached> {
    let Some(program) = find_program("memcached") else {
        skip_or_fail("memcached is not installed (Debian: apt-get install memcached)");
        return None;
    };
    let dir = tempfile::Builder::new()
        .prefix("stairbench-memcached-")
        .tempdir()
        .expect("creating a temp dir");
    let log = dir.path().join("memcached.log");
    let (process, port) = start_on_free_port(|port| {
        let mut cmd = Command::new(&program);
        // memcached refuses to run as root without a user to switch to.
        cmd.args(["-u", "nobody", "-l", "127.0.0.1", "-U", "0", "-m", "256"])
            .args(["-p", &port.to_string(), "-t", &threads.to_string()]);
        (ServerProcess::spawn("memcached", cmd, &log), log.clone())
    });
    Some(Memcached { port, dir, process })
}

impl Memcached {
    /// `memcache://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("memcache://127.0.0.1:{}", self.port)
    }

    /// memcached's `stats`: every `STAT name value` line.
    pub fn stats(&self) -> std::collections::BTreeMap<String, String> {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).expect("memcached");
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(b"stats\r\n").unwrap();
        let mut text = Vec::new();
        let mut chunk = [0u8; 8192];
        while !text.ends_with(b"END\r\n") {
            let n = stream.read(&mut chunk).expect("reading memcached's stats");
            assert!(n > 0, "memcached closed during stats");
            text.extend_from_slice(&chunk[..n]);
        }
        String::from_utf8_lossy(&text)
            .lines()
            .filter_map(|l| {
                let mut w = l.strip_prefix("STAT ")?.splitn(2, ' ');
                Some((w.next()?.to_string(), w.next()?.to_string()))
            })
            .collect()
    }

    /// One counter of `stats`.
    pub fn stat(&self, name: &str) -> u64 {
        let stats = self.stats();
        stats
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in memcached's stats: {stats:?}"))
    }

    /// `cmd_get + cmd_set`: the lookups and stores it has executed (`stats` is neither).
    pub fn gets_and_sets(&self) -> u64 {
        let s = self.stats();
        let n = |k: &str| s[k].parse::<u64>().unwrap();
        n("cmd_get") + n("cmd_set")
    }
}

/// Reads one RESP reply: `+OK`, `-ERR ...`, `:5` are returned as their line; `$n` bulk
/// strings as their content.
fn read_resp_reply(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n") {
        stream.read_exact(&mut byte)?;
        buf.push(byte[0]);
    }
    let line = String::from_utf8_lossy(&buf[..buf.len() - 2]).into_owned();
    let Some(len) = line.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) else {
        return Ok(line);
    };
    let mut body = vec![0u8; len + 2];
    stream.read_exact(&mut body)?;
    Ok(String::from_utf8_lossy(&body[..len]).into_owned())
}

/// A mock machine for [`mock_sysfs`]: the shape of its CPUs, numbered as Linux numbers them
/// on x86 (every core's first thread, socket by socket, then every core's second thread).
struct MockMachine {
    /// The name tests ask for.
    name: &'static str,
    /// Sockets (`physical_package_id` 0..sockets).
    sockets: usize,
    /// Cores per socket (`core_id` 0..cores, per socket).
    cores: usize,
    /// Two threads per core when true, one when false.
    smt: bool,
    /// Each NUMA node's cpulist, node 0 first.
    nodes: &'static [&'static str],
}

/// The machines the topology tests read: seed 000's (2 sockets × 28 cores × 2 threads), seed
/// 004's (AMD EPYC 9354P: 32 cores, SMT off, NPS2) and a 2-core development machine.
const MOCK_MACHINES: &[MockMachine] = &[
    MockMachine {
        name: "seed000",
        sockets: 2,
        cores: 28,
        smt: true,
        nodes: &["0-27,56-83", "28-55,84-111"],
    },
    MockMachine {
        name: "amd32",
        sockets: 1,
        cores: 32,
        smt: false,
        nodes: &["0-15", "16-31"],
    },
    MockMachine {
        name: "two_core",
        sockets: 1,
        cores: 2,
        smt: false,
        nodes: &["0-1"],
    },
];

/// A temp dir laid out as the /sys of the named mock machine, with only the files
/// `Topology::from_sysfs` reads (`cpu/online`, each CPU's `core_id`, `physical_package_id`
/// and `thread_siblings_list`, each node's `cpulist`). Keep it alive while it is read.
pub fn mock_sysfs(name: &str) -> tempfile::TempDir {
    let machine = MOCK_MACHINES
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no mock machine {name}"));
    let dir = tempfile::tempdir().unwrap();
    let cpu_dir = dir.path().join("devices/system/cpu");
    let firsts = machine.sockets * machine.cores;
    let threads = if machine.smt { 2 } else { 1 };
    write_file(
        &cpu_dir.join("online"),
        &format!("0-{}", firsts * threads - 1),
    );
    for first in 0..firsts {
        let siblings: Vec<usize> = (0..threads).map(|t| first + t * firsts).collect();
        let list = siblings.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        for &cpu in &siblings {
            let topo = cpu_dir.join(format!("cpu{cpu}/topology"));
            write_file(&topo.join("core_id"), &(first % machine.cores).to_string());
            let package = (first / machine.cores).to_string();
            write_file(&topo.join("physical_package_id"), &package);
            write_file(&topo.join("thread_siblings_list"), &list.join(","));
        }
    }
    for (node, cpulist) in machine.nodes.iter().enumerate() {
        let path = format!("devices/system/node/node{node}/cpulist");
        write_file(&dir.path().join(path), cpulist);
    }
    dir
}

/// Writes `text` and a newline (as the kernel's one-line files end), creating the directory.
fn write_file(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, format!("{text}\n")).unwrap();
}

/// Where Debian's tomcat10 puts catalina.sh.
const CATALINA: &str = "/usr/share/tomcat10/bin/catalina.sh";

/// Tomcat and a JVM are installed (else skipped outside CI, failed in it).
pub fn tomcat_available() -> bool {
    if !Path::new(CATALINA).is_file() || find_program("java").is_none() {
        skip_or_fail(
            "tomcat10 (with a java runtime) is not installed (Debian: apt-get install tomcat10)",
        );
        return false;
    }
    true
}
