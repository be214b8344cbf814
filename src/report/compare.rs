//! Comparisons: one step (or a set of repetitions) against another, as seed 002 reads them
//! ("alone at 1 thread is faster than one visitor at 1 thread: 1.64x"), with a noise verdict
//! from the 95% confidence intervals when there are repetitions; and `stairbench compare`,
//! which lines up run directories step by step.
//!
//! The spec's `[[comparisons]]` (see [`super::analysis`]) and `stairbench compare` share the
//! metric, the step matching and the verdicts here.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::markdown::escape;
use super::RunData;
use crate::analyze::stats::{self, Summary, Verdict};
use crate::record::steps::{StepResult, StepStatus};

/// The figure two steps are compared on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum Metric {
    /// Completed requests per second (higher is better).
    #[default]
    ThroughputRps,
    /// Mean latency, µs (lower is better).
    Mean,
    /// Median latency, µs.
    P50,
    /// 90th percentile latency, µs.
    P90,
    /// 95th percentile latency, µs.
    P95,
    /// 99th percentile latency, µs.
    P99,
    /// 99.9th percentile latency, µs.
    P999,
    /// Largest latency, µs.
    Max,
    /// Server CPU time per request, µs (lower is better).
    CpuUsPerReq,
}

impl Metric {
    /// The metric's value at one ok step; None when it was not measured (an external tool that
    /// does not print it).
    pub fn value(self, step: &StepResult) -> Option<f64> {
        if step.status != StepStatus::Ok {
            return None;
        }
        let load = step.load.as_ref()?;
        let l = &load.latency_us;
        let value = match self {
            Metric::ThroughputRps => Some(load.throughput_rps),
            Metric::Mean => Some(l.mean),
            Metric::P50 => Some(l.p50),
            Metric::P90 => Some(l.p90),
            Metric::P95 => Some(l.p95),
            Metric::P99 => Some(l.p99),
            Metric::P999 => Some(l.p999),
            Metric::Max => Some(l.max),
            Metric::CpuUsPerReq => step.derived_f64(&["cpu_us_per_req", "total"]),
        };
        value.filter(|v| v.is_finite())
    }

    /// Whether a larger value is better (throughput) rather than worse (times).
    pub fn higher_is_better(self) -> bool {
        self == Metric::ThroughputRps
    }

    /// The name as written in specs and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Metric::ThroughputRps => "throughput_rps",
            Metric::Mean => "mean",
            Metric::P50 => "p50",
            Metric::P90 => "p90",
            Metric::P95 => "p95",
            Metric::P99 => "p99",
            Metric::P999 => "p999",
            Metric::Max => "max",
            Metric::CpuUsPerReq => "cpu_us_per_req",
        }
    }

    /// The unit of the metric's values.
    pub fn unit(self) -> &'static str {
        if self == Metric::ThroughputRps {
            "req/s"
        } else {
            "µs"
        }
    }
}

/// Which steps a side of a comparison means: `TARGET[/PLACEMENT][@CLIENTS]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// Target name.
    pub target: String,
    /// Placement; any when absent.
    pub placement: Option<String>,
    /// Client count; any when absent.
    pub clients: Option<usize>,
}

impl std::str::FromStr for Selector {
    type Err = String;

    fn from_str(text: &str) -> Result<Selector, String> {
        let (rest, clients) = match text.rsplit_once('@') {
            Some((rest, n)) => {
                let n = n.trim().parse::<usize>().map_err(|_| {
                    format!("{text:?}: {n:?} after '@' is not a client count (TARGET[/PLACEMENT][@CLIENTS])")
                })?;
                (rest, Some(n))
            }
            None => (text, None),
        };
        let (target, placement) = match rest.split_once('/') {
            Some((t, p)) => (t.trim(), Some(p.trim().to_string())),
            None => (rest.trim(), None),
        };
        if target.is_empty() {
            return Err(format!(
                "{text:?} names no target (TARGET[/PLACEMENT][@CLIENTS])"
            ));
        }
        Ok(Selector {
            target: target.to_string(),
            placement,
            clients,
        })
    }
}

