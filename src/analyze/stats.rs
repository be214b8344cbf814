//! Spread of repeated measurements and the comparison sentences of seed 002.
//!
//! Two results are only called different when their 95% confidence intervals (Student t,
//! because repetitions are few) do not overlap; otherwise the difference is "within noise".

use serde::Serialize;

/// Mean, spread and 95% confidence interval of repeated measurements of one figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator); 0 for a single value.
    pub stdev: f64,
    /// Coefficient of variation: stdev / |mean| (0 when the mean is 0).
    pub cv: f64,
    /// Half width of the 95% confidence interval of the mean (Student t); None for n < 2.
    pub ci95_half_width: Option<f64>,
}

impl Summary {
    /// Lower end of the 95% confidence interval (the mean itself when there is no interval).
    pub fn ci95_low(&self) -> f64 {
        self.mean - self.ci95_half_width.unwrap_or(0.0)
    }

    /// Upper end of the 95% confidence interval (the mean itself when there is no interval).
    pub fn ci95_high(&self) -> f64 {
        self.mean + self.ci95_half_width.unwrap_or(0.0)
    }
}

/// Summarises `values`; None when there are none or one is not finite.
pub fn summarize(values: &[f64]) -> Option<Summary> {
    if values.is_empty() || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let n = values.len();
    let mean = values.iter().sum::<f64>() / n as f64;
    let stdev = if n < 2 {
        0.0
    } else {
        let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
        (ss / (n - 1) as f64).sqrt()
    };
    let cv = if mean == 0.0 { 0.0 } else { stdev / mean.abs() };
    let ci95_half_width = (n >= 2).then(|| t_975(n - 1) * stdev / (n as f64).sqrt());
    Some(Summary {
        n,
        mean,
        stdev,
        cv,
        ci95_half_width,
    })
}

/// Two-sided 95% quantile of Student's t with `df` degrees of freedom (df ≥ 1).
pub fn t_975(df: usize) -> f64 {
    const TABLE: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042,
    ];
    match df {
        0 => f64::INFINITY,
        1..=30 => TABLE[df - 1],
        _ => {
            // Cornish–Fisher expansion around the normal quantile; exact to 3 decimals past 30.
            let z: f64 = 1.959_964;
            let d = df as f64;
            z + (z.powi(3) + z) / (4.0 * d)
                + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * d * d)
        }
    }
}

/// Whether two sets of repetitions differ beyond their noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The 95% confidence intervals overlap: no difference can be claimed.
    WithinNoise,
    /// A's interval lies entirely above B's.
    Higher,
    /// A's interval lies entirely below B's.
    Lower,
    /// One side has fewer than 2 values, so it has no interval: repeat the runs to tell.
    NoSpread,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::WithinNoise => "within noise",
            Verdict::Higher => "higher",
            Verdict::Lower => "lower",
            Verdict::NoSpread => "no repetitions, noise unknown",
        })
    }
}

/// Compares repetitions `a` against `b` by their 95% confidence intervals.
pub fn verdict(a: &[f64], b: &[f64]) -> Verdict {
    let (Some(sa), Some(sb)) = (summarize(a), summarize(b)) else {
        return Verdict::NoSpread;
    };
    if sa.ci95_half_width.is_none() || sb.ci95_half_width.is_none() {
        return Verdict::NoSpread;
    }
    if sa.ci95_low() > sb.ci95_high() {
        Verdict::Higher
    } else if sa.ci95_high() < sb.ci95_low() {
        Verdict::Lower
    } else {
        Verdict::WithinNoise
    }
}

/// Two sets of repetitions compared: ratio of means, noise verdict and both summaries.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Mean of A over mean of B (for throughput, above 1 means A is faster).
    pub ratio: f64,
    /// Whether the difference is beyond the 95% confidence intervals.
    pub verdict: Verdict,
    /// A's repetitions summarised.
    pub a: Summary,
    /// B's repetitions summarised.
    pub b: Summary,
}

impl Comparison {
    /// How much slower A is than B in percent of B, when higher is better (throughput):
    /// 0 when A is not slower; for a `--fail-if-slower PCT` gate.
    pub fn slower_pct(&self) -> f64 {
        ((1.0 - self.ratio) * 100.0).max(0.0)
    }
}

/// Compares repetitions `a` against `b`; None when either is empty or not finite, or B's mean
/// is 0.
pub fn compare(a: &[f64], b: &[f64]) -> Option<Comparison> {
    let (sa, sb) = (summarize(a)?, summarize(b)?);
    (sb.mean != 0.0).then(|| Comparison {
        ratio: sa.mean / sb.mean,
        verdict: verdict(a, b),
        a: sa,
        b: sb,
    })
}

