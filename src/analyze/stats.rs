//! Spread of repeated measurements and the comparison verdicts of the shared-memory hash-table study's sentences.
//!
//! Two sets of repetitions are compared with Welch's t-test on their means (unequal variances,
//! Welch–Satterthwaite degrees of freedom; hyperfine's choice) at a stated confidence level
//! (default 95%), and the ratio of their means gets a confidence interval from the delta method
//! on its logarithm. A difference smaller than a minimum effect (default 2%) is "equal" however
//! significant. The Student t distribution is computed here (regularized incomplete beta by
//! its continued fraction, a few dozen lines, checked against published quantiles) rather than
//! taken from `statrs`, whose default features bring nalgebra and rand into the build for two
//! functions.

use serde::{Deserialize, Serialize};

/// Mean, spread and 95% confidence interval of repeated measurements of one figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
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

/// How two sets of repetitions are tested: the confidence level and the minimum effect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TestOptions {
    /// Confidence level of the test and of the ratio's interval (0.95: a 5% test).
    pub level: f64,
    /// Smallest relative difference of the means called a difference (0.02: 2%); below it
    /// the sides are "equal" however significant.
    pub min_effect: f64,
}

impl Default for TestOptions {
    fn default() -> TestOptions {
        TestOptions {
            level: DEFAULT_LEVEL,
            min_effect: DEFAULT_MIN_EFFECT,
        }
    }
}

/// A confidence level or minimum effect out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OptionsError {
    /// Not above 50 and below 100.
    #[error("confidence {0}%: give a level above 50 and below 100, e.g. 95")]
    Confidence(f64),
    /// Not from 0 to below 100.
    #[error("minimum effect {0}%: give a percentage of 0 or more and below 100, e.g. 2")]
    MinEffect(f64),
}

impl TestOptions {
    /// From percentages as written on the command line and in specs (`95`, `2`); an error
    /// says which is out of range.
    pub fn from_pct(confidence_pct: f64, min_effect_pct: f64) -> Result<TestOptions, OptionsError> {
        if !(confidence_pct.is_finite() && confidence_pct > 50.0 && confidence_pct < 100.0) {
            return Err(OptionsError::Confidence(confidence_pct));
        }
        if !(min_effect_pct.is_finite() && (0.0..100.0).contains(&min_effect_pct)) {
            return Err(OptionsError::MinEffect(min_effect_pct));
        }
        Ok(TestOptions {
            level: confidence_pct / 100.0,
            min_effect: min_effect_pct / 100.0,
        })
    }
}

/// Default confidence level of comparisons.
pub const DEFAULT_LEVEL: f64 = 0.95;
/// Default minimum effect of comparisons (2%).
pub const DEFAULT_MIN_EFFECT: f64 = 0.02;

/// Whether two sets of repetitions differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Welch's test finds no difference at the level: the means differ by less than the noise.
    WithinNoise,
    /// The test finds a difference, but smaller than the minimum effect.
    Equal,
    /// A's mean is higher, significantly and by at least the minimum effect.
    Higher,
    /// A's mean is lower, significantly and by at least the minimum effect.
    Lower,
    /// One side has fewer than 2 values: there is no spread to test, so no verdict.
    NoSpread,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::WithinNoise => "within noise",
            Verdict::Equal => "equal",
            Verdict::Higher => "higher",
            Verdict::Lower => "lower",
            Verdict::NoSpread => "no repetitions, no spread to test",
        })
    }
}

/// Welch's t-test of two means.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WelchTest {
    /// The t statistic: (mean A − mean B) / its standard error.
    pub t: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub df: f64,
    /// Two-sided p-value.
    pub p_value: f64,
}

/// Welch's t-test of A's mean against B's; None when a side has fewer than 2 values.
pub fn welch(a: &Summary, b: &Summary) -> Option<WelchTest> {
    if a.n < 2 || b.n < 2 {
        return None;
    }
    let (va, vb) = (a.stdev.powi(2) / a.n as f64, b.stdev.powi(2) / b.n as f64);
    let diff = a.mean - b.mean;
    let se = (va + vb).sqrt();
    if se == 0.0 {
        // No spread on either side: any difference is certain, none is none.
        let df = (a.n + b.n - 2) as f64;
        let (t, p_value) = if diff == 0.0 {
            (0.0, 1.0)
        } else {
            (diff.signum() * f64::INFINITY, 0.0)
        };
        return Some(WelchTest { t, df, p_value });
    }
    let df = satterthwaite(&[(va, a.n), (vb, b.n)]);
    let t = diff / se;
    let p_value = (2.0 * t_cdf(-t.abs(), df)).min(1.0);
    Some(WelchTest { t, df, p_value })
}