impl Selector {
    /// Whether a step position belongs to this selector.
    pub fn selects(&self, key: &StepKey) -> bool {
        key.target == self.target
            && self.placement.as_ref().is_none_or(|p| *p == key.placement)
            && self.clients.is_none_or(|c| c == key.clients)
    }

    /// The step position this selector pairs with `other`: its own target, and its placement
    /// and clients where given, else `other`'s.
    pub fn partner_of(&self, other: &StepKey) -> StepKey {
        StepKey {
            target: self.target.clone(),
            placement: self
                .placement
                .clone()
                .unwrap_or_else(|| other.placement.clone()),
            clients: self.clients.unwrap_or(other.clients),
            rate_rps: other.rate_rps,
        }
    }
}

/// Where a step sits in a staircase: the key steps of different runs are matched on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct StepKey {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients.
    pub clients: usize,
    /// Open-loop rate (req/s, rounded), absent in closed loop.
    pub rate_rps: Option<u64>,
}

impl StepKey {
    /// The key of a step.
    pub fn of(step: &StepResult) -> StepKey {
        StepKey {
            target: step.target.clone(),
            placement: step.placement.clone(),
            clients: step.clients,
            rate_rps: step.rate_rps.map(|r| r.round() as u64),
        }
    }

    /// `target/placement at N clients` (and the rate in open loop).
    pub fn label(&self) -> String {
        let plural = if self.clients == 1 { "" } else { "s" };
        let mut text = format!(
            "{}/{} at {} client{plural}",
            self.target, self.placement, self.clients
        );
        if let Some(rate) = self.rate_rps {
            let _ = write!(text, ", {rate} req/s offered");
        }
        text
    }
}

/// The metric's values of every ok step, grouped by key, repetitions together.
pub fn values_by_key(steps: &[StepResult], metric: Metric) -> BTreeMap<StepKey, Vec<f64>> {
    let mut map: BTreeMap<StepKey, Vec<f64>> = BTreeMap::new();
    for step in steps {
        if let Some(v) = metric.value(step) {
            map.entry(StepKey::of(step)).or_default().push(v);
        }
    }
    map
}

/// How A stands against B on a metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Relation {
    /// A's speed over B's: A's throughput / B's, or B's time / A's; above 1 A is faster.
    pub speedup: f64,
    /// How much slower A is than B, in percent of B's figure (0 when A is not slower).
    pub slower_pct: f64,
    /// "faster", "slower", "within noise", or "no repetitions" (noise unknown).
    pub verdict: String,
    /// Whether the 95% confidence intervals overlap (None without repetitions on both sides).
    pub within_noise: Option<bool>,
    /// A's values summarised (mean, spread, 95% CI).
    pub a: Summary,
    /// B's values summarised.
    pub b: Summary,
}

impl Relation {
    /// Seed 002's sentence, with the noise verdict when there are repetitions.
    pub fn sentence(&self, name_a: &str, name_b: &str) -> String {
        let mut text = stats::sentence(name_a, name_b, self.speedup);
        match self.within_noise {
            Some(true) => text.push_str(" (within noise)"),
            Some(false) => text.push_str(" (beyond noise: the 95% intervals do not overlap)"),
            None => {}
        }
        text
    }
}

/// Relates A's values to B's; None when either side has no usable value.
pub fn relate(metric: Metric, a: &[f64], b: &[f64]) -> Option<Relation> {
    let cmp = stats::compare(a, b)?;
    if cmp.a.mean == 0.0 {
        return None;
    }
    let (speedup, slower_pct) = if metric.higher_is_better() {
        (cmp.ratio, cmp.slower_pct())
    } else {
        (1.0 / cmp.ratio, ((cmp.ratio - 1.0) * 100.0).max(0.0))
    };
    let within_noise = match cmp.verdict {
        Verdict::NoSpread => None,
        v => Some(v == Verdict::WithinNoise),
    };
    let verdict = match within_noise {
        None => "no repetitions",
        Some(true) => "within noise",
        Some(false) if speedup >= 1.0 => "faster",
        Some(false) => "slower",
    };
    Some(Relation {
        speedup,
        slower_pct,
        verdict: verdict.to_string(),
        within_noise,
        a: cmp.a,
        b: cmp.b,
    })
}

