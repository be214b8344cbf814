//! report.html from a hand-written run directory (tests/data/report): escaping, every chart
//! present, and the page loaded in headless Chromium without console errors. Then the page of a
//! real quick demo run (tests/data/report_demo) and of the hand-written one, measured as
//! Chromium draws them 390 and 1400 px wide: no text under 11 px, no tick labels of one axis
//! overlapping, no text outside its chart, every table wider than its box hinted.
//!
//! The fixture's HdrHistogram logs are generated from its steps.jsonl; regenerate them with
//! `STAIRBENCH_BLESS=1 cargo test --test it report_html:: -- --test-threads=1` (one thread:
//! the other tests read the logs being rewritten).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use serde_json::Value;
use stairbench::report::doc::Block;
use stairbench::report::html::{adapter, render, report_data as page_data, Html, ReportData};
use stairbench::report::{Exporter, Report};

const CHROMIUM: &str = "/usr/bin/chromium";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report")
}

/// The fixture's complete steps (the torn last line left out).
fn ok_steps() -> Vec<Value> {
    std::fs::read_to_string(fixture().join("steps.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|s| s["status"] == "ok")
        .collect()
}

/// A bimodal latency population whose count is the step's request count: a fast mode at
/// 0.7× the mean latency (55%) and a slow one at 1.5× (45%), as seed 004's histogram.
fn synthetic_histogram(step: &Value) -> Histogram<u64> {
    let requests = step["requests"].as_u64().unwrap();
    let mean_ns = step["latency_us"]["mean"].as_f64().unwrap() * 1000.0;
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let weights = [1u64, 2, 3, 4, 5, 4, 3, 2, 1];
    let total_w: u64 = weights.iter().sum();
    let mut left = requests;
    for (centre, share) in [(0.7, 0.55), (1.5, 0.45)] {
        let mode = (requests as f64 * share) as u64;
        for (i, w) in weights.iter().enumerate() {
            let n = (mode * w / total_w).min(left);
            let v = mean_ns * centre * (0.8 + 0.05 * i as f64);
            h.record_n(v as u64, n).unwrap();
            left -= n;
        }
    }
    h.record_n((mean_ns * 0.7) as u64, left).unwrap();
    h
}

fn regenerate_histograms() {
    for step in ok_steps() {
        let hist = synthetic_histogram(&step);
        let start = SystemTime::UNIX_EPOCH
            + Duration::from_secs_f64(step["started_unix_s"].as_f64().unwrap());
        // Two intervals, so reading the log must merge them.
        let mut first = Histogram::<u64>::new_from(&hist);
        let mut second = Histogram::<u64>::new_from(&hist);
        for (i, v) in hist.iter_recorded().enumerate() {
            let target = if i % 2 == 0 { &mut first } else { &mut second };
            target
                .record_n(v.value_iterated_to(), v.count_at_value())
                .unwrap();
        }
        let id = step["id"].as_str().unwrap();
        let path = fixture().join("hist").join(format!("{id}.hlog"));
        let mut out = std::fs::File::create(&path).unwrap();
        stairbench::record::hlog::write_log(&mut out, start, &[(5.0, first), (10.0, second)])
            .unwrap();
    }
}

#[test]
fn fixture_histograms_hold_every_request() {
    if common::blessing() {
        regenerate_histograms();
    }
    for step in ok_steps() {
        let id = step["id"].as_str().unwrap();
        let path = fixture().join("hist").join(format!("{id}.hlog"));
        let hist = stairbench::record::hlog::read_hlog(&path)
            .unwrap()
            .expect("a histogram");
        assert_eq!(hist.len(), step["requests"].as_u64().unwrap(), "{id}");
        let buckets = adapter::log_buckets(&hist);
        assert_eq!(buckets.iter().map(|b| b.count).sum::<u64>(), hist.len());
    }
}

/// The fixture's page as `stairbench report` makes it.
fn report_data() -> ReportData {
    page_data(&Report::read(&fixture()).unwrap(), None)
}

/// Charts the page should hold: per target throughput and latency, CPU per series with CPU
/// figures, the heat map, one histogram per step.
fn expected_charts(data: &ReportData) -> usize {
    let mut targets: Vec<&str> = data.series.iter().map(|s| s.target.as_str()).collect();
    targets.dedup();
    let cpu = data
        .series
        .iter()
        .filter(|s| s.points.iter().any(|p| p.cpu_us_per_req_user.is_some()))
        .count();
    2 * targets.len() + cpu + usize::from(data.heat_map.is_some()) + data.histograms.len()
}

#[test]
fn heat_map_step_can_be_chosen_and_report_written() {
    let id = "msgr-reactor.shared.c2.r0";
    let data = page_data(&Report::read(&fixture()).unwrap(), Some(id));
    let heat = data.heat_map.expect("a heat map");
    assert_eq!(heat.step_id, id);
    // Two busy values over client cpus 0-3: not one per CPU, so numbered, not named.
    assert_eq!(heat.cores, ["#0", "#1"]);
    let copy = tempfile::tempdir().unwrap();
    for name in ["steps.jsonl", "spec.toml", "environment.json"] {
        std::fs::copy(fixture().join(name), copy.path().join(name)).unwrap();
    }
    let page = Html.render(&Report::read(copy.path()).unwrap());
    assert!(
        page.contains("No latency histograms"),
        "no hist/ in the copy"
    );
    assert!(
        page.contains("No per-second per-core figures"),
        "no intervals/ in the copy"
    );
}

#[test]
fn fixture_page_is_escaped_and_complete() {
    let data = report_data();
    assert_eq!(data.histograms.len(), ok_steps().len());
    assert_eq!(data.series.len(), 3, "reactor × 2 placements, <script> × 1");
    assert!(data.series[0].usl.is_some());
    // The results table (report.md's, shown on the page too): 13 complete steps plus the
    // failed one; the torn line is ignored.
    let blocks = &data.sections.blocks;
    let at = blocks
        .iter()
        .position(|b| *b == Block::Heading("Results".into()))
        .expect("a results section");
    let Some(Block::Table(results)) = blocks.get(at + 1) else {
        panic!("no table under Results: {blocks:?}")
    };
    assert_eq!(results.rows.len(), ok_steps().len() + 1);
    let heat = data.heat_map.as_ref().expect("a heat map");
    assert_eq!(heat.cores, ["cpu2", "cpu3"]);
    assert_eq!(heat.seconds.len(), 10, "warm-up line left out");

    let page = render(&data);
    assert!(
        !page.to_lowercase().contains("<script"),
        "markup from data leaked"
    );
    assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"));
    assert!(page.contains("server exited with status 1 &lt;oops&gt;"));
    assert!(page.contains("&lt;another busy process?&gt;"));
    assert!(page.contains("AMD EPYC 9354P"));
    assert!(page.contains("(USL fit)"));
    // The analysis's Little's-law section, rendered from report.md's own model.
    assert!(page.contains("Little's law"), "{page}");
    // Each chart twice: wide and narrow.
    assert_eq!(page.matches("<svg ").count(), 2 * expected_charts(&data));
    // Self-contained: the SVG namespace is the only URL, nothing is loaded from elsewhere.
    assert!(!page.contains(" src="), "an external resource");
    assert!(
        page.split(" href=\"").skip(1).all(|h| h.starts_with('#')),
        "a link out of the page"
    );
    assert!(page.contains("<nav class=\"toc\">"), "a table of contents");
    let urls = page.matches("http://").count() + page.matches("https://").count();
    assert_eq!(
        urls,
        page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count()
    );
    assert_eq!(page, render(&data), "deterministic");
}

/// Runs Chromium with a time limit; returns (stdout, stderr).
fn chromium(args: &[String]) -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!(
            "--user-data-dir={}",
            dir.path().join("profile").display()
        ))
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let err = std::fs::read_to_string(&err_path).unwrap_or_default();
            assert!(status.success(), "chromium failed: {status}\n{err}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium took more than 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (
        std::fs::read_to_string(&out_path).unwrap(),
        std::fs::read_to_string(&err_path).unwrap(),
    )
}

