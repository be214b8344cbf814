//! report.md's "kvd daemon" section: the benchkv study's tables from the target metrics of a
//! `serve kvd` target (its phase histograms, in-flight sum and remote counters over each
//! step's measured window): RTT scaling, Little's law, the RTT histogram's modes at the
//! highest client count, and the phase table per placement.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Deserialize;

use super::doc::{Doc, Table};
use crate::record::steps::{StepResult, StepStatus};
use crate::units;

/// A kvd daemon's metrics over one window (a target's `ForeignJson`, as the window's
/// difference of the daemon's file holds them), read into this type once: what the section
/// does not use (msgr's `threads`, a histogram's summary) is left out.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Window {
    /// Values at the window's end (`rank`, `ranks`, ...).
    gauges: BTreeMap<String, f64>,
    /// Counts over the window (`loops`, `remote_done`, `inflight_sum`, ...).
    counters: BTreeMap<String, f64>,
    /// The window's phase histograms, by name.
    histograms: BTreeMap<String, HistWindow>,
    /// The span the daemon's two readings cover, seconds, when its file said.
    span_s: Option<f64>,
}

/// One histogram of the window: its counts, base64 (absent when the window had none).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct HistWindow {
    hdr: Option<String>,
}

impl Window {
    fn hist(&self, name: &str) -> Option<Histogram<u64>> {
        let text = self.histograms.get(name)?.hdr.as_deref()?;
        crate::record::hist_b64::decode(text).ok()
    }

    fn mean_us(&self, name: &str) -> Option<f64> {
        let h = self.hist(name)?;
        (!h.is_empty()).then(|| h.mean() / 1e3)
    }

    fn p50_us(&self, name: &str) -> Option<f64> {
        let h = self.hist(name)?;
        (!h.is_empty()).then(|| h.value_at_quantile(0.5) as f64 / 1e3)
    }

    fn rank(&self) -> Option<u64> {
        self.gauges.get("rank").map(|&r| r as u64)
    }

    fn counter(&self, name: &str) -> Option<f64> {
        self.counters.get(name).copied()
    }
}

/// One step's figures of one rank's daemon.
struct Row<'a> {
    step: &'a StepResult,
    /// The daemon's rank (its metrics' label when it does not say).
    rank: String,
    /// Clients per rank.
    per_rank: f64,
    rtt: Histogram<u64>,
    phases_p50_us: [Option<f64>; 3],
    /// Mean flush_to_cb of this rank's own requests, µs.
    flush_to_cb_mean_us: Option<f64>,
    /// Mean turnaround the owner spent on this rank's own requests, µs: the peer's
    /// incoming_turnaround when there are two ranks (every request it turns around is this
    /// rank's); None otherwise, as the daemon does not record turnaround per requesting rank.
    owner_turnaround_mean_us: Option<f64>,
    remote_per_s: f64,
    inflight_mean: Option<f64>,
}

/// The step's rows: one per kvd daemon whose metrics reached it (every rank of a target
/// that starts its peers).
fn rows(step: &StepResult) -> Vec<Row<'_>> {
    let all: BTreeMap<&String, Window> = (step.figures.target_metrics.iter())
        .filter_map(|(label, m)| Some((label, serde_json::from_value(m.to_value()).ok()?)))
        .collect();
    all.iter()
        .filter_map(|(label, m)| {
            let mut r = row(step, label, m)?;
            r.owner_turnaround_mean_us = owner_turnaround(m, all.values());
            Some(r)
        })
        .collect()
}

/// The mean turnaround of `m`'s rank's own requests at their owner: with two ranks, the other
/// rank's incoming_turnaround.
fn owner_turnaround<'a>(m: &Window, all: impl Iterator<Item = &'a Window>) -> Option<f64> {
    if m.gauges.get("ranks") != Some(&2.0) {
        return None;
    }
    let me = m.rank()?;
    let peers: Vec<&Window> = all.filter(|o| o.rank().is_some_and(|r| r != me)).collect();
    match peers.as_slice() {
        [peer] => peer.mean_us("incoming_turnaround"),
        _ => None,
    }
}

