//! Nodes of a Slurm allocation as hosts (`slurm://NODE`, or `slurm://+K` for the allocation's
//! K-th node counted from 0): every command is a job step of the allocation stairbench runs
//! in, started with `srun --jobid=$SLURM_JOB_ID --nodelist=NODE --nodes=1 --ntasks=1
//! --overlap --cpu-bind=none sh -c LINE`. srun carries the step's stdin and stdout, so a
//! step is a channel like an ssh session: process trees, clock probes and observers work
//! over it unchanged.
//!
//! Why `--overlap`: a server, its observer and a client group share a node's CPUs as the
//! user placed them (stairbench pins inside the step), and no step waits for another's
//! resources. `--cpu-bind=none` (on clusters whose task plugin binds): Slurm's own binding
//! would fight stairbench's placements.
//!
//! Every step is named `stairbench-PID` (this process's id), so `squeue -s` tells them apart.
//! A step whose local srun ends (stopped, killed) is ended by Slurm itself: nothing of a run
//! outlives it in the allocation.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::engine::{CopyOutcome, Engine, HostLost, ProbeFailure, RemoteOutput, REMOTE_BIN};
use super::host::{HostError, HostSpec, DEFAULT_WORKDIR};
use super::shell::sh_c;
use super::ssh::{take_files_line, taken_files};
use super::RemoteError;

/// The URL scheme.
pub const SCHEME: &str = "slurm";

/// How long a command run to its end (`Engine::run`) may take, step creation included.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `scontrol`, `squeue` and `scancel` may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(20);

/// How long broadcasting the binary (`sbcast`) may take.
const BROADCAST_TIMEOUT: Duration = Duration::from_secs(300);

/// What to run when stairbench is not inside an allocation.
const HOW_TO_ALLOCATE: &str =
    "run stairbench inside one, e.g. `salloc -N 2 stairbench run SPEC` (or from an sbatch script)";

/// The allocation this process runs in, as Slurm's environment describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// `SLURM_JOB_ID`.
    pub job_id: String,
    /// `SLURM_JOB_NODELIST` expanded (`scontrol show hostnames`), in its order.
    pub nodes: Vec<String>,
}

/// Why the Slurm allocation or one of its nodes cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AllocationError {
    /// Not inside an allocation.
    #[error("not inside a Slurm allocation (SLURM_JOB_ID is not set): {how}", how = HOW_TO_ALLOCATE)]
    NotAllocated,
    /// No node list in the environment.
    #[error("allocation {0}: SLURM_JOB_NODELIST is not set: {how}", how = HOW_TO_ALLOCATE)]
    NoNodeList(String),
    /// A node list that expands to nothing.
    #[error("allocation {job_id}: node list {list:?} names no node")]
    EmptyNodeList {
        /// The job.
        job_id: String,
        /// Its node list.
        list: String,
    },
    /// `+K` where K is not a number.
    #[error("+{0} is not a node index (write +0, +1, ...)")]
    NotAnIndex(String),
    /// `+K` past the allocation's nodes.
    #[error("allocation {job_id} has {} node(s) ({}): there is no +{index} (counted from +0)", .nodes.len(), .nodes.join(", "))]
    NoSuchIndex {
        /// The job.
        job_id: String,
        /// Its nodes.
        nodes: Vec<String>,
        /// The index asked for.
        index: usize,
    },
    /// A node name not in the allocation.
    #[error("node {node:?} is not in allocation {job_id} (its nodes: {})", .nodes.join(", "))]
    NotInAllocation {
        /// The name asked for.
        node: String,
        /// The job.
        job_id: String,
        /// Its nodes.
        nodes: Vec<String>,
    },
    /// `scontrol show node` gives no NodeAddr.
    #[error("`scontrol show node {node}` gives no NodeAddr: {out:?}")]
    NoNodeAddr {
        /// The node.
        node: String,
        /// What scontrol printed.
        out: String,
    },
    /// A Slurm client command failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}

