//! Exporters of a run directory, one per format behind one trait.
//!
//! Each exporter turns the run's steps (and its spec and environment, when present) into
//! one file; `stairbench report DIR` and the end of every run call [`write_all`].

pub mod cell;
pub mod compare;
pub mod csv;
pub mod diagnosis;
pub mod doc;
pub mod extras;
pub mod findings;
pub mod gates;
pub mod html;
pub mod json;
pub mod junit;
pub mod kvd;
pub mod markdown;
pub mod profiles;
pub mod study;
pub mod svg;
pub mod table_box;

use std::path::Path;

use crate::analyze::run::{analyze, RunAnalysis};
use crate::record::steps::{read_steps, StepResult};

/// What an exporter reads: everything in a run directory that is not raw per-second data.
#[derive(Debug, Clone, Default)]
pub struct RunData {
    /// Experiment name.
    pub name: String,
    /// The steps, in the order they ran.
    pub steps: Vec<StepResult>,
    /// environment.json, when present.
    pub environment: Option<serde_json::Value>,
    /// Remarks of the run (rate-search results, early stops, interruption).
    pub notes: Vec<String>,
    /// The analysis of the steps (knee, USL, Little's law, modes, comparisons), when read.
    pub analysis: Option<RunAnalysis>,
    /// profiles.jsonl: the profile passes, differential graphs and levels not profiled.
    pub profiles: Vec<crate::record::profiles::ProfileLine>,
}

impl RunData {
    /// Reads a run directory.
    pub fn read(dir: &Path) -> Result<RunData, String> {
        let steps = read_steps(&dir.join("steps.jsonl")).map_err(|e| e.to_string())?;
        let environment = std::fs::read_to_string(dir.join("environment.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        let name = std::fs::read_to_string(dir.join("spec.toml"))
            .ok()
            .and_then(|t| t.parse::<toml::Table>().ok())
            .and_then(|t| t.get("name").and_then(|n| n.as_str()).map(str::to_string))
            .unwrap_or_else(|| {
                dir.file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let notes = std::fs::read_to_string(dir.join("notes.txt"))
            .map(|t| t.lines().map(str::to_string).collect())
            .unwrap_or_default();
        let mut run = RunData {
            name,
            steps,
            environment,
            notes,
            analysis: None,
            profiles: crate::record::profiles::read_lines(dir),
        };
        run.analysis = Some(analyze(&run.steps, Some(dir)));
        Ok(run)
    }
}

/// Why an exporter could not render its file.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The raw files the page reads (histograms, per-second figures) could not be read.
    #[error(transparent)]
    RunDir(#[from] html::adapter::AdapterError),
}

/// Turns a run into one file.
pub trait Exporter {
    /// File name in the run directory.
    fn file_name(&self) -> &'static str;
    /// The file's contents; `dir` is the run directory, read by an exporter that shows its raw
    /// files as well as `run` (the page's histograms and per-core figures).
    fn render(&self, dir: &Path, run: &RunData) -> Result<String, ExportError>;
}

/// Every exporter this module has, in the order [`write_all`] writes their files.
pub fn exporters() -> Vec<Box<dyn Exporter>> {
    vec![
        Box::new(csv::Csv),
        Box::new(markdown::Markdown),
        Box::new(json::Json),
        Box::new(html::Html),
    ]
}

/// The files [`write_all`] writes into a run directory, in that order.
pub fn written_files() -> Vec<&'static str> {
    exporters().iter().map(|e| e.file_name()).collect()
}

/// Writes every exporter's file into `dir`.
pub fn write_all(dir: &Path, run: &RunData) -> std::io::Result<()> {
    for e in exporters() {
        // The message alone: an io::Error of the error itself would print its source twice.
        let text = e
            .render(dir, run)
            .map_err(|err| std::io::Error::other(err.to_string()))?;
        std::fs::write(dir.join(e.file_name()), text)?;
    }
    Ok(())
}
