//! Thresholds: a pass/fail gate on a run's figures (`[[thresholds]]` in a spec, `load
//! --threshold 'p99_ms<5'`), as k6's thresholds or Gatling's assertions.
//!
//! A threshold is `METRIC OP VALUE`, optionally restricted to one load level (`at`) and to a
//! target and placement. Every measured step it selects (status ok or errors) must meet it;
//! its verdict carries the worst value measured and the step that gave it. The runner asks
//! [`abort_reason`] after each step (for `abort = true`); the analysis calls [`evaluate`] on
//! the whole run (analysis.json, the reports, the exit code 4).

use std::fmt;
use std::str::FromStr;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::record::figures::ThresholdCheck;
use crate::record::steps::{StepResult, StepStatus};

/// A figure a threshold can check, per step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ThresholdMetric {
    /// 99th percentile latency, milliseconds.
    #[serde(rename = "p99_ms")]
    P99Ms,
    /// Median latency, milliseconds.
    #[serde(rename = "p50_ms")]
    P50Ms,
    /// Completed requests per second.
    #[serde(rename = "throughput_rps")]
    ThroughputRps,
    /// errors / (requests + errors).
    #[serde(rename = "error_ratio")]
    ErrorRatio,
    /// Server CPU microseconds per request (user + system; needs the server observed).
    #[serde(rename = "cpu_us_per_req")]
    CpuUsPerReq,
    /// Server context switches per request (needs the server observed).
    #[serde(rename = "cs_per_req")]
    CsPerReq,
}

/// Every metric, with its name.
pub const METRICS: &[(&str, ThresholdMetric)] = &[
    ("p99_ms", ThresholdMetric::P99Ms),
    ("p50_ms", ThresholdMetric::P50Ms),
    ("throughput_rps", ThresholdMetric::ThroughputRps),
    ("error_ratio", ThresholdMetric::ErrorRatio),
    ("cpu_us_per_req", ThresholdMetric::CpuUsPerReq),
    ("cs_per_req", ThresholdMetric::CsPerReq),
];

impl ThresholdMetric {
    /// Its name in specs and outputs.
    pub fn name(self) -> &'static str {
        METRICS
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("", |(n, _)| n)
    }

    /// Whether only a run (which observes the server) measures it, not `stairbench load`.
    pub fn needs_server(self) -> bool {
        matches!(
            self,
            ThresholdMetric::CpuUsPerReq | ThresholdMetric::CsPerReq
        )
    }

    /// Its value at a step that measured something.
    pub fn of_step(self, step: &StepResult) -> Option<f64> {
        let load = step.load.as_ref()?;
        let v = match self {
            ThresholdMetric::P99Ms => load.latency_us.p99 / 1e3,
            ThresholdMetric::P50Ms => load.latency_us.p50 / 1e3,
            ThresholdMetric::ThroughputRps => load.throughput_rps,
            ThresholdMetric::ErrorRatio => step.error_ratio(),
            ThresholdMetric::CpuUsPerReq => step.per_request().cpu_us_per_req.total?,
            ThresholdMetric::CsPerReq => step.per_request().cs_per_req?,
        };
        v.is_finite().then_some(v)
    }
}

/// The comparison a measured value must pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Below.
    #[serde(rename = "<")]
    Lt,
    /// At most.
    #[serde(rename = "<=")]
    Le,
    /// Above.
    #[serde(rename = ">")]
    Gt,
    /// At least.
    #[serde(rename = ">=")]
    Ge,
}

impl Op {
    /// Its symbol.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }

    /// Whether `measured OP limit` holds.
    pub fn holds(self, measured: f64, limit: f64) -> bool {
        match self {
            Op::Lt => measured < limit,
            Op::Le => measured <= limit,
            Op::Gt => measured > limit,
            Op::Ge => measured >= limit,
        }
    }

    /// True when a larger value is worse (an upper bound).
    fn upper_bound(self) -> bool {
        matches!(self, Op::Lt | Op::Le)
    }
}

/// Which load levels of the selected series a threshold checks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum At {
    /// Every step.
    #[default]
    All,
    /// The steps at this level: a client count in a closed-loop series, a rate (requests/s)
    /// in an open-loop one.
    Level(f64),
}

impl At {
    /// Whether a step sits at this level.
    pub fn selects(self, step: &StepResult) -> bool {
        match self {
            At::All => true,
            At::Level(level) => {
                let of_step = step.rate_rps.unwrap_or(step.clients as f64);
                (of_step - level).abs() <= 1e-9 * level.abs().max(1.0)
            }
        }
    }
}