/// Welch–Satterthwaite degrees of freedom of a sum of variances of means `(var, n)`.
fn satterthwaite(parts: &[(f64, usize)]) -> f64 {
    let total: f64 = parts.iter().map(|p| p.0).sum();
    let denom: f64 = parts.iter().map(|&(v, n)| v * v / (n as f64 - 1.0)).sum();
    if denom == 0.0 {
        parts.iter().map(|p| p.1 as f64 - 1.0).sum()
    } else {
        total * total / denom
    }
}

/// Confidence interval of the ratio of means A/B at `level`, by the delta method on the log
/// of the ratio (Satterthwaite degrees of freedom), so it stays positive and is symmetric in
/// log space; None with fewer than 2 values a side or a mean that is not positive.
pub fn ratio_interval(a: &Summary, b: &Summary, level: f64) -> Option<(f64, f64)> {
    if a.n < 2 || b.n < 2 || a.mean <= 0.0 || b.mean <= 0.0 {
        return None;
    }
    // Var(ln mean) ≈ var / (n mean²): the squared CV of each mean.
    let va = (a.stdev / a.mean).powi(2) / a.n as f64;
    let vb = (b.stdev / b.mean).powi(2) / b.n as f64;
    let ln_ratio = (a.mean / b.mean).ln();
    let half =
        t_quantile(0.5 + level / 2.0, satterthwaite(&[(va, a.n), (vb, b.n)])) * (va + vb).sqrt();
    Some(((ln_ratio - half).exp(), (ln_ratio + half).exp()))
}

/// Compares repetitions `a` against `b` with Welch's t-test at `opts.level`, calling a
/// significant difference below `opts.min_effect` (relative to B's mean) equal.
pub fn verdict(a: &[f64], b: &[f64], opts: TestOptions) -> Verdict {
    match (summarize(a), summarize(b)) {
        (Some(sa), Some(sb)) => verdict_of(&sa, &sb, opts),
        _ => Verdict::NoSpread,
    }
}

fn verdict_of(a: &Summary, b: &Summary, opts: TestOptions) -> Verdict {
    let Some(test) = welch(a, b) else {
        return Verdict::NoSpread;
    };
    if test.p_value >= 1.0 - opts.level {
        Verdict::WithinNoise
    } else if b.mean == 0.0 || ((a.mean - b.mean) / b.mean).abs() < opts.min_effect {
        Verdict::Equal
    } else if a.mean > b.mean {
        Verdict::Higher
    } else {
        Verdict::Lower
    }
}

/// Two sets of repetitions compared: ratio of means with its interval, the test and verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Mean of A over mean of B (for throughput, above 1 means A is faster).
    pub ratio: f64,
    /// Confidence interval of the ratio at the test's level (None without 2 values a side).
    pub ratio_interval: Option<(f64, f64)>,
    /// Welch's t-test (None without 2 values a side).
    pub test: Option<WelchTest>,
    /// The verdict at the level and minimum effect.
    pub verdict: Verdict,
    /// The level and minimum effect used.
    pub options: TestOptions,
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
pub fn compare(a: &[f64], b: &[f64], opts: TestOptions) -> Option<Comparison> {
    let (sa, sb) = (summarize(a)?, summarize(b)?);
    (sb.mean != 0.0).then(|| Comparison {
        ratio: sa.mean / sb.mean,
        ratio_interval: ratio_interval(&sa, &sb, opts.level),
        test: welch(&sa, &sb),
        verdict: verdict_of(&sa, &sb, opts),
        options: opts,
        a: sa,
        b: sb,
    })
}

/// Cumulative distribution function of Student's t with `df` (> 0, fractional allowed)
/// degrees of freedom.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 1.0 } else { 0.0 };
    }
    // P(|T| > |t|) = I_{df/(df+t²)}(df/2, 1/2).
    let tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5);
    if t > 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// The `p` quantile of Student's t with `df` degrees of freedom (0 < p < 1), by bisection on
