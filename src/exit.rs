//! The exit codes every command shares (README, "Exit codes"), so a script can tell a run
//! that could not run from one whose server answered with errors.

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

impl Outcome {
    /// The outcome of a command that ended with `err`: 2 when a cause in its chain is a
    /// usage or spec error (a bad command line, spec or input named on it), 1 otherwise (it
    /// could not run: a write failed, the server did not answer).
    pub fn of_error(err: &anyhow::Error) -> Outcome {
        if err.chain().any(is_usage) {
            Outcome::Usage
        } else {
            Outcome::Failure
        }
    }
}

/// A bad command line or input the command edge found, as a typed error so [`Outcome::of_error`]
/// maps it to 2 (errors of the modules' own usage types are recognised as they are).
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

/// True for the error types that mean "the command line or spec is wrong".
fn is_usage(cause: &(dyn std::error::Error + 'static)) -> bool {
    use crate::load::LoadError;
    use crate::wire::shmkv::ShmkvError;
    cause.is::<UsageError>()
        || cause.is::<crate::sweep::spec::SpecError>()
        || cause.is::<crate::cpuset::PinError>()
        || cause.is::<crate::cpuset::CpuListError>()
        || cause.is::<crate::serve::msgr::MsgrConfigError>()
        || cause.is::<crate::report::compare::CompareError>()
        || matches!(cause.downcast_ref(), Some(LoadError::BadInput(_)))
        || matches!(cause.downcast_ref(), Some(ShmkvError::BadOption(_)))
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

    #[test]
    fn usage_errors_anywhere_in_the_chain_are_2_others_1() {
        use anyhow::Context;
        let spec: anyhow::Result<()> = Err("bad key").or_usage();
        let spec = spec.context("reading x.toml").unwrap_err();
        assert_eq!(Outcome::of_error(&spec).code(), 2);
        assert_eq!(spec.to_string(), "reading x.toml");
        let io = std::io::Error::other("disk full");
        let io = anyhow::Error::new(io).context("writing steps.jsonl");
        assert_eq!(Outcome::of_error(&io).code(), 1);
        let pin = crate::cpuset::PinError {
            cpu: 7,
            available: "0-1".into(),
        };
        assert_eq!(Outcome::of_error(&pin.into()).code(), 2);
    }
}
