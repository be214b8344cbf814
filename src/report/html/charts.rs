//! The page's charts, one body per chart section: throughput and latency per target, CPU per
//! request per series, the per-core heat map and the latency histograms (inline SVG).

use std::fmt::Write as _;

use super::{CoreHeatMap, Point, Series, StepHistogram, UslCurve};
use crate::report::svg::{self, escape, figure, Axis, LineChart, LineSeries, Scale};

/// Targets in order of first appearance.
fn targets(series: &[Series]) -> Vec<&str> {
    let mut names: Vec<&str> = Vec::new();
    for s in series {
        if !names.contains(&s.target.as_str()) {
            names.push(&s.target);
        }
    }
    names
}

/// A point's label on a chart: its client count, or its offered rate in open loop.
fn point_label(p: &Point) -> String {
    match p.rate_rps {
        Some(r) => format!("{}/s", svg::format_number(r)),
        None => svg::format_number(p.clients),
    }
}

/// Where a point sits along a load axis: its offered rate in open loop, else its clients.
fn load_x(p: &Point) -> f64 {
    p.rate_rps.unwrap_or(p.clients)
}

/// Per target, throughput against clients (or offered rate), with the fitted USL dashed.
pub(super) fn throughput(page: &mut String, series: &[Series]) {
    for target in targets(series) {
        let of_target: Vec<&Series> = series.iter().filter(|s| s.target == target).collect();
        let open = of_target.iter().any(|s| s.open_loop());
        let mut lines = Vec::new();
        for (i, s) in of_target.iter().enumerate() {
            lines.push(LineSeries {
                name: s.legend(),
                points: s
                    .points
                    .iter()
                    .map(|p| (load_x(p), p.throughput_rps))
                    .collect(),
                color: i,
                dashed: false,
                markers: true,
                hollow: saturated(s),
                labels: Vec::new(),
                intervals: s.points.iter().map(|p| p.throughput_ci95_rps).collect(),
                crosses: false,
            });
            if let Some(usl) = s.usl.filter(|_| !open) {
                lines.push(usl_line(s, usl, i));
            }
            lines.extend(disturbed_crosses(s, i, |p| (load_x(p), p.throughput_rps)));
        }
        let (x, caption) = if open {
            (
                Axis::with_scale("offered rate (requests/s)", Scale::Log10),
                "One line per placement, one point per offered rate; whiskers: the 95% confidence interval of the mean over the repetitions; hollow markers: the load generator was saturated (not the server's limit); ×: a disturbed step (other processes on its CPUs), shown but left out of the analysis.",
            )
        } else {
            (
                Axis::with_scale("clients", Scale::Log2),
                "One line per placement; whiskers: the 95% confidence interval of the mean over the repetitions; dashed: the fitted Universal Scalability Law, drawn only where its fit is a finding (see the scalability table); hollow markers: the load generator was saturated (not the server's limit); ×: a disturbed step (other processes on its CPUs), shown but left out of the analysis.",
            )
        };
        let chart = LineChart {
            title: format!("{target}: throughput"),
            x,
            y: Axis::linear("requests/s"),
            series: lines,
        };
        figure(
            page,
            &svg::responsive(|l| svg::line_chart(&chart, l)),
            caption,
        );
    }
}

/// The USL curve sampled along the series' client range (log-spaced, so it is smooth on a
/// log axis).
pub(super) fn usl_line(s: &Series, usl: UslCurve, color: usize) -> LineSeries {
    let lo = s
        .points
        .iter()
        .map(|p| p.clients)
        .fold(f64::INFINITY, f64::min);
    let hi = s.points.iter().map(|p| p.clients).fold(0.0, f64::max);
    let points = if lo.is_finite() && lo > 0.0 && hi >= lo {
        (0..=48)
            .map(|i| {
                let n = lo * (hi / lo).powf(i as f64 / 48.0);
                (n, usl.throughput(n))
            })
            .collect()
    } else {
        Vec::new()
    };
    LineSeries {
        name: format!("{} (USL fit)", s.placement),
        points,
        color,
        dashed: true,
        markers: false,
        hollow: Vec::new(),
        labels: Vec::new(),
        ..Default::default()
    }
}

/// The series' disturbed steps as crosses at `at(point)`, in its colour; none when it has none.
fn disturbed_crosses(
    s: &Series,
    color: usize,
    at: impl Fn(&Point) -> (f64, f64),
) -> Option<LineSeries> {
    (!s.disturbed.is_empty()).then(|| LineSeries {
        name: format!("{} disturbed (left out)", s.legend()),
        points: s.disturbed.iter().map(at).collect(),
        color,
        crosses: true,
        ..LineSeries::default()
    })
}

fn saturated(s: &Series) -> Vec<bool> {
    s.points.iter().map(|p| p.client_saturated).collect()
}

