//! Change points in a series of runs: E-divisive means (Matteson & James, "A Nonparametric
//! Approach for Multiple Change Point Analysis of Multivariate Data", JASA 2014) with each
//! candidate's significance from a Student t-test of the two sides, as Hunter (Fleming et
//! al., "Hunter: Using Change Point Detection to Hunt for Performance Regressions", ICPE
//! 2023; now Apache Otava) does instead of the paper's permutation test.
//!
//! The rule: within each segment between the change points found so far, the candidate split
//! is the one that maximises the divergence Q̂ (α = 1) with at least `min_segment` points a
//! side; the candidate with the smallest Student t-test p-value of the segment's left part against its
//! right part is kept when that p is below `max_p`, and the search repeats. Then each kept
//! point is tested again against its neighbours only, and the weakest above `max_p` dropped,
//! until every one holds.

use super::stats::{self, Summary};

/// The detector's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangeOptions {
    /// A change point is kept when the t-test's two-sided p-value is below this.
    pub max_p: f64,
    /// Fewest points on either side of a split.
    pub min_segment: usize,
}

impl Default for ChangeOptions {
    /// p < 0.00005 and 3 runs a side: no false alarm over 300 synthetic A/A series of 30 runs
    /// at 1-5% noise, where Hunter's 0.001 gave 7 (the best of ~25 splits is not a random
    /// split); 10% drops are still found in 95% of the series (bench/history_rates.py).
    fn default() -> ChangeOptions {
        ChangeOptions {
            max_p: 0.00005,
            min_segment: 3,
        }
    }
}

/// One change point of a series.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangePoint {
    /// Index of the first point after the change.
    pub index: usize,
    /// The points from the previous change point (or the start) up to this one.
    pub before: Summary,
    /// The points from this one up to the next change point (or the end).
    pub after: Summary,
    /// Two-sided Student t-test p-value of `before` against `after`.
    pub p: f64,
}

impl ChangePoint {
    /// (after − before) / before, in %.
    pub fn change_pct(&self) -> f64 {
        (self.after.mean / self.before.mean - 1.0) * 100.0
    }

    /// 95% interval of the change in % (Welch, on the ratio of means); None when a mean is
    /// not positive.
    pub fn ci95_pct(&self) -> Option<[f64; 2]> {
        let (lo, hi) = stats::ratio_interval(&self.after, &self.before, 0.95)?;
        Some([(lo - 1.0) * 100.0, (hi - 1.0) * 100.0])
    }
}

/// The change points of `xs`, in order.
pub fn change_points(xs: &[f64], opts: ChangeOptions) -> Vec<ChangePoint> {
    let min = opts.min_segment.max(2);
    let mut cuts: Vec<usize> = Vec::new();
    while let Some((cut, p)) = best_candidate(xs, &cuts, min) {
        if p >= opts.max_p {
            break;
        }
        let at = cuts.partition_point(|&c| c < cut);
        cuts.insert(at, cut);
    }
    prune(xs, &mut cuts, opts.max_p);
    described(xs, &cuts)
}

/// The candidate split of every segment, with its p-value; the one with the smallest p.
fn best_candidate(xs: &[f64], cuts: &[usize], min: usize) -> Option<(usize, f64)> {
    let bounds = bounds(xs.len(), cuts);
    bounds
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (w[0], w[1]);
            let cut = a + argmax_q(&xs[a..b], min)?;
            Some((cut, p_value(&xs[a..cut], &xs[cut..b])))
        })
        .min_by(|x, y| x.1.total_cmp(&y.1))
}

/// 0, the cuts, then `n`.
fn bounds(n: usize, cuts: &[usize]) -> Vec<usize> {
    let mut b = Vec::with_capacity(cuts.len() + 2);
    b.push(0);
    b.extend_from_slice(cuts);
    b.push(n);
    b
}

/// Drops, weakest first, every cut whose p-value against its neighbouring cuts is not below
/// `max_p` (a cut found early can lose its significance once later cuts narrow its sides).
fn prune(xs: &[f64], cuts: &mut Vec<usize>, max_p: f64) {
    loop {
        let b = bounds(xs.len(), cuts);
        let weakest = (0..cuts.len())
            .map(|i| (i, p_value(&xs[b[i]..b[i + 1]], &xs[b[i + 1]..b[i + 2]])))
            .max_by(|x, y| x.1.total_cmp(&y.1));
        match weakest {
            Some((i, p)) if p >= max_p => {
                cuts.remove(i);
            }
            _ => return,
        }
    }
}

fn described(xs: &[f64], cuts: &[usize]) -> Vec<ChangePoint> {
    let b = bounds(xs.len(), cuts);
    (0..cuts.len())
        .filter_map(|i| {
            let (left, right) = (&xs[b[i]..b[i + 1]], &xs[b[i + 1]..b[i + 2]]);
            Some(ChangePoint {
                index: b[i + 1],
                before: stats::summarize(left)?,
                after: stats::summarize(right)?,
                p: p_value(left, right),
            })
        })
        .collect()
}

