//! `steps.csv`: one wide row per step (benchreport-style columns), for spreadsheets and awk.

// Value: the step's line as steps.jsonl writes it, so the columns are JSON pointers into the
// record's one serialized form (a renamed field fails the schema test below, not silently).
use serde_json::Value;

use super::{Exporter, Report};
use crate::record::steps::StepResult;

/// The CSV exporter.
#[derive(Debug, Clone, Copy)]
pub struct Csv;

/// Each column: its name and where the step's line holds it (a JSON pointer into the record
/// as `steps.jsonl` writes it), so that the columns follow the record's one definition.
const COLUMNS: &[(&str, &str)] = &[
    ("id", "/id"),
    ("target", "/target"),
    ("placement", "/placement"),
    ("clients", "/clients"),
    ("rep", "/rep"),
    ("rate_rps", "/rate_rps"),
    ("inflight", "/inflight"),
    ("status", "/status"),
    ("throughput_rps", "/throughput_rps"),
    ("requests", "/requests"),
    ("errors", "/errors"),
    ("mean_us", "/latency_us/mean"),
    ("p50_us", "/latency_us/p50"),
    ("p90_us", "/latency_us/p90"),
    ("p99_us", "/latency_us/p99"),
    ("p999_us", "/latency_us/p999"),
    ("max_us", "/latency_us/max"),
    ("cpu_us_per_req_user", "/cpu_us_per_req/user"),
    ("cpu_us_per_req_sys", "/cpu_us_per_req/sys"),
    ("cpu_us_per_req_total", "/cpu_us_per_req/total"),
    ("cs_per_req", "/cs_per_req"),
    ("client_saturated", "/client_saturated"),
    ("server_cpus", "/server_cpus"),
    ("client_cpus", "/client_cpus"),
    ("reason", "/reason"),
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
    let line = s.to_json();
    COLUMNS
        .iter()
        .map(|(_, at)| quote(&cell(line.pointer(at))))
        .collect()
}

/// A figure as a cell: fractions to 3 decimals, counts whole, a failure count summed over its
/// kinds, a text's first line; empty where the step has none (not measured, not finite).
fn cell(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) if n.is_f64() => {
            n.as_f64().map_or(String::new(), |x| format!("{x:.3}"))
        }
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(text)) => text.lines().next().unwrap_or("").to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Object(by_kind)) => by_kind
            .values()
            .filter_map(Value::as_u64)
            .sum::<u64>()
            .to_string(),
        _ => String::new(),
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

    /// Every column reads a key of the step line that steps.schema.json declares: a field
    /// renamed in the record (and so in the schema) fails here, not as an empty column.
    #[test]
    fn every_column_is_a_field_of_the_record_and_the_schema() {
        let line = crate::record::steps::tests::full_step().to_json();
        let schema: Value =
            serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
        for (name, at) in COLUMNS {
            assert!(
                line.pointer(at).is_some(),
                "{name}: {at} is no field of the step line"
            );
            let top = at.split('/').nth(1).unwrap();
            assert!(
                schema["properties"].get(top).is_some(),
                "{name}: {top} is not in the schema"
            );
        }
        let cells = row(&crate::record::steps::tests::full_step());
        assert_eq!(cells.len(), COLUMNS.len());
        assert_eq!(
            (cells[3].as_str(), cells[7].as_str(), cells[10].as_str()),
            ("1", "errors", "1")
        );
    }

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("a"), "a");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
