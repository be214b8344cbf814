//! The analysis of a run directory: every series (target × placement across client counts)
//! read the way the seeds read their curves. Where throughput stops growing (knee, saturation,
//! busy point, USL fit), whether the latency is explained by the requests in flight (Little's
//! law), whether a step's latency is one population or two (from its histogram), and how noisy
//! the repetitions were; then the spec's `[[comparisons]]` in seed 002's sentences.
//!
//! Steps that failed, were skipped, or whose load generator was saturated do not enter the
//! fits: a saturated client measures the client, not the server.

use std::fmt::Write as _;
use std::path::Path;

use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::compare::{relate, show_summary, Metric, Relation, Selector, StepKey};
use super::markdown::escape;
use super::{Exporter, RunData};
use crate::analyze::knee::{self, KneeSummary};
use crate::analyze::little::{self, LatencyUnit, LittleStep};
use crate::analyze::modes::{self, Mode};
use crate::analyze::stats::{self, Summary};
use crate::analyze::usl::{self, UslFit};
use crate::sweep::result::{StepResult, StepStatus};

mod merged;
pub mod peak;

pub use merged::MergedLatency;
pub use peak::Peak;

/// Version of the analysis.json layout.
pub const SCHEMA_VERSION: u32 = 1;

/// The analysis of a whole run (analysis.json).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RunAnalysis {
    /// Version of this layout.
    pub schema: u32,
    /// One entry per target × placement, in the order the series first ran.
    pub series: Vec<SeriesAnalysis>,
    /// The spec's `[[comparisons]]`, resolved against the steps.
    pub comparisons: Vec<ComparisonOutcome>,
    /// What could not be analysed and why (unreadable histogram, bad comparison).
    pub notes: Vec<String>,
    /// The spec asked for `repetitions = "auto"` (report.md then says which steps needed
    /// more runs; analysis.json has each point's `repetitions` already).
    #[serde(skip)]
    pub auto_repetitions: bool,
}

/// One series: a target under one placement across load levels.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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
}

/// Little's law at one step.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize)]
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

/// One of the spec's `[[comparisons]]`, as written.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComparisonSpec {
    /// A title for the comparison's sentences.
    #[serde(default)]
    pub name: Option<String>,
    /// Side A: `TARGET[/PLACEMENT][@CLIENTS]` (also written `candidate`).
    #[serde(alias = "candidate")]
    pub a: String,
    /// Side B, same form; a placement or client count left out is taken from A's step (also
    /// written `baseline`).
    #[serde(alias = "baseline")]
    pub b: String,
    /// A's name in the sentence (default: the selector).
    #[serde(default)]
    pub name_a: Option<String>,
    /// B's name in the sentence.
    #[serde(default)]
    pub name_b: Option<String>,
    /// The figure compared (default throughput_rps).
    #[serde(default)]
    pub metric: Metric,
}

/// One resolved comparison: A's steps against B's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ComparisonOutcome {
    /// Seed 002's sentence, with the noise verdict when there are repetitions.
    pub sentence: String,
    /// The metric compared.
    pub metric: Metric,
    /// Where A's steps sit.
    pub a: StepKey,
    /// Where B's steps sit.
    pub b: StepKey,
    /// The ratio and verdict (speedup above 1: A is faster).
    pub relation: Relation,
}

/// What went wrong reading a run directory for its analysis.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisError {
    /// The run directory could not be read.
    #[error("cannot read the run directory {dir}: {reason}")]
    Read {
        /// The directory.
        dir: std::path::PathBuf,
        /// Why.
        reason: String,
    },
}

/// Reads a run directory and analyses it.
pub fn analyze_run(dir: &Path) -> Result<RunAnalysis, AnalysisError> {
    let run = RunData::read(dir).map_err(|reason| AnalysisError::Read {
        dir: dir.to_path_buf(),
        reason,
    })?;
    Ok(match run.analysis {
        Some(a) => a,
        None => analyze(&run, Some(dir)),
    })
}

/// Analyses a run's steps; with `dir`, also its histograms and its spec's comparisons.
pub fn analyze(run: &RunData, dir: Option<&Path>) -> RunAnalysis {
    let mut notes = Vec::new();
    let spec = dir.and_then(|d| read_spec(d, &mut notes));
    let series = series_keys(&run.steps)
        .into_iter()
        .map(|(t, p)| analyze_series(&run.steps, &t, &p, dir, spec.as_ref(), &mut notes))
        .collect();
    let comparisons = spec
        .as_ref()
        .map(|s| spec_comparisons(s, &run.steps, &mut notes))
        .unwrap_or_default();
    RunAnalysis {
        schema: SCHEMA_VERSION,
        series,
        comparisons,
        notes,
        auto_repetitions: spec
            .as_ref()
            .and_then(|s| s.get("repetitions"))
            .and_then(|r| r.as_str())
            == Some("auto"),
    }
}

