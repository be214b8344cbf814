//! Hand-written SVG charts for the HTML report: line charts, stacked bars, a heat map and
//! histogram bars, each at two widths ([`Layout`]) so that a phone shows its text at full size.
//!
//! No JavaScript and no external resources, so the page works offline and prints. The output
//! is deterministic (fixed formatting of every coordinate), so a report can be diffed, and all
//! text from specs and results is escaped: a series named `<script>` shows as text.

use std::fmt::Write as _;

mod frame;

pub use frame::text_width;
pub use frame::Layout;
use frame::{thin_every, Frame, LEGEND_ROW, SWATCH, TICK_FONT};

/// Colour-blind-safe palette (Okabe–Ito), used in order, then a neutral grey (a ninth
/// colour: the thread states' "waiting for work").
const PALETTE: [&str; 9] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442",
    "#999999",
];

/// The colour of series number `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A chart in an HTML `<figure>` with its caption (text, escaped here) under it.
pub fn figure(page: &mut String, svg: &str, caption: &str) {
    page.push_str("<figure>");
    page.push_str(svg);
    page.push_str("<figcaption class=\"note\">");
    page.push_str(&escape(caption));
    page.push_str("</figcaption></figure>");
}

/// Escapes text for XML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // Control characters are not allowed in XML 1.0.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// How an axis maps values to positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Linear, starting at zero.
    Linear,
    /// Linear over the data's range only.
    LinearFit,
    /// Base-2 logarithmic (client counts: 1, 2, 4, 8 ...).
    Log2,
    /// Base-10 logarithmic (latencies spanning decades).
    Log10,
}

/// One axis: its label and its scale.
#[derive(Debug, Clone)]
pub struct Axis {
    /// Label under or beside the axis, with its unit.
    pub label: String,
    /// Mapping of values to positions.
    pub scale: Scale,
}

impl Axis {
    /// A linear axis from zero.
    pub fn linear(label: &str) -> Axis {
        Axis {
            label: label.into(),
            scale: Scale::Linear,
        }
    }

    /// An axis with the given scale.
    pub fn with_scale(label: &str, scale: Scale) -> Axis {
        Axis {
            label: label.into(),
            scale,
        }
    }
}

/// One line of a line chart.
#[derive(Debug, Clone, Default)]
pub struct LineSeries {
    /// Legend text.
    pub name: String,
    /// Points (x, y), drawn in the given order.
    pub points: Vec<(f64, f64)>,
    /// Index into the palette.
    pub color: usize,
    /// Dashed line without markers (fitted curves, second percentiles).
    pub dashed: bool,
    /// Draw a marker at each point.
    pub markers: bool,
    /// Points whose marker is drawn hollow (e.g. a saturated client); empty for none.
    pub hollow: Vec<bool>,
    /// Text beside each point's marker (its client count or rate); empty for none.
    pub labels: Vec<String>,
    /// Each point's interval (low, high), drawn as a whisker through it; empty or None for
    /// none.
    pub intervals: Vec<Option<(f64, f64)>>,
    /// Each point an × and no line: steps shown but left out of the analysis.
    pub crosses: bool,
}

/// A chart of named lines.
#[derive(Debug, Clone)]
pub struct LineChart {
    /// Title above the plot.
    pub title: String,
    /// Horizontal axis.
    pub x: Axis,
    /// Vertical axis.
    pub y: Axis,
    /// The lines.
    pub series: Vec<LineSeries>,
}

/// A stacked bar chart: one bar per category, one stack part per layer.
#[derive(Debug, Clone)]
pub struct StackedBars {
    /// Title above the plot.
    pub title: String,
    /// Label of the categories (e.g. "clients").
    pub x_label: String,
    /// Label of the values, with unit.
    pub y_label: String,
    /// Category names, left to right.
    pub categories: Vec<String>,
    /// (layer name, one value per category), bottom layer first.
    pub layers: Vec<(String, Vec<f64>)>,
    /// Top of the value axis when several charts share one scale; None: this chart's own.
    pub y_max: Option<f64>,
    /// Labels under runs of bars, left to right: (label, how many consecutive bars), e.g. a
    /// client count under its repetitions' bars; empty: each bar its category's label.
    pub groups: Vec<(String, usize)>,
    /// Each layer's colour ([`color`]'s index), so that one kind keeps its colour in every
    /// chart whatever layers it shows; empty: by position.
    pub colors: Vec<usize>,
}

impl StackedBars {
    /// The colour index of layer `k`.
    fn color_of(&self, k: usize) -> usize {
        self.colors.get(k).copied().unwrap_or(k)
    }
}

/// A heat map of rows (cores) over columns (seconds), values in percent.
#[derive(Debug, Clone)]
pub struct HeatMap {
    /// Title above the plot.
    pub title: String,
    /// Label of the columns (e.g. "seconds into the step").
    pub x_label: String,
    /// Column labels.
    pub columns: Vec<String>,
    /// Row labels (e.g. "cpu3").
    pub rows: Vec<String>,
    /// values[row][column], percent 0–100 (clamped).
    pub values: Vec<Vec<f64>>,
}

/// Histogram bars on a log-10 x axis.
#[derive(Debug, Clone)]
pub struct HistogramBars {
    /// Title above the plot.
    pub title: String,
    /// Label of the values, with unit.
    pub x_label: String,
    /// (low edge, high edge, count) of each bucket; edges must be > 0.
    pub buckets: Vec<(f64, f64, u64)>,
}

/// Nice tick values covering `[min, max]` with about `target` intervals (steps 1, 2, 5 × 10^k).
pub fn nice_ticks(min: f64, max: f64, target: usize) -> Vec<f64> {
    let (min, max) = if max > min {
        (min, max)
    } else {
        (min - 1.0, min + 1.0)
    };
    let step = nice_step((max - min) / target.max(1) as f64);
    let first = (min / step).floor() as i64;
    let last = (max / step).ceil() as i64;
    (first..=last)
        .map(|i| clean_zero(i as f64 * step))
        .collect()
}

fn nice_step(raw: f64) -> f64 {
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let factor = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|f| norm <= *f + 1e-9)
        .unwrap_or(10.0);
    factor * magnitude
}

fn clean_zero(v: f64) -> f64 {
    if v.abs() < 1e-12 {
        0.0
    } else {
        v
    }
}

