//! The Universal Scalability Law: X(N) = λN / (1 + σ(N−1) + κN(N−1)).
//!
//! σ (contention) is the share of work that serialises; κ (coherency) is the cost of keeping
//! shared state consistent, which makes throughput fall past N* = √((1−σ)/κ). The fit is
//! unweighted least squares on throughput with σ, κ ≥ 0, as the USL tools do. A coarse grid over
//! (σ, κ) with λ solved exactly for each cell finds the basin; projected Levenberg–Marquardt on
//! all three parameters then polishes it.
//!
//! A fit names a term as the limit only where that term bites within twice the largest load
//! measured ([`UslFit::reading`]); further out the fitted curve is an extrapolation, not a
//! finding, however good its R² over the measured range.

use serde::{Deserialize, Serialize};

/// Fewest points a fit is attempted on: three parameters need at least one point to spare.
pub const MIN_POINTS: usize = 4;

/// A fitted Universal Scalability Law curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UslFit {
    /// λ: throughput of one client with no contention (the slope at N = 0), in throughput units.
    pub lambda: f64,
    /// σ: contention, the serial share of the work (≥ 0).
    pub sigma: f64,
    /// κ: coherency, the pairwise cross-talk penalty (≥ 0).
    pub kappa: f64,
    /// N* = √((1−σ)/κ): the load of peak throughput; None when κ = 0 or σ ≥ 1 (no peak).
    pub n_star: Option<f64>,
    /// X(N*): the peak throughput; with κ = 0 the asymptote λ/σ; None when unbounded.
    pub x_max: Option<f64>,
    /// Coefficient of determination of the fit on the measured throughput (1 is perfect).
    pub r2: f64,
    /// Which term costs most at the largest measured N: "contention", "coherency", or "none"
    /// when together they lose less than 5% against linear scaling there.
    pub dominant: String,
    /// The largest load among the fitted points (clients).
    pub largest_n: f64,
}

/// How far past the largest measured load a term's onset may lie and still be read as a
/// finding: twice it.
pub const MAX_EXTRAPOLATION: f64 = 2.0;

/// A term of the USL's denominator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UslTerm {
    /// σ: the serial share of the work.
    Contention,
    /// κ: the pairwise cross-talk penalty.
    Coherency,
}

impl UslTerm {
    /// The term's name in sentences: "contention", "coherency".
    pub fn name(self) -> &'static str {
        match self {
            UslTerm::Contention => "contention",
            UslTerm::Coherency => "coherency",
        }
    }
}

/// What a fit says about the series' limit: the one reading every sentence, table, chart and
/// diagnosis rule uses.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum UslReading {
    /// Neither term costs 5% against linear scaling at the largest load measured.
    Linear,
    /// `term` limits throughput: its onset lies within twice the largest load measured.
    Limit {
        /// The term that costs most at the largest load measured.
        term: UslTerm,
        /// The term's onset (clients), see [`UslFit::onset`].
        onset_n: f64,
    },
    /// The term the fit would name bites only past twice the largest load measured: an
    /// extrapolation, not a finding.
    Extrapolation {
        /// The term that costs most at the largest load measured.
        term: UslTerm,
        /// The term's onset (clients), see [`UslFit::onset`]; infinite when the term is 0.
        onset_n: f64,
        /// The largest load measured (clients).
        largest_n: f64,
    },
}

impl UslFit {
    /// The fitted throughput at load `n`.
    pub fn throughput(&self, n: f64) -> f64 {
        model(self.lambda, self.sigma, self.kappa, n)
    }

    /// The load at which `term` bites: coherency at the peak N* = √((1−σ)/κ); contention at
    /// 1/σ, where its ceiling λ/σ meets linear scaling λN. None when the term is 0 (or σ ≥ 1
    /// leaves no peak).
    pub fn onset(&self, term: UslTerm) -> Option<f64> {
        match term {
            UslTerm::Coherency => self.n_star,
            UslTerm::Contention => (self.sigma > 0.0).then(|| 1.0 / self.sigma),
        }
    }