/// Per target, median and p99 latency against throughput, each point labelled with its load.
pub(super) fn latency(page: &mut String, series: &[Series]) {
    for target in targets(series) {
        let mut lines = Vec::new();
        for (i, s) in series.iter().filter(|s| s.target == target).enumerate() {
            for (pct, dashed) in [("p50", false), ("p99", true)] {
                lines.push(LineSeries {
                    name: format!("{} {pct}", s.legend()),
                    points: s
                        .points
                        .iter()
                        .map(|p| {
                            let lat = if dashed { p.p99_us } else { p.p50_us };
                            (p.throughput_rps, lat)
                        })
                        .collect(),
                    color: i,
                    dashed,
                    markers: true,
                    hollow: saturated(s),
                    // One label per point is enough: on the p99 line, above the median's.
                    labels: if dashed {
                        s.points.iter().map(point_label).collect()
                    } else {
                        Vec::new()
                    },
                    // The repetitions' own p99s, lowest to highest.
                    intervals: if dashed {
                        s.points.iter().map(|p| p.p99_reps_us).collect()
                    } else {
                        Vec::new()
                    },
                    crosses: false,
                });
            }
            lines.extend(disturbed_crosses(s, i, |p| (p.throughput_rps, p.p99_us)));
        }
        let chart = LineChart {
            title: format!("{target}: latency vs throughput"),
            x: Axis::linear("requests/s"),
            y: Axis::with_scale("latency (µs, log scale)", Scale::Log10),
            series: lines,
        };
        figure(
            page,
            &svg::responsive(|l| svg::line_chart(&chart, l)),
            "Each point is one load level, labelled with its clients (or offered rate); solid: median, dashed: 99th percentile, both from the repetitions' histograms merged; whiskers: the lowest to the highest p99 of the single repetitions; hollow markers: the load generator was saturated; ×: a disturbed step's p99, shown but left out of the analysis.",
        );
    }
}

/// Per series, server CPU per request (user and sys stacked), one scale per target.
pub(super) fn cpu(page: &mut String, series: &[Series]) {
    for target in targets(series) {
        let of_target: Vec<&Series> = series.iter().filter(|s| s.target == target).collect();
        // One y-scale for a target's charts, so its placements compare at a glance.
        let y_max = of_target
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.cpu_us_per_req_user.unwrap_or(0.0) + p.cpu_us_per_req_sys.unwrap_or(0.0))
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max);
        for s in of_target {
            cpu_chart(page, s, y_max);
        }
    }
}

fn cpu_chart(page: &mut String, s: &Series, y_max: f64) {
    if !s.points.iter().any(|p| p.cpu_us_per_req_user.is_some()) {
        let _ = write!(
            page,
            "<p class=\"note\">{} · {}: no CPU figures (no server process was watched).</p>",
            escape(&s.target),
            escape(&s.placement)
        );
        return;
    }
    let chart = svg::StackedBars {
        title: format!("{} · {}: CPU per request", s.target, s.legend()),
        x_label: if s.open_loop() {
            "offered rate (requests/s)".into()
        } else {
            "clients".into()
        },
        y_label: "server CPU µs per request".into(),
        categories: s.points.iter().map(point_label).collect(),
        layers: vec![
            ("user".into(), cpu_values(s, |p| p.cpu_us_per_req_user)),
            ("sys".into(), cpu_values(s, |p| p.cpu_us_per_req_sys)),
        ],
        y_max: Some(y_max),
        groups: Vec::new(),
        colors: Vec::new(),
    };
    figure(
        page,
        &svg::responsive(|l| svg::stacked_bar_chart(&chart, l)),
        "Server CPU time per completed request, split into user and kernel time; the charts of one target share their scale.",
    );
}

fn cpu_values(s: &Series, f: fn(&Point) -> Option<f64>) -> Vec<f64> {
    s.points.iter().map(|p| f(p).unwrap_or(0.0)).collect()
}

/// Per-core busy % of one step over its seconds (a sentence for one core).
pub(super) fn heat_map(page: &mut String, heat: Option<&CoreHeatMap>) {
    let Some(h) = heat else {
        page.push_str("<p class=\"note\">No per-second per-core figures in this run.</p>");
        return;
    };
    if h.cores.len() == 1 {
        single_core_sentence(page, h);
        return;
    }
    let chart = svg::HeatMap {
        title: h.label.clone(),
        x_label: "seconds into the measured window".into(),
        columns: h.seconds.iter().map(|s| svg::format_number(*s)).collect(),
        rows: h.cores.clone(),
        values: h.busy_pct.clone(),
    };
    figure(
        page,
        &svg::responsive(|l| svg::heat_map(&chart, l)),
        &format!("Step {}: busy % of each core, second by second.", h.step_id),
    );
}

/// One core is a row of numbers, not a map: say them.
fn single_core_sentence(page: &mut String, h: &CoreHeatMap) {
    let values: Vec<f64> = h.busy_pct[0]
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .collect();
    let (lo, hi) = values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(*v), b.max(*v))
        });
    let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
    let text = if values.is_empty() {
        format!("{}: one core, no busy figures.", h.label)
    } else {
        format!(
            "{}: one core ({}), busy {mean:.0}% on average over {} ({lo:.0}–{hi:.0}%).",
            h.label,
            h.cores[0],
            if values.len() == 1 {
                "1 second".to_string()
            } else {
                format!("{} seconds", values.len())
            }
        )
    };
    let _ = write!(page, "<p>{}</p>", escape(&text));
}

/// Each step's latency histogram, folded but for the first.
pub(super) fn histograms(page: &mut String, histograms: &[StepHistogram]) {
    if histograms.is_empty() {
        page.push_str("<p class=\"note\">No latency histograms in this run.</p>");
    }
    for (i, h) in histograms.iter().enumerate() {
        let total: u64 = h.buckets.iter().map(|b| b.count).sum();
        let chart = svg::HistogramBars {
            title: h.label.clone(),
            x_label: "latency (µs, log scale)".into(),
            buckets: h
                .buckets
                .iter()
                .map(|b| (b.lo_us, b.hi_us, b.count))
                .collect(),
        };
        // The first one is open so that the page shows what the others look like.
        let open = if i == 0 { " open" } else { "" };
        let _ = write!(
            page,
            "<details{open}><summary>{} ({} requests)</summary>",
            escape(&h.label),
            total
        );
        figure(
            page,
            &svg::responsive(|l| svg::histogram(&chart, l)),
            &format!("Step {}", h.step_id),
        );
        page.push_str("</details>");
    }
}