fn read_spec(dir: &Path, notes: &mut Vec<String>) -> Option<toml::Table> {
    let text = std::fs::read_to_string(dir.join("spec.toml")).ok()?;
    match text.parse::<toml::Table>() {
        Ok(t) => Some(t),
        Err(e) => {
            notes.push(format!(
                "spec.toml does not parse, comparisons skipped: {e}"
            ));
            None
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
    all: &[StepResult],
    target: &str,
    placement: &str,
    dir: Option<&Path>,
    spec: Option<&toml::Table>,
    notes: &mut Vec<String>,
) -> SeriesAnalysis {
    let mut steps: Vec<&StepResult> = all
        .iter()
        .filter(|s| s.target == target && s.placement == placement)
        .filter(|s| s.status == StepStatus::Ok && s.load.is_some())
        .collect();
    steps.sort_by(|a, b| load_of(a).total_cmp(&load_of(b)).then(a.rep.cmp(&b.rep)));
    let open_loop = steps.iter().any(|s| s.rate_rps.is_some());
    let mut points = load_points(&steps);
    if let Some(dir) = dir {
        merged::merge_repetitions(dir, &steps, &mut points, notes);
    }
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
            steps.iter().filter_map(|s| little_row(s, spec)).collect()
        },
        modes: dir.map_or_else(Vec::new, |d| step_modes(d, &steps, notes)),
        points,
    }
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
            "{}: the fit is not a finding, and what limits the series is not named",
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
    let figure = |f: fn(&crate::load::LoadReport) -> f64| {
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
    })
}

