//! The reports' section model: headings, sentences, lists and tables of plain text, written
//! once by the sections' builders and rendered twice, as report.md and as report.html. Text
//! is kept unescaped here; each renderer escapes it for its format, so no name from a spec or
//! a result can become markup in either. Two inline marks are read in text: `` `code` `` and
//! `**strong**`.

use std::fmt::Write as _;

use super::cell;
use super::svg::escape;
use super::table_box::{table_open, TABLE_CLOSE};

/// A heading listed in the table of contents.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Heading {
    /// The anchor id.
    pub id: String,
    /// The heading's text, HTML-escaped.
    pub text: String,
}

/// One part of the page: its HTML and what the table of contents lists of it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Section {
    /// Its entries in the table of contents, in order: one per `<h2>` it holds that is listed.
    pub contents: Vec<Heading>,
    /// Its HTML, headings included.
    pub html: String,
}

impl Section {
    /// A section under one `<h2>` heading (text escaped here), listed in the contents.
    pub fn titled(id: &str, title: &str, body: &str) -> Section {
        let heading = Heading {
            id: id.to_string(),
            text: escape(title),
        };
        Section {
            html: format!("<h2 id=\"{}\">{}</h2>{body}", heading.id, heading.text),
            contents: vec![heading],
        }
    }

    /// The same section, not listed in the table of contents.
    pub fn unlisted(self) -> Section {
        Section {
            contents: Vec::new(),
            ..self
        }
    }
}

/// A run of sections, in display order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Doc {
    /// The blocks, in order.
    pub blocks: Vec<Block>,
}

/// One block of a section.
#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    /// A section's heading (`##`, an `<h2>` listed in the page's contents).
    Heading(String),
    /// A heading inside a section (`###`, `<h3>`).
    Subheading(String),
    /// A paragraph.
    Paragraph(String),
    /// A paragraph the page sets apart as a note (`<p class="note">`); plain in markdown.
    Note(String),
    /// A paragraph of links: `lead: ` then each (label, path) joined by ` · `, then `tail`.
    Links {
        /// The text before the links (and a colon).
        lead: String,
        /// (label, path), in order; paths relative to the report.
        links: Vec<(String, String)>,
        /// The text after them.
        tail: String,
    },
    /// An image on the page, linked to itself; in markdown nothing (the links beside it
    /// name the file).
    Image {
        /// Its path, relative to the report.
        src: String,
        /// Its alternative text.
        alt: String,
    },
    /// A bulleted list.
    List(Vec<Item>),
    /// A table.
    Table(Table),
    /// A list the page styles by its class, each item with a class of its own (empty for
    /// none), as (class, text); in markdown a plain list.
    Styled {
        /// The list's class on the page.
        class: String,
        /// (item class, text), in order.
        items: Vec<(String, String)>,
    },
}

/// A list item, with its own sub-items (one level).
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// The item's text.
    pub text: String,
    /// Its sub-items' texts.
    pub sub: Vec<String>,
}

/// A table of text cells.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// Column headings.
    pub header: Vec<String>,
    /// Whether each column holds figures (right-aligned in both renderings).
    pub numeric: Vec<bool>,
    /// Rows of cells; a row shorter than the header is padded with empty cells.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `header`; `align` has one letter per column, `l` for text and `r` for
    /// figures.
    pub fn new<S: AsRef<str>>(header: &[S], align: &str) -> Table {
        debug_assert_eq!(header.len(), align.len(), "one alignment per column");
        Table {
            header: header.iter().map(|h| h.as_ref().to_string()).collect(),
            numeric: align.chars().map(|c| c == 'r').collect(),
            rows: Vec::new(),
        }
    }

    /// The names-then-figures layout of the analysis tables: the two name columns and the
    /// last (text) column left-aligned, the figures between them right-aligned.
    pub fn figures(header: Vec<String>, rows: Vec<Vec<String>>) -> Table {
        let n = header.len();
        Table {
            numeric: (0..n).map(|i| i >= 2 && i + 1 < n).collect(),
            header,
            rows,
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }
}

