//! Text put in a markdown table cell.

/// Makes text safe in a markdown table cell (and inert as HTML).
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace('\n', " ")
}