    /// Whether the fit may name `term` as limiting: its onset lies within
    /// [`MAX_EXTRAPOLATION`] times the largest load measured.
    pub fn names(&self, term: UslTerm) -> bool {
        self.onset(term)
            .is_some_and(|n| n <= MAX_EXTRAPOLATION * self.largest_n)
    }

    /// What the fit says about the limit: the dominant term when [`UslFit::names`] it, else
    /// an extrapolation; `Linear` when no term costs 5% at the largest load.
    pub fn reading(&self) -> UslReading {
        let term = match self.dominant.as_str() {
            "contention" => UslTerm::Contention,
            "coherency" => UslTerm::Coherency,
            _ => return UslReading::Linear,
        };
        let onset_n = self.onset(term).unwrap_or(f64::INFINITY);
        if self.names(term) {
            UslReading::Limit { term, onset_n }
        } else {
            UslReading::Extrapolation {
                term,
                onset_n,
                largest_n: self.largest_n,
            }
        }
    }
}

/// Why a fit could not be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum UslError {
    /// Too few points.
    #[error("the USL needs at least {MIN_POINTS} points (λ, σ, κ and one to spare); this series has {found}")]
    TooFewPoints {
        /// Points given.
        found: usize,
    },
    /// A load or throughput that cannot be fitted.
    #[error("point {index} (N = {n}, X = {x}) is not usable: N must be > 0 and X finite and ≥ 0")]
    BadPoint {
        /// Index of the point in the input.
        index: usize,
        /// Its load.
        n: f64,
        /// Its throughput.
        x: f64,
    },
    /// Every throughput is zero.
    #[error("every throughput is zero: nothing to fit")]
    AllZero,
    /// Fewer than 3 distinct loads.
    #[error("the points have only {distinct} distinct loads; the USL needs at least 3")]
    TooFewLoads {
        /// Distinct N values.
        distinct: usize,
    },
}

/// X(N) for the given parameters.
pub fn model(lambda: f64, sigma: f64, kappa: f64, n: f64) -> f64 {
    lambda * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
}

/// Fits the USL to (N, X) points.
pub fn fit(points: &[(f64, f64)]) -> Result<UslFit, UslError> {
    validate(points)?;
    let (sigma0, kappa0) = grid_start(points);
    let lambda0 = best_lambda(points, sigma0, kappa0);
    let [lambda, sigma, kappa] = levenberg_marquardt(points, [lambda0, sigma0, kappa0]);
    Ok(summarise(points, lambda, sigma, kappa))
}

fn validate(points: &[(f64, f64)]) -> Result<(), UslError> {
    if points.len() < MIN_POINTS {
        return Err(UslError::TooFewPoints {
            found: points.len(),
        });
    }
    for (index, &(n, x)) in points.iter().enumerate() {
        if !(n.is_finite() && n > 0.0 && x.is_finite() && x >= 0.0) {
            return Err(UslError::BadPoint { index, n, x });
        }
    }
    if points.iter().all(|&(_, x)| x == 0.0) {
        return Err(UslError::AllZero);
    }
    let mut loads: Vec<f64> = points.iter().map(|p| p.0).collect();
    loads.sort_by(f64::total_cmp);
    loads.dedup();
    if loads.len() < 3 {
        return Err(UslError::TooFewLoads {
            distinct: loads.len(),
        });
    }
    Ok(())
}

/// The least-squares λ for fixed σ, κ: X is linear in λ.
pub fn best_lambda(points: &[(f64, f64)], sigma: f64, kappa: f64) -> f64 {
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), &(n, x)| {
        let g = model(1.0, sigma, kappa, n);
        (num + x * g, den + g * g)
    });
    num / den
}

/// Sum of squared residuals.
pub fn sse(points: &[(f64, f64)], lambda: f64, sigma: f64, kappa: f64) -> f64 {
    points
        .iter()
        .map(|&(n, x)| (x - model(lambda, sigma, kappa, n)).powi(2))
        .sum()
}

