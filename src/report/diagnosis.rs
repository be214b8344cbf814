//! The diagnoses at the top of the reports (each series' sentence verbatim, then its limit,
//! confidence and resource table, one `Doc` for report.md and report.html), `stairbench
//! analyze DIR`'s text (with the evidence), and report.html's per-thread
//! busy charts (one per series, stacked by merged thread name, one bar per step).

use std::fmt::Write as _;

use super::doc::{Doc, Table};
use super::svg;
use crate::analyze::diagnosis::resources::{Bound, Figure, Quantity, State, Threshold};
use crate::analyze::diagnosis::{Diagnosis, Evidence, ResourceRow};
use crate::analyze::run::RunAnalysis;
use crate::record::steps::{StepResult, StepStatus};

/// Thread groups drawn by name in a chart; the rest are summed as `other`.
const NAMED_GROUPS: usize = 7;

/// `limit one_thread, confidence high`.
fn verdict(d: &Diagnosis) -> String {
    format!("limit {}, confidence {}", d.limit, d.confidence)
}

/// One figure as text: `busiest_thread_cpu_pct = 97.3 at 8 clients (thread redis-server)`.
fn evidence_text(e: &Evidence) -> String {
    let value = if e.value.is_finite() {
        svg::format_number(e.value)
    } else {
        "not measured".into()
    };
    let at = e
        .at_clients
        .map_or(String::new(), |c| format!(" at {c} clients"));
    format!("{} = {value}{at} ({})", e.metric, e.note)
}

/// The diagnoses' section of report.md and report.html, built once: each sentence verbatim,
/// what limits its confidence, its verdict, and its resource table (the evidence stays in
/// analysis.json and `stairbench analyze`'s text). Empty without a series.
pub fn doc(a: &RunAnalysis) -> Doc {
    let mut out = Doc::new();
    if a.diagnosis.is_empty() {
        return out;
    }
    out.heading("Why it stops scaling");
    for d in &a.diagnosis {
        out.paragraph(format!("**{}**", d.sentence));
        for n in &d.notes {
            out.paragraph(format!("Note: {n}"));
        }
        out.paragraph(format!("{}.", verdict(d)));
        if !d.resources.is_empty() {
            out.table(resource_table(&d.resources));
        }
    }
    out
}

/// The resource table: one row per resource, its figures and how it stands.
pub fn resource_table(rows: &[ResourceRow]) -> Table {
    let mut t = Table::new(
        &[
            "resource",
            "name",
            "clients",
            "utilisation",
            "saturation",
            "errors",
            "server threads' time",
            "full when",
            "state",
        ],
        "llrrrrrll",
    );
    let pct = |p: Option<f64>| p.map_or("–".to_string(), |p| format!("{p:.0}%"));
    for r in rows {
        t.row(vec![
            r.resource.to_string(),
            r.name.clone(),
            r.at_clients.to_string(),
            pct(r.utilisation_pct),
            r.saturation.map_or("–".into(), figure_text),
            r.errors.map_or("–".into(), figure_text),
            pct(r.time_share_pct),
            bounds_text(&r.thresholds),
            state_text(r.state).into(),
        ]);
    }
    t
}

/// `0.42 tasks waiting`.
pub fn figure_text(f: Figure) -> String {
    let v = f.value;
    match f.of {
        Quantity::ThreadsWaitingPerCpu => format!("{v:.2} threads waiting per CPU"),
        Quantity::ThreadsWaiting => format!("{v:.2} threads waiting for a CPU"),
        Quantity::TasksWaiting => format!("{v:.2} tasks waiting"),
        Quantity::RequestsWaiting => format!("{v:.1} requests waiting"),
        Quantity::ThrottledPeriodsPct => format!("{v:.0}% of periods throttled"),
        Quantity::DeviceQueue => format!("queue {v:.1}"),
        Quantity::PacketsHeldBack => format!("{v:.0} packets held back"),
        Quantity::PacketsLost => format!("{v:.0} packets lost or resent"),
    }
}

/// A row's thresholds as the table words them: `utilisation ≥ 80%, with ≥ 0.25 tasks waiting
/// where counted, or ≥ 50% of the threads' time`.
pub fn bounds_text(bounds: &[Bound]) -> String {
    let words: Vec<String> = bounds
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let text = bound_text(*b);
            match (i, b.threshold) {
                (0, _) | (_, Threshold::BlkioWaitingMin) => text,
                _ => format!("or {text}"),
            }
        })
        .collect();
    words.join(", ")
}

