//! Observing a server on another host: `stairbench observe` runs there (over a channel its
//! engine opens), attached before the load, told over its stdin when the window starts and
//! ends, and answers with the same observation the local observers make.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::server::RemoteTarget;
use crate::observe::step::{Observed, ServerExtras, StepObserver};
use crate::observe::Observation;
use crate::remote::engine::{HostLost, QUIET_BEFORE_CHECK};
use crate::remote::Engine;

/// Passes everything to `inner`, except a remote server's own figures, which come from its
/// host (a kvd target over several hosts: each rank's from its own).
pub struct HostObserver<O: StepObserver> {
    /// The local observers.
    pub inner: O,
    /// Some client group runs on another host: this machine's `lo` does not carry its load.
    pub remote_clients: bool,
    remote: Option<RemoteTarget>,
    /// One observer per remote process: the target's, then its further ranks'.
    running: Vec<Option<Running>>,
}

struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

/// What a remote observer answered: the observation and its metrics window, if it read one.
type Answer = Result<(Observation, Option<Value>), ObserverFailure>;

/// Why a remote observer gave no observation.
#[derive(Debug, thiserror::Error)]
enum ObserverFailure {
    /// It was not started.
    #[error("the remote observer did not start")]
    NotStarted,
    /// The step has no remote target to observe.
    #[error("no remote observer")]
    None,
    /// Its host was lost meanwhile.
    #[error(transparent)]
    Lost(#[from] HostLost),
    /// Its last line is not an observation.
    #[error("the remote observer answered {last:?}: {source}")]
    Answer {
        /// Its last line.
        last: String,
        /// What serde said.
        source: serde_json::Error,
    },
}

impl<O: StepObserver> HostObserver<O> {
    /// Wraps the local observers.
    pub fn new(inner: O) -> Self {
        HostObserver {
            inner,
            remote_clients: false,
            remote: None,
            running: Vec::new(),
        }
    }

    /// The remote processes observed: the target, then its further ranks.
    fn targets(&self) -> Vec<RemoteTarget> {
        let Some(main) = &self.remote else {
            return Vec::new();
        };
        std::iter::once(main.clone())
            .chain(main.ranks.iter().cloned())
            .collect()
    }

    /// Starts `stairbench observe` on each process's host, all at once, then waits for each
    /// one's "ready" (perf attached there: its start-up is over before the load starts).
    fn spawn_all(&mut self, server_cpus: &[usize]) {
        let targets = self.targets();
        let started: Vec<Option<Child>> = (targets.iter())
            .map(|t| Self::spawn(t, server_cpus))
            .collect();
        self.running = started
            .into_iter()
            .zip(&targets)
            .map(|(c, target)| {
                let mut child = c?;
                let stdin = child.stdin.take();
                let stdout = BufReader::new(child.stdout.take()?);
                let stdout = ready_of(&mut child, stdout, &*target.session.engine)?;
                Some(Running {
                    child,
                    stdin,
                    stdout,
                })
            })
            .collect();
    }

    fn spawn(target: &RemoteTarget, server_cpus: &[usize]) -> Option<Child> {
        let mut args = vec![
            "observe".to_string(),
            "--pid".into(),
            target.pid.to_string(),
        ];
        if !server_cpus.is_empty() {
            args.extend(["--server-cpus".into(), crate::cpuset::format(server_cpus)]);
        }
        if let Some(file) = &target.metrics {
            args.extend(["--metrics".into(), file.clone()]);
        }
        let engine = &target.session.engine;
        let line = engine.in_workdir(&target.session.command(&args));
        engine.open(&line, Stdio::null()).ok()
    }

    fn tell(&mut self, word: &str) {
        for stdin in self
            .running
            .iter_mut()
            .flatten()
            .filter_map(|r| r.stdin.as_mut())
        {
            let _ = writeln!(stdin, "{word}");
            let _ = stdin.flush();
        }
    }

