//! `stairbench demo`: the messenger study with the load generator out of the
//! way. The reactor and the pool run on their own CPUs, the generator on the others; requests
//! are pipelined so the generator spends little per request, and the servers do a fixed
//! amount of CPU work per message (`serve msgr --work-ns`), so the server's CPU is what runs
//! out first. The verdict between the architectures comes from the spec's `[[comparisons]]`,
//! whose noise test names a winner only beyond the run-to-run spread.

use std::fmt::Write as _;
use std::time::Duration;

use crate::analyze::compare::Metric;
use crate::analyze::run::RunAnalysis;

/// Requests in flight per connection: deep pipelining makes the generator cheap per request
/// (measured with the servers' work on 2 CPUs: 0.6 µs at depth 64, 1.8 µs at depth 16, where
/// it reached 86% busy at the reactor's peak; see README).
const DEPTH: usize = 64;

/// Payload each way, bytes: small, so the pool's hand-off is a visible share of a request.
const MSG_SIZE_BYTES: usize = 512;

/// The servers' CPU work per message, ns: without it the reactor costs what the generator
/// costs per request, and a generator with as many CPUs as the server saturates with it.
pub const WORK_NS: u64 = 1000;

/// The machine is taken as settled when its CPUs are less busy than this (the busy warning's
/// threshold too).
const SETTLED_BUSY_PCT: f64 = crate::observe::environment::BUSY_WARN_PCT;

/// The window of each busy sample of the settle wait.
const SETTLE_SAMPLE: Duration = crate::machine::procfs::QUIET_SAMPLE;

/// How one demo runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemoShape {
    /// `--quick`: a shorter staircase and fixed repetitions.
    pub quick: bool,
    /// CPUs this process may use: with fewer than 2 the server and the generator must share.
    pub cpus: usize,
}

impl DemoShape {
    /// Whether the server and the generator can have CPUs of their own.
    pub fn separable(self) -> bool {
        self.cpus >= 2
    }

    /// The longest wait for the machine to settle before the first step.
    pub fn settle_limit(self) -> Duration {
        Duration::from_secs(if self.quick { 3 } else { 15 })
    }
}

/// The full demo's staircase: 1 client, doubling up to this many.
pub const TOP_CLIENTS: usize = 32;

/// `--quick`'s staircase, its runs per step and its measured window.
pub const QUICK_CLIENTS: &[usize] = &[1, 2, 4, 8];
/// Runs per step of `--quick` (three, not two: with two, the 95% interval is ±12.7 standard
/// errors wide).
pub const QUICK_REPETITIONS: usize = 3;
/// `--quick`'s measured window per run.
pub const QUICK_WINDOW: &str = "500ms";

/// `stairbench demo`'s one-line help, its numbers from the spec it runs.
pub fn about() -> String {
    format!(
        "Run a built-in experiment with no setup: the bundled messenger server's two designs \
         (one event loop per core vs a shared worker pool), each on CPUs of its own with the \
         load generator on the others (shared CPUs on a one-CPU machine), at 1 to \
         {TOP_CLIENTS} clients (doubling); prints each series' peak and the verdict, and \
         writes a run directory with its report"
    )
}

/// `--quick`'s help, from the same constants.
pub fn quick_help() -> String {
    let clients: Vec<String> = QUICK_CLIENTS.iter().map(|c| c.to_string()).collect();
    format!(
        "A shorter staircase for a first look: {} clients, {QUICK_REPETITIONS} runs of \
         {QUICK_WINDOW} each (--dry-run prints its estimated time)",
        clients.join(", ")
    )
}

/// The demo's spec.
pub fn spec(shape: DemoShape) -> String {
    let quick_clients = format!("{QUICK_CLIENTS:?}");
    let full_clients = format!("{{ from = 1, to = {TOP_CLIENTS}, double = true }}");
    let quick_reps = QUICK_REPETITIONS.to_string();
    let (duration, warmup, clients, repetitions) = if shape.quick {
        (
            QUICK_WINDOW,
            "200ms",
            quick_clients.as_str(),
            quick_reps.as_str(),
        )
    } else {
        ("2s", "500ms", full_clients.as_str(), "\"auto\"")
    };
    let top = if shape.quick {
        QUICK_CLIENTS.iter().copied().max().unwrap_or(1)
    } else {
        TOP_CLIENTS
    };
    let placement = if shape.separable() {
        "separated"
    } else {
        "shared"
    };
    let mut text = format!(
        r#"# stairbench demo: the built-in messenger server in two architectures, each on its own CPUs,
# the load generator on the others; pipelined messages, {WORK_NS} ns of server work on each.
name = "demo"
description = "reactor vs pool messenger, server and load generator on separate CPUs, depth {DEPTH}, {MSG_SIZE_BYTES}-byte messages, {WORK_NS} ns of work each"
duration = "{duration}"
warmup = "{warmup}"
clients = {clients}
placements = ["{placement}"]
depth = {DEPTH}
repetitions = {repetitions}

[[targets]]
name = "reactor"
builtin = "msgr --arch reactor --work-ns {WORK_NS}"

[[targets]]
name = "pool"
builtin = "msgr --arch pool --work-ns {WORK_NS}"

[client]
msg_size = {MSG_SIZE_BYTES}
"#
    );
    if shape.separable() {
        text.push_str(&comparisons(top));
    }
    text
}

