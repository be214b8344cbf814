//! report.html: one self-contained page (inline CSS and SVG, no script, no network) that a
//! reader can open offline, print, or attach to an issue.
//!
//! [`ReportData`] is what the page shows; [`render`] lays it out as one [`page::Page`]: a
//! title, then its sections in order (the conditions, the charts, report.md's sections, the
//! profiles), each listing its headings in the table of contents. [`Html`] is the exporter;
//! [`report_data`] makes the data from the one [`Report`] every exporter renders.

pub mod adapter;
mod charts;
pub mod from_analysis;
pub mod page;
mod sections;

use super::doc::Doc;
use super::{findings, markdown, Exporter, Report};
use crate::record::profiles::ProfileLine;

/// Everything the page shows.
#[derive(Debug, Clone, Default)]
pub struct ReportData {
    /// Page title (the experiment's name).
    pub title: String,
    /// Free text of the spec, shown under the title.
    pub description: Option<String>,
    /// Warnings and remarks of the run (environment warnings, interruption, early stops).
    pub notes: Vec<String>,
    /// The measurement conditions, as the benchkv study's first table (report.md's own).
    pub conditions: Doc,
    /// One series per target × placement.
    pub series: Vec<Series>,
    /// Latency histograms of the steps, in step order.
    pub histograms: Vec<StepHistogram>,
    /// Per-core busy % over time of one chosen step.
    pub heat_map: Option<CoreHeatMap>,
    /// The thresholds' verdicts, shown first (report.md's section).
    pub thresholds: Doc,
    /// The answers first: each series' peak and the comparisons (report.md's section).
    pub conclusions: Doc,
    /// The sections report.md shows too (peaks, results, analysis...), after the charts.
    pub sections: Doc,
    /// Why each series stops scaling, the page's first section (None: no series).
    pub diagnosis: Option<page::Section>,
    /// The per-thread busy charts, after the other charts (None: no step recorded threads).
    pub thread_charts: Option<page::Section>,
    /// Where each side's threads spent the levels' windows, after the thread charts (None:
    /// no level sampled thread states).
    pub budget_charts: Option<page::Section>,
    /// profiles.jsonl's records, shown last (no section when empty).
    pub profiles: Vec<ProfileLine>,
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
    /// Its disturbed steps, one point each: shown on the charts, left out of the analysis.
    pub disturbed: Vec<Point>,
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
    /// The 95% confidence interval of the throughput's mean (low, high), with 2 or more
    /// repetitions.
    pub throughput_ci95_rps: Option<(f64, f64)>,
    /// Median latency, microseconds.
    pub p50_us: f64,
    /// 99th-percentile latency, microseconds.
    pub p99_us: f64,
    /// The lowest and highest p99 (µs) of the single repetitions, with 2 or more.
    pub p99_reps_us: Option<(f64, f64)>,
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

/// Renders the whole page: `data` laid out as its sections, written as one document.
pub fn render(data: &ReportData) -> String {
    sections::page(data).to_html()
}

/// The HTML exporter: report.html.
#[derive(Debug, Clone, Copy)]
pub struct Html;

impl Exporter for Html {
    fn file_name(&self) -> &'static str {
        "report.html"
    }

    fn render(&self, report: &Report) -> String {
        render(&report_data(report, None))
    }
}

