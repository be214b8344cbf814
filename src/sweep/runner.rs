//! The step loop: per (target, placement) a server is started once (or per step), then each
//! point of the series × repetition is measured: observer on → load → observer off → the
//! step's line appended to steps.jsonl. Every collaborator is a trait, so the loop is
//! tested with fakes.

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::plan::estimate::Done;
use super::plan::{Plan, Point, Series, TargetKind, TargetPlan};
use super::progress::{LiveStep, Position, Progress};
use super::spec::{OnFailure, Restart, StopWhen};
use crate::analyze::thresholds;
use crate::fleet::driver::{Driver, StepLoad, StepRequest};
use crate::fleet::error::StepError;
use crate::fleet::server::{Launcher, Server};
use crate::observe::step::{Observed, StepObserver};
use crate::placement::{CpuPair, PlacementSource};
use crate::record::figures::Disturbance;
use crate::record::figures::StepFigures;
use crate::record::load::{IntervalLine, IntervalSink, LoadReport, RequestError};
use crate::record::rundir::{RunDir, StepSink};
use crate::record::steps::{now_unix_s, ErrorKind, StepResult, StepStatus};

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunSummary {
    /// Every step of the run directory (resumed ones included), in order.
    pub steps: Vec<StepResult>,
    /// How it ended.
    pub end: RunEnd,
    /// Lines worth reporting (rate-search results, early stops).
    pub findings: Vec<String>,
}

/// How a run ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RunEnd {
    /// Every planned step ran (skipped ones included).
    #[default]
    Completed,
    /// Ctrl-C (or SIGTERM) ended it.
    Interrupted,
    /// A failed step ended it (`on_failure = "stop"`).
    StoppedOnFailure,
    /// A breached `abort = true` threshold ended it: why.
    ThresholdAbort(String),
    /// The hosts went away for good (the Slurm allocation it ran in ended): why.
    HostsGone(String),
}

/// Why a run stopped with an error (its finished steps are kept in its directory).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Its directory's steps could not be read (an earlier run's, for `--resume`).
    #[error("{0}")]
    Read(String),
    /// Its directory could not be written (a full disk): what failed and how to go on.
    #[error("{0}")]
    Write(String),
    /// A profile pass's record could not be written.
    #[error("{0}")]
    Profile(String),
}

/// The step loop and its collaborators.
pub struct Runner<'a> {
    /// What to run.
    pub plan: &'a Plan,
    /// Where results go.
    pub dir: &'a mut RunDir,
    /// Starts targets.
    pub launcher: &'a mut dyn Launcher,
    /// Puts load on them.
    pub driver: &'a mut dyn Driver,
    /// Watches the server.
    pub observer: &'a mut dyn StepObserver,
    /// Gives cpusets.
    pub placements: &'a dyn PlacementSource,
    /// Shows progress.
    pub progress: &'a mut dyn Progress,
    /// Ctrl-C.
    pub stop: &'a AtomicBool,
}

/// The file stem of a step.
pub fn step_id(target: &str, placement: &str, point: Point, rep: usize) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    match point.rate_rps {
        Some(r) => format!(
            "{}.{}.c{}.rate{:.0}.r{rep}",
            clean(target),
            clean(placement),
            point.clients,
            r
        ),
        None => format!(
            "{}.{}.c{}.r{rep}",
            clean(target),
            clean(placement),
            point.clients
        ),
    }
}

/// Which step: its series (target, placement), its point and repetition, and its id. What
/// the step loop's functions pass instead of the loose parameters.
#[derive(Debug, Clone)]
pub struct StepKey<'p> {
    /// The target.
    pub target: &'p TargetPlan,
    /// The placement's name.
    pub placement: &'p str,
    /// Clients and rate.
    pub point: Point,
    /// Repetition index, from 0.
    pub rep: usize,
    /// The step's id (the file stem of its raw files).
    pub id: String,
}

impl<'p> StepKey<'p> {
    /// The key of repetition `rep` of `point` in the series (target, placement).
    pub fn new(target: &'p TargetPlan, placement: &'p str, point: Point, rep: usize) -> Self {
        StepKey {
            target,
            placement,
            point,
            rep,
            id: step_id(&target.name, placement, point, rep),
        }
    }

    /// The progress bar's line for it.
    fn live_step(&self) -> LiveStep {
        LiveStep {
            target: self.target.name.clone(),
            placement: self.placement.to_string(),
            clients: self.point.clients,
            rep: self.rep,
            rate_rps: self.point.rate_rps,
        }
    }

    fn label(&self) -> String {
        let rate = self
            .point
            .rate_rps
            .map_or(String::new(), |r| format!(" rate={r:.0}"));
        format!(
            "{} {} c={}{rate}",
            self.target.name, self.placement, self.point.clients
        )
    }
}

/// A step's cpusets.
struct StepCpus {
    /// The server's on its host and the first client group's on its own.
    pair: CpuPair,
    /// Each client group's on its own host (empty without client groups).
    groups: Vec<Vec<usize>>,
}

/// Why a step did not measure: skipped (not run, with why) or failed (with its error).
enum StepEnd {
    Skipped(String),
    Failed(StepError),
}

/// What the whole run carries from series to series.
struct RunState {
    /// Every step in the run directory so far, by id (resumed ones included).
    done: BTreeMap<String, StepResult>,
    /// What the run returns.
    summary: RunSummary,
    /// Steps and runs done so far, for the ETA.
    at: Done,
}

/// One (target, placement) series while it runs.
struct SeriesRun<'p> {
    target: &'p TargetPlan,
    placement: &'p str,
    /// Its server while one runs, and the cpus it runs on.
    server: Option<Box<dyn Server>>,
    server_cpus: Option<Vec<usize>>,
    /// Why its server did not start: its later steps are skipped.
    launch_failed: Option<String>,
    /// Why the series stopped early (it saturated, or every request failed): its later
    /// points are skipped.
    stopped: Option<String>,
    /// Its points, one at a time.
    points: PointGen,
    /// Mean throughput and latency of each point measured, and those points with the runs
    /// each took.
    history: Vec<(f64, f64)>,
    history_points: Vec<(Point, usize)>,
    /// What stopping its servers had to do beyond SIGTERM (a server killed after the grace).
    stop_notes: Vec<String>,
}

impl<'p> SeriesRun<'p> {
    fn new(target: &'p TargetPlan, placement: &'p str, series: &Series) -> Self {
        SeriesRun {
            target,
            placement,
            server: None,
            server_cpus: None,
            launch_failed: None,
            stopped: None,
            points: PointGen::new(series),
            history: Vec::new(),
            history_points: Vec::new(),
            stop_notes: Vec::new(),
        }
    }

    /// Stops the series' server, if one runs, keeping what stopping it had to do.
    fn stop_server(&mut self) {
        if let Some(note) = self.server.take().and_then(|mut s| s.stop()) {
            self.stop_notes.push(note);
        }
    }

