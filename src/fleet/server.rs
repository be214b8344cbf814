//! Targets as processes: launched pinned to their cpuset, probed until ready, watched for
//! an early death (reported with the tail of their output), ended as a process group.

pub mod running;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::driver::fill;
use super::error::LaunchError;
use super::target::{TargetKind, TargetPlan};
use crate::observe::metrics::{metrics_path, MetricsPlan, MetricsSource};
use crate::observe::step::ServerExtras;
use crate::placement::CpuPair;
use crate::process::{free_port, port_open, ChildProc, Launch};

/// A running target.
pub trait Server {
    /// Its process id (for the observers), when it is a process.
    fn pid(&self) -> Option<i32>;
    /// The TCP port it serves on.
    fn port(&self) -> u16;
    /// Why it is gone, with the tail of its output, if it has died.
    fn died(&mut self) -> Option<String>;
    /// Ends it and everything it started; says so when it ignored SIGTERM and was killed.
    fn stop(&mut self) -> Option<String>;
    /// Its instances (when split) and its metrics sources.
    fn extras(&self) -> ServerExtras {
        ServerExtras::default()
    }
    /// Whether it is gone because its host was lost (a remote target whose engine's channel ended: its ssh session, ...).
    fn host_lost(&mut self) -> bool {
        false
    }
    /// The CPUs it runs on when they are its own, not the placement's (a server already
    /// running: its process tree's affinity, empty when it is not observed).
    fn own_cpus(&self) -> Option<Vec<usize>> {
        None
    }
    /// Why its server-side figures are not observed, when they are not.
    fn not_observed(&self) -> Option<String> {
        None
    }
}

pub use super::target::STOP_GRACE;

/// Starts targets.
pub trait Launcher {
    /// Starts `target` on `cpus.server` and waits until it is ready.
    fn launch(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        stop: &AtomicBool,
    ) -> Result<Box<dyn Server>, LaunchError>;
    /// The command line it would run (for `--dry-run`).
    fn describe(&self, target: &TargetPlan, cpus: &CpuPair, clients: usize) -> String;
    /// `target`'s host was lost during a step (`why`): the next start there is its last try.
    fn host_lost(&mut self, target: &TargetPlan, why: &str) {
        let _ = (target, why);
    }
    /// Why `target`'s host is marked down (its steps then fail at once), if it is.
    fn host_down(&self, target: &TargetPlan) -> Option<String> {
        let _ = target;
        None
    }
    /// Notes for the run (a host marked down), each once.
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// How an error ends with what a process printed: "; its output ends with:" and its last
/// lines, or "; it printed nothing" (no colon left hanging over an empty tail).
pub fn output_ends(tail: &str) -> String {
    if tail.trim().is_empty() {
        "; it printed nothing".to_string()
    } else {
        format!("; its output ends with:\n{tail}")
    }
}

/// The placeholders a target's `command` takes.
pub const TARGET_PLACEHOLDERS: &[&str] = &[
    "cpuset", "threads", "port", "clients", "out", "spec_dir", "metrics",
];

/// Launches targets as child processes.
#[derive(Debug, Clone)]
pub struct ProcessLauncher {
    /// The stairbench binary for built-in servers.
    pub stairbench_bin: PathBuf,
    /// The run directory (`{out}`).
    pub out_dir: PathBuf,
}

impl ProcessLauncher {
    /// The run directory's file for the target's `{metrics}`.
    fn metrics_file(&self, target: &TargetPlan) -> PathBuf {
        let ext = target.metrics.as_ref().map_or("json", |m| m.extension());
        metrics_path(&self.out_dir, &target.name, target.instance, ext)
    }

