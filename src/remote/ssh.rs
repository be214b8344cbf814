//! One host reached with the OpenSSH client: a command and its output, file copies with scp,
//! the stairbench binary put there when it is missing or differs.
//!
//! Every remote command goes through `sh -c` with its arguments single-quoted, so the remote
//! user's login shell only ever parses `sh -c '...' ...`, whatever shell it is.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::engine::{CopyOutcome, Engine, RemoteOutput, REMOTE_BIN};
use super::host::HostSpec;
use super::shell::sh_c;
use super::RemoteError;

/// Seconds ssh waits for the TCP connection (`ConnectTimeout`).
pub const CONNECT_TIMEOUT_S: u32 = 5;

/// Seconds between keep-alive probes on an open session; three unanswered probes end it, so a
/// host that dies mid-step is noticed within about `3 × SERVER_ALIVE_S` seconds.
pub const SERVER_ALIVE_S: u32 = 2;

/// One host, reached with `ssh` and `scp`. Holds no connection: each call is one ssh session.
#[derive(Debug, Clone)]
pub struct Remote {
    /// The host as the spec gives it.
    pub spec: HostSpec,
}

impl Remote {
    /// A handle on `spec`; nothing is contacted until `check`.
    pub fn new(spec: HostSpec) -> Remote {
        Remote { spec }
    }

    /// Connects (accepting a new host key, never a changed one), logs in without prompting and
    /// creates the working directory. Fails with `Unreachable` within about
    /// `CONNECT_TIMEOUT_S` when the host does not answer.
    pub fn check(&self) -> Result<(), RemoteError> {
        self.run("true").map(drop)
    }

    /// Runs `command` (a shell command line) in the working directory and returns its output;
    /// a non-zero exit is an error carrying stderr.
    pub fn run(&self, command: &str) -> Result<RemoteOutput, RemoteError> {
        let out = self.output(&self.in_workdir(command))?;
        RemoteOutput::of(&self.spec.name, command, &out)
    }

    /// Copies `local_bin` to `<workdir>/stairbench` unless the binary there prints the same
    /// `--version` and has the same `cksum` (so a rebuilt binary of the same version is copied
    /// too). The copy goes to a temporary name first, so a running binary is never overwritten.
    pub fn copy_binary_if_missing(&self, local_bin: &Path) -> Result<CopyOutcome, RemoteError> {
        let local = local_fingerprint(local_bin)?;
        if self.remote_fingerprint()? == Some(local) {
            return Ok(CopyOutcome::AlreadyPresent);
        }
        let tmp = format!("{REMOTE_BIN}.part.{}", std::process::id());
        self.scp_to(local_bin, &self.workdir_path(&tmp))?;
        self.run(&format!("chmod +x {tmp} && mv -f {tmp} {REMOTE_BIN}"))?;
        Ok(CopyOutcome::Copied)
    }

    /// Copies `remote_path` (relative paths are under the working directory) to `local_path`
    /// with scp.
    pub fn fetch_file(&self, remote_path: &Path, local_path: &Path) -> Result<(), RemoteError> {
        let source = format!(
            "{}:{}",
            self.spec.destination(true),
            self.workdir_path(&remote_path.to_string_lossy()).display()
        );
        let mut cmd = self.scp_command();
        cmd.arg(source).arg(local_path);
        self.scp(cmd, &format!("fetching {}", remote_path.display()))
    }

    /// Reads the files `names` (relative paths are under the working directory) and removes
    /// them there, over one ssh session whatever their number; their contents in order. Each
    /// is sent as its size in bytes on a line, then its bytes, so any content comes back whole.
    pub fn take_files(&self, names: &[&str]) -> Result<Vec<Vec<u8>>, RemoteError> {
        let what = format!("reading {}", names.join(", "));
        let out = self.output(&self.in_workdir(&take_files_line(names)))?;
        taken_files(&self.spec.name, what, &out, names.len())
    }

    /// The `ssh` command with every option and the destination, ready for a remote command.
    pub fn ssh_command(&self) -> Command {
        let mut cmd = Command::new("ssh");
        cmd.args(["-T", "-p", &self.spec.port.to_string()]);
        // INFO: a session that ends says why ("Connection to ... closed by remote host.",
        // "Timeout, server ... not responding."); ERROR would end it without a word.
        cmd.args(self.common_options("INFO"));
        cmd.arg("--").arg(self.spec.destination(false));
        cmd
    }

