//! This machine as an engine (`local://`): commands run by `sh` here, in the host's working
//! directory, the binary linked rather than copied, files read and removed here, and a clock
//! offset of zero (it is the reference clock). It reaches the same process trees, observers
//! and client groups a remote host does, without ssh: a host for trying a spec's `[hosts]`
//! layout on one machine, and the engine the remote layer's tests run on.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::clock::ClockOffset;
use super::engine::Engine;
use super::engine::{CopyOutcome, RemoteOutput, REMOTE_BIN};
use super::host::{HostError, HostSpec, DEFAULT_WORKDIR};
use super::RemoteError;

/// The address a `local://` host's ports are reached at.
pub const LOOPBACK: &str = "127.0.0.1";

/// This machine, reached with `sh`.
#[derive(Debug, Clone)]
pub struct Local {
    /// The host as the spec gives it (a relative working directory is under the home
    /// directory, as on an ssh host).
    pub spec: HostSpec,
}

/// Reads `local://` (nothing may follow: the host is this machine).
pub fn parse_url(name: &str, url: &str, rest: &str) -> Result<HostSpec, HostError> {
    if !rest.trim_end_matches('/').is_empty() {
        return Err(HostError::BadAddress {
            name: name.into(),
            url: url.into(),
            why: "a local:// host is this machine: write it as local:// alone".into(),
        });
    }
    Ok(HostSpec {
        name: name.into(),
        scheme: "local".into(),
        user: None,
        address: LOOPBACK.into(),
        port: 0,
        identity_file: None,
        workdir: PathBuf::from(DEFAULT_WORKDIR),
        known_hosts_file: None,
        node: None,
    })
}

impl Local {
    /// A handle on this machine as `spec` describes it.
    pub fn new(spec: HostSpec) -> Local {
        Local { spec }
    }

    /// The working directory as a path here (relative: under `$HOME`, as ssh would put it).
    fn workdir(&self) -> PathBuf {
        let dir = &self.spec.workdir;
        match std::env::var_os("HOME") {
            Some(home) if dir.is_relative() => PathBuf::from(home).join(dir),
            _ => dir.clone(),
        }
    }

    fn local_error(what: String) -> impl FnOnce(std::io::Error) -> RemoteError {
        move |error| RemoteError::Local { what, error }
    }
}

/// `sh -c` started in the home directory, as an ssh login would start it (a relative working
/// directory is under it).
fn home_sh() -> Command {
    let mut cmd = Command::new("sh");
    if let Some(home) = std::env::var_os("HOME") {
        cmd.current_dir(home);
    }
    cmd.arg("-c");
    cmd
}

impl Engine for Local {
    fn spec(&self) -> &HostSpec {
        &self.spec
    }

    fn run(&self, command: &str) -> Result<RemoteOutput, RemoteError> {
        let out = home_sh()
            .arg(self.in_workdir(command))
            .stdin(Stdio::null())
            .output()
            .map_err(|error| RemoteError::Spawn {
                program: "sh".into(),
                error,
            })?;
        RemoteOutput::of(&self.spec.name, command, &out)
    }

