//! A chart's geometry at one of two widths: where its title, plot and legend go, and which of
//! its tick labels are drawn so that none overlaps another.
//!
//! Text sizes are in SVG units; the page draws a chart at one CSS pixel per unit or more
//! (a minimum width, then sideways scrolling), so an 11-unit label is never under 11 px.

/// Font sizes of the chart's text classes, in SVG units (the pages' style, `chart_css`, sets
/// the same): tick labels.
pub const TICK_FONT: f64 = 11.0;
/// Legend entries.
pub const LEGEND_FONT: f64 = 11.0;
/// The chart's title (bold).
pub const TITLE_FONT: f64 = 14.0;
/// Gap kept between two neighbouring labels, SVG units.
const LABEL_GAP: f64 = 4.0;
/// Height of one legend row.
pub const LEGEND_ROW: f64 = 18.0;
/// Room right of the plot for a legend in the wide layout.
const LEGEND_WIDTH: f64 = 210.0;
/// Swatch and the space after it, before a legend entry's text.
pub const SWATCH: f64 = 24.0;

/// The two widths a chart is drawn at; the page shows one or the other by screen width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// 760 units wide, the legend right of the plot when it fits: screens of 800 px and
    /// more, and print.
    Wide,
    /// 360 units wide, the legend below the plot: phones (a 390-px screen draws it at
    /// 1.04 px per unit).
    Narrow,
}

impl Layout {
    /// Width of the chart, SVG units (and the least CSS pixels the page draws it at).
    pub fn width(self) -> f64 {
        match self {
            Layout::Wide => 760.0,
            Layout::Narrow => 360.0,
        }
    }

    /// Height of the plot rectangle.
    pub fn plot_height(self) -> f64 {
        match self {
            Layout::Wide => 292.0,
            Layout::Narrow => 220.0,
        }
    }

    /// Room left of the plot for the y tick labels and the y axis label.
    pub fn margin_left(self) -> f64 {
        match self {
            Layout::Wide => 72.0,
            Layout::Narrow => 58.0,
        }
    }

    /// Room right of the plot when the legend is not there.
    pub fn margin_right(self) -> f64 {
        match self {
            Layout::Wide => 24.0,
            Layout::Narrow => 14.0,
        }
    }
}

/// Estimated width of `s` at `font` units, on the wide side: DejaVu Sans (a common wide
/// sans-serif) advances digits by 0.64 em, lower case by 0.28–0.97 em (0.6 on average).
pub fn text_width(s: &str, font: f64) -> f64 {
    let ems: f64 = s
        .chars()
        .map(|c| match c {
            ' ' | '.' | ',' | ':' | ';' | '·' | 'i' | 'l' | 'j' | '\'' | '|' => 0.34,
            '(' | ')' | '-' | 'f' | 't' | 'r' | '[' | ']' | '/' => 0.45,
            '0'..='9' => 0.64,
            'm' | 'w' | 'M' | 'W' | '#' | '%' | '@' => 1.0,
            c if c.is_ascii_uppercase() => 0.76,
            _ => 0.64,
        })
        .sum();
    ems * font
}

/// `text` broken at spaces into lines of at most `max_width` units at `font` (a single word
/// wider than that keeps its own line).
pub fn wrap(text: &str, max_width: f64, font: f64) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if text_width(&format!("{line} {word}"), font) <= max_width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// The least `k` such that drawing every k-th label (from the first) leaves no two
/// overlapping: `centres` along the axis, `extents` each label's size along it.
pub fn thin_every(centres: &[f64], extents: &[f64]) -> usize {
    let n = centres.len();
    (1..=n.max(1))
        .find(|&k| {
            let kept: Vec<usize> = (0..n).step_by(k).collect();
            kept.windows(2).all(|w| {
                let (a, b) = (w[0], w[1]);
                (centres[b] - centres[a]).abs() >= (extents[a] + extents[b]) / 2.0 + LABEL_GAP
            })
        })
        .unwrap_or(n.max(1))
}