    /// The stop notes as run notes: each distinct one once, with how often it happened.
    fn take_stop_notes(&mut self) -> Vec<String> {
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        for n in self.stop_notes.drain(..) {
            *counts.entry(n).or_insert(0) += 1;
        }
        let series = format!("{} / {}", self.target.name, self.placement);
        counts
            .into_iter()
            .map(|(n, k)| match k {
                1 => format!("{series}: {n}"),
                k => format!("{series}: {n} ({k} times)"),
            })
            .collect()
    }
}

impl Runner<'_> {
    /// Runs every series; results already in the directory (`--resume`) are kept and skipped.
    pub fn run(&mut self) -> Result<RunSummary, RunError> {
        let done: BTreeMap<String, StepResult> = self
            .dir
            .steps()
            .map_err(|e| RunError::Read(e.to_string()))?
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let resumed = resumed_steps(&done);
        let mut run = RunState {
            done,
            summary: RunSummary::default(),
            at: Done {
                steps: 0,
                runs: 0,
                runs_of_step: 0,
                series_started: 0,
                skipping: 0,
            },
        };
        self.progress.begin(self.plan.planned_steps(), resumed);
        if resumed > 0 {
            let line = format!(
                "resumed: {} of the {} planned steps had finished before this run continued them (--resume); their figures are the earlier run's",
                resumed,
                self.plan.planned_steps()
            );
            self.note(&mut run.summary, line);
        }
        if self.plan.compares_balanced_and_separated() {
            for note in self.placements.notes() {
                self.note(&mut run.summary, note);
            }
        }
        let plan = self.plan;
        'all: for target in &plan.targets {
            for placement in &plan.placements {
                if self.run_series(target, placement, &mut run)? {
                    break 'all;
                }
            }
        }
        let mut steps: Vec<StepResult> = self
            .dir
            .steps()
            .map_err(|e| RunError::Read(e.to_string()))?;
        steps.sort_by(|a, b| a.started_unix_s.total_cmp(&b.started_unix_s));
        run.summary.steps = steps;
        self.progress.finish();
        Ok(run.summary)
    }

    /// Runs one series; true when the whole run must end.
    fn run_series(
        &mut self,
        target: &TargetPlan,
        placement: &str,
        run: &mut RunState,
    ) -> Result<bool, RunError> {
        let mut series = SeriesRun::new(target, placement, &self.plan.series);
        let mut end_run = false;
        let series_started = run.at.series_started;
        while let Some(point) = series.points.next() {
            let reps = self.run_point(&mut series, point, run, Runs::Planned)?;
            // Its server started with its first point: the ETA counts no start for it after.
            run.at.series_started = series_started + 1;
            match reps {
                ControlFlow::Continue(reps) => {
                    self.after_point(&mut series, point, &reps, &mut run.summary)
                }
                ControlFlow::Break(end) => {
                    run.summary.end = end;
                    end_run = true;
                    break;
                }
            }
        }
        if let Some(found) = series.points.finding(&target.name, placement) {
            self.note(&mut run.summary, found);
        }
        if !end_run {
            end_run = self.peak_again(&mut series, run)?;
        }
        if !end_run {
            self.profile_series(
                target,
                placement,
                &mut series.server,
                &mut series.server_cpus,
                &mut run.summary,
            )
            .map_err(|e| RunError::Profile(e.to_string()))?;
        }
        series.stop_server();
        for note in series.take_stop_notes() {
            self.note(&mut run.summary, note);
        }
        Ok(end_run)
    }

    /// Runs a point's repetitions, each recorded as it ends; Break with how the run ends when
    /// it must end there (Ctrl-C, a failure under `on_failure = "stop"`, ...).
    fn run_point(
        &mut self,
        series: &mut SeriesRun,
        point: Point,
        run: &mut RunState,
        runs: Runs,
    ) -> Result<ControlFlow<RunEnd, Vec<StepResult>>, RunError> {
        let mut reps: Vec<StepResult> = Vec::new();
        run.at.runs_of_step = 0;
        let first = runs.first();
        for rep in first..first + runs.most(self.plan) + DISTURBED_RERUNS {
            // A disturbed run does not count: it is run again, at most DISTURBED_RERUNS times.
            let disturbed = disturbed_runs(&reps);
            let counted = rep - first - disturbed;
            if !runs.again(self.plan, counted, &ok_throughputs(&reps)) {
                break;
            }
            if disturbed > 0
                && reps
                    .last()
                    .is_some_and(|s| s.status == StepStatus::Disturbed)
            {
                self.wait_for_quiet(&reps[reps.len() - 1]);
            }
            run.at.runs_of_step = rep;
            if self.interrupted(&run.summary) {
                return Ok(ControlFlow::Break(RunEnd::Interrupted));
            }
            let key = StepKey::new(series.target, series.placement, point, rep);
            if let Some(prev) = run.done.get(&key.id) {
                reps.push(prev.clone());
                continue;
            }
            // Once saturated, the series' steps left are skipped at once.
            run.at.skipping = match series.stopped {
                Some(_) => 1 + series.points.remaining().len(),
                None => 0,
            };
            let mut at = self.position(&run.at, rep);
            if runs != Runs::Planned {
                // After the series' last planned step, which it repeats no step of.
                (at.step, at.drift_check) = (run.at.steps.max(1), true);
            }
            self.progress.at(&at);
            let step = match &series.stopped {
                Some(why) => self.skipped(&key, why.clone()),
                None => self.one_step(&key, series),
            };
            let notes = self.driver.take_notes();
            for note in notes.into_iter().chain(self.launcher.take_notes()) {
                self.note(&mut run.summary, note);
            }
            // A step cut short by Ctrl-C is not recorded: --resume runs it again.
            if self.interrupted(&run.summary) {
                return Ok(ControlFlow::Break(RunEnd::Interrupted));
            }
            // Nor is one whose files could not be written: the next would fail alike.
            if step.error_kind == Some(ErrorKind::Io) {
                let why = step
                    .reason
                    .as_deref()
                    .unwrap_or("writing the run directory");
                return Err(self.cannot_write(&format!("step {}: {why}", key.id)));
            }
            let mut step = self.with_threshold_checks(step);
            step.figures.drift_check = runs != Runs::Planned;
            let gone = hosts_gone(&mut step);
            self.record(&step, run)?;
            let failed = step.status == StepStatus::Failed;
            let abort = thresholds::abort_reason(&self.plan.thresholds, &step);
            reps.push(step);
            if failed && self.plan.on_failure == OnFailure::Stop {
                return Ok(ControlFlow::Break(RunEnd::StoppedOnFailure));
            }
            if let Some(why) = gone {
                let line = format!("{why}: the run stopped there, its later steps were not run");
                self.note(&mut run.summary, line);
                return Ok(ControlFlow::Break(RunEnd::HostsGone(why)));
            }
            if let Some(why) = abort {
                self.note(&mut run.summary, why.clone());
                return Ok(ControlFlow::Break(RunEnd::ThresholdAbort(why)));
            }
            if series.stopped.is_none() && !self.plan.cooldown.is_zero() {
                self.sleep(self.plan.cooldown);
            }
        }
        // A drift check is no planned step: the ETA's count stays.
        if runs == Runs::Planned {
            run.at.steps += 1;
        }
        run.at.runs += reps.len();
        Ok(ControlFlow::Continue(reps))
    }

    /// A series whose throughput fell past its peak has the peak measured once more after
    /// its last level. A fall the machine made (a host slowing through the series: grpcio's
    /// CPU per call went 143 -> 177 µs from its peak to its last level, as it had gone
    /// 201 -> 143 µs from its first level to its peak) then shows at the peak's own load, and
    /// the analysis does not read it as the load's. True when the run must end.
    fn peak_again(&mut self, series: &mut SeriesRun, run: &mut RunState) -> Result<bool, RunError> {
        if series.stopped.is_some() || series.server.is_none() {
            return Ok(false);
        }
        let repeated = self.plan.repetitions.max_runs() >= 2;
        let Some(peak) = fell_past_peak(&series.history, repeated) else {
            return Ok(false);
        };
        let (point, made) = series.history_points[peak];
        let reps = match self.run_point(series, point, run, Runs::Again { after: made })? {
            ControlFlow::Continue(reps) => reps,
            ControlFlow::Break(end) => {
                run.summary.end = end;
                return Ok(true);
            }
        };
        let (first, last) = (
            series.history[peak].0,
            series.history[series.history.len() - 1].0,
        );
        let last_point = series.history_points[series.history_points.len() - 1].0;
        let line = match aggregate(&reps) {
            Some((again, _, _)) => format!(
                "{} / {}: throughput fell from {first:.0} req/s at {} to {last:.0} at {}; {} measured again after it: {again:.0} req/s ({})",
                series.target.name,
                series.placement,
                crate::analyze::run::peak::level_text(point.clients, point.rate_rps),
                crate::analyze::run::peak::level_text(last_point.clients, last_point.rate_rps),
                crate::analyze::run::peak::level_text(point.clients, point.rate_rps),
                drift_reading(first, again, last),
            ),
            None => format!(
                "{} / {}: throughput fell past its peak; the peak's load measured again after the last level did not measure",
                series.target.name, series.placement
            ),
        };
        self.note(&mut run.summary, line);
        Ok(false)
    }

    /// The progress line's position at repetition `rep` (from 0) of the current step.
    fn position(&self, at: &Done, rep: usize) -> Position {
        Position {
            step: at.steps + 1,
            steps: self.plan.planned_steps(),
            repetition: rep + 1,
            repetitions: self.plan.repetitions.max_runs(),
            auto: self.plan.repetitions == super::spec::Repetitions::Auto,
            left: self.plan.time_left(*at),
            drift_check: false,
        }
    }

    /// The step with its thresholds' checks (the `thresholds` array of its steps.jsonl line).
    fn with_threshold_checks(&self, mut step: StepResult) -> StepResult {
        step.figures.thresholds = thresholds::step_checks(&self.plan.thresholds, &step);
        step
    }

    /// The error that ends a run whose directory cannot be written (a full disk): what
    /// failed, and how to go on once there is room.
    fn cannot_write(&self, what: &str) -> RunError {
        RunError::Write(format!(
            "{what}; the run stopped, its finished steps are in {}: free space, then continue with `{}`",
            self.dir.path.join("steps.jsonl").display(),
            resume_command(&self.dir.path)
        ))
    }

    /// True once Ctrl-C has been pressed (or a profile pass saw it).
    fn interrupted(&self, summary: &RunSummary) -> bool {
        self.stop.load(Ordering::Relaxed) || summary.end == RunEnd::Interrupted
    }

    /// Appends a finished step to steps.jsonl (on disk before the next starts) and shows it.
    fn record(&mut self, step: &StepResult, run: &mut RunState) -> Result<(), RunError> {
        self.dir
            .append(step)
            .map_err(|e| self.cannot_write(&format!("writing steps.jsonl: {e}")))?;
        self.progress.done(step);
        run.done.insert(step.id.clone(), step.clone());
        Ok(())
    }

    /// Feeds a point's repetitions back: the rate search's next point, and the saturation
    /// check that skips the rest of the series.
    fn after_point(
        &mut self,
        series: &mut SeriesRun,
        point: Point,
        reps: &[StepResult],
        summary: &mut RunSummary,
    ) {
        let agg = aggregate(reps);
        series.points.observe(point, agg.map(|a| a.2));
        // A point whose load generator saturated measured the client, not the server: the
        // analysis leaves it out, and so does the saturation check.
        if let (Some((thr, lat, _)), false) = (agg, measured_the_client(reps)) {
            series.history.push((thr, lat));
            series.history_points.push((point, reps.len()));
        }
        if let (None, Some(why)) = (&series.stopped, every_request_failed(reps)) {
            let why = format!("{why}: the rest of the series was not run");
            let line = format!("{} / {}: {why}", series.target.name, series.placement);
            self.note(summary, line);
            series.stopped = Some(why);
        }
        if series.stopped.is_none()
            && self.plan.stop_when == Some(StopWhen::Saturated)
            && is_saturated(&series.history)
        {
            let from = series.history_points[series.history_points.len() - 3].0;
            let why = super::plan::saturation_note(from, point, &series.points.remaining());
            let line = format!("{} / {}: {why}", series.target.name, series.placement);
            self.note(summary, line);
            series.stopped = Some(why);
        }
    }

    /// A line for the console and the run's notes.
    fn note(&mut self, summary: &mut RunSummary, line: String) {
        self.progress.note(&line);
        summary.findings.push(line);
    }

    /// The step's line before it runs: its identity, status `skipped`.
    fn blank(&self, key: &StepKey) -> StepResult {
        let (target, point) = (key.target, key.point);
        let mut step = StepResult::empty(
            key.id.clone(),
            &target.name,
            key.placement,
            point.clients,
            key.rep,
        );
        step.rate_rps = point.rate_rps;
        step.inflight = point.clients * self.plan.connections_per_client * target.depth;
        step
    }

    /// A step not run, with why.
    fn skipped(&self, key: &StepKey, why: String) -> StepResult {
        let mut step = self.blank(key);
        step.reason = Some(why);
        step
    }

    /// Runs one step; a step that did not measure says why (and, failed, its error's kind).
    fn one_step(&mut self, key: &StepKey, series: &mut SeriesRun) -> StepResult {
        let mut step = self.blank(key);
        self.progress.step(&key.label());
        match self.try_step(key, series, &mut step) {
            Ok(()) => {}
            Err(StepEnd::Skipped(why)) => step.reason = Some(why),
            Err(StepEnd::Failed(e)) => {
                step.status = StepStatus::Failed;
                step.reason = Some(e.to_string());
                step.error_kind = Some(e.kind());
            }
        }
        step
    }

    /// The step's cpusets, its server (started or reused), its load with the observers on.
    fn try_step(
        &mut self,
        key: &StepKey,
        series: &mut SeriesRun,
        step: &mut StepResult,
    ) -> Result<(), StepEnd> {
        let mut cpus = self.step_cpus(key)?;
        step.server_cpus = crate::cpuset::format(&cpus.pair.server);
        step.client_cpus = crate::cpuset::format(&cpus.pair.client);
        if let Some(why) = self.launcher.host_down(key.target) {
            return Err(StepEnd::Failed(StepError::Remote(why)));
        }
        if let Some(why) = &series.launch_failed {
            return Err(StepEnd::Skipped(format!("target did not start: {why}")));
        }
        let server = self
            .ensure_server(key, &cpus.pair, series)
            .map_err(StepEnd::Failed)?;
        // A server already running is on its own CPUs: the placement is the client's only.
        if let Some(own) = server.own_cpus() {
            cpus.pair.server = own;
            step.server_cpus = crate::cpuset::format(&cpus.pair.server);
        }
        let not_observed = server.not_observed();
        step.started_unix_s = now_unix_s();
        let outcome = self.measure(key, cpus, server);
        let gone = outcome.as_ref().is_ok_and(|(load, ..)| saw_server_go(load));
        if let Some(why) = died_within(
            server.as_mut(),
            if gone { EXIT_WAIT } else { Duration::ZERO },
        ) {
            let lost = server.host_lost();
            series.server = None;
            if lost {
                self.launcher.host_lost(key.target, &why);
            }
            let why = format!("the server died during the step: {why}");
            return Err(StepEnd::Failed(StepError::Launch(why)));
        }
        if self.plan.restart == Restart::Step {
            series.stop_server();
        }
        let (load, figures, mut observed) = outcome.map_err(StepEnd::Failed)?;
        (step.load, step.figures) = (Some(load), figures);
        if let Some(why) = not_observed {
            observed.mark_not_observed(&why);
        }
        step.set_observed(observed);
        (step.status, step.reason) = verdict(step, self.plan.max_error_ratio);
        if step.status == StepStatus::Failed {
            step.error_kind = Some(ErrorKind::Load);
        }
        self.mark_disturbed(step);
        Ok(())
    }

    /// An ok step whose CPUs other processes shared (`disturbed_pct`) becomes `disturbed`, or
    /// stays `ok` marked as such under `--keep-disturbed`. One whose client groups started
    /// late becomes `disturbed` whatever the flag: its observers measured another span.
    fn mark_disturbed(&self, step: &mut StepResult) {
        if step.status != StepStatus::Ok {
            return;
        }
        if let Some(why) = started_late(step) {
            step.status = StepStatus::Disturbed;
            step.reason = Some(why);
            return;
        }
        let Some(n) = step.observation().and_then(|o| o.neighbours.as_ref()) else {
            return;
        };
        let Some(d) = Disturbance::of(n, self.plan.disturbed_pct, self.plan.keep_disturbed) else {
            return;
        };
        if !d.kept {
            step.status = StepStatus::Disturbed;
            step.reason = Some(format!(
                "{}, over disturbed_pct = {}",
                d.describe(),
                self.plan.disturbed_pct
            ));
        }
        step.figures.disturbed = Some(d);
    }

    /// Before a disturbed step's re-run: waits, at most [`QUIET_WAIT`], until its CPUs are
    /// busier than `disturbed_pct` no more (between steps the server idles, so what keeps them
    /// busy is other work), and says how it went.
    fn wait_for_quiet(&mut self, disturbed: &StepResult) {
        let mut cpus: Vec<usize> = crate::cpuset::parse(&disturbed.server_cpus).unwrap_or_default();
        cpus.extend(crate::cpuset::parse(&disturbed.client_cpus).unwrap_or_default());
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.is_empty() {
            return;
        }
        let quiet = crate::machine::procfs::wait_until_quiet(
            &cpus,
            self.plan.disturbed_pct,
            QUIET_WAIT,
            self.stop,
        );
        let how = if quiet.settled {
            format!("once its CPUs were {}", quiet.describe())
        } else {
            format!(
                "although its CPUs were still {} (the most it waits)",
                quiet.describe()
            )
        };
        self.progress.note(&format!(
            "{} was disturbed; running it again {how}",
            disturbed.id
        ));
    }

    /// The step's cpusets (the server's on its host, the first client group's on its own) and
    /// each client group's. A host that is down fails the step; a placement the hosts cannot
    /// give skips it.
    fn step_cpus(&self, key: &StepKey) -> Result<StepCpus, StepEnd> {
        let target = key.target;
        let follow = self.plan.cpus_follow_clients.then_some(key.point.clients);
        let groups = &self.plan.hosts.client_groups;
        let hosts = target.host.iter().chain(groups.iter().flatten());
        if let Some(why) = hosts.filter_map(|h| self.placements.host_down(h)).next() {
            return Err(StepEnd::Failed(StepError::Remote(why)));
        }
        let server_host = target.host.as_deref();
        let on = |client_host: Option<&str>| {
            self.placements
                .cpus_on(server_host, client_host, key.placement, follow)
        };
        let pair = on(groups.first().and_then(Option::as_deref))
            .map_err(|why| StepEnd::Skipped(why.to_string()))?;
        let groups = groups
            .iter()
            .map(|g| on(g.as_deref()).map(|p| p.client))
            .collect::<Result<_, _>>()
            .map_err(|why| StepEnd::Skipped(format!("a client group: {why}")))?;
        Ok(StepCpus { pair, groups })
    }

    /// The series' server when it still runs on these cpus (and `restart` keeps it), else a
    /// new one. A launch that fails is remembered: the series' later steps are skipped.
    fn ensure_server<'s>(
        &mut self,
        key: &StepKey,
        cpus: &CpuPair,
        series: &'s mut SeriesRun,
    ) -> Result<&'s mut Box<dyn Server>, StepError> {
        let stale = series.server_cpus.as_ref() != Some(&cpus.server);
        if let Some(s) = series.server.as_mut() {
            if let Some(why) = s.died() {
                if s.host_lost() {
                    self.launcher.host_lost(key.target, &why);
                }
                series.server = None;
                return Err(StepError::Launch(format!("the server had died: {why}")));
            }
        }
        // A server already running is found again at each step (its pid may have changed).
        let running = key.target.kind.is_running();
        if stale || running || series.server.is_none() || self.plan.restart == Restart::Step {
            series.stop_server();
            let launched = self
                .launcher
                .launch(key.target, cpus, key.point.clients, self.stop);
            match launched {
                Ok(s) => {
                    series.server = Some(s);
                    series.server_cpus = Some(cpus.server.clone());
                }
                // A server already running may answer again at the next step.
                Err(why) if running => return Err(why.into()),
                Err(why) => {
                    series.launch_failed = Some(first_line(&why.to_string()));
                    return Err(why.into());
                }
            }
        }
        series
            .server
            .as_mut()
            .ok_or_else(|| StepError::Launch("no server".to_string()))
    }

    /// Runs the step's load with the observers on over its measured window; the load's
    /// figures (the engine's and its others) and the observers'.
    fn measure(
        &mut self,
        key: &StepKey,
        cpus: StepCpus,
        server: &mut Box<dyn Server>,
    ) -> Result<(LoadReport, StepFigures, Observed), StepError> {
        self.observer.server_extras(&server.extras());
        let (watched, local_server) = self.watched_cpus(key, &cpus);
        let req = self.step_request(key, cpus, &**server);
        let observe_now = self.observers_start_now(&req);
        let mut files = self
            .dir
            .step_sink(&key.id)
            .map_err(|e| StepError::io("writing the step's files", e))?;
        files.log_histograms = self.driver.live_intervals();
        let mut sink = LoopSink {
            inner: files,
            observer: &mut *self.observer,
            progress: &mut *self.progress,
            started: false,
            pid: server.pid(),
            cpus: watched,
            local_server,
            cores: None,
            live: self.driver.live_intervals(),
            step: key.live_step(),
        };
        // perf attaches now, before the load: its start-up must not fall inside the window.
        sink.observer
            .prepare(sink.pid, &sink.cpus.server, &sink.cpus.client);
        if observe_now {
            sink.start_observer();
        }
        let result = self.driver.run_step(&req, &mut sink, self.stop);
        sink.end(result)
    }

    /// What this machine's observers watch: the server's cpus (on its host) with this
    /// machine's client cpus (its client group's, when one runs here), and the server's cpus
    /// when it runs here (empty otherwise).
    fn watched_cpus(&self, key: &StepKey, cpus: &StepCpus) -> (CpuPair, Vec<usize>) {
        let groups = &self.plan.hosts.client_groups;
        let client = match groups.iter().position(Option::is_none) {
            _ if groups.is_empty() => cpus.pair.client.clone(),
            Some(k) => cpus.groups[k].clone(),
            None => Vec::new(),
        };
        let local_server = if key.target.host.is_none() {
            cpus.pair.server.clone()
        } else {
            Vec::new()
        };
        let pair = CpuPair {
            server: cpus.pair.server.clone(),
            client,
        };
        (pair, local_server)
    }

    /// The observers start before the load unless something starts them at the window:
    /// client groups at their planned instant, a driver that signals its window (the built-in
    /// engine) after connecting and warming up, others at their first window line.
    fn observers_start_now(&self, req: &StepRequest) -> bool {
        let grouped = !self.plan.hosts.client_groups.is_empty();
        let signals = self.driver.signals_window(req);
        !grouped && !signals && (self.plan.warmup.is_zero() || !self.driver.live_intervals())
    }

    /// The driver's request for the step.
    fn step_request(&self, key: &StepKey, cpus: StepCpus, server: &dyn Server) -> StepRequest {
        let connections = key.point.clients * self.plan.connections_per_client;
        let threads = self
            .plan
            .client_threads
            .unwrap_or(cpus.pair.client.len())
            .clamp(1, connections);
        let port = server.port();
        let host = (key.target.host.as_ref()).and_then(|h| self.plan.hosts.hosts.get(h));
        let url = super::plan::hosts::fill_host(&key.target.url, host);
        StepRequest {
            instances: crate::fleet::instances::addrs(&server.extras(), &url),
            group_cpus: cpus.groups,
            group_targets: self.group_targets(key.target),
            step_id: key.id.clone(),
            url: url.replace("{port}", &port.to_string()),
            port,
            clients: key.point.clients,
            connections,
            depth: key.target.depth,
            message: key.target.message.clone(),
            threads,
            duration: self.plan.duration,
            warmup: self.plan.warmup,
            timeout: self.plan.timeout,
            rate_rps: key.point.rate_rps,
            client_cpus: cpus.pair.client,
            out_dir: self.dir.path.clone(),
        }
    }

    /// A kvd target over several hosts: each client group loads the rank on its own host
    /// (the plan refused groups on a host without one), seeded with that rank.
    fn group_targets(&self, target: &TargetPlan) -> Vec<crate::fleet::driver::GroupTarget> {
        let TargetKind::Builtin(args) = &target.kind else {
            return Vec::new();
        };
        if target.rank_hosts.is_empty() {
            return Vec::new();
        }
        let groups = &self.plan.hosts.client_groups;
        groups
            .iter()
            .map(|g| {
                let rank = (target.rank_hosts.iter())
                    .position(|h| g.as_deref() == Some(h.as_str()))
                    .unwrap_or(0);
                crate::fleet::driver::GroupTarget {
                    url: super::plan::ranks::rank_url(args, rank),
                    seed_offset: rank as u64,
                }
            })
            .collect()
    }

    fn sleep(&self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end && !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sits between the driver and the run directory: writes the intervals, starts the
/// observer at the end of the warm-up, feeds the progress bar.
struct LoopSink<'a> {
    inner: StepSink,
    observer: &'a mut dyn StepObserver,
    progress: &'a mut dyn Progress,
    started: bool,
    pid: Option<i32>,
    /// The server's cpus (on its host) and this machine's client cpus.
    cpus: CpuPair,
    /// The server's cpus when it runs on this machine (empty otherwise).
    local_server: Vec<usize>,
    /// The per-core busy % columns, from the observers' start.
    cores: Option<crate::observe::cores::CoreColumns>,
    /// The driver's lines come while it runs.
    live: bool,
    /// The step's labels for the progress' per-second lines.
    step: LiveStep,
}

