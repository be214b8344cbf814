//! A history of runs, analysed: what a run gives the history database (its figures per
//! series and level, from the typed analysis) and the change points of every series across
//! the runs, with the CI gate that reads them (docs/history.md).

use std::collections::BTreeMap;

use serde::Serialize;

use super::changes::{self, ChangeOptions, ChangePoint};
use super::run::{LoadPoint, RunAnalysis, SeriesAnalysis};
use super::stats;
use crate::record::history::{
    Figure, FigureRow, LimitRow, RunHost, RunRecord, RunStatus, SeriesKey, SeriesPoint, StoredRun,
};
use crate::record::run::RunData;
use crate::record::steps::{StepResult, StepStatus};

/// The record of one run for the history: `run_id` names it (its directory's name).
pub fn record(
    run_id: &str,
    run: &RunData,
    analysis: &RunAnalysis,
    labels: BTreeMap<String, String>,
) -> RunRecord {
    let (status, status_reason) = status(run);
    let env = run.environment.as_ref();
    RunRecord {
        run_id: run_id.to_string(),
        name: run.name.clone(),
        started_unix_s: run
            .steps
            .iter()
            .map(|s| s.started_unix_s)
            .reduce(f64::min)
            .unwrap_or(0.0),
        status,
        status_reason,
        host: RunHost {
            host: env.map(|e| e.hostname.clone()).unwrap_or_default(),
            cpus: env.map_or(0, |e| e.cpus),
            kernel: env.map(|e| e.kernel.clone()).unwrap_or_default(),
            stairbench_version: env
                .map(|e| e.stairbench_version.clone())
                .unwrap_or_default(),
        },
        labels,
        figures: analysis
            .series
            .iter()
            .filter(|s| !s.open_loop)
            .flat_map(|s| series_figures(s, &run.steps))
            .collect(),
        limits: analysis
            .diagnosis
            .iter()
            .map(|d| LimitRow {
                target: d.target.clone(),
                placement: d.placement.clone(),
                limit: d.limit.as_str().to_string(),
            })
            .collect(),
    }
}

/// `ok` when steps were measured; `failed` when none was, or every measured one was disturbed
/// (left out of the analysis, so the run has no figure); `cut_short` when the run was
/// interrupted or a step failed: such a run is kept but its figures are not comparable.
fn status(run: &RunData) -> (RunStatus, Option<String>) {
    let count = |status: StepStatus| run.steps.iter().filter(|s| s.status == status).count();
    let ok = count(StepStatus::Ok);
    if ok == 0 && count(StepStatus::Disturbed) > 0 {
        let why = "every measured step was disturbed (other processes shared its CPUs)";
        return (RunStatus::Failed, Some(why.into()));
    }
    let failed = run
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Failed)
        .count();
    let interrupted = run.notes.iter().any(|n| n.contains("interrupted"));
    if ok == 0 {
        (RunStatus::Failed, Some("no step was measured".into()))
    } else if interrupted {
        (RunStatus::CutShort, Some("the run was interrupted".into()))
    } else if failed > 0 {
        let why = format!("{failed} of {} steps failed", run.steps.len());
        (RunStatus::CutShort, Some(why))
    } else {
        (RunStatus::Ok, None)
    }
}

/// Every figure of every level of a closed-loop series.
fn series_figures(series: &SeriesAnalysis, steps: &[StepResult]) -> Vec<FigureRow> {
    series
        .points
        .iter()
        .flat_map(|point| {
            let reps = level_steps(series, point.clients, steps);
            level_figures(point, &reps)
                .into_iter()
                .map(|(figure, summary)| FigureRow {
                    target: series.target.clone(),
                    placement: series.placement.clone(),
                    clients: point.clients,
                    figure,
                    mean: summary.mean,
                    stdev: summary.stdev,
                    n: summary.n,
                })
        })
        .collect()
}

/// The measured steps of one level: the ok ones, as the analysis reads them.
fn level_steps<'a>(
    series: &SeriesAnalysis,
    clients: usize,
    steps: &'a [StepResult],
) -> Vec<&'a StepResult> {
    steps
        .iter()
        .filter(|s| {
            s.status == StepStatus::Ok
                && s.load.is_some()
                && s.target == series.target
                && s.placement == series.placement
                && s.clients == clients
        })
        .collect()
}

