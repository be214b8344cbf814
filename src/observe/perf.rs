//! `perf stat` attached to a process tree for the measured window, and its CSV output.
//!
//! perf is spawned as `perf stat -x, -e EVENTS -p PIDS -o FILE`, ended with SIGINT (on which it
//! prints its counts), and reaped with wait4 so its own CPU is known. An event the machine cannot
//! count reads `<not supported>` or `<not counted>` and is recorded as unavailable, never as 0.

use std::fs::File;
use std::os::fd::{AsFd as _, AsRawFd as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The software events, which work without a hardware PMU.
pub const SOFTWARE_EVENTS: [&str; 4] = [
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "task-clock",
];

/// The hardware events, counted where the machine has them.
pub const HARDWARE_EVENTS: [&str; 7] = [
    "cycles",
    "instructions",
    "ref-cycles",
    "stalled-cycles-frontend",
    "stalled-cycles-backend",
    "branch-misses",
    "LLC-loads",
];

pub use crate::record::observed::PerfCounters;

/// Parses `perf stat -x,` output. Lines of events perf could not count leave the field None
/// and are named in `note`.
pub fn parse_csv(text: &str) -> PerfCounters {
    let mut c = PerfCounters::default();
    let mut unavailable = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if line.starts_with('#') || f.len() < 3 {
            continue;
        }
        let event = normalize_event(f[2]);
        let value = f[0].trim();
        if value.starts_with('<') {
            unavailable.push(format!("{event} {value}"));
            continue;
        }
        let Ok(v) = value.parse::<f64>() else {
            continue;
        };
        if event == "task-clock" {
            add_f(&mut c.task_clock_ms, v);
            continue;
        }
        if let Some(slot) = slot(&mut c, &event) {
            // Hybrid CPUs print one line per core type (cpu_core/cycles/, cpu_atom/cycles/).
            *slot = Some(slot.unwrap_or(0) + v.round() as u64);
        }
    }
    if !unavailable.is_empty() {
        c.note = Some(format!("perf could not count: {}", unavailable.join(", ")));
    }
    c
}

fn add_f(slot: &mut Option<f64>, v: f64) {
    *slot = Some(slot.unwrap_or(0.0) + v);
}

/// "cpu_core/cycles/" → "cycles"; "cycles:u" → "cycles"; "cs" → "context-switches".
fn normalize_event(raw: &str) -> String {
    let name = raw.trim();
    let name = name
        .strip_suffix('/')
        .and_then(|n| n.rsplit('/').next())
        .unwrap_or(name);
    let name = name.split(':').next().unwrap_or(name);
    match name {
        "cs" => "context-switches".to_string(),
        "migrations" => "cpu-migrations".to_string(),
        "faults" => "page-faults".to_string(),
        other => other.to_string(),
    }
}

fn slot<'a>(c: &'a mut PerfCounters, event: &str) -> Option<&'a mut Option<u64>> {
    Some(match event {
        "context-switches" => &mut c.context_switches,
        "cpu-migrations" => &mut c.cpu_migrations,
        "page-faults" => &mut c.page_faults,
        "cycles" | "cpu-cycles" => &mut c.cycles,
        "instructions" => &mut c.instructions,
        "ref-cycles" => &mut c.ref_cycles,
        "stalled-cycles-frontend" => &mut c.stalled_cycles_frontend,
        "stalled-cycles-backend" => &mut c.stalled_cycles_backend,
        "branch-misses" => &mut c.branch_misses,
        "LLC-loads" => &mut c.llc_loads,
        _ => return None,
    })
}

/// A running `perf stat` attached to some pids.
#[derive(Debug)]
pub struct PerfStat {
    pid: i32,
    /// Our ends of perf's control pipe (we write `enable`) and ack pipe (it answers `ack`).
    control: Option<(std::os::fd::OwnedFd, std::os::fd::OwnedFd)>,
    /// Set once perf has been reaped, so its pid (which may be reused) is never signalled again.
    reaped: std::cell::Cell<bool>,
    out: tempfile_path::TempPath,
    err: tempfile_path::TempPath,
}

