//! Latency populations: is a step's latency one population or two?
//!
//! The benchkv study reads a bimodal RTT histogram by eye (a fast population at 4–8 µs, a slow one at
//! 11–16 µs). Here a valley between two peaks of the lightly smoothed histogram is the evidence
//! of two populations, and a two-component log-normal mixture fitted by EM (latencies are
//! positive and skewed, so log space) gives their shares; each bucket then belongs to the
//! population more likely to have produced it.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A valley must be at most this fraction of the smaller of the two peaks around it.
pub const VALLEY_DEPTH: f64 = 0.8;
/// Each population must hold at least this share of the requests.
pub const MIN_SHARE: f64 = 0.05;
/// Ashman's D the two fitted components must reach: √2·|μ₁−μ₂| / √(σ₁²+σ₂²) ≥ 2 is the usual
/// threshold for a clean separation.
pub const MIN_SEPARATION: f64 = 2.0;
/// Buckets a recorded histogram is re-binned into before looking for peaks.
pub const HISTOGRAM_BUCKETS: u64 = 100;

/// One latency population.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mode {
    /// Share of all requests in this population (0–1).
    pub share: f64,
    /// Value of the population's tallest bucket (its peak), in the histogram's unit.
    pub centre: f64,
    /// Mean value of the population, in the histogram's unit.
    pub mean: f64,
    /// Smallest bucket value assigned to this population.
    pub low: f64,
    /// Largest bucket value assigned to this population.
    pub high: f64,
}

/// The populations of a histogram given as (value, count) buckets of equal width, fastest
/// first: one mode, two, or none for an empty histogram.
pub fn detect(buckets: &[(f64, u64)]) -> Vec<Mode> {
    // Empty buckets inside the range stay: they are the valleys.
    let mut buckets: Vec<(f64, u64)> = buckets
        .iter()
        .copied()
        .filter(|b| b.0.is_finite())
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let first = buckets.iter().position(|b| b.1 > 0);
    let last = buckets.iter().rposition(|b| b.1 > 0);
    let (Some(first), Some(last)) = (first, last) else {
        return Vec::new();
    };
    let buckets = &buckets[first..=last];
    let Some(split) = valley_split(buckets) else {
        return vec![single_mode(buckets)];
    };
    let mixture = Mixture::fit(buckets, split);
    let modes = mixture.modes(buckets);
    let separated = mixture.separation() >= MIN_SEPARATION;
    if !separated || modes.len() < 2 || modes.iter().any(|m| m.share < MIN_SHARE) {
        return vec![single_mode(buckets)];
    }
    modes
}

/// The populations of a recorded histogram (values in its own unit), re-binned into
/// [`HISTOGRAM_BUCKETS`] equal buckets from its minimum to its 99.9th percentile.
pub fn from_histogram(histogram: &Histogram<u64>) -> Vec<Mode> {
    if histogram.is_empty() {
        return Vec::new();
    }
    let low = histogram.min();
    let high = histogram.value_at_quantile(0.999).max(low + 1);
    let width = ((high - low) / HISTOGRAM_BUCKETS).max(1);
    let mut buckets = vec![0u64; ((high - low) / width + 1) as usize];
    for item in histogram.iter_recorded() {
        let value = item.value_iterated_to();
        if value <= high {
            let index = ((value.saturating_sub(low)) / width) as usize;
            let last = buckets.len() - 1;
            buckets[index.min(last)] += item.count_at_value();
        }
    }
    let pairs: Vec<(f64, u64)> = buckets
        .iter()
        .enumerate()
        .map(|(i, &count)| ((low + i as u64 * width) as f64 + width as f64 / 2.0, count))
        .collect();
    detect(&pairs)
}

fn single_mode(buckets: &[(f64, u64)]) -> Mode {
    let weights: Vec<f64> = vec![1.0; buckets.len()];
    population(buckets, &weights, 1.0)
}

/// The index of the deepest valley between the tallest peak and another real peak, if any.
fn valley_split(buckets: &[(f64, u64)]) -> Option<usize> {
    let smooth = smoothed(buckets);
    let total: f64 = buckets.iter().map(|b| b.1 as f64).sum();
    let top = (0..smooth.len()).max_by(|&a, &b| smooth[a].total_cmp(&smooth[b]))?;
    let peaks = (0..smooth.len()).filter(|&i| i != top && is_peak(&smooth, i));
    let mut best: Option<(f64, usize)> = None;
    for peak in peaks {
        let valley = valley_between(&smooth, peak.min(top), peak.max(top));
        let depth = smooth[valley] / smooth[peak].min(smooth[top]);
        let side: f64 = if peak < top {
            buckets[..valley].iter().map(|b| b.1 as f64).sum()
        } else {
            buckets[valley + 1..].iter().map(|b| b.1 as f64).sum()
        };
        if depth <= VALLEY_DEPTH && side >= MIN_SHARE * total && best.is_none_or(|b| depth < b.0) {
            best = Some((depth, valley));
        }
    }
    best.map(|b| b.1)
}