/// One threshold as the table words it: `utilisation ≥ 90%`.
pub fn bound_text(b: Bound) -> String {
    let v = svg::format_number(b.value);
    match b.threshold {
        Threshold::BusyPct | Threshold::IoBusyPct => format!("utilisation ≥ {v}%"),
        Threshold::ThreadBusyPct => format!("≥ {v}% of one CPU"),
        Threshold::WaitingPerCpu => format!("≥ {v} thread waiting per CPU"),
        Threshold::QuotaUsedPct => format!("≥ {v}% of the quota used"),
        Threshold::ThrottledPct => format!("≥ {v}% of periods throttled"),
        Threshold::NeighbourPct => {
            format!("others ≥ {v}% of busy CPUs the side waited for")
        }
        Threshold::WaitingShare => format!(
            "≥ {}% of the clients waiting",
            svg::format_number(100.0 * b.value)
        ),
        Threshold::BlkioWaitingMin => format!("with ≥ {v} tasks waiting where counted"),
        Threshold::WaitSharePct => format!("≥ {v}% of the threads' time"),
    }
}

fn state_text(s: State) -> &'static str {
    match s {
        State::Saturated => "**saturated**",
        State::Room => "room",
        State::NotObserved => "not observed",
    }
}

/// `stairbench analyze DIR`'s output: per series, the sentence, its limit, confidence and
/// evidence; then the comparisons' verdicts as the reports word them.
pub fn text(a: &RunAnalysis) -> String {
    let mut out = String::new();
    for d in &a.diagnosis {
        let _ = writeln!(out, "{}\n  {}", d.sentence, verdict(d));
        for n in &d.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        for e in &d.evidence {
            let _ = writeln!(out, "  - {}", evidence_text(e));
        }
    }
    for v in super::findings::verdict_sentences(a) {
        let _ = writeln!(out, "verdict: {v}");
    }
    if out.is_empty() {
        out.push_str("no series: the run directory has no steps\n");
    }
    out
}

/// One chart per series (the body of report.html's section): the server threads' CPU
/// (percent of one CPU) at each step, stacked by merged thread name. None when no step
/// recorded its threads.
pub fn thread_charts(steps: &[StepResult], a: &RunAnalysis) -> Option<String> {
    let mut body = String::new();
    for s in &a.series {
        let of_series: Vec<&StepResult> = steps
            .iter()
            .filter(|x| x.target == s.target && x.placement == s.placement)
            .filter(|x| x.status == StepStatus::Ok)
            .filter(|x| x.observation().is_some_and(|o| o.threads.is_some()))
            .collect();
        if let Some(chart) = thread_chart(&s.target, &s.placement, &of_series) {
            svg::figure(
                &mut body,
                &svg::responsive(|l| svg::stacked_bar_chart(&chart, l)),
                "CPU of the server's threads over each step's window, in percent of one CPU \
                 (100 = one CPU fully busy), stacked by thread name with numbered threads \
                 merged (reactor-0..7 → reactor), as in the flame graphs; one bar per step.",
            );
        }
    }
    (!body.is_empty()).then_some(body)
}

fn thread_chart(target: &str, placement: &str, steps: &[&StepResult]) -> Option<svg::StackedBars> {
    let groups: Vec<Vec<(String, f64)>> = steps.iter().map(|s| step_groups(s)).collect();
    if groups.iter().all(Vec::is_empty) {
        return None;
    }
    let mut totals: Vec<(String, f64)> = Vec::new();
    for (name, pct) in groups.iter().flatten() {
        match totals.iter_mut().find(|t| &t.0 == name) {
            Some(t) => t.1 += pct,
            None => totals.push((name.clone(), *pct)),
        }
    }
    totals.sort_by(|a, b| b.1.total_cmp(&a.1));
    let named: Vec<String> = totals
        .iter()
        .take(NAMED_GROUPS)
        .map(|t| t.0.clone())
        .collect();
    let mut layers: Vec<(String, Vec<f64>)> = named
        .iter()
        .map(|n| {
            let values = groups
                .iter()
                .map(|g| g.iter().filter(|x| &x.0 == n).map(|x| x.1).sum())
                .collect();
            (n.clone(), values)
        })
        .collect();
    if totals.len() > NAMED_GROUPS {
        let other = groups
            .iter()
            .map(|g| {
                g.iter()
                    .filter(|x| !named.contains(&x.0))
                    .map(|x| x.1)
                    .sum()
            })
            .collect();
        layers.push(("other".into(), other));
    }
    let repeated = steps.iter().any(|s| s.rep > 0);
    Some(svg::StackedBars {
        title: format!("{target} · {placement}: server threads' CPU"),
        x_label: if repeated {
            "clients (one bar per repetition)".into()
        } else {
            "clients (one bar per step)".into()
        },
        y_label: "% of one CPU".into(),
        categories: steps
            .iter()
            .map(|s| step_label(s, steps.iter().any(|s| s.rep > 0)))
            .collect(),
        layers,
        y_max: None,
        groups: if repeated {
            level_groups(steps)
        } else {
            Vec::new()
        },
        colors: Vec::new(),
    })
}