/// Server CPU in percent of its cpuset: the process tree's user + sys time over the window
/// (either observer's layout), else the busy % of the server's CPUs.
pub fn server_cpu_pct(step: &StepResult) -> Option<f64> {
    let s = &step.server;
    let f = |path: &[&str]| {
        let mut v = s;
        for k in path {
            v = v.get(k)?;
        }
        v.as_f64()
    };
    let cpus = crate::cpuset::parse(&step.server_cpus).map_or(0, |c| c.len());
    let cpu_s = f(&["server", "user_s"])
        .zip(f(&["server", "sys_s"]))
        .or_else(|| f(&["cpu_user_s"]).zip(f(&["cpu_sys_s"])))
        .map(|(u, s)| u + s);
    if let (Some(cpu_s), Some(window_s)) = (cpu_s, f(&["window_s"])) {
        if window_s > 0.0 && cpus > 0 {
            return Some(cpu_s / window_s / cpus as f64 * 100.0);
        }
    }
    f(&["server_cpus_busy_pct"]).or_else(|| {
        let busy: Vec<f64> = s
            .get("per_core_busy")?
            .as_array()?
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        stats::summarize(&busy).map(|b| b.mean)
    })
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

fn little_row(step: &StepResult, spec: Option<&toml::Table>) -> Option<LittleRow> {
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
        external_client: step.derived.contains_key("tool"),
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
fn inflight_of(step: &StepResult, spec: Option<&toml::Table>) -> Option<usize> {
    if step.inflight > 0 {
        return Some(step.inflight);
    }
    if let Some(l) = step.load.as_ref().filter(|l| l.connections > 0) {
        return Some(l.connections * l.depth.max(1));
    }
    let spec = spec?;
    let int = |t: &toml::Table, k: &str| t.get(k).and_then(|v| v.as_integer());
    let target_depth = spec
        .get("targets")
        .and_then(|t| t.as_array())
        .and_then(|ts| {
            ts.iter()
                .filter_map(|t| t.as_table())
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(&step.target))
        })
        .and_then(|t| int(t, "depth"));
    let depth = target_depth.or_else(|| int(spec, "depth")).unwrap_or(1);
    let conns = int(spec, "connections_per_client").unwrap_or(1);
    usize::try_from(step.clients as i64 * conns * depth).ok()
}

fn step_modes(dir: &Path, steps: &[&StepResult], notes: &mut Vec<String>) -> Vec<StepModes> {
    let mut out = Vec::new();
    for step in steps {
        let path = dir.join("hist").join(format!("{}.hlog", step.id));
        if !path.exists() {
            continue;
        }
        match read_hlog(&path) {
            Ok(h) => out.push(StepModes {
                step: step.id.clone(),
                clients: step.clients,
                rep: step.rep,
                rate_rps: step.rate_rps,
                modes: modes::from_histogram(&h)
                    .into_iter()
                    .map(ns_to_us)
                    .collect(),
            }),
            Err(e) => notes.push(e),
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

/// Every interval of an HdrHistogram interval log added into one histogram (values as
/// logged: nanoseconds for stairbench's logs).
pub fn read_hlog(path: &Path) -> Result<Histogram<u64>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let bad = |what: String| format!("{} is not a readable interval log: {what}", path.display());
    let mut total = Histogram::<u64>::new(3).map_err(|e| bad(format!("{e:?}")))?;
    let mut deserializer = Deserializer::new();
    for entry in IntervalLogIterator::new(&bytes) {
        let LogEntry::Interval(h) = entry.map_err(|e| bad(format!("{e:?}")))? else {
            continue;
        };
        let raw = base64_decode(h.encoded_histogram()).ok_or_else(|| bad("bad base64".into()))?;
        let hist: Histogram<u64> = deserializer
            .deserialize(&mut raw.as_slice())
            .map_err(|e| bad(format!("{e:?}")))?;
        total.add(&hist).map_err(|e| bad(format!("{e:?}")))?;
    }
    Ok(total)
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

fn spec_comparisons(
    spec: &toml::Table,
    steps: &[StepResult],
    notes: &mut Vec<String>,
) -> Vec<ComparisonOutcome> {
    let Some(list) = spec.get("comparisons").and_then(|c| c.as_array()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in list.iter().enumerate() {
        match parse_comparison(item).and_then(|c| resolve(&c, steps)) {
            Ok(mut found) => out.append(&mut found),
            Err(e) => notes.push(format!("comparisons[{i}]: {e}")),
        }
    }
    out
}

/// Reads one `[[comparisons]]` entry and checks its selectors, so a spec can be validated
/// before the run: `a`/`candidate`, `b`/`baseline` as `TARGET[/PLACEMENT][@CLIENTS]`,
/// optional `name`, `name_a`, `name_b`, `metric`.
pub fn parse_comparison(item: &toml::Value) -> Result<ComparisonSpec, String> {
    let spec: ComparisonSpec = item.clone().try_into().map_err(|e: toml::de::Error| {
        format!(
            "{} (expected a = \"TARGET[/PLACEMENT][@CLIENTS]\", b = ..., and optionally name, name_a, name_b, metric)",
            e.message()
        )
    })?;
    spec.a.parse::<Selector>()?;
    spec.b.parse::<Selector>()?;
    Ok(spec)
}

/// The outcomes of one comparison: one per step position of A that B also has.
pub fn resolve(
    spec: &ComparisonSpec,
    steps: &[StepResult],
) -> Result<Vec<ComparisonOutcome>, String> {
    let a: Selector = spec.a.parse()?;
    let b: Selector = spec.b.parse()?;
    let all = super::compare::values_by_key(steps, spec.metric);
    let a_side: Vec<(&StepKey, &Vec<f64>)> = all.iter().filter(|(k, _)| a.selects(k)).collect();
    if a_side.is_empty() {
        return Err(format!("no ok step matches a = {:?}", spec.a));
    }
    let out: Vec<ComparisonOutcome> = a_side
        .iter()
        .filter_map(|&(a_key, a_vals)| {
            let b_key = b.partner_of(a_key);
            let relation = relate(spec.metric, a_vals, all.get(&b_key)?)?;
            Some(ComparisonOutcome {
                sentence: outcome_sentence(spec, a_key, &relation, a_side.len() > 1),
                metric: spec.metric,
                a: a_key.clone(),
                b: b_key,
                relation,
            })
        })
        .collect();
    if out.is_empty() {
        return Err(format!(
            "no ok step matches b = {:?} where a = {:?} has steps",
            spec.b, spec.a
        ));
    }
    Ok(out)
}

/// Seed 002's sentence, prefixed with where A's steps sit when the comparison spans several,
/// and with the comparison's title.
fn outcome_sentence(
    spec: &ComparisonSpec,
    a_key: &StepKey,
    relation: &Relation,
    several: bool,
) -> String {
    let mut sentence = relation.sentence(
        spec.name_a.as_deref().unwrap_or(&spec.a),
        spec.name_b.as_deref().unwrap_or(&spec.b),
    );
    if spec.metric == Metric::CpuUsPerReq {
        sentence = cpu_words(&sentence);
    }
    if several {
        sentence = format!("{}: {sentence}", a_key.label());
    }
    if let Some(title) = &spec.name {
        sentence = format!("{title}: {sentence}");
    }
    sentence
}

/// CPU per request is a cost, not a speed: "reactor needs less CPU per request than pool".
fn cpu_words(sentence: &str) -> String {
    sentence
        .replacen("is faster than", "needs less CPU per request than", 1)
        .replacen("is slower than", "needs more CPU per request than", 1)
        .replacen("is as fast as", "needs as much CPU per request as", 1)
}

/// analysis.json, beside report.md.
#[derive(Debug, Clone, Copy)]
pub struct Json;

impl Exporter for Json {
    fn file_name(&self) -> &'static str {
        "analysis.json"
    }

    fn render(
        &self,
        _dir: &std::path::Path,
        run: &RunData,
    ) -> Result<String, crate::report::ExportError> {
        let computed;
        let analysis = match &run.analysis {
            Some(a) => a,
            None => {
                computed = analyze(run, None);
                &computed
            }
        };
        let mut text = serde_json::to_string_pretty(analysis).unwrap_or_default();
        text.push('\n');
        Ok(text)
    }
}

/// Each series' peak in one sentence, then the comparisons and what Little's law found: the
/// answers a reader wants first, in the order report.md and report.html show them.
pub fn conclusions(a: &RunAnalysis) -> Vec<String> {
    let mut out: Vec<String> = a.series.iter().map(series_conclusion).collect();
    out.extend(a.comparisons.iter().map(|c| c.sentence.clone()));
    let off = a
        .series
        .iter()
        .flat_map(|s| &s.little)
        .filter(|r| r.check.flag.is_some())
        .count();
    if off > 0 {
        out.push(format!(
            "Little's law is more than 10% off at {off} step(s): the latency is not what the requests in flight explain there (see its table)."
        ));
    }
    out
}

fn series_conclusion(s: &SeriesAnalysis) -> String {
    let p99 = s
        .points
        .iter()
        .find(|p| Some(p.clients) == s.peak.clients && p.rate_rps == s.peak.rate_rps)
        .map(|p| format!(", p99 {}", p.p99_text()))
        .unwrap_or_default();
    let mut text = format!(
        "{} / {} peaks at {}{p99}",
        s.target,
        s.placement,
        s.peak.headline()
    );
    if let Some(e) = s.peak.exclusions() {
        text.push_str(&format!(" ({e})"));
    }
    text.push('.');
    match (&s.usl, &s.usl_caveat) {
        (Some(u), None) if u.dominant != "none" => text.push_str(&format!(
            " The USL fit (R² {:.3}) says {} limits it.",
            u.r2, u.dominant
        )),
        (Some(_), Some(_)) => text.push_str(" Its USL fit is not a finding (see the caveat)."),
        _ => {}
    }
    text
}

/// Each series' peak as the run's last lines print it: "reactor / shared  peak 125351 req/s
/// at 8 clients (left out: ...)".
pub fn peak_lines(a: &RunAnalysis) -> Vec<String> {
    a.series
        .iter()
        .map(|s| {
            format!(
                "{:>12} / {:<10} peak {}",
                s.target,
                s.placement,
                s.peak.sentence()
            )
        })
        .collect()
}

/// The conclusions as a markdown section.
pub fn conclusions_markdown(a: &RunAnalysis) -> String {
    let lines = conclusions(a);
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("## Conclusions\n\n");
    for l in lines {
        let _ = writeln!(out, "- {}", escape(&l));
    }
    out.push('\n');
    out
}

/// The peak of each series as a header and rows of unescaped cells.
pub fn peak_rows(a: &RunAnalysis) -> (Vec<String>, Vec<Vec<String>>) {
    let header = [
        "target",
        "placement",
        "peak (req/s)",
        "at",
        "p99 there",
        "ok steps",
        "left out",
    ]
    .map(String::from)
    .to_vec();
    let rows = a
        .series
        .iter()
        .map(|s| {
            let at = s
                .points
                .iter()
                .find(|p| Some(p.clients) == s.peak.clients && p.rate_rps == s.peak.rate_rps);
            vec![
                s.target.clone(),
                s.placement.clone(),
                opt(s.peak.throughput_rps, 0),
                s.peak
                    .clients
                    .map_or("–".into(), |c| peak::level_text(c, s.peak.rate_rps)),
                at.map_or("–".into(), LoadPoint::p99_text),
                s.points
                    .iter()
                    .map(|p| p.repetitions)
                    .sum::<usize>()
                    .to_string(),
                s.peak.exclusions().map_or("–".into(), |e| {
                    e.trim_start_matches("left out: ").to_string()
                }),
            ]
        })
        .collect();
    (header, rows)
}

/// "## Peak of each series" and its table: the one definition of a peak.
pub fn peak_section(a: &RunAnalysis) -> String {
    let mut out = String::new();
    if a.series.is_empty() {
        return out;
    }
    out.push_str("## Peak of each series\n\n");
    out.push_str(PEAK_DEFINITION);
    out.push_str("\n\n");
    let (header, rows) = peak_rows(a);
    markdown_table(&mut out, &header, &rows);
    out.push('\n');
    out
}

/// How the peak is defined, as the reports say it.
pub const PEAK_DEFINITION: &str = "The peak is the highest mean throughput over the load levels \
    that measured the server: levels whose load generator was saturated, or whose requests \
    failed too often, are left out and named. Its p99 comes from the repetitions' histograms \
    merged, with the single repetitions' p99 range beside it.";

/// The analysis as markdown: scalability, Little's law, latency modes, noise, comparisons.
pub fn render_markdown(a: &RunAnalysis) -> String {
    let mut out = String::new();
    if a.series.is_empty() {
        return out;
    }
    scalability(&mut out, a);
    little_section(&mut out, a);
    modes_section(&mut out, a);
    noise_section(&mut out, a);
    comparisons_section(&mut out, a);
    if !a.notes.is_empty() {
        out.push_str("## Analysis notes\n\n");
        for n in &a.notes {
            let _ = writeln!(out, "- {}", escape(n));
        }
        out.push('\n');
    }
    out
}

/// A load level as the results table shows it: `4`, or `4 @ 2000/s` in open loop.
fn load_label(clients: usize, rate_rps: Option<f64>) -> String {
    match rate_rps {
        Some(r) => format!("{clients} @ {r:.0}/s"),
        None => clients.to_string(),
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_string(), |x| format!("{x:.digits$}"))
}

/// The knee/USL summary as a header and rows of unescaped cells, one row per series: the
/// markdown and the HTML report both render it.
pub fn scalability_rows(a: &RunAnalysis) -> (Vec<String>, Vec<Vec<String>>) {
    let header = [
        "target",
        "placement",
        "peak req/s (at)",
        "saturation",
        "throughput knee",
        "latency knee",
        "busy",
        "λ req/s",
        "σ",
        "κ",
        "N*",
        "X(N*) req/s",
        "R²",
        "limited by",
    ]
    .map(String::from)
    .to_vec();
    let rows = a
        .series
        .iter()
        .map(|s| {
            let k = s.knee.as_ref();
            let u = s.usl.as_ref();
            vec![
                s.target.clone(),
                s.placement.clone(),
                peak_cell(&s.peak),
                opt(k.map(|k| k.saturation), 0),
                opt(k.and_then(|k| k.throughput_knee), 0),
                opt(k.and_then(|k| k.latency_knee), 0),
                opt(k.and_then(|k| k.busy), 0),
                opt(u.map(|u| u.lambda), 0),
                opt(u.map(|u| u.sigma), 4),
                opt(u.map(|u| u.kappa), 6),
                opt(u.and_then(|u| u.n_star), 1),
                opt(u.and_then(|u| u.x_max), 0),
                opt(u.map(|u| u.r2), 3),
                match (u, &s.usl_caveat) {
                    (Some(_), Some(_)) => "– (see caveat)".into(),
                    (Some(u), None) => u.dominant.clone(),
                    (None, _) => "–".into(),
                },
            ]
        })
        .collect();
    (header, rows)
}

/// The peak as the scalability table shows it: "125351 (8)".
fn peak_cell(p: &Peak) -> String {
    match (p.throughput_rps, p.clients) {
        (Some(x), Some(c)) => format!("{x:.0} ({})", load_label(c, p.rate_rps)),
        _ => "–".into(),
    }
}

/// A table of unescaped cells as markdown: the two name columns and the last (text) column
/// left-aligned, the figures between them right-aligned.
fn markdown_table(out: &mut String, header: &[String], rows: &[Vec<String>]) {
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let align: Vec<&str> = (0..header.len())
        .map(|i| {
            if i < 2 || i + 1 == header.len() {
                "---"
            } else {
                "---:"
            }
        })
        .collect();
    let _ = writeln!(out, "| {} |", align.join(" | "));
    for row in rows {
        let cells: Vec<String> = row.iter().map(|c| escape(c)).collect();
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
}

fn scalability(out: &mut String, a: &RunAnalysis) {
    out.push_str("## Scalability: knee and USL\n\n");
    out.push_str(
        "Throughput knee: where adding clients stops paying (Kneedle); saturation: the fewest \
         clients within 5% of the maximum; busy: the most clients with the server's CPUs still \
         under 70%. USL: X(N) = λN / (1 + σ(N−1) + κN(N−1)), fitted on every repetition; \
         client-saturated steps are left out.\n\n",
    );
    let (header, rows) = scalability_rows(a);
    markdown_table(out, &header, &rows);
    out.push('\n');
    for s in &a.series {
        let name = format!("{} / {}", escape(&s.target), escape(&s.placement));
        for line in series_remarks(s) {
            let _ = writeln!(out, "- {name}: {}", escape(&line));
        }
    }
    out.push('\n');
}

/// What the scalability table cannot hold, per series: why there is no USL fit or why it is
/// not a finding, and the load levels left out of the peak and the fits.
pub fn series_remarks(s: &SeriesAnalysis) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(note) = &s.usl_note {
        lines.push(note.clone());
    }
    if let Some(caveat) = &s.usl_caveat {
        lines.push(format!("USL caveat: {caveat}"));
    }
    if let Some(excluded) = s.peak.exclusions() {
        lines.push(format!("{excluded} (from the peak and the fits)"));
    }
    lines
}

/// The Little's-law checks as a header and rows of unescaped cells, one row per closed-loop
/// step in load order: the markdown and the HTML report both render it.
pub fn little_rows(a: &RunAnalysis) -> (Vec<String>, Vec<Vec<String>>) {
    let header = [
        "target",
        "placement",
        "clients",
        "rep",
        "L",
        "X (req/s)",
        "predicted R (µs)",
        "measured R (µs)",
        "X·R / L",
        "flag",
    ]
    .map(String::from)
    .to_vec();
    let rows = a
        .series
        .iter()
        .flat_map(|s| {
            s.little.iter().map(move |r| {
                let c = &r.check;
                vec![
                    s.target.clone(),
                    s.placement.clone(),
                    r.clients.to_string(),
                    r.rep.to_string(),
                    format!("{:.0}", c.inflight),
                    format!("{:.0}", r.throughput_rps),
                    format!("{:.1}", c.predicted_latency),
                    format!("{:.1}", c.measured_latency),
                    format!("{:.2}", c.ratio),
                    little_flag(r),
                ]
            })
        })
        .collect();
    (header, rows)
}

/// Whether the Little's-law table tells something: a row is off, or its figures come from an
/// external tool. A closed loop of our own engine holds by construction (X·R/L = 1.00 at every
/// step), so then one line says so.
pub fn little_informative(a: &RunAnalysis) -> bool {
    a.series
        .iter()
        .flat_map(|s| &s.little)
        .any(|r| r.external_client || r.check.flag.is_some() || (r.check.ratio - 1.0).abs() > 0.1)
}

/// The one line shown instead of a table of 1.00s.
pub fn little_holds_line(a: &RunAnalysis) -> String {
    let steps = a.series.iter().map(|s| s.little.len()).sum::<usize>();
    format!(
        "Little's law holds: X·R/L is within 10% of 1 at every one of the {steps} closed-loop \
         steps (L = clients × connections × depth requests in flight, X the throughput, R the \
         mean latency), so the latency is what the requests in flight explain."
    )
}

fn little_section(out: &mut String, a: &RunAnalysis) {
    out.push_str("## Little's law\n\n");
    let (header, rows) = little_rows(a);
    if rows.is_empty() {
        out.push_str("No closed-loop step with an in-flight count: nothing to check.\n\n");
        return;
    }
    if !little_informative(a) {
        let _ = writeln!(out, "{}\n", little_holds_line(a));
        return;
    }
    out.push_str(
        "L = clients × connections × depth; the law predicts a mean latency of L / X. \
         X·R / L is 1.00 when it holds; a flag marks more than 10% off.\n\n",
    );
    markdown_table(out, &header, &rows);
    out.push('\n');
}

fn little_flag(r: &LittleRow) -> String {
    let flag = r.check.flag.clone().unwrap_or_default();
    match (r.client_saturated, flag.is_empty()) {
        (false, _) => flag,
        (true, true) => "client saturated".to_string(),
        (true, false) => format!("client saturated; {flag}"),
    }
}

fn show_mode(m: &Mode) -> String {
    format!(
        "{:.0}% at {:.1} µs ({:.1}–{:.1})",
        m.share * 100.0,
        m.centre,
        m.low,
        m.high
    )
}

fn modes_section(out: &mut String, a: &RunAnalysis) {
    let rows: Vec<(&SeriesAnalysis, &StepModes)> = a
        .series
        .iter()
        .flat_map(|s| s.modes.iter().map(move |m| (s, m)))
        .filter(|(_, m)| !m.modes.is_empty())
        .collect();
    out.push_str("## Latency modes\n\n");
    if rows.is_empty() {
        out.push_str("No step histogram (hist/*.hlog) to read.\n\n");
        return;
    }
    let bimodal = rows.iter().filter(|(_, m)| m.modes.len() > 1).count();
    let _ = writeln!(
        out,
        "Populations in each step's latency histogram: {bimodal} of {} steps have two \
         (a fast and a slow population, as a round-trip histogram split by a cache miss).\n",
        rows.len()
    );
    out.push_str("| target | placement | clients | rep | populations | fast (share at peak, range) | slow (share at peak, range) |\n");
    out.push_str("| --- | --- | ---: | ---: | ---: | --- | --- |\n");
    for (s, m) in rows {
        let slow = m.modes.get(1).map_or("–".to_string(), show_mode);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {slow} |",
            escape(&s.target),
            escape(&s.placement),
            load_label(m.clients, m.rate_rps),
            m.rep,
            m.modes.len(),
            show_mode(&m.modes[0]),
        );
    }
    out.push('\n');
}

fn noise_section(out: &mut String, a: &RunAnalysis) {
    out.push_str("## Noisy steps\n\n");
    let repeated = a
        .series
        .iter()
        .flat_map(|s| &s.points)
        .any(|p| p.repetitions >= 2);
    if !repeated {
        out.push_str(
            "No repetitions: the spread of a step is unknown (set `repetitions` to 2 or more).\n\n",
        );
        return;
    }
    if a.auto_repetitions {
        auto_repetitions_table(out, a);
    }
    let repeated: Vec<(&SeriesAnalysis, &LoadPoint)> = a
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(move |p| (s, p)))
        .filter(|(_, p)| p.repetitions >= 2)
        .collect();
    let noisy = repeated.iter().filter(|(_, p)| p.noisy).count();
    if noisy == 0 {
        out.push_str("Every repeated step's throughput varied by less than 3% (CV).\n\n");
    } else {
        let _ = writeln!(
            out,
            "{noisy} load level(s) varied by 3% or more (CV) over their repetitions: do not read a knee into them.\n"
        );
    }
    out.push_str(
        "Each repeated level: its p99 from the repetitions' histograms merged, the single \
         repetitions' p99 range beside it.\n\n",
    );
    out.push_str(
        "| target | placement | clients | repetitions | throughput (req/s, mean ± 95% CI) | CV | p99 (reps) | noisy |\n",
    );
    out.push_str("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n");
    for (s, p) in repeated {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1}% | {} | {} |",
            escape(&s.target),
            escape(&s.placement),
            load_label(p.clients, p.rate_rps),
            p.repetitions,
            show_summary(&p.throughput_rps, Metric::ThroughputRps),
            p.throughput_rps.cv * 100.0,
            p.p99_text(),
            if p.noisy { "yes" } else { "no" }
        );
    }
    out.push('\n');
}