/// The counts of a finished `perf stat`, and the CPU perf itself used.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfResult {
    /// The counts.
    pub counters: PerfCounters,
    /// perf's own user + system CPU, in seconds.
    pub perf_cpu_s: f64,
}

/// Why perf cannot count here (said in the observation's note).
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    /// No `perf` on the PATH.
    #[error("perf is not installed (Debian: linux-perf)")]
    NotInstalled,
    /// perf, or a file or pipe it needs, could not be set up.
    #[error("{doing}: {source}")]
    Io {
        /// What failed ("cannot start perf", "cannot create FILE", ...).
        doing: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A pipe to control perf could not be made.
    #[error("cannot make a pipe for perf: {0}")]
    Pipe(nix::Error),
    /// Writing to perf's control pipe failed.
    #[error("perf control: {0}")]
    Control(nix::Error),
    /// perf exited while attaching (its first error line).
    #[error("perf stat exited ({status}): {message}")]
    Exited {
        /// How it ended.
        status: String,
        /// Its first error line, with a hint when perf_event_paranoid is in the way.
        message: String,
    },
    /// perf did not answer `enable`.
    #[error("perf stat did not acknowledge `enable` within 1 s")]
    NoAck,
    /// perf ran but does not count the event (its first field, e.g. `<not supported>`).
    #[error("perf reports {0}")]
    Unsupported(String),
    /// perf ran and failed (its first error line).
    #[error("{0}")]
    Failed(String),
}