impl LoopSink<'_> {
    fn start_observer(&mut self) {
        self.observer
            .start(self.pid, &self.cpus.server, &self.cpus.client);
        self.cores = Some(crate::observe::cores::CoreColumns::start(
            self.live,
            &self.local_server,
            &self.cpus.client,
        ));
        self.started = true;
    }

    /// Once the load is over: the observers' figures (started now if the window never
    /// began), the step's files flushed, the load's figures.
    fn end(
        mut self,
        result: Result<StepLoad, StepError>,
    ) -> Result<(LoadReport, StepFigures, Observed), StepError> {
        if !self.started {
            self.start_observer();
        }
        let requests = result.as_ref().map_or(0, |l| l.report.requests);
        let mut observed = self.observer.finish(requests);
        let hist = result.as_ref().ok().and_then(|l| l.hist_ns.clone());
        let cores_cpu_s = self
            .finish(hist, result.is_ok())
            .map_err(|e| StepError::io("writing the step's files", e))?;
        let load = result?;
        crate::observe::cores::add_observer_cpu(&mut observed.observer_cpu_s, cores_cpu_s);
        Ok((load.report, load.figures, observed))
    }

    /// Flushes the step's files (named `.partial` unless the load `complete`d); returns the
    /// CPU seconds the per-core sampling used.
    fn finish(self, hist: Option<Histogram<u64>>, complete: bool) -> std::io::Result<f64> {
        let mut inner = self.inner;
        let cores_cpu_s = self.cores.map_or(0.0, |c| c.finish(&mut inner));
        // An external tool gives no per-second histograms: log its whole-window one.
        let logged = hist.map_or(Ok(()), |h| inner.ensure_one(h));
        // The files are closed (and named partial) even when that failed.
        let finished = inner.finish(complete && logged.is_ok());
        logged.and(finished)?;
        Ok(cores_cpu_s)
    }
}

