//! Where a request's time goes: per series and level, the analysis' time budget
//! ([`crate::analyze::budget`]) as a table of a request's mean latency in parts (report.md and
//! report.html), and report.html's charts of where each side's threads spent the windows (one
//! stacked bar per level, thread states as layers).

use super::doc::{Doc, Table};
use super::svg;
use crate::analyze::budget::RequestBudget;
use crate::analyze::run::{LoadPoint, RunAnalysis, SeriesAnalysis};
use crate::record::observed::StateSeconds;
use crate::units::duration_us;

/// One state's seconds of a `StateSeconds`.
type StateOf = fn(&StateSeconds) -> f64;

/// The thread states in the order they are stacked and listed, with their names.
const STATES: [(&str, StateOf); 9] = [
    ("on CPU, user", |s| s.on_cpu_user_s),
    ("on CPU, kernel", |s| s.on_cpu_sys_s),
    ("waiting for a CPU", |s| s.runqueue_s),
    ("storage", |s| s.storage_s),
    ("lock", |s| s.lock_s),
    ("socket (a peer)", |s| s.socket_s),
    ("paging", |s| s.paging_s),
    ("other", |s| s.other_s),
    ("waiting for work", |s| s.idle_s),
];

/// The series' levels that have a budget.
fn budgets(s: &SeriesAnalysis) -> Vec<(&LoadPoint, &RequestBudget)> {
    s.points
        .iter()
        .filter_map(|p| Some((p, p.budget.as_ref()?)))
        .collect()
}

/// "8 clients" or "2000/s".
fn level(p: &LoadPoint) -> String {
    match p.rate_rps {
        Some(r) => format!("{}/s", svg::format_number(r)),
        None => svg::format_number(p.clients as f64),
    }
}

/// The section "Where a request's time goes": per series with thread states, a row per level
/// with the mean latency and its parts; empty when no level sampled thread states.
pub fn doc(a: &RunAnalysis) -> Doc {
    let mut out = Doc::new();
    let tables: Vec<(&SeriesAnalysis, Table)> = a
        .series
        .iter()
        .filter_map(|s| Some((s, table(s)?)))
        .collect();
    if tables.is_empty() {
        return out;
    }
    out.heading("Where a request's time goes");
    out.paragraph(
        "Each level's mean latency in parts, per request: the load generator's own work, the \
         server threads' time in each state (their thread-seconds in the window divided by its \
         requests; waiting for work is no part of a request), and what neither side's threads \
         hold (the network, the kernel's socket queues). With one request in flight the parts \
         are that request's own; with more, threads serve several requests at once and a \
         background thread's time counts in too: a level marked \"shared\" has parts that add \
         up to more than its latency, read them as shares.",
    );
    for (s, t) in tables {
        out.subheading(format!("{} · {}", s.target, s.placement));
        out.table(t);
    }
    out
}

/// A series' table, None when none of its levels has a budget.
fn table(s: &SeriesAnalysis) -> Option<Table> {
    let rows = budgets(s);
    if rows.is_empty() {
        return None;
    }
    let mut header = vec![
        "load".to_string(),
        "mean latency".into(),
        "load generator".into(),
    ];
    header.extend(STATES[..8].iter().map(|(n, _)| format!("server: {n}")));
    header.push("outside both".into());
    let mut t = Table::new(&header, &"r".repeat(header.len()));
    for (p, b) in rows {
        t.row(row(p, b));
    }
    Some(t)
}

fn row(p: &LoadPoint, b: &RequestBudget) -> Vec<String> {
    let us = |s: f64| duration_us(s * 1e6);
    let mut cells = vec![level(p)];
    match &b.latency {
        Some(parts) => {
            let shared = if parts.overlap { " (shared)" } else { "" };
            cells.push(format!("{}{shared}", us(parts.latency_s)));
            cells.push(us(parts.client_s));
            cells.extend(STATES[..8].iter().map(|(_, f)| us(f(&parts.server))));
            cells.push(us(parts.outside_s));
        }
        // No latency to split: the server's time per request alone.
        None => {
            cells.extend(["–".to_string(), "–".to_string()]);
            let server = b.server_per_req.unwrap_or_default();
            cells.extend(STATES[..8].iter().map(|(_, f)| us(f(&server))));
            cells.push("–".into());
        }
    }
    cells
}

/// report.html's charts: per series with thread states, one for the server's threads and one
/// for the load generator's, a stacked bar per level of the threads busy in each state on
/// average over the windows. None when no level sampled thread states.
pub fn charts(a: &RunAnalysis) -> Option<String> {
    let mut body = String::new();
    for s in &a.series {
        let levels = budgets(s);
        if levels.is_empty() {
            continue;
        }
        for (side, window) in [
            (
                "server threads",
                (|b| b.server_window) as fn(&RequestBudget) -> _,
            ),
            ("load generator threads", |b| b.client_window),
        ] {
            if let Some(chart) = chart(s, side, &levels, window) {
                figure(&mut body, &chart);
            }
        }
    }
    (!body.is_empty()).then_some(body)
}

fn figure(body: &mut String, chart: &svg::StackedBars) {
    svg::figure(
        body,
        &svg::responsive(|l| svg::stacked_bar_chart(chart, l)),
        "Each bar is one level: its threads' time in each state over the level's windows, \
             as threads on average (2 = two threads the whole window). On a CPU and waiting \
             for one are exact (schedstat); the kinds of waiting share each thread's time off a \
             CPU by its samples.",
    );
}