fn row<'a>(step: &'a StepResult, label: &str, m: &Window) -> Option<Row<'a>> {
    let rtt = m.hist("rtt")?;
    let rank = m
        .rank()
        .map_or_else(|| label.to_string(), |r| format!("rank {r}"));
    // The span the daemon's two readings cover when its file says so, else the load's window.
    let window_s = (m.span_s).unwrap_or_else(|| step.load.as_ref().map_or(0.0, |l| l.duration_s));
    let ranks = m.gauges.get("ranks").copied().unwrap_or(1.0);
    let loops = m.counter("loops").filter(|&l| l > 0.0);
    Some(Row {
        step,
        rank,
        per_rank: step.clients as f64 / ranks.max(1.0),
        rtt,
        phases_p50_us: [
            m.p50_us("call_to_flush"),
            m.p50_us("flush_to_cb"),
            m.p50_us("incoming_turnaround"),
        ],
        flush_to_cb_mean_us: m.mean_us("flush_to_cb"),
        owner_turnaround_mean_us: None,
        remote_per_s: m.counter("remote_done").unwrap_or(0.0) / window_s.max(1e-9),
        inflight_mean: loops.and_then(|l| Some(m.counter("inflight_sum")? / l)),
    })
}

fn us(x: Option<f64>) -> String {
    x.map_or("—".into(), units::duration_us)
}

fn rps(step: &StepResult) -> String {
    step.throughput_rps()
        .map_or("—".into(), |t| format!("{t:.0}"))
}