impl IntervalSink for LoopSink<'_> {
    fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        match self.cores.as_mut() {
            Some(cores) => cores.line(line, hist_ns, &mut self.inner),
            None => self.inner.interval(line, hist_ns),
        }
        // The line that closes the warm-up has elapsed exactly 0 (the engine cuts an interval
        // there): the window starts now. Earlier warm-up lines are negative.
        if !self.started && line.elapsed_s >= -1e-6 {
            self.start_observer();
        }
        self.progress.live(line.ops_per_s);
        self.progress.interval(&self.step, line, hist_ns);
    }

    fn window_started(&mut self) {
        if !self.started {
            self.start_observer();
        }
    }

    fn window_ended(&mut self) {
        if self.started {
            self.observer.end_window();
        }
        if let Some(cores) = self.cores.as_mut() {
            cores.end_window();
        }
    }
}

/// The status of a measured step: `failed` when nothing completed in its window (no figure
/// of it means anything: a server still starting or stalled), `errors` when its failed
/// requests are over the allowed share (so the analysis leaves it out), `ok` otherwise.
pub fn verdict(step: &StepResult, max_error_ratio: f64) -> (StepStatus, Option<String>) {
    if let Some(l) = step.load.as_ref() {
        if l.requests == 0 && l.errors.values().sum::<u64>() == 0 {
            let why = "no request completed and none failed in the window: the server answered \
                       nothing (still starting, or stalled)";
            return (StepStatus::Failed, Some(why.to_string()));
        }
    }
    let ratio = step.error_ratio();
    if ratio <= max_error_ratio {
        return (StepStatus::Ok, None);
    }
    let kinds = step.load.as_ref().map_or(String::new(), |l| {
        crate::record::load::errors_text(&l.errors, &l.error_statuses)
    });
    let why = format!(
        "{:.1}% of requests failed ({kinds}), over max_error_ratio = {max_error_ratio}",
        ratio * 100.0
    );
    (StepStatus::Errors, Some(why))
}

