use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = stairbench::cli::Cli::parse();
    match stairbench::cli::run(cli) {
        Ok(code) => code,
        Err(err) => {
            if stairbench::cli::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("stairbench: error: {err:#}");
            stairbench::exit::Outcome::of_error(&err).into()
        }
    }
}
