//! `steps.csv`: one wide row per step (benchreport-style columns), for spreadsheets and awk.

use super::{Exporter, Report};
use crate::record::load::LoadReport;
use crate::record::steps::StepResult;

/// The CSV exporter.
#[derive(Debug, Clone, Copy)]
pub struct Csv;

/// One cell's value, read from the typed step.
enum Cell {
    /// A text's first line.
    Text(String),
    /// A count, written whole.
    Count(u64),
    /// A measured figure, written to 3 decimals; empty when not finite.
    Figure(f64),
    /// Not measured.
    Empty,
}

type Column = (&'static str, fn(&StepResult) -> Cell);

/// A figure of the step's load; empty for a step without one.
fn load(s: &StepResult, figure: impl Fn(&LoadReport) -> Cell) -> Cell {
    s.load.as_ref().map_or(Cell::Empty, figure)
}

fn opt(x: Option<f64>) -> Cell {
    x.map_or(Cell::Empty, Cell::Figure)
}

/// Each column: its name, as steps.jsonl names the field, and where the step holds it.
const COLUMNS: &[Column] = &[
    ("id", |s| Cell::Text(s.id.clone())),
    ("target", |s| Cell::Text(s.target.clone())),
    ("placement", |s| Cell::Text(s.placement.clone())),
    ("clients", |s| Cell::Count(s.clients as u64)),
    ("rep", |s| Cell::Count(s.rep as u64)),
    // The planned rate wins over the engine's echo of it, as in steps.jsonl.
    ("rate_rps", |s| {
        opt(s.rate_rps.or(s.load.as_ref().and_then(|l| l.rate_rps)))
    }),
    ("inflight", |s| Cell::Count(s.inflight as u64)),
    ("status", |s| Cell::Text(s.status.as_str().to_string())),
    ("throughput_rps", |s| {
        load(s, |l| Cell::Figure(l.throughput_rps))
    }),
    ("requests", |s| load(s, |l| Cell::Count(l.requests))),
    ("errors", |s| {
        load(s, |l| Cell::Count(l.errors.values().sum()))
    }),
    ("mean_us", |s| load(s, |l| Cell::Figure(l.latency_us.mean))),
    ("p50_us", |s| load(s, |l| Cell::Figure(l.latency_us.p50))),
    ("p90_us", |s| load(s, |l| Cell::Figure(l.latency_us.p90))),
    ("p99_us", |s| load(s, |l| Cell::Figure(l.latency_us.p99))),
    ("p999_us", |s| load(s, |l| Cell::Figure(l.latency_us.p999))),
    ("max_us", |s| load(s, |l| Cell::Figure(l.latency_us.max))),
    ("cpu_us_per_req_user", |s| {
        opt(s.per_request.cpu_us_per_req.user)
    }),
    ("cpu_us_per_req_sys", |s| {
        opt(s.per_request.cpu_us_per_req.sys)
    }),
    ("cpu_us_per_req_total", |s| {
        opt(s.per_request.cpu_us_per_req.total)
    }),
    ("cs_per_req", |s| opt(s.per_request.cs_per_req)),
    ("client_saturated", |s| {
        load(s, |l| Cell::Text(l.client_saturated.to_string()))
    }),
    ("server_cpus", |s| Cell::Text(s.server_cpus.clone())),
    ("client_cpus", |s| Cell::Text(s.client_cpus.clone())),
    ("reason", |s| {
        s.reason.clone().map_or(Cell::Empty, Cell::Text)
    }),
];

impl Exporter for Csv {
    fn file_name(&self) -> &'static str {
        "steps.csv"
    }

    fn render(&self, report: &Report) -> String {
        let run = &report.run;
        let names: Vec<&str> = COLUMNS.iter().map(|(name, _)| *name).collect();
        let mut out = names.join(",");
        out.push('\n');
        for step in &run.steps {
            out.push_str(&row(step).join(","));
            out.push('\n');
        }
        out
    }
}

fn row(s: &StepResult) -> Vec<String> {
    COLUMNS
        .iter()
        .map(|(_, read)| quote(&cell(read(s))))
        .collect()
}

/// A cell as text: figures to 3 decimals, counts whole, a text's first line; empty where
/// the step has none (not measured, not finite).
fn cell(c: Cell) -> String {
    match c {
        Cell::Figure(x) if x.is_finite() => format!("{x:.3}"),
        Cell::Count(n) => n.to_string(),
        Cell::Text(text) => text.lines().next().unwrap_or("").to_string(),
        Cell::Figure(_) | Cell::Empty => String::new(),
    }
}

fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every column names a field of the step line (as steps.jsonl and steps.schema.json
    /// name it) and holds what that field holds: a field renamed, or a column reading the
    /// wrong one, fails here.
    #[test]
    fn every_column_is_the_field_of_the_record_it_names() {
        let step = crate::record::steps::tests::full_step();
        let line = step.to_json();
        let schema: serde_json::Value =
            serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
        let cells = row(&step);
        assert_eq!(cells.len(), COLUMNS.len());
        for ((name, _), cell) in COLUMNS.iter().zip(&cells) {
            let at = match *name {
                "mean_us" | "p50_us" | "p90_us" | "p99_us" | "p999_us" | "max_us" => {
                    format!("/latency_us/{}", name.trim_end_matches("_us"))
                }
                n if n.starts_with("cpu_us_per_req_") => {
                    format!("/cpu_us_per_req/{}", &n["cpu_us_per_req_".len()..])
                }
                n => format!("/{n}"),
            };
            let top = at.split('/').nth(1).unwrap();
            assert!(
                schema["properties"].get(top).is_some(),
                "{name}: {top} is not in the schema"
            );
            let want = match line.pointer(&at) {
                Some(serde_json::Value::Number(n)) if n.is_f64() => {
                    format!("{:.3}", n.as_f64().unwrap())
                }
                Some(serde_json::Value::Object(by_kind)) => by_kind
                    .values()
                    .filter_map(serde_json::Value::as_u64)
                    .sum::<u64>()
                    .to_string(),
                Some(serde_json::Value::String(t)) => t.lines().next().unwrap_or("").to_string(),
                Some(v) => v.to_string(),
                None => panic!("{name}: {at} is no field of the step line"),
            };
            assert_eq!(cell, &quote(&want), "{name}");
        }
        assert_eq!(
            (cells[3].as_str(), cells[7].as_str(), cells[10].as_str()),
            ("1", "errors", "1")
        );
    }

    #[test]
    fn a_step_without_a_load_or_a_finite_figure_leaves_its_cells_empty() {
        let mut step = crate::record::steps::tests::full_step();
        step.load = None;
        step.per_request.cpu_us_per_req.total = Some(f64::NAN);
        let cells = row(&step);
        for name in [
            "throughput_rps",
            "requests",
            "p99_us",
            "cpu_us_per_req_total",
        ] {
            let i = COLUMNS.iter().position(|c| c.0 == name).unwrap();
            assert_eq!(cells[i], "", "{name}");
        }
        assert_eq!(cells[0], step.id);
    }

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("a"), "a");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