/// Where a chart's parts go.
#[derive(Debug, Clone)]
pub struct Frame {
    /// Width of the chart.
    pub width: f64,
    /// The title's lines.
    pub title: Vec<String>,
    /// The plot rectangle: (left, top, right, bottom).
    pub plot: (f64, f64, f64, f64),
    /// Whether the legend stands right of the plot (else below it).
    pub legend_right: bool,
    /// Legend rows.
    pub legend_rows: usize,
}

impl Frame {
    /// The frame of a chart titled `title` with these legend entries (none: no legend), at
    /// `layout`. The legend goes right of the plot only in the wide layout, and only when its
    /// longest entry fits there.
    pub fn new(layout: Layout, title: &str, legend: &[&str]) -> Frame {
        let width = layout.width();
        let title = wrap(title, width - 16.0, TITLE_FONT * 1.08);
        let top = 36.0 + 18.0 * (title.len() as f64 - 1.0);
        let longest = legend
            .iter()
            .map(|n| text_width(n, LEGEND_FONT))
            .fold(0.0, f64::max);
        let legend_right = layout == Layout::Wide
            && !legend.is_empty()
            && 14.0 + SWATCH + longest + 6.0 <= LEGEND_WIDTH;
        let right = if legend_right {
            width - LEGEND_WIDTH
        } else {
            width - layout.margin_right()
        };
        Frame {
            width,
            title,
            plot: (layout.margin_left(), top, right, top + layout.plot_height()),
            legend_right,
            legend_rows: legend.len(),
        }
    }

    /// Where the legend starts (x, y of its first row's top), given the room the x axis takes
    /// under the plot (tick labels and axis label).
    pub fn legend_at(&self, below_axis: f64) -> (f64, f64) {
        if self.legend_right {
            (self.plot.2 + 14.0, self.plot.1)
        } else {
            (16.0, self.plot.3 + below_axis)
        }
    }

    /// Height of the whole chart.
    pub fn height(&self, below_axis: f64) -> f64 {
        let axis_bottom = self.plot.3 + below_axis;
        let legend_bottom = if self.legend_right || self.legend_rows == 0 {
            0.0
        } else {
            self.legend_at(below_axis).1 + self.legend_rows as f64 * LEGEND_ROW + 4.0
        };
        axis_bottom.max(legend_bottom) + 8.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_keeps_words_and_width() {
        let lines = wrap(
            "reactor · separated (--threads 1): CPU per request",
            200.0,
            14.0,
        );
        assert!(lines.len() >= 2, "{lines:?}");
        assert!(
            lines.iter().all(|l| text_width(l, 14.0) <= 200.0),
            "{lines:?}"
        );
        assert_eq!(
            lines.join(" "),
            "reactor · separated (--threads 1): CPU per request"
        );
        assert_eq!(wrap("", 100.0, 14.0), vec![String::new()]);
    }

    #[test]
    fn thinning_keeps_labels_apart() {
        // 40-unit labels every 20 units: every third one is kept (60 ≥ 40 + 4).
        let centres: Vec<f64> = (0..10).map(|i| i as f64 * 20.0).collect();
        assert_eq!(thin_every(&centres, &[40.0; 10]), 3);
        // Room enough: all.
        assert_eq!(thin_every(&centres, &[10.0; 10]), 1);
        assert_eq!(thin_every(&[], &[]), 1);
    }

    #[test]
    fn the_legend_goes_below_when_narrow_or_too_long() {
        let short = Frame::new(Layout::Wide, "t", &["separated"]);
        assert!(short.legend_right);
        assert_eq!(short.plot.2, 760.0 - LEGEND_WIDTH);
        let long = Frame::new(
            Layout::Wide,
            "t",
            &["a placement with a very long name (--threads 12) p99"],
        );
        assert!(!long.legend_right);
        let narrow = Frame::new(Layout::Narrow, "t", &["separated"]);
        assert!(!narrow.legend_right);
        assert!(narrow.height(52.0) >= narrow.plot.3 + 52.0 + LEGEND_ROW);
    }
}
