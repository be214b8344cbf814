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
