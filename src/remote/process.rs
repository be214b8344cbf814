//! A long-running command on a host (a server, a load generator), started over a channel an
//! engine opens (an ssh session, an srun step, a local `sh`) and ended over the same channel.
//!
//! The remote side is a small sh wrapper: it starts the command with `setsid` (so the command
//! and everything it forks is one process group; it prints the group id once the group exists)
//! and keeps a watchdog reading the channel's stdin. Closing stdin — on `stop`, on drop, or
//! because the local end died and the engine closed the channel — sends TERM (or the given
//! signal) to the group, then KILL after the grace time. A channel that no longer answers is
//! backed up by the engine's own `stop` (KILL to the group over a new channel).
//! When the command ends by itself the wrapper ends its group's leftovers and prints
//! `stairbench-exit CODE`, so an exit is told apart from a lost connection.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::path::Path;

use super::engine::Engine;
use super::shell::sh_c;
use super::ssh::Remote;
use super::RemoteError;

/// Lines of output kept from a remote process (the last ones).
const TAIL_LINES: usize = 200;

const PGID_PREFIX: &str = "stairbench-pgid ";
const EXIT_PREFIX: &str = "stairbench-exit ";
/// Begins the words of a channel given up because its host was found lost.
const GIVEN_UP: &str = "stairbench gave up its channel: ";

/// $1 working directory, $2 command, $3 grace time in tenths of a second.
const WRAPPER: &str = r#"mkdir -p -- "$1" && cd -- "$1" || exit 97
exec 3<&0
setsid sh -c 'echo "stairbench-pgid $$"; eval "$1"' sh "$2" </dev/null &
pg=$!
(
  while read -r _; do :; done
  while kill -0 "$pg" 2>/dev/null && ! kill -0 -"$pg" 2>/dev/null; do sleep 0.05; done
  kill -"${4:-TERM}" -"$pg" 2>/dev/null
  n=0
  while [ "$n" -lt "$3" ] && kill -0 -"$pg" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done
  kill -KILL -"$pg" 2>/dev/null
) <&3 >/dev/null 2>&1 &
wd=$!
exec 3<&-
wait "$pg" 2>/dev/null
rc=$?
kill -KILL -"$pg" 2>/dev/null
kill "$wd" 2>/dev/null
echo "stairbench-exit $rc"
exit "$rc""#;

/// What became of a remote process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteStatus {
    /// Still running.
    Running,
    /// Ended by itself with this exit code.
    Exited(i32),
    /// Ended by this signal (the remote shell's status was 128 + signal).
    Killed(i32),
    /// The ssh session ended without the wrapper's exit line: the host died, the network went
    /// away, or sshd was stopped. Holds ssh's last words.
    ConnectionLost(String),
}

impl std::fmt::Display for RemoteStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteStatus::Running => write!(f, "running"),
            RemoteStatus::Exited(code) => write!(f, "exited with status {code}"),
            RemoteStatus::Killed(signal) => write!(f, "killed by signal {signal}"),
            // The engine's own check found the host lost: its words say why.
            RemoteStatus::ConnectionLost(words) if words.starts_with(GIVEN_UP) => {
                write!(
                    f,
                    "its host no longer answers: {}",
                    &words[GIVEN_UP.len()..]
                )
            }
            // srun's last words say so when the channel was a Slurm job step.
            RemoteStatus::ConnectionLost(words) if words.contains("srun: ") => write!(
                f,
                "its Slurm job step ended (node down or step cancelled?): {words}"
            ),
            RemoteStatus::ConnectionLost(words) => {
                write!(
                    f,
                    "its ssh session ended (host down or unreachable?): {words}"
                )
            }
        }
    }
}

/// Output collected from the remote process, and the wrapper's group id and exit lines.
#[derive(Debug, Default)]
pub(super) struct Tail {
    lines: VecDeque<String>,
    /// The group id line's (a task of a shared job step: read by the demultiplexer).
    pub(super) pgid: Option<i32>,
    /// The exit line's.
    pub(super) exit_code: Option<i32>,
}

