//! `profiles.jsonl`: one line per profile pass, differential graph or level left without a
//! profile, written by the runner's profile passes and read by the report.

use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The file of profile passes in a run directory.
pub const PROFILES_FILE: &str = "profiles.jsonl";

/// What to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Event {
    /// CPU samples: `cycles`, or `cpu-clock` where the machine has no hardware PMU.
    Cpu,
    /// Context switches (why threads leave the CPU).
    Cs,
    /// Off-CPU chains (`sched:sched_switch` and `sched:sched_waking` of the machine): blocked
    /// time by the stack threads block in, topped by the stack of the thread that woke them.
    Offcpu,
}

impl Event {
    /// The file-name stem of this event's files.
    pub fn stem(self) -> &'static str {
        match self {
            Event::Cpu => "cpu",
            Event::Cs => "cs",
            Event::Offcpu => "offcpu",
        }
    }
}

/// Whose processes perf records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileTarget {
    /// The server process and its descendants.
    #[default]
    Server,
    /// The load generator: stairbench itself (built-in engine) or the external tool.
    Client,
    /// Both, in one recording (the thread frames tell them apart).
    Both,
}

impl ProfileTarget {
    /// How the report names it: `server`, `client`, `server and client`.
    pub fn name(self) -> &'static str {
        match self {
            ProfileTarget::Server => "server",
            ProfileTarget::Client => "client",
            ProfileTarget::Both => "server and client",
        }
    }
}

/// One line of `profiles.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ProfileLine {
    /// A profile pass at one level.
    Pass(PassRecord),
    /// The differential graphs between two profiled levels.
    Diff(DiffRecord),
    /// A level (or a whole series) that has no profile, and why.
    Missing(MissingRecord),
}

/// A profile pass: an extra run at a measured level with perf recording.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassRecord {
    /// Id of the level's first measured step; the files are in `profiles/<step>/`.
    pub step: String,
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients of the level.
    pub clients: usize,
    /// Open-loop rate of the level (requests/s), absent in closed loop.
    pub rate_rps: Option<f64>,
    /// Why this level was profiled: `busy`, `saturated`, `requested` (a count in `at`).
    pub levels: Vec<String>,
    /// Whose processes were recorded.
    pub profiled: ProfileTarget,
    /// Seconds perf recorded.
    pub seconds: f64,
    /// The profile's directory relative to the run directory (`profiles/<step>`).
    pub dir: String,
    /// Mean throughput of the level's measured steps (requests/s, without the profiler).
    pub step_throughput_rps: f64,
    /// Throughput of the pass's whole load window (requests/s, perf starting then recording).
    pub throughput_rps: Option<f64>,
    /// Length of the pass's load window in seconds.
    pub window_s: Option<f64>,
    /// The pass produced a profile.
    pub ok: bool,
    /// Why it did not, or what was left out.
    pub reason: Option<String>,
    /// One entry per event recorded.
    pub events: Vec<EventRecord>,
    /// The JVMs recorded: their perf maps (JIT frame names) and advice; absent for other
    /// servers and in runs recorded before it existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jvms: Vec<JvmMap>,
}

/// What was done to name one recorded JVM's JIT-compiled frames.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JvmMap {
    /// The JVM's process id.
    pub pid: i32,
    /// The copied perf map, relative to the profile directory; None when none was written.
    pub map_file: Option<String>,
    /// Symbols (lines) in the map.
    pub symbols: usize,
    /// The JVM runs with `-XX:+PreserveFramePointer`; None when that could not be read.
    pub preserve_frame_pointer: Option<bool>,
    /// What to do for complete, named stacks, when something is missing.
    pub advice: Vec<String>,
}

/// How much of a profile runs Java code, and how much of that has an unnamed JIT frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JavaShare {
    /// % of the profile's weight whose stack has a JIT-compiled (perf map) or interpreted frame.
    pub java_pct: f64,
    /// % of that Java weight whose stack has a JIT frame perf could not name (`[perf-PID.map]`).
    pub unnamed_jit_pct: f64,
}

impl PassRecord {
    /// The throughput change while profiling, in percent of the step's (negative: slower).
    pub fn change_pct(&self) -> Option<f64> {
        let during = self.throughput_rps?;
        (self.step_throughput_rps > 0.0)
            .then(|| 100.0 * (during - self.step_throughput_rps) / self.step_throughput_rps)
    }
}