/// The command that continues a run in `dir`, ready to paste: the program as it was invoked
/// (`target/release/stairbench`, or `stairbench` from the PATH) and the directory quoted
/// where a shell would split it.
pub fn resume_command(dir: &std::path::Path) -> String {
    let program = std::env::args()
        .next()
        .unwrap_or_else(|| "stairbench".into());
    format!(
        "{} run --resume {}",
        quoted(&program),
        quoted(&dir.to_string_lossy())
    )
}

/// `s` as one shell word: as it is when it has only safe characters, single-quoted otherwise.
fn quoted(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_string()
    } else {
        crate::remote::shell::shell_quote(s)
    }
}

/// Why a point measured nothing the server did right: every request of every repetition
/// failed (a 403 for every path, a refused connection), with the errors by kind. A higher
/// load would fail alike, so the series stops there.
fn every_request_failed(reps: &[StepResult]) -> Option<String> {
    let loads: Vec<_> = reps.iter().filter_map(|s| s.load.as_ref()).collect();
    let all_failed = !loads.is_empty()
        && loads.len() == reps.len()
        && loads
            .iter()
            .all(|l| l.requests == 0 && l.errors.values().sum::<u64>() > 0);
    if !all_failed {
        return None;
    }
    let (mut kinds, mut statuses) = (BTreeMap::new(), BTreeMap::new());
    for l in &loads {
        for (kind, n) in &l.errors {
            *kinds.entry(kind.clone()).or_default() += n;
        }
        for (code, n) in &l.error_statuses {
            *statuses.entry(*code).or_default() += n;
        }
    }
    let clients = reps[0].clients;
    Some(format!(
        "every request failed at {} ({})",
        crate::units::count(clients, "client"),
        crate::record::load::errors_text(&kinds, &statuses)
    ))
}