/// Chromium's log lines for the page's console messages and load failures.
fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.contains(":CONSOLE")
                || l.contains("Uncaught")
                || l.contains("net::ERR_")
                || l.contains("Failed to load")
        })
        .collect()
}

/// (width, height) of the viewBox of every `<svg` element in `dom` that is drawn as wide as
/// the page (`width="100%"`, its height following the viewBox's proportions); (0, 0) for one
/// that is not.
fn svg_sizes(dom: &str) -> Vec<(f64, f64)> {
    let re = regex::Regex::new(r#"<svg\b[^>]*>"#).unwrap();
    let view_box = regex::Regex::new(r#"\sviewBox="0 0 ([0-9.]+) ([0-9.]+)""#).unwrap();
    re.find_iter(dom)
        .map(|m| {
            let tag = m.as_str();
            match view_box.captures(tag) {
                Some(c) if tag.contains(r#" width="100%""#) => {
                    (c[1].parse().unwrap_or(0.0), c[2].parse().unwrap_or(0.0))
                }
                _ => (0.0, 0.0),
            }
        })
        .collect()
}

#[test]
fn page_renders_in_headless_chromium() {
    if !chromium_or_skip() {
        return;
    }
    let data = report_data();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    std::fs::write(&page, render(&data)).unwrap();
    let url = format!("file://{}", page.display());

    let (dom, stderr) = chromium(&["--dump-dom".into(), url.clone()]);
    assert!(console_errors(&stderr).is_empty(), "{stderr}");
    assert!(!dom.contains("<script"), "a script element in the DOM");
    let sizes = svg_sizes(&dom);
    assert_eq!(
        sizes.len(),
        2 * expected_charts(&data),
        "every chart in the DOM, wide and narrow"
    );
    assert!(sizes.iter().all(|(w, h)| *w > 0.0 && *h > 0.0), "{sizes:?}");

    let shot = dir.path().join("page.png");
    let (_, stderr) = chromium(&[
        format!("--screenshot={}", shot.display()),
        "--window-size=1200,3000".into(),
        url,
    ]);
    assert!(console_errors(&stderr).is_empty(), "{stderr}");
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    assert!(
        png.len() > 10_000,
        "a nearly empty screenshot: {} bytes",
        png.len()
    );
    if let Some(copy) = std::env::var_os("STAIRBENCH_SCREENSHOT_TO") {
        let copy = PathBuf::from(copy);
        std::fs::copy(&shot, &copy).unwrap();
        std::fs::copy(&page, copy.with_extension("html")).unwrap();
    }
}

/// The detector above must see a page's console errors, or its silence proves nothing.
#[test]
fn console_error_detector_sees_a_script_error() {
    if !chromium_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><body><script>console.error('boom'); nope();</script></body></html>",
    )
    .unwrap();
    let (_, stderr) = chromium(&["--dump-dom".into(), format!("file://{}", page.display())]);
    let errors = console_errors(&stderr);
    assert!(errors.iter().any(|l| l.contains("boom")), "{stderr}");
    assert!(errors.iter().any(|l| l.contains("Uncaught")), "{stderr}");
}

/// What `measure.js` found on a page drawn `width` px wide.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Layout {
    /// The page's viewport width, px.
    width: f64,
    /// The page's own scroll width, px (wider than the viewport: the page scrolls sideways).
    page_width: f64,
    /// Visible texts measured, HTML and SVG.
    texts: usize,
    /// Of which in charts.
    svg_texts: usize,
    /// Charts visible.
    charts: usize,
    /// Charts that would be visible in one layout or the other (outside closed details), over
    /// both layouts.
    drawn_charts: usize,
    /// viewBox widths of the visible charts.
    chart_widths: Vec<f64>,
    /// Texts under 11 px: (text, px).
    small: Vec<Value>,
    /// Tick labels of one axis (or legend rows) that overlap.
    overlaps: Vec<Value>,
    /// Chart texts reaching outside their chart.
    outside: Vec<Value>,
    /// Tables wider than their box.
    scrolling: usize,
    /// Of which without a visible "scroll sideways" hint.
    unhinted: Vec<Value>,
    /// Tables that fit their box under a visible "scroll sideways" hint.
    needless: Vec<Value>,
}

