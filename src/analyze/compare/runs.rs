//! `stairbench compare`'s findings: run directories read, their steps lined up on one metric
//! against the first run's, the conditions that differ between them, and the steps that fail a
//! `--fail-if-slower` gate. `report::compare` prints them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

use super::{relate, values_by_key, Metric, Relation, StepKey};
use crate::analyze::stats::{self, Summary, TestOptions};
use crate::record::environment::Environment;
use crate::record::run::{read_environment_file, read_spec_file, RunSpec};
use crate::record::steps::{read_steps, StepResult};

/// One run directory read for `stairbench compare`.
#[derive(Debug, Clone)]
pub struct Run {
    /// Its path.
    pub dir: PathBuf,
    /// How it is called in tables and sentences (the directory's name, made unique).
    pub label: String,
    /// Its steps (steps.jsonl), in the order they ran.
    pub steps: Vec<StepResult>,
    /// Its environment.json, when present.
    pub environment: Option<Environment>,
    /// Its spec.toml, when present.
    pub spec: Option<RunSpec>,
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
    let mut runs = dirs
        .iter()
        .map(|d| read_run(d))
        .collect::<Result<Vec<Run>, CompareError>>()?;
    let labels: Vec<String> = runs.iter().map(|r| r.label.clone()).collect();
    for (i, run) in runs.iter_mut().enumerate() {
        if labels.iter().filter(|l| **l == run.label).count() > 1 {
            run.label = format!("{} (#{})", run.label, i + 1);
        }
    }
    Ok(runs)
}

/// One run directory: its steps, environment and spec, labelled by the directory's name.
fn read_run(dir: &Path) -> Result<Run, CompareError> {
    let unreadable = |reason: String| CompareError::Read {
        dir: dir.to_path_buf(),
        reason,
    };
    let steps = read_steps(&dir.join("steps.jsonl")).map_err(|e| unreadable(e.to_string()))?;
    // A file that does not parse is refused, not read as absent: its keys would all show as
    // differences.
    let environment = read_environment_file(dir)
        .map_err(|e| unreadable(format!("environment.json does not parse: {e}")))?;
    let spec =
        read_spec_file(dir).map_err(|e| unreadable(format!("spec.toml does not parse: {e}")))?;
    let label = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .file_name()
        .map_or_else(
            || dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
    Ok(Run {
        dir: dir.to_path_buf(),
        label,
        steps,
        environment,
        spec,
    })
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
            if let Some(env) = &r.environment {
                flatten("", &as_json(env), &mut map);
            }
            for (k, v) in r.spec.iter().flat_map(|s| &s.raw) {
                if !matches!(k.as_str(), "name" | "description" | "comparisons") {
                    flatten(&format!("spec.{k}"), &as_json(v), &mut map);
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

/// A record as JSON, to be flattened: the differences are looked for key by key, over every
/// key the files hold, not over a chosen few.
fn as_json(record: &impl Serialize) -> Value {
    serde_json::to_value(record).unwrap_or(Value::Null)
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

/// A step slower than the first run's by more than the gate allows, and by a difference
/// Welch's test finds (or without repetitions to test).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GateFailure {
    /// The slower run.
    pub run: String,
    /// Where.
    #[serde(flatten)]
    pub key: StepKey,
    /// How much slower, percent of the first run's figure.
    pub slower_pct: f64,
    /// The verdict ("slower", or "no repetitions" when noise could not be judged).
    pub verdict: String,
    /// Why, in words: the test, its level and p-value (`Relation::reason`).
    pub reason: String,
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
    /// The shared-memory hash-table study's sentences: each later run against the first, per matched step.
    pub sentences: Vec<String>,
    /// With `--fail-if-slower PCT`: the threshold.
    pub gate_pct: Option<f64>,
    /// With `--fail-if-slower`: the steps that break it.
    pub gate_failures: Vec<GateFailure>,
    /// Confidence level of the tests, percent (`--confidence`).
    pub confidence_pct: f64,
    /// Smallest difference called one, percent (`--min-effect`).
    pub min_effect_pct: f64,
}

/// Lines the runs up on `metric`, tested at `opts`, and, with `gate_pct`, lists the steps
/// that fail the gate.
pub fn compare_runs(
    runs: &[Run],
    metric: Metric,
    gate_pct: Option<f64>,
    opts: TestOptions,
) -> Result<Comparison, CompareError> {
    let maps: Vec<BTreeMap<StepKey, Vec<f64>>> = runs
        .iter()
        .map(|r| values_by_key(&r.steps, metric))
        .collect();
    check_overlap(runs, &maps)?;
    let mut keys: Vec<&StepKey> = maps.iter().flat_map(|m| m.keys()).collect();
    keys.sort();
    keys.dedup();
    let rows: Vec<Row> = keys
        .into_iter()
        .map(|k| row(k, &maps, metric, opts))
        .collect();
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
                    reason: rel.reason(),
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
        confidence_pct: opts.level * 100.0,
        min_effect_pct: opts.min_effect * 100.0,
    })
}

/// The later runs' relations to the first in a row, with their run index.
fn later_runs(row: &Row) -> impl Iterator<Item = (usize, &Relation)> {
    row.against_first
        .iter()
        .enumerate()
        .filter_map(|(i, rel)| Some((i, rel.as_ref()?)))
}

/// Slower by more than `pct`, and a difference Welch's test finds (not within noise, not
/// below the minimum effect). Without repetitions the noise is unknown, so only the
/// threshold protects against it.
fn fails_gate(rel: &Relation, pct: f64) -> bool {
    rel.slower_pct > pct && matches!(rel.verdict.as_str(), "slower" | "no repetitions")
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

fn row(
    key: &StepKey,
    maps: &[BTreeMap<StepKey, Vec<f64>>],
    metric: Metric,
    opts: TestOptions,
) -> Row {
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
                (i > 0).then(|| relate(metric, a, b, opts)).flatten()
            })
            .collect(),
    }
}

