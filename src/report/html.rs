//! report.html: one self-contained page (inline CSS and SVG, no script, no network) that a
//! reader can open offline, print, or attach to an issue.
//!
//! The page is drawn from [`ReportData`], a flat description of what to show, so the
//! analysis can fill the tables and fitted curves without this module knowing how they were
//! computed. [`adapter::from_run_dir`] builds it from a run directory.

use std::fmt::Write as _;

use super::svg::{self, escape, Axis, LineChart, LineSeries, Scale};

/// Everything the page shows.
#[derive(Debug, Clone, Default)]
pub struct ReportData {
    /// Page title (the experiment's name).
    pub title: String,
    /// Free text of the spec, shown under the title.
    pub description: Option<String>,
    /// Warnings and remarks of the run (environment warnings, interruption, early stops).
    pub notes: Vec<String>,
    /// The measurement conditions as (parameter, value) rows, as seed 004's first table.
    pub conditions: Vec<(String, String)>,
    /// One series per target × placement.
    pub series: Vec<Series>,
    /// Latency histograms of the steps, in step order.
    pub histograms: Vec<StepHistogram>,
    /// Per-core busy % over time of one chosen step.
    pub heat_map: Option<CoreHeatMap>,
    /// Tables (results, Little's law, knee/USL summary), in display order.
    pub tables: Vec<Table>,
    /// The answers first: each series' peak and the comparisons, one sentence each.
    pub conclusions: Vec<String>,
    /// report.md's sections (peaks, results, analysis...) as HTML, shown after the charts.
    pub sections_html: String,
    /// The `##` headings of `sections_html`, for the table of contents.
    pub section_headings: Vec<from_markdown::Heading>,
}

/// One target under one placement, across client counts.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// One point per client count, in increasing client order.
    pub points: Vec<Point>,
    /// The fitted Universal Scalability Law, when the analysis produced one.
    pub usl: Option<UslCurve>,
    /// Server threads each step ran with ("2", or "1–4" when they follow the cpuset), when known.
    pub threads: Option<String>,
}

impl Series {
    /// Whether the load levels are offered rates (open loop), not client counts.
    pub fn open_loop(&self) -> bool {
        self.points.iter().any(|p| p.rate_rps.is_some())
    }

    /// The legend's name of the series: its placement, with its server threads when known.
    pub fn legend(&self) -> String {
        match &self.threads {
            // The server's `--threads`/`{threads}` value: a pool runs an I/O thread beside it.
            Some(t) => format!("{} (--threads {t})", self.placement),
            None => self.placement.clone(),
        }
    }
}

/// One step of a series (repetitions already averaged).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Point {
    /// Client count of the step.
    pub clients: f64,
    /// Offered rate (req/s) in open loop.
    pub rate_rps: Option<f64>,
    /// Completed requests per second.
    pub throughput_rps: f64,
    /// Median latency, microseconds.
    pub p50_us: f64,
    /// 99th-percentile latency, microseconds.
    pub p99_us: f64,
    /// Server user CPU per request, microseconds (None without a server process to watch).
    pub cpu_us_per_req_user: Option<f64>,
    /// Server system CPU per request, microseconds.
    pub cpu_us_per_req_sys: Option<f64>,
    /// The load generator was the bottleneck in this step.
    pub client_saturated: bool,
}

/// A fitted USL curve X(N) = λN / (1 + σ(N−1) + κN(N−1)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UslCurve {
    /// Throughput of one client (requests/s).
    pub lambda: f64,
    /// Contention coefficient σ.
    pub sigma: f64,
    /// Coherency coefficient κ.
    pub kappa: f64,
}

impl UslCurve {
    /// Modelled throughput at `n` clients.
    pub fn throughput(&self, n: f64) -> f64 {
        self.lambda * n / (1.0 + self.sigma * (n - 1.0) + self.kappa * n * (n - 1.0))
    }
}

