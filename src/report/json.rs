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

/// Why analysis.json could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum AnalysisJsonError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// It is not an analysis as this build writes it.
    #[error("{path} is not an analysis: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        source: serde_json::Error,
    },
}

/// A run directory's analysis.json read back into the types that wrote it, so that a test or
/// a script compares enums (`d.limit == Limit::Disk`), not strings.
pub fn read_analysis_json(
    dir: &std::path::Path,
) -> Result<crate::analyze::run::RunAnalysis, AnalysisJsonError> {
    let path = dir.join("analysis.json");
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|source| AnalysisJsonError::Read {
        path: shown.clone(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| AnalysisJsonError::Parse {
        path: shown,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_analysis_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = read_analysis_json(&dir.path().join("none")).unwrap_err();
        assert!(missing.to_string().starts_with("cannot read "), "{missing}");
        std::fs::write(dir.path().join("analysis.json"), "{}").unwrap();
        let bad = read_analysis_json(dir.path()).unwrap_err();
        assert!(bad.to_string().contains("is not an analysis"), "{bad}");
    }
}