/// Ticks of a log axis over `[min, max]` (both > 0): whole powers of `base`, thinned to at
/// most `max_ticks`.
pub fn log_ticks(min: f64, max: f64, base: f64, max_ticks: usize) -> Vec<f64> {
    let lo = min.log(base).floor() as i32;
    let hi = max.log(base).ceil().max(lo as f64 + 1.0) as i32;
    let count = (hi - lo + 1) as usize;
    let every = count.div_ceil(max_ticks.max(1)).max(1);
    (lo..=hi)
        .filter(|e| ((e - lo) as usize).is_multiple_of(every))
        .map(|e| base.powi(e))
        .collect()
}

/// 1, 2, 5 × 10^k ticks from 10^lo to 10^hi, for log axes spanning few decades.
pub fn log10_ticks_125(lo: i32, hi: i32) -> Vec<f64> {
    let mut ticks = Vec::new();
    for e in lo..=hi {
        for m in [1.0, 2.0, 5.0] {
            if e < hi || m == 1.0 {
                ticks.push(m * 10f64.powi(e));
            }
        }
    }
    ticks
}

/// A number in a short form: 3 significant digits, k/M/G suffixes ("1.5M", "250k", "0.05").
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return "–".into();
    }
    let abs = v.abs();
    let (scaled, suffix) = if abs >= 1e9 {
        (v / 1e9, "G")
    } else if abs >= 1e6 {
        (v / 1e6, "M")
    } else if abs >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let digits = if scaled == 0.0 {
        0
    } else {
        (2 - scaled.abs().log10().floor() as i32).clamp(0, 6) as usize
    };
    let mut text = format!("{scaled:.digits$}");
    if text.contains('.') {
        text = text.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if text == "-0" {
        text = "0".into();
    }
    text + suffix
}

/// A value-to-pixel mapping along one axis.
#[derive(Debug, Clone, Copy)]
struct Mapper {
    scale: Scale,
    /// Domain, in transformed units (log of the value for log scales).
    lo: f64,
    hi: f64,
    /// Pixel range.
    from_px: f64,
    to_px: f64,
}

impl Mapper {
    fn transform(scale: Scale, v: f64) -> f64 {
        match scale {
            Scale::Linear | Scale::LinearFit => v,
            Scale::Log2 => v.log2(),
            Scale::Log10 => v.log10(),
        }
    }

    /// Maps `values` on `scale` along the plot's width; returns the mapper and its ticks.
    fn horizontal(scale: Scale, values: &[f64], plot: (f64, f64, f64, f64)) -> (Mapper, Vec<f64>) {
        let (ticks, lo, hi) = axis_ticks(scale, values);
        let m = Mapper {
            scale,
            lo,
            hi,
            from_px: plot.0,
            to_px: plot.2,
        };
        (m, ticks)
    }

    /// Maps `values` on `scale` up the plot's height; returns the mapper and its ticks.
    fn vertical(scale: Scale, values: &[f64], plot: (f64, f64, f64, f64)) -> (Mapper, Vec<f64>) {
        let (ticks, lo, hi) = axis_ticks(scale, values);
        let m = Mapper {
            scale,
            lo,
            hi,
            from_px: plot.3,
            to_px: plot.1,
        };
        (m, ticks)
    }

    fn px(&self, v: f64) -> f64 {
        let t = Self::transform(self.scale, v);
        let span = if self.hi > self.lo {
            self.hi - self.lo
        } else {
            1.0
        };
        self.from_px + (t - self.lo) / span * (self.to_px - self.from_px)
    }
}

/// Whether `v` can be placed on an axis of this scale.
fn plottable(scale: Scale, v: f64) -> bool {
    v.is_finite() && (matches!(scale, Scale::Linear | Scale::LinearFit) || v > 0.0)
}

/// Ticks and the transformed domain for data values `values` on `scale`.
fn axis_ticks(scale: Scale, values: &[f64]) -> (Vec<f64>, f64, f64) {
    let good: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| plottable(scale, *v))
        .collect();
    let min = good.iter().copied().fold(f64::INFINITY, f64::min);
    let max = good.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let range = (!good.is_empty()).then_some((min, max));
    match scale {
        Scale::Linear => linear_ticks(range.map(|(a, b)| (a.min(0.0), b.max(0.0)))),
        Scale::LinearFit => linear_ticks(range),
        Scale::Log2 => log_axis(range, 2.0),
        Scale::Log10 => log_axis(range, 10.0),
    }
}

fn linear_ticks(range: Option<(f64, f64)>) -> (Vec<f64>, f64, f64) {
    let (min, max) = range.unwrap_or((0.0, 1.0));
    let ticks = nice_ticks(min, max, 5);
    let (lo, hi) = (ticks[0], ticks[ticks.len() - 1]);
    (ticks, lo, hi)
}

/// Whole decades (or octaves) around the data; 1-2-5 ticks when a log-10 axis spans ≤ 2 decades.
fn log_axis(range: Option<(f64, f64)>, base: f64) -> (Vec<f64>, f64, f64) {
    let (min, max) = range.unwrap_or((1.0, base));
    let lo = min.log(base).floor();
    let hi = max.log(base).ceil().max(lo + 1.0);
    let ticks = if base == 10.0 && hi - lo <= 2.0 {
        log10_ticks_125(lo as i32, hi as i32)
    } else {
        log_ticks(min, max, base, 12)
    };
    (ticks, lo, hi)
}

