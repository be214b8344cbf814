//! The runner core's typed error: why a step failed, by kind. The kind goes to the step's
//! `error_kind` in `steps.jsonl`, the text to its `reason`.

use crate::record::steps::ErrorKind;

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The target did not start or crashed.
    #[error("{0}")]
    Launch(String),
    /// The load could not run or connect.
    #[error("{0}")]
    Load(String),
    /// An external tool's output could not be parsed.
    #[error("{0}")]
    Parse(String),
    /// Another host: ssh, a host that is down, a client group there.
    #[error("{0}")]
    Remote(String),
    /// Writing the run directory.
    #[error("{0}")]
    Io(String),
}

/// Why a target could not be started ([`super::server::Launcher::launch`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LaunchError {
    /// Its command could not run, it exited or it never became ready: what it said.
    #[error("{0}")]
    Start(String),
    /// Its host is marked down or could not be reached.
    #[error("{0}")]
    Host(String),
    /// One instance of a split target did not start (the others were stopped).
    #[error("instance {instance} of {instances}: {source}")]
    Instance {
        /// Its index, from 0.
        instance: usize,
        /// The target's instance count.
        instances: usize,
        /// Why it did not start.
        source: Box<LaunchError>,
    },
}

impl From<LaunchError> for StepError {
    fn from(e: LaunchError) -> Self {
        StepError::Launch(e.to_string())
    }
}

impl StepError {
    /// An error writing `context` (e.g. "writing the step's files").
    pub fn io(context: &str, source: std::io::Error) -> Self {
        StepError::Io(format!("{context}: {source}"))
    }

    /// An error of `kind` saying `text` (e.g. the parts' errors of a split step, joined).
    pub fn new(kind: ErrorKind, text: String) -> Self {
        match kind {
            ErrorKind::Launch => StepError::Launch(text),
            ErrorKind::Load => StepError::Load(text),
            ErrorKind::Parse => StepError::Parse(text),
            ErrorKind::Remote => StepError::Remote(text),
            ErrorKind::Io => StepError::Io(text),
        }
    }

    /// Its kind, as `steps.jsonl` records it.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StepError::Launch(_) => ErrorKind::Launch,
            StepError::Load(_) => ErrorKind::Load,
            StepError::Parse(_) => ErrorKind::Parse,
            StepError::Remote(_) => ErrorKind::Remote,
            StepError::Io(_) => ErrorKind::Io,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_io_error_keeps_its_context_in_the_text() {
        let e = StepError::io(
            "writing the step's files",
            std::io::Error::other("disk full"),
        );
        assert_eq!(e.to_string(), "writing the step's files: disk full");
        assert_eq!(e.kind(), ErrorKind::Io);
        let parse = StepError::new(ErrorKind::Parse, "x".into());
        assert!(matches!(parse, StepError::Parse(ref t) if t == "x"));
    }
}
