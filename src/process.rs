//! Child processes that never outlive stairbench: each in its own process group (ended as a
//! group), with PR_SET_PDEATHSIG so they die if stairbench is killed outright, and
//! stairbench a child subreaper so that whatever they fork stays its descendant.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use regex::Regex;

use crate::machine::procfs;

const TAIL_LINES: usize = 40;

static SUBREAPER: AtomicBool = AtomicBool::new(false);
static TRACKED: Mutex<Vec<i32>> = Mutex::new(Vec::new());

/// The pids of the children started here and not yet stopped (each leads its own process
/// group): the server, an external load tool, a client group.
pub fn tracked() -> Vec<i32> {
    TRACKED.lock().map(|t| t.clone()).unwrap_or_default()
}

/// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER).
pub fn become_subreaper() {
    // Safety: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    SUBREAPER.store(rc == 0, Ordering::SeqCst);
}

/// What a child printed, kept for errors and readiness.
#[derive(Debug, Default)]
struct Output {
    tail: VecDeque<String>,
    all: Option<String>,
}

/// A running child process in its own process group.
#[derive(Debug)]
pub struct ChildProc {
    name: String,
    child: Child,
    stdout: Arc<Mutex<Output>>,
    stderr: Arc<Mutex<Output>>,
    matched: Arc<Mutex<Option<String>>>,
    readers: Vec<JoinHandle<()>>,
    exit: Option<String>,
    /// Its own CPU and that of the descendants it waited for, from wait4 once it ended.
    rusage: Option<Cpu>,
    /// When it started, in ticks since boot (0 when /proc did not say): orphans older than
    /// it are not its own and outlive its stop.
    start_ticks: u64,
}

/// User and system CPU, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    /// User CPU, in seconds.
    pub user_s: f64,
    /// System CPU, in seconds.
    pub sys_s: f64,
}

/// What [`ChildProc::wait`] saw of a child that ran to its end.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finished {
    /// How it ended (`exited with status 0`).
    pub exit: String,
    /// Everything it printed on stdout, with `keep_stdout`.
    pub stdout: String,
    /// The CPU of its whole tree: its own and its waited-for descendants' (wait4), plus the
    /// orphans' sampled from /proc. Only this child's: never another child's of ours.
    pub cpu: Cpu,
    /// The part of `cpu` (user + system seconds) that came from /proc samples of descendants
    /// orphaned to us: their CPU after the last sample (every 100 ms) is missing.
    pub orphans_cpu_s: f64,
    /// Time its tree's threads spent runnable but waiting for a CPU, in seconds, summed, at
    /// their last samples (every 100 ms); None where the kernel has no schedstat.
    pub run_wait_s: Option<f64>,
}

/// How to start a child.
#[derive(Debug, Clone, Default)]
pub struct Launch {
    /// Name in messages.
    pub name: String,
    /// Program.
    pub program: String,
    /// Arguments.
    pub args: Vec<String>,
    /// CPUs to pin the child to (inherited by its threads).
    pub cpus: Option<Vec<usize>>,
    /// A regex that marks readiness when a line of output matches it.
    pub ready_log: Option<Regex>,
    /// Keep all of stdout (for parsing), not only its tail.
    pub keep_stdout: bool,
}

