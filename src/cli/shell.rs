//! Shell conventions: `stairbench completions SHELL`, `stairbench man`, the `-q`/`-v` flags
//! every command with progress output shares, and whether progress may be drawn at all (not in
//! a pipe, not under `CI`, not with `NO_COLOR`'s plain output wish).

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::CommandFactory as _;

/// How much progress a command prints on standard error (`load`, `run`, `demo`).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct Verbosity {
    /// No progress on standard error (per-second lines, step lines, progress bar); results,
    /// verdicts and errors still print.
    #[arg(short, long, conflicts_with = "verbose")]
    pub quiet: bool,
    /// More progress: every per-second line of every step (`load` prints them without it).
    #[arg(short, long)]
    pub verbose: bool,
}

/// Options of `stairbench completions`.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish (also elvish, powershell).
    pub shell: clap_complete::Shell,
}

/// Options of `stairbench man`.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write one page per command (stairbench.1, stairbench-run.1, ...) into DIR instead of
    /// printing stairbench.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script for a shell.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(
        args.shell,
        &mut super::Cli::command(),
        "stairbench",
        &mut out,
    );
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the man page (roff), or writes every command's into a directory.
pub fn man(args: ManArgs) -> anyhow::Result<ExitCode> {
    let cmd = super::Cli::command();
    match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("writing man pages into {}", dir.display()))?;
        }
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            out.flush()?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether progress may be drawn in place (a bar, redrawn lines): standard error is a
/// terminal, `CI` is not set, and `TERM` is not `dumb`.
pub fn interactive_stderr() -> bool {
    std::io::stderr().is_terminal()
        && !in_ci()
        && std::env::var("TERM").map_or(true, |t| t != "dumb")
}

/// `CI` set to anything but empty, `0` or `false` (GitHub Actions, GitLab and most CI systems
/// set `CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_definitions_are_consistent() {
        use clap::CommandFactory as _;
        super::super::Cli::command().debug_assert();
    }
}
