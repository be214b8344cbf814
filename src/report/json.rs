//! analysis.json: the run's analysis as `analyze::run` computed it, for scripts.

use super::{Exporter, Report};

/// analysis.json, beside report.md.
#[derive(Debug, Clone, Copy)]
pub struct Json;

impl Exporter for Json {
    fn file_name(&self) -> &'static str {
        "analysis.json"
    }

    fn render(&self, report: &Report) -> String {
        let mut text = serde_json::to_string_pretty(&report.analysis).unwrap_or_default();
        text.push('\n');
        text
    }
}
