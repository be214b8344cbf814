//! A client group on another host: `stairbench load` started there through its engine, waited for
//! (stopped at once when the step's other groups fail, or past a deadline), and its JSON and
//! raw record brought back into the run directory's `hosts/` in one fetch. Also the
//! `stairbench load` arguments of a group and why a group gives no load (`GroupFailure`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::session::HostSession;
use crate::fleet::driver::StepRequest;
use crate::load::raw::RawLoad;
use crate::load::ProtoOptions;
use crate::record::load::LoadReport;
use crate::remote::engine::QUIET_BEFORE_CHECK;
use crate::remote::process::RemoteProcess;
use crate::remote::{Engine, RemoteError, RemoteStatus};

/// Why a client group gave no load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupFailure {
    /// Its host: ssh could not reach it, or its session was lost (counts toward marking the
    /// host down).
    Host(String),
    /// The load itself, or its files (the host answered).
    Load(String),
    /// Stopped because another group failed, or by Ctrl-C.
    Stopped,
}

/// When a group starts: the instant in its host's clock (`at`, ns), the lead it was planned
/// with, and where a remote group records how long its start took (ns, the slowest kept).
pub struct GroupStart<'a> {
    /// The common start in the group's host's clock, ns since the Unix epoch.
    pub at: i64,
    /// The common-start lead of the step.
    pub lead: Duration,
    /// The slowest remote start of the step so far, ns.
    pub slowest: &'a AtomicU64,
}

/// Time past the window and the request timeout a remote load may take to end before it is
/// stopped (its connections drain, it writes its files).
const OVERRUN: Duration = Duration::from_secs(30);

/// What a remote group's load gave, once fetched.
pub struct RemoteLoad {
    /// Its raw record (lines, window, histogram; the host's clock).
    pub raw: RawLoad,
    /// Its JSON report.
    pub report: LoadReport,
    /// When both files were written in `hosts/` here, ns since the Unix epoch (this clock).
    pub on_disk_ns: i64,
}

/// Runs `stairbench load` on the host, waits for it (ending it when `halt` is set or when it
/// overruns) and fetches its JSON and raw record into the run directory's `hosts/`.
pub fn remote_load(
    session: &HostSession,
    sub: &StepRequest,
    proto: &ProtoOptions,
    start: &GroupStart,
    halt: &AtomicBool,
) -> Result<RemoteLoad, GroupFailure> {
    let [json_name, raw_name] = file_names(&sub.step_id);
    let mut args = load_args(sub, proto);
    args.extend([
        "--start-at".into(),
        start.at.to_string(),
        "--json".into(),
        json_name.clone(),
        "--raw".into(),
        raw_name.clone(),
        "--quiet".into(),
    ]);
    let line = session.command(&args);
    let spawned = Instant::now();
    let engine = session.engine.clone();
    let mut process = RemoteProcess::spawn(engine, &line, "TERM", Duration::from_secs(2))
        .map_err(spawn_failure)?;
    let took_ns = spawned.elapsed().as_nanos() as u64;
    start.slowest.fetch_max(took_ns, Ordering::Relaxed);
    let window_end = Instant::now() + start.lead + sub.warmup + sub.duration;
    let deadline = window_end + sub.timeout + OVERRUN;
    let checks = HostChecks::new(&*session.engine, window_end);
    wait_for_load(&mut process, deadline, halt, checks)?;
    let texts = take_files(session, &hosts_dir(&sub.out_dir), &[&json_name, &raw_name])?;
    let on_disk_ns = crate::clock::now_ns();
    let report = serde_json::from_str(&texts[0])
        .map_err(|e| GroupFailure::Load(format!("{json_name} from the host: {e}")))?;
    let raw = crate::load::raw::read(&texts[1]).map_err(|e| GroupFailure::Load(e.to_string()))?;
    Ok(RemoteLoad {
        raw,
        report,
        on_disk_ns,
    })
}

/// A host that ssh cannot reach is the host's failure; anything else is the load's.
fn spawn_failure(e: RemoteError) -> GroupFailure {
    match e {
        RemoteError::Unreachable { .. } => GroupFailure::Host(e.to_string()),
        e => GroupFailure::Load(e.to_string()),
    }
}

/// The names of a group's JSON report and raw record, on the host and in `hosts/`.
fn file_names(sub_id: &str) -> [String; 2] {
    [format!("{sub_id}.load.json"), format!("{sub_id}.raw.jsonl")]
}

/// Waits for the remote `stairbench load` to exit 0, stopping it when `halt` is set or past
/// `deadline`. A lost channel (an ssh session) is the host's failure, with its reason said once.
fn wait_for_load(
    process: &mut RemoteProcess,
    deadline: Instant,
    halt: &AtomicBool,
    mut checks: HostChecks,
) -> Result<(), GroupFailure> {
    let status = loop {
        let status = process.wait_timeout(Duration::from_millis(20));
        if status != RemoteStatus::Running {
            break status;
        }
        // A host found lost gives the process up: its status says so at the next turn.
        checks.now();
        if halt.load(Ordering::Relaxed) {
            process.stop();
            return Err(GroupFailure::Stopped);
        }
        if Instant::now() > deadline {
            process.stop();
            return Err(GroupFailure::Load(
                "stairbench load did not end in time; it was stopped".into(),
            ));
        }
    };
    let why = format!("stairbench load: {}", process.ending(&status, 5, " | "));
    match status {
        RemoteStatus::Exited(0) => Ok(()),
        RemoteStatus::ConnectionLost(_) => Err(GroupFailure::Host(why)),
        _ => Err(GroupFailure::Load(why)),
    }
}