/// The lowest point between two indices; the middle one of a flat run of lowest points.
fn valley_between(values: &[f64], from: usize, to: usize) -> usize {
    let low = values[from..=to]
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min);
    let lows: Vec<usize> = (from..=to).filter(|&i| values[i] == low).collect();
    lows[lows.len() / 2]
}

fn is_peak(values: &[f64], i: usize) -> bool {
    let left = i == 0 || values[i] > values[i - 1];
    let right = i + 1 == values.len() || values[i] >= values[i + 1];
    left && right
}

/// Three-bucket moving average, so one noisy bucket is not a peak.
fn smoothed(buckets: &[(f64, u64)]) -> Vec<f64> {
    let counts: Vec<f64> = buckets.iter().map(|b| b.1 as f64).collect();
    (0..counts.len())
        .map(|i| {
            let window = &counts[i.saturating_sub(1)..(i + 2).min(counts.len())];
            window.iter().sum::<f64>() / window.len() as f64
        })
        .collect()
}

/// A two-component Gaussian mixture over log(value) (or value when some are ≤ 0).
struct Mixture {
    weight: [f64; 2],
    mean: [f64; 2],
    sd: [f64; 2],
    log: bool,
}

impl Mixture {
    /// EM from the split at bucket `split`: below it the fast component, above it the slow.
    fn fit(buckets: &[(f64, u64)], split: usize) -> Mixture {
        let log = buckets.iter().all(|b| b.0 > 0.0);
        let xs: Vec<f64> = buckets
            .iter()
            .map(|b| if log { b.0.ln() } else { b.0 })
            .collect();
        let counts: Vec<f64> = buckets.iter().map(|b| b.1 as f64).collect();
        let floor = sd_floor(&xs);
        let fast: Vec<f64> = (0..xs.len())
            .map(|i| if i < split { 1.0 } else { 0.0 })
            .collect();
        let mut mixture = Mixture {
            weight: [0.5; 2],
            mean: [0.0; 2],
            sd: [floor; 2],
            log,
        };
        mixture.maximise(&xs, &counts, &fast, floor);
        for _ in 0..500 {
            let fast = mixture.responsibilities(&xs);
            let before = mixture.weight[0];
            mixture.maximise(&xs, &counts, &fast, floor);
            if (mixture.weight[0] - before).abs() < 1e-10 {
                break;
            }
        }
        mixture
    }

    /// Ashman's D between the two components.
    fn separation(&self) -> f64 {
        let spread = (self.sd[0].powi(2) + self.sd[1].powi(2)).sqrt();
        std::f64::consts::SQRT_2 * (self.mean[0] - self.mean[1]).abs() / spread
    }

    /// Probability that each point belongs to the fast component.
    fn responsibilities(&self, xs: &[f64]) -> Vec<f64> {
        xs.iter()
            .map(|&x| {
                let p = [0, 1].map(|j| {
                    let z = (x - self.mean[j]) / self.sd[j];
                    self.weight[j] * (-0.5 * z * z).exp() / self.sd[j]
                });
                if p[0] + p[1] > 0.0 {
                    p[0] / (p[0] + p[1])
                } else {
                    f64::from(u8::from(
                        (x - self.mean[0]).abs() < (x - self.mean[1]).abs(),
                    ))
                }
            })
            .collect()
    }

    fn maximise(&mut self, xs: &[f64], counts: &[f64], fast: &[f64], floor: f64) {
        let total: f64 = counts.iter().sum();
        for j in 0..2 {
            let r: Vec<f64> = fast
                .iter()
                .zip(counts)
                .map(|(&f, &c)| c * if j == 0 { f } else { 1.0 - f })
                .collect();
            let n: f64 = r.iter().sum();
            if n <= 0.0 {
                self.weight[j] = 0.0;
                continue;
            }
            let mean = r.iter().zip(xs).map(|(w, x)| w * x).sum::<f64>() / n;
            let var = r
                .iter()
                .zip(xs)
                .map(|(w, x)| w * (x - mean).powi(2))
                .sum::<f64>()
                / n;
            self.weight[j] = n / total;
            self.mean[j] = mean;
            self.sd[j] = var.sqrt().max(floor);
        }
    }

