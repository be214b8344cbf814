//! When open-loop requests are due: evenly spaced (`uniform`) or at seeded exponential gaps
//! (`poisson`, as independent users arrive), at a fixed rate or one that ramps linearly
//! (`--ramp FROM:TO:DURATION`, starting with the measured window).
//!
//! Both are one rule: request `i` is due when the expected request count `N(t)` reaches
//! `c_i`, where `c_i = i + phase` (uniform) or a running sum of Exp(1) draws (poisson, the
//! time change of a Poisson process). `N` is piecewise quadratic, so `N⁻¹` is exact and
//! nothing accumulates rounding over a long run. A [`Cursor`] walks `c_i` in constant memory;
//! the engine keeps two (releases and dispatches), so the requests waiting for a connection
//! are still an index range.

use std::time::Duration;

use super::protocol::redis::SplitMix64;
use super::LoadConfig;

/// How gaps between open-loop requests are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arrivals {
    /// Evenly spaced (the threads interleaved).
    #[default]
    Uniform,
    /// Exponential gaps, seeded: the burstiness of independent users.
    Poisson,
}

/// An `--arrivals` or `--ramp` that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArrivalsError {
    /// Neither `uniform` nor `poisson`.
    #[error("bad arrivals {0:?}: use uniform or poisson")]
    Arrivals(String),
    /// Not `FROM:TO:DURATION` with numbers and a duration.
    #[error("bad ramp {0:?}: expected FROM:TO:DURATION, e.g. 100:5000:10s")]
    RampShape(String),
    /// A ramp to zero or over no time.
    #[error("bad ramp {0:?}: TO must be above 0 and DURATION longer than zero")]
    RampEmpty(String),
    /// Poisson gaps asked for a closed loop.
    #[error("--arrivals poisson needs --rate (it spaces open-loop requests)")]
    PoissonClosed,
}

impl std::str::FromStr for Arrivals {
    type Err = ArrivalsError;

    fn from_str(s: &str) -> Result<Self, ArrivalsError> {
        match s {
            "uniform" => Ok(Arrivals::Uniform),
            "poisson" => Ok(Arrivals::Poisson),
            _ => Err(ArrivalsError::Arrivals(s.to_string())),
        }
    }
}

/// `--ramp FROM:TO:DURATION`: the rate (open loop) or the connections (closed loop) go from
/// FROM to TO linearly over DURATION from the start of the measured window, then stay at TO.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ramp {
    /// Value at the start (and during the warm-up).
    pub from: f64,
    /// Value at the end of the ramp and after.
    pub to: f64,
    /// Length of the ramp.
    pub duration: Duration,
}

impl std::str::FromStr for Ramp {
    type Err = ArrivalsError;

    fn from_str(s: &str) -> Result<Self, ArrivalsError> {
        let bad = || ArrivalsError::RampShape(s.to_string());
        let mut f = s.splitn(3, ':');
        let (Some(from), Some(to), Some(d)) = (f.next(), f.next(), f.next()) else {
            return Err(bad());
        };
        let num = |v: &str| v.parse::<f64>().ok().filter(|x| x.is_finite() && *x >= 0.0);
        let (Some(from), Some(to)) = (num(from), num(to)) else {
            return Err(bad());
        };
        let duration = crate::units::parse_duration(d).map_err(|_| bad())?;
        if to <= 0.0 || duration.is_zero() {
            return Err(ArrivalsError::RampEmpty(s.to_string()));
        }
        Ok(Ramp { from, to, duration })
    }
}

impl Ramp {
    /// The value at `since_window_s` seconds after the measured window started (negative
    /// during the warm-up).
    pub fn at(&self, since_window_s: f64) -> f64 {
        let x = (since_window_s / self.duration.as_secs_f64()).clamp(0.0, 1.0);
        self.from + (self.to - self.from) * x
    }
}

