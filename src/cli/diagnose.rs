//! `stairbench analyze DIR`: why each series of a run directory stops scaling.

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use crate::exit::OrUsage as _;

/// Prints the run directory's diagnoses (as JSON with `json`).
pub fn run(dir: &Path, json: bool) -> anyhow::Result<ExitCode> {
    let analysis = crate::report::analyze_run(dir).or_usage()?;
    let out = if json {
        serde_json::to_string_pretty(&analysis.diagnosis)? + "\n"
    } else {
        crate::report::diagnosis::text(&analysis)
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}
