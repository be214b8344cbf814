//! The spec's `[[comparisons]]`: each entry read and checked (so `stairbench sweep` can reject
//! a typo before the run), then resolved against the steps into the shared-memory hash-table study's sentences
//! ("alone at 1 thread is faster than one visitor at 1 thread: 1.64x") for analysis.json.

use serde::{Deserialize, Serialize};

use super::{relate, values_by_key, Metric, Relation, Selector, StepKey};
use crate::analyze::stats::{TestOptions, DEFAULT_LEVEL, DEFAULT_MIN_EFFECT};
use crate::record::steps::StepResult;

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
    /// Confidence level of Welch's test and the ratio's interval, percent (default 95).
    #[serde(default)]
    pub confidence_pct: Option<f64>,
    /// Differences below this many percent are "equal" however significant (default 2).
    #[serde(default)]
    pub min_effect_pct: Option<f64>,
}

/// A `[[comparisons]]` entry that cannot be read or resolved.
#[derive(Debug, thiserror::Error)]
pub enum ComparisonError {
    /// Not the entry's shape (what TOML said).
    #[error("{0} (expected a = \"TARGET[/PLACEMENT][@CLIENTS]\", b = ..., and optionally name, name_a, name_b, metric, confidence_pct, min_effect_pct)")]
    Shape(String),
    /// A side's selector.
    #[error(transparent)]
    Selector(#[from] super::SelectorError),
    /// Its test's options.
    #[error("confidence_pct / min_effect_pct: {0}")]
    Options(#[from] crate::analyze::stats::OptionsError),
    /// Side A selects no ok step.
    #[error("no ok step matches a = {0:?}")]
    NoOkStep(String),
    /// Side A's ok steps lack the metric (an external tool that reports no p99, say).
    #[error("the {ok} ok step(s) matching a = {text:?} have no {metric} (not measured by their load), so there is nothing to compare")]
    NoMetric {
        /// Side A's ok steps.
        ok: usize,
        /// Side A's selector.
        text: String,
        /// The metric's name.
        metric: String,
    },
    /// Side B has no ok step where A has some.
    #[error("no ok step matches b = {b:?} where a = {a:?} has steps")]
    NoPartner {
        /// Side A's selector.
        a: String,
        /// Side B's selector.
        b: String,
    },
}

impl ComparisonSpec {
    /// The test's level and minimum effect, defaults filled in; an error names the bad key.
    pub fn test_options(&self) -> Result<TestOptions, ComparisonError> {
        Ok(TestOptions::from_pct(
            self.confidence_pct.unwrap_or(DEFAULT_LEVEL * 100.0),
            self.min_effect_pct.unwrap_or(DEFAULT_MIN_EFFECT * 100.0),
        )?)
    }
}

/// One resolved comparison: A's steps against B's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonOutcome {
    /// The shared-memory hash-table study's sentence, with the noise verdict when there are repetitions.
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

/// The outcomes of every `[[comparisons]]` entry of `spec`; an entry that does not parse or
/// resolve is a note instead.
pub fn spec_comparisons(
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
/// optional `name`, `name_a`, `name_b`, `metric`, `confidence_pct`, `min_effect_pct`.
pub fn parse_comparison(item: &toml::Value) -> Result<ComparisonSpec, ComparisonError> {
    let spec: ComparisonSpec = item
        .clone()
        .try_into()
        .map_err(|e: toml::de::Error| ComparisonError::Shape(e.message().to_string()))?;
    spec.a.parse::<Selector>()?;
    spec.b.parse::<Selector>()?;
    spec.test_options()?;
    Ok(spec)
}

/// The outcomes of one comparison: one per step position of A that B also has.
pub fn resolve(
    spec: &ComparisonSpec,
    steps: &[StepResult],
) -> Result<Vec<ComparisonOutcome>, ComparisonError> {
    let a: Selector = spec.a.parse()?;
    let b: Selector = spec.b.parse()?;
    let opts = spec.test_options()?;
    let all = values_by_key(steps, spec.metric);
    let a_side: Vec<(&StepKey, &Vec<f64>)> = all.iter().filter(|(k, _)| a.selects(k)).collect();
    if a_side.is_empty() {
        return Err(no_value(&spec.a, &a, spec.metric, steps));
    }
    let out: Vec<ComparisonOutcome> = a_side
        .iter()
        .filter_map(|&(a_key, a_vals)| {
            let b_key = b.partner_of(a_key);
            let relation = relate(spec.metric, a_vals, all.get(&b_key)?, opts)?;
            let caveat = confounded(steps, [(a_key, &spec.a), (&b_key, &spec.b)], spec);
            Some(ComparisonOutcome {
                sentence: outcome_sentence(spec, a_key, &relation, a_side.len() > 1) + &caveat,
                metric: spec.metric,
                a: a_key.clone(),
                b: b_key,
                relation,
            })
        })
        .collect();
    if out.is_empty() {
        return Err(ComparisonError::NoPartner {
            a: spec.a.clone(),
            b: spec.b.clone(),
        });
    }
    Ok(out)
}

/// Why no step of a side has a value: no ok step there, or ok steps without the metric (an
/// external tool that does not report a p99, say).
fn no_value(text: &str, side: &Selector, metric: Metric, steps: &[StepResult]) -> ComparisonError {
    let ok = steps
        .iter()
        .filter(|s| s.status == crate::record::steps::StepStatus::Ok)
        .filter(|s| side.selects(&StepKey::of(s)))
        .count();
    if ok == 0 {
        ComparisonError::NoOkStep(text.into())
    } else {
        ComparisonError::NoMetric {
            ok,
            text: text.into(),
            metric: metric.name().to_string(),
        }
    }
}

/// " — confounded: other processes took 55% of the server's CPUs for reactor at 8 clients
/// (busiest: ...)" when a step the comparison rests on was disturbed and kept
/// (`run --keep-disturbed`): the worst of them, so the verdict cannot be pasted without it.
fn confounded(
    steps: &[StepResult],
    sides: [(&StepKey, &String); 2],
    spec: &ComparisonSpec,
) -> String {
    let name = |i: usize, text: &String| {
        let given = if i == 0 { &spec.name_a } else { &spec.name_b };
        given.clone().unwrap_or_else(|| text.clone())
    };
    let worst = steps
        .iter()
        .filter(|s| {
            s.status == crate::record::steps::StepStatus::Ok && spec.metric.value(s).is_some()
        })
        .filter_map(|s| {
            let d = s.figures.disturbed.as_ref()?;
            let key = StepKey::of(s);
            let side = sides.iter().position(|(k, _)| **k == key)?;
            Some((name(side, sides[side].1), key, d))
        })
        .max_by(|a, b| a.2.worst().1.total_cmp(&b.2.worst().1));
    worst.map_or(String::new(), |(name, key, d)| {
        format!(
            " — confounded: {} for {name} at {}",
            d.describe(),
            crate::units::count(key.clients, "client")
        )
    })
}

/// The shared-memory hash-table study's sentence, prefixed with where A's steps sit when the comparison spans several,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::figures::Disturbance;
    use crate::record::load::LoadReport;
    use crate::record::steps::StepStatus;
    use crate::record::use_cpu::Neighbour;

    #[test]
    fn a_verdict_resting_on_a_kept_disturbed_step_says_so_in_its_own_line() {
        // Issue 44: "reactor is slower than pool: 0.68x" while a hog took 55% of the
        // reactor's CPU, the caveat a separate line: pasted alone, a wrong conclusion.
        let step = |target: &str, rep: usize, x: f64| {
            let mut s = StepResult::empty(format!("{target}.r{rep}"), target, "shared", 8, rep);
            s.status = StepStatus::Ok;
            s.load = Some(LoadReport {
                throughput_rps: x,
                requests: 1000,
                ..LoadReport::default()
            });
            s
        };
        let mut steps = vec![
            step("reactor", 0, 680.0),
            step("reactor", 1, 690.0),
            step("reactor", 2, 670.0),
            step("pool", 0, 1000.0),
            step("pool", 1, 1010.0),
            step("pool", 2, 990.0),
        ];
        let spec = parse_comparison(
            &toml::from_str(
                "a = \"reactor@8\"\nb = \"pool@8\"\nname_a = \"reactor\"\nname_b = \"pool\"",
            )
            .unwrap(),
        )
        .unwrap();
        let clean = resolve(&spec, &steps).unwrap()[0].sentence.clone();
        assert!(!clean.contains("confounded"), "{clean}");
        steps[1].figures.disturbed = Some(Disturbance {
            server_cpus_others_pct: Some(55.0),
            client_cpus_others_pct: Some(2.0),
            busiest: Some(Neighbour {
                pid: 42,
                name: "hog".into(),
                server_cpus_pct: 54.0,
                ..Neighbour::default()
            }),
            threshold_pct: 10.0,
            kept: true,
        });
        let sentence = resolve(&spec, &steps).unwrap()[0].sentence.clone();
        assert_eq!(
            sentence,
            format!("{clean} — confounded: other processes took 55% of the server's CPUs (busiest: hog, pid 42, 54%) for reactor at 8 clients")
        );
    }

    #[test]
    fn comparison_entries_are_checked() {
        let ok: toml::Value =
            toml::from_str("a = \"x/shared@4\"\nbaseline = \"y\"\nmetric = \"p99\"").unwrap();
        let c = parse_comparison(&ok).unwrap();
        assert_eq!((c.b.as_str(), c.metric), ("y", Metric::P99));
        let typo: toml::Value = toml::from_str("a = \"x\"\nb = \"y\"\nmetrc = \"p99\"").unwrap();
        assert!(parse_comparison(&typo)
            .unwrap_err()
            .to_string()
            .contains("metrc"));
        let bad: toml::Value = toml::from_str("a = \"x@four\"\nb = \"y\"").unwrap();
        assert!(parse_comparison(&bad)
            .unwrap_err()
            .to_string()
            .contains("client count"));
        let level: toml::Value =
            toml::from_str("a = \"x\"\nb = \"y\"\nconfidence_pct = 99\nmin_effect_pct = 5")
                .unwrap();
        let opts = parse_comparison(&level).unwrap().test_options().unwrap();
        assert_eq!((opts.level, opts.min_effect), (0.99, 0.05));
        let bad: toml::Value = toml::from_str("a = \"x\"\nb = \"y\"\nmin_effect_pct = -3").unwrap();
        let e = parse_comparison(&bad).unwrap_err().to_string();
        assert!(e.contains("min_effect_pct") && e.contains("-3%"), "{e}");
    }
}