/// Checks `--arrivals` and `--ramp` against the loop and lets the ramp set what it ramps:
/// the rate (open loop: TO) or the connections opened (closed loop: the larger end).
pub(super) fn apply(config: &mut LoadConfig) -> Result<(), ArrivalsError> {
    if config.arrivals == Arrivals::Poisson && config.rate_rps.is_none() {
        return Err(ArrivalsError::PoissonClosed);
    }
    let Some(ramp) = config.ramp else {
        return Ok(());
    };
    if config.rate_rps.is_some() {
        config.rate_rps = Some(ramp.to);
    } else {
        config.connections = ramp.from.max(ramp.to).round().max(1.0) as usize;
    }
    Ok(())
}

/// The expected request count of one thread as a function of time: rate `a` per second until
/// `w` (the warm-up), then linear from `a` to `b` over `d` seconds, then `b`.
#[derive(Debug, Clone, Copy)]
pub(super) struct RateCurve {
    a: f64,
    b: f64,
    w: f64,
    d: f64,
}

impl RateCurve {
    /// One thread's share (`1 / threads`) of `rate_rps`, ramped when `ramp` is given.
    pub fn new(rate_rps: f64, ramp: Option<&Ramp>, warmup: Duration, threads: usize) -> Self {
        let n = threads as f64;
        match ramp {
            Some(r) => RateCurve {
                a: r.from / n,
                b: r.to / n,
                w: warmup.as_secs_f64(),
                d: r.duration.as_secs_f64(),
            },
            None => RateCurve {
                a: rate_rps / n,
                b: rate_rps / n,
                w: 0.0,
                d: 1.0,
            },
        }
    }

    /// Seconds from the start at which the expected count reaches `c`.
    fn inverse_s(&self, c: f64) -> f64 {
        let warm = self.a * self.w;
        if self.a > 0.0 && c <= warm {
            return c / self.a;
        }
        let c = c - warm;
        let ramp = (self.a + self.b) * self.d / 2.0;
        if c > ramp {
            return self.w + self.d + (c - ramp) / self.b;
        }
        // a s + (b − a) s² / 2d = c
        let k = (self.b - self.a) / self.d;
        let s = if k.abs() < 1e-12 {
            c / self.a
        } else {
            (-self.a + (self.a * self.a + 2.0 * k * c).max(0.0).sqrt()) / k
        };
        self.w + s
    }

    /// The mean gap at the rate the curve ends at, ns.
    pub fn final_period_ns(&self) -> f64 {
        1e9 / self.b
    }
}

/// Walks the due times of one thread's requests.
#[derive(Debug, Clone)]
pub(super) struct Cursor {
    curve: RateCurve,
    arrivals: Arrivals,
    /// Uniform: the offset of this thread's schedule, in requests (interleaving threads).
    phase: f64,
    index: u64,
    /// Poisson: the running sum of Exp(1) draws.
    count: f64,
    rng: SplitMix64,
}

impl Cursor {
    /// Thread `thread` of `threads`: uniform schedules are offset by `thread / threads` of a
    /// gap; poisson gaps are drawn from `seed`.
    pub fn new(
        curve: RateCurve,
        arrivals: Arrivals,
        thread: usize,
        threads: usize,
        seed: u64,
    ) -> Self {
        let mut c = Cursor {
            curve,
            arrivals,
            phase: thread as f64 / threads as f64,
            index: 0,
            count: 0.0,
            rng: SplitMix64(seed),
        };
        if arrivals == Arrivals::Poisson {
            c.count = c.exp1();
        }
        c
    }

    fn exp1(&mut self) -> f64 {
        -(1.0 - self.rng.next_f64()).ln()
    }

    /// When the current request is due, ns since the start.
    pub fn due_ns(&self) -> u64 {
        let c = match self.arrivals {
            Arrivals::Uniform => self.index as f64 + self.phase,
            Arrivals::Poisson => self.count,
        };
        (self.curve.inverse_s(c) * 1e9) as u64
    }

    /// Moves to the next request.
    pub fn advance(&mut self) {
        self.index += 1;
        if self.arrivals == Arrivals::Poisson {
            self.count += self.exp1();
        }
    }
}

/// Closed loop under `--ramp`: the connections that work at each moment. Connection ranks
/// interleave the threads (rank = local index × threads + thread), so every thread's share
/// grows alike.
#[derive(Debug, Clone)]
pub(super) struct ConnRamp {
    ramp: Ramp,
    warmup_end_ns: u64,
    thread: usize,
    threads: usize,
}