/// Draws `page` in headless Chromium `width` px wide and returns what measure.js measured.
/// The page sits in a frame of that width (headless Chromium's window is at least 500 px
/// wide), with the script appended; the script posts its figures to the host page, which
/// Chromium dumps.
fn measure(page: &str, width: u32) -> Layout {
    let dir = tempfile::tempdir().unwrap();
    let script = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report_demo/measure.js"),
    )
    .unwrap();
    let at = page.rfind("</body>").expect("a </body>");
    let measured = format!("{}<script>{script}</script>{}", &page[..at], &page[at..]);
    std::fs::write(dir.path().join("page.html"), measured).unwrap();
    let host = format!(
        "<!DOCTYPE html><html><body style=\"margin:0\"><iframe src=\"page.html\" \
         style=\"border:0;width:{width}px;height:2000px\"></iframe><script>\
         addEventListener('message', (e) => {{ const p = document.createElement('pre'); \
         p.id = 'measurements'; p.textContent = e.data; document.body.appendChild(p); }});\
         </script></body></html>"
    );
    let host_path = dir.path().join("host.html");
    std::fs::write(&host_path, host).unwrap();
    let (dom, stderr) = chromium(&[
        "--hide-scrollbars".into(),
        // Lets the frame's message reach the host before the DOM is dumped.
        "--virtual-time-budget=10000".into(),
        "--window-size=1400,2200".into(),
        "--dump-dom".into(),
        format!("file://{}", host_path.display()),
    ]);
    let json = dom
        .split_once("<pre id=\"measurements\">")
        .and_then(|(_, r)| r.split_once("</pre>"))
        .map(|(j, _)| {
            j.replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&")
        })
        .unwrap_or_else(|| panic!("no measurements in the dump\n{stderr}\n{dom}"));
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"))
}

