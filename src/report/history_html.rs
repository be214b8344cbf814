//! `stairbench history FILE --html OUT`: one offline page, per series each figure over the
//! runs (mean, and mean ± its repetitions' standard deviation dashed), each change point drawn
//! as a vertical line named in the legend. Drawn with the report's chart helpers, so it reads
//! at 390 px as the report does.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::svg::{self, Axis, LineChart, LineSeries};
use crate::analyze::history::HistoryChange;
use crate::record::history::{RunStatus, SeriesKey, SeriesPoint, StoredRun};
use crate::record::rundir::utc_time;

/// The page's own style, around the charts' ([`svg::chart_css`]).
const STYLE: &str = "body { font-family: sans-serif; margin: 1em auto; max-width: 60em; padding: 0 0.5em; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { padding: 0.2em 0.5em; border-bottom: 1px solid #ddd; text-align: left; }
";

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
        let tips = [mean_tips(key, points, runs)];
        body += &svg::responsive(|layout| svg::line_chart_with_tips(&chart, &tips, layout));
    }
    body += &runs_table(runs);
    format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>stairbench history</title><style>{}{STYLE}</style></head><body>{body}</body></html>\n",
        svg::chart_css()
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

/// The hover text of each `ok` point of the mean line (the order `chart` draws them): the run's
/// position, id and start time, its labels, and the figure's mean ± stdev.
fn mean_tips(key: &SeriesKey, points: &[SeriesPoint], runs: &[StoredRun]) -> Vec<String> {
    points
        .iter()
        .filter(|p| runs[p.run].status == RunStatus::Ok)
        .map(|p| {
            let run = &runs[p.run];
            let labels: Vec<String> = run.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let spread = if p.n > 1 {
                format!(" ± {} (n={})", svg::format_number(p.stdev), p.n)
            } else {
                String::new()
            };
            format!(
                "run {} ({}), {}\n{}\n{}: {}{spread}",
                p.run,
                run.run_id,
                utc_time(run.started_unix_s),
                if labels.is_empty() {
                    "no labels".into()
                } else {
                    labels.join(" ")
                },
                key.figure.name(),
                svg::format_number(p.mean)
            )
        })
        .collect()
}

/// The runs with their ids, start, status and labels, and where they ran (what a hover shows,
/// readable on a phone): the host in a column only when the runs' hosts differ.
fn runs_table(runs: &[StoredRun]) -> String {
    let host = |r: &StoredRun| {
        format!(
            "{}, {} CPUs, {}, stairbench {}",
            r.host.host, r.host.cpus, r.host.kernel, r.host.stairbench_version
        )
    };
    let hosts: BTreeSet<String> = runs.iter().map(host).collect();
    let one_host = hosts.len() == 1;
    let mut out = String::from("<h2 id=\"runs\">Runs</h2>");
    if let (true, Some(h)) = (one_host, hosts.first()) {
        let _ = write!(out, "<p>Every run on {}.</p>", svg::escape(h));
    }
    out += "<div class=\"chart-box\"><table><tr><th>#</th><th>run</th><th>started (UTC)</th>\
            <th>status</th><th>labels</th>";
    if !one_host {
        out += "<th>host</th>";
    }
    out += "</tr>";
    for (i, r) in runs.iter().enumerate() {
        let labels: Vec<String> = r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let status = match &r.status_reason {
            Some(why) => format!("{}: {why}", r.status.name()),
            None => r.status.name().to_string(),
        };
        let _ = write!(
            out,
            "<tr><td>{i}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
            svg::escape(&r.run_id),
            utc_time(r.started_unix_s).trim_end_matches(" UTC"),
            svg::escape(&status),
            svg::escape(&labels.join(" "))
        );
        if !one_host {
            let _ = write!(out, "<td>{}</td>", svg::escape(&host(r)));
        }
        out += "</tr>";
    }
    out + "</table></div>"
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The history page and report.html style their charts with the one chart style, once
    /// each: a page keeping its own copy drifts (the history page's lacked the wide chart's
    /// least width, so a wide chart could shrink under one pixel per unit).
    #[test]
    fn history_and_report_pages_share_the_chart_style() {
        let css = svg::chart_css();
        let history = page(&[], &BTreeMap::new(), &[]);
        let report = crate::report::html::page::Page::default().to_html();
        for html in [&history, &report] {
            assert_eq!(html.matches(css.as_str()).count(), 1, "{html}");
        }
        // The layout's sizes, as CSS pixels.
        assert!(css.contains("svg .tick { font-size: 11px;"), "{css}");
        assert!(
            css.contains(".chart-wide svg.chart { min-width: 760px; }"),
            "{css}"
        );
    }
}
