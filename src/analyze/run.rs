//! The analysis of a run directory: every series (target × placement across client counts)
//! read the way the seeds read their curves. Where throughput stops growing (knee, saturation,
//! busy point, USL fit), whether the latency is explained by the requests in flight (Little's
//! law), whether a step's latency is one population or two (from its histogram), and how noisy
//! the repetitions were; then the spec's `[[comparisons]]` in the shared-memory hash-table study's sentences.
//!
//! Steps that failed, were skipped, or whose load generator was saturated do not enter the
//! fits: a saturated client measures the client, not the server.
//!
//! This module computes; `report` renders what it computed (report.md's sections, the
//! conclusions, analysis.json).

use serde::{Deserialize, Serialize};

use super::compare::spec::{spec_comparisons, ComparisonOutcome};
use crate::analyze::knee::{self, KneeSummary};
use crate::analyze::little::{self, LatencyUnit, LittleStep};
use crate::analyze::modes::{self, Mode};
use crate::analyze::stats::{self, Summary};
use crate::analyze::usl::{self, UslFit};
use crate::record::run::{Histograms, RunData, RunSpec};
use crate::record::steps::{StepResult, StepStatus};

pub mod diagnosis;
mod merged;
pub mod peak;

pub use merged::MergedLatency;
pub use peak::Peak;

/// Version of the analysis.json layout.
pub const SCHEMA_VERSION: u32 = 1;

/// The analysis of a whole run (analysis.json).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunAnalysis {
    /// Version of this layout.
    pub schema: u32,
    /// One entry per target × placement, in the order the series first ran.
    pub series: Vec<SeriesAnalysis>,
    /// Why each series stops scaling: one diagnosis per series, in the same order.
    pub diagnosis: Vec<diagnosis::Diagnosis>,
    /// The spec's `[[comparisons]]`, resolved against the steps.
    pub comparisons: Vec<ComparisonOutcome>,
    /// What could not be analysed and why (unreadable histogram, bad comparison).
    pub notes: Vec<String>,
    /// The spec's `[[thresholds]]`, each with its verdict and the worst value measured.
    pub thresholds: Vec<super::thresholds::ThresholdVerdict>,
    /// The spec asked for `repetitions = "auto"` (report.md then says which steps needed
    /// more runs; analysis.json has each point's `repetitions` already).
    #[serde(skip)]
    pub auto_repetitions: bool,
}

/// One series: a target under one placement across load levels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesAnalysis {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Whether the series is open loop: its load levels are offered rates, not client counts.
    pub open_loop: bool,
    /// Per load level, the ok steps (repetitions) summarised, in load order.
    pub points: Vec<LoadPoint>,
    /// The series' peak: its best server-limited load level, with the levels left out named.
    pub peak: Peak,
    /// Steps (repetitions counted) the fits used: ok and not client-saturated.
    pub fitted_steps: usize,
    /// Universal Scalability Law fit of throughput (req/s) vs clients, each repetition a point.
    pub usl: Option<UslFit>,
    /// Why there is no USL fit (fewer than 4 points, open loop, ...).
    pub usl_note: Option<String>,
    /// Why the USL fit is not a finding (fewer than 5 server-limited load levels, or R² under
    /// 0.9): the reports then show it with this caveat and without its "limited by" label.
    pub usl_caveat: Option<String>,
    /// Knees, maximum, saturation and busy points on the mean throughput per load level.
    pub knee: Option<KneeSummary>,
    /// Little's law at every ok closed-loop step, in load order.
    pub little: Vec<LittleRow>,
    /// Latency populations of every ok step with a histogram, in load order.
    pub modes: Vec<StepModes>,
}

