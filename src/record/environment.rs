//! environment.json: the conditions a run was measured under. One type for the file, which
//! `observe::environment` fills in from the running machine and the run directory's reader
//! reads back (the record layer, below both). Every field has a default, so a file from an
//! older stairbench (or a hand-written one) still reads.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The machine and software a run was measured on.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Environment {
    /// Host name.
    pub hostname: String,
    /// CPU model name from /proc/cpuinfo ("unavailable" when absent).
    pub cpu_model: String,
    /// Number of online CPUs.
    pub cpus: usize,
    /// The CPU topology in brief (None when it could not be read).
    pub topology: Option<TopologySummary>,
    /// Kernel release (/proc/sys/kernel/osrelease, as `uname -r` prints it).
    pub kernel: String,
    /// cpufreq scaling governor of each CPU, by CPU number ("unavailable" without cpufreq).
    pub governors: BTreeMap<String, String>,
    /// Turbo / boost state: "on", "off" or "unavailable".
    pub turbo: String,
    /// Swap configured, in kilobytes.
    pub swap_total_kb: u64,
    /// Swap in use, in kilobytes.
    pub swap_used_kb: u64,
    /// What `perf stat` could count (always written; None in a file that does not say).
    pub perf: Option<PerfAvailability>,
    /// stairbench's version.
    pub stairbench_version: String,
    /// Short git revision of stairbench's source tree ("unknown" outside a git checkout).
    pub git_revision: String,
    /// Load average over 1, 5 and 15 minutes, when the run started.
    pub loadavg: [f64; 3],
    /// How busy the run's CPUs were, sampled just before the first step (the demo's settle
    /// sample; absent where the run took none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub busy_sample: Option<BusySample>,
    /// Why this machine may give misleading figures (empty when none).
    pub warnings: Vec<String>,
    /// Each other host of the run, by name: its own stairbench's environment and how it was
    /// reached (engine URL, clock offset, binary copied, set-up times), or `unreachable` and
    /// why (empty in a run on this machine alone). Kept as each host's JSON: its layout is
    /// the remote binary's and the fleet's, layers this one does not read.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub hosts: BTreeMap<String, serde_json::Value>,
}

/// How busy some CPUs were over a short window, from /proc/stat.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct BusySample {
    /// The CPUs sampled, as a list (`0-1`).
    pub cpus: String,
    /// Their mean busy share over the window, %.
    pub busy_pct: f64,
    /// The window, seconds.
    pub window_s: f64,
}

/// The topology in brief.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct TopologySummary {
    /// NUMA nodes.
    pub nodes: usize,
    /// Physical packages (sockets).
    pub packages: usize,
    /// Physical cores.
    pub cores: usize,
    /// Hardware threads per core.
    pub threads_per_core: usize,
    /// True when cores run more than one hardware thread.
    pub smt: bool,
    /// One line describing it all.
    pub summary: String,
}

/// What `perf stat` could count on the machine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PerfAvailability {
    /// Software events (task-clock, context switches) could be counted.
    pub software: bool,
    /// Hardware events (instructions, cycles) could be counted.
    pub hardware: bool,
    /// Why an event class was unavailable, when one was.
    pub note: Option<String>,
}

impl Environment {
    /// The distinct governors of the CPUs, sorted ("performance, powersave"); None when the
    /// file lists none.
    pub fn governors_text(&self) -> Option<String> {
        let mut names: Vec<&str> = self.governors.values().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        (!names.is_empty()).then(|| names.join(", "))
    }
}