/// Best (σ, κ) on a log-spaced grid including 0, λ exact per cell.
fn grid_start(points: &[(f64, f64)]) -> (f64, f64) {
    let sigmas = log_grid(1e-5, 2.0, 40);
    let kappas = log_grid(1e-8, 1.0, 50);
    let mut best = (f64::INFINITY, 0.0, 0.0);
    for &s in &sigmas {
        for &k in &kappas {
            let err = sse(points, best_lambda(points, s, k), s, k);
            if err < best.0 {
                best = (err, s, k);
            }
        }
    }
    (best.1, best.2)
}

fn log_grid(low: f64, high: f64, steps: usize) -> Vec<f64> {
    let ratio = (high / low).ln() / (steps - 1) as f64;
    std::iter::once(0.0)
        .chain((0..steps).map(|i| low * (ratio * i as f64).exp()))
        .collect()
}

/// Levenberg–Marquardt with Marquardt's diagonal scaling; σ and κ are projected onto ≥ 0.
fn levenberg_marquardt(points: &[(f64, f64)], start: [f64; 3]) -> [f64; 3] {
    let mut p = start;
    let mut err = sse(points, p[0], p[1], p[2]);
    let mut damping = 1e-3;
    for _ in 0..500 {
        let (mut jtj, mut jtr) = normal_equations(points, p);
        hold_active_bounds(&mut jtj, &mut jtr, p);
        let mut improved = false;
        while damping < 1e12 {
            let mut a = jtj;
            for i in 0..3 {
                a[i][i] += damping * jtj[i][i].max(1e-300);
            }
            let Some(step) = solve3(a, jtr) else {
                damping *= 10.0;
                continue;
            };
            let trial = [
                p[0] + step[0],
                (p[1] + step[1]).max(0.0),
                (p[2] + step[2]).max(0.0),
            ];
            let trial_err = sse(points, trial[0], trial[1], trial[2]);
            if trial_err < err {
                let gain = (err - trial_err) / err.max(1e-300);
                p = trial;
                err = trial_err;
                damping = (damping / 10.0).max(1e-12);
                improved = gain > 1e-15;
                break;
            }
            damping *= 10.0;
        }
        if !improved {
            break;
        }
    }
    p
}

/// Freezes σ or κ while it sits on its bound of 0 and the descent direction points below it,
/// so the remaining parameters still converge instead of every clamped step being rejected.
fn hold_active_bounds(jtj: &mut [[f64; 3]; 3], jtr: &mut [f64; 3], p: [f64; 3]) {
    for i in 1..3 {
        if p[i] == 0.0 && jtr[i] <= 0.0 {
            jtj[i] = [0.0; 3];
            for row in jtj.iter_mut() {
                row[i] = 0.0;
            }
            jtj[i][i] = 1.0;
            jtr[i] = 0.0;
        }
    }
}

/// JᵀJ and Jᵀr for residuals r = X − X̂ at parameters p.
fn normal_equations(points: &[(f64, f64)], p: [f64; 3]) -> ([[f64; 3]; 3], [f64; 3]) {
    let [lambda, sigma, kappa] = p;
    let mut jtj = [[0.0; 3]; 3];
    let mut jtr = [0.0; 3];
    for &(n, x) in points {
        let d = 1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0);
        let fitted = lambda * n / d;
        let grad = [
            n / d,
            -lambda * n * (n - 1.0) / (d * d),
            -lambda * n * n * (n - 1.0) / (d * d),
        ];
        for i in 0..3 {
            jtr[i] += grad[i] * (x - fitted);
            for j in 0..3 {
                jtj[i][j] += grad[i] * grad[j];
            }
        }
    }
    (jtj, jtr)
}

