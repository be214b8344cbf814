//! [`ReportData`] laid out as the page's sections, in display order: thresholds, diagnosis,
//! conclusions (those two rendered from report.md's own `Doc` sections), measurement conditions (report.md's table), the charts, report.md's sections, the profiles.

use super::page::{Page, Section};
use super::{charts, ReportData};

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
    out.push(titled("conditions", "Measurement conditions", |p| {
        p.push_str(&data.conditions.to_html().html)
    }));
    out.extend(chart_sections(data));
    out.extend(data.thread_charts.clone());
    out.extend(data.budget_charts.clone());
    out.push(data.sections.to_html());
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

/// The profile passes; not in the table of contents, which has never listed them.
fn profiles(data: &ReportData) -> Section {
    titled("profiles", "Profiles", |p| {
        p.push_str(&crate::report::profiles::html(&data.profiles))
    })
    .unlisted()
}
