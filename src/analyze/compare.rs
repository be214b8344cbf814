//! Comparisons: one step (or a set of repetitions) against another, as the shared-memory hash-table study reads them
//! ("alone at 1 thread is faster than one visitor at 1 thread: 1.64x"), with the ratio's
//! confidence interval and Welch's t-test when there are repetitions ([`stats`]).
//!
//! The spec's `[[comparisons]]` ([`spec`]) and `stairbench compare`, which lines up run
//! directories step by step ([`runs`]), share the metric, the selectors, the step matching and
//! the verdicts here. How a comparison is shown is `report::compare`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::analyze::stats::{self, Summary, TestOptions, Verdict};
use crate::record::steps::{StepResult, StepStatus};

pub mod runs;
pub mod spec;

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
            Metric::CpuUsPerReq => step.per_request().cpu_us_per_req.total,
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

/// A selector that does not read as `TARGET[/PLACEMENT][@CLIENTS]`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectorError {
    /// What follows `@` is not a number.
    #[error(
        "{text:?}: {clients:?} after '@' is not a client count (TARGET[/PLACEMENT][@CLIENTS])"
    )]
    Clients {
        /// The selector.
        text: String,
        /// What follows `@`.
        clients: String,
    },
    /// No target before `/` or `@`.
    #[error("{0:?} names no target (TARGET[/PLACEMENT][@CLIENTS])")]
    NoTarget(String),
}

impl std::str::FromStr for Selector {
    type Err = SelectorError;