impl PerfStat {
    /// Starts `perf stat` on `pids` with its counters attached but disabled, and waits (up to
    /// 2 s) until they are attached; [`PerfStat::enable`] starts the counting. perf's start-up
    /// (up to a second of CPU on a busy machine) thus happens before the measured window.
    /// Err holds why perf cannot count here, for the observation's note.
    pub fn start(pids: &[i32]) -> Result<PerfStat, PerfError> {
        let out = tempfile_path::TempPath::new("perf-out");
        let err = tempfile_path::TempPath::new("perf-err");
        let events: Vec<&str> = SOFTWARE_EVENTS
            .iter()
            .chain(&HARDWARE_EVENTS)
            .copied()
            .collect();
        let pid_list: Vec<String> = pids.iter().map(i32::to_string).collect();
        let stderr = File::create(&err.0).map_err(|source| PerfError::Io {
            doing: format!("cannot create {}", err.0.display()),
            source,
        })?;
        let mut cmd = Command::new("perf");
        cmd.args([
            "stat",
            "-x,",
            "-e",
            &events.join(","),
            "-p",
            &pid_list.join(","),
            "-o",
        ])
        .arg(&out.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
        let pipes = control_pipes()?;
        let (perf_ctl, perf_ack) = (pipes.perf_ctl.as_raw_fd(), pipes.perf_ack.as_raw_fd());
        cmd.args(["-D", "-1", "--control"])
            .arg(format!("fd:{perf_ctl},{perf_ack}"));
        // perf must not outlive us; SIGKILL on our death (of the spawning thread: see Observer).
        // SAFETY: prctl and fcntl are async-signal-safe and touch only the child.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // perf's ends of the pipes must survive exec.
                libc::fcntl(perf_ctl, libc::F_SETFD, 0);
                libc::fcntl(perf_ack, libc::F_SETFD, 0);
                Ok(())
            });
        }
        let child = cmd.spawn().map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => PerfError::NotInstalled,
            _ => PerfError::Io {
                doing: "cannot start perf".into(),
                source,
            },
        })?;
        drop((pipes.perf_ctl, pipes.perf_ack));
        let perf = PerfStat {
            pid: child.id() as i32,
            control: Some((pipes.our_ctl, pipes.our_ack)),
            reaped: std::cell::Cell::new(false),
            out,
            err,
        };
        perf.wait_attached()?;
        Ok(perf)
    }

    /// Polls perf's open perf_event descriptors until their number stops growing; fails with
    /// perf's message when it exits first (not permitted, no such process).
    fn wait_attached(&self) -> Result<(), PerfError> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut last = 0;
        while Instant::now() < deadline {
            if let Some(status) = self.try_reap() {
                let msg = std::fs::read_to_string(&self.err.0).unwrap_or_default();
                return Err(PerfError::Exited {
                    status,
                    message: first_error_line(&msg),
                });
            }
            let n = count_perf_fds(self.pid);
            if n > 0 && n == last {
                return Ok(());
            }
            last = n;
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    fn try_reap(&self) -> Option<String> {
        if self.reaped.get() {
            return Some("already reaped".into());
        }
        let mut status = 0;
        // SAFETY: plain wait4 on our own child with WNOHANG.
        let r = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, std::ptr::null_mut()) };
        if r == self.pid || r < 0 {
            self.reaped.set(true);
            return Some(format!("status {status}"));
        }
        None
    }

    /// Starts the counting (perf answers `ack` once its events are enabled, within 1 s).
    pub fn enable(&mut self) -> Result<(), PerfError> {
        let Some((ctl, ack)) = &self.control else {
            return Ok(());
        };
        nix::unistd::write(ctl, b"enable\n").map_err(PerfError::Control)?;
        let mut fds = [nix::poll::PollFd::new(
            ack.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16)) {
            Ok(n) if n > 0 => {
                let mut buf = [0u8; 16];
                let _ = nix::unistd::read(ack.as_raw_fd(), &mut buf);
                Ok(())
            }
            _ => Err(PerfError::NoAck),
        }
    }

    /// Ends perf with SIGINT (it prints its counts), reaps it and parses what it wrote.
    pub fn finish(self) -> PerfResult {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGINT,
        );
        let (reaped, perf_cpu_s) = reap_within(self.pid, Duration::from_secs(3));
        self.reaped.set(true);
        let text = std::fs::read_to_string(&self.out.0).unwrap_or_default();
        let mut counters = parse_csv(&text);
        if !reaped {
            counters.note =
                Some("perf stat did not end within 3 s of SIGINT and was killed".into());
        } else if text.trim().is_empty() {
            let msg = std::fs::read_to_string(&self.err.0).unwrap_or_default();
            counters.note = Some(format!(
                "perf stat printed no counts: {}",
                first_error_line(&msg)
            ));
        }
        PerfResult {
            counters,
            perf_cpu_s,
        }
    }
}

/// perf's and our ends of the control and ack pipes.
struct ControlPipes {
    perf_ctl: std::os::fd::OwnedFd,
    our_ctl: std::os::fd::OwnedFd,
    our_ack: std::os::fd::OwnedFd,
    perf_ack: std::os::fd::OwnedFd,
}

fn control_pipes() -> Result<ControlPipes, PerfError> {
    let flags = nix::fcntl::OFlag::O_CLOEXEC;
    let (perf_ctl, our_ctl) = nix::unistd::pipe2(flags).map_err(PerfError::Pipe)?;
    let (our_ack, perf_ack) = nix::unistd::pipe2(flags).map_err(PerfError::Pipe)?;
    Ok(ControlPipes {
        perf_ctl,
        our_ctl,
        our_ack,
        perf_ack,
    })
}