    /// The command line of `target` (a built-in server pins itself with --cpuset; a command is
    /// pinned by whoever starts it).
    pub fn argv(
        &self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        port: &str,
    ) -> Vec<String> {
        let cpuset = crate::cpuset::format(&cpus.server);
        let metrics = self.metrics_file(target).display().to_string();
        match &target.kind {
            TargetKind::Builtin(args) => {
                let mut argv = vec![self.stairbench_bin.display().to_string(), "serve".into()];
                argv.extend(args.iter().cloned());
                if !args.iter().any(|a| a == "--threads") {
                    argv.extend(["--threads".into(), cpus.server.len().to_string()]);
                }
                if let Some(MetricsPlan::File { template, .. }) = &target.metrics {
                    let writes_metrics = args[0] == "msgr" || args[0] == "kvd";
                    if writes_metrics && !args.iter().any(|a| a == "--metrics") {
                        argv.extend(["--metrics".into(), template.replace("{metrics}", &metrics)]);
                    }
                }
                argv.extend(["--cpuset".into(), cpuset, "--port".into(), port.to_string()]);
                argv
            }
            TargetKind::Command(template) => {
                let line = fill(
                    template,
                    &[
                        ("cpuset", cpuset),
                        ("threads", cpus.server.len().to_string()),
                        ("port", port.to_string()),
                        ("clients", clients.to_string()),
                        ("out", self.out_dir.display().to_string()),
                        ("spec_dir", target.spec_dir.display().to_string()),
                        ("metrics", metrics),
                    ],
                );
                vec!["sh".into(), "-c".into(), format!("exec {line}")]
            }
            TargetKind::Running(r) => vec![running::describe(r)],
        }
    }
}

impl Launcher for ProcessLauncher {
    fn launch(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        stop: &AtomicBool,
    ) -> Result<Box<dyn Server>, LaunchError> {
        self.start(target, cpus, clients, stop)
            .map_err(|e| LaunchError::Start(e.to_string()))
    }