    fn from_str(text: &str) -> Result<Selector, SelectorError> {
        let (rest, clients) = match text.rsplit_once('@') {
            Some((rest, n)) => {
                let n = n
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| SelectorError::Clients {
                        text: text.into(),
                        clients: n.into(),
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
            return Err(SelectorError::NoTarget(text.into()));
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
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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

/// Repetitions a side from which a 95% interval is printed: with 2, Student's t has one
/// degree of freedom and the interval is ±12.7 standard errors.
pub const MIN_REPS_FOR_INTERVAL: usize = 3;

/// How A stands against B on a metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Relation {
    /// A's speed over B's: A's throughput / B's, or B's time / A's; above 1 A is faster.
    pub speedup: f64,
    /// Confidence interval of the speedup at `confidence_pct` (delta method on the log of the
    /// ratio of means); None without 2 repetitions a side.
    pub speedup_interval: Option<[f64; 2]>,
    /// How much slower A is than B, in percent of B's figure (0 when A is not slower).
    pub slower_pct: f64,
    /// "faster" or "slower" (a difference at the level, at least the minimum effect), "equal"
    /// (a difference below the minimum effect), "within noise" (none found), or "no
    /// repetitions" (a side has one value: no spread to test).
    pub verdict: String,
    /// Whether Welch's test finds no difference at the level (None without repetitions on
    /// both sides).
    pub within_noise: Option<bool>,
    /// Welch's t-test's two-sided p-value (None without repetitions on both sides).
    pub p_value: Option<f64>,
    /// Welch–Satterthwaite degrees of freedom of the test.
    pub df: Option<f64>,
    /// Confidence level of the test and the interval, percent.
    pub confidence_pct: f64,
    /// Differences below this many percent are "equal" however significant.
    pub min_effect_pct: f64,
    /// A's values summarised (mean, spread, 95% CI).
    pub a: Summary,
    /// B's values summarised.
    pub b: Summary,
}

impl Relation {
    /// The shared-memory hash-table study's sentence with the ratio's interval and the test's verdict: "b is slower
    /// than a: 0.90x [0.87, 0.93] (a difference at 95%: Welch's t-test p = 0.003)". The one
    /// function every output (stdout, report.md, report.html, JUnit) takes it from.
    /// A winner is named only where the test found a difference of at least the minimum
    /// effect: within noise the sentence says "level within noise", and without a spread to
    /// test "untested", each with the ratio and its interval.
    pub fn sentence(&self, name_a: &str, name_b: &str) -> String {
        let ratio = format!("{:.2}x{}", self.speedup, self.interval_text());
        match self.verdict.as_str() {
            "equal" => format!(
                "{name_a} is as fast as {name_b}: {ratio} ({})",
                self.reason()
            ),
            "within noise" => format!(
                "{name_a} and {name_b} are level within noise: {ratio} ({})",
                self.reason()
            ),
            "no repetitions" => format!("{name_a} against {name_b}: {ratio}, {}", self.reason()),
            _ => format!(
                "{}{} ({})",
                stats::sentence(name_a, name_b, self.speedup),
                self.interval_text(),
                self.reason()
            ),
        }
    }

    /// "1 repetition a side", or "1 and 3 repetitions" when the sides differ.
    fn repetitions_text(&self) -> String {
        match (self.a.n, self.b.n) {
            (1, 1) => "1 repetition a side".to_string(),
            (a, b) if a == b => format!("{a} repetitions a side"),
            (a, b) => format!("{a} and {b} repetitions"),
        }
    }

    /// The speedup's interval as printed after it, " [0.88, 0.94]"; empty without one. With
    /// two repetitions on a side its 95% interval spans ±12.7 standard errors (Student's t
    /// with one degree of freedom): "[0.00, 7583.99]" bounds nothing, so it says so instead.
    pub fn interval_text(&self) -> String {
        if self.speedup_interval.is_some() && self.a.n.min(self.b.n) < MIN_REPS_FOR_INTERVAL {
            return format!(
                " (no interval: {} are too few to bound one)",
                self.repetitions_text()
            );
        }
        self.speedup_interval
            .map_or_else(String::new, |[lo, hi]| format!(" [{lo:.2}, {hi:.2}]"))
    }

    /// Why the verdict is what it is, in words: the test, its level and p-value.
    pub fn reason(&self) -> String {
        let level = self.confidence_pct;
        let p = self.p_value.map_or_else(String::new, show_p);
        match self.verdict.as_str() {
            "no repetitions" => format!(
                "untested: {}, no spread to test, so no winner",
                self.repetitions_text()
            ),
            "within noise" => format!("no difference found at {level}%: Welch's t-test {p}"),
            "equal" => format!(
                "equal: {:.1}% apart, below the {}% minimum effect; Welch's t-test {p}",
                self.effect_pct(),
                self.min_effect_pct
            ),
            _ => format!("a difference at {level}%: Welch's t-test {p}"),
        }
    }

    /// How far apart the means are, in percent of B's.
    pub fn effect_pct(&self) -> f64 {
        ((self.a.mean - self.b.mean) / self.b.mean).abs() * 100.0
    }
}

/// "p = 0.012", or "p = 2.1e-4" below 0.001 (no "<", which report.md would escape).
pub fn show_p(p: f64) -> String {
    if p == 0.0 {
        "p = 0".to_string()
    } else if p < 0.001 {
        format!("p = {p:.1e}")
    } else {
        format!("p = {p:.3}")
    }
}

/// Relates A's values to B's with Welch's test at `opts`; None when either side has no usable
/// value.
pub fn relate(metric: Metric, a: &[f64], b: &[f64], opts: TestOptions) -> Option<Relation> {
    let cmp = stats::compare(a, b, opts)?;
    if cmp.a.mean == 0.0 {
        return None;
    }
    let higher = metric.higher_is_better();
    let (speedup, slower_pct) = if higher {
        (cmp.ratio, cmp.slower_pct())
    } else {
        (1.0 / cmp.ratio, ((cmp.ratio - 1.0) * 100.0).max(0.0))
    };
    let speedup_interval = cmp.ratio_interval.map(|(lo, hi)| {
        if higher {
            [lo, hi]
        } else {
            [1.0 / hi, 1.0 / lo]
        }
    });
    let verdict = match cmp.verdict {
        Verdict::NoSpread => "no repetitions",
        Verdict::WithinNoise => "within noise",
        Verdict::Equal => "equal",
        Verdict::Higher | Verdict::Lower if speedup >= 1.0 => "faster",
        Verdict::Higher | Verdict::Lower => "slower",
    };
    Some(Relation {
        speedup,
        speedup_interval,
        slower_pct,
        verdict: verdict.to_string(),
        within_noise: cmp.test.map(|_| cmp.verdict == Verdict::WithinNoise),
        p_value: cmp.test.map(|t| t.p_value),
        df: cmp.test.map(|t| t.df),
        confidence_pct: round_pct(opts.level * 100.0),
        min_effect_pct: round_pct(opts.min_effect * 100.0),
        a: cmp.a,
        b: cmp.b,
    })
}

/// A percentage back from a fraction, without the float noise of the division (95, not
/// 95.00000000000001).
fn round_pct(pct: f64) -> f64 {
    (pct * 1e6).round() / 1e6
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
            .to_string()
            .contains("client count"));
        assert!("/shared".parse::<Selector>().is_err());
    }

    #[test]
    fn two_repetitions_a_side_bound_no_interval() {
        // Issue 44: 2 runs a side printed "1.76x [0.00, 7583.99]", an interval that bounds
        // nothing (Student's t with one degree of freedom is 12.7).
        let rel = relate(
            Metric::ThroughputRps,
            &[17600.0, 1200.0],
            &[5000.0, 5400.0],
            TestOptions::default(),
        )
        .unwrap();
        assert!(rel.speedup_interval.is_some());
        let s = rel.sentence("a", "b");
        assert!(
            s.contains("x (no interval: 2 repetitions a side are too few to bound one)")
                && !s.contains('['),
            "{s}"
        );
    }

    #[test]
    fn relations_for_both_directions_of_better() {
        let opts = TestOptions::default();
        let rel = relate(
            Metric::ThroughputRps,
            &[90.0, 91.0, 89.0],
            &[100.0, 101.0, 99.0],
            opts,
        )
        .unwrap();
        assert!((rel.speedup - 0.9).abs() < 1e-12);
        assert!((rel.slower_pct - 10.0).abs() < 1e-9);
        assert_eq!(rel.verdict, "slower");
        let [lo, hi] = rel.speedup_interval.unwrap();
        assert!(lo < 0.9 && hi > 0.9 && hi < 1.0, "{lo} {hi}");
        let p = rel.p_value.unwrap();
        assert!(p < 0.001, "{p}");
        assert_eq!(
            rel.sentence("b", "a"),
            format!(
                "b is slower than a: 0.90x [{lo:.2}, {hi:.2}] (a difference at 95%: Welch's t-test p = {p:.1e})"
            )
        );
        assert_eq!(show_p(0.0123), "p = 0.012");
        assert_eq!(show_p(0.000_21), "p = 2.1e-4");
        // Latency 20% higher is slower by 20%, speed 1/1.2; the interval is inverted too.
        let rel = relate(Metric::P99, &[120.0], &[100.0], opts).unwrap();
        assert!((rel.speedup - 1.0 / 1.2).abs() < 1e-12);
        assert!((rel.slower_pct - 20.0).abs() < 1e-9);
        assert_eq!(rel.verdict, "no repetitions");
        assert_eq!(
            rel.sentence("b", "a"),
            "b against a: 0.83x, untested: 1 repetition a side, no spread to test, so no winner"
        );
        let rel = relate(
            Metric::P99,
            &[120.0, 121.0, 119.0],
            &[100.0, 101.0, 99.0],
            opts,
        )
        .unwrap();
        let [lo, hi] = rel.speedup_interval.unwrap();
        let thr = relate(
            Metric::ThroughputRps,
            &[100.0, 101.0, 99.0],
            &[120.0, 121.0, 119.0],
            opts,
        )
        .unwrap()
        .speedup_interval
        .unwrap();
        assert!((lo - thr[0]).abs() < 1e-12 && (hi - thr[1]).abs() < 1e-12);
        let rel = relate(Metric::Mean, &[10.0, 10.2], &[10.1, 9.9], opts).unwrap();
        assert_eq!(rel.within_noise, Some(true));
        assert!(
            rel.sentence("x", "y")
                .contains("(no difference found at 95%: Welch's t-test p = "),
            "{}",
            rel.sentence("x", "y")
        );
        // Significant but 1% apart: equal under the 2% minimum effect.
        let rel = relate(
            Metric::ThroughputRps,
            &[101.0, 101.01, 100.99],
            &[100.0, 100.01, 99.99],
            opts,
        )
        .unwrap();
        assert_eq!(
            (rel.verdict.as_str(), rel.within_noise),
            ("equal", Some(false))
        );
        assert!(
            rel.sentence("x", "y").starts_with("x is as fast as y: 1.01x [1.01, 1.01] (equal: 1.0% apart, below the 2% minimum effect; Welch's t-test p = "),
            "{}",
            rel.sentence("x", "y")
        );
    }

    #[test]
    fn no_winner_is_named_where_the_test_finds_none() {
        let opts = TestOptions::default();
        // Within noise: 1.21x apart but a spread wide enough that Welch finds nothing.
        let rel = relate(
            Metric::ThroughputRps,
            &[121.0, 60.0, 182.0],
            &[100.0, 50.0, 150.0],
            opts,
        )
        .unwrap();
        assert_eq!(rel.verdict, "within noise");
        let s = rel.sentence("reactor", "pool");
        assert!(
            s.starts_with("reactor and pool are level within noise: 1.21x ["),
            "{s}"
        );
        // One repetition a side: untested, the ratio still given.
        let rel = relate(Metric::ThroughputRps, &[1436.0], &[100.0], opts).unwrap();
        let u = rel.sentence("redis-qd16", "redis-qd1");
        assert_eq!(
            u,
            "redis-qd16 against redis-qd1: 14.36x, untested: 1 repetition a side, no spread to test, so no winner"
        );
        for text in [s, u] {
            assert!(
                !text.contains("faster") && !text.contains("slower"),
                "{text}"
            );
        }
    }
}