/// `repetitions = "auto"` stops once throughput's coefficient of variation is below this.
pub const AUTO_CV_TARGET: f64 = 0.03;
/// `repetitions = "auto"` never repeats a step more than this many times.
pub const AUTO_MAX_REPETITIONS: usize = 5;

/// Whether a step measured `throughputs` so far should be repeated under
/// `repetitions = "auto"`: fewer than 2 values, or a CV of 3% or more, and fewer than 5 runs.
pub fn repeat_again(throughputs: &[f64]) -> bool {
    if throughputs.len() >= AUTO_MAX_REPETITIONS {
        return false;
    }
    match summarize(throughputs) {
        Some(s) if s.n >= 2 => s.cv >= AUTO_CV_TARGET,
        _ => true,
    }
}

/// Seed 002's sentence: "`a` is faster than `b`: 1.64x", where `ratio` is a's speed over b's
/// (throughput ratio, or b's time over a's). Below 1 it reads "is slower than".
pub fn sentence(name_a: &str, name_b: &str, ratio: f64) -> String {
    let shown = format!("{ratio:.2}");
    let relation = if shown == "1.00" {
        "is as fast as"
    } else if ratio > 1.0 {
        "is faster than"
    } else {
        "is slower than"
    };
    format!("{name_a} {relation} {name_b}: {shown}x")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        // 2, 4, 4, 4, 5, 5, 7, 9: mean 5, sample variance 32/7.
        let s = summarize(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
        assert_eq!(s.n, 8);
        assert!((s.mean - 5.0).abs() < 1e-12);
        assert!((s.stdev - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
        assert!((s.cv - s.stdev / 5.0).abs() < 1e-12);
        let half = 2.365 * s.stdev / 8f64.sqrt();
        assert!((s.ci95_half_width.unwrap() - half).abs() < 1e-12);
    }

    #[test]
    fn single_value_has_no_interval() {
        let s = summarize(&[3.0]).unwrap();
        assert_eq!(s.ci95_half_width, None);
        assert_eq!(s.stdev, 0.0);
        assert!(summarize(&[]).is_none());
        assert!(summarize(&[1.0, f64::NAN]).is_none());
    }

    #[test]
    fn t_quantile_joins_table_and_expansion() {
        // Published values: t(0.975; 40) = 2.021, 60 → 2.000, 120 → 1.980.
        assert!((t_975(40) - 2.021).abs() < 0.001);
        assert!((t_975(60) - 2.000).abs() < 0.001);
        assert!((t_975(120) - 1.980).abs() < 0.001);
        assert!(t_975(31) < t_975(30) && t_975(31) > 2.03);
    }

    #[test]
    fn verdicts() {
        let a = [100.0, 101.0, 99.0, 100.5];
        let b = [100.2, 99.8, 100.9, 99.5];
        let c = [110.0, 111.0, 109.5, 110.4];
        assert_eq!(verdict(&a, &b), Verdict::WithinNoise);
        assert_eq!(verdict(&c, &a), Verdict::Higher);
        assert_eq!(verdict(&a, &c), Verdict::Lower);
        assert_eq!(verdict(&[1.0], &c), Verdict::NoSpread);
        assert_eq!(Verdict::WithinNoise.to_string(), "within noise");
    }

    #[test]
    fn comparison_and_auto_repetitions() {
        let c = compare(&[90.0, 91.0, 89.0], &[100.0, 101.0, 99.0]).unwrap();
        assert!((c.ratio - 0.9).abs() < 1e-12);
        assert_eq!(c.verdict, Verdict::Lower);
        assert!((c.slower_pct() - 10.0).abs() < 1e-9);
        assert!(compare(&[1.0], &[0.0]).is_none());
        assert!(repeat_again(&[100.0]));
        assert!(repeat_again(&[100.0, 110.0]));
        assert!(!repeat_again(&[100.0, 101.0]));
        assert!(!repeat_again(&[100.0, 150.0, 50.0, 120.0, 80.0]));
    }

    #[test]
    fn sentences_in_seed_002_form() {
        assert_eq!(
            sentence("alone at 1 thread", "one visitor at 1 thread", 1.6412),
            "alone at 1 thread is faster than one visitor at 1 thread: 1.64x"
        );
        assert_eq!(
            sentence("alone at 16 threads", "alone at 1 thread", 0.891),
            "alone at 16 threads is slower than alone at 1 thread: 0.89x"
        );
        assert_eq!(sentence("a", "b", 1.001), "a is as fast as b: 1.00x");
    }
}