/// A Slurm client command (`scontrol`, `squeue`, `scancel`) that gave no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// It could not be run (what the OS said).
    #[error("cannot run {program}: {why} (install Slurm's client commands: apt-get install slurm-client)")]
    Run {
        /// The program.
        program: String,
        /// What the OS said.
        why: String,
    },
    /// It did not answer in time (seconds).
    #[error("{program} did not answer within {seconds} s (is slurmctld up?)")]
    Timeout {
        /// The program.
        program: String,
        /// Its time-out.
        seconds: u64,
    },
    /// It failed (its stderr).
    #[error("{program} failed: {stderr}")]
    Failed {
        /// The program.
        program: String,
        /// What it said.
        stderr: String,
    },
}

impl Allocation {
    /// The current allocation, or why there is none usable.
    pub fn current() -> Result<Allocation, AllocationError> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let Some(job_id) = var("SLURM_JOB_ID").or_else(|| var("SLURM_JOBID")) else {
            return Err(AllocationError::NotAllocated);
        };
        let Some(list) = var("SLURM_JOB_NODELIST").or_else(|| var("SLURM_NODELIST")) else {
            return Err(AllocationError::NoNodeList(job_id));
        };
        let out = control(Command::new("scontrol").args(["show", "hostnames", &list]))?;
        let nodes: Vec<String> = out.split_whitespace().map(str::to_owned).collect();
        if nodes.is_empty() {
            return Err(AllocationError::EmptyNodeList { job_id, list });
        }
        Ok(Allocation { job_id, nodes })
    }

    /// The node `slurm://REST` names: `+K` the K-th (from 0), else a node by name.
    pub fn node(&self, rest: &str) -> Result<String, AllocationError> {
        if let Some(k) = rest.strip_prefix('+') {
            let index: usize = k
                .parse()
                .map_err(|_| AllocationError::NotAnIndex(k.into()))?;
            return self
                .nodes
                .get(index)
                .cloned()
                .ok_or_else(|| AllocationError::NoSuchIndex {
                    job_id: self.job_id.clone(),
                    nodes: self.nodes.clone(),
                    index,
                });
        }
        if self.nodes.iter().any(|n| n == rest) {
            return Ok(rest.to_owned());
        }
        Err(AllocationError::NotInAllocation {
            node: rest.into(),
            job_id: self.job_id.clone(),
            nodes: self.nodes.clone(),
        })
    }
}

