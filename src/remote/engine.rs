//! What stairbench asks of whatever starts its processes on a host: the `Engine` trait. A
//! `[hosts]` URL's scheme picks the engine in `remote::ENGINES`.
//!
//! An engine runs a command there to its end, opens a channel to a command there (stdin and
//! stdout piped: the long-running process trees of [`RemoteProcess`], the clock probe, the
//! remote observer all talk over one), puts the stairbench binary in the host's working
//! directory, brings files back, signals a process group, and measures the host's clock offset.
//! Everything above (`fleet`) speaks to hosts through this trait only.
//!
//! [`RemoteProcess`]: super::process::RemoteProcess

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Instant;

use super::clock::{best_offset, ClockOffset, ClockSample, CLOCK_ROUNDS};
use super::host::HostSpec;
use super::shell::{sh_c, truncate};
use super::RemoteError;
use crate::clock::now_ns;

/// The file name of the stairbench binary in the host's working directory.
pub const REMOTE_BIN: &str = "stairbench";

/// How long a channel may stay quiet past when its answer was due before its host is checked
/// ([`Engine::answers`]); each check that finds the host well doubles the wait for the next.
pub const QUIET_BEFORE_CHECK: std::time::Duration = std::time::Duration::from_secs(2);

/// What `copy_binary_if_missing` found on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The same binary (same `--version` and checksum) was already there.
    AlreadyPresent,
    /// The binary was missing or differed and was copied.
    Copied,
}

/// The output of a remote command that exited with status 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteOutput {
    /// Everything the command wrote to stdout.
    pub stdout: String,
    /// Everything the command (and ssh) wrote to stderr.
    pub stderr: String,
}

impl RemoteOutput {
    /// A finished command's output, or the error its exit status says (every engine's `run`).
    pub(super) fn of(
        host: &str,
        command: &str,
        out: &std::process::Output,
    ) -> Result<RemoteOutput, RemoteError> {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.code() {
            Some(0) => Ok(RemoteOutput { stdout, stderr }),
            code => Err(RemoteError::Command {
                host: host.to_string(),
                command: command.into(),
                code,
                stderr: stderr.trim().into(),
            }),
        }
    }
}

/// Starts stairbench's processes on one host.
pub trait Engine: Send + Sync + std::fmt::Debug {
    /// The host as the spec gives it (name, address others reach it at, working directory).
    fn spec(&self) -> &HostSpec;

    /// Runs `command` (a shell command line) in the working directory to its end and returns
    /// its output; a non-zero exit is [`RemoteError::Command`] carrying stderr. Bounded by the
    /// engine's own time-outs when the host does not answer.
    fn run(&self, command: &str) -> Result<RemoteOutput, RemoteError>;

    /// Starts `line` (a complete `sh` line, already quoted, run from the login directory) on
    /// the host with its stdin and stdout piped to us, `stderr` piped or null. The channel
    /// ends when the command ends; closing its stdin closes the command's stdin.
    fn open(&self, line: &str, stderr: Stdio) -> Result<Child, RemoteError>;

    /// Puts `local_bin` in the working directory as `stairbench` unless the binary there
    /// prints the same `--version` and has the same checksum.
    fn put(&self, local_bin: &Path) -> Result<CopyOutcome, RemoteError>;

    /// Reads the files `names` (relative paths are under the working directory) and removes
    /// them there; their contents, in order.
    fn fetch(&self, names: &[&str]) -> Result<Vec<Vec<u8>>, RemoteError>;

    /// Sends `signal` (a name: `TERM`, `KILL`, ...) to the process group `pgid` there; a group
    /// that is gone already is no error.
    fn stop(&self, pgid: i32, signal: &str) -> Result<(), RemoteError> {
        self.run(&format!("kill -{signal} -- -{pgid} 2>/dev/null; true"))
            .map(drop)
    }

    /// The host's clock minus ours, measured over one channel (`date +%s%N` round trips, the
    /// one with the smallest delay kept).
    fn clock_offset(&self) -> Result<ClockOffset, RemoteError> {
        clock_offset_over(self)
    }

    /// The error for a host the engine could not reach, with its last words.
    fn unreachable(&self, words: &str) -> RemoteError;

    /// Whether a channel's exit `code` means the engine did not reach the host (ssh: 255);
    /// then [`Engine::unreachable`] is the error, not the command's.
    fn is_unreachable(&self, _code: Option<i32>) -> bool {
        false
    }

    /// A quick check, bounded by the engine's own time-out, that the host still answers:
    /// asked when a channel there went quiet or ended without its answer (srun learns that
    /// a node was lost only once Slurm declares it down, minutes later on most clusters).
    /// An error says why the host is lost; the channels opened there before it are no
    /// longer waited for ([`Engine::lost_since`]).
    fn answers(&self) -> Result<(), HostLost> {
        Ok(())
    }

    /// Why the host was found lost (by [`Engine::answers`]) after `opened`: a channel
    /// opened then is given up.
    fn lost_since(&self, _opened: Instant) -> Option<String> {
        None
    }

    /// The URL the host was named with, for messages and `environment.json`.
    fn url(&self) -> String {
        self.spec().url()
    }