/// One load level of a series with its repetitions summarised.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadPoint {
    /// Clients of the step.
    pub clients: usize,
    /// Offered rate (req/s) in open loop.
    pub rate_rps: Option<f64>,
    /// Ok steps at this level (repetitions).
    pub repetitions: usize,
    /// Throughput (req/s) over the repetitions: mean, spread, 95% CI.
    pub throughput_rps: Summary,
    /// Mean latency (µs) over the repetitions; None when the load tool did not report it.
    pub mean_latency_us: Option<Summary>,
    /// The repetitions' own p99 latencies (µs) summarised; its mean is not a p99 (see
    /// `merged_latency_us`). None when not reported.
    pub p99_latency_us: Option<Summary>,
    /// Percentiles (µs) of the repetitions' histograms (hist/<step>.hlog) merged: the level's
    /// latency. None when a repetition's log is missing or unreadable.
    pub merged_latency_us: Option<MergedLatency>,
    /// Lowest and highest p99 (µs) of the single repetitions, with 2 or more.
    pub p99_reps_us: Option<[f64; 2]>,
    /// Server CPU use in percent of the CPUs it was given (mean over repetitions), if observed.
    pub server_cpu_pct: Option<f64>,
    /// A repetition's load generator was saturated: the level is left out of the fits.
    pub client_saturated: bool,
    /// The throughput's coefficient of variation reached 3% over 2 or more repetitions.
    pub noisy: bool,
    /// Where the server's and the load generator's threads spent the level's windows, and
    /// the same per request (None: their thread states were not sampled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::analyze::budget::RequestBudget>,
    /// Kept though disturbed (`run --keep-disturbed`): how the worst of its repetitions was
    /// ("other processes took 55% of the server's CPUs (busiest: ...)"), so that every sentence
    /// resting on the level says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disturbed: Option<String>,
    /// Throughput (req/s) of the level measured again after the series' last level, when
    /// throughput fell past it (its peak): the machine's drift check, not in the figures above.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub again_rps: Option<f64>,
}

/// Little's law at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LittleRow {
    /// Step id (file stem of its raw files).
    pub step: String,
    /// Clients.
    pub clients: usize,
    /// Repetition index.
    pub rep: usize,
    /// Throughput X, req/s.
    pub throughput_rps: f64,
    /// The load generator was saturated at this step (a likely reason for a low ratio).
    pub client_saturated: bool,
    /// The load came from an external tool, whose latency and in-flight figures are its own
    /// (the check then says something even when it holds).
    pub external_client: bool,
    /// The check: L, predicted and measured mean latency (µs), X·R / L and the flag.
    #[serde(flatten)]
    pub check: LittleStep,
}

/// The latency populations of one step's histogram.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepModes {
    /// Step id.
    pub step: String,
    /// Clients.
    pub clients: usize,
    /// Repetition index.
    pub rep: usize,
    /// Offered rate (req/s) in open loop.
    pub rate_rps: Option<f64>,
    /// Populations, fastest first, values in µs: one, or two when the histogram is bimodal.
    pub modes: Vec<Mode>,
}

/// Analyses a run read once ([`RunData::read`]): no file is opened here, so every report
/// made from one `RunData` shows the same figures.
pub fn analyze(run: &RunData) -> RunAnalysis {
    let steps = &run.steps[..];
    // What the reader could not parse comes first: the figures below are made without it.
    let mut notes = run.unreadable.clone();
    let spec = run.spec.as_ref();
    let mut series: Vec<SeriesAnalysis> = series_keys(steps)
        .into_iter()
        .map(|(t, p)| analyze_series(run, &t, &p, &mut notes))
        .collect();
    let mut diagnosis: Vec<_> = series.iter().map(|s| diagnose_series(s, run)).collect();
    // A series flat from its second level has no bend for Kneedle; the diagnosis finds its
    // knee there, and every table says the same ("stops scaling at 2", never "no knee").
    for (s, d) in series.iter_mut().zip(&diagnosis) {
        if let (Some(k), Some(at)) = (s.knee.as_mut(), d.knee_clients) {
            k.throughput_knee = k.throughput_knee.or(Some(at as f64));
        }
    }
    let ok: Vec<&StepResult> = steps
        .iter()
        .filter(|s| s.status == StepStatus::Ok && s.load.is_some())
        .collect();
    diagnosis::add_wakeup_sentences(&mut diagnosis, &ok);
    let comparisons = spec
        .map(|s| spec_comparisons(&s.raw, steps, &mut notes))
        .unwrap_or_default();
    let thresholds = spec
        .map(|s| spec_thresholds(&s.raw, steps, &mut notes))
        .unwrap_or_default();
    RunAnalysis {
        schema: SCHEMA_VERSION,
        series,
        diagnosis,
        comparisons,
        notes,
        thresholds,
        auto_repetitions: spec.is_some_and(|s| s.repetitions_auto),
    }
}

/// Analyses steps alone (no spec, histograms or profiles): a planner's or a test's view.
pub fn analyze_steps(steps: &[StepResult]) -> RunAnalysis {
    analyze(&RunData::from_steps(steps.to_vec()))
}