impl ConnRamp {
    /// Thread `thread`'s view; `None` without a ramp or in open loop (the rate ramps there).
    pub fn new(config: &LoadConfig, thread: usize) -> Option<Self> {
        let ramp = config.ramp.filter(|_| config.rate_rps.is_none())?;
        Some(ConnRamp {
            ramp,
            warmup_end_ns: config.warmup.as_nanos() as u64,
            thread,
            threads: config.threads,
        })
    }

    /// Whether the thread's connection `local` works at `now_ns`.
    pub fn active(&self, local: usize, now_ns: u64) -> bool {
        let since_s = (now_ns as f64 - self.warmup_end_ns as f64) / 1e9;
        let rank = local * self.threads + self.thread;
        (rank as f64) < self.ramp.at(since_s).round()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dues(c: &mut Cursor, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let d = c.due_ns();
                c.advance();
                d
            })
            .collect()
    }

    #[test]
    fn uniform_is_the_fixed_schedule() {
        // 1000 req/s over 2 threads: thread 1 is half a gap after thread 0.
        let curve = RateCurve::new(1000.0, None, Duration::ZERO, 2);
        let mut t1 = Cursor::new(curve, Arrivals::Uniform, 1, 2, 1);
        assert_eq!(dues(&mut t1, 3), vec![1_000_000, 3_000_000, 5_000_000]);
    }

    #[test]
    fn poisson_has_the_rate_and_exponential_gaps() {
        let curve = RateCurve::new(10_000.0, None, Duration::ZERO, 1);
        let mut c = Cursor::new(curve, Arrivals::Poisson, 0, 1, 7);
        let d = dues(&mut c, 100_001);
        let gaps: Vec<f64> = d.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!((mean - 100_000.0).abs() < 2_000.0, "mean gap {mean} ns");
        assert!((sd / mean - 1.0).abs() < 0.05, "cv {}", sd / mean);
        // Seeded: the same seed draws the same schedule.
        let mut again = Cursor::new(curve, Arrivals::Poisson, 0, 1, 7);
        assert_eq!(dues(&mut again, 100), d[..100]);
    }

    #[test]
    fn a_ramp_counts_the_area_under_the_rate() {
        // 1 s warm-up at 100/s, then 100 → 300/s over 2 s, then 300/s.
        let ramp: Ramp = "100:300:2s".parse().unwrap();
        let curve = RateCurve::new(0.0, Some(&ramp), Duration::from_secs(1), 1);
        let mut c = Cursor::new(curve, Arrivals::Uniform, 0, 1, 1);
        let d = dues(&mut c, 1000);
        let by = |t_s: f64| d.iter().filter(|&&x| (x as f64) < t_s * 1e9).count();
        assert_eq!(by(1.0), 100);
        // The ramp's area: (100 + 300) / 2 × 2 s = 400.
        assert!(by(3.0).abs_diff(500) <= 1, "{}", by(3.0));
        assert!(by(4.0).abs_diff(800) <= 1, "{}", by(4.0));
        // Halfway up the rate is 200/s.
        let gap = d[by(2.0)] - d[by(2.0) - 1];
        assert!((4_900_000..5_100_000).contains(&gap), "{gap}");
        assert!(d.windows(2).all(|w| w[1] > w[0]));
    }

    #[test]
    fn ramps_parse_or_say_why() {
        let r: Ramp = "0:64:10s".parse().unwrap();
        assert_eq!(
            (r.from, r.to, r.duration),
            (0.0, 64.0, Duration::from_secs(10))
        );
        assert_eq!(r.at(5.0), 32.0);
        assert_eq!(r.at(-1.0), 0.0);
        assert_eq!(r.at(20.0), 64.0);
        for bad in ["1:2", "a:2:1s", "1:0:1s", "1:2:0s", "-1:2:1s", "1:2:xs"] {
            assert!(bad.parse::<Ramp>().is_err(), "{bad}");
        }
    }
}