/// A step's latency histogram.
#[derive(Debug, Clone, Default)]
pub struct StepHistogram {
    /// Step id (file stem of its raw files).
    pub step_id: String,
    /// What the step was, for the reader ("msgr · separated · 8 clients").
    pub label: String,
    /// Buckets in increasing order.
    pub buckets: Vec<LatencyBucket>,
}

/// One latency bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencyBucket {
    /// Lower edge, microseconds.
    pub lo_us: f64,
    /// Upper edge, microseconds.
    pub hi_us: f64,
    /// Requests whose latency fell in [lo_us, hi_us).
    pub count: u64,
}

/// Per-core busy % over a step's seconds.
#[derive(Debug, Clone, Default)]
pub struct CoreHeatMap {
    /// Step id.
    pub step_id: String,
    /// Whose cores these are and which step ("server cores, msgr · shared · 8 clients").
    pub label: String,
    /// Row labels, one per core ("cpu3").
    pub cores: Vec<String>,
    /// End of each interval, seconds into the measured window.
    pub seconds: Vec<f64>,
    /// busy_pct[core][interval], percent.
    pub busy_pct: Vec<Vec<f64>>,
}

/// A table as text cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Heading above the table.
    pub title: String,
    /// A sentence under the heading (how to read it), may be empty.
    pub note: String,
    /// Column headings.
    pub header: Vec<String>,
    /// Rows of cells; a row shorter than the header is padded.
    pub rows: Vec<Vec<String>>,
}