impl<'de> Deserialize<'de> for At {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = At;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a client count, a rate (requests/s) or \"all\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<At, E> {
                match v {
                    "all" => Ok(At::All),
                    other => Err(E::custom(format!(
                        "{other:?}: expected a client count, a rate (requests/s) or \"all\""
                    ))),
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<At, E> {
                self.visit_f64(v as f64)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<At, E> {
                self.visit_f64(v as f64)
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<At, E> {
                if v > 0.0 && v.is_finite() {
                    Ok(At::Level(v))
                } else {
                    Err(E::custom(format!(
                        "{v}: expected a positive client count or rate, or \"all\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for At {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            At::All => s.serialize_str("all"),
            At::Level(v) => s.serialize_f64(*v),
        }
    }
}

/// One threshold as a spec's `[[thresholds]]` entry writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// The figure checked.
    pub metric: ThresholdMetric,
    /// The comparison.
    pub op: Op,
    /// The limit, in the metric's unit.
    pub value: f64,
    /// The load level checked (default: every step).
    #[serde(default)]
    pub at: At,
    /// Only this target's steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Only this placement's steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// Stop the run at the first step that breaches it.
    #[serde(default)]
    pub abort: bool,
}

impl fmt::Display for Threshold {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.metric.name(),
            self.op.symbol(),
            self.value
        )?;
        if let At::Level(level) = self.at {
            write!(f, " at {level}")?;
        }
        match (&self.target, &self.placement) {
            (Some(t), Some(p)) => write!(f, " on {t}/{p}"),
            (Some(t), None) => write!(f, " on {t}"),
            (None, Some(p)) => write!(f, " on placement {p}"),
            (None, None) => Ok(()),
        }
    }
}

/// What a threshold should look like, for errors.
const EXPECTED: &str = "expected METRIC OP VALUE, e.g. 'p99_ms<5' (OP one of <, <=, >, >=)";

/// A threshold that cannot be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ThresholdError {
    /// No comparison operator.
    #[error("{0:?}: {expected}", expected = EXPECTED)]
    NoOp(String),
    /// A metric no threshold can check.
    #[error("unknown metric {0:?}{near}: expected one of {names}", near = crate::units::did_you_mean(.0, &metric_names()), names = metric_names().join(", "))]
    UnknownMetric(String),
    /// A value that is not a finite number.
    #[error("{text:?}: {value:?} is not a number; {expected}", expected = EXPECTED)]
    NotANumber {
        /// The whole threshold.
        text: String,
        /// Its value part.
        value: String,
    },
    /// A run directory's `[[thresholds]]` that do not read back (what TOML said).
    #[error("spec.toml's [[thresholds]]: {0}")]
    Spec(String),
}

fn metric_names() -> Vec<&'static str> {
    METRICS.iter().map(|(n, _)| *n).collect()
}

impl FromStr for Threshold {
    type Err = ThresholdError;

    /// `METRIC OP VALUE`, spaces optional: `p99_ms<5`, `throughput_rps >= 1000`.
    fn from_str(text: &str) -> Result<Threshold, ThresholdError> {
        let at = text
            .find(['<', '>'])
            .ok_or_else(|| ThresholdError::NoOp(text.into()))?;
        let (name, rest) = (text[..at].trim(), &text[at..]);
        let (op, value) = match rest.as_bytes().get(1) {
            Some(b'=') => (&rest[..2], &rest[2..]),
            _ => (&rest[..1], &rest[1..]),
        };
        let metric = metric_named(name)?;
        let op = match op {
            "<" => Op::Lt,
            "<=" => Op::Le,
            ">" => Op::Gt,
            _ => Op::Ge,
        };
        let value: f64 = value
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| ThresholdError::NotANumber {
                text: text.into(),
                value: value.into(),
            })?;
        Ok(Threshold {
            metric,
            op,
            value,
            at: At::All,
            target: None,
            placement: None,
            abort: false,
        })
    }
}

/// The metric of that name, or which names there are.
fn metric_named(name: &str) -> Result<ThresholdMetric, ThresholdError> {
    METRICS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, m)| *m)
        .ok_or_else(|| ThresholdError::UnknownMetric(name.into()))
}

impl Threshold {
    /// Whether it checks this step: a measured step (ok or errors) of its target, placement
    /// and load level.
    pub fn selects(&self, step: &StepResult) -> bool {
        matches!(step.status, StepStatus::Ok | StepStatus::Errors)
            && step.load.is_some()
            && self.target.as_ref().is_none_or(|t| *t == step.target)
            && self.placement.as_ref().is_none_or(|p| *p == step.placement)
            && self.at.selects(step)
    }