/// `mean ± half width` (or the mean alone without repetitions), in the metric's precision.
pub fn show_summary(s: &Summary, metric: Metric) -> String {
    let digits = if metric.higher_is_better() { 0 } else { 1 };
    match s.ci95_half_width {
        Some(h) => format!("{:.digits$} ± {h:.digits$}", s.mean),
        None => format!("{:.digits$}", s.mean),
    }
}

/// One run directory read for `stairbench compare`.
#[derive(Debug, Clone)]
pub struct Run {
    /// Its path.
    pub dir: PathBuf,
    /// How it is called in tables and sentences (the directory's name, made unique).
    pub label: String,
    /// Its contents.
    pub data: RunData,
    /// Its spec.toml as JSON, when present.
    pub spec: Option<Value>,
}

/// What went wrong comparing runs.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// A run directory could not be read.
    #[error("cannot read run directory {dir}: {reason}")]
    Read {
        /// The directory.
        dir: PathBuf,
        /// Why.
        reason: String,
    },
    /// Fewer than two runs.
    #[error("compare needs at least two run directories, got {0}")]
    TooFew(usize),
    /// No step of a run lines up with the first run's steps.
    #[error("no ok step of {other} matches a step of {first} on target, placement and clients (targets of {first}: {first_targets}; of {other}: {other_targets}); compare runs of the same spec")]
    NothingMatches {
        /// The first run's label.
        first: String,
        /// The other run's label.
        other: String,
        /// Targets of the first run.
        first_targets: String,
        /// Targets of the other.
        other_targets: String,
    },
}

/// Reads the run directories, labelling each by its directory name (numbered when two agree).
pub fn read_runs(dirs: &[PathBuf]) -> Result<Vec<Run>, CompareError> {
    if dirs.len() < 2 {
        return Err(CompareError::TooFew(dirs.len()));
    }
    let mut runs = Vec::new();
    for dir in dirs {
        let data = RunData::read(dir).map_err(|reason| CompareError::Read {
            dir: dir.clone(),
            reason,
        })?;
        let label = dir
            .canonicalize()
            .unwrap_or_else(|_| dir.clone())
            .file_name()
            .map_or_else(
                || dir.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
        let spec = std::fs::read_to_string(dir.join("spec.toml"))
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
            .and_then(|t| serde_json::to_value(t).ok());
        runs.push(Run {
            dir: dir.clone(),
            label,
            data,
            spec,
        });
    }
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, run) in runs.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == run.label).count() > 1 {
            run.label = format!("{} (#{})", run.label, i + 1);
        }
    }
    Ok(runs)
}

/// One condition whose value differs between the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvDifference {
    /// Dotted key path: environment.json's own (`topology.summary`), or `spec.` and the
    /// spec's key (`spec.duration`).
    pub key: String,
    /// Its value in each run, in order (None when the run does not have it).
    pub values: Vec<Option<String>>,
}

/// The environment.json keys and spec.toml settings (flattened to dotted paths) whose values
/// differ between runs. The spec's name, description and comparisons are not conditions.
pub fn environment_differences(runs: &[Run]) -> Vec<EnvDifference> {
    let flat: Vec<BTreeMap<String, String>> = runs
        .iter()
        .map(|r| {
            let mut map = BTreeMap::new();
            if let Some(env) = &r.data.environment {
                flatten("", env, &mut map);
            }
            if let Some(Value::Object(spec)) = &r.spec {
                for (k, v) in spec {
                    if !matches!(k.as_str(), "name" | "description" | "comparisons") {
                        flatten(&format!("spec.{k}"), v, &mut map);
                    }
                }
            }
            map
        })
        .collect();
    let mut keys: Vec<&String> = flat.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|key| EnvDifference {
            key: key.clone(),
            values: flat.iter().map(|m| m.get(key).cloned()).collect(),
        })
        .filter(|d| d.values.iter().any(|v| *v != d.values[0]))
        .collect()
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Null => {}
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// One step position lined up across the runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Where the step sits.
    #[serde(flatten)]
    pub key: StepKey,
    /// The metric in each run (mean, spread, 95% CI over repetitions); None where missing.
    pub values: Vec<Option<Summary>>,
    /// Each run against the first (index 0 is the first against itself, None).
    pub against_first: Vec<Option<Relation>>,
}