const CSS: &str = r#"
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.25em; border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
h3 { font-size: 1.05em; margin: 1.2em 0 .4em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f2f2f2; }
.notes { background: #fff8e1; border-left: 4px solid #e6a700; padding: .5em 1em; }
.note { color: #555; font-size: .9em; }
figure { margin: .5em 0 1.5em; page-break-inside: avoid; break-inside: avoid; }
svg.chart { width: 100%; height: auto; background: #fff; }
svg .point-label { font-size: 10px; fill: #555; }
nav.toc { background: #f7f7f7; padding: .4em 1em; font-size: .9em; }
nav.toc ol { margin: .2em 0; padding-left: 1.4em; columns: 2; }
.conclusions li { margin: .2em 0; }
table { display: block; overflow-x: auto; }
svg .chart-title { font-size: 14px; font-weight: 600; }
svg .tick { font-size: 11px; fill: #444; }
svg .axis-label { font-size: 12px; fill: #222; }
svg .legend-text { font-size: 11px; fill: #222; }
svg .no-data { font-size: 14px; fill: #888; }
svg .grid line { stroke: #e6e6e6; stroke-width: 1; }
svg .frame { fill: none; stroke: #999; }
details { margin: .3em 0; }
summary { cursor: pointer; }
@media (max-width: 600px) { nav.toc ol { columns: 1; } body { padding: 0 .5em; } }
@media print { body { max-width: none; margin: 0; } h2 { page-break-after: avoid; } }
"#;

/// Renders the whole page.
pub fn render(data: &ReportData) -> String {
    let mut page = String::new();
    page_head(&mut page, &data.title);
    let _ = write!(page, "<h1>{}</h1>", escape(&data.title));
    if let Some(d) = &data.description {
        let _ = write!(page, "<p>{}</p>", escape(d));
    }
    notes_section(&mut page, &data.notes);
    toc(&mut page, data);
    conclusions_section(&mut page, &data.conclusions);
    conditions_section(&mut page, &data.conditions);
    throughput_section(&mut page, &data.series);
    latency_section(&mut page, &data.series);
    cpu_section(&mut page, &data.series);
    heat_map_section(&mut page, data.heat_map.as_ref());
    histogram_section(&mut page, &data.histograms);
    page.push_str(&data.sections_html);
    for table in &data.tables {
        table_section(&mut page, table);
    }
    page.push_str("</body></html>\n");
    page
}

/// The page's own sections: (anchor id, heading).
const CHART_SECTIONS: [(&str, &str); 6] = [
    ("conditions", "Measurement conditions"),
    ("throughput", "Throughput"),
    ("latency", "Latency response curves"),
    ("cpu", "Server CPU per request"),
    ("cores", "Per-core busy % over time"),
    ("histograms", "Latency histograms"),
];

fn toc(page: &mut String, data: &ReportData) {
    page.push_str("<nav class=\"toc\"><strong>Contents</strong><ol>");
    if !data.conclusions.is_empty() {
        page.push_str("<li><a href=\"#conclusions\">Conclusions</a></li>");
    }
    for (id, title) in CHART_SECTIONS {
        let _ = write!(page, "<li><a href=\"#{id}\">{title}</a></li>");
    }
    for h in &data.section_headings {
        let _ = write!(page, "<li><a href=\"#{}\">{}</a></li>", h.id, h.text);
    }
    for t in &data.tables {
        let _ = write!(
            page,
            "<li><a href=\"#{}\">{}</a></li>",
            from_markdown::slug(&t.title),
            escape(&t.title)
        );
    }
    page.push_str("</ol></nav>");
}

fn conclusions_section(page: &mut String, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    page.push_str("<h2 id=\"conclusions\">Conclusions</h2><ul class=\"conclusions\">");
    for l in lines {
        let _ = write!(page, "<li>{}</li>", escape(l));
    }
    page.push_str("</ul>");
}

fn page_head(page: &mut String, title: &str) {
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} — stairbench report</title><style>{CSS}</style></head><body>",
        escape(title)
    );
}

fn notes_section(page: &mut String, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    page.push_str(r#"<div class="notes"><ul>"#);
    for n in notes {
        let _ = write!(page, "<li>{}</li>", escape(n));
    }
    page.push_str("</ul></div>");
}

fn conditions_section(page: &mut String, conditions: &[(String, String)]) {
    page.push_str("<h2 id=\"conditions\">Measurement conditions</h2>");
    let table = Table {
        title: String::new(),
        note: String::new(),
        header: vec!["Parameter".into(), "Value".into()],
        rows: conditions
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect(),
    };
    table_html(page, &table, false);
}

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

fn figure(page: &mut String, svg: &str, caption: &str) {
    let _ = write!(
        page,
        "<figure>{svg}<figcaption class=\"note\">{}</figcaption></figure>",
        escape(caption)
    );
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

fn throughput_section(page: &mut String, series: &[Series]) {
    page.push_str("<h2 id=\"throughput\">Throughput</h2>");
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
            });
            if let Some(usl) = s.usl.filter(|_| !open) {
                lines.push(usl_line(s, usl, i));
            }
        }
        let (x, caption) = if open {
            (
                Axis::with_scale("offered rate (requests/s)", Scale::Log10),
                "One line per placement, one point per offered rate; hollow markers: the load generator was saturated (not the server's limit).",
            )
        } else {
            (
                Axis::with_scale("clients", Scale::Log2),
                "One line per placement; dashed: the fitted Universal Scalability Law; hollow markers: the load generator was saturated (not the server's limit).",
            )
        };
        let chart = LineChart {
            title: format!("{target}: throughput"),
            x,
            y: Axis::linear("requests/s"),
            series: lines,
        };
        figure(page, &svg::line_chart(&chart), caption);
    }
}

/// The USL curve sampled along the series' client range (log-spaced, so it is smooth on a
/// log axis).
fn usl_line(s: &Series, usl: UslCurve, color: usize) -> LineSeries {
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
    }
}

fn saturated(s: &Series) -> Vec<bool> {
    s.points.iter().map(|p| p.client_saturated).collect()
}

fn latency_section(page: &mut String, series: &[Series]) {
    page.push_str("<h2 id=\"latency\">Latency response curves</h2>");
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
                });
            }
        }
        let chart = LineChart {
            title: format!("{target}: latency vs throughput"),
            x: Axis::linear("requests/s"),
            y: Axis::with_scale("latency (µs, log scale)", Scale::Log10),
            series: lines,
        };
        figure(
            page,
            &svg::line_chart(&chart),
            "Each point is one load level, labelled with its clients (or offered rate); solid: median, dashed: 99th percentile, both from the repetitions' histograms merged; hollow markers: the load generator was saturated.",
        );
    }
}

fn cpu_section(page: &mut String, series: &[Series]) {
    page.push_str("<h2 id=\"cpu\">Server CPU per request</h2>");
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
    };
    figure(
        page,
        &svg::stacked_bar_chart(&chart),
        "Server CPU time per completed request, split into user and kernel time; the charts of one target share their scale.",
    );
}