/// The verdicts of the spec's `[[thresholds]]` (a note when they do not parse).
fn spec_thresholds(
    spec: &toml::Table,
    steps: &[StepResult],
    notes: &mut Vec<String>,
) -> Vec<super::thresholds::ThresholdVerdict> {
    match super::thresholds::from_spec(spec) {
        Ok(t) => super::thresholds::evaluate(&t, steps),
        Err(e) => {
            notes.push(e.to_string());
            Vec::new()
        }
    }
}

/// (target, placement) pairs in the order they first appear.
fn series_keys(steps: &[StepResult]) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for s in steps {
        let key = (s.target.clone(), s.placement.clone());
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

fn analyze_series(
    run: &RunData,
    target: &str,
    placement: &str,
    notes: &mut Vec<String>,
) -> SeriesAnalysis {
    let all = &run.steps[..];
    let mut steps = series_steps(all, target, placement);
    steps.sort_by(|a, b| load_of(a).total_cmp(&load_of(b)).then(a.rep.cmp(&b.rep)));
    let open_loop = steps.iter().any(|s| s.rate_rps.is_some());
    let mut points = load_points(&steps);
    drift_checks(all, target, placement, &mut points);
    merged::merge_repetitions(&run.histograms, &steps, &mut points, notes);
    let fitted: Vec<&StepResult> = steps.iter().copied().filter(|s| !is_saturated(s)).collect();
    let (usl, usl_note) = usl_fit(&fitted, open_loop);
    let usl_caveat = usl.as_ref().and_then(|u| usl_caveat(u, &fitted));
    SeriesAnalysis {
        target: target.to_string(),
        placement: placement.to_string(),
        open_loop,
        fitted_steps: fitted.len(),
        peak: peak::peak(&points, error_levels(all, target, placement)),
        usl,
        usl_note,
        usl_caveat,
        knee: knee_summary(&points),
        little: if open_loop {
            Vec::new()
        } else {
            let spec = run.spec.as_ref();
            steps.iter().filter_map(|s| little_row(s, spec)).collect()
        },
        modes: step_modes(&run.histograms, &steps, notes),
        points,
    }
}

/// The steps a series is analysed from: its ok steps (disturbed ones are left out, as
/// client-saturated ones are, unless `--keep-disturbed` kept them ok), its drift check apart.
fn series_steps<'a>(all: &'a [StepResult], target: &str, placement: &str) -> Vec<&'a StepResult> {
    all.iter()
        .filter(|s| s.target == target && s.placement == placement && s.load.is_some())
        .filter(|s| s.status == StepStatus::Ok && !s.figures.drift_check)
        .collect()
}

/// Each level's drift check (its peak measured again after the series' last level): its
/// throughput, the mean of its ok runs.
fn drift_checks(all: &[StepResult], target: &str, placement: &str, points: &mut [LoadPoint]) {
    for p in points {
        let again: Vec<f64> = all
            .iter()
            .filter(|s| s.target == target && s.placement == placement)
            .filter(|s| s.figures.drift_check && s.status == StepStatus::Ok)
            .filter(|s| s.clients == p.clients && s.rate_rps == p.rate_rps)
            .filter_map(StepResult::throughput_rps)
            .collect();
        p.again_rps = stats::summarize(&again).map(|s| s.mean);
    }
}

fn diagnose_series(series: &SeriesAnalysis, run: &RunData) -> diagnosis::Diagnosis {
    let steps = series_steps(&run.steps, &series.target, &series.placement);
    let profile = diagnosis::profile::from_lines(&run.profiles, &series.target, &series.placement);
    let mut d = diagnosis::diagnose_with_profile(series, &steps, profile.as_ref());
    if steps.is_empty() {
        if let Some(why) = all_disturbed(run, &series.target, &series.placement) {
            d.sentence = why;
        }
    }
    d
}

/// The sentence of a series whose every measured step was disturbed: none is analysed, and
/// what disturbed them is said where "nothing measured" would send the user to the failures.
fn all_disturbed(run: &RunData, target: &str, placement: &str) -> Option<String> {
    let worst = run
        .steps
        .iter()
        .filter(|s| s.target == target && s.placement == placement)
        .filter(|s| s.status == StepStatus::Disturbed)
        .filter_map(|s| s.figures.disturbed.as_ref())
        .max_by(|a, b| a.worst().1.total_cmp(&b.worst().1))?;
    Some(format!(
        "{target}/{placement}: every step it measured was disturbed, so none is analysed (the \
         most: {}). Next: run again when its CPUs are quiet, or with --keep-disturbed to read \
         them with that caveat on every sentence.",
        worst.describe()
    ))
}