/// Reactor against pool at the top of the staircase, where both servers are saturated:
/// throughput, and server CPU per request (the pool's hand-off).
fn comparisons(top: usize) -> String {
    let mut out = String::new();
    for (title, metric) in [
        ("throughput", "throughput_rps"),
        ("server CPU per request", "cpu_us_per_req"),
    ] {
        let _ = write!(
            out,
            r#"
[[comparisons]]
name = "{title} at {top} clients"
a = "reactor/separated@{top}"
b = "pool/separated@{top}"
name_a = "reactor"
name_b = "pool"
metric = "{metric}"
"#
        );
    }
    out
}

/// What a demo says before its first step when it cannot compare cleanly.
pub fn unseparable_note(cpus: usize) -> String {
    format!(
        "this machine gives stairbench {cpus} CPU: the servers and the load generator must share it, \
         so the architectures cannot be compared cleanly here; the demo runs them for a look and names no winner"
    )
}

/// How busy the machine was when the demo began, and how long it waited for it to calm.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    /// Seconds spent waiting.
    pub waited_s: f64,
    /// Mean busy % of the CPUs over the last half second of the wait.
    pub busy_pct: f64,
    /// The 1-minute load average at the end of the wait (None where /proc/loadavg is missing).
    pub load1: Option<f64>,
    /// Whether the CPUs dropped under the threshold before the limit.
    pub settled: bool,
}

impl Settled {
    /// The last sample, for the environment's busy warning.
    pub fn sample(&self, cpus: &[usize]) -> crate::observe::environment::BusySample {
        crate::observe::environment::BusySample {
            cpus: crate::cpuset::format(cpus),
            busy_pct: self.busy_pct,
            window_s: SETTLE_SAMPLE.as_secs_f64(),
        }
    }

    /// The line for stdout and notes.txt.
    pub fn note(&self, cpus: &[usize]) -> String {
        let load = self
            .load1
            .map_or(String::new(), |l| format!(", 1-min load average {l:.2}"));
        let list = crate::cpuset::format(cpus);
        let head = format!(
            "the demo started with CPUs {list} {:.0}% busy{load}",
            self.busy_pct
        );
        if self.settled {
            format!(
                "{head} (after waiting {:.1} s for them to drop under {SETTLED_BUSY_PCT:.0}%)",
                self.waited_s
            )
        } else {
            format!(
                "{head}: other work kept them over {SETTLED_BUSY_PCT:.0}% for the {:.0} s the demo waits, \
                 so its figures are noisier, and throughput favours the architecture with more threads \
                 (each takes its share of a busy CPU): compare cpu_us_per_req",
                self.waited_s
            )
        }
    }
}

/// What the dry run says of the wait before the first step (which its estimate leaves out).
pub fn settle_plan(shape: DemoShape) -> String {
    format!(
        "before the first step the demo waits for its CPUs to be under {SETTLED_BUSY_PCT:.0}% busy: {:.1} s when they are idle, at most {} s",
        SETTLE_SAMPLE.as_secs_f64(),
        shape.settle_limit().as_secs()
    )
}

/// Under `auto` repetitions, how the estimate depends on the CPUs the run finds: the dry run
/// samples them now, but the run waits for them to settle first and may find them idle
/// (the progress line's first ETA then starts from the idle figure). None when the two agree.
pub fn busy_estimate_note(plan: &mut crate::sweep::plan::Plan, busy_pct: f64) -> Option<String> {
    if plan.repetitions != crate::sweep::spec::Repetitions::Auto || busy_pct < SETTLED_BUSY_PCT {
        return None;
    }
    let busy = plan.estimate();
    plan.auto_runs = AUTO_RUNS_IDLE;
    let idle = plan.estimate();
    plan.auto_runs = AUTO_RUNS_BUSY;
    let show = crate::sweep::plan::estimate::show_duration;
    Some(format!(
        "the estimate assumes {AUTO_RUNS_BUSY} runs a step, as its CPUs are {busy_pct:.0}% busy now ({}); if they are under {SETTLED_BUSY_PCT:.0}% busy when the first step starts, it assumes {AUTO_RUNS_IDLE} a step: about {}, and the progress line's ETA starts from that",
        show(busy),
        show(idle)
    ))
}

