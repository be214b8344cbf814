//! The one time model of a run: the dry run's estimate, the run's first line and the progress
//! line's ETA all come from [`Plan::time_for`], so they cannot disagree. A planned step is a
//! point of a series (all its repetitions); a run is one repetition of it. Its assumptions,
//! which [`Plan::assumptions`] states beside every estimate: each run takes its warm-up,
//! window and cool-down plus [`RUN_OVERHEAD`] (and a client group's common-start lead); each
//! server answers [`SERVER_START`] after it starts (a JVM takes longer); each `[profile]`
//! level costs a pass of the warm-up, perf's seconds and its start allowance; `auto`
//! repetitions take [`Plan::expected_runs`] a step until some have run.

use std::time::Duration;

use super::Plan;
use crate::sweep::spec::{Repetitions, Restart};

/// What a run costs beyond its warm-up, window and cool-down: connecting, the observers'
/// start and end, writing its files (measured: 0.11 s per run of the quick demo on 2 CPUs
/// under a load average of 11).
pub const RUN_OVERHEAD: Duration = Duration::from_millis(150);

/// Starting a server and waiting for it to answer (a built-in server: under 0.1 s; an
/// external one waits for its port).
pub const SERVER_START: Duration = Duration::from_millis(300);

/// Runs a point takes under `repetitions = "auto"`, as the estimate counts them before any
/// has run: the throughput's CV usually settles after 2 or 3 (the full demo: 34 runs over 12
/// points, 2.8 each).
pub const AUTO_EXPECTED_RUNS: f64 = 3.0;

/// Work left in a run, as the time model counts it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Work {
    /// Runs still to do (a fraction: `auto` repetitions are counted at their expected number).
    pub runs: f64,
    /// Server starts still to do.
    pub server_starts: usize,
    /// Profile passes still to do (one per `[profile]` level of each series).
    pub profile_passes: usize,
}

impl Plan {
    /// Planned steps: a step per point of each (target, placement) series, its repetitions
    /// inside it.
    pub fn planned_steps(&self) -> usize {
        self.targets.len() * self.placements.len() * self.series.max_points()
    }

    /// Runs a step is expected to take before any has run: its fixed count, or
    /// `auto_runs` ([`AUTO_EXPECTED_RUNS`] unless set) under `auto`.
    pub fn expected_runs(&self) -> f64 {
        match self.repetitions {
            Repetitions::Fixed(n) => n as f64,
            Repetitions::Auto => self.auto_runs.min(self.repetitions.max_runs() as f64),
        }
    }

    /// One run's expected wall time (with the client groups' common-start lead and fetches).
    pub fn run_time(&self) -> Duration {
        self.warmup + self.duration + self.cooldown + RUN_OVERHEAD + self.hosts_overhead().1
    }

    /// Other hosts' set-up before the first step, and each run's lead and fetches.
    fn hosts_overhead(&self) -> (Duration, Duration) {
        crate::fleet::hosts::groups::hosts_overhead(
            !self.hosts.hosts.is_empty(),
            &self.hosts.client_groups,
        )
    }

    /// The hosts' set-up before the first step (zero on this machine alone).
    pub fn set_up_time(&self) -> Duration {
        self.hosts_overhead().0
    }

    /// The `[profile]` passes of each series and one pass's time: the warm-up, perf's
    /// seconds and its start allowance (as the dry run's profile line says).
    pub fn profile_passes(&self) -> (usize, Duration) {
        match super::profile::section(&self.spec).ok().flatten() {
            Some(p) => (
                p.at.len(),
                self.warmup
                    + Duration::from_secs_f64(p.seconds)
                    + crate::profile::passes::PERF_START_ALLOWANCE,
            ),
            None => (0, Duration::ZERO),
        }
    }