/// A step slower than the first run's by more than the gate allows, outside noise.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateFailure {
    /// The slower run.
    pub run: String,
    /// Where.
    #[serde(flatten)]
    pub key: StepKey,
    /// How much slower, percent of the first run's figure.
    pub slower_pct: f64,
    /// The noise verdict ("slower", or "no repetitions" when noise could not be judged).
    pub verdict: String,
}

/// A run as named in a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRef {
    /// Its name in tables and sentences.
    pub label: String,
    /// Its directory.
    pub dir: PathBuf,
}

/// Everything `stairbench compare` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The runs; the first is the reference.
    pub runs: Vec<RunRef>,
    /// Environment keys that differ.
    pub environment_differences: Vec<EnvDifference>,
    /// The metric compared.
    pub metric: Metric,
    /// One row per step position of any run, in key order.
    pub rows: Vec<Row>,
    /// Seed 002's sentences: each later run against the first, per matched step.
    pub sentences: Vec<String>,
    /// With `--fail-if-slower PCT`: the threshold.
    pub gate_pct: Option<f64>,
    /// With `--fail-if-slower`: the steps that break it.
    pub gate_failures: Vec<GateFailure>,
}

/// Lines the runs up on `metric` and, with `gate_pct`, lists the steps that fail the gate.
pub fn compare_runs(
    runs: &[Run],
    metric: Metric,
    gate_pct: Option<f64>,
) -> Result<Comparison, CompareError> {
    let maps: Vec<BTreeMap<StepKey, Vec<f64>>> = runs
        .iter()
        .map(|r| values_by_key(&r.data.steps, metric))
        .collect();
    check_overlap(runs, &maps)?;
    let mut keys: Vec<&StepKey> = maps.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let rows: Vec<Row> = keys.into_iter().map(|k| row(k, &maps, metric)).collect();
    let mut sentences = Vec::new();
    let mut gate_failures = Vec::new();
    for row in &rows {
        for (i, rel) in later_runs(row) {
            let sentence = rel.sentence(&runs[i].label, &runs[0].label);
            sentences.push(format!("{}: {sentence}", row.key.label()));
            if gate_pct.is_some_and(|pct| fails_gate(rel, pct)) {
                gate_failures.push(GateFailure {
                    run: runs[i].label.clone(),
                    key: row.key.clone(),
                    slower_pct: rel.slower_pct,
                    verdict: rel.verdict.clone(),
                });
            }
        }
    }
    Ok(Comparison {
        runs: runs
            .iter()
            .map(|r| RunRef {
                label: r.label.clone(),
                dir: r.dir.clone(),
            })
            .collect(),
        environment_differences: environment_differences(runs),
        metric,
        rows,
        sentences,
        gate_pct,
        gate_failures,
    })
}

/// The later runs' relations to the first in a row, with their run index.
fn later_runs(row: &Row) -> impl Iterator<Item = (usize, &Relation)> {
    row.against_first
        .iter()
        .enumerate()
        .filter_map(|(i, rel)| Some((i, rel.as_ref()?)))
}

/// Slower by more than `pct` and not within noise. Without repetitions the noise is
/// unknown, so only the threshold protects against it.
fn fails_gate(rel: &Relation, pct: f64) -> bool {
    rel.slower_pct > pct && rel.within_noise != Some(true)
}

fn check_overlap(runs: &[Run], maps: &[BTreeMap<StepKey, Vec<f64>>]) -> Result<(), CompareError> {
    let targets = |m: &BTreeMap<StepKey, Vec<f64>>| {
        let mut t: Vec<&str> = m.keys().map(|k| k.target.as_str()).collect();
        t.dedup();
        if t.is_empty() {
            "none with an ok step".to_string()
        } else {
            t.join(", ")
        }
    };
    for (i, map) in maps.iter().enumerate().skip(1) {
        if !map.keys().any(|k| maps[0].contains_key(k)) {
            return Err(CompareError::NothingMatches {
                first: runs[0].label.clone(),
                other: runs[i].label.clone(),
                first_targets: targets(&maps[0]),
                other_targets: targets(map),
            });
        }
    }
    Ok(())
}

