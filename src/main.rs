use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = stairbench::cli::Cli::parse();
    match stairbench::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            if stairbench::cli::exit::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("stairbench: error: {err:#}");
            stairbench::cli::exit::outcome_of(&err).into()
        }
    }
}