    /// Each remote observer's answer, in the order of [`Self::targets`].
    fn remote_observations(&mut self) -> Vec<Answer> {
        self.tell("stop");
        let running = std::mem::take(&mut self.running);
        running
            .into_iter()
            .zip(self.targets())
            .map(|(r, target)| {
                let running = r.ok_or(ObserverFailure::NotStarted)?;
                let text = answer_of(running, &*target.session.engine)?;
                let last = text.lines().last().unwrap_or("");
                let bad = |source| ObserverFailure::Answer {
                    last: last.to_string(),
                    source,
                };
                let mut value: Value = serde_json::from_str(last).map_err(bad)?;
                // Its metrics window (the only metrics file it was given), beside the observation.
                let metrics = (value.as_object_mut())
                    .and_then(|m| m.remove("target_metrics"))
                    .and_then(|m| m.get(0).cloned());
                Ok((serde_json::from_value(value).map_err(bad)?, metrics))
            })
            .collect()
    }
}

impl<O: StepObserver> StepObserver for HostObserver<O> {
    fn server_extras(&mut self, extras: &ServerExtras) {
        // Only this module's launcher puts a RemoteTarget there (observe holds it opaque).
        self.remote = extras
            .remote
            .as_ref()
            .and_then(|r| r.downcast_ref::<RemoteTarget>())
            .cloned();
        self.inner.server_extras(extras);
    }

    fn prepare(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        match &self.remote {
            Some(_) => {
                self.spawn_all(server_cpus);
                self.inner.prepare(None, &[], client_cpus);
            }
            None => self.inner.prepare(server_pid, server_cpus, client_cpus),
        }
    }

    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        if self.remote.is_none() {
            return self.inner.start(server_pid, server_cpus, client_cpus);
        }
        if self.running.is_empty() {
            self.spawn_all(server_cpus);
        }
        self.tell("start");
        self.inner.start(None, &[], client_cpus);
    }

    fn end_window(&mut self) {
        if self.remote.is_some() {
            self.tell("stop");
        }
        self.inner.end_window();
    }

    fn finish(&mut self, requests: u64) -> Observed {
        if self.remote.is_none() {
            let mut observed = self.inner.finish(requests);
            if self.remote_clients {
                loopback_unavailable(&mut observed, "client groups on other hosts");
            }
            return observed;
        }
        let targets = self.targets();
        let mut answers = self.remote_observations().into_iter();
        let main = answers.next().unwrap_or(Err(ObserverFailure::None));
        let mut observed = self.inner.finish(requests);
        let mut metrics = Map::new();
        take_metrics(&mut metrics, &targets[0], &main);
        server_figures(&mut observed, main, &targets[0], requests, targets.len());
        let mut ranks = Map::new();
        for (t, answer) in targets[1..].iter().zip(answers) {
            take_metrics(&mut metrics, t, &answer);
            ranks.insert(t.label.clone(), rank_figures(answer, t));
        }
        extend_object(&mut observed.derived, "observed", ranks);
        extend_object(&mut observed.derived, "target_metrics", metrics);
        observed
    }
}