    /// The work of `steps` planned steps, none begun, over `series` series.
    pub fn work_for(&self, steps: usize, series: usize) -> Work {
        let runs = steps as f64 * self.expected_runs();
        Work {
            runs,
            server_starts: match self.restart {
                Restart::Series => series.min(steps),
                Restart::Step => runs.ceil() as usize,
            },
            profile_passes: if steps == 0 {
                0
            } else {
                series * self.profile_passes().0
            },
        }
    }

    /// The time model: the wall time of `work`.
    pub fn time_for(&self, work: Work) -> Duration {
        self.run_time().mul_f64(work.runs.max(0.0))
            + SERVER_START * work.server_starts as u32
            + self.profile_passes().1 * work.profile_passes as u32
    }

    /// Estimated wall time of the whole plan on a machine that can run every step, the
    /// hosts' set-up included.
    pub fn estimate(&self) -> Duration {
        let series = self.targets.len() * self.placements.len();
        self.time_for(self.work_for(self.planned_steps(), series)) + self.set_up_time()
    }

    /// What the estimate assumes, in words, for the dry run and the run's first line.
    pub fn assumptions(&self) -> String {
        let secs = |d: Duration| {
            let s = format!("{:.2}", d.as_secs_f64());
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        };
        let mut text = format!(
            "each run {} s warm-up + {} s window + {} s cool-down + {} s to connect and record",
            secs(self.warmup),
            secs(self.duration),
            secs(self.cooldown),
            secs(RUN_OVERHEAD + self.hosts_overhead().1)
        );
        text.push_str(&format!(
            "; each server ready {} s after its start",
            secs(SERVER_START)
        ));
        let (passes, pass) = self.profile_passes();
        if passes > 0 {
            text.push_str(&format!(
                "; {passes} profile pass{} a series of {} s each",
                if passes == 1 { "" } else { "es" },
                secs(pass)
            ));
        }
        text
    }
}

/// Where a running plan is, for its ETA: the step being run and its runs so far, with the
/// runs that earlier steps actually took (under `auto`, the remaining steps are expected to
/// take as many as the finished ones did on average).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Done {
    /// Steps finished before the current one.
    pub steps: usize,
    /// Runs those steps took.
    pub runs: usize,
    /// Runs of the current step finished.
    pub runs_of_step: usize,
    /// Series whose server has started (counted once their first step has run).
    pub series_started: usize,
    /// Steps from the current one on that `stop_when` skips (they take no time).
    pub skipping: usize,
}

impl Plan {
    /// Time left once `done` is done: the current step's remaining runs and every later
    /// step's, by the same model as the dry run's estimate.
    pub fn time_left(&self, done: Done) -> Duration {
        let per_step = match (self.repetitions, done.steps) {
            (Repetitions::Auto, n) if n > 0 => done.runs as f64 / n as f64,
            _ => self.expected_runs(),
        };
        let max = self.repetitions.max_runs() as f64;
        // The run about to start counts whole, unless it is skipped.
        let this_step = match done.skipping {
            0 => (per_step - done.runs_of_step as f64).clamp(1.0, max.max(1.0)),
            _ => 0.0,
        };
        let later_steps = (self.planned_steps()).saturating_sub(done.steps + done.skipping.max(1));
        let series = self.targets.len() * self.placements.len();
        // The current series' passes follow its last step; a series not begun has all its own.
        let series_left = series.saturating_sub(done.series_started) + done.series_started.min(1);
        let mut work = Work {
            runs: this_step + later_steps as f64 * per_step,
            server_starts: series.saturating_sub(done.series_started),
            profile_passes: series_left.min(series) * self.profile_passes().0,
        };
        if self.restart == Restart::Step {
            work.server_starts = work.runs.ceil() as usize;
        }
        self.time_for(work)
    }
}

/// A duration as the dry run and the progress line show it: `1m08s`, `42s`.
pub fn show_duration(d: Duration) -> String {
    let secs = d.as_secs_f64().round() as u64;
    match secs {
        s if s >= 60 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}
