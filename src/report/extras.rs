//! report.md sections fed by what a step carries beyond the load: split instances compared
//! with single ones (the messenger study's "2 instances × 14 cores vs 1 instance × 28 cores"), the
//! `[[observe]]` processes, and the targets' own metrics.

// Value: the targets' own metrics (`ForeignJson`), read as their programs wrote them.
use serde_json::Value;
use std::collections::BTreeMap;

use super::doc::{Block, Doc, Item, Table};
use crate::record::steps::{StepResult, StepStatus};
use crate::units;

/// Every section that has something to show.
pub fn sections(steps: &[StepResult]) -> Doc {
    let mut out = Doc::new();
    split_comparison(&mut out, steps);
    client_groups(&mut out, steps);
    observed(&mut out, steps);
    target_metrics(&mut out, steps);
    out
}

fn ok(steps: &[StepResult]) -> impl Iterator<Item = &StepResult> {
    steps.iter().filter(|s| s.status == StepStatus::Ok)
}

fn instances_of(step: &StepResult) -> usize {
    match step.figures.per_instance.len() {
        0 => 1,
        n => n,
    }
}

/// Mean throughput by client count, and the instance count and server CPUs of a series.
struct SeriesFigures {
    by_clients: BTreeMap<usize, f64>,
    instances: usize,
    server_cpus: usize,
}

/// Throughput sum and step count by client count.
type Sums = BTreeMap<usize, (f64, usize)>;

fn series(steps: &[StepResult]) -> BTreeMap<(String, String), SeriesFigures> {
    let mut sums: BTreeMap<(String, String), (Sums, usize, usize)> = BTreeMap::new();
    for s in ok(steps) {
        let Some(rps) = s.throughput_rps() else {
            continue;
        };
        let cpus = crate::cpuset::parse(&s.server_cpus).map_or(0, |c| c.len());
        let e = sums
            .entry((s.target.clone(), s.placement.clone()))
            .or_insert_with(|| (BTreeMap::new(), instances_of(s), cpus));
        let cell = e.0.entry(s.clients).or_insert((0.0, 0));
        cell.0 += rps;
        cell.1 += 1;
    }
    sums.into_iter()
        .map(|(k, (by, instances, server_cpus))| {
            let by_clients = by
                .into_iter()
                .map(|(c, (t, n))| (c, t / n as f64))
                .collect();
            (
                k,
                SeriesFigures {
                    by_clients,
                    instances,
                    server_cpus,
                },
            )
        })
        .collect()
}

fn shape(f: &SeriesFigures) -> String {
    let per = f.server_cpus as f64 / f.instances as f64;
    let cores = if per.fract() == 0.0 {
        format!("{per:.0}")
    } else {
        format!("{per:.1}")
    };
    let (i, c) = (
        if f.instances == 1 {
            "instance"
        } else {
            "instances"
        },
        if per == 1.0 { "core" } else { "cores" },
    );
    format!("{} {i} × {cores} {c}", f.instances)
}

/// One sentence in the messenger study's words: "2 instances × 1 core: X req/s vs 1 instance × 2 cores:
/// Y req/s (+Z%)".
pub fn split_sentence(split: (&str, f64), single: (&str, f64)) -> String {
    let diff = if single.1 > 0.0 {
        format!(" ({:+.1}%)", 100.0 * (split.1 / single.1 - 1.0))
    } else {
        String::new()
    };
    format!(
        "{}: {:.0} req/s vs {}: {:.0} req/s{diff}",
        split.0, split.1, single.0, single.1
    )
}

fn split_comparison(out: &mut Doc, steps: &[StepResult]) {
    let all = series(steps);
    let mut items = Vec::new();
    for ((s_target, placement), split) in all.iter().filter(|(_, f)| f.instances > 1) {
        for ((t_target, _), single) in all
            .iter()
            .filter(|((_, p), f)| p == placement && f.instances == 1)
        {
            let peak = |f: &SeriesFigures| f.by_clients.values().copied().fold(0.0, f64::max);
            let (a, b) = (shape(split), shape(single));
            let sub = split
                .by_clients
                .iter()
                .filter_map(|(c, rps)| {
                    let other = single.by_clients.get(c)?;
                    Some(format!(
                        "{c} clients: {}",
                        split_sentence((&a, *rps), (&b, *other))
                    ))
                })
                .collect();
            items.push(Item {
                text: format!(
                    "{s_target} vs {t_target} ({placement}), peak: {}",
                    split_sentence((&a, peak(split)), (&b, peak(single)))
                ),
                sub,
            });
        }
    }
    if items.is_empty() {
        return;
    }
    out.heading("Split instances against one instance");
    out.paragraph("Throughputs are the sums of the instances' (each on its own share of the cpusets); latency comes from their merged histograms.");
    out.blocks.push(Block::List(items));
}

