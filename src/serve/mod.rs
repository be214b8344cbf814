//! Built-in reference servers.

pub mod shmkv;

use std::process::ExitCode;

/// The built-in servers.
#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// Length-prefixed messenger server, reactor or pool architecture.
    Msgr(MsgrArgs),
    /// Shared-memory hash-table server of seed 002, single or per-worker architecture.
    Shmkv(crate::serve::shmkv::ShmkvArgs),
}

/// Options of `stairbench serve msgr` (filled in by the serve work).
#[derive(Debug, clap::Args)]
pub struct MsgrArgs {}

/// Runs a built-in server until SIGINT or SIGTERM.
pub fn run(cmd: ServeCommand) -> anyhow::Result<ExitCode> {
    if let ServeCommand::Shmkv(args) = cmd {
        return shmkv::run(args);
    }
    anyhow::bail!("serve is not built yet")
}