fn cpu_values(s: &Series, f: fn(&Point) -> Option<f64>) -> Vec<f64> {
    s.points.iter().map(|p| f(p).unwrap_or(0.0)).collect()
}

fn heat_map_section(page: &mut String, heat: Option<&CoreHeatMap>) {
    page.push_str("<h2 id=\"cores\">Per-core busy % over time</h2>");
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
        &svg::heat_map(&chart),
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

fn histogram_section(page: &mut String, histograms: &[StepHistogram]) {
    page.push_str("<h2 id=\"histograms\">Latency histograms</h2>");
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
            &svg::histogram(&chart),
            &format!("Step {}", h.step_id),
        );
        page.push_str("</details>");
    }
}

fn table_section(page: &mut String, table: &Table) {
    let _ = write!(
        page,
        "<h2 id=\"{}\">{}</h2>",
        from_markdown::slug(&table.title),
        escape(&table.title)
    );
    if !table.note.is_empty() {
        let _ = write!(page, "<p class=\"note\">{}</p>", escape(&table.note));
    }
    table_html(page, table, true);
}

/// Writes a table; `align_numbers` right-aligns cells that read as numbers.
fn table_html(page: &mut String, table: &Table, align_numbers: bool) {
    page.push_str("<table><thead><tr>");
    for h in &table.header {
        let _ = write!(page, "<th>{}</th>", escape(h));
    }
    page.push_str("</tr></thead><tbody>");
    for row in &table.rows {
        page.push_str("<tr>");
        let width = table.header.len().max(row.len());
        for i in 0..width {
            let cell = row.get(i).map_or("", String::as_str);
            let class = if align_numbers && looks_numeric(cell) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(page, "<td{class}>{}</td>", escape(cell));
        }
        page.push_str("</tr>");
    }
    page.push_str("</tbody></table>");
}

fn looks_numeric(cell: &str) -> bool {
    let t = cell.trim().trim_end_matches(['k', 'M', 'G', '%', 'x']);
    !t.is_empty() && t.parse::<f64>().is_ok()
}