/// Runs a step of the full demo takes under `auto` repetitions when its CPUs are idle: the
/// least `auto` runs, as the throughput settles at once (measured: 24 runs over 12 steps, with
/// the CPUs 0% busy before the first step).
pub const AUTO_RUNS_IDLE: f64 = 2.0;
/// The same when other work keeps its CPUs busy (measured: 51 runs over 12 steps, 4.25 each,
/// with them 100% busy).
pub const AUTO_RUNS_BUSY: f64 = 4.0;

/// The time model's guess of a step's `auto` runs from the CPUs' busy % before the first step
/// (the settle sample), so that the dry run's estimate and the first ETA follow the machine.
pub fn expected_auto_runs(busy_pct: f64) -> f64 {
    if busy_pct < SETTLED_BUSY_PCT {
        AUTO_RUNS_IDLE
    } else {
        AUTO_RUNS_BUSY
    }
}

/// Waits, at most `limit`, until `cpus` are less than [`SETTLED_BUSY_PCT`] busy over half a
/// second (a build that just ended leaves the 1-min load average high for a minute, /proc/stat
/// shows the CPUs free at once).
pub fn settle(cpus: &[usize], limit: Duration) -> Settled {
    let never = std::sync::atomic::AtomicBool::new(false);
    let quiet = crate::machine::procfs::wait_until_quiet(cpus, SETTLED_BUSY_PCT, limit, &never);
    Settled {
        waited_s: quiet.waited_s,
        busy_pct: quiet.busy_pct,
        load1: load_average_1min(),
        settled: quiet.settled,
    }
}

fn load_average_1min() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// What the demo adds to the run's verdicts (printed by the run itself, in the reports'
/// words): that there was nothing to compare, or that the machine was busy while it measured.
pub fn verdict(analysis: Option<&RunAnalysis>, loaded: bool) -> Vec<String> {
    let Some(analysis) = analysis else {
        return vec!["the run has no analysis: no verdict".into()];
    };
    if analysis.comparisons.is_empty() {
        return vec![
            "no comparison could be made (see notes in report.md): no winner named".into(),
        ];
    }
    let throughput = analysis
        .comparisons
        .iter()
        .any(|c| c.metric == Metric::ThroughputRps);
    if loaded && throughput {
        // Each runnable thread gets its share of a busy CPU: the pool has two per core.
        vec!["the machine was loaded while the demo measured: the pool's extra threads take more of a busy CPU, which favours it on throughput".into()]
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn auto_runs_follow_how_busy_the_cpus_were_before_the_first_step() {
        // The full demo on 2 CPUs: 24 runs over 12 steps idle, 51 at 100% busy.
        assert_eq!(super::expected_auto_runs(0.0), 2.0);
        assert_eq!(super::expected_auto_runs(29.0), 2.0);
        assert_eq!(super::expected_auto_runs(100.0), 4.0);
    }

    use super::*;

    fn shape(quick: bool, cpus: usize) -> DemoShape {
        DemoShape { quick, cpus }
    }

    #[test]
    fn two_cpus_separate_the_generator_and_compare_at_the_top() {
        let text = spec(shape(true, 2));
        assert!(text.contains(r#"placements = ["separated"]"#), "{text}");
        assert!(text.contains(r#"a = "reactor/separated@8""#), "{text}");
        assert!(text.contains(r#"metric = "cpu_us_per_req""#), "{text}");
        assert!(spec(shape(false, 2)).contains("repetitions = \"auto\""));
    }

    #[test]
    fn a_busy_process_during_the_settle_wait_makes_the_busy_warning() {
        use crate::observe::environment::busy_warning;
        let cpus = crate::cpuset::allowed();
        // One spinning shell per CPU, each bounded by timeout(1) should the test die.
        let mut spinners: Vec<std::process::Child> = cpus
            .iter()
            .map(|_| {
                std::process::Command::new("timeout")
                    .args(["20", "sh", "-c", "while :; do :; done"])
                    .spawn()
                    .expect("timeout and sh (coreutils, dash)")
            })
            .collect();
        let settled = settle(&cpus, Duration::from_secs(1));
        for s in &mut spinners {
            // SIGTERM: timeout passes it on to its shell (a SIGKILL would orphan it).
            let pid = nix::unistd::Pid::from_raw(s.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = s.wait();
        }
        assert!(!settled.settled, "{settled:?}");
        let warning = busy_warning(&settled.sample(&cpus), settled.load1.unwrap_or(0.0));
        let warning = warning.expect("CPUs kept busy by spinners must warn");
        assert!(warning.contains("another busy process"), "{warning}");
    }

    #[test]
    fn one_cpu_shares_and_compares_nothing() {
        let text = spec(shape(true, 1));
        assert!(text.contains(r#"placements = ["shared"]"#), "{text}");
        assert!(!text.contains("[[comparisons]]"), "{text}");
    }

    #[test]
    fn the_demo_adds_to_the_verdicts_only_what_the_run_cannot_know() {
        assert!(verdict(None, false)[0].contains("no verdict"));
        let none = RunAnalysis::default();
        assert!(verdict(Some(&none), false)[0].contains("no winner named"));
    }
}
