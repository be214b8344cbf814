//! Servers already running: a target with `url` and neither `builtin` nor `command`.
//! stairbench starts nothing; placements apply to the client only. Before the first step the
//! server must answer at its address; it is observed when the spec says how (`pid`,
//! `pidfile` or `process`, resolved again at each step), and otherwise its server-side
//! figures are recorded as not observed (null, with the reason in `server_not_observed`).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Plan, TargetKind};
use crate::observe::extra::pids_by_comm;
use crate::sweep::spec::{SpecError, SpecFile, TargetSpec};

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
    pub fn resolve(&self) -> Result<i32, String> {
        match self {
            Watch::Pid(pid) if alive(*pid) => Ok(*pid),
            Watch::Pid(pid) => Err(format!("no process {pid} is running")),
            Watch::PidFile(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read the pid file {}: {e}", path.display()))?;
                let pid = text
                    .split_whitespace()
                    .next()
                    .and_then(|w| w.parse::<i32>().ok())
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("the pid file {} holds no pid", path.display()))?;
                if alive(pid) {
                    Ok(pid)
                } else {
                    Err(format!(
                        "the pid file {} names pid {pid}, which is not running",
                        path.display()
                    ))
                }
            }
            Watch::Process(name) => process_root(name),
        }
    }
}

/// The one process tree named `name`: the matches whose parent is not a match (nginx's
/// master, not its workers); an error when there is none or more than one.
fn process_root(name: &str) -> Result<i32, String> {
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
        [] => Err(format!("no running process is named {name:?}")),
        [root] => Ok(root),
        _ => Err(format!(
            "{} separate processes are named {name:?} (pids {}): give pid = N or pidfile = \"...\" to say which one is the server",
            roots.len(),
            roots
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// True when `pid` is a live process (not a zombie).
pub(crate) fn alive(pid: i32) -> bool {
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

/// Plans target `i` of the spec as a server already running (its url and no command).
pub fn plan_running(spec: &SpecFile, i: usize, t: &TargetSpec) -> Result<Running, SpecError> {
    let at = |key: &str, msg: String| spec.error_at(&["targets", &i.to_string(), key], msg);
    let Some(url) = &t.url else {
        return Err(at(
            "name",
            format!(
                "target {:?} has neither builtin = \"...\", command = \"...\" nor url = \"...\" (a server already running)",
                t.name
            ),
        ));
    };
    let refused = [
        ("port", t.port.is_some(), "the url names the port"),
        ("ready", t.ready.is_some(), "it is checked to answer at its url before the first step"),
        ("instances", t.instances.is_some_and(|n| n != 1), "it cannot be split into instances"),
        ("host", t.host.is_some(), "observing a server already running on another host is not supported yet: leave host out, the url names its address (its server-side figures are then not observed)"),
    ];
    if let Some((key, _, why)) = refused.iter().find(|(_, given, _)| *given) {
        return Err(at(
            key,
            format!(
                "a server already running (url with no builtin or command) takes no {key}: {why}"
            ),
        ));
    }
    if t.metrics.as_ref().is_some_and(|m| m.file.is_some()) {
        return Err(at("metrics", "a server already running cannot be given a {metrics} file: use metrics = { url = \"...\" }".into()));
    }
    if url.contains('{') {
        return Err(at("url", format!("{url:?}: a server already running has a fixed address, the url takes no placeholders ({{port}}, {{host}})")));
    }
    let target = crate::load::target::Target::parse(url, &crate::load::ProtoOptions::default())
        .map_err(|e| at("url", format!("{e} (a server already running is reached over TCP: http, https, h2c, redis or msgr)")))?;
    let watch = watch(spec, i, t)?;
    if watch.is_none() && spec.spec.profile.is_some() {
        return Err(spec.error_at(&["profile"], format!("profile passes record the server's process: target {:?} (a server already running) needs pid, pidfile or process to say which", t.name)));
    }
    Ok(Running {
        address: target.addr,
        watch,
    })
}

/// The observation key of target `i`: at most one of `pid`, `pidfile`, `process`.
fn watch(spec: &SpecFile, i: usize, t: &TargetSpec) -> Result<Option<Watch>, SpecError> {
    let dir = super::spec_dir(spec);
    let mut given = Vec::new();
    if let Some(pid) = t.pid {
        given.push(Watch::Pid(pid));
    }
    if let Some(p) = &t.pidfile {
        given.push(Watch::PidFile(dir.join(p)));
    }
    if let Some(name) = &t.process {
        given.push(Watch::Process(name.clone()));
    }
    match given.len() {
        0 | 1 => Ok(given.pop()),
        _ => Err(spec.error_at(
            &["targets", &i.to_string(), given[1].key()],
            "give one of pid, pidfile or process, not several",
        )),
    }
}

/// Refuses `pid`, `pidfile` and `process` on a target that stairbench starts itself (it
/// observes the process it started).
pub fn refuse_watch(spec: &SpecFile, i: usize, t: &TargetSpec) -> Result<(), SpecError> {
    let keys = [
        ("pid", t.pid.is_some()),
        ("pidfile", t.pidfile.is_some()),
        ("process", t.process.is_some()),
    ];
    match keys.iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(spec.error_at(
            &["targets", &i.to_string(), key],
            format!("{key} observes a server already running (url with no builtin or command); a target stairbench starts is observed as started"),
        )),
        None => Ok(()),
    }
}

/// Before any load: every server already running answers at its address and the process
/// that observes it exists; each error names the target, the address or key, and its place
/// in the spec.
pub fn preflight(plan: &Plan) -> Result<(), SpecError> {
    for (i, t) in plan.targets.iter().enumerate() {
        let TargetKind::Running(r) = &t.kind else {
            continue;
        };
        let at =
            |key: &str, msg: String| plan.spec.error_at(&["targets", &i.to_string(), key], msg);
        if !answers(&r.address) {
            return Err(at("url", format!("nothing answers at {} (target {:?}, a server already running): start it, or correct the url", r.address, t.name)));
        }
        if let Some(w) = &r.watch {
            w.resolve()
                .map_err(|why| at(w.key(), format!("target {:?}: {why}", t.name)))?;
        }
    }
    Ok(())
}

/// True when a TCP connection to `addr` succeeds within a second.
pub(crate) fn answers(addr: &SocketAddr) -> bool {
    TcpStream::connect_timeout(addr, Duration::from_secs(1)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_huge_pid_is_not() {
        let me = std::process::id() as i32;
        assert_eq!(Watch::Pid(me).resolve(), Ok(me));
        let err = Watch::Pid(i32::MAX).resolve().unwrap_err();
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
        let err = Watch::PidFile(file).resolve().unwrap_err();
        assert!(err.contains("holds no pid"), "{err}");
    }

    #[test]
    fn a_missing_process_name_is_an_error() {
        let err = Watch::Process("no-such-proc-x".into())
            .resolve()
            .unwrap_err();
        assert!(err.contains("no running process is named"), "{err}");
    }
}