/// Solves a 3×3 system by Gaussian elimination with partial pivoting.
fn solve3(mut a: [[f64; 3]; 3], mut b: [f64; 3]) -> Option<[f64; 3]> {
    for col in 0..3 {
        let pivot = (col..3).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..3 {
            let factor = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (cell, above) in a[row].iter_mut().zip(pivot_row).skip(col) {
                *cell -= factor * above;
            }
            b[row] -= factor * b[col];
        }
    }
    let mut x = [0.0; 3];
    for row in (0..3).rev() {
        let tail: f64 = (row + 1..3).map(|k| a[row][k] * x[k]).sum();
        x[row] = (b[row] - tail) / a[row][row];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

fn summarise(points: &[(f64, f64)], lambda: f64, sigma: f64, kappa: f64) -> UslFit {
    let n_star = (kappa > 0.0 && sigma < 1.0).then(|| ((1.0 - sigma) / kappa).sqrt());
    let x_max = match n_star {
        Some(n) => Some(model(lambda, sigma, kappa, n)),
        None if kappa == 0.0 && sigma > 0.0 => Some(lambda / sigma),
        None => None,
    };
    UslFit {
        lambda,
        sigma,
        kappa,
        n_star,
        x_max,
        r2: r_squared(points, lambda, sigma, kappa),
        dominant: dominant(points, sigma, kappa).to_string(),
        largest_n: largest_n(points),
    }
}

fn r_squared(points: &[(f64, f64)], lambda: f64, sigma: f64, kappa: f64) -> f64 {
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let total: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
    if total == 0.0 {
        return 1.0;
    }
    1.0 - sse(points, lambda, sigma, kappa) / total
}

fn largest_n(points: &[(f64, f64)]) -> f64 {
    points.iter().map(|p| p.0).fold(f64::MIN, f64::max)
}

fn dominant(points: &[(f64, f64)], sigma: f64, kappa: f64) -> &'static str {
    let n = largest_n(points);
    let contention = sigma * (n - 1.0);
    let coherency = kappa * n * (n - 1.0);
    if contention + coherency < 0.05 {
        "none"
    } else if contention >= coherency {
        "contention"
    } else {
        "coherency"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(lambda: f64, sigma: f64, kappa: f64) -> Vec<(f64, f64)> {
        [1.0, 2.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0]
            .iter()
            .map(|&n| (n, model(lambda, sigma, kappa, n)))
            .collect()
    }

    #[test]
    fn recovers_exact_parameters() {
        let fit = fit(&synthetic(1000.0, 0.01, 0.001)).unwrap();
        assert!((fit.lambda - 1000.0).abs() < 1e-3, "{fit:?}");
        assert!((fit.sigma - 0.01).abs() < 1e-6, "{fit:?}");
        assert!((fit.kappa - 0.001).abs() < 1e-8, "{fit:?}");
        assert!(fit.r2 > 0.999_999);
        let n_star = ((1.0 - 0.01) / 0.001f64).sqrt();
        assert!((fit.n_star.unwrap() - n_star).abs() < 1e-3);
        assert_eq!(fit.dominant, "coherency");
    }

    #[test]
    fn pure_contention_has_no_peak() {
        let fit = fit(&synthetic(50.0, 0.1, 0.0)).unwrap();
        assert!(fit.kappa < 1e-9, "{fit:?}");
        assert!((fit.sigma - 0.1).abs() < 1e-6);
        assert_eq!(fit.dominant, "contention");
        if fit.kappa == 0.0 {
            assert_eq!(fit.n_star, None);
            assert!((fit.x_max.unwrap() - 500.0).abs() < 1e-3);
        }
    }

    #[test]
    fn linear_scaling_is_none() {
        let fit = fit(&synthetic(10.0, 0.0, 0.0)).unwrap();
        assert_eq!(fit.dominant, "none");
        assert_eq!(fit.x_max, None);
    }

    #[test]
    fn refuses_too_few_points() {
        let err = fit(&[(1.0, 1.0), (2.0, 2.0), (4.0, 3.0)]).unwrap_err();
        assert_eq!(err, UslError::TooFewPoints { found: 3 });
        assert!(err.to_string().contains("at least 4 points"));
        let err = fit(&[(1.0, 1.0), (1.0, 2.0), (2.0, 3.0), (2.0, 3.0)]).unwrap_err();
        assert!(matches!(err, UslError::TooFewLoads { distinct: 2 }));
        let err = fit(&[(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 3.0)]).unwrap_err();
        assert!(matches!(err, UslError::BadPoint { index: 0, .. }));
    }

    #[test]
    fn solve3_solves() {
        let a = [[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 4.0]];
        let x = solve3(a, [3.0, 5.0, 5.0]).unwrap();
        for (v, want) in x.iter().zip([1.0, 1.0, 1.0]) {
            assert!((v - want).abs() < 1e-12);
        }
    }

    /// Doubling client counts from 1 to `largest`, exactly on the model.
    fn doubling(lambda: f64, sigma: f64, kappa: f64, largest: f64) -> Vec<(f64, f64)> {
        std::iter::successors(Some(1.0), |n| Some(n * 2.0))
            .take_while(|&n| n <= largest)
            .map(|n| (n, model(lambda, sigma, kappa, n)))
            .collect()
    }

    #[test]
    fn a_peak_far_past_the_largest_level_is_an_extrapolation() {
        // Issue 40's series: R² 1.000, κ = 5e-8, measured up to 1024 clients; coherency costs
        // 5% there and its peak lies at ~4,470 clients, past twice 1024.
        let fit = fit(&doubling(1000.0, 1e-5, 5e-8, 1024.0)).unwrap();
        assert!(fit.r2 > 0.999, "{fit:?}");
        assert_eq!(fit.dominant, "coherency");
        assert_eq!(fit.largest_n, 1024.0);
        assert!(!fit.names(UslTerm::Coherency));
        match fit.reading() {
            UslReading::Extrapolation {
                term: UslTerm::Coherency,
                onset_n,
                largest_n,
            } => {
                assert!((onset_n - 4472.0).abs() < 20.0, "{onset_n}");
                assert_eq!(largest_n, 1024.0);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_peak_within_twice_the_largest_level_is_a_finding() {
        // κ = 5e-7: N* ≈ 1,414 ≤ 2 × 1024.
        let fit = fit(&doubling(1000.0, 1e-5, 5e-7, 1024.0)).unwrap();
        assert!(fit.names(UslTerm::Coherency));
        match fit.reading() {
            UslReading::Limit {
                term: UslTerm::Coherency,
                onset_n,
            } => assert!((onset_n - 1414.0).abs() < 5.0, "{onset_n}"),
            other => panic!("{other:?}"),
        }
        // The boundary itself: N* exactly twice the largest level is still a finding.
        let mut at = fit.clone();
        at.n_star = Some(2048.0);
        assert!(at.names(UslTerm::Coherency));
        at.n_star = Some(2048.5);
        assert!(!at.names(UslTerm::Coherency));
    }

    #[test]
    fn contention_is_named_from_where_its_ceiling_meets_linear_scaling() {
        // σ = 0.05 bends the curve from 1/σ = 20 clients, inside 64: a finding, although the
        // small κ puts the peak past 3,000 clients.
        let bent = fit(&doubling(1000.0, 0.05, 1e-7, 64.0)).unwrap();
        assert_eq!(bent.dominant, "contention");
        assert!(matches!(
            bent.reading(),
            UslReading::Limit {
                term: UslTerm::Contention,
                ..
            }
        ));
        // σ = 1e-4 costs 10% at 1024 clients but bends only from 10,000: an extrapolation.
        let far = fit(&doubling(1000.0, 1e-4, 0.0, 1024.0)).unwrap();
        assert_eq!(far.dominant, "contention");
        assert!(!far.names(UslTerm::Contention));
        assert!(matches!(
            far.reading(),
            UslReading::Extrapolation {
                term: UslTerm::Contention,
                ..
            }
        ));
        assert_eq!(
            fit(&synthetic(10.0, 0.0, 0.0)).unwrap().reading(),
            UslReading::Linear
        );
    }
}