impl ChildProc {
    /// Starts the child.
    pub fn spawn(launch: &Launch) -> std::io::Result<ChildProc> {
        // A CPU the machine lacks would leave the child unpinned without a word.
        if let Some(cpus) = &launch.cpus {
            crate::cpuset::check_available(cpus).map_err(std::io::Error::other)?;
        }
        let mut cmd = Command::new(&launch.program);
        cmd.args(&launch.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let cpus = launch.cpus.clone();
        // Safety: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::setpgid(0, 0);
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if let Some(cpus) = &cpus {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    for &c in cpus {
                        libc::CPU_SET(c, &mut set);
                    }
                    libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        let child_pid = child.id() as i32;
        if let Ok(mut t) = TRACKED.lock() {
            t.push(child.id() as i32);
        }
        let matched = Arc::new(Mutex::new(None));
        let stdout = Arc::new(Mutex::new(Output {
            all: launch.keep_stdout.then(String::new),
            ..Output::default()
        }));
        let stderr = Arc::new(Mutex::new(Output::default()));
        let readers = vec![
            reader(
                child.stdout.take(),
                stdout.clone(),
                launch.ready_log.clone(),
                matched.clone(),
            ),
            reader(
                child.stderr.take(),
                stderr.clone(),
                launch.ready_log.clone(),
                matched.clone(),
            ),
        ];
        Ok(ChildProc {
            name: launch.name.clone(),
            child,
            stdout,
            stderr,
            matched,
            readers,
            exit: None,
            rusage: None,
            start_ticks: start_ticks(child_pid),
        })
    }

    /// Process id (also its process group id).
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Name in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the child ended, if it has.
    pub fn exited(&mut self) -> Option<String> {
        if self.exit.is_none() && self.reap(libc::WNOHANG) {
            self.drain_output(Duration::from_millis(300));
        }
        self.exit.clone()
    }

    /// Reaps the child with wait4 (`flags`: WNOHANG or 0 to block), keeping its exit and its
    /// rusage (std's wait would drop the rusage); true once it is reaped.
    fn reap(&mut self, flags: i32) -> bool {
        let mut status = 0;
        // Safety: a zeroed rusage is a valid value; both pointers outlive the call.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let rc = loop {
            let rc = unsafe { libc::wait4(self.pid(), &mut status, flags, &mut usage) };
            let interrupted =
                std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted;
            if rc != -1 || !interrupted {
                break rc;
            }
        };
        if rc != self.pid() {
            return false;
        }
        use std::os::unix::process::ExitStatusExt;
        self.exit = Some(describe_exit(std::process::ExitStatus::from_raw(status)));
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
        self.rusage = Some(Cpu {
            user_s: secs(usage.ru_utime),
            sys_s: secs(usage.ru_stime),
        });
        true
    }

    /// Lets the output readers take in what the child wrote before it exited (bounded:
    /// a grandchild may hold the pipes open).
    fn drain_output(&mut self, limit: Duration) {
        let start = Instant::now();
        while !self.readers.iter().all(JoinHandle::is_finished) && start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A line of output matched the readiness regex.
    pub fn log_matched(&self) -> bool {
        self.matched_line().is_some()
    }

    /// The first line of output that matched the readiness regex.
    pub fn matched_line(&self) -> Option<String> {
        self.matched.lock().ok().and_then(|m| m.clone())
    }

    /// The last lines of stderr (stdout when stderr is empty).
    pub fn output_tail(&self) -> String {
        let tail = |o: &Arc<Mutex<Output>>| {
            o.lock()
                .map(|o| o.tail.iter().cloned().collect::<Vec<_>>().join("\n"))
                .unwrap_or_default()
        };
        let err = tail(&self.stderr);
        if err.trim().is_empty() {
            tail(&self.stdout)
        } else {
            err
        }
    }

    /// Waits for the child to exit by itself, polling `stop`; returns its exit description,
    /// with `keep_stdout` everything it printed, and the CPU of its tree (sampling /proc
    /// every 100 ms for descendants orphaned to us).
    pub fn wait(&mut self, limit: Duration, stop: &AtomicBool) -> Result<Finished, WaitError> {
        let start = Instant::now();
        let mut orphans = Orphans::default();
        let mut sampled = Instant::now() - ORPHAN_SAMPLE;
        while self.exited().is_none() {
            if sampled.elapsed() >= ORPHAN_SAMPLE {
                orphans.sample(self.pid());
                sampled = Instant::now();
            }
            if stop.load(Ordering::Relaxed) {
                let _ = self.stop(Duration::from_millis(500));
                return Err(WaitError::Interrupted(self.name.clone()));
            }
            if start.elapsed() > limit {
                let _ = self.stop(Duration::from_millis(500));
                return Err(WaitError::TooLong {
                    name: self.name.clone(),
                    limit,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        let out = self
            .stdout
            .lock()
            .ok()
            .and_then(|o| o.all.clone())
            .unwrap_or_default();
        // Orphans still running are ours now: their CPU so far is the tool's too.
        orphans.sample(self.pid());
        let own = self.rusage.unwrap_or_default();
        let (user, sys) = orphans.cpu_s();
        Ok(Finished {
            exit: self.exit.clone().unwrap_or_default(),
            stdout: out,
            cpu: Cpu {
                user_s: own.user_s + user,
                sys_s: own.sys_s + sys,
            },
            orphans_cpu_s: user + sys,
            run_wait_s: orphans.run_wait_s(),
        })
    }

    /// Ends the child's whole process group: SIGTERM, then SIGKILL after `grace`, then reaps.
    /// Descendants that left the group (setsid) are ended one by one. True when the child
    /// was still running `grace` after SIGTERM and had to be killed.
    pub fn stop(&mut self, grace: Duration) -> bool {
        self.stop_with(Signal::SIGTERM, grace)
    }

    /// As [`ChildProc::stop`] with `signal` first instead of SIGTERM (a server whose clean
    /// stop is another signal: PostgreSQL's SIGTERM waits for its clients, SIGINT does not).
    pub fn stop_with(&mut self, signal: Signal, grace: Duration) -> bool {
        let pgid = Pid::from_raw(self.pid());
        let tree = if self.exit.is_none() {
            descendants(self.pid())
        } else {
            Vec::new()
        };
        let mut ignored_term = false;
        if self.exited().is_none() {
            let _ = killpg(pgid, signal);
            let start = Instant::now();
            while self.exited().is_none() && start.elapsed() < grace {
                std::thread::sleep(Duration::from_millis(10));
            }
            ignored_term = self.exited().is_none();
        }
        // Stragglers of the group (forked workers) go too, even when the leader has exited.
        let _ = killpg(pgid, Signal::SIGKILL);
        for &pid in &tree {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        if self.exit.is_none() {
            self.reap(0);
        }
        if let Ok(mut t) = TRACKED.lock() {
            t.retain(|&p| p != self.pid());
        }
        self.drain_output(Duration::from_millis(500));
        reap_orphans_since(self.start_ticks);
        ignored_term
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.stop(Duration::from_millis(500));
    }
}

/// How often [`ChildProc::wait`] looks for orphaned descendants.
const ORPHAN_SAMPLE: Duration = Duration::from_millis(100);

/// A child's descendants that were reparented to this process (its subreaper) when their
/// parent ended before them: the child's wait4 rusage never includes them (nobody in its
/// tree waits for them), so their CPU is sampled from /proc.
#[derive(Debug, Default)]
struct Orphans {
    /// (pid, start ticks) of every process seen in the child's tree.
    tree: std::collections::BTreeSet<(i32, u64)>,
    /// Each orphan's last-seen CPU, its own plus its reaped children's, in ticks (user, sys).
    last: std::collections::BTreeMap<(i32, u64), (u64, u64)>,
    /// Each thread of the child's tree: its last-seen run-queue wait, in nanoseconds (None
    /// without schedstat).
    waits: std::collections::BTreeMap<(i32, i32), Option<u64>>,
}

impl Orphans {
    fn sample(&mut self, root: i32) {
        if let Some(tree) = procfs::sample_tree(Path::new("/proc"), root) {
            for (key, task) in tree.tasks {
                self.waits.insert(key, task.wait_ns);
            }
        }
        let stats = procfs::all_pid_stats(Path::new("/proc"));
        let parents = stats.iter().map(|(&pid, s)| (pid, s.ppid)).collect();
        if stats.contains_key(&root) {
            for pid in procfs::descendants(root, &parents).into_iter().skip(1) {
                self.tree.insert((pid, stats[&pid].start_ticks));
            }
        }
        let me = std::process::id() as i32;
        // An orphan may be reparented before a sample saw it in the tree: its process group
        // (the child's own, which its descendants inherit) still tells whose it is.
        for (&pid, s) in &stats {
            if s.ppid == me && s.pgrp == root && pid != root {
                self.tree.insert((pid, s.start_ticks));
            }
        }
        for &(pid, start) in &self.tree {
            match stats.get(&pid) {
                Some(s) if s.start_ticks == start && s.ppid == me && pid != root => {
                    self.last
                        .insert((pid, start), (s.utime + s.cutime, s.stime + s.cstime));
                }
                _ => {}
            }
        }
    }

    /// The tree's threads' run-queue wait at their last samples, in seconds.
    fn run_wait_s(&self) -> Option<f64> {
        let waits: Option<Vec<u64>> = self.waits.values().copied().collect();
        waits
            .filter(|w| !w.is_empty())
            .map(|w| w.iter().sum::<u64>() as f64 / 1e9)
    }

    /// The orphans' (user, system) CPU seconds at their last samples.
    fn cpu_s(&self) -> (f64, f64) {
        let ticks = procfs::ticks_per_s();
        let (u, s) = self
            .last
            .values()
            .fold((0, 0), |(u, s), &(du, ds)| (u + du, s + ds));
        (u as f64 / ticks, s as f64 / ticks)
    }
}

fn reader<R: Read + Send + 'static>(
    pipe: Option<R>,
    out: Arc<Mutex<Output>>,
    ready: Option<Regex>,
    matched: Arc<Mutex<Option<String>>>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let Some(pipe) = pipe else { return };
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            if ready.as_ref().is_some_and(|re| re.is_match(&line)) {
                if let Ok(mut m) = matched.lock() {
                    m.get_or_insert_with(|| line.clone());
                }
            }
            let Ok(mut o) = out.lock() else { break };
            if let Some(all) = &mut o.all {
                all.push_str(&line);
                all.push('\n');
            }
            o.tail.push_back(line);
            if o.tail.len() > TAIL_LINES {
                o.tail.pop_front();
            }
        }
    })
}

fn describe_exit(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "ended".into(),
    }
}

/// Ends and reaps processes that were reparented to us because we are their subreaper:
/// what a target forked and left behind, in any process group. Children we started
/// ourselves (tracked) are left to their owners; without the subreaper role nothing is
/// touched (a test process has children of its own).
pub fn reap_orphans() {
    reap_orphans_since(0);
}

/// [`reap_orphans`] for those that started at or after `since_ticks` (ticks since boot):
/// what a child left behind when it stops. An older orphan belongs to a process that
/// started before it (a target's neighbour outlives each step's client) and goes when
/// that one stops, or at the end of the run.
fn reap_orphans_since(since_ticks: u64) {
    if !SUBREAPER.load(Ordering::SeqCst) {
        return;
    }
    let tracked = TRACKED.lock().map(|t| t.clone()).unwrap_or_default();
    let me = std::process::id() as i32;
    let stats = procfs::all_pid_stats(Path::new("/proc"));
    let orphans = stats
        .iter()
        .filter(|&(pid, s)| s.ppid == me && !tracked.contains(pid) && s.start_ticks >= since_ticks);
    for (&pid, _) in orphans {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
    }
}

/// When `pid` started, in ticks since boot; 0 when /proc does not say (then every orphan
/// counts as younger).
fn start_ticks(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| procfs::parse_pid_stat(&t))
        .map_or(0, |s| s.start_ticks)
}

/// `root`'s descendants (not `root` itself), from /proc.
pub fn descendants(root: i32) -> Vec<i32> {
    let parents = procfs::parent_map(Path::new("/proc"));
    // procfs lists the root first.
    procfs::descendants(root, &parents).split_off(1)
}

/// Every process whose parent is `ppid` (from /proc).
pub fn children_of(ppid: i32) -> Vec<i32> {
    procfs::parent_map(Path::new("/proc"))
        .into_iter()
        .filter(|&(_, parent)| parent == ppid)
        .map(|(pid, _)| pid)
        .collect()
}

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// True when 127.0.0.1:port accepts a connection.
pub fn port_open(port: u16) -> bool {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// The signals a target may be stopped with (`stop_signal`), by the names specs use.
pub const STOP_SIGNALS: &[(&str, Signal)] = &[
    ("TERM", Signal::SIGTERM),
    ("INT", Signal::SIGINT),
    ("QUIT", Signal::SIGQUIT),
    ("HUP", Signal::SIGHUP),
    ("USR1", Signal::SIGUSR1),
    ("USR2", Signal::SIGUSR2),
    ("KILL", Signal::SIGKILL),
];

/// Why a child was stopped before it finished by itself.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WaitError {
    /// The run was stopped (Ctrl-C).
    #[error("{0} interrupted")]
    Interrupted(String),
    /// It ran past its limit.
    #[error("{name} did not finish within {limit:?}")]
    TooLong {
        /// What it is (`client command "wrk ..."`).
        name: String,
        /// How long it could take.
        limit: Duration,
    },
}

/// A stop signal not in [`STOP_SIGNALS`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown signal {0:?}: expected one of {names}", names = STOP_SIGNALS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "))]
pub struct UnknownSignal(String);

/// The signal named `name` (`INT` or `SIGINT`, any case), or an error listing the names.
pub fn parse_stop_signal(name: &str) -> Result<Signal, UnknownSignal> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    STOP_SIGNALS
        .iter()
        .find(|(n, _)| *n == bare)
        .map(|&(_, s)| s)
        .ok_or_else(|| UnknownSignal(name.to_string()))
}

