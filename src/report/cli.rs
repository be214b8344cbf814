//! `stairbench report` and `stairbench compare`.

use std::process::ExitCode;

/// Options of `stairbench report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {}

/// Options of `stairbench compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {}

/// Rebuilds reports.
pub fn report(_args: ReportArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("report is not built yet")
}

/// Compares runs.
pub fn compare(_args: CompareArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("compare is not built yet")
}