/// Runs of a point beyond its repetitions that replace disturbed ones.
const DISTURBED_RERUNS: usize = 2;

/// Which runs of a point [`Runner::run_point`] makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// Its planned repetitions (`repetitions`, fixed or `auto`).
    Planned,
    /// One more, after the `after` runs it made: the series' peak measured again after its
    /// last level (a drift check).
    Again { after: usize },
}

impl Runs {
    /// The repetition index of its first run.
    fn first(self) -> usize {
        match self {
            Runs::Planned => 0,
            Runs::Again { after } => after,
        }
    }

    /// The most runs that count.
    fn most(self, plan: &Plan) -> usize {
        match self {
            Runs::Planned => plan.repetitions.max_runs(),
            Runs::Again { .. } => 1,
        }
    }

    /// Whether another counted run is due after `counted` ones whose ok throughputs are `ok`.
    fn again(self, plan: &Plan, counted: usize, ok: &[f64]) -> bool {
        counted < self.most(plan) && (self != Runs::Planned || plan.repetitions.again(counted, ok))
    }
}

/// The index of a series' peak when its throughput fell past it as the analysis reads a fall
/// (its coherency rule): the last point measured under
/// [`FALL_FRACTION`](crate::analyze::knee::FALL_FRACTION) of the best one, two points or more
/// past it, or one when the points were `repeated` (their spread then judges the fall).
fn fell_past_peak(history: &[(f64, f64)], repeated: bool) -> Option<usize> {
    let (peak, best) = history
        .iter()
        .enumerate()
        .max_by(|a, b| a.1 .0.total_cmp(&b.1 .0))
        .map(|(i, h)| (i, h.0))?;
    let last = history.last()?.0;
    let past = history.len() - 1 - peak;
    (past >= 2 - usize::from(repeated) && last < crate::analyze::knee::FALL_FRACTION * best)
        .then_some(peak)
}

/// What the peak measured again (`again`) says of a fall from `first` to `last`, as the
/// analysis reads it ([`fall_was_drift`](crate::analyze::knee::fall_was_drift)): the
/// machine's when the last level is within the fall fraction of the peak measured after it,
/// else held.
fn drift_reading(first: f64, again: f64, last: f64) -> String {
    let change_pct = 100.0 * (again / first - 1.0);
    if crate::analyze::knee::fall_was_drift(last, again) {
        format!("{change_pct:+.0}% against its first measure, the last level within 10% of it: the machine slowed, and the fall is not read as the load's")
    } else {
        format!("{change_pct:+.0}% against its first measure: the fall held")
    }
}
/// How long a disturbed step's re-run waits at most for its CPUs to quiet.
const QUIET_WAIT: Duration = Duration::from_secs(5);