fn observed(out: &mut Doc, steps: &[StepResult]) {
    let mut t = Table::new(
        &[
            "step",
            "process",
            "user CPU (s)",
            "sys CPU (s)",
            "context switches",
            "notes",
        ],
        "llrrrl",
    );
    for s in steps {
        for (name, o) in &s.figures.observed {
            let notes = o.notes().join("; ");
            let tree = o.observation().and_then(|o| o.server.as_ref());
            let mut row = vec![s.id.clone(), name.clone()];
            row.extend(match tree {
                Some(t) => [
                    format!("{:.2}", t.user_s),
                    format!("{:.2}", t.sys_s),
                    (t.voluntary_cs + t.involuntary_cs).to_string(),
                    notes,
                ],
                None => ["—".into(), "—".into(), "—".into(), notes],
            });
            t.row(row);
        }
    }
    if t.rows.is_empty() {
        return;
    }
    out.heading("Observed processes");
    out.table(t);
}

/// Each client group's share of a step, beside the step's merged figures.
fn client_groups(out: &mut Doc, steps: &[StepResult]) {
    let mut t = Table::new(
        &[
            "step",
            "host",
            "requests/s",
            "p50",
            "p99",
            "windows overlap",
            "ready before start (ms)",
            "fetch (ms)",
        ],
        "llrrrrrr",
    );
    for s in ok(steps) {
        let groups = &s.figures.per_host;
        if groups.is_empty() {
            continue;
        }
        let overlap = s.figures.window_overlap;
        let or_dash =
            |v: Option<f64>, scale: f64| v.map_or("—".into(), |v| format!("{:.1}", v * scale));
        for g in groups {
            let overhead = g.overhead.as_ref();
            t.row(vec![
                s.id.clone(),
                g.host.as_deref().unwrap_or("?").to_string(),
                format!("{:.0}", g.load.throughput_rps),
                units::duration_us(g.load.latency_us.p50),
                units::duration_us(g.load.latency_us.p99),
                overlap.map_or("—".into(), |o| format!("{:.2}%", o * 100.0)),
                or_dash(overhead.and_then(|o| o.ready_before_start_us), 1e-3),
                or_dash(overhead.and_then(|o| o.fetch_ms), 1.0),
            ]);
        }
        let load = s.load.as_ref();
        t.row(vec![
            s.id.clone(),
            "**all (merged)**".into(),
            format!("{:.0}", load.map_or(f64::NAN, |l| l.throughput_rps)),
            units::duration_us(load.map_or(f64::NAN, |l| l.latency_us.p50)),
            units::duration_us(load.map_or(f64::NAN, |l| l.latency_us.p99)),
        ]);
    }
    if t.rows.is_empty() {
        return;
    }
    out.heading("Client groups");
    out.paragraph("Each group's own figures; the merged row adds their counts and histograms. Ready before start: how long before the step's agreed start the group had its connections open (negative: that late); fetch: from the end of its window to its results on disk here.");
    out.table(t);
}

fn target_metrics(out: &mut Doc, steps: &[StepResult]) {
    let mut t = Table::new(&["step", "throughput (req/s)", "source", "metrics"], "lrll");
    for s in steps {
        let window_s = s.load.as_ref().map_or(0.0, |l| l.duration_s);
        let rps = s
            .throughput_rps()
            .map_or("—".to_string(), |t| format!("{t:.0}"));
        for (label, v) in &s.figures.target_metrics {
            let v = &v.to_value();
            // A difference whose readings say when they were written covers their span.
            let span_s = v
                .get(crate::observe::metrics::SPAN_FIELD)
                .and_then(Value::as_f64)
                .unwrap_or(window_s);
            let text = match v.get("note").and_then(Value::as_str) {
                Some(note) => note.to_string(),
                None => metric_text(v, span_s),
            };
            t.row(vec![s.id.clone(), rps.clone(), label.clone(), text]);
        }
    }
    if t.rows.is_empty() {
        return;
    }
    out.heading("Target-reported metrics (difference over the measured window)");
    out.table(t);
}

/// `key=value` pairs; a `busy_ns` leaf also shows as a share of the span it covers.
fn metric_text(v: &Value, window_s: f64) -> String {
    crate::observe::metrics::leaves(v)
        .into_iter()
        .map(|(k, x)| {
            if k.ends_with("busy_ns") && window_s > 0.0 {
                format!("{k}={x:.0} ({:.0}% busy)", x / 1e9 / window_s * 100.0)
            } else if x.fract() == 0.0 {
                format!("{k}={x:.0}")
            } else {
                format!("{k}={x:.3}")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentence_in_seed_000_words() {
        assert_eq!(
            split_sentence(
                ("2 instances × 1 core", 15630.0),
                ("1 instance × 2 cores", 12404.0)
            ),
            "2 instances × 1 core: 15630 req/s vs 1 instance × 2 cores: 12404 req/s (+26.0%)"
        );
    }

    #[test]
    fn split_and_single_series_are_paired() {
        let step = |target: &str, rps: f64, n: usize| {
            let mut s = StepResult::empty(format!("{target}.c4"), target, "shared", 4, 0);
            s.status = StepStatus::Ok;
            s.server_cpus = "0-1".into();
            s.load = Some(crate::record::load::LoadReport {
                throughput_rps: rps,
                ..Default::default()
            });
            if n > 1 {
                s.figures.per_instance = vec![Default::default(); n];
            }
            s
        };
        let text = sections(&[step("split", 150.0, 2), step("one", 100.0, 1)]).to_markdown();
        assert!(
            text.contains(
                "2 instances × 1 core: 150 req/s vs 1 instance × 2 cores: 100 req/s (+50.0%)"
            ),
            "{text}"
        );
    }
}
