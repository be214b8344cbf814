//! The series policies of the step loop, kept out of it so each is tested alone: how many
//! times a point is repeated (`repetitions = N` or `"auto"`), and what `stop_when =
//! "saturated"` says when it stops a series.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::runner::Point;
use crate::analyze::stats::{self, AUTO_MAX_REPETITIONS};

/// `repetitions` in a spec: a fixed count, or `"auto"` (repeat until the throughput's CV is
/// under 3%, at most 5 runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repetitions {
    /// Exactly this many runs of each point.
    Fixed(usize),
    /// Runs until the throughput settles (see [`stats::repeat_again`]).
    Auto,
}

impl Default for Repetitions {
    fn default() -> Self {
        Repetitions::Fixed(1)
    }
}

impl Repetitions {
    /// Runs of a point at most (the dry-run estimate assumes them all).
    pub fn max_runs(self) -> usize {
        match self {
            Repetitions::Fixed(n) => n,
            Repetitions::Auto => AUTO_MAX_REPETITIONS,
        }
    }

    /// Whether another run of a point is due after `runs` runs whose ok throughputs (req/s)
    /// are `ok_rps`. Under `auto`, a run that failed or was skipped ends the point: repeating
    /// a failure does not make it settle.
    pub fn again(self, runs: usize, ok_rps: &[f64]) -> bool {
        match self {
            Repetitions::Fixed(n) => runs < n,
            Repetitions::Auto => ok_rps.len() == runs && stats::repeat_again(ok_rps),
        }
    }

    /// How the plan shows a point's runs: `1 run`, `3 runs` or `2 to 5 runs (auto: ...)`.
    pub fn describe(self) -> String {
        match self {
            Repetitions::Fixed(1) => "1 run".into(),
            Repetitions::Fixed(n) => format!("{n} runs"),
            Repetitions::Auto => format!(
                "2 to {AUTO_MAX_REPETITIONS} runs (auto: until the throughput's CV < {:.0}%)",
                stats::AUTO_CV_TARGET * 100.0
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Repetitions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Repetitions;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of runs (1 or more) or \"auto\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Repetitions, E> {
                usize::try_from(v)
                    .ok()
                    .filter(|n| *n >= 1)
                    .map(Repetitions::Fixed)
                    .ok_or_else(|| E::custom(format!("{v}: expected at least 1, or \"auto\"")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Repetitions, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Repetitions, E> {
                match v {
                    "auto" => Ok(Repetitions::Auto),
                    other => Err(E::custom(format!(
                        "{other:?}: expected a number of runs or \"auto\""
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Repetitions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Repetitions::Fixed(n) => s.serialize_u64(*n as u64),
            Repetitions::Auto => s.serialize_str("auto"),
        }
    }
}

/// A point as a sentence names it: `16 clients` or `4000 requests/s`.
pub fn point_label(p: Point) -> String {
    match p.rate_rps {
        Some(r) => format!("{r:.0} requests/s"),
        None => format!("{} clients", p.clients),
    }
}

/// The note of a series stopped by `stop_when = "saturated"`: the flat stretch, then exactly
/// the points left out (or that none were).
pub fn saturation_note(from: Point, at: Point, skipped: &[Point]) -> String {
    let stretch = format!(
        "stop_when = \"saturated\": from {} to {} throughput grew under 5% per step while latency grew",
        point_label(from),
        point_label(at)
    );
    if skipped.is_empty() {
        return format!("{stretch}; that was the last step of the series, none skipped");
    }
    let counts: Vec<String> = skipped
        .iter()
        .map(|p| match p.rate_rps {
            Some(r) => format!("{r:.0}"),
            None => p.clients.to_string(),
        })
        .collect();
    let unit = match skipped[0].rate_rps {
        Some(_) => "requests/s",
        None => "clients",
    };
    format!("{stretch}; skipped: {} {unit}", counts.join(", "))
}