/// Why a step's client groups measured another span than its observers, if they did: they
/// started after the planned window (its lead too short for their hosts' start).
fn started_late(step: &StepResult) -> Option<String> {
    let overlap = step.figures.observed_window_overlap?;
    let lead_ms = step
        .figures
        .groups_overhead
        .map_or(0.0, |o| o.start_lead_ms);
    (overlap < crate::remote::window::MIN_WINDOW_OVERLAP).then(|| {
        format!(
            "the client groups started late: their windows and the one the observers measured overlap {:.0}% (at least {:.0}% is needed) with a {:.1} s lead; run again with a longer one",
            overlap * 100.0,
            crate::remote::window::MIN_WINDOW_OVERLAP * 100.0,
            lead_ms / 1e3
        )
    })
}

/// A point's runs so far that were disturbed (and so do not count as repetitions).
fn disturbed_runs(reps: &[StepResult]) -> usize {
    reps.iter()
        .filter(|s| s.status == StepStatus::Disturbed)
        .count()
}

/// Planned steps already finished in a resumed run directory: its distinct points.
fn resumed_steps(done: &BTreeMap<String, StepResult>) -> usize {
    let points: std::collections::BTreeSet<(&str, &str, usize, Option<u64>)> = done
        .values()
        .map(|s| {
            let rate = s.rate_rps.map(f64::to_bits);
            (s.target.as_str(), s.placement.as_str(), s.clients, rate)
        })
        .collect();
    points.len()
}

/// Throughputs (req/s) of a point's ok repetitions so far.
fn ok_throughputs(reps: &[StepResult]) -> Vec<f64> {
    reps.iter()
        .filter(|s| s.status == StepStatus::Ok)
        .filter_map(StepResult::throughput_rps)
        .collect()
}

/// True when a repetition of the point saturated its load generator (as the analysis
/// counts a point client-saturated).
/// The load's error kinds that say the server went away: its connections closed or refused,
/// or a shared-memory server's region stopped.
const GONE_KINDS: [RequestError; 3] = [
    RequestError::Closed,
    RequestError::Connect,
    RequestError::ServerStopped,
];

/// How long a server the load saw go away may take to exit and be reaped: a kvd rank 0 whose
/// peer was killed exits only once the load's clients have left, after the window.
const EXIT_WAIT: Duration = Duration::from_secs(1);

fn saw_server_go(load: &LoadReport) -> bool {
    GONE_KINDS.iter().any(|&k| load.errors_of(k) > 0)
}