    fn describe(&self, target: &TargetPlan, cpus: &CpuPair, clients: usize) -> String {
        if let TargetKind::Running(r) = &target.kind {
            return running::describe(r);
        }
        let port = match target.port {
            Some(p) => p.to_string(),
            None if target.port_from_log => "0".to_string(),
            None => "<free port>".to_string(),
        };
        self.argv(target, cpus, clients, &port).join(" ")
    }
}

/// Why a target process did not start or become ready.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A server already running could not be used.
    #[error(transparent)]
    Attach(#[from] running::AttachError),
    /// Its fixed port is taken.
    #[error("port {port} of target {target:?} is already taken by another process: stop it or leave `port` out so a free one is chosen")]
    PortTaken {
        /// The port.
        port: u16,
        /// The target's name.
        target: String,
    },
    /// No port could be picked for it.
    #[error("no free TCP port on 127.0.0.1: {0}")]
    NoFreePort(std::io::Error),
    /// Its command could not be spawned.
    #[error("cannot start target {target:?} ({command}): {source}")]
    Spawn {
        /// The target's name.
        target: String,
        /// Its command line.
        command: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Its ready line holds no port.
    #[error("target {target:?} said {line:?}, which names no port")]
    NoPort {
        /// The target's name.
        target: String,
        /// The line that matched `ready_log`.
        line: String,
    },
    /// It exited before it was ready: how, a hint, and the end of its output.
    #[error("target {target:?} {exit} before it was ready{hint}{tail}")]
    Exited {
        /// The target's name.
        target: String,
        /// How it ended (`exited with status 1`).
        exit: String,
        /// A hint when it exited cleanly (it daemonized).
        hint: &'static str,
        /// The end of its output, as [`output_ends`] says it.
        tail: String,
    },
    /// The run was stopped while waiting.
    #[error("interrupted")]
    Interrupted,
    /// It did not become ready in time.
    #[error("target {target:?} was not ready within {timeout:?} ({what}){tail}")]
    NotReady {
        /// The target's name.
        target: String,
        /// Its `ready_timeout`.
        timeout: Duration,
        /// What was missing.
        what: String,
        /// The end of its output.
        tail: String,
    },
}

impl ProcessLauncher {
    /// Starts `target` (see [`Launcher::launch`]).
    fn start(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        stop: &AtomicBool,
    ) -> Result<Box<dyn Server>, StartError> {
        if let TargetKind::Running(r) = &target.kind {
            return Ok(running::attach(target, r)?);
        }
        let port = match target.port {
            None if target.port_from_log => 0,
            Some(p) if port_open(p) => {
                return Err(StartError::PortTaken {
                    port: p,
                    target: target.name.clone(),
                })
            }
            Some(p) => p,
            None => free_port().map_err(StartError::NoFreePort)?,
        };
        let argv = self.argv(target, cpus, clients, &port.to_string());
        if let Some(m) = &target.metrics {
            let file = self.metrics_file(target);
            if let Some(dir) = file.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            // A file left by an earlier launch would be read as this one's.
            let _ = std::fs::remove_file(&file);
            let source = m.resolve(&file, 0);
            for (_, s) in spawned_ranks_metrics(target, "", &source) {
                if let MetricsSource::File { path, .. } = s {
                    let _ = std::fs::remove_file(path);
                }
            }
        }
        let launch = Launch {
            name: format!("target {:?}", target.name),
            program: argv[0].clone(),
            args: argv[1..].to_vec(),
            cpus: Some(cpus.server.clone()),
            ready_log: target.ready_log.clone(),
            keep_stdout: false,
        };
        let child = ChildProc::spawn(&launch).map_err(|source| StartError::Spawn {
            target: target.name.clone(),
            command: argv.join(" "),
            source,
        })?;
        let mut server = ProcessServer {
            child,
            port,
            metrics: Vec::new(),
            stop: (target.stop_signal, target.stop_grace),
        };
        wait_ready(&mut server, target, stop)?;
        if target.port_from_log {
            server.port = listening_port(&server.child, target)?;
        }
        if let Some(m) = &target.metrics {
            let label = match target.instance {
                Some(k) => instance_label(&target.name, k),
                None => target.name.clone(),
            };
            let source = m.resolve(&self.metrics_file(target), server.port);
            server.metrics = spawned_ranks_metrics(target, &label, &source);
            server.metrics.insert(0, (label, source));
        }
        Ok(Box::new(server))
    }
}

/// The port in the ready line's first capture group.
fn listening_port(child: &ChildProc, target: &TargetPlan) -> Result<u16, StartError> {
    let line = child.matched_line().unwrap_or_default();
    target
        .ready_log
        .as_ref()
        .and_then(|re| re.captures(&line))
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok())
        .ok_or_else(|| StartError::NoPort {
            target: target.name.clone(),
            line: line.clone(),
        })
}

fn wait_ready(
    server: &mut ProcessServer,
    target: &TargetPlan,
    stop: &AtomicBool,
) -> Result<(), StartError> {
    let start = Instant::now();
    loop {
        if let Some(exit) = server.child.exited() {
            let hint = if exit.ends_with("status 0") {
                " (a target must stay in the foreground: does it daemonize? nginx needs `daemon off`, redis `--daemonize no`)"
            } else {
                ""
            };
            return Err(StartError::Exited {
                target: target.name.clone(),
                exit,
                hint,
                tail: output_ends(&server.child.output_tail()),
            });
        }
        let log_ok = target.ready_log.is_none() || server.child.log_matched();
        let probe = ready_address(&target.url, server.port);
        let tcp_ok = !target.ready_tcp || address_open(&probe);
        if log_ok && tcp_ok {
            return Ok(());
        }
        if stop.load(Ordering::Relaxed) {
            return Err(StartError::Interrupted);
        }
        if start.elapsed() > target.ready_timeout {
            let what = if log_ok {
                format!("nothing answered at {probe} (from url {})", target.url)
            } else {
                "the log line never appeared".into()
            };
            return Err(StartError::NotReady {
                target: target.name.clone(),
                timeout: target.ready_timeout,
                what,
                tail: output_ends(&server.child.output_tail()),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The address readiness probes: the url's host and port as the user wrote them, with
/// `{port}` replaced by the port picked, so the error names what the user can check;
/// 127.0.0.1:PORT when the url names no host (shm://, a bare name).
fn ready_address(url: &str, port: u16) -> String {
    let authority = url
        .split_once("://")
        .map_or("", |(_, rest)| rest.split(['/', '?']).next().unwrap_or(""))
        .replace("{port}", &port.to_string());
    match authority.rsplit_once(':') {
        Some((host, p)) if !host.is_empty() && p.parse::<u16>().is_ok() => authority,
        _ => format!("127.0.0.1:{port}"),
    }
}

/// True when a TCP connection to `addr` (host:port, names resolved) succeeds.
fn address_open(addr: &str) -> bool {
    use std::net::ToSocketAddrs;
    let Ok(addrs) = addr.to_socket_addrs() else {
        return false;
    };
    addrs
        .into_iter()
        .any(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_millis(200)).is_ok())
}

/// A target running as a child process.
#[derive(Debug)]
pub struct ProcessServer {
    child: ChildProc,
    port: u16,
    metrics: Vec<(String, MetricsSource)>,
    /// The signal that stops it and how long it may take.
    stop: (nix::sys::signal::Signal, Duration),
}

/// The metrics files of the ranks a built-in kvd target with `--spawn-peers` starts itself
/// (rank j writes FILE.rj), labelled `LABEL.rj`, so every rank's daemon figures reach the step.
fn spawned_ranks_metrics(
    target: &TargetPlan,
    label: &str,
    source: &MetricsSource,
) -> Vec<(String, MetricsSource)> {
    let (TargetKind::Builtin(args), MetricsSource::File { path, format }) = (&target.kind, source)
    else {
        return Vec::new();
    };
    if args[0] != "kvd" || !args.iter().any(|a| a == "--spawn-peers") {
        return Vec::new();
    }
    let ranks = args
        .iter()
        .position(|a| a == "--ranks")
        .and_then(|i| args.get(i + 1))
        .map_or(1, |list| list.split(',').count());
    (1..ranks)
        .map(|j| {
            let mut file = path.clone().into_os_string();
            file.push(format!(".r{j}"));
            let source = MetricsSource::File {
                path: file.into(),
                format: *format,
            };
            (format!("{label}.r{j}"), source)
        })
        .collect()
}

impl Server for ProcessServer {
    fn pid(&self) -> Option<i32> {
        Some(self.child.pid())
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn died(&mut self) -> Option<String> {
        let exit = self.child.exited()?;
        Some(format!(
            "{} {exit}{}",
            self.child.name(),
            output_ends(&self.child.output_tail())
        ))
    }
    fn stop(&mut self) -> Option<String> {
        let (signal, grace) = self.stop;
        self.child.stop_with(signal, grace).then(|| {
            format!(
                "{} ignored SIG{} for {} and was killed (SIGKILL); if another signal stops it \
                 cleanly, set stop_signal (and stop_timeout) on the target",
                self.child.name(),
                crate::process::signal_name(signal),
                crate::units::format_duration(grace)
            )
        })
    }
    fn extras(&self) -> ServerExtras {
        ServerExtras {
            instances: Vec::new(),
            metrics: self.metrics.clone(),
            remote: None,
        }
    }
}

/// A pretend target for tests of the step loop: it can die at a chosen launch count.
#[derive(Debug, Default)]
pub struct FakeLauncher {
    /// Launches so far.
    pub launches: usize,
    /// The launch (1-based) that fails to start.
    pub fail_launch: Option<usize>,
    /// Cpusets of each launch.
    pub cpus: Vec<CpuPair>,
}

struct FakeServer;

impl Server for FakeServer {
    fn pid(&self) -> Option<i32> {
        None
    }
    fn port(&self) -> u16 {
        1
    }
    fn died(&mut self) -> Option<String> {
        None
    }
    fn stop(&mut self) -> Option<String> {
        None
    }
}

impl Launcher for FakeLauncher {
    fn launch(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        _: usize,
        _: &AtomicBool,
    ) -> Result<Box<dyn Server>, LaunchError> {
        self.launches += 1;
        self.cpus.push(cpus.clone());
        if self.fail_launch == Some(self.launches) {
            return Err(LaunchError::Start(format!(
                "target {:?} exited with status 1 before it was ready",
                target.name
            )));
        }
        Ok(Box::new(FakeServer))
    }
    fn describe(&self, target: &TargetPlan, _: &CpuPair, _: usize) -> String {
        format!("(fake) {}", target.name)
    }
}

/// The default stairbench binary: this executable when it is stairbench itself.
pub fn default_stairbench_bin() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let name = exe.file_name()?.to_str()?;
    (name == "stairbench").then_some(exe)
}

/// The name of instance `k` of `target` in results and file names.
pub fn instance_label(target: &str, k: usize) -> String {
    format!("{target}.i{k}")
}

#[cfg(test)]
mod tests {
    use super::ready_address;

    #[test]
    fn ready_address_is_the_users_url_with_the_port_filled_in() {
        assert_eq!(
            ready_address("http://127.0.0.1:{port}/", 4242),
            "127.0.0.1:4242"
        );
        assert_eq!(ready_address("redis://[::1]:{port}", 7), "[::1]:7");
        assert_eq!(
            ready_address("http://localhost:8080/x", 7),
            "localhost:8080"
        );
        assert_eq!(ready_address("shm://ring", 7), "127.0.0.1:7");
    }
}