fn row(key: &StepKey, maps: &[BTreeMap<StepKey, Vec<f64>>], metric: Metric) -> Row {
    let first = maps[0].get(key);
    Row {
        key: key.clone(),
        values: maps
            .iter()
            .map(|m| m.get(key).and_then(|v| stats::summarize(v)))
            .collect(),
        against_first: maps
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let (a, b) = (m.get(key)?, first?);
                (i > 0).then(|| relate(metric, a, b)).flatten()
            })
            .collect(),
    }
}

/// The comparison as markdown tables and sentences (what `stairbench compare` prints).
pub fn render_text(cmp: &Comparison) -> String {
    let mut out = String::new();
    out.push_str("# Comparison\n\n");
    for (i, run) in cmp.runs.iter().enumerate() {
        let role = if i == 0 { " (reference)" } else { "" };
        let _ = writeln!(out, "- {}{role}: {}", escape(&run.label), run.dir.display());
    }
    out.push('\n');
    render_environment(&mut out, cmp);
    render_rows(&mut out, cmp);
    if !cmp.sentences.is_empty() {
        out.push_str("## Summary\n\n");
        for s in &cmp.sentences {
            let _ = writeln!(out, "- {}", escape(s));
        }
        out.push('\n');
    }
    out
}

fn render_environment(out: &mut String, cmp: &Comparison) {
    out.push_str("## Differences in environment\n\n");
    if cmp.environment_differences.is_empty() {
        out.push_str(
            "None: environment.json and spec.toml agree on every key (or are missing).\n\n",
        );
        return;
    }
    let labels: Vec<String> = cmp.runs.iter().map(|r| escape(&r.label)).collect();
    let _ = writeln!(out, "| key | {} |", labels.join(" | "));
    let _ = writeln!(out, "| --- |{}", " --- |".repeat(labels.len()));
    for d in &cmp.environment_differences {
        let cells: Vec<String> = d
            .values
            .iter()
            .map(|v| v.as_deref().map_or("–".to_string(), escape))
            .collect();
        let _ = writeln!(out, "| {} | {} |", escape(&d.key), cells.join(" | "));
    }
    out.push('\n');
}

