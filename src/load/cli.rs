//! `stairbench load URL`.

use std::process::ExitCode;

/// Options of `stairbench load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {}

/// Runs one load.
pub fn run(_args: LoadArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("load is not built yet")
}