impl Tail {
    pub(super) fn push(&mut self, line: String) {
        if let Some(pgid) = line.strip_prefix(PGID_PREFIX) {
            self.pgid = pgid.trim().parse().ok();
            return;
        }
        if let Some(code) = line.strip_prefix(EXIT_PREFIX) {
            self.exit_code = code.trim().parse().ok();
            return;
        }
        // ssh's note (at LogLevel INFO) that it accepted a new host key, as told to: not the
        // command's output.
        if line.starts_with("Warning: Permanently added ") {
            return;
        }
        if self.lines.len() == TAIL_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    /// The last `n` lines joined with ` | ` (the engine's words when it ended without one).
    pub(super) fn last(&self, n: usize) -> String {
        last_lines(&self.lines, n)
    }
}

/// The local end of a channel (`ssh`, `srun`, `sh`) and the threads reading its output. A job
/// step of several tasks has one for all of them, each task's process ending on its own exit
/// line; the last one dropped ends the step.
#[derive(Debug)]
pub(super) struct Channel {
    child: Child,
    stdin: Option<ChildStdin>,
    readers: Vec<JoinHandle<()>>,
}

impl Channel {
    /// `child` (its stdin still in it) and the threads reading its stdout and stderr.
    pub(super) fn new(mut child: Child, readers: Vec<JoinHandle<()>>) -> Channel {
        let stdin = child.stdin.take();
        Channel {
            child,
            stdin,
            readers,
        }
    }

    /// Whether the local end is still running.
    pub(super) fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Closes the command's stdin: the wrapper's (every task's) signal to stop.
    pub(super) fn close(&mut self) {
        drop(self.stdin.take());
    }

    /// Kills the local end (Slurm then ends the step) and reaps it.
    pub(super) fn kill(&mut self) {
        let _ = self.child.kill();
        self.reap();
    }

    /// Waits for the local end and its readers (the first caller joins them).
    fn reap(&mut self) {
        let _ = self.child.wait();
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

impl Drop for Channel {
    /// A shared step whose tasks all printed their exit lines ends by itself: reaped here,
    /// killed if it lingers.
    fn drop(&mut self) {
        self.close();
        let deadline = Instant::now() + Duration::from_secs(3);
        while self.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
    }
}

/// A command running on a host in its own process group, ended on `stop` or drop.
#[derive(Debug)]
pub struct RemoteProcess {
    engine: Arc<dyn Engine>,
    command: String,
    channel: Arc<Mutex<Channel>>,
    /// One task of a job step shared with others: it has ended once its exit line came.
    task: bool,
    pgid: i32,
    grace: Duration,
    tail: Arc<Mutex<Tail>>,
    status: Option<RemoteStatus>,
    /// When its channel was opened: a host found lost after it is no longer waited for.
    opened: Instant,
}

/// The `sh` line that runs `command` in `workdir` as its own process group, prints the
/// group's id, stops it with `signal` (then KILL after `grace`) when its stdin closes, and
/// prints the command's exit code: what an engine starts for [`RemoteProcess::spawn`].
pub fn wrapper_line(workdir: &Path, command: &str, signal: &str, grace: Duration) -> String {
    let tenths = (grace.as_millis() / 100).max(1).to_string();
    let dir = workdir.to_string_lossy();
    sh_c(WRAPPER, &[&dir, command, &tenths, signal])
}

impl Remote {
    /// [`RemoteProcess::spawn`] over ssh, stopped with TERM.
    pub fn spawn(&self, command: &str, grace: Duration) -> Result<RemoteProcess, RemoteError> {
        self.spawn_stopped_by(command, "TERM", grace)
    }

    /// [`RemoteProcess::spawn`] over ssh.
    pub fn spawn_stopped_by(
        &self,
        command: &str,
        signal: &str,
        grace: Duration,
    ) -> Result<RemoteProcess, RemoteError> {
        RemoteProcess::spawn(Arc::new(self.clone()), command, signal, grace)
    }
}

impl RemoteProcess {
    /// Starts `command` (a shell line) in the host's working directory as its own process
    /// group and returns once the group exists there. On `stop` the group gets `signal` (a
    /// name: `TERM`, `INT`, ...), then KILL after `grace`. The command's stdin is /dev/null;
    /// it starts with SIGINT and SIGQUIT ignored (a background job of a non-interactive
    /// shell), so those stop only a program that sets its own handler (PostgreSQL does).
    pub fn spawn(
        engine: Arc<dyn Engine>,
        command: &str,
        signal: &str,
        grace: Duration,
    ) -> Result<RemoteProcess, RemoteError> {
        let line = wrapper_line(&engine.spec().workdir, command, signal, grace);
        let child = engine.open(&line, Stdio::piped())?;
        RemoteProcess::from_child(engine, command, child, grace)
    }

    /// A process from a local `child` (an engine's channel) running [`wrapper_line`] there,
    /// its stdin, stdout and stderr piped: waits for the wrapper's group id line. `engine`
    /// ends the group when the channel no longer answers.
    pub fn from_child(
        engine: Arc<dyn Engine>,
        command: &str,
        mut child: Child,
        grace: Duration,
    ) -> Result<RemoteProcess, RemoteError> {
        let opened = Instant::now();
        let tail = Arc::new(Mutex::new(Tail::default()));
        let stderr = child.stderr.take().map(|e| read_lines(e, tail.clone()));
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let first = read_first_line(&mut stdout);
        let Some(pgid) = first.strip_prefix(PGID_PREFIX).and_then(|p| p.parse().ok()) else {
            return Err(start_failure(
                &*engine, child, stderr, &tail, command, &first,
            ));
        };
        let readers = [Some(read_lines(stdout, tail.clone())), stderr];
        let channel = Channel::new(child, readers.into_iter().flatten().collect());
        Ok(RemoteProcess {
            engine,
            command: command.into(),
            channel: Arc::new(Mutex::new(channel)),
            task: false,
            pgid,
            grace,
            tail,
            status: None,
            opened,
        })
    }

    /// One task of a job step that runs [`wrapper_line`] on several hosts over one
    /// `channel`: `tail` gets this task's lines, `pgid` is its group there, `engine` its
    /// host's. Stopping it closes the step's stdin, which stops every task.
    pub(super) fn from_task(
        engine: Arc<dyn Engine>,
        command: &str,
        channel: Arc<Mutex<Channel>>,
        tail: Arc<Mutex<Tail>>,
        pgid: i32,
        grace: Duration,
    ) -> RemoteProcess {
        RemoteProcess {
            engine,
            command: command.into(),
            channel,
            task: true,
            pgid,
            grace,
            tail,
            status: None,
            opened: Instant::now(),
        }
    }
}

/// Why a process group did not start: the engine did not reach the host, or the wrapper
/// failed there.
fn start_failure(
    engine: &dyn Engine,
    mut child: Child,
    stderr: Option<JoinHandle<()>>,
    tail: &Mutex<Tail>,
    command: &str,
    first: &str,
) -> RemoteError {
    let status = child.wait().ok().and_then(|s| s.code());
    if let Some(reader) = stderr {
        let _ = reader.join();
    }
    let words = {
        let tail = tail.lock().unwrap_or_else(|e| e.into_inner());
        last_lines(&tail.lines, 5)
    };
    if engine.is_unreachable(status) {
        return engine.unreachable(&words);
    }
    RemoteError::Command {
        host: engine.name().to_string(),
        command: command.into(),
        code: status,
        stderr: format!("its process group did not start (first line {first:?}): {words}"),
    }
}

fn read_first_line(stdout: &mut impl BufRead) -> String {
    let mut line = String::new();
    let _ = stdout.read_line(&mut line);
    line.trim_end().to_owned()
}

fn read_lines(stream: impl Read + Send + 'static, tail: Arc<Mutex<Tail>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines() {
            let Ok(line) = line else { break };
            tail.lock().unwrap_or_else(|e| e.into_inner()).push(line);
        }
    })
}

impl RemoteProcess {
    /// The remote process group id (also the pid of the command's first process).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The pid of the local end of its channel (`ssh`, `srun`, `sh`).
    pub fn channel_pid(&self) -> u32 {
        self.channel().child.id()
    }

