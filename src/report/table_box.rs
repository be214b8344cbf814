//! A table's box in report.html: it scrolls sideways on a screen narrower than the table, with
//! a shadow on the side that hides more and a "scroll sideways" line above it (shown, by a
//! media query, on screens narrower than the table's estimated width).

use super::svg::text_width;

/// Screen widths (px) at which a table's "scroll sideways" hint can show, in steps.
const HINT_STEP_PX: usize = 100;
const HINT_MAX_PX: usize = 2000;

/// One rule per step: a hint of class `wN` shows on screens narrower than N px.
pub fn hint_css() -> String {
    (HINT_STEP_PX..=HINT_MAX_PX)
        .step_by(HINT_STEP_PX)
        .map(|w| format!("@media screen and (max-width: {}px) {{ .scroll-hint.w{w} {{ display: block; }} }}\n", w - 1))
        .collect()
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
        let longest = text
            .split_whitespace()
            .map(|w| text_width(w, TABLE_FONT_PX))
            .fold(0.0, f64::max);
        columns[col] = columns[col].max(longest);
    }
    // Padding and border of each cell, then the page's side padding.
    let needed_px = columns.iter().map(|w| w + 20.0).sum::<f64>() + 2.0 + 32.0;
    let step = (needed_px / HINT_STEP_PX as f64).ceil() as usize * HINT_STEP_PX;
    let hint = if step > 300 {
        format!(
            "<p class=\"scroll-hint w{}\">Wide table: scroll it sideways →</p>",
            step.min(HINT_MAX_PX)
        )
    } else {
        String::new()
    };
    format!("{hint}<div class=\"table-scroll\"><table>")
}

/// The end of a table opened with [`table_open`].
pub const TABLE_CLOSE: &str = "</table></div>";

/// Table text, px: .9 of the page's 16 (bold headers run wider, hence the estimate's margin).
const TABLE_FONT_PX: f64 = 16.0 * 0.9 * 1.08;
