//! Where a curve bends: Kneedle (Satopää et al., 2011) and the saturation and busy points.
//!
//! Throughput against clients is concave and increasing up to its maximum: the knee is where
//! adding clients stops paying. Latency against throughput is a hockey stick, but at low load it
//! may fall as load rises (CPU power states), so the latency curve is first replaced by its
//! lower envelope from the right (the least latency seen at this load or higher), which keeps
//! the rise and drops the dips.

use serde::{Deserialize, Serialize};

/// Kneedle's sensitivity S: how far the difference curve must fall after a maximum.
pub const SENSITIVITY: f64 = 1.0;
/// Throughput within this fraction of its maximum counts as saturated.
pub const SATURATION_FRACTION: f64 = 0.95;
/// Server CPU utilisation (percent) below which a step still counts as not busy.
pub const BUSY_CPU_PCT: f64 = 70.0;
/// A level below this fraction of the maximum, past it, is a fall (retrograde throughput).
pub const FALL_FRACTION: f64 = 0.9;

/// A fall's drift check: the last level gave at least [`FALL_FRACTION`] of the peak's load
/// measured again right after it (`again_rps`), so the fall is the machine's slowing through
/// the series, not the load's.
pub fn fall_was_drift(last_rps: f64, again_rps: f64) -> bool {
    last_rps >= FALL_FRACTION * again_rps
}

/// The shape Kneedle looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Rising and flattening (throughput vs clients): the knee is above the chord.
    ConcaveIncreasing,
    /// Flat then rising steeply (latency vs throughput): the knee is below the chord.
    ConvexIncreasing,
}

/// Kneedle on points sorted by x: the index of the knee, or None when the curve has no bend
/// (a straight line, fewer than 3 points, or no x or y range).
pub fn kneedle(points: &[(f64, f64)], shape: Shape) -> Option<usize> {
    if points.len() < 3 {
        return None;
    }
    let diff = difference_curve(points, shape)?;
    let xs = normalise(&points.iter().map(|p| p.0).collect::<Vec<_>>())?;
    let mean_step = (xs[xs.len() - 1] - xs[0]) / (xs.len() - 1) as f64;
    first_confirmed_maximum(&diff, SENSITIVITY * mean_step)
}

/// Kneedle's difference curve: distance of the normalised curve from the chord y = x.
fn difference_curve(points: &[(f64, f64)], shape: Shape) -> Option<Vec<f64>> {
    let xs = normalise(&points.iter().map(|p| p.0).collect::<Vec<_>>())?;
    let ys = normalise(&points.iter().map(|p| p.1).collect::<Vec<_>>())?;
    Some(
        xs.iter()
            .zip(&ys)
            .map(|(x, y)| match shape {
                Shape::ConcaveIncreasing => y - x,
                Shape::ConvexIncreasing => x - y,
            })
            .collect(),
    )
}

fn normalise(values: &[f64]) -> Option<Vec<f64>> {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = high - low;
    (range > 0.0 && range.is_finite()).then(|| values.iter().map(|v| (v - low) / range).collect())
}

/// The first local maximum of `diff` after which the curve falls below max − threshold before
/// rising above that maximum. Both curves analysed here end on the chord (difference 0), so a
/// real bend is always confirmed by the end of the data; noise on a straight line never is.
fn first_confirmed_maximum(diff: &[f64], threshold: f64) -> Option<usize> {
    let last = diff.len() - 1;
    let maxima = (1..last).filter(|&i| diff[i] >= diff[i - 1] && diff[i] > diff[i + 1]);
    for i in maxima {
        if diff[i] <= 0.0 {
            continue;
        }
        let limit = diff[i] - threshold;
        for &d in &diff[i + 1..] {
            if d > diff[i] {
                break;
            }
            if d < limit {
                return Some(i);
            }
        }
    }
    None
}