impl Doc {
    /// An empty run of sections.
    pub fn new() -> Doc {
        Doc::default()
    }

    /// Whether there is nothing to show.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Starts a section under `title`.
    pub fn heading(&mut self, title: impl Into<String>) {
        self.blocks.push(Block::Heading(title.into()));
    }

    /// A heading inside the current section.
    pub fn subheading(&mut self, title: impl Into<String>) {
        self.blocks.push(Block::Subheading(title.into()));
    }

    /// A paragraph.
    pub fn paragraph(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Paragraph(text.into()));
    }

    /// A note: a paragraph the page sets apart.
    pub fn note(&mut self, text: impl Into<String>) {
        self.blocks.push(Block::Note(text.into()));
    }

    /// A paragraph of links after `lead`, with `tail` after them.
    pub fn links(&mut self, lead: impl Into<String>, links: Vec<(String, String)>, tail: &str) {
        self.blocks.push(Block::Links {
            lead: lead.into(),
            links,
            tail: tail.to_string(),
        });
    }

    /// An image on the page (nothing in markdown).
    pub fn image(&mut self, src: impl Into<String>, alt: &str) {
        self.blocks.push(Block::Image {
            src: src.into(),
            alt: alt.to_string(),
        });
    }

    /// A list of items without sub-items (nothing when `items` is empty).
    pub fn list(&mut self, items: impl IntoIterator<Item = String>) {
        let items: Vec<Item> = items
            .into_iter()
            .map(|text| Item {
                text,
                sub: Vec::new(),
            })
            .collect();
        if !items.is_empty() {
            self.blocks.push(Block::List(items));
        }
    }

    /// Adds a list the page styles by `class`, each item (class, text).
    pub fn styled_list(&mut self, class: &str, items: Vec<(String, String)>) {
        self.blocks.push(Block::Styled {
            class: class.to_string(),
            items,
        });
    }

    /// Adds a table.
    pub fn table(&mut self, table: Table) {
        self.blocks.push(Block::Table(table));
    }

    /// Appends `other`'s blocks.
    pub fn append(&mut self, other: Doc) {
        self.blocks.extend(other.blocks);
    }

    /// The blocks as markdown, each followed by a blank line.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        for b in &self.blocks {
            match b {
                Block::Heading(t) => {
                    let _ = write!(out, "## {}\n\n", cell::escape(t));
                }
                Block::Subheading(t) => {
                    let _ = write!(out, "### {}\n\n", cell::escape(t));
                }
                Block::Paragraph(t) | Block::Note(t) => {
                    let _ = write!(out, "{}\n\n", cell::escape(t));
                }
                Block::Links { lead, links, tail } => {
                    let links: Vec<String> = (links.iter())
                        .map(|(label, path)| format!("[{}]({path})", cell::escape(label)))
                        .collect();
                    let (lead, tail) = (cell::escape(lead), cell::escape(tail));
                    let _ = write!(out, "{lead}: {}{tail}\n\n", links.join(" · "));
                }
                Block::Image { .. } => {}
                Block::List(items) => {
                    for i in items {
                        let _ = writeln!(out, "- {}", cell::escape(&i.text));
                        for s in &i.sub {
                            let _ = writeln!(out, "  - {}", cell::escape(s));
                        }
                    }
                    out.push('\n');
                }
                Block::Table(t) => markdown_table(&mut out, t),
                Block::Styled { items, .. } => {
                    for (_, text) in items {
                        let _ = writeln!(out, "- {}", cell::escape(text));
                    }
                    out.push('\n');
                }
            }
        }
        out
    }

    /// The blocks as one section of the page, each `##` heading listed in its contents.
    pub fn to_html(&self) -> Section {
        let mut html = String::new();
        let mut contents = Vec::new();
        for b in &self.blocks {
            match b {
                Block::Heading(t) => {
                    let h = Heading {
                        id: slug(t),
                        text: inline(t),
                    };
                    let _ = write!(html, "<h2 id=\"{}\">{}</h2>", h.id, h.text);
                    contents.push(h);
                }
                Block::Subheading(t) => {
                    let _ = write!(html, "<h3>{}</h3>", inline(t));
                }
                Block::Paragraph(t) => {
                    let _ = write!(html, "<p>{}</p>", inline(t));
                }
                Block::Note(t) => {
                    let _ = write!(html, "<p class=\"note\">{}</p>", inline(t));
                }
                Block::Links { lead, links, tail } => {
                    let links: Vec<String> = (links.iter())
                        .map(|(label, path)| {
                            format!("<a href=\"{}\">{}</a>", escape(path), inline(label))
                        })
                        .collect();
                    let (lead, tail) = (inline(lead), inline(tail));
                    let _ = write!(html, "<p>{lead}: {}{tail}</p>", links.join(" · "));
                }
                Block::Image { src, alt } => {
                    let _ = write!(
                        html,
                        "<figure><a href=\"{0}\"><img src=\"{0}\" alt=\"{1}\" style=\"max-width:100%\" loading=\"lazy\"></a></figure>",
                        escape(src),
                        escape(alt)
                    );
                }
                Block::List(items) => html_list(&mut html, items),
                Block::Table(t) => html_table(&mut html, t),
                Block::Styled { class, items } => {
                    let _ = write!(html, "<ul class=\"{}\">", html_escape(class));
                    for (c, text) in items {
                        match c.as_str() {
                            "" => html.push_str("<li>"),
                            c => {
                                let _ = write!(html, "<li class=\"{}\">", html_escape(c));
                            }
                        }
                        let _ = write!(html, "{}</li>", inline(text));
                    }
                    html.push_str("</ul>");
                }
            }
        }
        Section { contents, html }
    }
}