/// Two-sided p-value of Student's t-test (pooled variance) of two samples; 1 when either has
/// fewer than 2 values. Pooled, not Welch: a short side's variance alone is too often small
/// by chance (3 close runs beside 22 noisy ones read as a change at p < 0.001).
pub fn p_value(left: &[f64], right: &[f64]) -> f64 {
    let (Some(a), Some(b)) = (stats::summarize(left), stats::summarize(right)) else {
        return 1.0;
    };
    if a.n < 2 || b.n < 2 {
        return 1.0;
    }
    let df = (a.n + b.n - 2) as f64;
    let pooled = ((a.n - 1) as f64 * a.stdev.powi(2) + (b.n - 1) as f64 * b.stdev.powi(2)) / df;
    let se = (pooled * (1.0 / a.n as f64 + 1.0 / b.n as f64)).sqrt();
    let diff = a.mean - b.mean;
    if se == 0.0 {
        return if diff == 0.0 { 1.0 } else { 0.0 };
    }
    (2.0 * stats::t_cdf(-(diff / se).abs(), df)).min(1.0)
}

/// The split `τ` (first index of the right side) of `xs` that maximises Matteson & James'
/// Q̂(τ) = m·n/(m+n) · (2/(mn)·Σ|xᵢ−yⱼ| − C(m,2)⁻¹·Σ|xᵢ−xₖ| − C(n,2)⁻¹·Σ|yⱼ−yₖ|), with at least
/// `min` (≥ 2) points a side; None when the series is too short.
pub fn argmax_q(xs: &[f64], min: usize) -> Option<usize> {
    let n = xs.len();
    if n < 2 * min {
        return None;
    }
    let within_left = prefix_within(xs);
    let rev: Vec<f64> = xs.iter().rev().copied().collect();
    let within_right = prefix_within(&rev);
    let total = within_left[n];
    (min..=n - min)
        .map(|tau| {
            let (wl, wr) = (within_left[tau], within_right[n - tau]);
            let cross = total - wl - wr;
            let (m, k) = (tau as f64, (n - tau) as f64);
            let e = 2.0 * cross / (m * k) - 2.0 * wl / (m * (m - 1.0)) - 2.0 * wr / (k * (k - 1.0));
            (tau, m * k / (m + k) * e)
        })
        .max_by(|x, y| x.1.total_cmp(&y.1))
        .map(|(tau, _)| tau)
}

/// `out[t]`: the sum of |xᵢ − xₖ| over i < k < t.
fn prefix_within(xs: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; xs.len() + 1];
    for t in 0..xs.len() {
        let added: f64 = xs[..t].iter().map(|x| (x - xs[t]).abs()).sum();
        out[t + 1] = out[t] + added;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reproducible noise source (xorshift, Box–Muller): the tests need no crate.
    pub(crate) struct Noise(u64);

    impl Noise {
        pub(crate) fn new(seed: u64) -> Noise {
            Noise(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }
        fn uniform(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            ((self.0 >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        }
        pub(crate) fn normal(&mut self) -> f64 {
            let (u, v) = (self.uniform(), self.uniform());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
        }
    }

    fn series(seed: u64, n: usize, cv: f64, step_at: usize, step: f64) -> Vec<f64> {
        let mut noise = Noise::new(seed);
        (0..n)
            .map(|i| {
                let level = if i >= step_at {
                    1000.0 * (1.0 + step)
                } else {
                    1000.0
                };
                level * (1.0 + cv * noise.normal())
            })
            .collect()
    }

    #[test]
    fn q_is_largest_at_a_clean_step() {
        let xs = [1.0, 1.1, 0.9, 1.0, 5.0, 5.1, 4.9, 5.0];
        assert_eq!(argmax_q(&xs, 2), Some(4));
        assert_eq!(argmax_q(&xs[..3], 2), None);
    }

    /// 20 histories of 30 runs at 3% noise with a 10% drop at run 18: the change is found
    /// once, downwards, with an interval that holds -10% and excludes 0; at run 18 ± 1 in at
    /// least 19 of them (noise can make the two runs beside the step look like either side).
    #[test]
    fn a_ten_percent_drop_is_found_at_its_run_with_its_sign() {
        let mut at_its_run = 0;
        for seed in 1..=20 {
            let xs = series(seed, 30, 0.03, 18, -0.10);
            let found = change_points(&xs, ChangeOptions::default());
            assert_eq!(found.len(), 1, "seed {seed}: {found:?}");
            assert!(found[0].change_pct() < -5.0, "seed {seed}: {found:?}");
            let [lo, hi] = found[0].ci95_pct().unwrap();
            assert!(
                lo < -10.0 + 3.0 && hi > -10.0 - 3.0 && hi < 0.0,
                "{lo} {hi}"
            );
            at_its_run += usize::from(found[0].index.abs_diff(18) <= 1);
        }
        assert!(at_its_run >= 19, "{at_its_run} of 20 at run 18 ± 1");
    }

    #[test]
    fn two_changes_are_both_found() {
        let mut xs = series(7, 40, 0.02, 15, 0.10);
        for x in &mut xs[28..] {
            *x *= 0.85;
        }
        let idx: Vec<usize> = change_points(&xs, ChangeOptions::default())
            .iter()
            .map(|c| c.index)
            .collect();
        assert_eq!(idx.len(), 2, "{idx:?}");
        assert!(
            idx[0].abs_diff(15) <= 1 && idx[1].abs_diff(28) <= 1,
            "{idx:?}"
        );
    }

    #[test]
    fn a_a_histories_give_no_change_point() {
        for seed in 1..=50 {
            let xs = series(seed, 25, 0.05, usize::MAX, 0.0);
            let found = change_points(&xs, ChangeOptions::default());
            assert!(found.is_empty(), "seed {seed}: {found:?}");
        }
    }

    #[test]
    fn short_series_have_no_change_point() {
        assert!(change_points(&[1.0, 2.0, 3.0, 100.0, 100.0], ChangeOptions::default()).is_empty());
    }
}