/// The checks of a group's host once its load is overdue: from the window's end plus
/// [`QUIET_BEFORE_CHECK`], then twice as long after each check that finds it well (srun
/// learns of a lost node only once Slurm declares it down).
struct HostChecks<'a> {
    engine: &'a dyn Engine,
    next: Instant,
    quiet: Duration,
}

impl<'a> HostChecks<'a> {
    fn new(engine: &'a dyn Engine, window_end: Instant) -> Self {
        HostChecks {
            engine,
            next: window_end + QUIET_BEFORE_CHECK,
            quiet: QUIET_BEFORE_CHECK,
        }
    }

    /// Checks the host when a check is due.
    fn now(&mut self) {
        if Instant::now() < self.next {
            return;
        }
        let _ = self.engine.answers();
        self.quiet *= 2;
        self.next = Instant::now() + self.quiet;
    }
}

/// Brings `names` from the host's working directory into `dir` in one fetch (they are
/// removed there) and returns their text.
fn take_files(
    session: &HostSession,
    dir: &Path,
    names: &[&str],
) -> Result<Vec<String>, GroupFailure> {
    let bodies = session.engine.fetch(names).map_err(|e| match e {
        RemoteError::Unreachable { .. } => GroupFailure::Host(format!("fetching its files: {e}")),
        e => GroupFailure::Load(format!("fetching its files: {e}")),
    })?;
    let local = |e: std::io::Error, path: &Path| {
        GroupFailure::Load(format!("writing {}: {e}", path.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| local(e, dir))?;
    let mut texts = Vec::new();
    for (name, body) in names.iter().zip(bodies) {
        let path = dir.join(name);
        std::fs::write(&path, &body).map_err(|e| local(e, &path))?;
        texts.push(String::from_utf8_lossy(&body).into_owned());
    }
    Ok(texts)
}

/// Where the fetched files of a step's groups go.
pub fn hosts_dir(out_dir: &Path) -> PathBuf {
    out_dir.join("hosts")
}

/// After the step: a failed step's fetched files are renamed `<group>.partial.load.json` and
/// `<group>.partial.raw.jsonl` (nothing that looks like a result beside a failed line); a step
/// that completed removes an earlier attempt's partial ones.
pub fn settle_fetched(out_dir: &Path, subs: &[StepRequest], complete: bool) {
    let dir = hosts_dir(out_dir);
    for sub in subs {
        let partial = file_names(&format!("{}.partial", sub.step_id));
        for (name, partial) in file_names(&sub.step_id).iter().zip(partial) {
            let (path, partial) = (dir.join(name), dir.join(partial));
            if complete {
                let _ = std::fs::remove_file(&partial);
            } else if path.exists() {
                let _ = std::fs::rename(&path, &partial);
            }
        }
    }
}

/// `stairbench load` arguments for a group's share of a step.
pub fn load_args(sub: &StepRequest, proto: &ProtoOptions) -> Vec<String> {
    let secs = |d: Duration| format!("{}ms", d.as_millis());
    let mut args: Vec<String> = vec![
        "load".into(),
        sub.url.clone(),
        "--connections".into(),
        sub.connections.to_string(),
        "--threads".into(),
        sub.threads.to_string(),
        "--duration".into(),
        secs(sub.duration),
        "--warmup".into(),
        secs(sub.warmup),
        "--timeout".into(),
        secs(sub.timeout),
        "--depth".into(),
        sub.depth.to_string(),
    ];
    if !sub.client_cpus.is_empty() {
        args.extend(["--cpuset".into(), crate::cpuset::format(&sub.client_cpus)]);
    }
    if let Some(r) = sub.rate_rps {
        args.extend(["--rate".into(), r.to_string()]);
    }
    args.extend(["--method".into(), proto.method.clone()]);
    for h in &proto.headers {
        args.extend(["--header".into(), h.clone()]);
    }
    if let Some(b) = &proto.body {
        args.extend(["--body".into(), b.clone()]);
    }
    let distribution = match proto.distribution {
        crate::load::Distribution::Uniform => "uniform".to_string(),
        crate::load::Distribution::Zipf(t) => format!("zipf:{t}"),
    };
    args.extend([
        "--keys".into(),
        proto.keys.to_string(),
        "--read-ratio".into(),
        proto.read_ratio.to_string(),
        "--value-size".into(),
        proto.value_size.to_string(),
        "--distribution".into(),
        distribution,
        "--seed".into(),
        proto.seed.to_string(),
        "--msg-size".into(),
        proto.msg_size.to_string(),
        // The step records the group's errors; the exit status must only say it ran.
        "--max-error-ratio".into(),
        "1".into(),
    ]);
    if proto.preload {
        args.push("--preload".into());
    }
    if proto.memcache_commands == crate::load::protocol::memcache::Commands::Meta {
        args.extend(["--memcache-commands".into(), "meta".into()]);
    }
    if proto.tls.insecure {
        args.push("--insecure".into());
    }
    args
}
