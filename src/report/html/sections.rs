//! [`ReportData`] laid out as the page's sections, in display order: thresholds, diagnosis,
//! conclusions (those two rendered from report.md's own `Doc` sections), measurement conditions, the charts, report.md's sections, the tables, the profiles.

use std::fmt::Write as _;

use super::page::{Page, Section};
use super::{charts, ReportData, Table};
use crate::report::doc::slug;
use crate::report::svg::escape;
use crate::report::table_box::{table_open, TABLE_CLOSE};

/// The page of `data`.
pub fn page(data: &ReportData) -> Page {
    Page {
        title: data.title.clone(),
        description: data.description.clone(),
        notes: data.notes.clone(),
        sections: sections(data),
    }
}

fn sections(data: &ReportData) -> Vec<Section> {
    let mut out = Vec::new();
    if !data.thresholds.is_empty() {
        out.push(data.thresholds.to_html());
    }
    out.extend(data.diagnosis.clone());
    if !data.conclusions.is_empty() {
        out.push(data.conclusions.to_html());
    }
    out.push(conditions(&data.conditions));
    out.extend(chart_sections(data));
    out.extend(data.thread_charts.clone());
    out.extend(data.budget_charts.clone());
    out.push(data.sections.to_html());
    out.extend(data.tables.iter().map(table));
    if !data.profiles.is_empty() {
        out.push(profiles(data));
    }
    out
}

/// A section under one listed heading, its body written by `write`.
fn titled(id: &str, title: &str, write: impl FnOnce(&mut String)) -> Section {
    let mut body = String::new();
    write(&mut body);
    Section::titled(id, title, &body)
}

fn chart_sections(data: &ReportData) -> [Section; 5] {
    let series = &data.series;
    [
        titled("throughput", "Throughput", |p| {
            charts::throughput(p, series)
        }),
        titled("latency", "Latency response curves", |p| {
            charts::latency(p, series)
        }),
        titled("cpu", "Server CPU per request", |p| charts::cpu(p, series)),
        titled("cores", "Per-core busy % over time", |p| {
            charts::heat_map(p, data.heat_map.as_ref())
        }),
        titled("histograms", "Latency histograms", |p| {
            charts::histograms(p, &data.histograms)
        }),
    ]
}

fn conditions(conditions: &[(String, String)]) -> Section {
    let table = Table {
        title: String::new(),
        note: String::new(),
        header: vec!["Parameter".into(), "Value".into()],
        rows: conditions
            .iter()
            .map(|(k, v)| vec![k.clone(), v.clone()])
            .collect(),
    };
    titled("conditions", "Measurement conditions", |p| {
        table_html(p, &table, false)
    })
}

fn table(table: &Table) -> Section {
    titled(&slug(&table.title), &table.title, |p| {
        if !table.note.is_empty() {
            let _ = write!(p, "<p class=\"note\">{}</p>", escape(&table.note));
        }
        table_html(p, table, true);
    })
}

/// The profile passes; not in the table of contents, which has never listed them.
fn profiles(data: &ReportData) -> Section {
    titled("profiles", "Profiles", |p| {
        p.push_str(&crate::report::profiles::html(&data.profiles))
    })
    .unlisted()
}

/// Writes a table; `align_numbers` right-aligns cells that read as numbers.
fn table_html(page: &mut String, table: &Table, align_numbers: bool) {
    let cells = table
        .rows
        .iter()
        .chain(std::iter::once(&table.header))
        .flat_map(|r| r.iter().enumerate().map(|(i, c)| (i, c.as_str())));
    page.push_str(&table_open(cells));
    page.push_str("<thead><tr>");
    for h in &table.header {
        let _ = write!(page, "<th>{}</th>", escape(h));
    }
    page.push_str("</tr></thead><tbody>");
    for row in &table.rows {
        page.push_str("<tr>");
        let width = table.header.len().max(row.len());
        for i in 0..width {
            let cell = row.get(i).map_or("", String::as_str);
            let class = if align_numbers && looks_numeric(cell) {
                " class=\"num\""
            } else {
                ""
            };
            let _ = write!(page, "<td{class}>{}</td>", escape(cell));
        }
        page.push_str("</tr>");
    }
    page.push_str("</tbody>");
    page.push_str(TABLE_CLOSE);
}

fn looks_numeric(cell: &str) -> bool {
    let t = cell.trim().trim_end_matches(['k', 'M', 'G', '%', 'x']);
    !t.is_empty() && t.parse::<f64>().is_ok()
}