/// The figures of one level: throughput, mean and p99 latency as the analysis summarised
/// them; the median and the CPU per request over the same repetitions.
fn level_figures(point: &LoadPoint, reps: &[&StepResult]) -> Vec<(Figure, stats::Summary)> {
    let per_rep = |f: &dyn Fn(&StepResult) -> Option<f64>| {
        let values: Option<Vec<f64>> = reps.iter().map(|s| f(s)).collect();
        values.and_then(|v| stats::summarize(&v))
    };
    let p50 = per_rep(&|s| s.load.as_ref().map(|l| l.latency_us.p50));
    let server_cpu = per_rep(&|s| s.per_request.cpu_us_per_req.total);
    let client_cpu = per_rep(&client_cpu_us_per_req);
    [
        (Figure::ThroughputRps, Some(point.throughput_rps)),
        (Figure::LatencyMeanUs, point.mean_latency_us),
        (Figure::LatencyP50Us, p50),
        (Figure::LatencyP99Us, point.p99_latency_us),
        (Figure::ServerCpuUsPerReq, server_cpu),
        (Figure::ClientCpuUsPerReq, client_cpu),
    ]
    .into_iter()
    .filter_map(|(f, s)| s.filter(|s| s.mean > 0.0).map(|s| (f, s)))
    .collect()
}

/// The load generator's CPU (user + system over the window) per request, µs.
fn client_cpu_us_per_req(step: &StepResult) -> Option<f64> {
    let load = step.load.as_ref()?;
    let cpu_s = load.client_cpu.user_s + load.client_cpu.sys_s;
    (load.requests > 0 && cpu_s > 0.0).then(|| cpu_s * 1e6 / load.requests as f64)
}

/// One change point of one series, as `history` prints it and `--json` writes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryChange {
    /// `target/placement/clients`.
    pub series: String,
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients of the level.
    pub clients: usize,
    /// Which figure (`throughput_rps`, `latency_p99_us`, ...).
    pub figure: Figure,
    /// Position in the history (time order, every run counted) of the first run after the
    /// change.
    pub index: usize,
    /// That run's id.
    pub run_id: String,
    /// Mean of the figure over the runs before the change (back to the previous one).
    pub before: f64,
    /// Mean over the runs from the change (up to the next one).
    pub after: f64,
    /// (after − before) / before, %.
    pub change_pct: f64,
    /// 95% interval of `change_pct` (Welch on the ratio of means); null without one.
    pub ci95: Option<[f64; 2]>,
    /// Two-sided Student t-test p-value of the runs before against the runs after.
    pub p: f64,
    /// The change is for the worse: throughput down, latency or CPU per request up.
    pub regression: bool,
    /// How many of the series' runs (those that enter detection) are at or after the change.
    pub runs_since: usize,
}

/// The change points of every series, series by series, over the runs whose status is `ok`
/// (failed and cut-short runs are left out).
pub fn change_points(
    runs: &[StoredRun],
    series: &BTreeMap<SeriesKey, Vec<SeriesPoint>>,
    opts: ChangeOptions,
) -> Vec<HistoryChange> {
    series
        .iter()
        .flat_map(|(key, points)| {
            let kept: Vec<&SeriesPoint> = points
                .iter()
                .filter(|p| runs[p.run].status == RunStatus::Ok)
                .collect();
            let xs: Vec<f64> = kept.iter().map(|p| p.mean).collect();
            changes::change_points(&xs, opts)
                .into_iter()
                .map(|c| described(key, &c, runs, &kept))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn described(
    key: &SeriesKey,
    c: &ChangePoint,
    runs: &[StoredRun],
    kept: &[&SeriesPoint],
) -> HistoryChange {
    let run = &runs[kept[c.index].run];
    let change_pct = c.change_pct();
    HistoryChange {
        series: format!("{}/{}/{}", key.target, key.placement, key.clients),
        target: key.target.clone(),
        placement: key.placement.clone(),
        clients: key.clients,
        figure: key.figure,
        index: kept[c.index].run,
        run_id: run.run_id.clone(),
        before: c.before.mean,
        after: c.after.mean,
        change_pct,
        ci95: c.ci95_pct(),
        p: c.p,
        regression: (change_pct < 0.0) == key.figure.higher_is_better(),
        runs_since: kept.len() - c.index,
    }
}

/// The CI gate's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateOptions {
    /// A regression counts when its change begins within this many newest runs.
    pub window: usize,
    /// ... and its change is at least this many %.
    pub min_change_pct: f64,
}

/// The regressions that fail the gate: those among the newest `window` runs of their series
/// with a change of at least `min_change_pct`.
pub fn gate(changes: &[HistoryChange], opts: GateOptions) -> Vec<&HistoryChange> {
    changes
        .iter()
        .filter(|c| {
            c.regression && c.runs_since <= opts.window && c.change_pct.abs() >= opts.min_change_pct
        })
        .collect()
}