/// The load levels of a series whose steps ended with too many errors, in load order.
fn error_levels(all: &[StepResult], target: &str, placement: &str) -> Vec<String> {
    let mut errors: Vec<&StepResult> = all
        .iter()
        .filter(|s| s.target == target && s.placement == placement)
        .filter(|s| s.status == StepStatus::Errors)
        .collect();
    errors.sort_by(|a, b| load_of(a).total_cmp(&load_of(b)));
    let mut labels: Vec<String> = errors
        .iter()
        .map(|s| load_label(s.clients, s.rate_rps))
        .collect();
    labels.dedup();
    labels
}

/// Fewest server-limited load levels for a USL fit to be read as a finding: a 3-parameter fit
/// on 4 points always looks good.
pub const USL_MIN_LEVELS: usize = 5;
/// Lowest R² for a USL fit to be read as a finding.
pub const USL_MIN_R2: f64 = 0.9;

/// Why a fit is not a finding, if it is not.
fn usl_caveat(fit: &UslFit, fitted: &[&StepResult]) -> Option<String> {
    let mut levels: Vec<usize> = fitted.iter().map(|s| s.clients).collect();
    levels.dedup();
    let mut why = Vec::new();
    if levels.len() < USL_MIN_LEVELS {
        why.push(format!(
            "fitted on {} server-limited client counts (fewer than {USL_MIN_LEVELS})",
            levels.len()
        ));
    }
    if fit.r2 < USL_MIN_R2 {
        why.push(format!("R² {:.3} is under {USL_MIN_R2}", fit.r2));
    }
    (!why.is_empty()).then(|| {
        format!(
            "{}: the fit is not a finding and names no limit (the diagnosis does not quote it)",
            why.join(" and ")
        )
    })
}

/// The load level of a step: its offered rate in open loop, else its clients.
fn load_of(step: &StepResult) -> f64 {
    step.rate_rps.unwrap_or(step.clients as f64)
}

fn is_saturated(step: &StepResult) -> bool {
    step.load.as_ref().is_some_and(|l| l.client_saturated)
}

fn load_points(steps: &[&StepResult]) -> Vec<LoadPoint> {
    let mut points: Vec<Option<LoadPoint>> = Vec::new();
    let mut start = 0;
    while start < steps.len() {
        let load = load_of(steps[start]);
        let end = start + steps[start..].partition_point(|s| load_of(s) == load);
        points.push(load_point(&steps[start..end]));
        start = end;
    }
    points.into_iter().flatten().collect()
}

fn load_point(reps: &[&StepResult]) -> Option<LoadPoint> {
    let figure = |f: fn(&crate::record::load::LoadReport) -> f64| {
        let v: Vec<f64> = reps.iter().filter_map(|s| s.load.as_ref().map(f)).collect();
        stats::summarize(&v)
    };
    let throughput = figure(|l| l.throughput_rps)?;
    let cpu: Vec<f64> = reps.iter().filter_map(|s| server_cpu_pct(s)).collect();
    Some(LoadPoint {
        clients: reps[0].clients,
        rate_rps: reps[0].rate_rps,
        repetitions: reps.len(),
        throughput_rps: throughput,
        mean_latency_us: figure(|l| l.latency_us.mean),
        p99_latency_us: figure(|l| l.latency_us.p99),
        merged_latency_us: None,
        p99_reps_us: merged::p99_range(reps),
        server_cpu_pct: stats::summarize(&cpu).map(|s| s.mean),
        client_saturated: reps.iter().any(|s| is_saturated(s)),
        noisy: throughput.n >= 2 && throughput.cv >= stats::AUTO_CV_TARGET,
        budget: crate::analyze::budget::level_budget(reps),
        disturbed: reps
            .iter()
            .filter_map(|s| s.figures.disturbed.as_ref())
            .max_by(|a, b| a.worst().1.total_cmp(&b.worst().1))
            .map(|d| d.describe()),
        again_rps: None,
    })
}

