//! Which exit code an error that ended a command means: the classification of the modules'
//! typed errors into [`Outcome`]s. It lives at the command edge because it has to know every
//! module's error types, which `crate::exit` (a leaf) must not import.

use crate::exit::{Outcome, UsageError};

/// The outcome of a command that ended with `err`: 2 when a cause in its chain is a usage or
/// spec error (a bad command line, spec or input named on it), 1 otherwise (it could not run:
/// a write failed, the server did not answer).
pub fn outcome_of(err: &anyhow::Error) -> Outcome {
    if err.chain().any(is_usage) {
        Outcome::Usage
    } else {
        Outcome::Failure
    }
}

/// True when the error is a closed stdout (`stairbench ... | head`), which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
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
        || matches!(
            cause.downcast_ref(),
            Some(crate::serve::msgr::MsgrError::Config(_))
        )
        || cause.is::<crate::analyze::compare::runs::CompareError>()
        || matches!(cause.downcast_ref(), Some(LoadError::BadInput(_)))
        || matches!(cause.downcast_ref(), Some(ShmkvError::BadOption(_)))
        || matches!(
            cause.downcast_ref(),
            Some(crate::serve::kvd::KvdError::BadOption(_))
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::OrUsage as _;

    #[test]
    fn usage_errors_anywhere_in_the_chain_are_2_others_1() {
        use anyhow::Context;
        let spec: anyhow::Result<()> = Err("bad key").or_usage();
        let spec = spec.context("reading x.toml").unwrap_err();
        assert_eq!(outcome_of(&spec).code(), 2);
        assert_eq!(spec.to_string(), "reading x.toml");
        let io = std::io::Error::other("disk full");
        let io = anyhow::Error::new(io).context("writing steps.jsonl");
        assert_eq!(outcome_of(&io).code(), 1);
        let pin = crate::cpuset::PinError {
            cpu: 7,
            available: "0-1".into(),
        };
        assert_eq!(outcome_of(&pin.into()).code(), 2);
    }

    /// An error that says its cause in its message must not also return it as `source()`:
    /// `{:#}` (how main prints errors) would say the reason twice.
    #[test]
    fn each_error_says_its_reason_once() {
        use std::path::PathBuf;
        let os = || std::io::Error::other("the reason");
        let errors: Vec<anyhow::Error> = vec![
            crate::serve::kvd::KvdError::Io {
                context: "reading".into(),
                error: os(),
            }
            .into(),
            crate::wire::shmkv::ShmkvError::Io {
                context: "mapping".into(),
                error: os(),
            }
            .into(),
            crate::machine::topology::TopologyError::Read {
                path: PathBuf::from("/x"),
                root: PathBuf::from("/"),
                error: os(),
            }
            .into(),
            crate::record::hlog::HlogError::Read {
                path: PathBuf::from("/x"),
                error: os(),
            }
            .into(),
            crate::remote::RemoteError::Local {
                what: "reading".into(),
                error: os(),
            }
            .into(),
            crate::remote::RemoteError::Spawn {
                program: "ssh".into(),
                error: os(),
            }
            .into(),
            crate::remote::host::HostError::Identity {
                name: "h".into(),
                path: PathBuf::from("/k"),
                error: os(),
            }
            .into(),
            crate::load::LoadError::Connect {
                addr: "127.0.0.1:1".into(),
                error: os(),
            }
            .into(),
        ];
        let refused = crate::load::LoadError::Connect {
            addr: "127.0.0.1:1".into(),
            error: std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
        };
        let shown = format!("{:#}", anyhow::Error::from(refused));
        assert_eq!(
            shown.to_lowercase().matches("refused").count(),
            1,
            "{shown}"
        );
        for e in errors {
            let shown = format!("{:#}", e.context("doing it"));
            assert_eq!(shown.matches("the reason").count(), 1, "{shown}");
        }
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let why = json.to_string();
        let table = crate::placement::policy::CustomTableError::from(json);
        let shown = format!("{:#}", anyhow::Error::from(table));
        assert_eq!(shown.matches(&why).count(), 1, "{shown}");
    }
}
