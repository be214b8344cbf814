//! `stairbench report` and `stairbench compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Options of `stairbench report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A run directory (with steps.jsonl).
    pub dir: PathBuf,
}

/// Options of `stairbench compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {}

/// Rebuilds a run directory's report files from its steps.jsonl.
pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let run = super::RunData::read(&args.dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading run directory {}", args.dir.display()))?;
    super::write_all(&args.dir, &run)
        .with_context(|| format!("writing reports into {}", args.dir.display()))?;
    println!("report: {}", args.dir.join("report.md").display());
    Ok(ExitCode::SUCCESS)
}

/// Compares runs.
pub fn compare(_args: CompareArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("compare is not built yet")
}
