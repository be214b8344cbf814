//! `stairbench run` and `stairbench demo`.

use std::process::ExitCode;

/// Options of `stairbench run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

/// Options of `stairbench demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {}

/// Runs a spec.
pub fn run(_args: RunArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("run is not built yet")
}

/// Runs the demo.
pub fn demo(_args: DemoArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("demo is not built yet")
}