    /// Starts ssh running `remote_line` (already quoted) with its stdin and stdout piped: a
    /// session the caller talks to. `stderr` is piped or null, as the caller reads it or not.
    pub fn spawn_piped(
        &self,
        remote_line: &str,
        stderr: Stdio,
    ) -> Result<std::process::Child, RemoteError> {
        self.ssh_command()
            .arg(remote_line)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|error| RemoteError::Spawn {
                program: "ssh".into(),
                error,
            })
    }

    /// Runs a remote shell line (already quoted) and returns ssh's raw output; ssh's own
    /// failures (status 255) become `Unreachable`.
    pub(crate) fn output(&self, remote_line: &str) -> Result<Output, RemoteError> {
        let out = self
            .ssh_command()
            .arg(remote_line)
            .stdin(Stdio::null())
            .output()
            .map_err(|error| RemoteError::Spawn {
                program: "ssh".into(),
                error,
            })?;
        let stderr = without_key_note(&out.stderr);
        if out.status.code() == Some(255) {
            return Err(self.unreachable(&stderr));
        }
        Ok(Output {
            stderr: stderr.into_bytes(),
            ..out
        })
    }

    /// The error for a host ssh could not reach or log in to.
    pub fn unreachable(&self, stderr: &str) -> RemoteError {
        let detail = match stderr.trim() {
            "" => "ssh ended with status 255 without a word".into(),
            words => words.into(),
        };
        RemoteError::Unreachable {
            host: self.spec.name.clone(),
            url: self.spec.url(),
            detail,
        }
    }

    /// `path` as the remote side sees it: relative paths are under the working directory.
    fn workdir_path(&self, path: &str) -> PathBuf {
        self.spec.workdir.join(path)
    }

    /// The options of every ssh and scp call, with ssh's `LogLevel`.
    fn common_options(&self, log_level: &str) -> Vec<String> {
        let mut opts: Vec<String> = [
            "BatchMode=yes".to_string(),
            "StrictHostKeyChecking=accept-new".into(),
            format!("ConnectTimeout={CONNECT_TIMEOUT_S}"),
            format!("ServerAliveInterval={SERVER_ALIVE_S}"),
            "ServerAliveCountMax=3".into(),
            format!("LogLevel={log_level}"),
        ]
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect();
        if let Some(key) = &self.spec.identity_file {
            let key = key.to_string_lossy().into_owned();
            opts.extend(["-o".into(), "IdentitiesOnly=yes".into(), "-i".into(), key]);
        }
        if let Some(file) = &self.spec.known_hosts_file {
            let option = format!("UserKnownHostsFile={}", file.display());
            opts.extend(["-o".into(), option]);
        }
        opts
    }

    fn scp_command(&self) -> Command {
        let mut cmd = Command::new("scp");
        // Not -q: it would hide scp's reason ("Connection refused") behind "Connection closed".
        // Its output is not a terminal, so there is no progress meter to silence.
        cmd.args(["-P", &self.spec.port.to_string()]);
        cmd.args(self.common_options("ERROR"));
        cmd.arg("--");
        cmd
    }

    fn scp_to(&self, local: &Path, remote: &Path) -> Result<(), RemoteError> {
        self.check()?; // creates the working directory, which scp would not
        let mut cmd = self.scp_command();
        cmd.arg(local).arg(format!(
            "{}:{}",
            self.spec.destination(true),
            remote.display()
        ));
        self.scp(cmd, &format!("copying {}", local.display()))
    }

    fn scp(&self, mut cmd: Command, what: &str) -> Result<(), RemoteError> {
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .map_err(|error| RemoteError::Spawn {
                program: "scp".into(),
                error,
            })?;
        if out.status.success() {
            return Ok(());
        }
        Err(RemoteError::Copy {
            host: self.spec.name.clone(),
            what: what.into(),
            detail: String::from_utf8_lossy(&out.stderr).trim().into(),
        })
    }

    /// `--version` and `cksum` of the binary on the host, `None` when it is missing or broken.
    fn remote_fingerprint(&self) -> Result<Option<String>, RemoteError> {
        let line = format!("./{REMOTE_BIN} --version && cksum < {REMOTE_BIN}");
        match self.run(&line) {
            Ok(out) => Ok(Some(out.stdout.trim().to_owned())),
            Err(RemoteError::Command { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Engine for Remote {
    fn spec(&self) -> &HostSpec {
        &self.spec
    }

    fn run(&self, command: &str) -> Result<RemoteOutput, RemoteError> {
        Remote::run(self, command)
    }

    fn open(&self, line: &str, stderr: Stdio) -> Result<std::process::Child, RemoteError> {
        self.spawn_piped(line, stderr)
    }

    fn put(&self, local_bin: &Path) -> Result<CopyOutcome, RemoteError> {
        self.copy_binary_if_missing(local_bin)
    }

    fn fetch(&self, names: &[&str]) -> Result<Vec<Vec<u8>>, RemoteError> {
        self.take_files(names)
    }

    fn unreachable(&self, words: &str) -> RemoteError {
        Remote::unreachable(self, words)
    }

    fn is_unreachable(&self, code: Option<i32>) -> bool {
        code == Some(255)
    }
}

/// The shell line that prints each of `names` as its size on a line and its bytes, then
/// removes them; it fails on the first that cannot be read.
pub(super) fn take_files_line(names: &[&str]) -> String {
    let script = "for f; do n=$(wc -c < \"$f\") || exit 1; printf '%s\\n' \"$n\"; \
                  cat -- \"$f\" || exit 1; done; rm -f -- \"$@\"";
    sh_c(script, names)
}

/// The files a [`take_files_line`] command printed, or the error its output says (every
/// engine's `fetch` ends with this).
pub(super) fn taken_files(
    host: &str,
    what: String,
    out: &std::process::Output,
    n: usize,
) -> Result<Vec<Vec<u8>>, RemoteError> {
    if !out.status.success() {
        return Err(RemoteError::Command {
            host: host.to_string(),
            command: what,
            code: out.status.code(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().into(),
        });
    }
    split_sized(&out.stdout, n).ok_or_else(|| RemoteError::Protocol {
        host: host.to_string(),
        what,
        detail: format!("{} bytes that are not {n} sized files", out.stdout.len()),
    })
}

/// `n` parts each written as `SIZE\n` followed by SIZE bytes; `None` unless `bytes` is
/// exactly that.
pub(super) fn split_sized(mut bytes: &[u8], n: usize) -> Option<Vec<Vec<u8>>> {
    let mut parts = Vec::with_capacity(n);
    for _ in 0..n {
        let eol = bytes.iter().position(|&b| b == b'\n')?;
        let size: usize = std::str::from_utf8(&bytes[..eol])
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let body = bytes.get(eol + 1..eol + 1 + size)?;
        parts.push(body.to_vec());
        bytes = &bytes[eol + 1 + size..];
    }
    bytes.is_empty().then_some(parts)
}

/// ssh's stderr without its note (at LogLevel INFO) that it accepted a new host key, as
/// `StrictHostKeyChecking=accept-new` tells it to: not the command's words.
fn without_key_note(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .split_inclusive('\n')
        .filter(|l| !l.starts_with("Warning: Permanently added "))
        .collect()
}

/// `--version` and `cksum` of a local binary, in the form `remote_fingerprint` prints.
pub(super) fn local_fingerprint(bin: &Path) -> Result<String, RemoteError> {
    let version = local_output(Command::new(bin).arg("--version"), bin)?;
    let file = std::fs::File::open(bin).map_err(|error| RemoteError::Local {
        what: format!("opening {}", bin.display()),
        error,
    })?;
    let sum = local_output(Command::new("cksum").stdin(file), Path::new("cksum"))?;
    Ok(format!("{}\n{}", version.trim(), sum.trim()))
}

fn local_output(cmd: &mut Command, program: &Path) -> Result<String, RemoteError> {
    let out = cmd.output().map_err(|error| RemoteError::Spawn {
        program: program.display().to_string(),
        error,
    })?;
    if !out.status.success() {
        return Err(RemoteError::Local {
            what: format!("running {}", program.display()),
            error: std::io::Error::other(String::from_utf8_lossy(&out.stderr).into_owned()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(line: &str) -> String {
        let out = Command::new("sh").arg("-c").arg(line).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn workdir_wrapper_runs_the_command_there() {
        let dir = tempfile::tempdir().unwrap();
        let spec = HostSpec {
            workdir: dir.path().join("w"),
            ..HostSpec::parse("h", "ssh://u@h").unwrap()
        };
        let line = Remote::new(spec).in_workdir("pwd; echo 'a b'");
        let out = sh(&line);
        assert_eq!(out, format!("{}\na b\n", dir.path().join("w").display()));
    }

    #[test]
    fn sized_parts_come_back_whole_or_not_at_all() {
        let bytes = b"3\nabc0\n5\nx\ny\0z";
        let parts = split_sized(bytes, 3).unwrap();
        assert_eq!(parts, [b"abc".to_vec(), Vec::new(), b"x\ny\0z".to_vec()]);
        assert_eq!(split_sized(bytes, 2), None, "bytes left over");
        assert_eq!(split_sized(b"4\nabc", 1), None, "cut short");
        assert_eq!(split_sized(b"x\nabc", 1), None, "no size");
    }

    /// `take_files`' remote line, run by a local sh in the working directory: the files in
    /// order, sized, then removed; a missing file is an error that names it.
    #[test]
    fn the_take_files_line_sends_sizes_and_removes_the_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.json"), "{\"x\": 1}\n").unwrap();
        std::fs::write(dir.path().join("b.jsonl"), "").unwrap();
        let spec = HostSpec {
            workdir: dir.path().to_path_buf(),
            ..HostSpec::parse("h", "ssh://u@h").unwrap()
        };
        let remote = Remote::new(spec);
        let line = remote.in_workdir(&take_files_line(&["a.json", "b.jsonl"]));
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert!(out.status.success());
        let parts = split_sized(&out.stdout, 2).unwrap();
        assert_eq!(parts, [b"{\"x\": 1}\n".to_vec(), Vec::new()]);
        assert!(!dir.path().join("a.json").exists() && !dir.path().join("b.jsonl").exists());
        let line = remote.in_workdir(&take_files_line(&["gone.json"]));
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("gone.json"));
    }

    /// A refused connection: the fetch (scp) and the one-session fetch (ssh) both say so, in
    /// ssh's words, once.
    #[test]
    fn a_refused_fetch_keeps_ssh_s_reason() {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let installed = |p: &str| std::env::split_paths(&path).any(|d| d.join(p).is_file());
        if !(installed("ssh") && installed("scp")) {
            crate::machine::skip_test(
                "ssh or scp is not installed (Debian: apt-get install openssh-client)",
            );
            return;
        }
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        }; // closed again: nothing listens there
        let dir = tempfile::tempdir().unwrap();
        let spec = HostSpec {
            known_hosts_file: Some(dir.path().join("known")),
            ..HostSpec::parse("h", &format!("ssh://u@127.0.0.1:{port}")).unwrap()
        };
        let remote = Remote::new(spec);
        let e = remote
            .fetch_file(Path::new("x.json"), &dir.path().join("x.json"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("Connection refused"), "{e}");
        let e = remote.take_files(&["x.json"]).unwrap_err().to_string();
        assert_eq!(e.matches("Connection refused").count(), 1, "{e}");
        assert!(e.contains("cannot be reached over ssh"), "{e}");
    }

    #[test]
    fn ssh_options_carry_key_port_and_known_hosts() {
        let spec = HostSpec {
            identity_file: Some("/k/id".into()),
            known_hosts_file: Some("/k/known".into()),
            ..HostSpec::parse("h", "ssh://u@10.1.2.3:2200").unwrap()
        };
        let cmd = Remote::new(spec).ssh_command();
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = args.join(" ");
        for want in [
            "-p 2200",
            "BatchMode=yes",
            "StrictHostKeyChecking=accept-new",
            "ConnectTimeout=5",
            "-i /k/id",
            "UserKnownHostsFile=/k/known",
            "-- u@10.1.2.3",
        ] {
            assert!(joined.contains(want), "{want} missing from {joined}");
        }
    }
}