/// Reads `slurm://NODE` or `slurm://+K` (`rest` is what follows `slurm://`): the node must be
/// in the current allocation. The spec's address is the node's `NodeAddr` (where other hosts
/// reach its ports), its `node` the node's name.
pub fn parse_url(name: &str, url: &str, rest: &str) -> Result<HostSpec, HostError> {
    let bad = |why: String| HostError::BadAddress {
        name: name.into(),
        url: url.into(),
        why,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+');
    if rest.is_empty() || !rest.chars().all(ok) || rest.starts_with(['-', '.']) {
        return Err(bad(
            "write it as slurm://NODE (a node of the allocation) or slurm://+K (its K-th node, from +0)"
                .into(),
        ));
    }
    let allocation = Allocation::current().map_err(|e| bad(e.to_string()))?;
    let node = allocation.node(rest).map_err(|e| bad(e.to_string()))?;
    let address = node_address(&node).map_err(|e| bad(e.to_string()))?;
    Ok(HostSpec {
        name: name.into(),
        scheme: SCHEME.into(),
        user: None,
        address,
        port: 0,
        identity_file: None,
        // One directory per node: a home directory is often shared by every node.
        workdir: Path::new(DEFAULT_WORKDIR).join(&node),
        known_hosts_file: None,
        node: Some(node),
    })
}

/// The address Slurm reaches `node` at (`NodeAddr` of `scontrol show node`).
pub fn node_address(node: &str) -> Result<String, AllocationError> {
    let out = control(Command::new("scontrol").args(["show", "node", "--oneliner", node]))?;
    out.split_whitespace()
        .find_map(|field| field.strip_prefix("NodeAddr="))
        .map(str::to_owned)
        .ok_or_else(|| AllocationError::NoNodeAddr {
            node: node.into(),
            out: out.clone(),
        })
}

/// One node of the allocation, reached with `srun`.
#[derive(Debug)]
pub struct Slurm {
    /// The host as the spec gives it.
    pub spec: HostSpec,
    /// The allocation's job id.
    job_id: String,
    /// The node's name.
    node: String,
    /// When and why [`Engine::answers`] found the node lost.
    lost: Mutex<Option<(Instant, String)>>,
}

impl Slurm {
    /// A handle on the node `spec` names (read by [`parse_url`], inside the allocation).
    pub fn new(spec: HostSpec) -> Slurm {
        let job_id = std::env::var("SLURM_JOB_ID")
            .or_else(|_| std::env::var("SLURM_JOBID"))
            .unwrap_or_default();
        let node = spec.node.clone().unwrap_or_else(|| spec.address.clone());
        IN_USE.store(true, Ordering::Relaxed);
        Slurm {
            spec,
            job_id,
            node,
            lost: Mutex::new(None),
        }
    }

    /// The name every step of this stairbench process carries.
    pub fn step_name() -> String {
        format!("stairbench-{}", std::process::id())
    }

    /// `srun` with the options of every step: one task on this node, sharing the allocation's
    /// resources with the other steps, no binding of Slurm's own.
    pub fn srun(&self) -> Command {
        let mut cmd = Command::new("srun");
        cmd.arg(format!("--jobid={}", self.job_id))
            .arg(format!("--nodelist={}", self.node))
            .args(["--nodes=1", "--ntasks=1", "--overlap"])
            .arg(format!("--job-name={}", Slurm::step_name()))
            .arg("--quiet");
        if binds_tasks() {
            cmd.arg("--cpu-bind=none");
        }
        cmd
    }

    /// `srun ... sh -c LINE`.
    fn step(&self, line: &str) -> Command {
        let mut cmd = self.srun();
        cmd.args(["sh", "-c", line]);
        cmd
    }

    /// Runs `line` as a step to its end within `limit`; srun's own failures (no step, node
    /// lost) become `Unreachable`, the command's failure `Command`.
    fn step_output(&self, line: &str, what: &str, limit: Duration) -> Result<Output, RemoteError> {
        let mut cmd = self.step(line);
        let out = output_within(&mut cmd, limit).map_err(|error| RemoteError::Spawn {
            program: "srun".into(),
            error,
        })?;
        let Some(out) = out else {
            return Err(self.unreachable(&format!(
                "srun running `{what}` did not end within {} s",
                limit.as_secs()
            )));
        };
        let (srun_words, stderr) = split_srun_words(&String::from_utf8_lossy(&out.stderr));
        if !out.status.success() && !srun_words.is_empty() && !task_ended(&srun_words) {
            return Err(self.unreachable(&srun_words.join("; ")));
        }
        Ok(Output {
            stderr: stderr.into_bytes(),
            ..out
        })
    }

    /// `--version` and `cksum` of the binary at `path` on the node (relative: under the
    /// working directory), `None` when it is missing or broken.
    fn fingerprint_at(&self, path: &str) -> Result<Option<String>, RemoteError> {
        let line = sh_c("\"$1\" --version && cksum < \"$1\"", &[path]);
        match self.run(&line) {
            Ok(out) => Ok(Some(out.stdout.trim().to_owned())),
            Err(RemoteError::Command { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Broadcasts `local_bin` to every node of the allocation (once per file and process:
    /// `sbcast` reaches all the allocation's nodes at once) and returns where it landed.
    fn broadcast(&self, local_bin: &Path) -> Result<String, RemoteError> {
        static DONE: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());
        let mut done = DONE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, dest)) = done.iter().find(|(p, _)| p == local_bin) {
            return Ok(dest.clone());
        }
        let dest = format!("/tmp/stairbench-{}-{}.bin", self.job_id, std::process::id());
        let mut cmd = Command::new("sbcast");
        cmd.arg(format!("--jobid={}", self.job_id))
            .args(["--force", "--preserve"])
            .arg(local_bin)
            .arg(&dest);
        let out =
            output_within(&mut cmd, BROADCAST_TIMEOUT).map_err(|error| RemoteError::Spawn {
                program: "sbcast".into(),
                error,
            })?;
        match out {
            Some(out) if out.status.success() => {
                done.push((local_bin.to_path_buf(), dest.clone()));
                Ok(dest)
            }
            Some(out) => Err(RemoteError::Copy {
                host: self.spec.name.clone(),
                what: format!("broadcasting {} with sbcast", local_bin.display()),
                detail: String::from_utf8_lossy(&out.stderr).trim().into(),
            }),
            None => Err(RemoteError::Copy {
                host: self.spec.name.clone(),
                what: format!("broadcasting {} with sbcast", local_bin.display()),
                detail: format!("not done within {} s", BROADCAST_TIMEOUT.as_secs()),
            }),
        }
    }
}

impl Engine for Slurm {
    fn spec(&self) -> &HostSpec {
        &self.spec
    }

    fn run(&self, command: &str) -> Result<RemoteOutput, RemoteError> {
        let out = self.step_output(&self.in_workdir(command), command, RUN_TIMEOUT)?;
        RemoteOutput::of(&self.spec.name, command, &out)
    }

    fn open(&self, line: &str, stderr: Stdio) -> Result<Child, RemoteError> {
        self.step(line)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|error| RemoteError::Spawn {
                program: "srun".into(),
                error,
            })
    }

    /// Nothing when the same binary is in the working directory, or visible on the node at
    /// its path here (a shared filesystem: linked into the working directory); else
    /// broadcast with `sbcast` and moved into the working directory.
    fn put(&self, local_bin: &Path) -> Result<CopyOutcome, RemoteError> {
        let local = super::ssh::local_fingerprint(local_bin)?;
        if self.fingerprint_at(&format!("./{REMOTE_BIN}"))? == Some(local.clone()) {
            return Ok(CopyOutcome::AlreadyPresent);
        }
        let here = local_bin.to_string_lossy();
        if self.fingerprint_at(&here)? == Some(local) {
            // Through a name of this node's own: on a shared home, other nodes link too.
            let script =
                "t=\"$2.link.$(hostname).$$\" && ln -s -- \"$1\" \"$t\" && mv -f -- \"$t\" \"$2\"";
            self.run(&sh_c(script, &[&here, REMOTE_BIN]))?;
            return Ok(CopyOutcome::AlreadyPresent);
        }
        let landed = self.broadcast(local_bin)?;
        let tmp = format!("{REMOTE_BIN}.part.{}", std::process::id());
        self.run(&sh_c(
            "cp -- \"$1\" \"$2\" && chmod +x \"$2\" && mv -f -- \"$2\" \"$3\"",
            &[&landed, &tmp, REMOTE_BIN],
        ))?;
        Ok(CopyOutcome::Copied)
    }

    fn fetch(&self, names: &[&str]) -> Result<Vec<Vec<u8>>, RemoteError> {
        let what = format!("reading {}", names.join(", "));
        let line = self.in_workdir(&take_files_line(names));
        let out = self.step_output(&line, &what, RUN_TIMEOUT)?;
        taken_files(&self.spec.name, what, &out, names.len())
    }

    fn unreachable(&self, words: &str) -> RemoteError {
        let words = words.trim();
        RemoteError::Unreachable {
            host: self.spec.name.clone(),
            url: self.url(),
            detail: if words.is_empty() {
                "srun ended without a word".into()
            } else {
                words.into()
            },
        }
    }

    /// A channel that ended without the command's exit line: srun's own status (1 when it
    /// could not create or keep the step).
    fn is_unreachable(&self, code: Option<i32>) -> bool {
        // 97: the wrapper's own "cannot enter the working directory", a command failure.
        !matches!(code, Some(0) | Some(97))
    }

    /// Connects to the node's slurmd (the address and port srun itself launches steps at)
    /// within [`PROBE_TIMEOUT`], and closes the connection at once: no job step, nothing run
    /// on the node. A new step would tell too, but srun retries a refused connection until
    /// MessageTimeout has passed (10 s by default) before it says so.
    fn answers(&self) -> Result<(), HostLost> {
        let Err(why) = probe_slurmd(&self.node, &self.spec.address, slurmd_port()) else {
            return Ok(());
        };
        let mut lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        *lost = Some((Instant::now(), why.to_string()));
        Err(why)
    }

    fn lost_since(&self, opened: Instant) -> Option<String> {
        let lost = self.lost.lock().unwrap_or_else(|e| e.into_inner());
        (lost.as_ref())
            .filter(|(at, _)| *at >= opened)
            .map(|(_, why)| why.clone())
    }
}

/// How long stairbench waits for a node's slurmd to accept a connection before it counts the
/// node as lost ([`Engine::answers`]).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a Slurm host was made in this process (then [`allocation_ended`] asks Slurm).
static IN_USE: AtomicBool = AtomicBool::new(false);

/// One connection to `node`'s slurmd at `address:port`, closed at once; why it failed.
fn probe_slurmd(node: &str, address: &str, port: u16) -> Result<(), HostLost> {
    use std::net::{TcpStream, ToSocketAddrs};
    let at = format!("{address}:{port}");
    let addrs: Vec<_> = (address, port)
        .to_socket_addrs()
        .map_err(|e| HostLost::Resolve {
            node: node.into(),
            address: address.into(),
            why: e.to_string(),
        })?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpStream::connect_timeout(a, PROBE_TIMEOUT) {
            Ok(_) => return Ok(()),
            Err(e) => last = Some(e),
        }
    }
    let how = match last {
        Some(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => ProbeFailure::Refused,
        Some(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            ProbeFailure::TimedOut(PROBE_TIMEOUT.as_secs())
        }
        Some(e) => ProbeFailure::Other(e.to_string()),
        None => ProbeFailure::NoAddress,
    };
    Err(HostLost::Lost {
        node: node.into(),
        at,
        how,
    })
}

/// The port slurmds listen on (`SlurmdPort`, 6818 unless the cluster says otherwise).
fn slurmd_port() -> u16 {
    static PORT: OnceLock<u16> = OnceLock::new();
    *PORT.get_or_init(|| {
        let config = control(Command::new("scontrol").args(["show", "config"])).unwrap_or_default();
        config
            .lines()
            .filter_map(|l| l.split_once('='))
            .find(|(k, _)| k.trim() == "SlurmdPort")
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(6818)
    })
}

/// What srun and slurmstepd say when a job ends under its steps: a step failed with these
/// words may be the allocation's end before slurmctld's job state shows it.
const JOB_ENDING_WORDS: [&str; 6] = [
    "DUE TO TIME LIMIT",
    "CANCELLED AT",
    "has expired",
    "already completing or completed",
    "revoked",
    "Invalid job id",
];

/// Whether `failure` has Slurm's own words for a job's end (a step cancelled at its time
/// limit, the allocation revoked).
pub fn says_job_ended(failure: &str) -> bool {
    JOB_ENDING_WORDS.iter().any(|w| failure.contains(w))
}

/// Why the allocation this process runs in has ended (its time limit reached, cancelled),
/// asked after a step failed with `failure`: no later step can run on its nodes. Asked of
/// Slurm (`scontrol show job`) only when a Slurm host is in use; once ended, said from memory.
/// When `failure` has the words of a job's end but Slurm still says the job runs, asked again
/// for up to 5 s. `None` while it runs, or when Slurm cannot tell.
pub fn allocation_ended(failure: &str) -> Option<String> {
    static ENDED: OnceLock<String> = OnceLock::new();
    if let Some(why) = ENDED.get() {
        return Some(why.clone());
    }
    if !IN_USE.load(Ordering::Relaxed) {
        return None;
    }
    let job_id = Allocation::current().ok()?.job_id;
    let asks = match says_job_ended(failure) {
        true => 6,
        false => 1,
    };
    for ask in 0..asks {
        if ask > 0 {
            std::thread::sleep(Duration::from_secs(1));
        }
        let show = control(Command::new("scontrol").args(["show", "job", "--oneliner", &job_id]));
        let why = match show {
            Ok(text) => job_ended(&job_id, &text),
            Err(ControlError::Failed { stderr, .. }) if stderr.contains("Invalid job id") => Some(
                format!("the Slurm allocation {job_id} has ended (Slurm no longer knows it)"),
            ),
            Err(_) => None,
        };
        if let Some(why) = why {
            return Some(ENDED.get_or_init(|| why).clone());
        }
    }
    None
}

/// Why job `job_id` has ended, from `scontrol show job --oneliner` (`JobState=TIMEOUT
/// Reason=TimeLimit`); `None` while it runs. A job whose run time has reached its time limit
/// has ended too: slurmctld refuses it new steps at once ("Job/step already completing or
/// completed") but marks it TIMEOUT only at its next periodic check, up to 30 s later.
fn job_ended(job_id: &str, text: &str) -> Option<String> {
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|f| f.strip_prefix(k))
            .unwrap_or("?")
    };
    let state = field("JobState=");
    let (run, limit) = (field("RunTime="), field("TimeLimit="));
    if let (Some(run_s), Some(limit_s)) = (duration_s(run), duration_s(limit)) {
        if state == "RUNNING" && run_s >= limit_s {
            return Some(format!(
                "the Slurm allocation {job_id} has ended (its time limit was reached): \
                 RunTime={run} TimeLimit={limit}"
            ));
        }
    }
    if matches!(state, "RUNNING" | "SUSPENDED" | "CONFIGURING" | "?") {
        return None;
    }
    let reason = field("Reason=");
    let what = match state {
        "TIMEOUT" => " (its time limit was reached)",
        "CANCELLED" => " (cancelled)",
        "NODE_FAIL" => " (a node failed)",
        "PREEMPTED" => " (preempted)",
        _ => "",
    };
    Some(format!(
        "the Slurm allocation {job_id} has ended{what}: JobState={state} Reason={reason}"
    ))
}