/// The style of the charts [`responsive`] draws, for any page that shows them: the text
/// classes at the sizes the layout measured them at, and the box of each layout (the wide one
/// on screens of 800 px and more and in print, never under one CSS pixel per SVG unit on
/// screen, scrolling sideways instead).
pub fn chart_css() -> String {
    use frame::{LEGEND_FONT, TITLE_FONT};
    let (wide, narrow) = (Layout::Wide.width(), Layout::Narrow.width());
    format!(
        "svg.chart {{ display: block; width: 100%; height: auto; background: #fff; }}
.chart-box {{ overflow-x: auto; }}
.chart-wide svg.chart {{ min-width: {wide}px; }}
.chart-narrow {{ display: none; }}
.chart-narrow svg.chart {{ min-width: {narrow}px; max-width: 560px; }}
svg .point-label {{ font-size: 11px; fill: #555; }}
svg .chart-title {{ font-size: {TITLE_FONT}px; font-weight: 600; }}
svg .tick {{ font-size: {TICK_FONT}px; fill: #444; }}
svg .axis-label {{ font-size: 12px; fill: #222; }}
svg .legend-text {{ font-size: {LEGEND_FONT}px; fill: #222; }}
svg .no-data {{ font-size: 14px; fill: #888; }}
svg .grid line {{ stroke: #e6e6e6; stroke-width: 1; }}
svg .frame {{ fill: none; stroke: #999; }}
@media screen and (max-width: 799px) {{ .chart-wide {{ display: none; }} .chart-narrow {{ display: block; }} }}
@media print {{ .chart-wide svg.chart {{ min-width: 0; }} }}
"
    )
}

/// Both layouts of one chart, for the page to show one by screen width: the wide one on
/// screens of 800 px and more (and in print), the narrow one below; each in a box that
/// scrolls sideways when the screen is narrower than the chart's least width.
pub fn responsive(draw: impl Fn(Layout) -> String) -> String {
    format!(
        "<div class=\"chart-box chart-wide\">{}</div><div class=\"chart-box chart-narrow\">{}</div>",
        draw(Layout::Wide),
        draw(Layout::Narrow)
    )
}

/// Wraps a chart's drawing in its `<svg>` element, with its accessible title and its title
/// lines on top.
fn finish_svg(frame: &Frame, height: f64, title: &str, class: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + 400);
    let width = frame.width;
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart {class}" width="100%" viewBox="0 0 {width:.0} {height:.0}" role="img"><title>{t}</title>"#,
        t = escape(title)
    );
    for (i, line) in frame.title.iter().enumerate() {
        text(
            &mut out,
            width / 2.0,
            20.0 + 18.0 * i as f64,
            "middle",
            "chart-title",
            line,
        );
    }
    out.push_str(body);
    out.push_str("</svg>");
    out
}

fn text(out: &mut String, x: f64, y: f64, anchor: &str, class: &str, content: &str) {
    let _ = write!(
        out,
        r#"<text class="{class}" x="{x:.1}" y="{y:.1}" text-anchor="{anchor}">{c}</text>"#,
        c = escape(content)
    );
}

/// Text turned 45° counter-clockwise about its end at (x, y).
fn slanted(out: &mut String, x: f64, y: f64, class: &str, content: &str) {
    let _ = write!(
        out,
        r#"<text class="{class}" x="{x:.1}" y="{y:.1}" text-anchor="end" transform="rotate(-45 {x:.1} {y:.1})">{c}</text>"#,
        c = escape(content)
    );
}

/// Room under the plot for one row of x tick labels and the x axis label.
const BELOW_AXIS: f64 = 52.0;

/// Draws both axes with their grid, tick labels (thinned so that none overlaps its
/// neighbour) and frame.
fn draw_axes(out: &mut String, xm: &Mapper, x_ticks: &[f64], ym: &Mapper, y_ticks: &[f64]) {
    let (left, right) = (xm.from_px, xm.to_px);
    let (bottom, top) = (ym.from_px, ym.to_px);
    out.push_str(r#"<g class="grid">"#);
    for &t in y_ticks {
        let y = ym.px(t);
        let _ = write!(
            out,
            r#"<line x1="{left:.1}" y1="{y:.1}" x2="{right:.1}" y2="{y:.1}"/>"#
        );
    }
    for &t in x_ticks {
        let x = xm.px(t);
        let _ = write!(
            out,
            r#"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{bottom:.1}"/>"#
        );
    }
    out.push_str("</g>");
    let y_at: Vec<f64> = y_ticks.iter().map(|t| ym.px(*t)).collect();
    let y_every = thin_every(&y_at, &vec![TICK_FONT + 2.0; y_at.len()]);
    for (&t, &y) in y_ticks.iter().zip(&y_at).step_by(y_every) {
        text(out, left - 6.0, y + 4.0, "end", "tick y", &format_number(t));
    }
    let x_text: Vec<String> = x_ticks.iter().map(|t| format_number(*t)).collect();
    let x_at: Vec<f64> = x_ticks.iter().map(|t| xm.px(*t)).collect();
    let widths: Vec<f64> = x_text.iter().map(|t| text_width(t, TICK_FONT)).collect();
    let x_every = thin_every(&x_at, &widths);
    for (label, &x) in x_text.iter().zip(&x_at).step_by(x_every) {
        text(out, x, bottom + 16.0, "middle", "tick x", label);
    }
    let _ = write!(
        out,
        r#"<rect class="frame" x="{left:.1}" y="{top:.1}" width="{w:.1}" height="{h:.1}"/>"#,
        w = right - left,
        h = bottom - top
    );
}

/// The axis labels: the x one `below_axis − 14` under the plot, the y one turned along the
/// left edge.
fn axis_labels(out: &mut String, x_label: &str, y_label: &str, plot: Plot, below_axis: f64) {
    let (left, top, right, bottom) = plot;
    text(
        out,
        (left + right) / 2.0,
        bottom + below_axis - 14.0,
        "middle",
        "axis-label",
        x_label,
    );
    let (x, y) = (16.0, (top + bottom) / 2.0);
    let _ = write!(
        out,
        r#"<text class="axis-label" x="{x:.1}" y="{y:.1}" text-anchor="middle" transform="rotate(-90 {x:.1} {y:.1})">{c}</text>"#,
        c = escape(y_label)
    );
}

/// The plot rectangle: (left, top, right, bottom).
type Plot = (f64, f64, f64, f64);

/// One legend entry: (name, colour index, dashed, filled box instead of a line).
struct LegendEntry<'a> {
    name: &'a str,
    color: usize,
    dashed: bool,
    swatch: bool,
    /// An × instead of a line sample (a series of crosses).
    cross: bool,
}

/// The legend, one entry per row from (x, top).
fn draw_legend(out: &mut String, entries: &[LegendEntry], (x, top): (f64, f64)) {
    out.push_str(r#"<g class="legend">"#);
    for (i, e) in entries.iter().enumerate() {
        let y = top + 8.0 + i as f64 * LEGEND_ROW;
        let c = color(e.color);
        if e.swatch {
            let _ = write!(
                out,
                r#"<rect x="{x:.1}" y="{:.1}" width="18" height="10" fill="{c}"/>"#,
                y - 5.0
            );
        } else if e.cross {
            let _ = write!(
                out,
                r#"<path d="M{:.1},{:.1}l8,8m0,-8l-8,8" stroke="{c}" stroke-width="2"/>"#,
                x + 5.0,
                y - 4.0
            );
        } else {
            let dash = if e.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            let _ = write!(
                out,
                r#"<line x1="{x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{c}" stroke-width="2"{dash}/>"#,
                x + 18.0
            );
        }
        text(out, x + SWATCH, y + 4.0, "start", "legend-text", e.name);
    }
    out.push_str("</g>");
}

fn no_data(out: &mut String, plot: Plot) {
    let (left, top, right, bottom) = plot;
    text(
        out,
        (left + right) / 2.0,
        (top + bottom) / 2.0,
        "middle",
        "no-data",
        "no data",
    );
}

/// Renders a line chart at `layout`.
pub fn line_chart(chart: &LineChart, layout: Layout) -> String {
    line_chart_with_tips(chart, &[], layout)
}

/// Renders a line chart whose markers show `tips[i][j]` on hover (series i, point j) in place
/// of `name: x, y`; a series or point without one keeps that.
pub fn line_chart_with_tips(chart: &LineChart, tips: &[Vec<String>], layout: Layout) -> String {
    let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
    let frame = Frame::new(layout, &chart.title, &names);
    let plot = frame.plot;
    let mut out = String::new();
    let all = |f: fn(&(f64, f64)) -> f64| -> Vec<f64> {
        chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(f))
            .collect()
    };
    let (xm, x_ticks) = Mapper::horizontal(chart.x.scale, &all(|p| p.0), plot);
    // The whiskers' ends stay inside the plot too.
    let ends = chart
        .series
        .iter()
        .flat_map(|s| s.intervals.iter().flatten().flat_map(|&(lo, hi)| [lo, hi]));
    let ys: Vec<f64> = all(|p| p.1).into_iter().chain(ends).collect();
    let (ym, y_ticks) = Mapper::vertical(chart.y.scale, &ys, plot);
    draw_axes(&mut out, &xm, &x_ticks, &ym, &y_ticks);
    axis_labels(&mut out, &chart.x.label, &chart.y.label, plot, BELOW_AXIS);
    let mut drawn = 0;
    // Boxes of the point labels drawn so far, so that none is drawn over another.
    let mut taken = Vec::new();
    for (i, s) in chart.series.iter().enumerate() {
        let tips = tips.get(i).map_or(&[][..], Vec::as_slice);
        drawn += draw_line(&mut out, s, tips, &xm, &ym);
        point_labels(&mut out, s, (&xm, &ym), frame.width, &mut taken);
    }
    if drawn == 0 {
        no_data(&mut out, plot);
    }
    let entries: Vec<LegendEntry> = chart
        .series
        .iter()
        .map(|s| LegendEntry {
            name: &s.name,
            color: s.color,
            dashed: s.dashed,
            swatch: false,
            cross: s.crosses,
        })
        .collect();
    draw_legend(&mut out, &entries, frame.legend_at(BELOW_AXIS));
    let height = frame.height(BELOW_AXIS);
    finish_svg(&frame, height, &chart.title, "line-chart", &out)
}

/// Draws one series, `tips` its markers' hover texts; returns how many points were placed.
fn draw_line(out: &mut String, s: &LineSeries, tips: &[String], xm: &Mapper, ym: &Mapper) -> usize {
    let pts: Vec<(f64, f64, f64, f64, bool)> = s
        .points
        .iter()
        .enumerate()
        .filter(|(_, (x, y))| plottable(xm.scale, *x) && plottable(ym.scale, *y))
        .map(|(i, &(x, y))| {
            let hollow = s.hollow.get(i).copied().unwrap_or(false);
            (xm.px(x), ym.px(y), x, y, hollow)
        })
        .collect();
    if pts.is_empty() {
        return 0;
    }
    // The hover text of each point drawn: its tip, else `name: x, y`.
    let texts: Vec<String> = s
        .points
        .iter()
        .enumerate()
        .filter(|(_, (x, y))| plottable(xm.scale, *x) && plottable(ym.scale, *y))
        .map(|(i, &(x, y))| match tips.get(i) {
            Some(tip) => tip.clone(),
            None => format!("{}: {}, {}", s.name, format_number(x), format_number(y)),
        })
        .collect();
    let c = color(s.color);
    out.push_str("<g class=\"series\">");
    if !s.crosses {
        polyline(out, s, c, &pts);
    }
    whiskers(out, s, c, xm, ym);
    let marked = if s.markers || s.crosses {
        &pts[..]
    } else {
        &[]
    };
    for ((px, py, _, _, hollow), tip) in marked.iter().zip(&texts) {
        let tip = escape(tip);
        if s.crosses {
            let _ = write!(
                out,
                r#"<path class="cross" d="M{:.1},{:.1}l8,8m0,-8l-8,8" stroke="{c}" stroke-width="2"><title>{tip}</title></path>"#,
                px - 4.0,
                py - 4.0
            );
        } else {
            let fill = if *hollow { "#ffffff" } else { c };
            let _ = write!(
                out,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{fill}" stroke="{c}" stroke-width="1.5"><title>{tip}</title></circle>"#
            );
        }
    }
    out.push_str("</g>");
    pts.len()
}

fn polyline(out: &mut String, s: &LineSeries, c: &str, pts: &[(f64, f64, f64, f64, bool)]) {
    let coords: Vec<String> = pts
        .iter()
        .map(|(px, py, ..)| format!("{px:.1},{py:.1}"))
        .collect();
    let dash = if s.dashed {
        r#" stroke-dasharray="6 4""#
    } else {
        ""
    };
    let _ = write!(
        out,
        r#"<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{}"/>"#,
        coords.join(" ")
    );
}

/// A vertical line with short caps from each point's interval low to high.
fn whiskers(out: &mut String, s: &LineSeries, c: &str, xm: &Mapper, ym: &Mapper) {
    for (&(x, _), iv) in s.points.iter().zip(&s.intervals) {
        let Some((lo, hi)) = *iv else { continue };
        let shown = plottable(xm.scale, x) && plottable(ym.scale, lo) && plottable(ym.scale, hi);
        if !shown || hi <= lo {
            continue;
        }
        let (px, top, bottom) = (xm.px(x), ym.px(hi), ym.px(lo));
        let _ = write!(
            out,
            r#"<path class="interval" d="M{px:.1},{bottom:.1}V{top:.1}M{:.1},{top:.1}h6M{:.1},{bottom:.1}h6" stroke="{c}" stroke-width="1" fill="none"><title>{}: {} to {}</title></path>"#,
            px - 3.0,
            px - 3.0,
            escape(&s.name),
            format_number(lo),
            format_number(hi)
        );
    }
}

/// A label's box: (left, top, right, bottom).
type LabelBox = (f64, f64, f64, f64);

/// Each labelled point's text beside its marker: above right, else below right, above left or
/// below left, whichever first stays inside the chart's `width` and clear of the labels
/// already drawn (`taken`); none when all four would touch one (the marker's tooltip still
/// names it).
fn point_labels(
    out: &mut String,
    s: &LineSeries,
    (xm, ym): (&Mapper, &Mapper),
    width: f64,
    taken: &mut Vec<LabelBox>,
) {
    for (&(x, y), label) in s.points.iter().zip(&s.labels) {
        if label.is_empty() || !(plottable(xm.scale, x) && plottable(ym.scale, y)) {
            continue;
        }
        let (px, py) = (xm.px(x), ym.px(y));
        let w = text_width(label, TICK_FONT);
        let spots = [
            (px + 5.0, py - 6.0, "start"),
            (px + 5.0, py + 15.0, "start"),
            (px - 5.0, py - 6.0, "end"),
            (px - 5.0, py + 15.0, "end"),
        ];
        let free = spots.into_iter().find_map(|(tx, ty, anchor)| {
            let left = if anchor == "start" { tx } else { tx - w };
            // The text's box: ascent about 0.8 em above the baseline, descent 0.25 em below.
            let b = (left, ty - 0.8 * TICK_FONT, left + w, ty + 0.25 * TICK_FONT);
            let inside = b.0 >= 0.0 && b.2 <= width;
            let clear = taken.iter().all(|t| {
                b.2 + 1.0 <= t.0 || t.2 + 1.0 <= b.0 || b.3 + 1.0 <= t.1 || t.3 + 1.0 <= b.1
            });
            (inside && clear).then_some((tx, ty, anchor, b))
        });
        if let Some((tx, ty, anchor, b)) = free {
            text(out, tx, ty, anchor, "point-label", label);
            taken.push(b);
        }
    }
}

/// Renders a stacked bar chart at `layout`.
pub fn stacked_bar_chart(chart: &StackedBars, layout: Layout) -> String {
    let names: Vec<&str> = chart.layers.iter().map(|(n, _)| n.as_str()).collect();
    let frame = Frame::new(layout, &chart.title, &names);
    let plot = frame.plot;
    let mut out = String::new();
    let totals: Vec<f64> = (0..chart.categories.len())
        .map(|i| {
            chart
                .layers
                .iter()
                .filter_map(|(_, v)| v.get(i).copied())
                .filter(|v| v.is_finite() && *v > 0.0)
                .sum()
        })
        .collect();
    let mut scale_values = totals.clone();
    scale_values.extend(chart.y_max);
    let (ym, y_ticks) = Mapper::vertical(Scale::Linear, &scale_values, plot);
    let n = chart.categories.len().max(1) as f64;
    let slot = (plot.2 - plot.0) / n;
    // Bars stand on categories, not on an x scale: only the plot's edges are used.
    let xm = Mapper {
        scale: Scale::Linear,
        lo: 0.0,
        hi: 1.0,
        from_px: plot.0,
        to_px: plot.2,
    };
    draw_axes(&mut out, &xm, &[], &ym, &y_ticks);
    for i in 0..chart.categories.len() {
        let x = plot.0 + slot * i as f64 + slot * 0.15;
        draw_stack(&mut out, chart, i, x, slot * 0.7, &ym);
    }
    let labels = bar_labels(chart, plot.0, slot);
    if !chart.groups.is_empty() {
        // A short tick under the axis between two groups' bars.
        for (_, centre, span) in labels.iter().skip(1) {
            let x = centre - span / 2.0;
            let _ = write!(
                out,
                r##"<line x1="{x:.1}" y1="{b:.1}" x2="{x:.1}" y2="{:.1}" stroke="#999"/>"##,
                plot.3 + 8.0,
                b = plot.3
            );
        }
    }
    let below_axis = category_labels(&mut out, &labels, plot);
    if chart.categories.is_empty() {
        no_data(&mut out, plot);
    }
    axis_labels(&mut out, &chart.x_label, &chart.y_label, plot, below_axis);
    let entries: Vec<LegendEntry> = names
        .iter()
        .enumerate()
        .map(|(i, name)| LegendEntry {
            name,
            color: chart.color_of(i),
            dashed: false,
            swatch: true,
            cross: false,
        })
        .collect();
    draw_legend(&mut out, &entries, frame.legend_at(below_axis));
    let height = frame.height(below_axis);
    finish_svg(&frame, height, &chart.title, "stacked-bars", &out)
}

/// The labels under the bars: (text, centre, width of the bars it names).
fn bar_labels(chart: &StackedBars, left: f64, slot: f64) -> Vec<(String, f64, f64)> {
    if chart.groups.is_empty() {
        return chart
            .categories
            .iter()
            .enumerate()
            .map(|(i, c)| (c.clone(), left + slot * (i as f64 + 0.5), slot))
            .collect();
    }
    let mut first = 0;
    let mut labels = Vec::new();
    for (label, bars) in &chart.groups {
        let span = slot * *bars as f64;
        labels.push((label.clone(), left + slot * first as f64 + span / 2.0, span));
        first += bars;
    }
    labels
}

/// Labels under the bars: level when each fits over the bars it names, else slanted 45° (and
/// only every k-th one when even slanted ones would touch). Returns the room they and the
/// axis label take under the plot.
fn category_labels(out: &mut String, labels: &[(String, f64, f64)], plot: Plot) -> f64 {
    let widths: Vec<f64> = labels
        .iter()
        .map(|(c, ..)| text_width(c, TICK_FONT))
        .collect();
    if labels
        .iter()
        .zip(&widths)
        .all(|((.., span), w)| w + 6.0 <= *span)
    {
        for (c, centre, _) in labels {
            text(out, *centre, plot.3 + 16.0, "middle", "tick x", c);
        }
        return BELOW_AXIS;
    }
    // Slanted labels are parallel: their distance apart is their centres' × sin 45°, which
    // must hold a line of text.
    let centres: Vec<f64> = labels
        .iter()
        .map(|(_, c, _)| c * std::f64::consts::FRAC_1_SQRT_2)
        .collect();
    let every = thin_every(&centres, &vec![TICK_FONT + 2.0; labels.len()]);
    for (c, centre, _) in labels.iter().step_by(every) {
        slanted(out, centre + 4.0, plot.3 + 12.0, "tick x", c);
    }
    let widest = widths.iter().copied().fold(0.0, f64::max);
    12.0 + (widest + TICK_FONT) * std::f64::consts::FRAC_1_SQRT_2 + 30.0
}

fn draw_stack(out: &mut String, chart: &StackedBars, i: usize, x: f64, w: f64, ym: &Mapper) {
    let mut base = 0.0;
    for (layer, (name, values)) in chart.layers.iter().enumerate() {
        let v = values.get(i).copied().unwrap_or(0.0);
        if !v.is_finite() || v <= 0.0 {
            continue;
        }
        let (y_top, y_bottom) = (ym.px(base + v), ym.px(base));
        let _ = write!(
            out,
            r#"<rect x="{x:.1}" y="{y_top:.1}" width="{w:.1}" height="{h:.1}" fill="{c}"><title>{cat}: {n} {val}</title></rect>"#,
            h = y_bottom - y_top,
            c = color(chart.color_of(layer)),
            cat = escape(&chart.categories[i]),
            n = escape(name),
            val = format_number(v)
        );
        base += v;
    }
}

/// The fill of a busy percentage: white through orange to dark red.
pub fn heat_color(pct: f64) -> String {
    let t = if pct.is_finite() {
        (pct / 100.0).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let stops = [
        (255.0, 255.0, 255.0),
        (253.0, 141.0, 60.0),
        (128.0, 0.0, 38.0),
    ];
    let (a, b, f) = if t < 0.5 {
        (stops[0], stops[1], t * 2.0)
    } else {
        (stops[1], stops[2], (t - 0.5) * 2.0)
    };
    let mix = |x: f64, y: f64| (x + (y - x) * f).round() as u8;
    format!(
        "#{:02x}{:02x}{:02x}",
        mix(a.0, b.0),
        mix(a.1, b.1),
        mix(a.2, b.2)
    )
}

/// Renders a heat map at `layout`.
pub fn heat_map(chart: &HeatMap, layout: Layout) -> String {
    let frame = Frame::new(layout, &chart.title, &[]);
    let rows = chart.rows.len();
    let cell_h = if rows > 16 { 10.0 } else { 18.0 };
    let mut out = String::new();
    let (left, top, right) = (frame.plot.0, frame.plot.1, frame.width - 24.0);
    let cols = chart.columns.len().max(1);
    let cell_w = (right - left) / cols as f64;
    for (r, label) in chart.rows.iter().enumerate() {
        let y = top + r as f64 * cell_h;
        for (c, v) in chart.values.get(r).into_iter().flatten().enumerate() {
            let x = left + c as f64 * cell_w;
            let col = chart.columns.get(c).map_or("", String::as_str);
            let _ = write!(
                out,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{cell_w:.2}" height="{cell_h:.1}" fill="{f}"><title>{l} at {t}: {p}%</title></rect>"#,
                f = heat_color(*v),
                l = escape(label),
                t = escape(col),
                p = format_number(*v)
            );
        }
    }
    // Row labels: every k-th one when rows are thinner than a line of text.
    let row_at: Vec<f64> = (0..rows).map(|r| top + (r as f64 + 0.5) * cell_h).collect();
    let row_every = thin_every(&row_at, &vec![TICK_FONT + 2.0; rows]);
    for (label, y) in chart.rows.iter().zip(&row_at).step_by(row_every) {
        text(&mut out, left - 6.0, y + 4.0, "end", "tick y", label);
    }
    let bottom = top + rows as f64 * cell_h;
    let col_at: Vec<f64> = (0..chart.columns.len())
        .map(|c| left + (c as f64 + 0.5) * cell_w)
        .collect();
    let widths: Vec<f64> = chart
        .columns
        .iter()
        .map(|c| text_width(c, TICK_FONT))
        .collect();
    let every = thin_every(&col_at, &widths);
    for (label, x) in chart.columns.iter().zip(&col_at).step_by(every) {
        text(&mut out, *x, bottom + 14.0, "middle", "tick x", label);
    }
    text(
        &mut out,
        (left + right) / 2.0,
        bottom + 32.0,
        "middle",
        "axis-label",
        &chart.x_label,
    );
    if rows == 0 {
        no_data(&mut out, (left, top, right, top + 60.0));
    }
    heat_scale(&mut out, right - 200.0, bottom + 40.0);
    let height = (bottom + 56.0).max(top + 124.0);
    finish_svg(&frame, height, &chart.title, "heat-map", &out)
}

/// A small colour key 0–100 %.
fn heat_scale(out: &mut String, x: f64, y: f64) {
    out.push_str(r#"<g class="heat-scale">"#);
    for i in 0..10 {
        let pct = i as f64 * 10.0 + 5.0;
        let _ = write!(
            out,
            r#"<rect x="{:.1}" y="{y:.1}" width="14" height="8" fill="{}"/>"#,
            x + 30.0 + i as f64 * 14.0,
            heat_color(pct)
        );
    }
    text(out, x + 26.0, y + 8.0, "end", "tick", "0%");
    text(out, x + 174.0, y + 8.0, "start", "tick", "100%");
    out.push_str("</g>");
}

/// Renders histogram bars on a log-10 x axis at `layout`.
pub fn histogram(chart: &HistogramBars, layout: Layout) -> String {
    let frame = Frame::new(layout, &chart.title, &[]);
    let plot = frame.plot;
    let mut out = String::new();
    let buckets: Vec<&(f64, f64, u64)> = chart
        .buckets
        .iter()
        .filter(|(lo, hi, _)| *lo > 0.0 && hi > lo && hi.is_finite())
        .collect();
    let edges: Vec<f64> = buckets.iter().flat_map(|(lo, hi, _)| [*lo, *hi]).collect();
    let counts: Vec<f64> = buckets.iter().map(|b| b.2 as f64).collect();
    let (xm, x_ticks) = Mapper::horizontal(Scale::Log10, &edges, plot);
    let (ym, y_ticks) = Mapper::vertical(Scale::Linear, &counts, plot);
    draw_axes(&mut out, &xm, &x_ticks, &ym, &y_ticks);
    for (lo, hi, count) in &buckets {
        let (x0, x1) = (xm.px(*lo), xm.px(*hi));
        let y = ym.px(*count as f64);
        let _ = write!(
            out,
            r#"<rect class="bar" x="{x0:.1}" y="{y:.1}" width="{w:.2}" height="{h:.1}" fill="{c}"><title>{a}–{b}: {count}</title></rect>"#,
            w = (x1 - x0).max(0.5),
            h = plot.3 - y,
            c = color(0),
            a = format_number(*lo),
            b = format_number(*hi)
        );
    }
    if buckets.is_empty() {
        no_data(&mut out, plot);
    }
    axis_labels(&mut out, &chart.x_label, "requests", plot, BELOW_AXIS);
    let height = frame.height(BELOW_AXIS);
    finish_svg(&frame, height, &chart.title, "histogram", &out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks that `svg` is one well-formed XML element tree, returning its element names.
    fn well_formed(svg: &str) -> Vec<String> {
        use quick_xml::events::Event;
        let mut reader = quick_xml::Reader::from_str(svg);
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        loop {
            match reader.read_event().expect("well-formed XML") {
                Event::Start(e) => {
                    let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                    names.push(name.clone());
                    stack.push(name);
                }
                Event::Empty(e) => {
                    names.push(String::from_utf8(e.name().as_ref().to_vec()).unwrap());
                }
                Event::End(e) => {
                    let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                    assert_eq!(stack.pop().as_deref(), Some(name.as_str()), "balanced tags");
                }
                Event::Text(t) => {
                    // Every entity must be one XML knows.
                    t.decode().expect("decodable text");
                }
                Event::Eof => break,
                _ => {}
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        assert_eq!(names.first().map(String::as_str), Some("svg"));
        names
    }

    fn sample_line() -> LineChart {
        LineChart {
            title: "throughput <script>alert(1)</script>".into(),
            x: Axis::with_scale("clients", Scale::Log2),
            y: Axis::linear("requests/s"),
            series: vec![
                LineSeries {
                    name: "<script>alert(\"x\")</script> & co".into(),
                    points: vec![(1.0, 1000.0), (2.0, 1900.0), (4.0, 3500.0), (8.0, 4000.0)],
                    color: 0,
                    dashed: false,
                    markers: true,
                    hollow: vec![false, false, false, true],
                    labels: Vec::new(),
                    ..Default::default()
                },
                LineSeries {
                    name: "USL fit".into(),
                    points: vec![(1.0, 1000.0), (8.0, 4100.0)],
                    color: 0,
                    dashed: true,
                    markers: false,
                    hollow: Vec::new(),
                    labels: Vec::new(),
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn nice_ticks_use_1_2_5_steps_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 4200.0, 5),
            vec![0.0, 1000.0, 2000.0, 3000.0, 4000.0, 5000.0]
        );
        assert_eq!(nice_ticks(0.0, 9.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = nice_ticks(0.13, 0.61, 5);
        assert_eq!(t.first().copied(), Some(0.1));
        assert!(*t.last().unwrap() >= 0.61);
        let steps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(steps.iter().all(|s| (s - 0.1).abs() < 1e-9), "{t:?}");
        // A flat series still gets an axis.
        assert!(nice_ticks(5.0, 5.0, 5).len() >= 2);
    }

    #[test]
    fn log_ticks_are_powers_and_thinned() {
        assert_eq!(
            log_ticks(1.0, 16.0, 2.0, 12),
            vec![1.0, 2.0, 4.0, 8.0, 16.0]
        );
        assert_eq!(
            log_ticks(3.0, 20.0, 2.0, 12),
            vec![2.0, 4.0, 8.0, 16.0, 32.0]
        );
        assert_eq!(
            log_ticks(4.0, 150.0, 10.0, 12),
            vec![1.0, 10.0, 100.0, 1000.0]
        );
        let thin = log_ticks(1.0, 65536.0, 2.0, 6);
        assert!(thin.len() <= 6, "{thin:?}");
        assert_eq!(thin[0], 1.0);
    }

    #[test]
    fn numbers_are_short() {
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(1500000.0), "1.5M");
        assert_eq!(format_number(250000.0), "250k");
        assert_eq!(format_number(4200.0), "4200");
        assert_eq!(format_number(0.05), "0.05");
        assert_eq!(format_number(13.9), "13.9");
        assert_eq!(format_number(-2.0), "-2");
        assert_eq!(format_number(f64::NAN), "–");
    }

    #[test]
    fn escaping_covers_markup_and_controls() {
        assert_eq!(
            escape(r#"<script>"a"&'b'</script>"#),
            "&lt;script&gt;&quot;a&quot;&amp;&#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(escape("a\u{1}b"), "a\u{FFFD}b");
    }

    #[test]
    fn line_chart_is_well_formed_and_escaped() {
        let svg = line_chart(&sample_line(), Layout::Wide);
        let names = well_formed(&svg);
        assert!(!svg.contains("<script"), "{svg}");
        assert!(svg.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co"));
        assert!(svg.contains(r#"stroke-dasharray="6 4""#));
        assert_eq!(names.iter().filter(|n| *n == "circle").count(), 4);
        assert!(
            svg.contains(">16<") || svg.contains(">8<"),
            "log2 tick labels"
        );
    }

    #[test]
    fn charts_are_deterministic() {
        assert_eq!(
            line_chart(&sample_line(), Layout::Wide),
            line_chart(&sample_line(), Layout::Wide)
        );
    }

    #[test]
    fn log_axis_skips_points_it_cannot_place() {
        let mut chart = sample_line();
        chart.series[0].points.insert(0, (0.0, 10.0));
        let svg = line_chart(&chart, Layout::Wide);
        well_formed(&svg);
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }

    #[test]
    fn empty_charts_say_no_data_and_stay_well_formed() {
        let mut chart = sample_line();
        chart.series.clear();
        for svg in [
            line_chart(&chart, Layout::Wide),
            stacked_bar_chart(
                &StackedBars {
                    title: "cpu".into(),
                    x_label: "clients".into(),
                    y_label: "µs".into(),
                    categories: vec![],
                    layers: vec![],
                    y_max: None,
                    groups: Vec::new(),
                    colors: Vec::new(),
                },
                Layout::Wide,
            ),
            heat_map(
                &HeatMap {
                    title: "busy".into(),
                    x_label: "s".into(),
                    columns: vec![],
                    rows: vec![],
                    values: vec![],
                },
                Layout::Wide,
            ),
            histogram(
                &HistogramBars {
                    title: "latency".into(),
                    x_label: "µs".into(),
                    buckets: vec![],
                },
                Layout::Wide,
            ),
        ] {
            well_formed(&svg);
            assert!(svg.contains("no data"), "{svg}");
        }
    }

    #[test]
    fn stacked_bars_stack_layers() {
        let svg = stacked_bar_chart(
            &StackedBars {
                title: "CPU per request".into(),
                x_label: "clients".into(),
                y_label: "CPU µs per request".into(),
                categories: vec!["1".into(), "2".into(), "<4>".into()],
                layers: vec![
                    ("user".into(), vec![10.0, 9.0, 8.0]),
                    ("sys".into(), vec![5.0, 5.0, 6.0]),
                ],
                y_max: None,
                groups: Vec::new(),
                colors: Vec::new(),
            },
            Layout::Wide,
        );
        let names = well_formed(&svg);
        // 3 bars × 2 layers, the frame, 2 legend swatches.
        assert_eq!(names.iter().filter(|n| *n == "rect").count(), 3 * 2 + 1 + 2);
        assert!(svg.contains("&lt;4&gt;"));
    }

    #[test]
    fn heat_map_colours_follow_the_value() {
        assert_eq!(heat_color(0.0), "#ffffff");
        assert_eq!(heat_color(100.0), "#800026");
        assert_eq!(heat_color(250.0), "#800026");
        let svg = heat_map(
            &HeatMap {
                title: "per-core busy".into(),
                x_label: "seconds".into(),
                columns: vec!["1".into(), "2".into()],
                rows: vec!["cpu0".into(), "cpu1".into()],
                values: vec![vec![0.0, 50.0], vec![100.0, 75.0]],
            },
            Layout::Wide,
        );
        well_formed(&svg);
        assert!(svg.contains(&format!(r#"fill="{}""#, heat_color(50.0))));
        assert!(svg.contains("cpu1 at 1: 100%"));
    }

    #[test]
    fn histogram_bars_sit_on_a_log_axis() {
        let svg = histogram(
            &HistogramBars {
                title: "latency".into(),
                x_label: "latency (µs)".into(),
                buckets: vec![(4.0, 5.0, 100), (5.0, 6.0, 300), (13.0, 14.0, 2000)],
            },
            Layout::Wide,
        );
        let names = well_formed(&svg);
        assert_eq!(names.iter().filter(|n| *n == "rect").count(), 3 + 1);
        for tick in [">1<", ">2<", ">5<", ">10<", ">20<", ">50<", ">100<"] {
            assert!(svg.contains(tick), "{tick}");
        }
        assert!(!svg.contains(">200<"));
    }

    /// (x, y) of each text of `class` in `svg`.
    fn text_positions(svg: &str, class: &str) -> Vec<(f64, f64)> {
        let re = regex::Regex::new(&format!(
            r#"<text class="{class}" x="([-0-9.]+)" y="([-0-9.]+)""#
        ))
        .unwrap();
        re.captures_iter(svg)
            .map(|c| (c[1].parse().unwrap(), c[2].parse().unwrap()))
            .collect()
    }

    #[test]
    fn many_long_categories_are_slanted_and_thinned_apart() {
        let chart = StackedBars {
            title: "a title long enough to need two lines on a phone: server threads' CPU".into(),
            x_label: "clients".into(),
            y_label: "%".into(),
            categories: (0..40)
                .map(|i| format!("{} #{}", 1 << (i / 5), i % 5 + 1))
                .collect(),
            layers: vec![("w".into(), vec![10.0; 40])],
            y_max: None,
            groups: Vec::new(),
            colors: Vec::new(),
        };
        for layout in [Layout::Wide, Layout::Narrow] {
            let svg = stacked_bar_chart(&chart, layout);
            well_formed(&svg);
            assert!(svg.contains("rotate(-45"), "{layout:?}: slanted");
            let xs: Vec<f64> = text_positions(&svg, "tick x").iter().map(|p| p.0).collect();
            assert!(
                xs.len() >= 2 && xs.len() < 40,
                "{layout:?}: thinned, {}",
                xs.len()
            );
            // Parallel slanted lines of 11-unit text: ≥ 13 units apart across them.
            for w in xs.windows(2) {
                assert!(
                    (w[1] - w[0]) * std::f64::consts::FRAC_1_SQRT_2 >= 13.0,
                    "{xs:?}"
                );
            }
            // The title wraps in the narrow layout, and no line is wider than the chart.
            let titles = text_positions(&svg, "chart-title");
            assert_eq!(titles.len(), if layout == Layout::Narrow { 2 } else { 1 });
        }
    }

    #[test]
    fn narrow_line_charts_put_the_legend_below_and_thin_their_ticks() {
        let mut chart = sample_line();
        // 17 octaves of clients: 18 ticks, too many for 290 units of 11-unit labels.
        chart.series[0].points = (0..18).map(|e| ((1u64 << e) as f64, 100.0)).collect();
        let svg = line_chart(&chart, Layout::Narrow);
        well_formed(&svg);
        assert!(svg.contains(r#"viewBox="0 0 360 "#));
        let frame = text_positions(&svg, "tick y");
        let plot_bottom = frame.iter().map(|p| p.1).fold(0.0, f64::max);
        let legend = text_positions(&svg, "legend-text");
        assert_eq!(legend.len(), 2);
        assert!(
            legend.iter().all(|p| p.1 > plot_bottom + 40.0),
            "{legend:?}"
        );
        let re = regex::Regex::new(r#"<text class="tick x" x="([-0-9.]+)"[^>]*>([^<]*)<"#).unwrap();
        let xs: Vec<(f64, String)> = re
            .captures_iter(&svg)
            .map(|c| (c[1].parse().unwrap(), c[2].to_string()))
            .collect();
        assert!(xs.len() >= 3 && xs.len() < 18, "thinned: {xs:?}");
        for w in xs.windows(2) {
            let room = (text_width(&w[0].1, TICK_FONT) + text_width(&w[1].1, TICK_FONT)) / 2.0;
            assert!(w[1].0 - w[0].0 >= room, "{xs:?}");
        }
        // The wide one keeps a short legend right of the plot.
        let mut short = sample_line();
        short.series[0].name = "separated".into();
        let wide = line_chart(&short, Layout::Wide);
        let legend = text_positions(&wide, "legend-text");
        assert!(legend.iter().all(|p| p.0 > 500.0), "{legend:?}");
    }
}
