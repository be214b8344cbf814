//! analysis.json: the run's analysis as `analyze::run` computed it, for scripts.

use super::{Exporter, RunData};
use crate::analyze::run::analyze;

/// analysis.json, beside report.md.
#[derive(Debug, Clone, Copy)]
pub struct Json;

impl Exporter for Json {
    fn file_name(&self) -> &'static str {
        "analysis.json"
    }

    fn render(&self, _dir: &std::path::Path, run: &RunData) -> Result<String, super::ExportError> {
        let computed;
        let analysis = match &run.analysis {
            Some(a) => a,
            None => {
                computed = analyze(&run.steps, None);
                &computed
            }
        };
        let mut text = serde_json::to_string_pretty(analysis).unwrap_or_default();
        text.push('\n');
        Ok(text)
    }
}