/// Server CPU in percent of its cpuset: the process tree's user + sys time over the window,
/// else the busy % of the server's CPUs.
pub fn server_cpu_pct(step: &StepResult) -> Option<f64> {
    let obs = step.observation()?;
    let cpus = crate::cpuset::parse(&step.server_cpus).map_or(0, |c| c.len());
    if let Some(tree) = &obs.server {
        if obs.window_s > 0.0 && cpus > 0 {
            return Some((tree.user_s + tree.sys_s) / obs.window_s / cpus as f64 * 100.0);
        }
    }
    obs.server_cpus_busy_pct
}

fn usl_fit(steps: &[&StepResult], open_loop: bool) -> (Option<UslFit>, Option<String>) {
    if open_loop {
        return (
            None,
            Some("open loop: the USL is fitted on client counts in closed loop only".into()),
        );
    }
    let points: Vec<(f64, f64)> = steps
        .iter()
        .filter_map(|s| Some((s.clients as f64, s.throughput_rps()?)))
        .collect();
    match usl::fit(&points) {
        Ok(fit) => (Some(fit), None),
        Err(usl::UslError::TooFewPoints { found }) => (
            None,
            Some(format!(
                "fewer than {} points ({found}): no USL fit",
                usl::MIN_POINTS
            )),
        ),
        Err(e) => (None, Some(format!("no USL fit: {e}"))),
    }
}

fn knee_summary(points: &[LoadPoint]) -> Option<KneeSummary> {
    let steps: Vec<knee::Step> = points
        .iter()
        .filter(|p| !p.client_saturated)
        .map(|p| knee::Step {
            load: p.rate_rps.unwrap_or(p.clients as f64),
            throughput: p.throughput_rps.mean,
            latency: p.mean_latency_us.map(|s| s.mean),
            server_cpu_pct: p.server_cpu_pct,
        })
        .collect();
    knee::summarise(&steps)
}

fn little_row(step: &StepResult, spec: Option<&RunSpec>) -> Option<LittleRow> {
    let load = step.load.as_ref()?;
    if !(load.latency_us.mean.is_finite() && load.throughput_rps > 0.0) {
        return None;
    }
    let inflight = inflight_of(step, spec)?;
    Some(LittleRow {
        step: step.id.clone(),
        clients: step.clients,
        rep: step.rep,
        throughput_rps: load.throughput_rps,
        client_saturated: load.client_saturated,
        external_client: step.figures.tool.is_some(),
        check: little::check(
            step.clients as f64,
            inflight as f64,
            load.throughput_rps,
            load.latency_us.mean,
            LatencyUnit::Us,
        ),
    })
}

/// Requests configured in flight: the step's own figure, else the engine's connections ×
/// depth, else the spec's clients × connections_per_client × depth.
fn inflight_of(step: &StepResult, spec: Option<&RunSpec>) -> Option<usize> {
    if step.inflight > 0 {
        return Some(step.inflight);
    }
    if let Some(l) = step.load.as_ref().filter(|l| l.connections > 0) {
        return Some(l.connections * l.depth.max(1));
    }
    let spec = spec?;
    let target_depth = spec.target(&step.target).and_then(|t| t.depth);
    let depth = target_depth.or(spec.depth).unwrap_or(1);
    let conns = spec.connections_per_client.unwrap_or(1);
    usize::try_from(step.clients as i64 * conns * depth).ok()
}

/// The latency populations of each step whose histogram the run has; an undecodable one is
/// a note.
fn step_modes(
    histograms: &Histograms,
    steps: &[&StepResult],
    notes: &mut Vec<String>,
) -> Vec<StepModes> {
    let mut out = Vec::new();
    for step in steps {
        match histograms.get(&step.id) {
            None => {}
            Some(Ok(h)) => out.push(StepModes {
                step: step.id.clone(),
                clients: step.clients,
                rep: step.rep,
                rate_rps: step.rate_rps,
                modes: modes::from_histogram(h).into_iter().map(ns_to_us).collect(),
            }),
            Some(Err(e)) => notes.push(e.clone()),
        }
    }
    out
}

fn ns_to_us(m: Mode) -> Mode {
    Mode {
        share: m.share,
        centre: m.centre / 1e3,
        mean: m.mean / 1e3,
        low: m.low / 1e3,
        high: m.high / 1e3,
    }
}