/// The knees and limits of one series.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KneeSummary {
    /// Load at the knee of throughput vs load (Kneedle on the curve up to its maximum, so at
    /// or before it); a curve that falls past its maximum without such a bend has its knee
    /// at the maximum. None when the curve has no bend and no fall.
    pub throughput_knee: Option<f64>,
    /// Load at the knee of latency vs throughput (Kneedle on the lower envelope of latency).
    pub latency_knee: Option<f64>,
    /// Highest measured throughput.
    pub max_throughput: f64,
    /// Load at which the highest throughput was measured.
    pub max_throughput_at: f64,
    /// Smallest load whose throughput is within 5% of the maximum.
    pub saturation: f64,
    /// Largest load whose server CPU was still below 70% and that is below `saturation` (a
    /// server that never reaches 70% is busiest just before it saturates); when every load
    /// below `saturation` was at 70% or more (a JVM still compiling at the first step), the
    /// least of them. None without CPU figures or when no load lies below `saturation`.
    pub busy: Option<f64>,
}

/// One step of a series: its load, throughput, and optionally mean latency and server CPU %.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Step {
    /// The load (clients).
    pub load: f64,
    /// The throughput.
    pub throughput: f64,
    /// Mean latency, any unit.
    pub latency: Option<f64>,
    /// Server CPU utilisation in percent of the CPUs it was given.
    pub server_cpu_pct: Option<f64>,
}

/// Knees, saturation and busy points of a series; None when it is empty.
pub fn summarise(steps: &[Step]) -> Option<KneeSummary> {
    let mut steps = steps.to_vec();
    steps.sort_by(|a, b| a.load.total_cmp(&b.load));
    let (max_index, max_step) = steps
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.throughput.total_cmp(&b.1.throughput))?;
    let rising: Vec<(f64, f64)> = steps[..=max_index]
        .iter()
        .map(|s| (s.load, s.throughput))
        .collect();
    let cpu: Vec<(f64, f64)> = steps
        .iter()
        .filter_map(|s| Some((s.load, s.server_cpu_pct?)))
        .collect();
    let saturation = saturation_point(
        &steps
            .iter()
            .map(|s| (s.load, s.throughput))
            .collect::<Vec<_>>(),
    )?;
    // Profiled as "busy" against "saturated": the busy level must lie below the other.
    let below: Vec<(f64, f64)> = cpu.into_iter().filter(|p| p.0 < saturation).collect();
    // A fall past the maximum is a bend however the rise before it looks (a rise of two
    // points has no Kneedle knee).
    let falls = steps[max_index + 1..]
        .iter()
        .any(|s| s.throughput < FALL_FRACTION * max_step.throughput);
    let knee = kneedle(&rising, Shape::ConcaveIncreasing).map(|i| rising[i].0);
    Some(KneeSummary {
        throughput_knee: knee.or(falls.then_some(max_step.load)),
        latency_knee: latency_knee(&steps),
        max_throughput: max_step.throughput,
        max_throughput_at: max_step.load,
        saturation,
        busy: busy_point(&below).or_else(|| least_loaded(&below)),
    })
}

/// Load at the knee of latency vs throughput, for steps sorted by load.
///
/// Throughput is made non-decreasing (past the maximum the points stack at the maximum, the
/// vertical wall of the hockey stick) and latency is replaced by its lower envelope from the
/// right, so a dip at low load is not taken for the bend.
pub fn latency_knee(steps: &[Step]) -> Option<f64> {
    let with_latency: Vec<&Step> = steps.iter().filter(|s| s.latency.is_some()).collect();
    let mut curve = Vec::with_capacity(with_latency.len());
    let mut best_throughput = f64::NEG_INFINITY;
    for s in &with_latency {
        best_throughput = best_throughput.max(s.throughput);
        curve.push((best_throughput, s.latency?));
    }
    let envelope = lower_envelope_from_right(&curve.iter().map(|p| p.1).collect::<Vec<_>>());
    for (point, low) in curve.iter_mut().zip(envelope) {
        point.1 = low;
    }
    kneedle(&curve, Shape::ConvexIncreasing).map(|i| with_latency[i].load)
}

/// Each value replaced by the least value at or after it.
pub fn lower_envelope_from_right(values: &[f64]) -> Vec<f64> {
    let mut out = values.to_vec();
    for i in (0..out.len().saturating_sub(1)).rev() {
        out[i] = out[i].min(out[i + 1]);
    }
    out
}

