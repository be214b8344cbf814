//! Observing a server on another host: `stairbench observe` runs there (over a channel its
//! engine opens), attached before the load, told over its stdin when the window starts and
//! ends, and answers with the same observation the local observers make.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use std::collections::BTreeMap;

use super::server::RemoteTarget;
use crate::observe::answer::{AnswerError, ObserveAnswer};
use crate::observe::step::{Observed, ServerExtras, StepObserver};
use crate::record::figures::{ForeignJson, HostObservation, ServerFigures, Unavailable};
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

/// What a remote observer answered: the observation and its metrics windows.
type Answer = Result<ObserveAnswer, ObserverFailure>;

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
    /// Its last line is not an observation, or lacks or mistypes a field of one.
    #[error("the remote observer on host {host}: {source}")]
    Answer {
        /// The host it ran on.
        host: String,
        /// What is wrong with its answer.
        source: AnswerError,
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
                read_answer(target.session.name(), text.lines().last().unwrap_or(""))
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
        let mut metrics = BTreeMap::new();
        take_metrics(&mut metrics, &targets[0], &main);
        let host = targets[0].session.name().to_string();
        server_figures(&mut observed, main, host, requests, targets.len());
        for (t, answer) in targets[1..].iter().zip(answers) {
            take_metrics(&mut metrics, t, &answer);
            (observed.observed).insert(t.label.clone(), rank_figures(answer, t));
        }
        observed.target_metrics.extend(metrics);
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

/// A remote observer's answer line, read strictly: a missing, renamed or malformed field is
/// an error naming `host` and the field.
fn read_answer(host: &str, line: &str) -> Answer {
    ObserveAnswer::read(line).map_err(|source| ObserverFailure::Answer {
        host: host.to_string(),
        source,
    })
}

/// A process's metrics window (the only metrics file its observer was given), under its
/// label, when it has a metrics file.
fn take_metrics(out: &mut BTreeMap<String, ForeignJson>, target: &RemoteTarget, answer: &Answer) {
    if target.metrics.is_none() {
        return;
    }
    let window = match answer {
        Ok(a) => (a.target_metrics.first().cloned())
            .unwrap_or_else(|| ForeignJson::note("the remote observer read no metrics")),
        Err(why) => ForeignJson::note(why.to_string()),
    };
    out.insert(target.label.clone(), window);
}

/// The step's `server` figures from the target's own `host` (with `ranks` processes, rank 0's:
/// the other ranks' are under `observed`). Without them, no per-request figure either: the
/// local ones would count this machine's `lo`, which the load does not cross.
fn server_figures(
    observed: &mut Observed,
    answer: Answer,
    host: String,
    requests: u64,
    ranks: usize,
) {
    let mut obs = match answer {
        Ok(answer) => answer.observation,
        Err(why) => {
            observed.per_request = Default::default();
            observed.server = Some(ServerFigures::Unavailable(Unavailable {
                host: Some(host),
                notes: vec![why.to_string()],
                note: None,
            }));
            return;
        }
    };
    // Its `lo` carries none of the load's traffic, which reaches it over the network.
    obs.loopback = None;
    obs.notes.push(LOOPBACK_NOTE.into());
    if ranks > 1 {
        obs.notes.push(format!(
            "server: rank 0's process tree on host {host}; the other {} rank(s) are under `observed`",
            ranks - 1
        ));
    }
    observed.per_request = crate::observe::per_request(&obs, requests);
    let local_cpu_s = observed.observer_cpu_s.unwrap_or(0.0);
    observed.observer_cpu_s = Some(local_cpu_s + obs.observer_cpu_s);
    observed.server = Some(on_host(obs, host));
}

/// An observation made on `host`.
fn on_host(observation: crate::observe::Observation, host: String) -> ServerFigures {
    ServerFigures::Observed(Box::new(HostObservation {
        host: Some(host),
        observation,
    }))
}

/// A further rank's observation as `observed.<label>` holds it, with its host.
fn rank_figures(answer: Answer, target: &RemoteTarget) -> ServerFigures {
    let host = target.session.name().to_string();
    match answer {
        Ok(answer) => on_host(answer.observation, host),
        Err(why) => ServerFigures::Unavailable(Unavailable {
            host: Some(host),
            note: Some(why.to_string()),
            ..Unavailable::default()
        }),
    }
}

/// Why a step over other hosts has no loopback packet counts.
const LOOPBACK_NOTE: &str = "loopback packets unavailable: the load crosses the network \
                             between hosts, not `lo`";

/// Marks the loopback counters and packets per request unavailable (null, never 0): the
/// load's traffic went over the network (`why`), not over this machine's `lo`.
fn loopback_unavailable(observed: &mut Observed, why: &str) {
    observed.per_request.pkts_per_req = None;
    if let Some(obs) = observed.observation_mut() {
        obs.loopback = None;
        obs.notes.push(format!("{LOOPBACK_NOTE} ({why})"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::observed::PerRequest;

    fn answer_line() -> serde_json::Value {
        let (observation, _) = crate::record::observed::tests::full();
        let answer = ObserveAnswer {
            observation,
            ..ObserveAnswer::default()
        };
        serde_json::from_str(&answer.to_line().unwrap()).unwrap()
    }

    /// Both ends run the same binary: a field the answer lacks or names otherwise is a
    /// mismatch to report, with the host and the field, not a figure defaulted to 0 or null.
    #[test]
    fn a_remote_observation_missing_or_renaming_a_field_is_an_error_naming_host_and_field() {
        let line = answer_line();
        assert!(read_answer("b", &line.to_string()).is_ok());
        let mut lacking = line.clone();
        lacking["server"].as_object_mut().unwrap().remove("user_s");
        // The tolerant reading old run directories need (and the one this replaced) takes it,
        // its CPU a silent 0.
        let tolerant: crate::observe::Observation =
            serde_json::from_value(lacking.clone()).unwrap();
        assert_eq!(tolerant.server.unwrap().user_s, 0.0);
        let err = read_answer("b", &lacking.to_string())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the remote observer on host b: its answer lacks `server.user_s`"
        );
        let mut renamed = line;
        let m = renamed.as_object_mut().unwrap();
        let window = m.remove("window_s").unwrap();
        m.insert("window_secs".into(), window);
        let err = read_answer("b", &renamed.to_string())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "the remote observer on host b: its answer lacks `window_s`"
        );
    }

    /// The local observers' figures with the server elsewhere: no server tree, and `lo`'s
    /// packets (which the load did not cross).
    fn local_only() -> Observed {
        let (mut obs, per) = crate::record::observed::tests::full();
        obs.server = None;
        Observed {
            server: Some(obs.into()),
            per_request: per,
            observer_cpu_s: Some(0.1),
            ..Observed::default()
        }
    }

    /// The server's host answers: its figures, with the host, and the per-request ones
    /// from them; the observers' CPU is both hosts'.
    #[test]
    fn a_remote_observation_becomes_the_steps_server_figures() {
        let mut observed = local_only();
        let answer = read_answer("b", &answer_line().to_string());
        server_figures(&mut observed, answer, "b".into(), 100, 1);
        let json = serde_json::to_value(observed.server.as_ref().unwrap()).unwrap();
        assert_eq!(json["host"], "b");
        assert_eq!(json["server"]["user_s"], 1.0);
        assert!(json["loopback"].is_null(), "{json}");
        assert_eq!(observed.per_request.cpu_us_per_req.user, Some(1e4));
        assert_eq!(observed.per_request.pkts_per_req, None);
        assert!((observed.observer_cpu_s.unwrap() - 0.11).abs() < 1e-9);
    }

    /// A host whose observer failed gives no server figures and no per-request ones: the
    /// local observers' would count this machine's `lo`, which the load did not cross.
    #[test]
    fn a_failed_remote_observer_leaves_no_figure_behind() {
        let mut observed = local_only();
        let answer = read_answer("b", "perf: not permitted");
        server_figures(&mut observed, answer, "b".into(), 100, 1);
        assert_eq!(observed.per_request, PerRequest::default());
        let server = observed.server.as_ref().unwrap();
        assert_eq!(server.observation(), None);
        let note = server.notes()[0];
        assert!(
            note.starts_with("the remote observer on host b: answered \"perf"),
            "{note}"
        );
    }

    #[test]
    fn loopback_figures_of_a_load_from_other_hosts_are_unavailable() {
        let mut observed = local_only();
        loopback_unavailable(&mut observed, "client groups on other hosts");
        assert_eq!(observed.per_request.pkts_per_req, None);
        let obs = observed.observation_mut().unwrap();
        assert_eq!(obs.loopback, None);
        assert!(
            obs.notes.last().unwrap().contains("client groups"),
            "{:?}",
            obs.notes
        );
    }
}