    fn channel(&self) -> std::sync::MutexGuard<'_, Channel> {
        self.channel.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The command line as given to `spawn`.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The last lines the command (and ssh) wrote, stdout and stderr interleaved.
    pub fn output_tail(&self) -> Vec<String> {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.lines.iter().cloned().collect()
    }

    /// The last `n` lines of `output_tail`.
    pub fn last_output(&self, n: usize) -> Vec<String> {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let skip = tail.lines.len().saturating_sub(n);
        tail.lines.iter().skip(skip).cloned().collect()
    }

    /// How the command ended (`status`), followed by its last `n` lines joined with `sep`,
    /// unless the status quotes them already: a lost session ends with ssh's own words, which
    /// are said once.
    pub fn ending(&self, status: &RemoteStatus, n: usize, sep: &str) -> String {
        ending(status, &self.last_output(n), sep)
    }

    /// The status now, without waiting.
    pub fn try_status(&mut self) -> RemoteStatus {
        if let Some(status) = &self.status {
            return status.clone();
        }
        let exited = self
            .tail
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .exit_code;
        if self.task && exited.is_some() {
            return self.record_status();
        }
        if !self.channel().running() {
            return self.finish();
        }
        match self.engine.lost_since(self.opened) {
            Some(why) => self.give_up(&why),
            None => RemoteStatus::Running,
        }
    }

    /// Its host was found lost (`why`): the local end of the channel is killed and the
    /// process counts as lost, without waiting for the engine to notice by itself.
    fn give_up(&mut self, why: &str) -> RemoteStatus {
        self.channel().kill();
        let status = RemoteStatus::ConnectionLost(format!("{GIVEN_UP}{why}"));
        self.status = Some(status.clone());
        status
    }