    /// The step's value and whether it passes, when the threshold checks the step and the
    /// step has the figure.
    pub fn check(&self, step: &StepResult) -> Option<(f64, bool)> {
        if !self.selects(step) {
            return None;
        }
        // A figure that was not measured (the latency of a step where no request completed)
        // is no value to pass or fail on: unmeasured, which is not a pass either.
        let v = self.metric.of_step(step).filter(|v| v.is_finite())?;
        Some((v, self.op.holds(v, self.value)))
    }
}

/// A threshold's outcome over a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Every step it selects met it.
    Met,
    /// A step it selects did not.
    Breached,
    /// No step it selects measured its figure (none ran, or the figure was not observed):
    /// not a pass.
    Unmeasured,
}

/// One threshold's verdict (analysis.json's `thresholds`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdVerdict {
    /// The threshold in words, e.g. `p99_ms < 5 at 4 on msgr/shared`.
    pub threshold: String,
    /// The threshold as written.
    pub spec: Threshold,
    /// Met, breached or unmeasured.
    pub verdict: Verdict,
    /// The worst value among the steps checked (the highest for `<`/`<=`, the lowest for
    /// `>`/`>=`), in the metric's unit; None when unmeasured.
    pub measured: Option<f64>,
    /// The id of the step that gave `measured`.
    pub step: Option<String>,
    /// Steps checked.
    pub steps_checked: usize,
    /// Steps among them that did not meet it.
    pub steps_breached: usize,
}

impl ThresholdVerdict {
    /// Whether it passed (an unmeasured threshold did not).
    pub fn passed(&self) -> bool {
        self.verdict == Verdict::Met
    }

    /// `PASS` or `FAIL`.
    pub fn head(&self) -> &'static str {
        if self.passed() {
            "PASS"
        } else {
            "FAIL"
        }
    }

    /// The verdict of a single load: `PASS p99_ms < 5: measured 1.2340`.
    pub fn short_sentence(&self) -> String {
        match self.measured {
            Some(v) => format!("{} {}: measured {}", self.head(), self.threshold, figure(v)),
            None => format!("{} {}: not measured", self.head(), self.threshold),
        }
    }

    /// One sentence: `PASS p99_ms < 5: measured 1.2340 at step x (0 of 3 steps breached)`.
    pub fn sentence(&self) -> String {
        let head = self.head();
        match (self.measured, &self.step) {
            (Some(v), Some(step)) => format!(
                "{head} {}: measured {} at step {step} ({} of {} step{} breached)",
                self.threshold,
                figure(v),
                self.steps_breached,
                self.steps_checked,
                if self.steps_checked == 1 { "" } else { "s" }
            ),
            _ => format!("{head} {}: no step measured it", self.threshold),
        }
    }
}

/// A figure with enough digits to compare with a limit.
pub fn figure(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.4}")
    }
}

/// Every threshold's verdict over the steps.
pub fn evaluate(thresholds: &[Threshold], steps: &[StepResult]) -> Vec<ThresholdVerdict> {
    thresholds.iter().map(|t| verdict(t, steps)).collect()
}

fn verdict(t: &Threshold, steps: &[StepResult]) -> ThresholdVerdict {
    let checks: Vec<(&StepResult, f64, bool)> = steps
        .iter()
        .filter_map(|s| t.check(s).map(|(v, ok)| (s, v, ok)))
        .collect();
    let worse = |a: f64, b: f64| if t.op.upper_bound() { a > b } else { a < b };
    let worst = checks
        .iter()
        .fold(None::<&(&StepResult, f64, bool)>, |w, c| match w {
            Some(w) if !worse(c.1, w.1) => Some(w),
            _ => Some(c),
        });
    let breached = checks.iter().filter(|c| !c.2).count();
    ThresholdVerdict {
        threshold: t.to_string(),
        spec: t.clone(),
        verdict: match (checks.is_empty(), breached) {
            (true, _) => Verdict::Unmeasured,
            (false, 0) => Verdict::Met,
            _ => Verdict::Breached,
        },
        measured: worst.map(|w| w.1),
        step: worst.map(|w| w.0.id.clone()),
        steps_checked: checks.len(),
        steps_breached: breached,
    }
}