/// [`t_cdf`] (to 1e-10).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    let valid = p > 0.0 && p < 1.0 && df > 0.0;
    if !valid {
        return f64::NAN;
    }
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let mut hi = 1.0;
    while t_cdf(hi, df) < p {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    let mut lo = 0.0;
    while hi - lo > 1e-10 * hi.max(1.0) {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The regularized incomplete beta function I_x(a, b), by its continued fraction (Lentz's
/// method, as in Numerical Recipes' `betai`).
pub fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    // The fraction converges fast for x below (a+1)/(a+b+2); use the symmetry above it.
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(1.0 - x, b, a) / b
    }
}

fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 - qab * x / qap;
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=300 {
        let m = m as f64;
        let m2 = 2.0 * m;
        for aa in [
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ] {
            d = 1.0 + aa * d;
            if d.abs() < TINY {
                d = TINY;
            }
            c = 1.0 + aa / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            h *= d * c;
        }
        if (d * c - 1.0).abs() < 1e-15 {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEF[0];
    for (i, c) in COEF.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
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

/// The shared-memory hash-table study's sentence: "`a` is faster than `b`: 1.64x", where `ratio` is a's speed over b's
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
    fn t_distribution_matches_closed_forms_and_tables() {
        // df 1 is Cauchy: 1/2 + atan(t)/π; df 2: 1/2 + t / (2 √(2 + t²)).
        for t in [-3.0, -0.5, 0.0, 1.0, 4.0] {
            let cauchy = 0.5 + f64::atan(t) / std::f64::consts::PI;
            assert!((t_cdf(t, 1.0) - cauchy).abs() < 1e-12, "t = {t}");
            let two = 0.5 + t / (2.0 * (2.0 + t * t).sqrt());
            assert!((t_cdf(t, 2.0) - two).abs() < 1e-12, "t = {t}");
        }
        // Published quantiles (two-sided 95% and 99%, one-sided 95%).
        for (p, df, want) in [
            (0.975, 1.0, 12.706),
            (0.975, 2.0, 4.303),
            (0.975, 4.0, 2.776),
            (0.975, 10.0, 2.228),
            (0.995, 5.0, 4.032),
            (0.95, 3.0, 2.353),
            (0.975, 1000.0, 1.962),
        ] {
            let q = t_quantile(p, df);
            assert!((q - want).abs() < 0.0006, "t({p}; {df}) = {q}, not {want}");
            assert!((t_cdf(q, df) - p).abs() < 1e-9);
        }
        for df in 1..=30 {
            assert!((t_quantile(0.975, df as f64) - t_975(df)).abs() < 0.0006);
        }
        assert!((t_quantile(0.025, 3.0) + 3.182).abs() < 0.0006);
        assert!(t_quantile(1.0, 3.0).is_nan() && t_cdf(1.0, 0.0).is_nan());
    }

    #[test]
    fn welch_test_of_known_samples() {
        // Equal spreads and sizes: df = 2n − 2; t = −3/√2, p = 1 − t/√(2 + t²) for df 2.
        let (a, b) = (
            summarize(&[1.0, 3.0]).unwrap(),
            summarize(&[4.0, 6.0]).unwrap(),
        );
        let w = welch(&a, &b).unwrap();
        assert!((w.t + 3.0 / 2f64.sqrt()).abs() < 1e-12);
        assert!((w.df - 2.0).abs() < 1e-12);
        let t = 3.0 / 2f64.sqrt();
        assert!((w.p_value - (1.0 - t / (2.0 + t * t).sqrt())).abs() < 1e-12);
        // Unequal spreads: the Satterthwaite df, (v1 + v2)² / (v1²/(n1−1) + v2²/(n2−1)).
        let a = summarize(&[10.0, 12.0, 14.0]).unwrap(); // var 4, n 3
        let b = summarize(&[20.0, 30.0, 25.0, 35.0, 15.0]).unwrap(); // var 62.5, n 5
        let (va, vb) = (4.0 / 3.0, 62.5 / 5.0);
        let df = (va + vb) * (va + vb) / (va * va / 2.0 + vb * vb / 4.0);
        let w = welch(&a, &b).unwrap();
        assert!((w.df - df).abs() < 1e-9, "{w:?} vs {df}");
        assert!((w.t + 13.0 / (va + vb).sqrt()).abs() < 1e-12);
        assert!((w.p_value - 2.0 * t_cdf(w.t, df)).abs() < 1e-12);
        assert!(welch(&summarize(&[1.0]).unwrap(), &b).is_none());
        // No spread at all: a difference is certain, none is none.
        let flat = summarize(&[5.0, 5.0]).unwrap();
        assert_eq!(welch(&flat, &flat).unwrap().p_value, 1.0);
        let other = summarize(&[6.0, 6.0]).unwrap();
        assert_eq!(welch(&flat, &other).unwrap().p_value, 0.0);
    }

    #[test]
    fn ratio_interval_is_the_delta_method_on_the_log() {
        let a = summarize(&[90.0, 91.0, 89.0]).unwrap();
        let b = summarize(&[100.0, 101.0, 99.0]).unwrap();
        let (lo, hi) = ratio_interval(&a, &b, 0.95).unwrap();
        let (va, vb) = (
            (1.0 / 90.0f64).powi(2) / 3.0,
            (1.0 / 100.0f64).powi(2) / 3.0,
        );
        let df = (va + vb) * (va + vb) / (va * va / 2.0 + vb * vb / 2.0);
        let half = t_quantile(0.975, df) * (va + vb).sqrt();
        assert!((lo - 0.9 * f64::exp(-half)).abs() < 1e-12);
        assert!((hi - 0.9 * f64::exp(half)).abs() < 1e-12);
        assert!(lo < 0.9 && 0.9 < hi && hi < 1.0, "({lo}, {hi})");
        // A higher level widens it.
        let (lo99, hi99) = ratio_interval(&a, &b, 0.99).unwrap();
        assert!(lo99 < lo && hi99 > hi);
        assert!(ratio_interval(&summarize(&[90.0]).unwrap(), &b, 0.95).is_none());
    }

    #[test]
    fn verdicts() {
        let opts = TestOptions::default();
        let a = [100.0, 101.0, 99.0, 100.5];
        let b = [100.2, 99.8, 100.9, 99.5];
        let c = [110.0, 111.0, 109.5, 110.4];
        assert_eq!(verdict(&a, &b, opts), Verdict::WithinNoise);
        assert_eq!(verdict(&c, &a, opts), Verdict::Higher);
        assert_eq!(verdict(&a, &c, opts), Verdict::Lower);
        assert_eq!(verdict(&[1.0], &c, opts), Verdict::NoSpread);
        assert_eq!(verdict(&[1.0], &[2.0], opts), Verdict::NoSpread);
        // 1% apart with almost no spread: significant, but below the 2% minimum effect.
        let tight = [100.0, 100.01, 99.99];
        let one_pct = [101.0, 101.01, 100.99];
        assert_eq!(verdict(&one_pct, &tight, opts), Verdict::Equal);
        let no_minimum = TestOptions {
            min_effect: 0.0,
            ..opts
        };
        assert_eq!(verdict(&one_pct, &tight, no_minimum), Verdict::Higher);
        assert_eq!(Verdict::WithinNoise.to_string(), "within noise");
        // Overlapping 95% intervals that Welch's test still tells apart at 5%.
        let x = [100.0, 103.0, 97.0];
        let y = [92.0, 95.0, 89.0];
        let (sx, sy) = (summarize(&x).unwrap(), summarize(&y).unwrap());
        assert!(sx.ci95_low() < sy.ci95_high(), "the intervals overlap");
        assert_eq!(verdict(&x, &y, opts), Verdict::Higher);
    }

    #[test]
    fn options_from_percentages() {
        let o = TestOptions::from_pct(99.0, 5.0).unwrap();
        assert_eq!((o.level, o.min_effect), (0.99, 0.05));
        assert!(TestOptions::from_pct(100.0, 2.0)
            .unwrap_err()
            .to_string()
            .contains("confidence 100%"));
        assert!(TestOptions::from_pct(95.0, -1.0)
            .unwrap_err()
            .to_string()
            .contains("minimum effect -1%"));
    }

    #[test]
    fn comparison_and_auto_repetitions() {
        let c = compare(
            &[90.0, 91.0, 89.0],
            &[100.0, 101.0, 99.0],
            TestOptions::default(),
        )
        .unwrap();
        assert!((c.ratio - 0.9).abs() < 1e-12);
        assert_eq!(c.verdict, Verdict::Lower);
        assert!(c.test.unwrap().p_value < 0.001);
        assert!((c.slower_pct() - 10.0).abs() < 1e-9);
        assert!(compare(&[1.0], &[0.0], TestOptions::default()).is_none());
        let single = compare(&[1.0], &[2.0], TestOptions::default()).unwrap();
        assert_eq!(
            (single.verdict, single.test, single.ratio_interval),
            (Verdict::NoSpread, None, None)
        );
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

#[cfg(test)]
mod power_tests;
