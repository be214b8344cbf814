//! Built-in reference servers.

use std::process::ExitCode;

/// The built-in servers.
#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// Length-prefixed messenger server, reactor or pool architecture.
    Msgr(MsgrArgs),
}

/// Options of `stairbench serve msgr` (filled in by the serve work).
#[derive(Debug, clap::Args)]
pub struct MsgrArgs {}

/// Runs a built-in server until SIGINT or SIGTERM.
pub fn run(_cmd: ServeCommand) -> anyhow::Result<ExitCode> {
    anyhow::bail!("serve is not built yet")
}