/// Under `repetitions = "auto"`: the steps that needed more than the 2 runs a spread needs,
/// and whether they settled under the CV target or stopped at the cap still noisy.
fn auto_repetitions_table(out: &mut String, a: &RunAnalysis) {
    let _ = write!(
        out,
        "`repetitions = \"auto\"`: each step ran until its throughput's CV fell under {:.0}% (2 to {} runs). ",
        stats::AUTO_CV_TARGET * 100.0,
        stats::AUTO_MAX_REPETITIONS
    );
    let more: Vec<(&SeriesAnalysis, &LoadPoint)> = a
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(move |p| (s, p)))
        .filter(|(_, p)| p.repetitions > 2)
        .collect();
    if more.is_empty() {
        out.push_str("Every step settled after 2 runs.\n\n");
        return;
    }
    out.push_str("Steps that needed more runs:\n\n");
    out.push_str("| target | placement | clients | runs | CV | outcome |\n| --- | --- | ---: | ---: | ---: | --- |\n");
    for (s, p) in more {
        let outcome = if p.noisy {
            format!("still noisy after {} runs", p.repetitions)
        } else {
            "settled".to_string()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.1}% | {outcome} |",
            escape(&s.target),
            escape(&s.placement),
            load_label(p.clients, p.rate_rps),
            p.repetitions,
            p.throughput_rps.cv * 100.0
        );
    }
    out.push('\n');
}