/// Whether the cluster's task plugin binds tasks to CPUs (anything but `task/none`): then
/// steps ask for no binding; without one srun would only warn that it has none. Asked once.
pub(super) fn binds_tasks() -> bool {
    static BINDS: OnceLock<bool> = OnceLock::new();
    *BINDS.get_or_init(|| {
        let config = control(Command::new("scontrol").args(["show", "config"])).unwrap_or_default();
        config
            .lines()
            .find_map(|l| l.split_once('=').filter(|(k, _)| k.trim() == "TaskPlugin"))
            .is_none_or(|(_, v)| v.trim() != "task/none")
    })
}

/// srun's own lines of `stderr` (`srun: ...`), and the rest (the command's).
fn split_srun_words(stderr: &str) -> (Vec<String>, String) {
    let mut srun = Vec::new();
    let mut rest = String::new();
    for line in stderr.split_inclusive('\n') {
        match line.strip_prefix("srun: ") {
            Some(words) => srun.push(words.trim().to_owned()),
            None => rest.push_str(line),
        }
    }
    (srun, rest)
}

/// Whether srun's words only report how the task ended (`h2: task 0: Exited with exit code
/// 3`, `... task 0: Killed`): the command failed, Slurm did not.
fn task_ended(words: &[String]) -> bool {
    words.iter().all(|w| w.contains(": task "))
}

