//! report.md's sections as HTML, so the page shows every section the markdown has with the
//! same rows (one source for both). Only the markdown subset the exporters write is read:
//! `##`/`###` headings, pipe tables (a `---:` column is numeric), `- ` items and paragraphs,
//! `` `code` ``. The text was escaped for markdown already (`&lt;` for `<`), and any `<` or
//! `>` left is escaped again here, so no name from a spec or a result can become markup.

use std::fmt::Write as _;

use super::page::{Heading, Section};

/// `md` as one section of the page, its `##` headings listed in the contents in order.
pub fn convert(md: &str) -> Section {
    let mut html = String::new();
    let mut headings = Vec::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(title) = line.strip_prefix("## ") {
            let h = Heading {
                id: slug(title),
                text: inline(title),
            };
            let _ = write!(html, "<h2 id=\"{}\">{}</h2>", h.id, h.text);
            headings.push(h);
            i += 1;
        } else if let Some(title) = line.strip_prefix("### ") {
            let _ = write!(html, "<h3>{}</h3>", inline(title));
            i += 1;
        } else if line.starts_with('|') {
            i = table(&lines, i, &mut html);
        } else if line.starts_with("- ") {
            i = list(&lines, i, &mut html);
        } else if line.trim().is_empty() {
            i += 1;
        } else {
            i = paragraph(&lines, i, &mut html);
        }
    }
    Section {
        contents: headings,
        html,
    }
}

/// An anchor id from a heading: lower-case letters and digits joined by dashes.
pub fn slug(title: &str) -> String {
    let words: Vec<String> = title
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    format!("s-{}", words.join("-"))
}

/// Inline text: markup characters escaped (entities already there kept), `\|` unescaped,
/// `` `code` `` spans.
fn inline(text: &str) -> String {
    let safe = text
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("\\|", "|");
    let mut out = String::new();
    for (i, part) in safe.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// The cells of a table row, split on unescaped pipes.
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cell.push_str("\\|");
                chars.next();
            }
            '|' => out.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    out.push(cell);
    out.into_iter().map(|c| c.trim().to_string()).collect()
}

fn table(lines: &[&str], start: usize, html: &mut String) -> usize {
    let end = start
        + lines[start..]
            .iter()
            .take_while(|l| l.starts_with('|'))
            .count();
    let header = cells(lines[start]);
    let numeric: Vec<bool> = lines
        .get(start + 1)
        .map(|l| cells(l).iter().map(|c| c.ends_with(':')).collect())
        .unwrap_or_default();
    let body = &lines[(start + 2).min(end)..end];
    let rows: Vec<Vec<String>> = body.iter().map(|r| cells(r)).collect();
    let all = rows
        .iter()
        .chain(std::iter::once(&header))
        .flat_map(|r| r.iter().enumerate().map(|(i, c)| (i, c.as_str())));
    html.push_str(&crate::report::table_box::table_open(all));
    html.push_str("<thead><tr>");
    for h in &header {
        let _ = write!(html, "<th>{}</th>", inline(h));
    }
    html.push_str("</tr></thead><tbody>");
    for row in &rows {
        html.push_str("<tr>");
        for (i, c) in row.iter().enumerate() {
            let class = if numeric.get(i) == Some(&true) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(html, "<td{class}>{}</td>", inline(c));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody>");
    html.push_str(crate::report::table_box::TABLE_CLOSE);
    end
}

fn list(lines: &[&str], start: usize, html: &mut String) -> usize {
    let mut i = start;
    html.push_str("<ul>");
    while let Some(item) = lines.get(i).and_then(|l| l.strip_prefix("- ")) {
        let _ = write!(html, "<li>{}</li>", inline(item));
        i += 1;
    }
    html.push_str("</ul>");
    i
}

fn paragraph(lines: &[&str], start: usize, html: &mut String) -> usize {
    let mut i = start;
    let mut text = Vec::new();
    while let Some(l) = lines.get(i) {
        if l.trim().is_empty() || l.starts_with('|') || l.starts_with('#') || l.starts_with("- ") {
            break;
        }
        text.push(inline(l));
        i += 1;
    }
    let _ = write!(html, "<p>{}</p>", text.join(" "));
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_tables_items_and_escapes() {
        let md = "## Peak of each series\n\nThe `peak` is\nhere.\n\n| target | x |\n| --- | ---: |\n| a\\|b &lt;s&gt; | 12 |\n\n- one <b>\n";
        let Section {
            contents: headings,
            html,
        } = convert(md);
        assert_eq!(headings[0].id, "s-peak-of-each-series");
        assert!(
            html.contains("<p>The <code>peak</code> is here.</p>"),
            "{html}"
        );
        assert!(
            html.contains("<td>a|b &lt;s&gt;</td><td class=\"num\">12</td>"),
            "{html}"
        );
        assert!(html.contains("<li>one &lt;b&gt;</li>"), "{html}");
        assert!(!html.contains("<b>"));
    }
}
