//! Comparisons: one step (or a set of repetitions) against another, as seed 002 reads them
//! ("alone at 1 thread is faster than one visitor at 1 thread: 1.64x"), with a noise verdict
//! from the 95% confidence intervals when there are repetitions.
//!
//! The spec's `[[comparisons]]` ([`spec`]) and `stairbench compare`, which lines up run
//! directories step by step ([`runs`]), share the metric, the selectors, the step matching and
//! the verdicts here. How a comparison is shown is `report::compare`'s.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::analyze::stats::{self, Summary, Verdict};
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
}
