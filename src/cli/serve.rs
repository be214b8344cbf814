//! `stairbench serve`: dispatches to the built-in servers. Their options ([`ServeCommand`]
//! and its `*Args`) stay beside the servers, since the sweep checks a spec's `builtin` against
//! them too.

use std::process::ExitCode;

use crate::serve::ServeCommand;

/// Runs a built-in server until SIGINT or SIGTERM.
pub fn run(cmd: ServeCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ServeCommand::Msgr(args) => crate::serve::run_msgr(&args),
        ServeCommand::Shmkv(args) => crate::serve::shmkv::run(args),
    }
}