/// Chromium is installed (a file, not something in its place that cannot run); else the
/// test skips (fails in CI).
fn chromium_or_skip() -> bool {
    if Path::new(CHROMIUM).is_file() {
        return true;
    }
    common::skip_or_fail(format!(
        "{CHROMIUM} is missing (apt-get install -y chromium)"
    ));
    false
}

/// The quick demo's report, as `stairbench report` writes it.
fn demo_page() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report_demo");
    Html.render(&Report::read(&dir).unwrap())
}

#[test]
fn the_report_reads_at_390_and_1400_px() {
    if !chromium_or_skip() {
        return;
    }
    for (name, page) in [("demo", demo_page()), ("fixture", render(&report_data()))] {
        // A phone, a laptop, and the narrowest screen that gets the wide charts.
        for (width, chart_width) in [(390, 360.0), (1400, 760.0), (800, 760.0)] {
            let m = measure(&page, width);
            let at = format!("{name} at {width} px");
            assert_eq!(m.width, width as f64, "{at}: the frame's width");
            assert!(
                m.page_width <= m.width,
                "{at}: the page scrolls sideways: {m:?}"
            );
            // One layout of each chart shows, the one made for this width.
            assert!(m.charts >= 6, "{at}: {m:?}");
            assert_eq!(2 * m.charts, m.drawn_charts, "{at}");
            assert!(
                m.chart_widths.iter().all(|w| *w == chart_width),
                "{at}: {:?}",
                m.chart_widths
            );
            assert!(m.svg_texts > 100 && m.texts > m.svg_texts, "{at}: {m:?}");
            assert!(m.small.is_empty(), "{at}: text under 11 px: {:?}", m.small);
            assert!(
                m.overlaps.is_empty(),
                "{at}: overlapping labels: {:?}",
                m.overlaps
            );
            assert!(
                m.outside.is_empty(),
                "{at}: text outside its chart: {:?}",
                m.outside
            );
            assert!(
                m.unhinted.is_empty(),
                "{at}: wide tables without a hint: {:?}",
                m.unhinted
            );
            // The demo's report (real tables) has no hint over a table that fits; the
            // fixture's synthetic tables still get one at 800 px (the width estimate runs
            // about a step wide there).
            assert!(
                name != "demo" || m.needless.is_empty(),
                "{at}: \"scroll it sideways\" over tables that fit: {:?}",
                m.needless
            );
            if width == 390 {
                assert!(
                    m.scrolling > 0,
                    "{at}: no table is wider than a phone? {m:?}"
                );
            }
        }
    }
}

/// The measurements above must see small text, overlapping labels, text outside its chart and
/// an unhinted wide table, or their silence proves nothing.
#[test]
fn the_layout_measurements_see_what_they_forbid() {
    if !chromium_or_skip() {
        return;
    }
    let cells: String = (0..12)
        .map(|i| format!("<td>column_number_{i}</td>"))
        .collect();
    let page = format!(
        "<!DOCTYPE html><html><body>\
         <svg class=\"chart\" width=\"100%\" viewBox=\"0 0 760 200\"><title>t</title>\
         <text class=\"tick x\" x=\"100\" y=\"100\" style=\"font-size:11px\">1000</text>\
         <text class=\"tick x\" x=\"110\" y=\"100\" style=\"font-size:11px\">2000</text>\
         <text class=\"tick y\" x=\"750\" y=\"150\" style=\"font-size:11px\">far out</text>\
         </svg><div class=\"table-scroll\" style=\"overflow-x:auto\"><table><tr>{cells}</tr></table></div>\
         <p class=\"scroll-hint\">Wide table: scroll it sideways</p>\
         <div class=\"table-scroll\" style=\"overflow-x:auto\"><table><tr><td>narrow</td></tr></table></div>\
         </body></html>"
    );
    let m = measure(&page, 390);
    // The 760-unit chart drawn 374 px wide: 11-unit text at 5.4 px.
    assert!(m.small.iter().any(|s| s["text"] == "1000"), "{m:?}");
    assert!(
        m.overlaps
            .iter()
            .any(|o| o["a"] == "1000" && o["b"] == "2000"),
        "{m:?}"
    );
    assert!(m.outside.iter().any(|o| o["text"] == "far out"), "{m:?}");
    assert_eq!((m.scrolling, m.unhinted.len()), (1, 1), "{m:?}");
    assert_eq!(m.needless.len(), 1, "{m:?}");
}
