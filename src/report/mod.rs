//! Exporters of a run directory, one per format behind one trait.
//!
//! Each exporter turns the run's steps (and its spec and environment, when present) into
//! one file; `stairbench report DIR` and the end of every run call [`write_all`].

pub mod analysis;
pub mod cli;
pub mod compare;
pub mod csv;
pub mod extras;
pub mod html;
pub mod markdown;
pub mod profiles;
pub mod svg;

use std::path::Path;

use crate::sweep::result::{read_steps, StepResult};

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
    pub analysis: Option<analysis::RunAnalysis>,
    /// profiles.jsonl: the profile passes, differential graphs and levels not profiled.
    pub profiles: Vec<crate::sweep::profiling::ProfileLine>,
}

impl RunData {
    /// Reads a run directory.
    pub fn read(dir: &Path) -> Result<RunData, String> {
        let steps = read_steps(&dir.join("steps.jsonl"))?;
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
            profiles: crate::sweep::profiling::read_lines(dir),
        };
        run.analysis = Some(analysis::analyze(&run, Some(dir)));
        Ok(run)
    }
}

/// Turns a run into one file.
pub trait Exporter {
    /// File name in the run directory.
    fn file_name(&self) -> &'static str;
    /// The file's contents.
    fn render(&self, run: &RunData) -> String;
}

/// Every exporter this module has.
pub fn exporters() -> Vec<Box<dyn Exporter>> {
    vec![
        Box::new(csv::Csv),
        Box::new(markdown::Markdown),
        Box::new(analysis::Json),
    ]
}

/// The files [`write_all`] writes into a run directory, in that order.
pub fn written_files() -> Vec<&'static str> {
    let mut files: Vec<&'static str> = exporters().iter().map(|e| e.file_name()).collect();
    files.push("report.html");
    files
}

/// Writes every exporter's file into `dir`.
pub fn write_all(dir: &Path, run: &RunData) -> std::io::Result<()> {
    for e in exporters() {
        std::fs::write(dir.join(e.file_name()), e.render(run))?;
    }
    write_html(dir, run)
}

/// report.html reads the raw files (intervals, histograms) as well as the steps.
fn write_html(dir: &Path, run: &RunData) -> std::io::Result<()> {
    let mut data = html_data(dir, run).map_err(std::io::Error::other)?;
    data.profiles = run.profiles.clone();
    let page = html::render(&data);
    std::fs::write(dir.join("report.html"), page)
}

/// The page of a run directory: its charts from the raw files, its series, conclusions and
/// sections from the same analysis and markdown as report.md.
pub fn html_data(dir: &Path, run: &RunData) -> Result<html::ReportData, String> {
    let mut data = html::adapter::from_run_dir(dir).map_err(|e| e.to_string())?;
    let computed;
    let a = match &run.analysis {
        Some(a) => a,
        None => {
            computed = analysis::analyze(run, Some(dir));
            &computed
        }
    };
    let spec = std::fs::read_to_string(dir.join("spec.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok());
    data.series = html::from_analysis::series(a, &run.steps, spec.as_ref());
    let curves = html::from_analysis::usl_curves(a);
    // report.md's tables replace the adapter's and the analysis' own: one source for both.
    data.tables.clear();
    html::adapter::add_analysis(&mut data, &curves);
    threads_condition(&mut data);
    data.conclusions = analysis::conclusions(a);
    data.markdown = html::from_markdown::convert(&markdown::sections(run, a));
    Ok(data)
}

/// A conditions row saying how many server threads each series ran, when they follow the
/// cpuset (otherwise the spec's fixed count is in the target's arguments).
fn threads_condition(data: &mut html::ReportData) {
    let known: Vec<String> = data
        .series
        .iter()
        .filter_map(|s| {
            let t = s.threads.as_ref()?;
            Some(format!("{} / {}: {t}", s.target, s.placement))
        })
        .collect();
    if !known.is_empty() {
        data.conditions.push((
            "Server --threads (follows the server cpuset)".into(),
            known.join(", "),
        ));
    }
}