/// The checks of one step (the `thresholds` array of its steps.jsonl line): each threshold
/// that selects it, with the step's value and whether it passed.
pub fn step_checks(thresholds: &[Threshold], step: &StepResult) -> Vec<ThresholdCheck> {
    let check = |t: &Threshold| {
        t.check(step).map(|(measured, met)| ThresholdCheck {
            threshold: t.to_string(),
            measured,
            met,
        })
    };
    thresholds.iter().filter_map(check).collect()
}

/// Why the run must stop after this step: the first `abort = true` threshold it breaches.
pub fn abort_reason(thresholds: &[Threshold], step: &StepResult) -> Option<String> {
    thresholds.iter().filter(|t| t.abort).find_map(|t| {
        let (v, ok) = t.check(step)?;
        (!ok).then(|| {
            format!(
                "threshold {t} breached at step {} (measured {}): the run was aborted (abort = true)",
                step.id,
                figure(v)
            )
        })
    })
}

/// The `[[thresholds]]` of a spec read back as a TOML table (a run directory's spec.toml).
pub fn from_spec(spec: &toml::Table) -> Result<Vec<Threshold>, ThresholdError> {
    match spec.get("thresholds") {
        None => Ok(Vec::new()),
        Some(v) => v
            .clone()
            .try_into::<Vec<Threshold>>()
            .map_err(|e| ThresholdError::Spec(e.message().trim().to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::load::LoadReport;

    fn step(id: &str, clients: usize, p99_us: f64, rps: f64) -> StepResult {
        let mut s = StepResult::empty(id.into(), "t", "shared", clients, 0);
        s.status = StepStatus::Ok;
        let mut load = LoadReport {
            throughput_rps: rps,
            requests: 100,
            ..LoadReport::default()
        };
        load.latency_us.p99 = p99_us;
        s.load = Some(load);
        s
    }

    #[test]
    fn text_form_parses_and_prints() {
        let t: Threshold = "p99_ms<5".parse().unwrap();
        assert_eq!(
            (t.metric, t.op, t.value),
            (ThresholdMetric::P99Ms, Op::Lt, 5.0)
        );
        let t: Threshold = " throughput_rps >= 1e3 ".parse().unwrap();
        assert_eq!((t.op, t.value), (Op::Ge, 1000.0));
        assert_eq!(t.to_string(), "throughput_rps >= 1000");
        assert!("p95_ms<5"
            .parse::<Threshold>()
            .unwrap_err()
            .to_string()
            .contains("unknown metric"));
        assert!("p99_ms=5".parse::<Threshold>().is_err());
        assert!("p99_ms<fast"
            .parse::<Threshold>()
            .unwrap_err()
            .to_string()
            .contains("not a number"));
    }

    #[test]
    fn the_worst_step_decides() {
        let steps = [step("a", 1, 1000.0, 500.0), step("b", 2, 7000.0, 900.0)];
        let t: Threshold = "p99_ms<5".parse().unwrap();
        let v = evaluate(std::slice::from_ref(&t), &steps).remove(0);
        assert_eq!(v.verdict, Verdict::Breached);
        assert_eq!((v.measured, v.step.as_deref()), (Some(7.0), Some("b")));
        assert_eq!((v.steps_checked, v.steps_breached), (2, 1));
        let at_one = Threshold {
            at: At::Level(1.0),
            ..t
        };
        let v = evaluate(&[at_one], &steps).remove(0);
        assert_eq!((v.verdict, v.measured), (Verdict::Met, Some(1.0)));
        let rps: Threshold = "throughput_rps>600".parse().unwrap();
        let v = evaluate(&[rps], &steps).remove(0);
        assert_eq!(
            (v.verdict, v.step.as_deref()),
            (Verdict::Breached, Some("a"))
        );
    }

    #[test]
    fn nothing_measured_is_not_a_pass() {
        let t: Threshold = "cs_per_req<5".parse().unwrap();
        let v = evaluate(&[t], &[step("a", 1, 1.0, 1.0)]).remove(0);
        assert_eq!(v.verdict, Verdict::Unmeasured);
        assert!(!v.passed());
        assert!(
            v.sentence().contains("no step measured it"),
            "{}",
            v.sentence()
        );
    }

    #[test]
    fn only_abort_thresholds_stop_a_run() {
        let s = step("a", 1, 9000.0, 1.0);
        let mut t: Threshold = "p99_ms<5".parse().unwrap();
        assert_eq!(abort_reason(&[t.clone()], &s), None);
        t.abort = true;
        let why = abort_reason(&[t], &s).unwrap();
        assert!(
            why.contains("p99_ms < 5") && why.contains("9.0000"),
            "{why}"
        );
    }
}