/// A load level as the results table shows it: `4`, or `4 @ 2000/s` in open loop.
pub fn load_label(clients: usize, rate_rps: Option<f64>) -> String {
    match rate_rps {
        Some(r) => format!("{clients} @ {r:.0}/s"),
        None => clients.to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn server_cpu_from_the_tree_else_the_cpus_busy() {
        let mut s = StepResult::empty("x".into(), "t", "p", 1, 0);
        s.server_cpus = "0-1".into();
        let tree = crate::record::observed::TreeUsage {
            pid: 1,
            processes: 1,
            threads: 1,
            user_s: 1.0,
            sys_s: 0.6,
            voluntary_cs: 0,
            involuntary_cs: 0,
            minor_faults: 0,
            major_faults: 0,
        };
        let mut obs = crate::record::observed::Observation {
            window_s: 2.0,
            server: Some(tree),
            server_cpus_busy_pct: Some(70.0),
            ..Default::default()
        };
        s.server = Some(obs.clone().into());
        assert!((server_cpu_pct(&s).unwrap() - 40.0).abs() < 1e-9);
        obs.server = None;
        s.server = Some(obs.into());
        assert_eq!(server_cpu_pct(&s), Some(70.0));
        s.server = None;
        assert_eq!(server_cpu_pct(&s), None);
    }

    pub(crate) fn ok_step(clients: usize, x: f64, mean_us: f64) -> StepResult {
        let mut s = StepResult::empty(format!("t.p.c{clients}"), "t", "p", clients, 0);
        s.status = StepStatus::Ok;
        s.inflight = clients;
        let mut load = crate::record::load::LoadReport {
            throughput_rps: x,
            ..Default::default()
        };
        load.latency_us.mean = mean_us;
        s.load = Some(load);
        s
    }

    #[test]
    fn open_loop_series_has_no_usl_and_no_littles_law() {
        let steps: Vec<StepResult> = [1000.0f64, 2000.0, 3000.0, 4000.0]
            .iter()
            .map(|&rate| {
                let mut s = ok_step(4, rate.min(2500.0), 100.0);
                s.rate_rps = Some(rate);
                s.id = format!("t.p.r{rate}");
                s
            })
            .collect();
        let s = &analyze_steps(&steps).series[0];
        assert!(s.open_loop);
        assert!(s.usl.is_none() && s.usl_note.as_ref().unwrap().contains("open loop"));
        assert!(s.little.is_empty());
        assert_eq!(s.points.len(), 4);
        // Throughput stops following the offered rate at 2500: saturated from 3000 on.
        assert_eq!(s.knee.as_ref().unwrap().saturation, 3000.0);
    }

    /// The analysis opens no file: every figure comes from the `RunData` it is given, so two
    /// reports made from one `RunData` cannot differ. Catches a `std::fs` read, a `Path`
    /// argument or a run-directory reader called from the analysis (outside its tests).
    #[test]
    fn the_analysis_opens_no_file() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/analyze");
        let mut files = vec![
            root.join("run.rs"),
            root.join("thresholds.rs"),
            root.join("compare/spec.rs"),
        ];
        let mut dirs = vec![root.join("run")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    files.push(path);
                }
            }
        }
        let banned = [
            "std::fs",
            "Path",
            "File::",
            "read_to_string",
            "read_hlog",
            "read_lines(",
            "read_steps(",
            "RunData::read",
        ];
        let mut found = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file).unwrap();
            // Test modules may read fixtures: only the code before the first one counts.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            let name = file.file_name().unwrap().to_string_lossy();
            if name.ends_with("tests.rs") {
                continue;
            }
            for (n, line) in code.lines().enumerate() {
                let line = line.split("//").next().unwrap_or("");
                for b in banned.iter().filter(|b| line.contains(**b)) {
                    found.push(format!("{}:{}: {b}", file.display(), n + 1));
                }
            }
        }
        assert!(
            found.is_empty(),
            "I/O in the analysis:\n{}",
            found.join("\n")
        );
    }

    #[test]
    fn inflight_falls_back_to_the_spec() {
        let s = StepResult::empty("x".into(), "db", "p", 3, 0);
        let spec = RunSpec::from_table(
            "depth = 4\nconnections_per_client = 2\n[[targets]]\nname = \"db\"\ndepth = 8\n"
                .parse()
                .unwrap(),
        );
        assert_eq!(inflight_of(&s, Some(&spec)), Some(3 * 2 * 8));
        let other = StepResult::empty("x".into(), "web", "p", 3, 0);
        assert_eq!(inflight_of(&other, Some(&spec)), Some(3 * 2 * 4));
        assert_eq!(inflight_of(&other, None), None);
    }
}