    fn open(&self, line: &str, stderr: Stdio) -> Result<Child, RemoteError> {
        home_sh()
            .arg(line)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|error| RemoteError::Spawn {
                program: "sh".into(),
                error,
            })
    }

    /// Links the binary into the working directory (nothing to copy on the same machine).
    fn put(&self, local_bin: &Path) -> Result<CopyOutcome, RemoteError> {
        let dir = self.workdir();
        let link = dir.join(REMOTE_BIN);
        if std::fs::read_link(&link).is_ok_and(|to| to == local_bin) {
            return Ok(CopyOutcome::AlreadyPresent);
        }
        std::fs::create_dir_all(&dir)
            .map_err(Self::local_error(format!("creating {}", dir.display())))?;
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(local_bin, &link)
            .map_err(Self::local_error(format!("linking {}", link.display())))?;
        Ok(CopyOutcome::Copied)
    }

    fn fetch(&self, names: &[&str]) -> Result<Vec<Vec<u8>>, RemoteError> {
        let dir = self.workdir();
        let paths: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
        let bodies = paths
            .iter()
            .map(|p| {
                std::fs::read(p).map_err(Self::local_error(format!("reading {}", p.display())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for p in &paths {
            let _ = std::fs::remove_file(p);
        }
        Ok(bodies)
    }

    /// Zero: this machine is the reference clock.
    fn clock_offset(&self) -> Result<ClockOffset, RemoteError> {
        Ok(ClockOffset::default())
    }

    fn unreachable(&self, words: &str) -> RemoteError {
        RemoteError::Command {
            host: self.spec.name.clone(),
            command: "sh".into(),
            code: None,
            stderr: words.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::remote::process::{RemoteProcess, RemoteStatus};

    fn host(dir: &Path) -> Arc<dyn Engine> {
        let spec = HostSpec {
            workdir: dir.join("work"),
            ..HostSpec::parse("here", "local://").unwrap()
        };
        crate::remote::engine(&spec)
    }

    #[test]
    fn the_url_names_this_machine_only() {
        let spec = HostSpec::parse("here", "local://").unwrap();
        assert_eq!(
            (spec.scheme.as_str(), spec.address.as_str()),
            ("local", LOOPBACK)
        );
        assert_eq!(spec.url(), "local://127.0.0.1");
        let err = HostSpec::parse("here", "local://elsewhere").unwrap_err();
        assert!(err.to_string().contains("local:// alone"), "{err}");
        let err = HostSpec::parse("here", "gopher://x").unwrap_err();
        assert!(err.to_string().contains("local://"), "{err}");
    }

    #[test]
    fn run_put_and_fetch_in_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let engine = host(dir.path());
        let out = engine.run("pwd; echo hi > a.txt").unwrap();
        assert_eq!(out.stdout.trim(), dir.path().join("work").to_string_lossy());
        let err = engine.run("echo no >&2; exit 3").unwrap_err().to_string();
        assert!(err.contains("status 3") && err.contains("no"), "{err}");
        let bodies = engine.fetch(&["a.txt"]).unwrap();
        assert_eq!(bodies, [b"hi\n".to_vec()]);
        assert!(
            !dir.path().join("work/a.txt").exists(),
            "fetched files are removed"
        );
        assert!(engine.fetch(&["a.txt"]).is_err());
        let bin = Path::new("/bin/true");
        assert_eq!(engine.put(bin).unwrap(), CopyOutcome::Copied);
        assert_eq!(engine.put(bin).unwrap(), CopyOutcome::AlreadyPresent);
        engine.run(&format!("./{REMOTE_BIN}")).unwrap();
        assert_eq!(engine.clock_offset().unwrap(), ClockOffset::default());
    }

    /// The engine-agnostic process: its group id, its exit code, and a stop that ends the
    /// whole group with the given signal.
    #[test]
    fn a_process_group_starts_exits_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let engine = host(dir.path());
        let grace = Duration::from_secs(1);
        let mut p =
            RemoteProcess::spawn(engine.clone(), "echo out; exit 4", "TERM", grace).unwrap();
        assert!(p.pgid() > 0);
        assert_eq!(
            p.wait_timeout(Duration::from_secs(5)),
            RemoteStatus::Exited(4)
        );
        assert_eq!(p.output_tail(), ["out"]);
        let started = Instant::now();
        let mut p =
            RemoteProcess::spawn(engine.clone(), "sleep 30 & sleep 31", "INT", grace).unwrap();
        let pgid = nix::unistd::Pid::from_raw(p.pgid());
        assert_eq!(p.try_status(), RemoteStatus::Running);
        // INT is ignored in the group (a background job): KILL ends it after the grace.
        assert_eq!(p.stop(), RemoteStatus::Killed(9));
        assert!(started.elapsed() < Duration::from_secs(8));
        // Its members are killed (reaped by init, at its pace).
        let gone = Instant::now() + Duration::from_secs(5);
        while nix::sys::signal::killpg(pgid, None).is_ok() && Instant::now() < gone {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            nix::sys::signal::killpg(pgid, None).is_err(),
            "the group is gone"
        );
        let mut p = RemoteProcess::spawn(engine, "sleep 30", "TERM", grace).unwrap();
        assert_eq!(p.stop(), RemoteStatus::Killed(15));
    }
}