/// Reads the directories and compares them.
pub fn compare_dirs(
    dirs: &[PathBuf],
    metric: Metric,
    gate_pct: Option<f64>,
    opts: TestOptions,
) -> Result<Comparison, CompareError> {
    compare_runs(&read_runs(dirs)?, metric, gate_pct, opts)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A run directory holding `files` (name, text), steps.jsonl empty unless given.
    fn run_dir(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("steps.jsonl"), "").unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    fn read_error(files: &[(&str, &str)]) -> String {
        let dir = run_dir(files);
        read_run(dir.path()).unwrap_err().to_string()
    }

    /// A file the typed read refuses stops the comparison with the file named: read as
    /// absent, every one of its keys would be listed as a difference.
    #[test]
    fn a_run_file_that_does_not_parse_is_named() {
        let e = read_error(&[("environment.json", r#"{"cpus": "two"}"#)]);
        assert!(e.contains("environment.json does not parse"), "{e}");
        let e = read_error(&[("spec.toml", "duration = ")]);
        assert!(e.contains("spec.toml does not parse"), "{e}");
        let e = read_error(&[("steps.jsonl", "{\"id\": \"a\"}\n{\"id\": \"b\"}\n")]);
        assert!(e.contains("steps.jsonl:1:"), "{e}");
        // Absent files are not errors, nor are keys missing from them.
        let dir = run_dir(&[("environment.json", r#"{"kernel": "6.8"}"#)]);
        let run = read_run(dir.path()).unwrap();
        assert_eq!(run.environment.unwrap().kernel, "6.8");
        assert!(run.spec.is_none());
    }

    /// The differences run over every key the files hold: the hosts' environments (kept
    /// as their JSON), the spec's settings as written; a key the runs agree on, or the
    /// spec's name, is none.
    #[test]
    fn differences_cover_the_hosts_and_the_spec_as_written() {
        let env = |kernel: &str, offset: i64| {
            format!(
                r#"{{"kernel": "{kernel}", "cpus": 2, "hosts": {{"b": {{"clock_offset": {offset}}}}}}}"#
            )
        };
        let a = run_dir(&[
            ("environment.json", &env("6.1", 5)),
            ("spec.toml", "name = \"a\"\nclients = [1, 2]\n"),
        ]);
        let b = run_dir(&[
            ("environment.json", &env("6.1", 9)),
            ("spec.toml", "name = \"b\"\nclients = [1, 4]\n"),
        ]);
        let runs = read_runs(&[a.path().into(), b.path().into()]).unwrap();
        let d = environment_differences(&runs);
        let keys: Vec<&str> = d.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["hosts.b.clock_offset", "spec.clients"], "{d:?}");
        assert_eq!(d[0].values, [Some("5".into()), Some("9".into())]);
        assert_eq!(d[1].values, [Some("[1,2]".into()), Some("[1,4]".into())]);
    }
}