pub mod adapter;
pub mod from_analysis;
pub mod from_markdown;

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ReportData {
        let point = |c: f64, x: f64| Point {
            clients: c,
            rate_rps: None,
            throughput_rps: x,
            p50_us: 10.0 * c,
            p99_us: 30.0 * c,
            cpu_us_per_req_user: Some(4.0),
            cpu_us_per_req_sys: Some(2.0),
            client_saturated: false,
        };
        ReportData {
            title: "demo <b>".into(),
            description: Some("a & b".into()),
            notes: vec!["governor is <powersave>".into()],
            conditions: vec![("CPU".into(), "<script>alert(1)</script>".into())],
            series: vec![Series {
                target: "msgr".into(),
                placement: "<script>x</script>".into(),
                points: vec![point(1.0, 100.0), point(2.0, 190.0), point(4.0, 300.0)],
                usl: Some(UslCurve {
                    lambda: 100.0,
                    sigma: 0.1,
                    kappa: 0.01,
                }),
                threads: Some("2".into()),
            }],
            histograms: vec![StepHistogram {
                step_id: "s1".into(),
                label: "msgr 1".into(),
                buckets: vec![LatencyBucket {
                    lo_us: 4.0,
                    hi_us: 5.0,
                    count: 7,
                }],
            }],
            heat_map: None,
            tables: vec![Table {
                title: "Results".into(),
                note: String::new(),
                header: vec!["clients".into(), "throughput".into()],
                rows: vec![vec!["1".into(), "100".into()], vec!["2".into()]],
            }],
            ..ReportData::default()
        }
    }

    #[test]
    fn charts_read_at_any_scale() {
        let mut data = sample();
        // A second placement of the same target with twice the CPU per request.
        let mut other = data.series[0].clone();
        other.placement = "shared".into();
        other.threads = Some("1".into());
        for p in &mut other.points {
            p.cpu_us_per_req_user = Some(8.0);
            p.cpu_us_per_req_sys = Some(4.0);
        }
        data.series.push(other);
        let page = render(&data);
        // Latency on a log axis, each point labelled with its clients.
        assert!(page.contains("latency (µs, log scale)"));
        assert_eq!(page.matches("class=\"point-label\"").count(), 6);
        // Responsive charts.
        assert!(page.contains("width=\"100%\" viewBox="));
        // Threads in the legends; one y-scale for the target's CPU charts (12 µs both).
        assert!(page.contains("shared (--threads 1)") && page.contains("(--threads 2)"));
        let cpu = &page[page.find("id=\"cpu\"").unwrap()..page.find("id=\"cores\"").unwrap()];
        let ticks: Vec<Vec<&str>> = cpu
            .split("<svg")
            .skip(1)
            .map(|chart| {
                chart
                    .split("class=\"tick\"")
                    .skip(1)
                    .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once('<')))
                    .map(|(v, _)| v)
                    .collect()
            })
            .collect();
        assert_eq!(ticks.len(), 2);
        // Same scale, above the 12 µs of the costlier placement, although the first
        // chart's own bars stop at 6.
        assert_eq!(ticks[0], ticks[1]);
        assert!(ticks[0].contains(&"15"), "{ticks:?}");
    }

    #[test]
    fn one_core_is_a_sentence_and_open_loop_plots_the_offered_rate() {
        let mut data = sample();
        data.heat_map = Some(CoreHeatMap {
            step_id: "s".into(),
            label: "server cores, msgr · 1 client".into(),
            cores: vec!["cpu0".into()],
            seconds: vec![1.0, 2.0],
            busy_pct: vec![vec![40.0, 60.0]],
        });
        for (i, p) in data.series[0].points.iter_mut().enumerate() {
            p.rate_rps = Some(1000.0 * (i + 1) as f64);
            p.clients = 4.0;
        }
        let page = render(&data);
        assert!(page.contains("one core (cpu0), busy 50% on average over 2 seconds (40–60%)"));
        assert!(!page.contains("heat-map"));
        assert!(page.contains("offered rate (requests/s)"));
        // One point per rate, each labelled with it.
        for r in ["1000/s", "2000/s", "3000/s"] {
            assert!(page.contains(&format!(">{r}<")), "{r}");
        }
    }

    #[test]
    fn page_escapes_every_text() {
        let page = render(&sample());
        assert!(!page.contains("<script"), "raw script tag in page");
        assert!(!page.contains("<b>") && !page.contains("<powersave>"));
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(page.contains("a &amp; b"));
    }

    #[test]
    fn page_has_every_section_and_pads_short_rows() {
        let page = render(&sample());
        for id in [
            "conditions",
            "throughput",
            "latency",
            "cpu",
            "cores",
            "histograms",
        ] {
            assert!(page.contains(&format!("id=\"{id}\"")), "{id}");
        }
        // throughput, latency, cpu, one histogram.
        assert_eq!(page.matches("<svg ").count(), 4);
        assert!(page.contains("<tr><td class=\"num\">2</td><td></td></tr>"));
        assert!(page.contains("No per-second per-core figures"));
    }

    #[test]
    fn usl_curve_spans_the_measured_clients() {
        let data = sample();
        let line = usl_line(&data.series[0], data.series[0].usl.unwrap(), 0);
        assert!(line.dashed);
        let first = line.points.first().unwrap();
        let last = line.points.last().unwrap();
        assert!((first.0 - 1.0).abs() < 1e-9 && (last.0 - 4.0).abs() < 1e-9);
        let usl = data.series[0].usl.unwrap();
        // X(1) = λ.
        assert!((usl.throughput(1.0) - usl.lambda).abs() < 1e-9);
    }
}
