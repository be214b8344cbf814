//! Transport to other machines: a host's address (the `[hosts]` table's entries,
//! `ssh://user@address:port`), the [`Engine`] trait every way of reaching a host implements
//! (run a command, open a channel, put the binary, fetch files, signal a process group, clock
//! offset), long-running process trees on a host, and the arithmetic of starting windows
//! together on several clocks. It knows nothing of experiments; `fleet` puts the plan's
//! targets and groups on hosts.
//!
//! The engines: `ssh` (the OpenSSH client, `ssh` and `scp`, as CBT and pbench use it, not a
//! protocol of our own: whatever the user's ssh reaches — keys, agents, jump hosts in
//! ~/.ssh/config — stairbench reaches; each call is one ssh session with `BatchMode=yes`, so
//! nothing ever waits for a password) and `local` (this machine through `sh`). A URL's scheme
//! picks one in `engine::ENGINES`.

pub mod clock;
pub mod engine;
pub mod host;
pub mod local;
pub mod process;
pub mod shell;
pub mod slurm;
pub mod slurm_step;
pub mod ssh;
pub mod stripped;
pub mod window;

pub use clock::{best_offset, ClockOffset, ClockSample};
pub use engine::Engine;
pub use engine::{CopyOutcome, RemoteOutput, REMOTE_BIN};
pub use host::{parse_hosts, validate_hosts, HostEntry, HostError, HostSpec, HostTable};
pub use local::Local;
pub use process::{wrapper_line, RemoteProcess, RemoteStatus};
pub use ssh::Remote;
pub use window::{
    host_start_times, plan_start, to_reference, window_overlap, StartPlan, Window,
    MIN_WINDOW_OVERLAP,
};

use std::sync::Arc;

use thiserror::Error;

/// Something that went wrong on the way to a host or on it.
#[derive(Debug, Error)]
pub enum RemoteError {
    /// A local program (ssh, scp, cksum) could not be started.
    #[error("cannot run {program}: {error} (install the OpenSSH client: apt-get install openssh-client)")]
    Spawn {
        program: String,
        error: std::io::Error,
    },
    /// ssh could not connect or log in (its status 255).
    #[error("host {host:?} ({url}) cannot be reached {}: {detail} ({})", reach(url).0, reach(url).1)]
    Unreachable {
        host: String,
        url: String,
        detail: String,
    },
    /// A remote command exited with a non-zero status (`None`: killed by a signal).
    #[error("on host {host:?}, `{command}` failed with status {}: {stderr}", code.map_or("none (killed)".to_string(), |c| c.to_string()))]
    Command {
        host: String,
        command: String,
        code: Option<i32>,
        stderr: String,
    },
    /// scp failed.
    #[error("host {host:?}: {what} with scp failed: {detail}")]
    Copy {
        host: String,
        what: String,
        detail: String,
    },
    /// A remote command answered something other than what it should print.
    #[error("host {host:?}: unexpected output of `{what}`: {detail}")]
    Protocol {
        host: String,
        what: String,
        detail: String,
    },
    /// A local step (finding or reading the binary) failed.
    #[error("{what}: {error}")]
    Local { what: String, error: std::io::Error },
}

/// How a host of `url` is reached, and what to check when it cannot be: by its scheme.
fn reach(url: &str) -> (&'static str, &'static str) {
    if url.starts_with("slurm://") {
        (
            "through Slurm",
            "check that stairbench runs inside the allocation and the node is up: squeue, sinfo",
        )
    } else {
        (
            "over ssh",
            "check the address, that sshd runs there and that the key is authorized",
        )
    }
}

/// One engine: its URL scheme, how to read the rest of its URL, how to start it.
pub struct EngineKind {
    /// The URL scheme, without `://`.
    pub scheme: &'static str,
    /// Reads `name = "SCHEME://REST"` (`url` whole, for messages) into a spec.
    pub parse: fn(name: &str, url: &str, rest: &str) -> Result<HostSpec, HostError>,
    /// The engine of a spec this kind parsed.
    pub start: fn(HostSpec) -> Arc<dyn Engine>,
}

/// Every engine, by scheme: a new engine (a `slurm.rs`, a `kubernetes.rs`) is one line here.
pub const ENGINES: &[EngineKind] = &[
    EngineKind {
        scheme: "ssh",
        parse: host::parse_ssh,
        start: |spec| Arc::new(ssh::Remote::new(spec)),
    },
    EngineKind {
        scheme: "local",
        parse: local::parse_url,
        start: |spec| Arc::new(local::Local::new(spec)),
    },
    EngineKind {
        scheme: slurm::SCHEME,
        parse: slurm::parse_url,
        start: |spec| Arc::new(slurm::Slurm::new(spec)),
    },
];

/// The engine kind of `scheme`.
pub fn kind(scheme: &str) -> Option<&'static EngineKind> {
    ENGINES.iter().find(|k| k.scheme == scheme)
}

/// The engine that reaches `spec`'s host.
pub fn engine(spec: &HostSpec) -> Arc<dyn Engine> {
    match kind(&spec.scheme) {
        Some(k) => (k.start)(spec.clone()),
        // A spec is made by `HostSpec::parse`, which knows only the schemes above.
        None => unreachable!("host {:?}: no engine for {:?}", spec.name, spec.scheme),
    }
}

/// Why no step can run on any host any more (the Slurm allocation the run is in has ended),
/// asked after a step failed with `failure`; `None` while they can.
pub fn hosts_gone(failure: &str) -> Option<String> {
    slurm::allocation_ended(failure)
}

/// Whether `failure` already says in the engine's own words that the hosts are gone (then a
/// step's reason needs no more than it).
pub fn says_hosts_gone(failure: &str) -> bool {
    slurm::says_job_ended(failure)
}

/// The schemes [`ENGINES`] knows, for messages (`ssh://, local://`).
pub fn schemes() -> String {
    let all: Vec<String> = ENGINES.iter().map(|k| format!("{}://", k.scheme)).collect();
    all.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_has_one_engine() {
        let mut seen: Vec<&str> = ENGINES.iter().map(|k| k.scheme).collect();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), ENGINES.len());
        assert!(kind("ssh").is_some() && kind("gopher").is_none());
        assert!(schemes().starts_with("ssh://, local://"), "{}", schemes());
    }
}
