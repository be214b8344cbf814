//! The exit codes every command shares (README, "Exit codes"), so a script can tell a run
//! that could not run from one whose server answered with errors. Only the types: which
//! error means which code is decided at the command edge (`cli::exit`), so this leaf
//! imports nothing from the crate.

use std::process::ExitCode;

/// What a command's end means to a script, from the most to the least urgent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Ctrl-C or SIGTERM ended it (130).
    Interrupted,
    /// Bad command line or spec (2).
    Usage,
    /// Something could not run: a step, the load, or `compare --fail-if-slower` (1).
    Failure,
    /// Requests failed above the allowed ratio (3).
    Errors,
    /// A threshold was breached (4, reserved).
    Threshold,
    /// All good (0).
    Ok,
}

impl Outcome {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Outcome::Interrupted => 130,
            Outcome::Usage => 2,
            Outcome::Failure => 1,
            Outcome::Errors => 3,
            Outcome::Threshold => 4,
            Outcome::Ok => 0,
        }
    }

    /// The one that wins when several apply: 130, 2, 1, 3, 4, then 0.
    pub fn first(outcomes: impl IntoIterator<Item = Outcome>) -> Outcome {
        outcomes.into_iter().min().unwrap_or(Outcome::Ok)
    }
}

/// A bad command line or input the command edge found, as a typed error so
/// `cli::exit::outcome_of` maps it to 2 (errors of the modules' own usage types are recognised
/// as they are).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Marks an error as a usage error (exit code 2), keeping its message.
pub trait OrUsage<T> {
    /// The result, its error turned into a [`UsageError`].
    fn or_usage(self) -> anyhow::Result<T>;
}

impl<T, E: std::fmt::Display> OrUsage<T> for Result<T, E> {
    fn or_usage(self) -> anyhow::Result<T> {
        self.map_err(|e| UsageError(format!("{e:#}")).into())
    }
}

impl From<Outcome> for ExitCode {
    fn from(o: Outcome) -> ExitCode {
        ExitCode::from(o.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_interrupted_usage_failure_errors_threshold() {
        use Outcome::*;
        assert_eq!(Outcome::first([Ok, Errors, Failure]).code(), 1);
        assert_eq!(Outcome::first([Threshold, Errors]).code(), 3);
        assert_eq!(Outcome::first([Failure, Interrupted, Usage]).code(), 130);
        assert_eq!(Outcome::first([Failure, Usage]).code(), 2);
        assert_eq!(Outcome::first([]).code(), 0);
    }
}
