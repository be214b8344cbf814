//! A target as the step loop starts it: how it is started (a built-in server, a command, or
//! one already running that is only watched), where it is ready, on which host it runs and
//! how it is stopped. The plan (`sweep::plan`) builds these from the spec.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use regex::Regex;

use crate::observe::extra::pids_by_comm;
use crate::observe::metrics::MetricsPlan;

/// How a target is started.
#[derive(Debug, Clone, PartialEq)]
pub enum TargetKind {
    /// `stairbench serve <args> --cpuset .. --port ..`.
    Builtin(Vec<String>),
    /// A shell command template.
    Command(String),
    /// A server already running (`url` with no builtin or command): nothing is started.
    Running(Running),
}

impl TargetKind {
    /// The server already runs: stairbench neither starts nor places it.
    pub fn is_running(&self) -> bool {
        matches!(self, TargetKind::Running(_))
    }
}

/// A target ready to launch.
#[derive(Debug, Clone)]
pub struct TargetPlan {
    /// Name in results.
    pub name: String,
    /// How it starts.
    pub kind: TargetKind,
    /// Fixed port, or a free one per launch.
    pub port: Option<u16>,
    /// Ready when the port accepts.
    pub ready_tcp: bool,
    /// Ready when a line of output matches.
    pub ready_log: Option<Regex>,
    /// Readiness deadline.
    pub ready_timeout: Duration,
    /// The port is read from the ready line's first capture group (built-in servers are
    /// started on port 0 and print `listening on 127.0.0.1:PORT`: no race for a port).
    pub port_from_log: bool,
    /// URL template of the built-in engine (`{port}` filled per launch).
    pub url: String,
    /// Requests in flight per connection (the target's own or the spec's).
    pub depth: usize,
    /// A gRPC target's own request message (its `body_file`'s bytes, or its `data`) and
    /// call shape; none: the client's.
    pub message: Option<crate::load::protocol::grpc::GrpcMessage>,
    /// The spec file's directory (`{spec_dir}`).
    pub spec_dir: PathBuf,
    /// Copies of the server started side by side (1: not split).
    pub instances: usize,
    /// Which copy this is, when the launcher starts one instance of a split target.
    pub instance: Option<usize>,
    /// Metrics the target reports itself (built-in msgr servers: a JSON file, always).
    pub metrics: Option<MetricsPlan>,
    /// The `[hosts]` entry it runs on (None: this machine; a kvd target spread over hosts:
    /// its rank 0's).
    pub host: Option<String>,
    /// A kvd target spread over hosts: rank j's host (empty: one process, on `host`).
    pub rank_hosts: Vec<String>,
    /// The signal that stops it (to its process group), SIGTERM unless the spec says.
    pub stop_signal: nix::sys::signal::Signal,
    /// How long it has to exit after `stop_signal` before it is killed.
    pub stop_grace: Duration,
}

/// How long a target has to exit after its stop signal before it is killed (`stop_timeout`).
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// Why a server already running without `pid`, `pidfile` or `process` has no server figures.
pub const NOT_OBSERVED: &str = "a server already running, with no pid, pidfile or process \
                                to observe it by: its CPU, threads and counters were not observed";

/// How a server already running is found at each step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watch {
    /// `pid = N`.
    Pid(i32),
    /// `pidfile = "..."` (relative to the spec's directory).
    PidFile(PathBuf),
    /// `process = "name"`: the process named so in /proc/PID/comm (the root of its tree when
    /// the matches are a master and its workers).
    Process(String),
}

impl Watch {
    /// The spec key it was written as.
    pub fn key(&self) -> &'static str {
        match self {
            Watch::Pid(_) => "pid",
            Watch::PidFile(_) => "pidfile",
            Watch::Process(_) => "process",
        }
    }

    /// How the dry run and the messages name it.
    pub fn describe(&self) -> String {
        match self {
            Watch::Pid(pid) => format!("pid {pid}"),
            Watch::PidFile(p) => format!("the pid in {}", p.display()),
            Watch::Process(name) => format!("the process named {name:?}"),
        }
    }

    /// The pid it names now, or why there is none.
    pub fn resolve(&self) -> Result<i32, WatchError> {
        match self {
            Watch::Pid(pid) if alive(*pid) => Ok(*pid),
            Watch::Pid(pid) => Err(WatchError::NotRunning(*pid)),
            Watch::PidFile(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| WatchError::PidFile {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
                let pid = text
                    .split_whitespace()
                    .next()
                    .and_then(|w| w.parse::<i32>().ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| WatchError::NoPid(path.clone()))?;
                if alive(pid) {
                    Ok(pid)
                } else {
                    Err(WatchError::StalePid {
                        path: path.clone(),
                        pid,
                    })
                }
            }
            Watch::Process(name) => process_root(name),
        }
    }
}