/// Smallest load whose throughput is within 5% of the maximum.
pub fn saturation_point(points: &[(f64, f64)]) -> Option<f64> {
    let max = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    points
        .iter()
        .filter(|p| p.1 >= SATURATION_FRACTION * max)
        .map(|p| p.0)
        .min_by(f64::total_cmp)
}

/// Largest load whose server CPU utilisation (percent) was still below 70%: the last step
/// before the first one at or above it, in order of load.
pub fn busy_point(load_cpu_pct: &[(f64, f64)]) -> Option<f64> {
    let mut sorted = load_cpu_pct.to_vec();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    sorted
        .iter()
        .take_while(|p| p.1 < BUSY_CPU_PCT)
        .last()
        .map(|p| p.0)
}

/// The least load of `load_cpu_pct`: the busy level of a series already past 70% CPU at its
/// first step, still short of its saturation.
fn least_loaded(load_cpu_pct: &[(f64, f64)]) -> Option<f64> {
    load_cpu_pct.iter().map(|p| p.0).min_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rises linearly to `knee`, then flat: the knee is known exactly.
    fn broken_line(knee: f64) -> Vec<(f64, f64)> {
        (1..=20)
            .map(|n| (n as f64, n.min(knee as i32) as f64 * 10.0))
            .collect()
    }

    #[test]
    fn drift_is_the_last_level_within_the_fall_fraction_of_the_peak_again() {
        // At the boundary (90 of 100) the fall is drift; a flipped comparison or another
        // fraction (0.85, 0.95) gives another answer on one of these.
        assert!(fall_was_drift(90.0, 100.0));
        assert!(fall_was_drift(95.0, 100.0));
        assert!(!fall_was_drift(89.0, 100.0));
        assert!(!fall_was_drift(86.0, 100.0));
        // A last level above the peak measured again is drift too (the order matters).
        assert!(fall_was_drift(120.0, 100.0));
    }

    #[test]
    fn concave_knee_of_broken_line() {
        let points = broken_line(8.0);
        let i = kneedle(&points, Shape::ConcaveIncreasing).unwrap();
        assert_eq!(points[i].0, 8.0);
    }

    #[test]
    fn noisy_straight_line_has_no_knee() {
        let wobble = [0.0, 0.2, -0.1, 0.3, -0.2, 0.1, 0.25, -0.15, 0.05, 0.0];
        let points: Vec<(f64, f64)> = (0..10)
            .map(|n| (n as f64, 3.0 * n as f64 + wobble[n]))
            .collect();
        assert_eq!(kneedle(&points, Shape::ConcaveIncreasing), None);
        assert_eq!(kneedle(&points, Shape::ConvexIncreasing), None);
    }

    #[test]
    fn straight_line_has_no_knee() {
        let points: Vec<(f64, f64)> = (1..=10).map(|n| (n as f64, 3.0 * n as f64)).collect();
        assert_eq!(kneedle(&points, Shape::ConcaveIncreasing), None);
        assert_eq!(kneedle(&points[..2], Shape::ConcaveIncreasing), None);
    }

    #[test]
    fn convex_knee_of_hockey_stick() {
        // Latency flat at 1 up to x = 10, then rising steeply.
        let points: Vec<(f64, f64)> = (1..=14)
            .map(|x| {
                (
                    x as f64,
                    if x <= 10 {
                        1.0
                    } else {
                        1.0 + 5.0 * (x - 10) as f64
                    },
                )
            })
            .collect();
        let i = kneedle(&points, Shape::ConvexIncreasing).unwrap();
        assert_eq!(points[i].0, 10.0);
    }

    #[test]
    fn latency_dip_at_low_load_is_not_the_knee() {
        // Latency first falls (power states), stays flat, then climbs past 6 clients.
        let latencies = [9.0, 4.0, 3.0, 3.0, 3.1, 3.2, 6.0, 12.0, 24.0];
        let steps: Vec<Step> = latencies
            .iter()
            .enumerate()
            .map(|(i, &lat)| Step {
                load: (i + 1) as f64,
                throughput: 100.0 * ((i + 1) as f64).min(6.5),
                latency: Some(lat),
                server_cpu_pct: None,
            })
            .collect();
        let knee = latency_knee(&steps).unwrap();
        assert!((6.0..=7.0).contains(&knee), "knee at {knee}");
    }

    #[test]
    fn envelope_drops_dips() {
        assert_eq!(
            lower_envelope_from_right(&[5.0, 2.0, 3.0, 1.0, 4.0]),
            [1.0, 1.0, 1.0, 1.0, 4.0]
        );
    }

    #[test]
    fn saturation_and_busy_points() {
        let points = [
            (1.0, 10.0),
            (2.0, 19.0),
            (4.0, 30.0),
            (8.0, 31.0),
            (16.0, 29.0),
        ];
        assert_eq!(saturation_point(&points), Some(4.0));
        let cpu = [
            (1.0, 20.0),
            (2.0, 45.0),
            (4.0, 69.9),
            (8.0, 85.0),
            (16.0, 60.0),
        ];
        assert_eq!(busy_point(&cpu), Some(4.0));
        assert_eq!(busy_point(&cpu[..3]), Some(4.0));
        assert_eq!(busy_point(&[(1.0, 90.0)]), None);
    }

    #[test]
    fn a_curve_that_falls_past_its_peak_has_its_knee_at_or_before_it() {
        // A database's shape: the peak at 4 clients, 45% of it at 64; the rise before the
        // peak is too short for Kneedle.
        let steps: Vec<Step> = [(1.0, 500.0), (2.0, 900.0), (4.0, 1000.0), (8.0, 800.0)]
            .into_iter()
            .chain([(16.0, 700.0), (32.0, 600.0), (64.0, 450.0)])
            .map(|(load, throughput)| Step {
                load,
                throughput,
                ..Step::default()
            })
            .collect();
        let k = summarise(&steps).unwrap();
        assert_eq!(k.max_throughput_at, 4.0);
        let knee = k.throughput_knee.expect("a knee");
        assert!(knee <= 4.0, "knee {knee}");
        // A dip of 5% past the peak is no fall: no knee is made up.
        let flat: Vec<Step> = [(1.0, 100.0), (2.0, 200.0), (4.0, 300.0), (8.0, 290.0)]
            .into_iter()
            .map(|(load, throughput)| Step {
                load,
                throughput,
                ..Step::default()
            })
            .collect();
        assert_eq!(summarise(&flat).unwrap().throughput_knee, None);
    }

    #[test]
    fn a_server_that_never_gets_busy_is_profiled_busy_below_its_saturation() {
        // Flat from 4 clients on while the server stays at 30% (a limit outside it): the
        // busy level is the last one before saturation, never at or above it.
        let step = |load: f64, throughput: f64| Step {
            load,
            throughput,
            latency: None,
            server_cpu_pct: Some(30.0),
        };
        let steps = [
            step(1.0, 10.0),
            step(2.0, 19.0),
            step(4.0, 30.0),
            step(8.0, 30.0),
        ];
        let knee = summarise(&steps).unwrap();
        assert_eq!(knee.saturation, 4.0);
        assert_eq!(knee.busy, Some(2.0));
        assert_eq!(summarise(&steps[2..]).unwrap().busy, None);
    }

    #[test]
    fn a_series_busy_from_its_first_step_is_profiled_busy_at_its_least_load() {
        // Tomcat on a loaded machine: 85% CPU at 1 client already (its JIT still compiling),
        // saturated from 8 clients. The busy level is the least load before saturation.
        let step = |load: f64, throughput: f64, cpu: f64| Step {
            load,
            throughput,
            latency: None,
            server_cpu_pct: Some(cpu),
        };
        let steps = [
            step(1.0, 5000.0, 85.0),
            step(2.0, 9000.0, 90.0),
            step(4.0, 14000.0, 95.0),
            step(8.0, 16000.0, 96.0),
            step(16.0, 16100.0, 96.0),
        ];
        let knee = summarise(&steps).unwrap();
        assert_eq!(knee.saturation, 8.0);
        assert_eq!(knee.busy, Some(1.0));
    }
}