    /// Waits up to `timeout` for the process to end; returns `Running` if it did not.
    pub fn wait_timeout(&mut self, timeout: Duration) -> RemoteStatus {
        let deadline = Instant::now() + timeout;
        loop {
            let status = self.try_status();
            if status != RemoteStatus::Running || Instant::now() >= deadline {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Ends the remote process group (its signal, then KILL after the grace time) and returns
    /// how the command ended. When the channel no longer answers, the engine kills the group
    /// over a new one and the local end is killed.
    pub fn stop(&mut self) -> RemoteStatus {
        if self.try_status() != RemoteStatus::Running {
            return self.try_status();
        }
        self.channel().close();
        let status = self.wait_timeout(self.grace + Duration::from_secs(3));
        if status != RemoteStatus::Running {
            return status;
        }
        let _ = self.engine.stop(self.pgid, "KILL");
        self.channel().kill();
        self.finish()
    }

    /// Records the final status once the local end of the channel has exited.
    fn finish(&mut self) -> RemoteStatus {
        self.channel().reap();
        self.record_status()
    }

    /// The final status from the exit line, or the channel's last words without one.
    fn record_status(&mut self) -> RemoteStatus {
        let tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        let status = match tail.exit_code {
            Some(code) if code > 128 => RemoteStatus::Killed(code - 128),
            Some(code) => RemoteStatus::Exited(code),
            None => RemoteStatus::ConnectionLost(last_lines(&tail.lines, 3)),
        };
        drop(tail);
        self.status = Some(status.clone());
        status
    }
}

/// `status`, then `lines` joined with `sep`; a lost session's status holds ssh's last words
/// already, which are said once.
fn ending(status: &RemoteStatus, lines: &[String], sep: &str) -> String {
    match status {
        RemoteStatus::ConnectionLost(_) => status.to_string(),
        _ if lines.is_empty() => status.to_string(),
        _ => format!("{status}{sep}{}", lines.join(sep)),
    }
}

fn last_lines(lines: &VecDeque<String>, n: usize) -> String {
    let skip = lines.len().saturating_sub(n);
    let text: Vec<&str> = lines.iter().skip(skip).map(String::as_str).collect();
    if text.is_empty() {
        "ssh ended without a word".into()
    } else {
        text.join(" | ")
    }
}

impl Drop for RemoteProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_and_the_exit_code() {
        let mut tail = Tail::default();
        for i in 0..TAIL_LINES + 5 {
            tail.push(format!("line {i}"));
        }
        tail.push(
            "Warning: Permanently added '10.0.0.2' (ED25519) to the list of known hosts.".into(),
        );
        tail.push(format!("{EXIT_PREFIX}137"));
        assert_eq!(tail.lines.len(), TAIL_LINES);
        assert_eq!(tail.lines.front().unwrap(), "line 5");
        assert_eq!(tail.exit_code, Some(137));
        assert_eq!(last_lines(&tail.lines, 2), "line 203 | line 204");
    }

    #[test]
    fn a_lost_session_says_ssh_s_words_once() {
        let words = "Connection to 10.213.2.2 closed by remote host.";
        let lines = vec![words.to_string()];
        let lost = RemoteStatus::ConnectionLost(last_lines(&lines.clone().into(), 3));
        let text = ending(&lost, &lines, " | ");
        assert_eq!(text.matches(words).count(), 1, "{text}");
        assert_eq!(
            text,
            format!("its ssh session ended (host down or unreachable?): {words}")
        );
        let exited = ending(&RemoteStatus::Exited(2), &["bad option".into()], " | ");
        assert_eq!(exited, "exited with status 2 | bad option");
        assert_eq!(
            ending(&RemoteStatus::Killed(9), &[], " | "),
            "killed by signal 9"
        );
    }

    /// The wrapper itself, run by a local sh: the group id comes first, the command's output
    /// and exit code follow, and closing stdin ends a long command.
    #[test]
    fn wrapper_reports_group_and_exit() {
        let dir = tempfile::tempdir().unwrap();
        // `keep_stdin`: hold the wrapper's stdin open until it exits, as an ssh session does.
        let run = |cmd: &str, keep_stdin: bool| {
            let mut child = std::process::Command::new("sh")
                .arg("-c")
                .arg(sh_c(WRAPPER, &[&dir.path().to_string_lossy(), cmd, "10"]))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let stdin = child.stdin.take();
            if !keep_stdin {
                drop(stdin);
            }
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            (child.wait().unwrap().code(), out)
        };
        let (code, out) = run("echo hi; exit 3", true);
        assert_eq!(code, Some(3));
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with(PGID_PREFIX), "{out}");
        assert_eq!(&lines[1..], ["hi", "stairbench-exit 3"]);
        // A closed stdin is the signal to stop: the watchdog ends the sleep with TERM.
        let started = Instant::now();
        let (code, out) = run("sleep 20", false);
        assert_eq!(code, Some(128 + 15), "{out}");
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
