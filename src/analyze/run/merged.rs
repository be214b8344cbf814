//! A load level's latency across its repetitions: the percentiles of the repetitions'
//! histograms added together, never the mean of their percentiles (the mean of three p99s is
//! not the p99 of anything), with the spread of the single repetitions' p99 beside it.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::{load_of, Histograms, LoadPoint};
use crate::record::steps::StepResult;
use crate::units;

/// Percentiles of a load level's merged histogram, in µs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MergedLatency {
    /// Requests in the merged histogram (every repetition's window).
    pub count: u64,
    /// Median, µs.
    pub p50: f64,
    /// 90th percentile, µs.
    pub p90: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p999: f64,
    /// Largest latency, µs.
    pub max: f64,
}

impl MergedLatency {
    /// From a histogram of nanoseconds.
    pub fn from_ns(h: &Histogram<u64>) -> MergedLatency {
        let us = |v: u64| v as f64 / 1e3;
        MergedLatency {
            count: h.len(),
            p50: us(h.value_at_quantile(0.5)),
            p90: us(h.value_at_quantile(0.9)),
            p99: us(h.value_at_quantile(0.99)),
            p999: us(h.value_at_quantile(0.999)),
            max: us(h.max()),
        }
    }
}

/// Lowest and highest p99 (µs) of the repetitions, with 2 or more that report one.
pub fn p99_range(reps: &[&StepResult]) -> Option<[f64; 2]> {
    let p99: Vec<f64> = reps
        .iter()
        .filter_map(|s| s.load.as_ref().map(|l| l.latency_us.p99))
        .filter(|v| v.is_finite())
        .collect();
    (p99.len() >= 2).then(|| {
        let lo = p99.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = p99.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        [lo, hi]
    })
}

/// Fills each point's `merged_latency_us` from the histograms of its repetitions (`steps` in
/// load order, as the points were made); a log that could not be decoded is a note.
pub fn merge_repetitions(
    histograms: &Histograms,
    steps: &[&StepResult],
    points: &mut [LoadPoint],
    notes: &mut Vec<String>,
) {
    for point in points.iter_mut() {
        let load = point.rate_rps.unwrap_or(point.clients as f64);
        let reps: Vec<&StepResult> = steps
            .iter()
            .copied()
            .filter(|s| load_of(s) == load)
            .collect();
        point.merged_latency_us =
            merged(histograms, &reps, notes).map(|h| MergedLatency::from_ns(&h));
    }
}

/// Every repetition's histogram added; None when one is missing (a partial merge would pass
/// for the level's latency) or unreadable.
fn merged(
    histograms: &Histograms,
    reps: &[&StepResult],
    notes: &mut Vec<String>,
) -> Option<Histogram<u64>> {
    let mut total: Option<Histogram<u64>> = None;
    for step in reps {
        let h = match histograms.get(&step.id)? {
            Ok(h) => h,
            Err(e) => {
                notes.push(e.clone());
                return None;
            }
        };
        match total.as_mut() {
            Some(t) => t.add(h).ok()?,
            None => total = Some(h.clone()),
        }
    }
    total.filter(|t| !t.is_empty())
}

impl LoadPoint {
    /// The level's p99 (µs): from the merged histogram, else the one repetition's own; None
    /// for several repetitions without histograms (their mean p99 is not a p99).
    pub fn p99_us(&self) -> Option<f64> {
        if let Some(m) = &self.merged_latency_us {
            return Some(m.p99);
        }
        let own = self.p99_latency_us.filter(|_| self.repetitions == 1)?;
        Some(own.mean)
    }

    /// The level's median (µs), likewise; falls back to nothing without a histogram.
    pub fn p50_us(&self) -> Option<f64> {
        self.merged_latency_us.map(|m| m.p50)
    }

    /// "57.1 µs", with the repetitions' spread: "57.1 µs (reps 55.0–60.2 µs)".
    pub fn p99_text(&self) -> String {
        let value = self.p99_us().map_or("–".to_string(), units::duration_us);
        match self.p99_reps_us {
            Some([lo, hi]) => format!("{value} (reps {})", units::duration_range_us(lo, hi)),
            None => value,
        }
    }
}