/// Why a running server's process cannot be found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WatchError {
    /// `pid = N` and N is not running.
    #[error("no process {0} is running")]
    NotRunning(i32),
    /// The pid file cannot be read (what the OS said).
    #[error("cannot read the pid file {}: {why}", path.display())]
    PidFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        why: String,
    },
    /// The pid file holds no positive number.
    #[error("the pid file {} holds no pid", .0.display())]
    NoPid(PathBuf),
    /// The pid file names a process that is gone.
    #[error("the pid file {} names pid {pid}, which is not running", path.display())]
    StalePid {
        /// The file.
        path: PathBuf,
        /// The pid in it.
        pid: i32,
    },
    /// No process by that name.
    #[error("no running process is named {0:?}")]
    NoProcess(String),
    /// Several separate process trees by that name.
    #[error("{} separate processes are named {name:?} (pids {}): give pid = N or pidfile = \"...\" to say which one is the server", .roots.len(), .roots.iter().map(i32::to_string).collect::<Vec<_>>().join(", "))]
    Ambiguous {
        /// The name.
        name: String,
        /// The roots of the trees.
        roots: Vec<i32>,
    },
}

/// The one process tree named `name`: the matches whose parent is not a match (nginx's
/// master, not its workers); an error when there is none or more than one.
fn process_root(name: &str) -> Result<i32, WatchError> {
    let pids: Vec<i32> = pids_by_comm(name)
        .into_iter()
        .filter(|p| alive(*p))
        .collect();
    let parents = crate::machine::procfs::parent_map(Path::new("/proc"));
    let roots: Vec<i32> = pids
        .iter()
        .copied()
        .filter(|p| parents.get(p).is_none_or(|pp| !pids.contains(pp)))
        .collect();
    match roots[..] {
        [] => Err(WatchError::NoProcess(name.into())),
        [root] => Ok(root),
        _ => Err(WatchError::Ambiguous {
            name: name.into(),
            roots,
        }),
    }
}

/// True when `pid` is a live process (not a zombie).
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, r)| r.split_whitespace().next());
    pid > 0 && state.is_some_and(|s| s != "Z" && s != "X")
}

/// A target already running, as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// Where it answers (host:port, resolved from its url).
    pub address: SocketAddr,
    /// How it is observed; None: not observed.
    pub watch: Option<Watch>,
}

/// True when a TCP connection to `addr` succeeds within a second.
pub fn answers(addr: &SocketAddr) -> bool {
    TcpStream::connect_timeout(addr, Duration::from_secs(1)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_huge_pid_is_not() {
        let me = std::process::id() as i32;
        assert_eq!(Watch::Pid(me).resolve(), Ok(me));
        let err = Watch::Pid(i32::MAX).resolve().unwrap_err().to_string();
        assert!(err.contains("no process"), "{err}");
    }

    #[test]
    fn a_pid_file_is_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("x.pid");
        std::fs::write(&file, format!("{}\n", std::process::id())).unwrap();
        assert_eq!(
            Watch::PidFile(file.clone()).resolve(),
            Ok(std::process::id() as i32)
        );
        std::fs::write(&file, "nothing").unwrap();
        let err = Watch::PidFile(file).resolve().unwrap_err().to_string();
        assert!(err.contains("holds no pid"), "{err}");
    }

    #[test]
    fn a_missing_process_name_is_an_error() {
        let err = Watch::Process("no-such-proc-x".into())
            .resolve()
            .unwrap_err()
            .to_string();
        assert!(err.contains("no running process is named"), "{err}");
    }
}
