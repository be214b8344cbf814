//! A table's box in report.html: it scrolls sideways on a screen narrower than the table, with
//! a shadow on the side that hides more and a "scroll sideways" line above it (shown, by a
//! media query, on screens narrower than the table's estimated width, and only there: a hint
//! over a table that fits is a false alarm).

use super::svg::text_width;

/// Screen widths (px) at which a table's "scroll sideways" hint can show, in steps.
const HINT_STEP_PX: usize = 20;
/// Above this screen width the page's small-screen rules (smaller table text and padding)
/// no longer apply: page.rs's `@media (max-width: 600px)`.
const SMALL_SCREEN_PX: usize = 600;
/// The page's widest text column, px (page.rs: `body { max-width: 1200px }`).
const PAGE_MAX_PX: f64 = 1200.0;

/// One rule per step: a hint of class `wN` shows on screens wider than 600 px and narrower
/// than N px, one of class `sN` on screens narrower than N px up to 600, one of class
/// `always` everywhere (a table wider than the page's widest column).
pub fn hint_css() -> String {
    let step = |from: usize, to: usize| (from..=to).step_by(HINT_STEP_PX);
    let wide = step(SMALL_SCREEN_PX + HINT_STEP_PX, PAGE_MAX_PX as usize + 2 * HINT_STEP_PX)
        .map(|w| format!("@media screen and (min-width: {}px) and (max-width: {}px) {{ .scroll-hint.w{w} {{ display: block; }} }}\n", SMALL_SCREEN_PX + 1, w - 1));
    let small = step(HINT_STEP_PX, SMALL_SCREEN_PX + HINT_STEP_PX).map(|w| {
        format!(
            "@media screen and (max-width: {}px) {{ .scroll-hint.s{w} {{ display: block; }} }}\n",
            w.min(SMALL_SCREEN_PX + 1) - 1
        )
    });
    let mut css: String = wide.chain(small).collect();
    css.push_str(".scroll-hint.always { display: block; }\n");
    css
}

/// The smallest screen width (px) on which a table of these columns fits, at the table's font
/// and cell padding and the page's side padding: each column at least its longest word.
struct Fit {
    /// Above 600 px (table text at .9em, cells padded .6em a side, the page 1em).
    wide_px: f64,
    /// Up to 600 px (table text at .8em, cells padded .4em, the page .5em).
    small_px: f64,
}

impl Fit {
    fn of(columns: &[f64]) -> Fit {
        let small_scale = SMALL_FONT_PX / TABLE_FONT_PX;
        Fit {
            wide_px: columns
                .iter()
                .map(|w| w + 2.0 * 0.6 * 14.4 + 1.0)
                .sum::<f64>()
                + 1.0
                + 32.0,
            small_px: columns
                .iter()
                .map(|w| w * small_scale + 2.0 * 0.4 * 12.8 + 1.0)
                .sum::<f64>()
                + 1.0
                + 16.0,
        }
    }

    /// The hint's classes: a class shows it on screens narrower than its step, the step
    /// rounded down so that it never shows where the table fits.
    fn classes(&self) -> Vec<String> {
        let down = |px: f64| (px / HINT_STEP_PX as f64).floor() as usize * HINT_STEP_PX;
        if self.wide_px - 32.0 > PAGE_MAX_PX {
            return vec!["always".into()];
        }
        let mut out = Vec::new();
        let wide = down(self.wide_px);
        if wide > SMALL_SCREEN_PX {
            out.push(format!("w{wide}"));
        }
        let small = down(self.small_px).min(SMALL_SCREEN_PX + HINT_STEP_PX);
        if small >= HINT_STEP_PX {
            out.push(format!("s{small}"));
        }
        out
    }
}

/// The opening of a table: a box that scrolls sideways (a shadow marks the side that hides
/// more), after a "scroll sideways" hint that shows on screens narrower than the page needs
/// for the table. `cells` are (column, text) of the header and rows, from which that width is
/// estimated: a column is at least as wide as its longest word.
pub fn table_open<'a>(cells: impl IntoIterator<Item = (usize, &'a str)>) -> String {
    let mut columns: Vec<f64> = Vec::new();
    for (col, text) in cells {
        if columns.len() <= col {
            columns.resize(col + 1, 0.0);
        }
        let longest = unbreakable_parts(text)
            .map(|w| text_width(w, TABLE_FONT_PX))
            .fold(0.0, f64::max);
        columns[col] = columns[col].max(longest);
    }
    let classes = Fit::of(&columns).classes();
    let hint = if classes.is_empty() {
        String::new()
    } else {
        format!(
            "<p class=\"scroll-hint {}\">Wide table: scroll it sideways →</p>",
            classes.join(" ")
        )
    };
    format!("{hint}<div class=\"table-scroll\"><table>")
}

/// The parts of a cell's text a browser will not break: words, split after their hyphens too
/// ("msgr-reactor-0" wraps after each "-").
fn unbreakable_parts(text: &str) -> impl Iterator<Item = &str> {
    text.split_whitespace().flat_map(|w| w.split_inclusive('-'))
}

/// The end of a table opened with [`table_open`].
pub const TABLE_CLOSE: &str = "</table></div>";

/// Table text, px: .9 of the page's 16 (bold headers run wider, hence the estimate's margin).
const TABLE_FONT_PX: f64 = 16.0 * 0.9 * 1.08;
/// The same on screens up to 600 px: .8 of 16.
const SMALL_FONT_PX: f64 = 16.0 * 0.8 * 1.08;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_shows_only_below_the_width_a_table_needs() {
        // Two 300-px columns need 2 × (300 + 17.3 + 1) + 33 = 669.6 px above 600 px.
        let fit = Fit::of(&[300.0, 300.0]);
        assert!((fit.wide_px - 669.6).abs() < 0.1, "{}", fit.wide_px);
        let classes = fit.classes();
        assert_eq!(classes[0], "w660", "{classes:?}");
        // A narrow table fits every screen over 600 px: no wide class.
        assert!(Fit::of(&[100.0])
            .classes()
            .iter()
            .all(|c| !c.starts_with('w')));
        // Wider than the page's widest column: always.
        assert_eq!(Fit::of(&[700.0, 700.0]).classes(), ["always"]);
        let parts: Vec<&str> = unbreakable_parts("threads.msgr-reactor-0.loops=557 x").collect();
        assert_eq!(parts, ["threads.msgr-", "reactor-", "0.loops=557", "x"]);
        let css = hint_css();
        assert!(css.contains(
            "@media screen and (min-width: 601px) and (max-width: 659px) { .scroll-hint.w660 "
        ));
        assert!(css.contains(".scroll-hint.always { display: block; }"));
    }
}