/// Waits for `pid` up to `limit`, then SIGKILLs it; returns (ended in time, its CPU seconds).
fn reap_within(pid: i32, limit: Duration) -> (bool, f64) {
    let deadline = Instant::now() + limit;
    let mut killed = false;
    loop {
        let mut status = 0;
        // SAFETY: rusage is plain data filled by the kernel.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if killed { 0 } else { libc::WNOHANG };
        // SAFETY: wait4 on our own child, writing into the locals above.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut usage) };
        if r == pid {
            return (!killed, tv_s(usage.ru_utime) + tv_s(usage.ru_stime));
        }
        if r < 0 {
            return (!killed, 0.0);
        }
        if Instant::now() >= deadline && !killed {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            killed = true;
            continue;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tv_s(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6
}

impl Drop for PerfStat {
    /// A PerfStat dropped without finish (an error path) is still ended and reaped.
    fn drop(&mut self) {
        if self.try_reap().is_none() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = reap_within(self.pid, Duration::from_secs(1));
            self.reaped.set(true);
        }
    }
}

fn count_perf_fds(pid: i32) -> usize {
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .map(|t| t.to_string_lossy().contains("perf_event"))
                .unwrap_or(false)
        })
        .count()
}

fn first_error_line(msg: &str) -> String {
    let line = msg
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no message");
    if msg.contains("perf_event_paranoid") {
        format!("{line} (not permitted: lower /proc/sys/kernel/perf_event_paranoid or run as root)")
    } else {
        line.to_string()
    }
}

/// Whether `perf stat -e EVENT true` counts EVENT here: Ok(()) or why not.
pub fn probe(event: &str) -> Result<(), PerfError> {
    let out = Command::new("perf")
        .args(["stat", "-x,", "-e", event, "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => PerfError::NotInstalled,
            _ => PerfError::Io {
                doing: "cannot run perf".into(),
                source,
            },
        })?;
    let text = String::from_utf8_lossy(&out.stderr);
    let line = text.lines().find(|l| l.contains(event));
    match line {
        Some(l) if !l.starts_with('<') && out.status.success() => Ok(()),
        Some(l) => Err(PerfError::Unsupported(
            l.split(',').next().unwrap_or(l).to_string(),
        )),
        None => Err(PerfError::Failed(first_error_line(&text))),
    }
}

/// Temporary file paths removed on drop (perf writes them; we only read them).
mod tempfile_path {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering};

    static NEXT: AtomicU64 = AtomicU64::new(0);

    #[derive(Debug)]
    pub struct TempPath(pub PathBuf);

    impl TempPath {
        pub fn new(stem: &str) -> TempPath {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let path =
                std::env::temp_dir().join(format!("stairbench-{stem}-{}-{n}", std::process::id()));
            TempPath(path)
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_and_unavailable_events() {
        let text = "# started on Sun Nov 22 05:00:00 2026\n\n\
                    812.33,msec,task-clock,812330000,100.00,0.812,CPUs utilized\n\
                    15234,,context-switches,812330000,100.00,18.754,K/sec\n\
                    12,,cpu-migrations,812330000,100.00,14.772,/sec\n\
                    340,,page-faults,812330000,100.00,418.550,/sec\n\
                    <not supported>,,cycles,0,100.00,,\n\
                    <not counted>,,instructions,0,0.00,,\n";
        let c = parse_csv(text);
        assert_eq!(c.task_clock_ms, Some(812.33));
        assert_eq!(c.context_switches, Some(15234));
        assert_eq!(c.cpu_migrations, Some(12));
        assert_eq!(c.page_faults, Some(340));
        assert_eq!(c.cycles, None);
        assert_eq!(c.instructions, None);
        assert_eq!(c.llc_loads, None);
        let note = c.note.unwrap();
        assert!(
            note.contains("cycles <not supported>") && note.contains("instructions <not counted>"),
            "{note}"
        );
    }

    #[test]
    fn hybrid_lines_add_up() {
        let text = "100,,cpu_core/cycles/,1,100.00,,\n50,,cpu_atom/cycles/,1,100.00,,\n300,,instructions:u,1,100.00,,\n";
        let c = parse_csv(text);
        assert_eq!(c.cycles, Some(150));
        assert_eq!(c.instructions, Some(300));
        assert!(c.note.is_none());
    }
}