/// Runs of consecutive steps at one load level: (its label, how many steps), so that a level
/// is named once under its repetitions' bars.
fn level_groups(steps: &[&StepResult]) -> Vec<(String, usize)> {
    let mut groups: Vec<(String, usize)> = Vec::new();
    for s in steps {
        let level = level_label(s);
        match groups.last_mut() {
            Some((last, n)) if *last == level => *n += 1,
            _ => groups.push((level, 1)),
        }
    }
    groups
}

fn level_label(s: &StepResult) -> String {
    match s.rate_rps {
        Some(r) => format!("{}/s", svg::format_number(r)),
        None => s.clients.to_string(),
    }
}

/// A bar's label: its load, and its repetition when the series has several.
fn step_label(s: &StepResult, repeated: bool) -> String {
    let load = level_label(s);
    if repeated {
        format!("{load} {}", crate::record::steps::rep_label(s.rep))
    } else {
        load
    }
}

/// (merged thread name, % of one CPU) of a step's server threads.
fn step_groups(s: &StepResult) -> Vec<(String, f64)> {
    s.observation()
        .and_then(|o| o.threads.as_ref())
        .map(|t| {
            t.groups
                .iter()
                .map(|g| (g.name.clone(), g.cpu_pct))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::diagnosis::resources::Resource;
    use crate::analyze::diagnosis::{Confidence, Limit};
    use serde_json::json;

    fn diagnosis() -> Diagnosis {
        Diagnosis {
            target: "redis".into(),
            placement: "separated".into(),
            knee_clients: Some(4),
            limit: Limit::OneThread,
            confidence: Confidence::High,
            evidence: vec![Evidence {
                metric: crate::analyze::diagnosis::Metric::BusiestThreadCpuPct,
                value: 97.0,
                at_clients: Some(8),
                note: "thread redis-server, % of one CPU".into(),
            }],
            sentence: "redis/separated stops scaling at 4 clients: its busiest thread (redis-server) is 97% of one CPU: a single-thread limit.".into(),
            notes: Vec::new(),
            resources: vec![ResourceRow {
                resource: Resource::BusiestThread,
                name: "redis-server".into(),
                utilisation_pct: Some(97.0),
                saturation: None,
                errors: None,
                time_share_pct: None,
                thresholds: vec![Threshold::ThreadBusyPct.into()],
                state: State::Saturated,
                at_clients: 8,
            }, ResourceRow {
                resource: Resource::SocketQueues,
                name: "a|b".into(),
                utilisation_pct: None,
                saturation: Some(Figure { value: 0.25, of: Quantity::RequestsWaiting }),
                errors: None,
                time_share_pct: None,
                thresholds: vec![Threshold::WaitingShare.into()],
                state: State::Room,
                at_clients: 8,
            }],
        }
    }

    #[test]
    fn sentences_come_verbatim_with_their_verdict() {
        let a = RunAnalysis {
            diagnosis: vec![diagnosis()],
            ..RunAnalysis::default()
        };
        let md = doc(&a).to_markdown();
        assert!(md.starts_with("## Why it stops scaling\n\n**redis/separated stops scaling at 4 clients: its busiest thread (redis-server) is 97% of one CPU: a single-thread limit.**\n\nlimit one_thread, confidence high.\n\n"), "{md}");
        // The table instead of the evidence paragraph, each threshold in words.
        assert!(md.contains("| its busiest thread | redis-server | 8 | 97% | – | – | – | ≥ 90% of one CPU | **saturated** |"), "{md}");
        assert!(md.contains("| its sockets' queues | a\\|b | 8 | – | 0.2 requests waiting | – | – | ≥ 25% of the clients waiting | room |"), "{md}");
        assert!(!md.contains("busiest_thread_cpu_pct"), "{md}");
        // A storage row's three thresholds read as one condition.
        let disk: Vec<Bound> = [
            Threshold::IoBusyPct,
            Threshold::BlkioWaitingMin,
            Threshold::WaitSharePct,
        ]
        .map(Bound::from)
        .to_vec();
        assert_eq!(
            bounds_text(&disk),
            "utilisation ≥ 80%, with ≥ 0.25 tasks waiting where counted, or ≥ 50% of the threads' time"
        );
        let t = text(&a);
        assert!(
            t.contains(
                "  limit one_thread, confidence high\n  - busiest_thread_cpu_pct = 97 at 8 clients"
            ),
            "{t}"
        );
        let html = doc(&a).to_html().html;
        assert!(
            html.contains("<p><strong>redis/separated stops scaling at 4 clients"),
            "{html}"
        );
        assert!(
            html.contains(
                "<td>redis-server</td><td class=\"num\">8</td><td class=\"num\">97%</td>"
            ),
            "{html}"
        );
        assert!(doc(&RunAnalysis::default()).is_empty());
    }

    #[test]
    fn thread_chart_stacks_merged_names_per_step() {
        let step = |clients: usize, reactor: f64| {
            let mut s = StepResult::empty(format!("s{clients}"), "t", "p", clients, 0);
            s.status = StepStatus::Ok;
            let group = |name: &str, cpu_pct: f64| {
                json!({"name": name, "threads": 1, "cpu_pct": cpu_pct,
                    "max_thread_cpu_pct": cpu_pct, "run_delay_pct": null,
                    "voluntary_cs": 0, "involuntary_cs": 0})
            };
            let server =
                json!({"threads": {"groups": [group("reactor", reactor), group("main", 1.0)]}});
            s.server = serde_json::from_value(server).unwrap();
            s
        };
        let steps = [step(1, 40.0), step(2, 80.0)];
        let refs: Vec<&StepResult> = steps.iter().collect();
        let chart = thread_chart("t", "p", &refs).unwrap();
        assert_eq!(chart.categories, vec!["1", "2"]);
        assert!(
            chart.groups.is_empty(),
            "one step per level: one label per bar"
        );
        assert_eq!(chart.layers[0], ("reactor".to_string(), vec![40.0, 80.0]));
        assert_eq!(chart.layers[1], ("main".to_string(), vec![1.0, 1.0]));
        let none = [StepResult::empty("x".into(), "t", "p", 1, 0)];
        assert!(thread_chart("t", "p", &none.iter().collect::<Vec<_>>()).is_none());
        // With repetitions, every bar names its own, numbered from 0 as everywhere.
        let mut again = step(1, 40.0);
        again.rep = 1;
        let reps = [&steps[0], &again];
        let chart = thread_chart("t", "p", &reps).unwrap();
        assert_eq!(chart.categories, vec!["1 rep 0", "1 rep 1"]);
    }

    #[test]
    fn repetitions_share_their_level_s_label() {
        let mut steps = Vec::new();
        for clients in [1, 2, 4, 8, 16] {
            for rep in 0..5 {
                let mut s = StepResult::empty(format!("s{clients}.{rep}"), "t", "p", clients, rep);
                s.status = StepStatus::Ok;
                let server = json!({"threads": {"groups": [{"name": "w", "threads": 1,
                    "cpu_pct": 50.0, "max_thread_cpu_pct": 50.0, "run_delay_pct": null,
                    "voluntary_cs": 0, "involuntary_cs": 0}]}});
                s.server = serde_json::from_value(server).unwrap();
                steps.push(s);
            }
        }
        let refs: Vec<&StepResult> = steps.iter().collect();
        let chart = thread_chart("t", "p", &refs).unwrap();
        assert_eq!(
            chart.categories[6], "2 rep 1",
            "each bar keeps its name (its tooltip)"
        );
        let levels: Vec<(&str, usize)> =
            chart.groups.iter().map(|(l, n)| (l.as_str(), *n)).collect();
        assert_eq!(levels, [("1", 5), ("2", 5), ("4", 5), ("8", 5), ("16", 5)]);
        assert_eq!(chart.x_label, "clients (one bar per repetition)");
        // Under the bars, each level once, not "2 #22 #32 #42 #5".
        for layout in [svg::Layout::Wide, svg::Layout::Narrow] {
            let drawn = svg::stacked_bar_chart(&chart, layout);
            let labels: Vec<&str> = drawn
                .split("class=\"tick x\"")
                .skip(1)
                .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once('<')))
                .map(|(v, _)| v)
                .collect();
            assert_eq!(labels, ["1", "2", "4", "8", "16"], "{layout:?}");
        }
    }
}