/// The short name of `signal` as specs and notes write it (`INT` for SIGINT).
pub fn signal_name(signal: Signal) -> &'static str {
    signal.as_str().trim_start_matches("SIG")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sh -c script` (which prints "started" once ready), once it has said so (5 s at most).
    fn started_shell(name: &str, script: &str) -> ChildProc {
        let launch = Launch {
            name: name.into(),
            program: "sh".into(),
            args: vec!["-c".into(), script.into()],
            ready_log: Some(Regex::new("started").unwrap()),
            ..Launch::default()
        };
        let child = ChildProc::spawn(&launch).unwrap();
        let start = Instant::now();
        while !child.log_matched() && start.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        child
    }

    #[test]
    fn group_is_ended_and_tail_kept() {
        let mut child = started_shell("sleeper", "echo started >&2; sleep 30 & sleep 30");
        assert!(child.log_matched());
        let pid = child.pid();
        assert!(
            !child.stop(Duration::from_millis(200)),
            "sh ends on SIGTERM"
        );
        assert!(child.exited().is_some());
        assert!(child.output_tail().contains("started"));
        assert!(children_of(pid).is_empty());
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
        let mut child = started_shell("stubborn", "trap '' TERM; echo started >&2; sleep 30");
        let stopping = Instant::now();
        assert!(
            child.stop(Duration::from_millis(300)),
            "it had to be killed"
        );
        assert!(stopping.elapsed() >= Duration::from_millis(300));
        assert!(child.exited().is_some());
    }

    #[test]
    fn a_target_is_stopped_with_its_own_signal() {
        // Ignores TERM, exits on INT: stopped with INT it is not killed.
        let mut child = started_shell(
            "int-only",
            "trap '' TERM; trap 'exit 0' INT; echo started >&2; while :; do sleep 0.05; done",
        );
        let signal = parse_stop_signal("int").unwrap();
        assert!(
            !child.stop_with(signal, Duration::from_secs(3)),
            "INT ends it"
        );
        assert_eq!(child.exited().as_deref(), Some("exited with status 0"));
    }

    #[test]
    fn stop_signal_names_are_checked() {
        assert_eq!(parse_stop_signal("SIGQUIT"), Ok(Signal::SIGQUIT));
        assert_eq!(parse_stop_signal("TERM"), Ok(Signal::SIGTERM));
        assert_eq!(signal_name(Signal::SIGINT), "INT");
        let err = parse_stop_signal("STOP").unwrap_err().to_string();
        assert!(
            err.contains("\"STOP\"") && err.contains("TERM, INT, QUIT"),
            "{err}"
        );
    }
}