    /// The host's name in the spec's `[hosts]` table.
    fn name(&self) -> &str {
        &self.spec().name
    }

    /// Checks the host answers (and creates the working directory).
    fn check(&self) -> Result<(), RemoteError> {
        self.run("true").map(drop)
    }

    /// `sh -c 'cd WORKDIR && COMMAND'`, quoted for the host's shell; the directory is created
    /// when missing. What to hand to [`Engine::open`] to run a command in the working
    /// directory.
    fn in_workdir(&self, command: &str) -> String {
        let dir = self.spec().workdir.to_string_lossy();
        sh_c(
            "mkdir -p -- \"$1\" && cd -- \"$1\" && eval \"$2\"",
            &[&dir, command],
        )
    }
}

impl dyn Engine + '_ {
    /// Runs `command` and reads its stdout as JSON of type `T`.
    pub fn run_json<T: serde::de::DeserializeOwned>(
        &self,
        command: &str,
    ) -> Result<T, RemoteError> {
        let out = self.run(command)?;
        serde_json::from_str(&out.stdout).map_err(|e| RemoteError::Protocol {
            host: self.name().to_string(),
            what: command.into(),
            detail: format!("{e}; got {:?}", truncate(&out.stdout, 200)),
        })
    }
}

/// The clock offset of [`Engine::clock_offset`]: `CLOCK_ROUNDS` round trips (after a warm-up)
/// over one channel, so the rounds measure the channel, not its set-up.
pub fn clock_offset_over<E: Engine + ?Sized>(engine: &E) -> Result<ClockOffset, RemoteError> {
    let script = "while read -r _; do date +%s%N; done";
    let mut child = engine.open(&sh_c(script, &[]), Stdio::piped())?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let samples = (0..=CLOCK_ROUNDS)
        .map(|_| clock_round(engine, &mut stdin, &mut stdout))
        .collect::<Result<Vec<_>, _>>();
    drop(stdin);
    let output = child.wait_with_output();
    let samples = match samples {
        Ok(samples) => samples,
        Err(None) => {
            let stderr = output.map(|o| o.stderr).unwrap_or_default();
            return Err(engine.unreachable(&String::from_utf8_lossy(&stderr)));
        }
        Err(Some(e)) => return Err(e),
    };
    Ok(best_offset(&samples[1..]).expect("CLOCK_ROUNDS > 0"))
}

/// One round trip; `Err(None)` when the channel ended (the caller reads the engine's reason).
fn clock_round<E: Engine + ?Sized>(
    engine: &E,
    stdin: &mut impl Write,
    stdout: &mut impl BufRead,
) -> Result<ClockSample, Option<RemoteError>> {
    let mut line = String::new();
    let local_before_ns = now_ns();
    stdin.write_all(b"t\n").map_err(|_| None)?;
    stdin.flush().map_err(|_| None)?;
    if stdout.read_line(&mut line).map_err(|_| None)? == 0 {
        return Err(None);
    }
    let local_after_ns = now_ns();
    let remote_ns = parse_date_ns(line.trim()).ok_or_else(|| {
        Some(RemoteError::Protocol {
            host: engine.name().to_string(),
            what: "date +%s%N".into(),
            detail: format!(
                "expected nanoseconds since the epoch, got {:?} (the host needs GNU date)",
                truncate(line.trim(), 80)
            ),
        })
    })?;
    Ok(ClockSample {
        local_before_ns,
        remote_ns,
        local_after_ns,
    })
}

/// `date +%s%N` output: at least 19 digits (seconds and nanoseconds), nothing else.
fn parse_date_ns(text: &str) -> Option<i64> {
    if text.len() < 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Why a host no longer answers ([`Engine::answers`]): a Slurm node whose slurmd is gone.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HostLost {
    /// Its address does not resolve.
    #[error("node {node}: cannot resolve its address {address}: {why}")]
    Resolve {
        /// The node.
        node: String,
        /// Its address.
        address: String,
        /// What the resolver said.
        why: String,
    },
    /// Its slurmd did not accept a connection.
    #[error("node {node} was lost: its slurmd ({at}) {how}")]
    Lost {
        /// The node.
        node: String,
        /// The slurmd's ADDRESS:PORT.
        at: String,
        /// How the connection failed.
        how: ProbeFailure,
    },
}

/// How a connection to a node's daemon failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProbeFailure {
    /// Refused: the daemon is gone.
    #[error("refused the connection: its Slurm daemon is gone")]
    Refused,
    /// No answer within the probe's time-out (seconds).
    #[error("did not answer within {0} s: the node or its network is gone")]
    TimedOut(u64),
    /// Another error (what the OS said).
    #[error("cannot be reached: {0}")]
    Other(String),
    /// The address resolved to nothing.
    #[error("has no address")]
    NoAddress,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_output_is_checked() {
        assert_eq!(
            parse_date_ns("1763790000123456789"),
            Some(1_763_790_000_123_456_789)
        );
        assert_eq!(parse_date_ns("1763790000N"), None);
        assert_eq!(parse_date_ns("1763790000"), None);
    }
}