/// The page of a run: its charts from the run's histograms and per-second figures, its
/// series, conclusions and sections from the same analysis and markdown as report.md, its
/// profiles from the run; the heat map shows step `heat_step` when given.
pub fn report_data(report: &Report, heat_step: Option<&str>) -> ReportData {
    let (run, a) = (&report.run, &report.analysis);
    let mut data = adapter::page_data(run, heat_step);
    data.series = from_analysis::series(a, run);
    data.conclusions = findings::conclusions_doc(a);
    data.diagnosis = Some(super::diagnosis::doc(a))
        .filter(|d| !d.is_empty())
        .map(|d| d.to_html());
    data.thread_charts = super::diagnosis::thread_charts(&run.steps, a)
        .map(|body| page::Section::titled("threads", "Server threads", &body));
    data.budget_charts = super::budget::charts(a)
        .map(|body| page::Section::titled("states", "Thread states", &body));
    data.thresholds = super::gates::doc(a);
    data.sections = markdown::sections(run, a);
    data.profiles = run.profiles.clone();
    data
}

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
            ..Point::default()
        };
        ReportData {
            title: "demo <b>".into(),
            description: Some("a & b".into()),
            notes: vec!["governor is <powersave>".into()],
            conditions: {
                let mut d = Doc::new();
                let mut t = crate::report::doc::Table::new(&["condition", "value"], "ll");
                t.row(vec!["CPU".into(), "<script>alert(1)</script>".into()]);
                d.table(t);
                d
            },
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
                disturbed: Vec::new(),
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
            sections: {
                let mut d = Doc::new();
                d.heading("Results");
                let mut t = crate::report::doc::Table::new(&["clients", "throughput"], "rr");
                t.row(vec!["1".into(), "100".into()]);
                t.row(vec!["2".into()]);
                d.table(t);
                d
            },
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
        // Six labels in each of the chart's two layouts.
        assert_eq!(page.matches("class=\"point-label\"").count(), 12);
        // Responsive charts: each drawn wide and narrow.
        assert!(page.contains("width=\"100%\" viewBox=\"0 0 760 "));
        assert!(page.contains("width=\"100%\" viewBox=\"0 0 360 "));
        // Threads in the legends; one y-scale for the target's CPU charts (12 µs both).
        assert!(page.contains("shared (--threads 1)") && page.contains("(--threads 2)"));
        let cpu = &page[page.find("id=\"cpu\"").unwrap()..page.find("id=\"cores\"").unwrap()];
        let ticks: Vec<Vec<&str>> = cpu
            .split("<svg")
            .skip(1)
            .map(|chart| {
                chart
                    .split("class=\"tick y\"")
                    .skip(1)
                    .filter_map(|t| t.split_once('>').and_then(|(_, r)| r.split_once('<')))
                    .map(|(v, _)| v)
                    .collect()
            })
            .collect();
        // Two charts, each wide and narrow.
        assert_eq!(ticks.len(), 4);
        // Same scale, above the 12 µs of the costlier placement, although the first
        // chart's own bars stop at 6.
        assert_eq!(ticks[0], ticks[2]);
        assert_eq!(ticks[1], ticks[3]);
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
        // throughput, latency, cpu, one histogram; each wide and narrow.
        assert_eq!(page.matches("<svg ").count(), 8);
        assert!(page.contains("<tr><td class=\"num\">2</td><td class=\"num\"></td></tr>"));
        assert!(page.contains("No per-second per-core figures"));
    }

    #[test]
    fn usl_curve_spans_the_measured_clients() {
        let data = sample();
        let line = charts::usl_line(&data.series[0], data.series[0].usl.unwrap(), 0);
        assert!(line.dashed);
        let first = line.points.first().unwrap();
        let last = line.points.last().unwrap();
        assert!((first.0 - 1.0).abs() < 1e-9 && (last.0 - 4.0).abs() < 1e-9);
        let usl = data.series[0].usl.unwrap();
        // X(1) = λ.
        assert!((usl.throughput(1.0) - usl.lambda).abs() < 1e-9);
    }

    #[test]
    fn the_profiles_section_goes_before_the_end_of_the_body() {
        use crate::record::profiles::MissingRecord;
        let page_of = |profiles| {
            render(&ReportData {
                profiles,
                ..Default::default()
            })
        };
        let page = page_of(vec![ProfileLine::Missing(MissingRecord {
            target: "a".into(),
            placement: "q".into(),
            level: None,
            reason: "perf is not installed".into(),
        })]);
        let at = page.find("<h2 id=\"profiles\">").unwrap();
        assert!(at < page.find("</body>").unwrap());
        assert!(page.contains("<li>a / q: no profile: perf is not installed</li>"));
        assert!(!page_of(Vec::new()).contains("id=\"profiles\""));
    }
}