fn comparisons_section(out: &mut String, a: &RunAnalysis) {
    if a.comparisons.is_empty() {
        return;
    }
    out.push_str("## Comparisons\n\n");
    for c in &a.comparisons {
        let _ = writeln!(out, "- {}", escape(&c.sentence));
    }
    out.push('\n');
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn server_cpu_from_either_layout() {
        let mut s = StepResult::empty("x".into(), "t", "p", 1, 0);
        s.server_cpus = "0-1".into();
        s.server = serde_json::json!({"window_s": 2.0, "server": {"user_s": 1.0, "sys_s": 0.6}});
        assert!((server_cpu_pct(&s).unwrap() - 40.0).abs() < 1e-9);
        s.server = serde_json::json!({"window_s": 2.0, "cpu_user_s": 2.0, "cpu_sys_s": 0.0});
        assert!((server_cpu_pct(&s).unwrap() - 50.0).abs() < 1e-9);
        s.server = serde_json::json!({"per_core_busy": [10.0, 30.0]});
        assert!((server_cpu_pct(&s).unwrap() - 20.0).abs() < 1e-9);
        s.server = serde_json::Value::Null;
        assert_eq!(server_cpu_pct(&s), None);
    }

    pub(crate) fn ok_step(clients: usize, x: f64, mean_us: f64) -> StepResult {
        let mut s = StepResult::empty(format!("t.p.c{clients}"), "t", "p", clients, 0);
        s.status = StepStatus::Ok;
        s.inflight = clients;
        let mut load = crate::load::LoadReport {
            throughput_rps: x,
            ..Default::default()
        };
        load.latency_us.mean = mean_us;
        s.load = Some(load);
        s
    }

    #[test]
    fn a_step_without_latency_still_counts_for_throughput() {
        let steps = vec![
            ok_step(1, 100.0, 10_000.0),
            ok_step(2, 190.0, f64::NAN),
            ok_step(3, 260.0, 11_538.0),
            ok_step(4, 300.0, 13_333.0),
        ];
        let run = RunData {
            steps,
            ..RunData::default()
        };
        let a = analyze(&run, None);
        let s = &a.series[0];
        assert_eq!(s.points.len(), 4);
        assert_eq!(s.points[1].mean_latency_us, None);
        assert!(s.usl.is_some(), "{:?}", s.usl_note);
        let little: Vec<usize> = s.little.iter().map(|r| r.clients).collect();
        assert_eq!(little, [1, 3, 4]);
        assert!((s.little[0].check.ratio - 1.0).abs() < 1e-9);
        let md = render_markdown(&a);
        assert!(
            md.contains("No repetitions: the spread of a step is unknown"),
            "{md}"
        );
        // Every row is 1.00: one line instead of the table.
        assert!(md.contains("Little's law holds"), "{md}");
        assert!(!md.contains("| t | p | 4 | 0 | 4 | 300 |"), "{md}");
    }

    #[test]
    fn littles_law_table_only_when_it_tells_something() {
        let steps = || vec![ok_step(1, 100.0, 10_000.0), ok_step(2, 200.0, 10_000.0)];
        let md = |steps: Vec<StepResult>| {
            render_markdown(&analyze(
                &RunData {
                    steps,
                    ..RunData::default()
                },
                None,
            ))
        };
        let holds = md(steps());
        assert!(holds.contains("within 10% of 1 at every one of the 2 closed-loop steps"));
        assert!(!holds.contains("| X·R / L |"), "{holds}");
        // One row 50% off: the table, with every row.
        let mut off = steps();
        off[1].load.as_mut().unwrap().latency_us.mean = 15_000.0;
        let table = md(off);
        assert!(
            table.contains("| t | p | 2 | 0 | 2 | 200 | 10000.0 | 15000.0 | 1.50 |"),
            "{table}"
        );
        assert!(
            table.contains("| t | p | 1 | 0 | 1 | 100 | 10000.0 | 10000.0 | 1.00 |"),
            "{table}"
        );
        // An external tool's figures: the table even when every row holds.
        let mut external = steps();
        external[0]
            .derived
            .insert("tool".into(), serde_json::json!({}));
        assert!(md(external).contains("| X·R / L |"));
    }

    #[test]
    fn usl_on_four_levels_carries_its_caveat_and_no_limit_label() {
        // A clean contention curve: the fit is excellent, but 4 levels do not make a finding.
        let x = |n: f64| 1000.0 * n / (1.0 + 0.2 * (n - 1.0));
        let run = |levels: &[usize]| RunData {
            steps: levels
                .iter()
                .map(|&n| ok_step(n, x(n as f64), 1000.0))
                .collect(),
            ..RunData::default()
        };
        let four = analyze(&run(&[1, 2, 4, 8]), None);
        let s = &four.series[0];
        assert!(s.usl.as_ref().unwrap().r2 > 0.99);
        let caveat = s.usl_caveat.as_deref().expect("a caveat");
        assert!(
            caveat.contains("4 server-limited client counts"),
            "{caveat}"
        );
        let (_, rows) = scalability_rows(&four);
        assert_eq!(rows[0].last().unwrap(), "– (see caveat)");
        let md = render_markdown(&four);
        assert!(
            md.contains("USL caveat: fitted on 4 server-limited"),
            "{md}"
        );
        // Six levels and a good fit: a finding, with its label.
        let six = analyze(&run(&[1, 2, 4, 8, 16, 32]), None);
        assert_eq!(six.series[0].usl_caveat, None);
        let (_, rows) = scalability_rows(&six);
        assert_eq!(rows[0].last().unwrap(), "contention");
        // A poor fit on many levels: R² names the caveat.
        let noisy: Vec<usize> = vec![1, 2, 3, 4, 5, 6];
        let mut bad = run(&noisy);
        for (i, s) in bad.steps.iter_mut().enumerate() {
            s.load.as_mut().unwrap().throughput_rps = if i % 2 == 0 { 1000.0 } else { 3000.0 };
        }
        let a = analyze(&bad, None);
        if let Some(u) = &a.series[0].usl {
            assert!(u.r2 < USL_MIN_R2);
            assert!(a.series[0].usl_caveat.as_deref().unwrap().contains("R²"));
        }
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
        let run = RunData {
            steps,
            ..RunData::default()
        };
        let s = &analyze(&run, None).series[0];
        assert!(s.open_loop);
        assert!(s.usl.is_none() && s.usl_note.as_ref().unwrap().contains("open loop"));
        assert!(s.little.is_empty());
        assert_eq!(s.points.len(), 4);
        // Throughput stops following the offered rate at 2500: saturated from 3000 on.
        assert_eq!(s.knee.as_ref().unwrap().saturation, 3000.0);
    }

    #[test]
    fn comparison_entries_are_checked() {
        let ok: toml::Value =
            toml::from_str("a = \"x/shared@4\"\nbaseline = \"y\"\nmetric = \"p99\"").unwrap();
        let c = parse_comparison(&ok).unwrap();
        assert_eq!((c.b.as_str(), c.metric), ("y", Metric::P99));
        let typo: toml::Value = toml::from_str("a = \"x\"\nb = \"y\"\nmetrc = \"p99\"").unwrap();
        assert!(parse_comparison(&typo).unwrap_err().contains("metrc"));
        let bad: toml::Value = toml::from_str("a = \"x@four\"\nb = \"y\"").unwrap();
        assert!(parse_comparison(&bad).unwrap_err().contains("client count"));
    }

    #[test]
    fn names_are_escaped() {
        let mut step = ok_step(1, 100.0, 10_000.0);
        step.target = "<script>|x".into();
        let run = RunData {
            steps: vec![step],
            ..RunData::default()
        };
        let md = render_markdown(&analyze(&run, None));
        assert!(md.contains("| &lt;script&gt;\\|x | p |"), "{md}");
        assert!(!md.contains("<script>"));
    }

    #[test]
    fn inflight_falls_back_to_the_spec() {
        let s = StepResult::empty("x".into(), "db", "p", 3, 0);
        let spec: toml::Table =
            "depth = 4\nconnections_per_client = 2\n[[targets]]\nname = \"db\"\ndepth = 8\n"
                .parse()
                .unwrap();
        assert_eq!(inflight_of(&s, Some(&spec)), Some(3 * 2 * 8));
        let other = StepResult::empty("x".into(), "web", "p", 3, 0);
        assert_eq!(inflight_of(&other, Some(&spec)), Some(3 * 2 * 4));
        assert_eq!(inflight_of(&other, None), None);
    }
}
