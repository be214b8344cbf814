//! `stairbench analyze FILE.csv`.

use std::process::ExitCode;

/// Options of `stairbench analyze`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {}

/// Analyses a CSV table.
pub fn run(_args: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("analyze is not built yet")
}
