//! `stairbench flame` and `stairbench profile`.

use std::process::ExitCode;

/// Options of `stairbench flame`.
#[derive(Debug, clap::Args)]
pub struct FlameArgs {}

/// Options of `stairbench profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {}

/// Draws flame graphs.
pub fn flame(_args: FlameArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("flame is not built yet")
}

/// Profiles a running process.
pub fn profile(_args: ProfileArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("profile is not built yet")
}