/// Seconds of a Slurm duration (`MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`); `None` for `UNLIMITED`
/// and the like.
fn duration_s(text: &str) -> Option<u64> {
    let (days, clock) = match text.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, text),
    };
    let parts: Vec<u64> = (clock.split(':'))
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let s = parts.iter().fold(0, |acc, p| acc * 60 + p);
    (1..=3).contains(&parts.len()).then_some(days * 86_400 + s)
}

/// Runs `program` (`scontrol`, `squeue`, `scancel`) within `CONTROL_TIMEOUT`; its stdout, or
/// its stderr as the error.
fn control(cmd: &mut Command) -> Result<String, ControlError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    match output_within(cmd, CONTROL_TIMEOUT) {
        Err(e) => Err(ControlError::Run {
            program,
            why: e.to_string(),
        }),
        Ok(None) => Err(ControlError::Timeout {
            program,
            seconds: CONTROL_TIMEOUT.as_secs(),
        }),
        Ok(Some(out)) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
        Ok(Some(out)) => Err(ControlError::Failed {
            program,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        }),
    }
}

/// Runs `cmd` (stdin closed) to its end, or kills it after `limit` (`None`).
pub fn output_within(cmd: &mut Command, limit: Duration) -> std::io::Result<Option<Output>> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let readers = [
        read_all(
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
        read_all(
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
    ];
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let [stdout, stderr] = readers.map(|r| r.join().unwrap_or_default());
    Ok(status.map(|status| Output {
        status,
        stdout,
        stderr,
    }))
}

fn read_all(stream: Option<Box<dyn Read + Send>>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut s) = stream {
            let _ = s.read_to_end(&mut bytes);
        }
        bytes
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation() -> Allocation {
        Allocation {
            job_id: "42".into(),
            nodes: vec!["n1".into(), "n2".into(), "n3".into()],
        }
    }

    #[test]
    fn nodes_by_index_and_by_name() {
        let a = allocation();
        assert_eq!(a.node("+0").unwrap(), "n1");
        assert_eq!(a.node("+2").unwrap(), "n3");
        assert_eq!(a.node("n2").unwrap(), "n2");
        let e = a.node("+3").unwrap_err().to_string();
        assert!(
            e.contains("has 3 node(s) (n1, n2, n3)") && e.contains("+3"),
            "{e}"
        );
        let e = a.node("+x").unwrap_err().to_string();
        assert!(e.contains("not a node index"), "{e}");
        let e = a.node("n9").unwrap_err().to_string();
        assert!(e.contains("\"n9\" is not in allocation 42"), "{e}");
    }

    #[test]
    fn srun_s_own_words_are_told_from_the_command_s() {
        let stderr = "bad option\n\
                      srun: error: h2: task 0: Exited with exit code 3\n";
        let (srun, rest) = split_srun_words(stderr);
        assert_eq!(srun, ["error: h2: task 0: Exited with exit code 3"]);
        assert_eq!(rest, "bad option\n");
        assert!(task_ended(&srun));
        let (srun, _) = split_srun_words(
            "srun: error: Task launch for StepId=5.4 failed on node h3: Communication connection failure\n\
             srun: error: Application launch failed: Communication connection failure\n",
        );
        assert!(!task_ended(&srun), "{srun:?}");
    }

    #[test]
    fn an_ended_job_says_its_state_and_reason() {
        let running = "JobId=4 JobName=x JobState=RUNNING Reason=None Dependency=(null)";
        assert_eq!(job_ended("4", running), None);
        let timeout = "JobId=4 JobName=x JobState=TIMEOUT Reason=TimeLimit Dependency=(null)";
        assert_eq!(
            job_ended("4", timeout).unwrap(),
            "the Slurm allocation 4 has ended (its time limit was reached): \
             JobState=TIMEOUT Reason=TimeLimit"
        );
        let completing = "JobId=4 JobState=COMPLETING Reason=TimeLimit";
        assert!(job_ended("4", completing)
            .unwrap()
            .contains("JobState=COMPLETING"));
        // Over its limit before slurmctld's periodic check has marked it.
        let over = "JobId=4 JobState=RUNNING Reason=None RunTime=00:01:02 TimeLimit=00:01:00";
        assert!(
            job_ended("4", over)
                .unwrap()
                .ends_with("RunTime=00:01:02 TimeLimit=00:01:00"),
            "{over}"
        );
        let within = "JobId=4 JobState=RUNNING RunTime=00:00:59 TimeLimit=00:01:00";
        assert_eq!(job_ended("4", within), None);
        let unlimited = "JobId=4 JobState=RUNNING RunTime=1-00:00:00 TimeLimit=UNLIMITED";
        assert_eq!(job_ended("4", unlimited), None);
        assert_eq!(duration_s("1-02:03:04"), Some(93_784));
        assert_eq!(duration_s("05:00"), Some(300));
        assert_eq!(duration_s("Partition_Limit"), None);
    }

    #[test]
    fn a_probe_of_a_port_nobody_listens_on_is_refused_at_once() {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = free.local_addr().unwrap().port();
        probe_slurmd("n1", "127.0.0.1", port).unwrap();
        drop(free);
        let started = Instant::now();
        let why = probe_slurmd("n1", "127.0.0.1", port)
            .unwrap_err()
            .to_string();
        assert!(started.elapsed() < PROBE_TIMEOUT, "{why}");
        assert_eq!(
            why,
            format!(
                "node n1 was lost: its slurmd (127.0.0.1:{port}) refused the connection: its Slurm daemon is gone"
            )
        );
    }

    #[test]
    fn bounded_output_kills_what_overruns() {
        let started = Instant::now();
        let out = output_within(
            Command::new("sh").args(["-c", "echo hi; exec sleep 5"]),
            Duration::from_millis(300),
        )
        .unwrap();
        assert!(out.is_none());
        assert!(started.elapsed() < Duration::from_secs(3));
        let out = output_within(
            Command::new("sh").args(["-c", "echo hi"]),
            Duration::from_secs(5),
        )
        .unwrap()
        .unwrap();
        assert_eq!(out.stdout, b"hi\n");
    }
}
