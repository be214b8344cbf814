//! The one definition of a series' peak, computed once and shown by every output (the
//! run's last lines, report.md, report.html): the best load level among those that measured
//! the server. A level whose load generator was saturated measured the client, and a level
//! whose requests failed too often measured errors: both are left out, and named, so a reader
//! sees why the peak is not the highest figure in the results table.

use serde::{Deserialize, Serialize};

use super::LoadPoint;

/// The peak of one series.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Peak {
    /// Mean throughput (req/s) over the repetitions of the best server-limited load level;
    /// None when no level measured the server.
    pub throughput_rps: Option<f64>,
    /// Clients at that level.
    pub clients: Option<usize>,
    /// Offered rate (req/s) at that level, in open loop.
    pub rate_rps: Option<f64>,
    /// p99 latency (µs) at that level: the repetitions' histograms merged, else the one
    /// repetition's own p99; None when neither is known.
    pub p99_us: Option<f64>,
    /// Load levels left out because their load generator was saturated ("16", "4 @ 2000/s").
    pub excluded_client_saturated: Vec<String>,
    /// Load levels left out because too many of their requests failed (status `errors`).
    pub excluded_errors: Vec<String>,
    /// The server-limited load levels whose mean throughput is within noise of the peak's
    /// (within [`NOISE_FRACTION`] of it), the peak's own included, in load order: with two or
    /// more, which of them is highest is not a finding.
    pub within_noise: Vec<String>,
}

/// Two load levels whose mean throughputs differ by less than this fraction of the peak are
/// level within noise: the run-to-run spread (coefficient of variation) at which a level is
/// called noisy.
pub const NOISE_FRACTION: f64 = crate::analyze::stats::AUTO_CV_TARGET;

/// Whether two mean throughputs are level within noise, against the series' peak.
pub fn level_within_noise(a_rps: f64, b_rps: f64, peak_rps: f64) -> bool {
    (a_rps - b_rps).abs() <= NOISE_FRACTION * peak_rps
}

/// "1 client", "8 clients".
pub fn clients_text(n: usize) -> String {
    if n == 1 {
        "1 client".to_string()
    } else {
        format!("{n} clients")
    }
}

/// Where a load level sits, in words: "8 clients", or "2000 req/s offered" in open loop.
pub fn level_text(clients: usize, rate_rps: Option<f64>) -> String {
    match rate_rps {
        Some(r) => format!("{r:.0} req/s offered"),
        None => clients_text(clients),
    }
}

/// The peak of `points` (one series, load order), `errors` naming its error levels.
pub fn peak(points: &[LoadPoint], errors: Vec<String>) -> Peak {
    let best = points
        .iter()
        .filter(|p| !p.client_saturated)
        .max_by(|a, b| a.throughput_rps.mean.total_cmp(&b.throughput_rps.mean));
    Peak {
        throughput_rps: best.map(|p| p.throughput_rps.mean),
        clients: best.map(|p| p.clients),
        rate_rps: best.and_then(|p| p.rate_rps),
        p99_us: best.and_then(LoadPoint::p99_us),
        excluded_client_saturated: points
            .iter()
            .filter(|p| p.client_saturated)
            .map(|p| super::load_label(p.clients, p.rate_rps))
            .collect(),
        excluded_errors: errors,
        within_noise: best.map_or_else(Vec::new, |b| {
            points
                .iter()
                .filter(|p| !p.client_saturated)
                .filter(|p| {
                    level_within_noise(
                        p.throughput_rps.mean,
                        b.throughput_rps.mean,
                        b.throughput_rps.mean,
                    )
                })
                .map(|p| super::load_label(p.clients, p.rate_rps))
                .collect()
        }),
    }
}

impl Peak {
    /// "125351 req/s at 8 clients", or why there is none.
    pub fn headline(&self) -> String {
        match (self.throughput_rps, self.clients) {
            (Some(x), Some(c)) => format!("{x:.0} req/s at {}", level_text(c, self.rate_rps)),
            _ => "no step measured the server".to_string(),
        }
    }

    /// What was left out, in words ("left out: load generator saturated at 16, 64 clients"),
    /// or None when nothing was.
    pub fn exclusions(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.excluded_client_saturated.is_empty() {
            parts.push(format!(
                "load generator saturated at {}",
                levels_text(&self.excluded_client_saturated)
            ));
        }
        if !self.excluded_errors.is_empty() {
            parts.push(format!(
                "too many errors at {}",
                levels_text(&self.excluded_errors)
            ));
        }
        (!parts.is_empty()).then(|| format!("left out: {}", parts.join("; ")))
    }

    /// With two or more levels within noise of the peak, those levels in words ("2 to 32
    /// clients are level with it within noise (3% of the peak)"), else None.
    pub fn noise_text(&self) -> Option<String> {
        (self.within_noise.len() >= 2).then(|| {
            format!(
                "{} are level with it within noise ({:.0}% of the peak), so which of them is highest is not a finding",
                levels_text(&self.within_noise),
                NOISE_FRACTION * 100.0
            )
        })
    }

    /// The headline and the exclusions in one sentence fragment.
    pub fn sentence(&self) -> String {
        let mut text = match self.exclusions() {
            Some(e) => format!("{} ({e})", self.headline()),
            None => self.headline(),
        };
        if let Some(n) = self.noise_text() {
            text.push_str(&format!("; {n}"));
        }
        text
    }
}

/// Load-level labels in words: "16, 64 clients", "1 client", or open-loop labels as they are.
pub fn levels_text(labels: &[String]) -> String {
    let joined = labels.join(", ");
    if labels.iter().any(|l| l.contains('@')) {
        joined
    } else if labels == ["1"] {
        "1 client".to_string()
    } else {
        format!("{joined} clients")
    }
}
