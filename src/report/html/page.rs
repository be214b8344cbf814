//! The page as one model: a title, its notes, then its sections in order, each with its
//! entries in the table of contents. [`Page::to_html`] writes the self-contained document.

use std::fmt::Write as _;

use crate::report::svg::{chart_css, escape};
use crate::report::table_box::hint_css;

pub use crate::report::doc::{Heading, Section};

/// The whole page.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Page {
    /// Page title (the experiment's name).
    pub title: String,
    /// Free text under the title.
    pub description: Option<String>,
    /// Warnings and remarks, shown above the contents.
    pub notes: Vec<String>,
    /// The sections, in display order.
    pub sections: Vec<Section>,
}

/// The page's own style; the charts' is [`chart_css`], after it.
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
.table-scroll { overflow-x: auto; margin: .5em 0 1em; background: linear-gradient(to right, #fff 30%, rgba(255,255,255,0)) left / 40px 100% no-repeat local, linear-gradient(to left, #fff 30%, rgba(255,255,255,0)) right / 40px 100% no-repeat local, radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.3), rgba(0,0,0,0)) left / 14px 100% no-repeat scroll, radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.3), rgba(0,0,0,0)) right / 14px 100% no-repeat scroll; }
.table-scroll table { margin: 0; }
.scroll-hint { display: none; color: #555; font-size: .85em; margin: .6em 0 -.3em; }
nav.toc { background: #f7f7f7; padding: .4em 1em; font-size: .9em; }
nav.toc ol { margin: .2em 0; padding-left: 1.4em; columns: 2; }
.conclusions li { margin: .2em 0; }
.thresholds li.pass { color: #1a7f37; }
.thresholds li.fail { color: #cf222e; font-weight: bold; }
details { margin: .3em 0; }
summary { cursor: pointer; }
@media (max-width: 600px) { nav.toc ol { columns: 1; } body { padding: 0 .5em; } table { font-size: .8em; } th, td { padding: .2em .4em; } }
@media print { body { max-width: none; margin: 0; } h2 { page-break-after: avoid; } }
"#;

impl Page {
    /// The HTML document: head and style, title, notes, contents, then every section.
    pub fn to_html(&self) -> String {
        let mut page = String::new();
        head(&mut page, &self.title);
        let _ = write!(page, "<h1>{}</h1>", escape(&self.title));
        if let Some(d) = &self.description {
            let _ = write!(page, "<p>{}</p>", escape(d));
        }
        notes(&mut page, &self.notes);
        contents(&mut page, &self.sections);
        for s in &self.sections {
            page.push_str(&s.html);
        }
        page.push_str("</body></html>\n");
        page
    }
}

fn head(page: &mut String, title: &str) {
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} — stairbench report</title><style>{CSS}{}{}</style></head><body>",
        escape(title),
        chart_css(),
        hint_css()
    );
}

fn notes(page: &mut String, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    page.push_str(r#"<div class="notes"><ul>"#);
    for n in notes {
        let _ = write!(page, "<li>{}</li>", escape(n));
    }
    page.push_str("</ul></div>");
}

/// The table of contents: every listed heading of the sections, in order.
fn contents(page: &mut String, sections: &[Section]) {
    page.push_str("<nav class=\"toc\"><strong>Contents</strong><ol>");
    for h in sections.iter().flat_map(|s| &s.contents) {
        let _ = write!(page, "<li><a href=\"#{}\">{}</a></li>", h.id, h.text);
    }
    page.push_str("</ol></nav>");
}