/// Why the server died, waiting up to `wait` for it to do so.
fn died_within(server: &mut dyn Server, wait: Duration) -> Option<String> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let why = server.died();
        if why.is_some() || std::time::Instant::now() >= deadline {
            return why;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn measured_the_client(reps: &[StepResult]) -> bool {
    reps.iter()
        .any(|s| s.load.as_ref().is_some_and(|l| l.client_saturated))
}

/// Mean throughput, mean latency and mean p99 (ms) of a point's ok repetitions.
fn aggregate(reps: &[StepResult]) -> Option<(f64, f64, f64)> {
    let ok: Vec<&crate::record::load::LoadReport> = reps
        .iter()
        .filter(|s| s.status == StepStatus::Ok)
        .filter_map(|s| s.load.as_ref())
        .collect();
    if ok.is_empty() {
        return None;
    }
    let n = ok.len() as f64;
    Some((
        ok.iter().map(|l| l.throughput_rps).sum::<f64>() / n,
        ok.iter().map(|l| l.latency_us.mean).sum::<f64>() / n,
        ok.iter().map(|l| p99_with_timeouts_us(l)).sum::<f64>() / n / 1000.0,
    ))
}

/// The p99 of a run counting its timed-out requests, which the latency figures leave out: a
/// timed-out request is slower than any target, so when over 1% of the requests tried timed
/// out, the p99 is infinite.
fn p99_with_timeouts_us(load: &crate::record::load::LoadReport) -> f64 {
    let timeouts = load.errors_of(RequestError::Timeout);
    let tried = load.requests + load.errors.values().sum::<u64>();
    if tried > 0 && timeouts as f64 / tried as f64 > 0.01 {
        return f64::INFINITY;
    }
    load.latency_us.p99
}

/// Two steps in a row added under 5% throughput while latency kept growing.
pub fn is_saturated(history: &[(f64, f64)]) -> bool {
    let [.., a, b, c] = history else { return false };
    let flat = |x: &(f64, f64), y: &(f64, f64)| y.0 < x.0 * 1.05;
    let slower = |x: &(f64, f64), y: &(f64, f64)| y.1 > x.1;
    flat(a, b) && flat(b, c) && slower(a, b) && slower(b, c)
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.split("; its output ends with")
        .next()
        .unwrap_or(line)
        .to_string()
}

/// The points of a series, one at a time (a rate search picks the next from the last).
enum PointGen {
    List(std::vec::IntoIter<Point>),
    Find(FindState),
}

struct FindState {
    clients: usize,
    p99_ms: f64,
    lo: f64,
    hi: f64,
    left: usize,
    best_ok: Option<f64>,
    worst_bad: Option<f64>,
    next: Option<f64>,
}

impl PointGen {
    fn new(series: &Series) -> PointGen {
        match series {
            Series::Clients(c) => PointGen::List(
                c.iter()
                    .map(|&clients| Point {
                        clients,
                        rate_rps: None,
                    })
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            Series::Rates { rates, clients } => PointGen::List(
                rates
                    .iter()
                    .map(|&r| Point {
                        clients: *clients,
                        rate_rps: Some(r),
                    })
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            Series::Find {
                lo,
                hi,
                p99_ms,
                max_steps,
                clients,
            } => PointGen::Find(FindState {
                clients: *clients,
                p99_ms: *p99_ms,
                lo: *lo,
                hi: *hi,
                left: *max_steps,
                best_ok: None,
                worst_bad: None,
                next: Some(*lo),
            }),
        }
    }

    fn next(&mut self) -> Option<Point> {
        match self {
            PointGen::List(it) => it.next(),
            PointGen::Find(f) => {
                if f.left == 0 {
                    return None;
                }
                let rate = f.next.take()?;
                f.left -= 1;
                Some(Point {
                    clients: f.clients,
                    rate_rps: Some(rate),
                })
            }
        }
    }

    /// The points not yet given (a rate search's are not known in advance: none).
    fn remaining(&self) -> Vec<Point> {
        match self {
            PointGen::List(it) => it.as_slice().to_vec(),
            PointGen::Find(_) => Vec::new(),
        }
    }

    /// Feeds back a point's p99 (ms), None when it failed.
    fn observe(&mut self, point: Point, p99_ms: Option<f64>) {
        let PointGen::Find(f) = self else { return };
        let Some(rate) = point.rate_rps else { return };
        if p99_ms.is_some_and(|p| p <= f.p99_ms) {
            f.best_ok = Some(f.best_ok.map_or(rate, |b: f64| b.max(rate)));
        } else {
            f.worst_bad = Some(f.worst_bad.map_or(rate, |b: f64| b.min(rate)));
        }
        f.next = match (f.best_ok, f.worst_bad) {
            (None, _) => None,
            (Some(ok), None) if ok < f.hi => Some(f.hi),
            (Some(_), None) => None,
            (Some(ok), Some(bad)) => Some((ok + bad) / 2.0).filter(|_| (bad - ok) / bad > 0.01),
        };
        let _ = f.lo;
    }

    fn finding(&self, target: &str, placement: &str) -> Option<String> {
        let PointGen::Find(f) = self else { return None };
        Some(match f.best_ok {
            Some(best) => format!(
                "{target} / {placement}: highest rate with p99 <= {} ms: {best:.0} requests/s{}",
                f.p99_ms,
                f.worst_bad
                    .map_or(" (the top of the range)".to_string(), |b| format!(
                        " ({b:.0} did not meet it)"
                    ))
            ),
            None => format!(
                "{target} / {placement}: even {:.0} requests/s missed p99 <= {} ms",
                f.lo, f.p99_ms
            ),
        })
    }
}

/// Why no step can run any more, when `step` failed because the hosts' allocation ended: its
/// reason then says so too, when srun's words did not (a step's tasks only told to stop).
fn hosts_gone(step: &mut StepResult) -> Option<String> {
    if step.status != StepStatus::Failed {
        return None;
    }
    let reason = step.reason.get_or_insert_with(String::new);
    let why = crate::remote::hosts_gone(reason)?;
    if !crate::remote::says_hosts_gone(reason) {
        reason.push_str(&format!(" ({why})"));
    }
    Some(why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fall_is_checked_where_the_analysis_reads_one() {
        let h = |x: &[f64]| x.iter().map(|&t| (t, 1.0)).collect::<Vec<_>>();
        // Two levels past the peak, the last 20% under it.
        assert_eq!(
            fell_past_peak(&h(&[50.0, 100.0, 95.0, 80.0]), false),
            Some(1)
        );
        // One level past it: only where repetitions judge the fall.
        assert_eq!(fell_past_peak(&h(&[50.0, 100.0, 80.0]), false), None);
        assert_eq!(fell_past_peak(&h(&[50.0, 100.0, 80.0]), true), Some(1));
        // Within 10% of the peak, or the peak last: no fall.
        assert_eq!(fell_past_peak(&h(&[50.0, 100.0, 95.0, 91.0]), false), None);
        assert_eq!(fell_past_peak(&h(&[50.0, 80.0, 100.0]), true), None);
        // The last level within 10% of the peak measured again: the machine's.
        assert!(drift_reading(100.0, 85.0, 80.0).contains("the machine slowed"));
        // Still 10% under it: the load's, though the peak lost 10% too (a state that grew).
        assert!(drift_reading(100.0, 90.0, 70.0)
            .ends_with("-10% against its first measure: the fall held"));
    }

    /// Catches a step whose client groups started after the observers' window kept as ok
    /// (the kvd two-host example once read all-zero daemon counters at its first step).
    #[test]
    fn client_groups_that_started_late_disturb_their_step() {
        let mut step = StepResult::empty("s".into(), "t", "p", 2, 0);
        assert_eq!(started_late(&step), None, "no client groups");
        step.figures.observed_window_overlap = Some(0.96);
        assert_eq!(started_late(&step), None);
        step.figures.observed_window_overlap = Some(0.4);
        let why = started_late(&step).unwrap();
        assert!(
            why.contains("overlap 40% (at least 95% is needed)"),
            "{why}"
        );
    }

    #[test]
    fn saturation_needs_two_flat_steps_with_rising_latency() {
        assert!(!is_saturated(&[(100.0, 1.0), (200.0, 1.0)]));
        assert!(is_saturated(&[(100.0, 1.0), (102.0, 2.0), (103.0, 3.0)]));
        assert!(!is_saturated(&[(100.0, 1.0), (102.0, 2.0), (150.0, 3.0)]));
        assert!(!is_saturated(&[(100.0, 3.0), (102.0, 2.0), (103.0, 1.0)]));
    }

    #[test]
    fn bisection_converges_on_the_threshold() {
        let series = Series::Find {
            lo: 1000.0,
            hi: 64000.0,
            p99_ms: 10.0,
            max_steps: 12,
            clients: 4,
        };
        let mut gen = PointGen::new(&series);
        let mut tried = Vec::new();
        while let Some(p) = gen.next() {
            let rate = p.rate_rps.unwrap();
            tried.push(rate);
            // p99 crosses 10 ms at 20000 requests/s.
            gen.observe(p, Some(rate / 2000.0));
        }
        assert_eq!(tried[..2], [1000.0, 64000.0]);
        let PointGen::Find(f) = &gen else {
            unreachable!()
        };
        let best = f.best_ok.unwrap();
        assert!(best <= 20000.0 && best > 19000.0, "{best} after {tried:?}");
    }

    #[test]
    fn timeouts_over_one_percent_miss_any_p99_target() {
        let mut load = crate::record::load::LoadReport {
            requests: 990,
            ..Default::default()
        };
        load.latency_us.p99 = 500.0;
        load.errors.insert("timeout".into(), 9);
        assert_eq!(p99_with_timeouts_us(&load), 500.0);
        load.errors.insert("timeout".into(), 11);
        assert_eq!(p99_with_timeouts_us(&load), f64::INFINITY);
    }

    #[test]
    fn a_step_over_the_error_ratio_is_errors() {
        let mut step = StepResult::empty("s".into(), "t", "shared", 1, 0);
        step.load = Some(crate::record::load::LoadReport {
            requests: 98,
            errors: [("http_5xx".to_string(), 2)].into(),
            ..Default::default()
        });
        assert_eq!(verdict(&step, 0.02).0, StepStatus::Ok);
        let (status, why) = verdict(&step, 0.01);
        assert_eq!(status, StepStatus::Errors);
        assert!(why
            .unwrap()
            .contains("2.0% of requests failed (http_5xx 2)"));
    }

    #[test]
    fn a_step_where_nothing_completed_or_failed_is_failed() {
        let mut step = StepResult::empty("s".into(), "t", "shared", 1, 0);
        step.load = Some(crate::record::load::LoadReport::default());
        let (status, why) = verdict(&step, 1.0);
        assert_eq!(status, StepStatus::Failed);
        assert!(why.unwrap().contains("answered nothing"));
        step.load
            .as_mut()
            .unwrap()
            .errors
            .insert("timeout".into(), 3);
        assert_eq!(verdict(&step, 1.0).0, StepStatus::Ok);
        assert_eq!(verdict(&step, 0.5).0, StepStatus::Errors);
    }
}
