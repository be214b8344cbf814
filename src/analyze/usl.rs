//! The Universal Scalability Law: X(N) = λN / (1 + σ(N−1) + κN(N−1)).
//!
//! σ (contention) is the share of work that serialises; κ (coherency) is the cost of keeping
//! shared state consistent, which makes throughput fall past N* = √((1−σ)/κ). The fit is
//! unweighted least squares on throughput with σ, κ ≥ 0, as the USL tools do. A coarse grid over
//! (σ, κ) with λ solved exactly for each cell finds the basin; projected Levenberg–Marquardt on
//! all three parameters then polishes it.

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
}

impl UslFit {
    /// The fitted throughput at load `n`.
    pub fn throughput(&self, n: f64) -> f64 {
        model(self.lambda, self.sigma, self.kappa, n)
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

fn dominant(points: &[(f64, f64)], sigma: f64, kappa: f64) -> &'static str {
    let n = points.iter().map(|p| p.0).fold(f64::MIN, f64::max);
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
}
