//! `stairbench history FILE --html OUT`: one offline page, per series each figure over the
//! runs (mean, and mean ± its repetitions' standard deviation dashed), each change point drawn
//! as a vertical line named in the legend. Drawn with the report's chart helpers, so it reads
//! at 390 px as the report does.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::svg::{self, Axis, LineChart, LineSeries};
use crate::analyze::history::HistoryChange;
use crate::record::history::{RunStatus, SeriesKey, SeriesPoint, StoredRun};

/// The report's chart styles (report/html/page.rs) and a plain page around them.
const STYLE: &str = "svg.chart { display: block; width: 100%; height: auto; background: #fff; }
svg .point-label { font-size: 11px; fill: #555; }
svg .chart-title { font-size: 14px; font-weight: 600; }
svg .tick { font-size: 11px; fill: #444; }
svg .axis-label { font-size: 12px; fill: #222; }
svg .legend-text { font-size: 11px; fill: #222; }
svg .no-data { font-size: 14px; fill: #888; }
svg .grid line { stroke: #e6e6e6; stroke-width: 1; }
svg .frame { fill: none; stroke: #999; }
body { font-family: sans-serif; margin: 1em auto; max-width: 60em; padding: 0 0.5em; }
.chart-box { overflow-x: auto; }
.chart-narrow { display: none; }
.chart-narrow svg.chart { min-width: 360px; max-width: 560px; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { padding: 0.2em 0.5em; border-bottom: 1px solid #ddd; text-align: left; }
@media screen and (max-width: 799px) { .chart-wide { display: none; } .chart-narrow { display: block; } }";

/// The whole page.
pub fn page(
    runs: &[StoredRun],
    series: &BTreeMap<SeriesKey, Vec<SeriesPoint>>,
    changes: &[HistoryChange],
) -> String {
    let mut body = format!(
        "<h1>History: {} runs, {} change points</h1>",
        runs.len(),
        changes.len()
    );
    for (key, points) in series {
        let here: Vec<&HistoryChange> = changes
            .iter()
            .filter(|c| {
                c.target == key.target
                    && c.placement == key.placement
                    && c.clients == key.clients
                    && c.figure == key.figure
            })
            .collect();
        let chart = chart(key, points, runs, &here);
        body += &svg::responsive(|layout| svg::line_chart(&chart, layout));
    }
    body += &runs_table(runs);
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>stairbench history</title><style>{STYLE}</style></head><body>{body}</body></html>\n"
    )
}

fn chart(
    key: &SeriesKey,
    points: &[SeriesPoint],
    runs: &[StoredRun],
    changes: &[&HistoryChange],
) -> LineChart {
    let ok: Vec<&SeriesPoint> = points
        .iter()
        .filter(|p| runs[p.run].status == RunStatus::Ok)
        .collect();
    let line =
        |name: &str, color: usize, dashed: bool, f: &dyn Fn(&SeriesPoint) -> f64| LineSeries {
            name: name.into(),
            points: ok.iter().map(|p| (p.run as f64, f(p))).collect(),
            color,
            dashed,
            markers: !dashed,
            hollow: vec![],
            labels: vec![],
            ..Default::default()
        };
    let mut lines = vec![line("mean", 0, false, &|p| p.mean)];
    // The repetitions' spread, where a run had some.
    if ok.iter().any(|p| p.stdev > 0.0) {
        lines.push(line("mean + stdev", 0, true, &|p| p.mean + p.stdev));
        lines.push(line("mean − stdev", 0, true, &|p| p.mean - p.stdev));
    }
    let (lo, hi) = ok.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.mean - p.stdev), hi.max(p.mean + p.stdev))
    });
    for c in changes {
        lines.push(LineSeries {
            name: format!("change at run {} ({:+.1}%)", c.index, c.change_pct),
            points: vec![(c.index as f64 - 0.5, lo), (c.index as f64 - 0.5, hi)],
            color: if c.regression { 3 } else { 2 },
            dashed: true,
            markers: false,
            hollow: vec![],
            labels: vec![],
            ..Default::default()
        });
    }
    LineChart {
        title: format!(
            "{}/{}/{} clients: {}",
            key.target,
            key.placement,
            key.clients,
            key.figure.name()
        ),
        x: Axis::linear("run (oldest 0)"),
        y: Axis::linear(key.figure.name()),
        series: lines,
    }
}

/// The runs with their ids, status and labels (what a hover would show, readable on a phone).
fn runs_table(runs: &[StoredRun]) -> String {
    let mut out = String::from(
        "<h2>Runs</h2><table><tr><th>#</th><th>run</th><th>status</th><th>labels</th></tr>",
    );
    for (i, r) in runs.iter().enumerate() {
        let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = write!(
            out,
            "<tr><td>{i}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            svg::escape(&r.run_id),
            r.status.name(),
            svg::escape(&labels.join(" "))
        );
    }
    out + "</table>"
}