fn chart(
    s: &SeriesAnalysis,
    side: &str,
    levels: &[(&LoadPoint, &RequestBudget)],
    window: fn(&RequestBudget) -> Option<StateSeconds>,
) -> Option<svg::StackedBars> {
    // Threads on average: thread-seconds over the window's seconds.
    let per_level: Vec<Option<StateSeconds>> = levels
        .iter()
        .map(|(_, b)| window(b).map(|w| w.scaled(1.0 / b.window_s.max(f64::MIN_POSITIVE))))
        .collect();
    if per_level.iter().all(Option::is_none) {
        return None;
    }
    // Each state keeps its colour (its place in STATES) in every chart, whichever it shows.
    let (colors, layers): (Vec<usize>, Vec<(String, Vec<f64>)>) = STATES
        .iter()
        .enumerate()
        .map(|(k, (name, f))| {
            let values: Vec<f64> = per_level
                .iter()
                .map(|w| w.as_ref().map_or(0.0, f))
                .collect();
            (k, (name.to_string(), values))
        })
        .filter(|(_, (_, v))| v.iter().any(|x| *x > 0.0))
        .unzip();
    Some(svg::StackedBars {
        title: format!(
            "{} · {}: where the {side}' time went",
            s.target, s.placement
        ),
        x_label: if s.open_loop {
            "offered rate (requests/s)".into()
        } else {
            "clients".into()
        },
        y_label: "threads, on average".into(),
        categories: levels.iter().map(|(p, _)| level(p)).collect(),
        layers,
        y_max: None,
        groups: Vec::new(),
        colors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::run::analyze;
    use crate::analyze::run::tests::ok_step;
    use crate::record::observed::{Observation, ThreadStateGroup, ThreadStates};
    use crate::record::run::RunData;
    use crate::record::steps::StepResult;

    fn states(seconds: StateSeconds) -> ThreadStates {
        ThreadStates {
            groups: vec![ThreadStateGroup {
                seconds,
                threads: 1,
                ..ThreadStateGroup::default()
            }],
            ..ThreadStates::default()
        }
    }

    /// A 1 s repetition at one client: 100 requests of 10 ms, the server's one thread 0.2 s
    /// on a CPU and `storage_s` in fsync, idle the rest; the load generator 0.1 s on a CPU.
    fn rep(rep: usize, storage_s: f64) -> StepResult {
        let mut s = ok_step(1, 100.0, 10_000.0);
        s.id = format!("t.p.c1.r{rep}");
        s.rep = rep;
        s.load.as_mut().unwrap().requests = 100;
        let server = StateSeconds {
            on_cpu_user_s: 0.2,
            storage_s,
            idle_s: 0.8 - storage_s,
            ..StateSeconds::default()
        };
        let client = StateSeconds {
            on_cpu_user_s: 0.1,
            socket_s: 0.9,
            ..StateSeconds::default()
        };
        s.server = Some(
            Observation {
                window_s: 1.0,
                thread_states: Some(states(server)),
                client_thread_states: Some(states(client)),
                ..Observation::default()
            }
            .into(),
        );
        s
    }

    /// Two repetitions, 5 ms and 7 ms of fsync a request: the level's budget sums both
    /// windows, so a request spends 6 ms on storage, 2 ms on a CPU, 1 ms in the load
    /// generator and 1 ms outside both. Catches a budget taken from one repetition only
    /// (5 or 7 ms), per-request figures divided by one window's requests (12 ms), a section
    /// shown without thread states, and the chart's bars in thread-seconds rather than
    /// threads on average (0.4 thread-seconds on a CPU over 2 s of windows: 0.2, not 0.4).
    #[test]
    fn a_levels_latency_is_split_over_both_repetitions() {
        let run = RunData {
            steps: vec![rep(0, 0.5), rep(1, 0.7)],
            ..Default::default()
        };
        let a = analyze(&run);
        let md = doc(&a).to_markdown();
        assert!(md.contains("## Where a request's time goes"), "{md}");
        let row = md.lines().find(|l| l.starts_with("| 1 ")).expect(&md);
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        // load, latency, generator, user, kernel, cpu wait, storage, lock, socket, paging,
        // other, outside
        assert_eq!(cells[1..4], ["1", "10.0 ms", "1000 µs"], "{row}");
        assert_eq!(cells[4], "2000 µs", "{row}");
        assert_eq!(cells[7], "6000 µs", "{row}");
        assert_eq!(cells[12], "1000 µs", "{row}");
        let html = charts(&a).unwrap();
        assert!(
            html.contains("where the server threads&#39; time went"),
            "{html}"
        );
        assert!(
            html.contains("<title>1: on CPU, user 0.2</title>"),
            "{html}"
        );
        assert!(html.contains("<title>1: storage 0.6</title>"), "{html}");
        // Each state its own colour in every chart, whichever states the chart shows (by
        // position, storage took the kernel's colour here and idle the run queue's).
        for (state, colour) in [("storage", "#CC79A7"), ("waiting for work", "#999999")] {
            assert!(
                html.contains(&format!("fill=\"{colour}\"><title>1: {state} ")),
                "{state}: {html}"
            );
        }
        assert!(
            !html.contains("lock"),
            "a state no thread was in is no layer: {html}"
        );
        // Without thread states: no section, no chart.
        let bare = RunData {
            steps: vec![ok_step(1, 100.0, 10_000.0)],
            ..Default::default()
        };
        let a = analyze(&bare);
        assert!(doc(&a).is_empty() && charts(&a).is_none());
    }
}
