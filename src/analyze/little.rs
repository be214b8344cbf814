//! Little's law per step: is the latency explained by the number of requests in flight?
//!
//! L = X·R. With L the configured in-flight count (clients × connections × depth), X the
//! throughput and R the mean latency, the ratio X·R / L is 1.0 when the law holds. Below 1,
//! fewer requests were really in flight than configured; above 1, the latency counts time the
//! in-flight count does not (queueing before the timer starts) or the figures disagree.

use serde::{Deserialize, Serialize};

/// How far (as a fraction) X·R / L may stray from 1 before the step is flagged.
pub const TOLERANCE: f64 = 0.10;

/// The unit of a latency figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum LatencyUnit {
    /// Seconds.
    S,
    /// Milliseconds.
    Ms,
    /// Microseconds.
    Us,
    /// Nanoseconds.
    Ns,
}

impl LatencyUnit {
    /// Seconds in one of this unit.
    pub fn seconds(self) -> f64 {
        match self {
            LatencyUnit::S => 1.0,
            LatencyUnit::Ms => 1e-3,
            LatencyUnit::Us => 1e-6,
            LatencyUnit::Ns => 1e-9,
        }
    }

    /// The unit's symbol, for tables.
    pub fn symbol(self) -> &'static str {
        match self {
            LatencyUnit::S => "s",
            LatencyUnit::Ms => "ms",
            LatencyUnit::Us => "µs",
            LatencyUnit::Ns => "ns",
        }
    }
}

/// Little's law checked at one step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LittleStep {
    /// The step's load level (clients, or whatever the series is plotted against).
    pub x: f64,
    /// Requests in flight L: configured (clients × connections × depth) or measured.
    pub inflight: f64,
    /// L / X: the mean latency the law predicts, in the unit of `measured_latency`.
    pub predicted_latency: f64,
    /// The measured mean latency R.
    pub measured_latency: f64,
    /// X·R / L (= measured / predicted): 1.0 when the law holds.
    pub ratio: f64,
    /// Set when the ratio is more than 10% off 1: the likely reason.
    pub flag: Option<String>,
}

/// Checks one step: `throughput_per_s` requests per second, `measured_latency` the mean latency
/// in `unit`, `inflight` the requests in flight.
pub fn check(
    x: f64,
    inflight: f64,
    throughput_per_s: f64,
    measured_latency: f64,
    unit: LatencyUnit,
) -> LittleStep {
    let predicted_latency = inflight / throughput_per_s / unit.seconds();
    let ratio = measured_latency / predicted_latency;
    LittleStep {
        x,
        inflight,
        predicted_latency,
        measured_latency,
        ratio,
        flag: flag(ratio),
    }
}

/// The reason hint for a ratio more than [`TOLERANCE`] off 1, or None when it holds.
pub fn flag(ratio: f64) -> Option<String> {
    if !ratio.is_finite() {
        return Some("not computable: zero throughput or in-flight count".to_string());
    }
    if ratio < 1.0 - TOLERANCE {
        Some(format!(
            "X·R is {:.0}% below L: fewer requests in flight than configured (a saturated \
             client, connections not all live) or the latency is not a request-weighted mean",
            (1.0 - ratio) * 100.0
        ))
    } else if ratio > 1.0 + TOLERANCE {
        Some(format!(
            "X·R is {:.0}% above L: latency includes time outside the in-flight window \
             (client-side queueing) or throughput and latency cover different intervals",
            (ratio - 1.0) * 100.0
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn law_holds_exactly() {
        // 100 in flight at 50k/s: 2 ms each.
        let step = check(10.0, 100.0, 50_000.0, 2.0, LatencyUnit::Ms);
        assert!((step.predicted_latency - 2.0).abs() < 1e-12);
        assert!((step.ratio - 1.0).abs() < 1e-12);
        assert_eq!(step.flag, None);
    }

    #[test]
    fn flags_both_directions() {
        let low = check(1.0, 100.0, 50_000.0, 1.0, LatencyUnit::Ms);
        assert!((low.ratio - 0.5).abs() < 1e-12);
        assert!(low.flag.unwrap().contains("fewer requests in flight"));
        let high = check(1.0, 100.0, 50_000.0, 2500.0, LatencyUnit::Us);
        assert!((high.ratio - 1.25).abs() < 1e-12);
        assert!(high.flag.unwrap().contains("client-side queueing"));
        assert!(check(1.0, 1.0, 0.0, 1.0, LatencyUnit::S).flag.is_some());
    }
}