/// The observer's stdout once it said "ready" (or ended); `None` when its host was found lost
/// meanwhile (checked as in [`answer_of`]; the channel is then given up).
fn ready_of(
    child: &mut Child,
    mut stdout: BufReader<ChildStdout>,
    engine: &dyn Engine,
) -> Option<BufReader<ChildStdout>> {
    let reader = std::thread::spawn(move || {
        let mut ready = String::new();
        let _ = stdout.read_line(&mut ready);
        stdout
    });
    let mut quiet = QUIET_BEFORE_CHECK;
    let mut check_at = Instant::now() + quiet;
    while !reader.is_finished() {
        if Instant::now() >= check_at {
            if engine.answers().is_err() {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                return None;
            }
            quiet *= 2;
            check_at = Instant::now() + quiet;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    reader.join().ok()
}

/// A remote observer's output once it has ended. When it stays quiet past
/// [`QUIET_BEFORE_CHECK`] or ends without an answer, its host is checked: a host found lost
/// is the error (the observer's channel is given up, and the engine gives up the others
/// opened there before, the server's among them).
fn answer_of(running: Running, engine: &dyn Engine) -> Result<String, HostLost> {
    let Running {
        mut child,
        stdin,
        mut stdout,
    } = running;
    drop(stdin);
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        text
    });
    let mut quiet = QUIET_BEFORE_CHECK;
    let mut check_at = Instant::now() + quiet;
    while let Ok(None) = child.try_wait() {
        if Instant::now() >= check_at {
            if let Err(why) = engine.answers() {
                let _ = child.kill();
                let _ = child.wait();
                let _ = reader.join();
                return Err(why);
            }
            quiet *= 2;
            check_at = Instant::now() + quiet;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = reader.join().unwrap_or_default();
    if !text.lines().any(|l| l.starts_with('{')) {
        engine.answers()?;
    }
    Ok(text)
}

/// A process's metrics window, under its label, when it has a metrics file.
fn take_metrics(out: &mut Map<String, Value>, target: &RemoteTarget, answer: &Answer) {
    if target.metrics.is_none() {
        return;
    }
    let value = match answer {
        Ok((_, Some(m))) => m.clone(),
        Ok((_, None)) => json!({ "note": "the remote observer read no metrics" }),
        Err(why) => json!({ "note": why.to_string() }),
    };
    out.insert(target.label.clone(), value);
}

/// The step's `server` figures from the target's own host (with `ranks` processes, rank 0's:
/// the other ranks' are under `observed`).
fn server_figures(
    observed: &mut Observed,
    answer: Answer,
    target: &RemoteTarget,
    requests: u64,
    ranks: usize,
) {
    let local_cpu_s = observed
        .derived
        .get("observer_cpu_s")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let host = target.session.name().to_string();
    match answer {
        Ok((mut obs, _)) => {
            // Its `lo` carries none of the load's traffic, which reaches it over the network.
            obs.loopback = None;
            obs.notes.push(LOOPBACK_NOTE.into());
            if ranks > 1 {
                obs.notes.push(format!(
                    "server: rank 0's process tree on host {host}; the other {} rank(s) are under `observed`",
                    ranks - 1
                ));
            }
            if let Ok(Value::Object(per)) =
                serde_json::to_value(crate::observe::per_request(&obs, requests))
            {
                observed.derived.extend(per);
            }
            observed.derived.insert(
                "observer_cpu_s".into(),
                json!(local_cpu_s + obs.observer_cpu_s),
            );
            let mut server = serde_json::to_value(&obs).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut server {
                m.insert("host".into(), json!(host));
            }
            observed.server = server;
        }
        Err(why) => {
            observed.server = json!({ "host": host, "notes": [why.to_string()] });
        }
    }
}

/// A further rank's observation as `observed.<label>` holds it, with its host.
fn rank_figures(answer: Answer, target: &RemoteTarget) -> Value {
    let host = target.session.name();
    match answer {
        Ok((obs, _)) => {
            let mut v = serde_json::to_value(&obs).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("host".into(), json!(host));
            }
            v
        }
        Err(why) => json!({ "host": host, "note": why.to_string() }),
    }
}

/// Adds `entries` to the object `key` of `derived` (created when missing).
fn extend_object(derived: &mut Map<String, Value>, key: &str, entries: Map<String, Value>) {
    if entries.is_empty() {
        return;
    }
    match derived.get_mut(key) {
        Some(Value::Object(m)) => m.extend(entries),
        _ => {
            derived.insert(key.into(), Value::Object(entries));
        }
    }
}

/// Why a step over other hosts has no loopback packet counts.
const LOOPBACK_NOTE: &str = "loopback packets unavailable: the load crosses the network \
                             between hosts, not `lo`";

/// Marks the loopback counters and packets per request unavailable (null, never 0): the
/// load's traffic went over the network (`why`), not over this machine's `lo`.
fn loopback_unavailable(observed: &mut Observed, why: &str) {
    observed.derived.insert("pkts_per_req".into(), Value::Null);
    if let Value::Object(m) = &mut observed.server {
        m.insert("loopback".into(), Value::Null);
        let note = json!(format!("{LOOPBACK_NOTE} ({why})"));
        match m.get_mut("notes") {
            Some(Value::Array(notes)) => notes.push(note),
            _ => {
                m.insert("notes".into(), json!([note]));
            }
        }
    }
}