fn render_rows(out: &mut String, cmp: &Comparison) {
    let m = cmp.metric;
    let _ = writeln!(
        out,
        "## {} ({}, {} is better), mean ± 95% CI over repetitions\n",
        m.name(),
        m.unit(),
        if m.higher_is_better() {
            "higher"
        } else {
            "lower"
        }
    );
    let mut header = String::from("| target | placement | clients |");
    let mut rule = String::from("| --- | --- | ---: |");
    for (i, run) in cmp.runs.iter().enumerate() {
        let _ = write!(header, " {} |", escape(&run.label));
        rule.push_str(" ---: |");
        if i > 0 {
            header.push_str(" speed vs first | verdict |");
            rule.push_str(" ---: | --- |");
        }
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for row in &cmp.rows {
        let clients = match row.key.rate_rps {
            Some(r) => format!("{} @ {r}/s", row.key.clients),
            None => row.key.clients.to_string(),
        };
        let _ = write!(
            out,
            "| {} | {} | {clients} |",
            escape(&row.key.target),
            escape(&row.key.placement)
        );
        for (i, value) in row.values.iter().enumerate() {
            let shown = value
                .as_ref()
                .map_or("–".to_string(), |s| show_summary(s, m));
            let _ = write!(out, " {shown} |");
            if i > 0 {
                match &row.against_first[i] {
                    Some(rel) => {
                        let _ = write!(out, " {:.2}x | {} |", rel.speedup, rel.verdict);
                    }
                    None => out.push_str(" – | – |"),
                }
            }
        }
        out.push('\n');
    }
    out.push('\n');
}

/// The gate's verdict as one message: None when it passes.
pub fn gate_message(cmp: &Comparison) -> Option<String> {
    let pct = cmp.gate_pct?;
    if cmp.gate_failures.is_empty() {
        return None;
    }
    let mut text = format!(
        "{} step(s) slower than {} by more than {pct}% on {} outside noise:",
        cmp.gate_failures.len(),
        cmp.runs[0].label,
        cmp.metric.name()
    );
    for f in &cmp.gate_failures {
        let _ = write!(
            text,
            "\n  {} at {}: {:.1}% slower ({})",
            f.run,
            f.key.label(),
            f.slower_pct,
            if f.verdict == "no repetitions" {
                "no repetitions, so noise could not be ruled out"
            } else {
                "the 95% intervals do not overlap"
            }
        );
    }
    Some(text)
}

/// Reads the directories and compares them.
pub fn compare_dirs(
    dirs: &[PathBuf],
    metric: Metric,
    gate_pct: Option<f64>,
) -> Result<Comparison, CompareError> {
    compare_runs(&read_runs(dirs)?, metric, gate_pct)
}

/// `stairbench compare`: prints the comparison; exit 1 when the gate fails.
pub fn run(
    dirs: &[PathBuf],
    metric: Metric,
    gate_pct: Option<f64>,
    json: bool,
) -> anyhow::Result<std::process::ExitCode> {
    if let Some(pct) = gate_pct.filter(|p| !(p.is_finite() && *p >= 0.0)) {
        return Err(crate::exit::UsageError(format!(
            "--fail-if-slower {pct}: give a percentage of 0 or more, e.g. 5"
        ))
        .into());
    }
    let cmp = compare_dirs(dirs, metric, gate_pct)?;
    let mut stdout = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut stdout, &cmp)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", render_text(&cmp))?;
    }
    stdout.flush()?;
    Ok(match (gate_message(&cmp), gate_pct) {
        (Some(message), _) => {
            eprintln!("stairbench compare: FAILED: {message}");
            std::process::ExitCode::from(1)
        }
        (None, Some(pct)) => {
            eprintln!(
                "stairbench compare: passed: no step slower than {} by more than {pct}% outside noise",
                cmp.runs[0].label
            );
            std::process::ExitCode::SUCCESS
        }
        (None, None) => std::process::ExitCode::SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse() {
        let s: Selector = "reactor/shared@16".parse().unwrap();
        assert_eq!(s.target, "reactor");
        assert_eq!(s.placement.as_deref(), Some("shared"));
        assert_eq!(s.clients, Some(16));
        let s: Selector = "pool".parse().unwrap();
        assert_eq!((s.placement, s.clients), (None, None));
        let s: Selector = "pool@2".parse().unwrap();
        assert_eq!((s.placement, s.clients), (None, Some(2)));
        assert!("pool@x"
            .parse::<Selector>()
            .unwrap_err()
            .contains("client count"));
        assert!("/shared".parse::<Selector>().is_err());
    }

    #[test]
    fn relations_for_both_directions_of_better() {
        let rel = relate(
            Metric::ThroughputRps,
            &[90.0, 91.0, 89.0],
            &[100.0, 101.0, 99.0],
        )
        .unwrap();
        assert!((rel.speedup - 0.9).abs() < 1e-12);
        assert!((rel.slower_pct - 10.0).abs() < 1e-9);
        assert_eq!(rel.verdict, "slower");
        assert_eq!(
            rel.sentence("b", "a"),
            "b is slower than a: 0.90x (beyond noise: the 95% intervals do not overlap)"
        );
        // Latency 20% higher is slower by 20%, speed 1/1.2.
        let rel = relate(Metric::P99, &[120.0], &[100.0]).unwrap();
        assert!((rel.speedup - 1.0 / 1.2).abs() < 1e-12);
        assert!((rel.slower_pct - 20.0).abs() < 1e-9);
        assert_eq!(rel.verdict, "no repetitions");
        assert_eq!(rel.sentence("b", "a"), "b is slower than a: 0.83x");
        let rel = relate(Metric::Mean, &[10.0, 10.2], &[10.1, 9.9]).unwrap();
        assert_eq!(rel.within_noise, Some(true));
        assert!(rel.sentence("x", "y").ends_with("(within noise)"));
    }

    #[test]
    fn environment_is_flattened() {
        let mut map = BTreeMap::new();
        flatten(
            "",
            &serde_json::json!({"a": {"b": 1, "c": null}, "d": "x"}),
            &mut map,
        );
        assert_eq!(map.get("a.b").map(String::as_str), Some("1"));
        assert_eq!(map.get("d").map(String::as_str), Some("x"));
        assert!(!map.contains_key("a.c"));
    }
}