fn markdown_table(out: &mut String, t: &Table) {
    let cells = |row: &[String]| -> String {
        let cells: Vec<String> = (0..t.header.len().max(row.len()))
            .map(|i| cell::escape(row.get(i).map_or("", String::as_str)))
            .collect();
        format!("| {} |", cells.join(" | "))
    };
    let _ = writeln!(out, "{}", cells(&t.header));
    let align: Vec<&str> = (0..t.header.len())
        .map(|i| match t.numeric.get(i) {
            Some(true) => "---:",
            _ => "---",
        })
        .collect();
    let _ = writeln!(out, "| {} |", align.join(" | "));
    for row in &t.rows {
        let _ = writeln!(out, "{}", cells(row));
    }
    out.push('\n');
}

fn html_list(html: &mut String, items: &[Item]) {
    html.push_str("<ul>");
    for i in items {
        let _ = write!(html, "<li>{}", inline(&i.text));
        if !i.sub.is_empty() {
            html.push_str("<ul>");
            for s in &i.sub {
                let _ = write!(html, "<li>{}</li>", inline(s));
            }
            html.push_str("</ul>");
        }
        html.push_str("</li>");
    }
    html.push_str("</ul>");
}

fn html_table(html: &mut String, t: &Table) {
    let width = t.header.len();
    let all = t
        .rows
        .iter()
        .chain(std::iter::once(&t.header))
        .flat_map(|r| r.iter().enumerate().map(|(i, c)| (i, c.as_str())));
    html.push_str(&table_open(all));
    html.push_str("<thead><tr>");
    for h in &t.header {
        let _ = write!(html, "<th>{}</th>", inline(h));
    }
    html.push_str("</tr></thead><tbody>");
    for row in &t.rows {
        html.push_str("<tr>");
        for i in 0..width.max(row.len()) {
            let class = if t.numeric.get(i) == Some(&true) {
                " class=\"num\""
            } else {
                ""
            };
            let c = row.get(i).map_or("", String::as_str);
            let _ = write!(html, "<td{class}>{}</td>", inline(c));
        }
        html.push_str("</tr>");
    }
    html.push_str("</tbody>");
    html.push_str(TABLE_CLOSE);
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

/// Text as HTML element content: `&`, `<` and `>` escaped (quotes need no escape outside
/// attributes), control characters XML does not allow replaced.
fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Text as HTML: escaped, with its `` `code` `` and `**strong**` spans marked up.
fn inline(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in html_escape(text).split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            for (j, p) in part.split("**").enumerate() {
                if j % 2 == 1 {
                    let _ = write!(out, "<strong>{p}</strong>");
                } else {
                    out.push_str(p);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Doc {
        let mut d = Doc::new();
        d.heading("Peak of each series");
        d.paragraph("The `peak` is here.");
        let mut t = Table::new(&["target", "x"], "lr");
        t.row(vec!["a|b <s>".into(), "12".into()]);
        t.row(vec!["**all**".into()]);
        d.table(t);
        d.list(["one <b>".to_string()]);
        d
    }

    #[test]
    fn one_model_two_renderings_each_escaped() {
        let d = sample();
        let md = d.to_markdown();
        assert_eq!(
            md,
            "## Peak of each series\n\nThe `peak` is here.\n\n| target | x |\n| --- | ---: |\n\
             | a\\|b &lt;s&gt; | 12 |\n| **all** |  |\n\n- one &lt;b&gt;\n\n"
        );
        let Section { contents, html } = d.to_html();
        assert_eq!(contents[0].id, "s-peak-of-each-series");
        assert!(
            html.contains("<p>The <code>peak</code> is here.</p>"),
            "{html}"
        );
        assert!(
            html.contains("<td>a|b &lt;s&gt;</td><td class=\"num\">12</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td><strong>all</strong></td><td class=\"num\"></td>"),
            "{html}"
        );
        assert!(html.contains("<li>one &lt;b&gt;</li>"), "{html}");
        assert!(!html.contains("<b>") && !html.contains("<s>"));
    }

    /// Catches a link, note or image rendered in one format and lost or unescaped in the
    /// other (the profiles section's graphs and reasons).
    #[test]
    fn links_notes_and_images_in_both_renderings() {
        let mut d = Doc::new();
        d.note("Note: <why>");
        let links = vec![
            ("flame graph".to_string(), "p/cpu.svg".to_string()),
            ("user".to_string(), "p/\"u\".svg".to_string()),
        ];
        d.links("cpu-clock, 10 samples", links, " (red grew)");
        d.image("p/cpu.svg", "flame graph");
        assert_eq!(
            d.to_markdown(),
            "Note: &lt;why&gt;\n\ncpu-clock, 10 samples: [flame graph](p/cpu.svg) · [user](p/\"u\".svg) (red grew)\n\n"
        );
        let html = d.to_html().html;
        assert!(
            html.starts_with("<p class=\"note\">Note: &lt;why&gt;</p>"),
            "{html}"
        );
        assert!(
            html.contains("<p>cpu-clock, 10 samples: <a href=\"p/cpu.svg\">flame graph</a> · <a href=\"p/&quot;u&quot;.svg\">user</a> (red grew)</p>"),
            "{html}"
        );
        assert!(
            html.contains("<img src=\"p/cpu.svg\" alt=\"flame graph\""),
            "{html}"
        );
    }

    /// Catches a styled list that loses its text or escaping in markdown, or its classes
    /// (the page's pass/fail colours) in HTML.
    #[test]
    fn a_styled_list_is_a_plain_list_in_markdown_and_classed_on_the_page() {
        let mut d = Doc::new();
        d.styled_list(
            "thresholds",
            vec![
                ("fail".into(), "p99 < 5 ms".into()),
                (String::new(), "c".into()),
            ],
        );
        assert_eq!(d.to_markdown(), "- p99 &lt; 5 ms\n- c\n\n");
        assert_eq!(
            d.to_html().html,
            "<ul class=\"thresholds\"><li class=\"fail\">p99 &lt; 5 ms</li><li>c</li></ul>"
        );
    }
}