/// The section, when a step has a kvd daemon's metrics.
pub fn sections(steps: &[StepResult]) -> Doc {
    let rows: Vec<Row> = steps
        .iter()
        .filter(|s| s.status == StepStatus::Ok)
        .flat_map(rows)
        .collect();
    let mut out = Doc::new();
    if rows.is_empty() {
        return out;
    }
    out.heading("kvd daemon (each rank's own timings over each window)");
    out.paragraph(
        "RTT is the daemon's time from queuing a remote request to reading its reply; \
         call_to_flush + flush_to_cb = RTT; incoming_turnaround is the owner's time from \
         reading a request to flushing its reply. The published ONE_WAY, (p50 flush_to_cb − p50 \
         peer turnaround) / 2, subtracts this rank's incoming_turnaround (its peers' requests) \
         from its own flush_to_cb; the exact figure subtracts the owner's mean turnaround of this \
         rank's own requests from their mean flush_to_cb (means of the same requests add up), \
         known with two ranks (the peer turns around only this rank's requests; the daemon does \
         not record turnaround per requesting rank, so with more ranks it is —). \
         On a machine with one NUMA node the placements differ by CPUs only (`shared`: clients \
         on the daemons' CPUs; `separated`: kept off them), not by memory node.",
    );
    let mut groups: Vec<(&str, &str)> = Vec::new();
    for r in &rows {
        let g = (r.step.placement.as_str(), r.rank.as_str());
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups.sort_by(|a, b| a.1.cmp(b.1));
    for (placement, rank) in groups {
        let of: Vec<&Row> = rows
            .iter()
            .filter(|r| r.step.placement == placement && r.rank == rank)
            .collect();
        let p = format!("{placement}, {rank}");
        scaling(&mut out, &p, &of);
        little(&mut out, &p, &of);
        phases(&mut out, &p, &of);
        if let Some(top) = of.iter().max_by_key(|r| r.step.clients) {
            modes(&mut out, &p, top);
        }
    }
    out
}

fn scaling(out: &mut Doc, p: &str, rows: &[&Row]) {
    out.subheading(format!("RTT scaling ({p})"));
    let mut t = Table::new(
        &[
            "clients/rank",
            "RTT p50",
            "RTT mean",
            "total req/s",
            "remote req/s (this rank)",
        ],
        "rrrrr",
    );
    for r in rows {
        t.row(vec![
            r.per_rank.to_string(),
            units::duration_us(r.rtt.value_at_quantile(0.5) as f64 / 1e3),
            units::duration_us(r.rtt.mean() / 1e3),
            rps(r.step),
            format!("{:.0}", r.remote_per_s),
        ]);
    }
    out.table(t);
}

fn little(out: &mut Doc, p: &str, rows: &[&Row]) {
    out.subheading(format!("Little's law ({p}): in-flight = λ × RTT"));
    let mut t = Table::new(
        &[
            "clients/rank",
            "in-flight (daemon mean)",
            "λ remote (req/s)",
            "RTT predicted",
            "RTT measured mean",
        ],
        "rrrrr",
    );
    for r in rows {
        let predicted = r
            .inflight_mean
            .filter(|_| r.remote_per_s > 0.0)
            .map(|l| l / r.remote_per_s * 1e6);
        t.row(vec![
            r.per_rank.to_string(),
            r.inflight_mean.map_or("—".into(), |l| format!("{l:.2}")),
            format!("{:.0}", r.remote_per_s),
            us(predicted),
            units::duration_us(r.rtt.mean() / 1e3),
        ]);
    }
    out.table(t);
}

fn phases(out: &mut Doc, p: &str, rows: &[&Row]) {
    out.subheading(format!("Phases ({p}), p50"));
    let mut t = Table::new(
        &[
            "clients/rank",
            "call_to_flush",
            "flush_to_cb",
            "turnaround",
            "(p50 flush_to_cb − p50 peer turnaround) / 2",
            "one-way, exact: (mean flush_to_cb − owner's mean turnaround of these requests) / 2",
            "total req/s",
        ],
        "rrrrrrr",
    );
    for r in rows {
        let [c2f, f2c, turn] = r.phases_p50_us;
        let one_way = f2c.zip(turn).map(|(f, t)| (f - t) / 2.0);
        let exact = r
            .flush_to_cb_mean_us
            .zip(r.owner_turnaround_mean_us)
            .map(|(f, t)| (f - t) / 2.0);
        t.row(vec![
            r.per_rank.to_string(),
            us(c2f),
            us(f2c),
            us(turn),
            us(one_way),
            us(exact),
            rps(r.step),
        ]);
    }
    out.table(t);
}

/// Peaks of the RTT histogram in 1 µs buckets (as the benchkv study's), split at the deepest valley
/// between the two highest peaks; one population when no valley is below half the lower peak.
pub fn rtt_modes(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let top = (h.value_at_quantile(0.999) / 1000 + 1).min(10_000); // peaks within 10 ms: the search below is quadratic in buckets
    let buckets: Vec<u64> = (0..=top)
        .map(|b| h.count_between(b * 1000, b * 1000 + 999))
        .collect();
    let total: u64 = buckets.iter().sum::<u64>().max(1);
    let first = (0..buckets.len()).max_by_key(|&i| buckets[i]).unwrap_or(0);
    // The second peak: the highest bucket with a valley under half of it towards the first.
    let second = (0..buckets.len())
        .filter(|&i| i != first)
        .filter(|&i| {
            let (lo, hi) = (i.min(first), i.max(first));
            let valley = buckets[lo..=hi].iter().min().copied().unwrap_or(0);
            valley * 2 < buckets[i].min(buckets[first])
        })
        .max_by_key(|&i| buckets[i]);
    let Some(second) = second.filter(|&i| buckets[i] * 20 >= total) else {
        return vec![(first as f64, 1.0)];
    };
    let (lo, hi) = (first.min(second), first.max(second));
    let split = (lo..=hi).min_by_key(|&i| buckets[i]).unwrap_or(lo);
    let below: u64 = buckets[..split].iter().sum();
    vec![
        (lo as f64, below as f64 / total as f64),
        (hi as f64, 1.0 - below as f64 / total as f64),
    ]
}

fn modes(out: &mut Doc, p: &str, r: &Row) {
    let m = rtt_modes(&r.rtt);
    out.subheading(format!(
        "RTT histogram at {} clients/rank ({p}): {}",
        r.per_rank,
        if m.len() == 2 { "bimodal" } else { "one mode" }
    ));
    let mut t = Table::new(&["population", "peak (µs bucket)", "share"], "lrr");
    for (i, (peak, share)) in m.iter().enumerate() {
        let name = match (m.len(), i) {
            (1, _) => "all",
            (_, 0) => "fast",
            _ => "slow",
        };
        t.row(vec![
            name.to_string(),
            format!("{peak:.0}"),
            format!("{:.0}%", share * 100.0),
        ]);
    }
    out.table(t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_span_is_read_under_the_name_the_observer_writes_it() {
        assert_eq!(crate::observe::metrics::SPAN_FIELD, "span_s");
        let w: Window = serde_json::from_value(serde_json::json!({"span_s": 0.5})).unwrap();
        assert_eq!(w.span_s, Some(0.5));
    }

    #[test]
    fn two_populations_are_split_at_their_valley() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record_n(6_000, 180).unwrap();
        h.record_n(9_000, 10).unwrap();
        h.record_n(14_000, 820).unwrap();
        let m = rtt_modes(&h);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!((m[0].0, m[1].0), (6.0, 14.0));
        assert!((m[0].1 - 180.0 / 1010.0).abs() < 1e-9, "{m:?}");
        let mut one = Histogram::<u64>::new(3).unwrap();
        one.record_n(5_000, 100).unwrap();
        one.record_n(6_000, 80).unwrap();
        assert_eq!(rtt_modes(&one), vec![(5.0, 1.0)]);
    }

    /// Two ranks whose peers' turnarounds differ: rank 0's requests take 2 µs at rank 1,
    /// rank 1's take 6 µs at rank 0. The published column subtracts a rank's own incoming
    /// turnaround (its peer's requests); the exact one the owner's, from the means.
    #[test]
    fn one_way_is_labelled_and_the_exact_figure_uses_the_owners_turnaround() {
        let h = |values_ns: &[u64]| {
            let mut h = Histogram::<u64>::new(3).unwrap();
            for &v in values_ns {
                h.record(v).unwrap();
            }
            serde_json::json!({"hdr": crate::record::hist_b64::encode(&h)})
        };
        // flush_to_cb = 2 × one-way + owner's turnaround: one-way 3 µs for rank 0, 4 µs for 1.
        let metrics = |rank: u64, f2c: &[u64], turn: &[u64]| {
            // As the window's difference holds them: msgr's threads beside, and a histogram
            // the window could not read (a note, no counts).
            serde_json::json!({
                "threads": {"daemon": {"busy_ns": 5, "loops": 2}},
                "gauges": {"rank": rank, "ranks": 2},
                "counters": {"remote_done": 10.0},
                "histograms": {
                    "ping": {"unavailable": "the histogram at the window's end: not a string"},
                    "rtt": h(&[10_000]),
                    "call_to_flush": h(&[1_000]),
                    "flush_to_cb": h(f2c),
                    "incoming_turnaround": h(turn),
                }
            })
        };
        let mut step = StepResult::empty("kvd.shared.c2.r0".into(), "kvd", "shared", 2, 0);
        step.status = StepStatus::Ok;
        let ranks = [
            ("r0", metrics(0, &[7_000, 9_000], &[6_000])),
            ("r1", metrics(1, &[14_000], &[1_000, 3_000])),
        ];
        step.figures.target_metrics = (ranks.into_iter())
            .map(|(label, m)| {
                let m = crate::record::figures::ForeignJson::from_value(m);
                (label.to_string(), m)
            })
            .collect();
        let text = sections(&[step]).to_markdown();
        assert!(
            text.contains("| (p50 flush_to_cb − p50 peer turnaround) / 2 | one-way, exact"),
            "{text}"
        );
        // Rank 0: p50s 7 and 6 → 0.50 published; means 8 and 2 (rank 1's turnaround) → 3.00.
        assert!(
            text.contains("| 1 | 1.00 µs | 7.00 µs | 6.00 µs | 0.500 µs | 3.00 µs |"),
            "{text}"
        );
        // Rank 1: p50s 14 (14.01 in HDR's 3 digits) and 1 → 6.50 published; means 14 and 6
        // (rank 0's) → 4.00.
        assert!(
            text.contains("| 1 | 1.00 µs | 14.0 µs | 1.00 µs | 6.50 µs | 4.00 µs |"),
            "{text}"
        );
    }
}