    fn modes(&self, buckets: &[(f64, u64)]) -> Vec<Mode> {
        if self.weight.contains(&0.0) {
            return Vec::new();
        }
        let xs: Vec<f64> = buckets
            .iter()
            .map(|b| if self.log { b.0.ln() } else { b.0 })
            .collect();
        let fast = self.responsibilities(&xs);
        let slow: Vec<f64> = fast.iter().map(|f| 1.0 - f).collect();
        let mut modes = vec![
            population(buckets, &fast, self.weight[0]),
            population(buckets, &slow, self.weight[1]),
        ];
        modes.sort_by(|a, b| a.centre.total_cmp(&b.centre));
        modes
    }
}

/// Half the median gap between neighbouring buckets: a component narrower than a bucket is
/// an artefact of binning.
fn sd_floor(xs: &[f64]) -> f64 {
    let mut gaps: Vec<f64> = xs
        .windows(2)
        .map(|w| w[1] - w[0])
        .filter(|g| *g > 0.0)
        .collect();
    gaps.sort_by(f64::total_cmp);
    gaps.get(gaps.len() / 2).map_or(1e-9, |g| g / 2.0)
}

/// Summary of a population whose membership of each bucket is `weights` (0–1).
fn population(buckets: &[(f64, u64)], weights: &[f64], share: f64) -> Mode {
    let mass: Vec<f64> = buckets
        .iter()
        .zip(weights)
        .map(|(b, w)| b.1 as f64 * w)
        .collect();
    let total: f64 = mass.iter().sum();
    let mean = buckets.iter().zip(&mass).map(|(b, m)| b.0 * m).sum::<f64>() / total;
    let peak = (0..buckets.len())
        .max_by(|&a, &b| mass[a].total_cmp(&mass[b]))
        .unwrap_or(0);
    let members: Vec<f64> = buckets
        .iter()
        .zip(weights)
        .filter(|(b, &w)| w >= 0.5 && b.1 > 0)
        .map(|(b, _)| b.0)
        .collect();
    Mode {
        share,
        centre: buckets[peak].0,
        mean,
        low: members.first().copied().unwrap_or(buckets[peak].0),
        high: members.last().copied().unwrap_or(buckets[peak].0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaussian(centre: f64, sd: f64, total: f64) -> impl Fn(f64) -> f64 {
        move |x| {
            total * (-0.5 * ((x - centre) / sd).powi(2)).exp()
                / (sd * (2.0 * std::f64::consts::PI).sqrt())
        }
    }

    #[test]
    fn unimodal_is_one_mode() {
        let g = gaussian(50.0, 8.0, 1e6);
        let buckets: Vec<(f64, u64)> = (1..100).map(|x| (x as f64, g(x as f64) as u64)).collect();
        let modes = detect(&buckets);
        assert_eq!(modes.len(), 1, "{modes:?}");
        assert!((modes[0].share - 1.0).abs() < 1e-12);
        assert_eq!(modes[0].centre, 50.0);
        assert!((modes[0].mean - 50.0).abs() < 0.1);
    }

    #[test]
    fn two_known_populations() {
        let fast = gaussian(20.0, 3.0, 3e5);
        let slow = gaussian(60.0, 6.0, 7e5);
        let buckets: Vec<(f64, u64)> = (1..100)
            .map(|x| (x as f64, (fast(x as f64) + slow(x as f64)) as u64))
            .collect();
        let modes = detect(&buckets);
        assert_eq!(modes.len(), 2, "{modes:?}");
        assert!((modes[0].share - 0.3).abs() < 0.02, "{modes:?}");
        assert_eq!(modes[0].centre, 20.0);
        assert_eq!(modes[1].centre, 60.0);
        assert!(modes[0].high < modes[1].low);
    }

    #[test]
    fn empty_and_tiny_inputs() {
        assert!(detect(&[]).is_empty());
        assert!(detect(&[(1.0, 0)]).is_empty());
        assert_eq!(detect(&[(3.0, 5)]).len(), 1);
    }

    #[test]
    fn recorded_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
        h.record_n(100, 2_000).unwrap();
        h.record_n(110, 4_000).unwrap();
        h.record_n(120, 2_000).unwrap();
        h.record_n(400, 5_000).unwrap();
        h.record_n(420, 9_000).unwrap();
        h.record_n(440, 5_000).unwrap();
        let modes = from_histogram(&h);
        assert_eq!(modes.len(), 2, "{modes:?}");
        assert!((modes[0].share - 8.0 / 27.0).abs() < 0.02, "{modes:?}");
        assert!((modes[1].centre - 420.0).abs() < 10.0, "{modes:?}");
    }
}