/// One recorded event of a pass.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The event asked for.
    pub event: Event,
    /// The perf event recorded (`cycles`, `cpu-clock`, ...).
    pub perf_event: String,
    /// Samples recorded.
    pub samples: u64,
    /// perf script lines that could not be read.
    pub garbled_lines: u64,
    /// Files written, relative to the profile directory.
    pub files: Vec<String>,
    /// The functions with the largest inclusive share, largest first.
    pub top: Vec<FunctionRow>,
    /// % of the weight in stacks with a lock, futex or scheduler frame (the built-in `sync`
    /// category); absent in runs recorded before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_pct: Option<f64>,
    /// The Java share and its unnamed JIT frames; absent when no stack runs Java code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub java: Option<JavaShare>,
    /// What the recording cost and found (off-CPU chains); absent for sampled events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<RecordingCost>,
}

/// What an off-CPU chain recording (every switch and waking of the machine) cost and found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordingCost {
    /// Switch and waking events recorded.
    pub events: u64,
    /// Events per second of recording.
    pub events_per_s: f64,
    /// Size of the perf.data, MB (10^6 bytes).
    pub perf_data_mb: f64,
    /// perf.data written per second of recording, MB/s.
    pub perf_data_mb_per_s: f64,
    /// Seconds between the first and the last event recorded.
    pub recorded_s: f64,
    /// perf stopped at the size bound before the recording's end.
    pub hit_max_size: bool,
    /// Off-CPU intervals of the recorded processes' threads.
    pub intervals: u64,
    /// Of those, the intervals whose waker was recorded.
    pub woken: u64,
    /// The largest blocked-time paths, largest first.
    pub paths: Vec<ChainPath>,
}

/// One of the largest blocked-time paths: who blocked where, and who woke it from where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChainPath {
    /// The blocked thread (merged name).
    pub blocked_thread: String,
    /// Where it blocked: its deepest user-space frame (its kernel leaf when it had none).
    pub blocked_in: String,
    /// The waker's thread (merged name), `[preempted]` or `[waker not recorded]`.
    pub waker_thread: String,
    /// Where the waker was: its deepest user-space frame (its kernel leaf when it had none).
    pub woken_from: String,
    /// Blocked time on this path, ms.
    pub blocked_ms: f64,
    /// Share of all the blocked time recorded, %.
    pub share_pct: f64,
}

/// A function's share of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionRow {
    /// The function.
    pub name: String,
    /// Share of the stacks it appears in, % of the total weight.
    pub inclusive_pct: f64,
    /// Share of the stacks it is the leaf of, % of the total weight.
    pub self_pct: f64,
}

/// Differential graphs between two profiled levels (A, B).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffRecord {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Step of profile A (the lower load).
    pub a: String,
    /// Step of profile B (the higher load).
    pub b: String,
    /// What A is: `busy (4 clients)`.
    pub a_label: String,
    /// What B is.
    pub b_label: String,
    /// Directory relative to the run directory (`profiles/diff-<a>-vs-<b>`).
    pub dir: String,
    /// Why there is no graph, if there is none.
    pub reason: Option<String>,
    /// One entry per event both profiles have.
    pub events: Vec<DiffEventRecord>,
}

/// One event's differential graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiffEventRecord {
    /// The event compared.
    pub event: Event,
    /// Files written, relative to the diff directory.
    pub files: Vec<String>,
    /// Functions whose inclusive share moved most (A %, B %, points), largest move first.
    pub deltas: Vec<DeltaRow>,
}

/// A function's inclusive share in A and B.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeltaRow {
    /// The function.
    pub name: String,
    /// Inclusive share in A, %.
    pub a_pct: f64,
    /// Inclusive share in B, %.
    pub b_pct: f64,
    /// B minus A, percentage points.
    pub delta_points: f64,
}

/// A level without a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MissingRecord {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// The level asked for; None when the whole series has no profile.
    pub level: Option<String>,
    /// Why.
    pub reason: String,
}

/// Reads `profiles.jsonl` of a run directory (empty when absent; unreadable lines skipped).
pub fn read_lines(dir: &Path) -> Vec<ProfileLine> {
    std::fs::read_to_string(dir.join(PROFILES_FILE))
        .map(|t| {
            t.lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A `profiles.jsonl` line that could not be appended.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    /// The line does not serialize.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The file could not be written.
    #[error("writing {file}: {0}", file = PROFILES_FILE)]
    Write(std::io::Error),
}

/// Appends one line to `profiles.jsonl` of a run directory.
pub fn append_line(dir: &Path, line: &ProfileLine) -> Result<(), AppendError> {
    let mut text = serde_json::to_string(line)?;
    text.push('\n');
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(PROFILES_FILE))
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(AppendError::Write)
}
