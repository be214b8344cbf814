//! What is watched beside the server: `[[observe]]` processes (found by pid file, by command
//! name, or by a command that prints pids), the instances of a split target, and the
//! target's own metrics. [`ExtraObserver`] wraps the step loop's observer and adds
//! `observed` and `target_metrics` to the step.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::metrics::{window_difference, MetricsError, Reading};
use super::step::{Observed, ServerExtras, StepObserver};
use super::TreeUsage;
use crate::record::figures::{ForeignJson, ServerFigures, Unavailable};

/// How an observed process is found, at the start of each step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessSelector {
    /// A pid file.
    PidFile(PathBuf),
    /// Processes whose /proc/PID/comm equals this.
    Command(String),
    /// Pids printed by `sh -c`.
    PidsCommand(String),
}

/// A checked `[[observe]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObserveEntry {
    /// Name in the results.
    pub name: String,
    /// How it is found.
    pub selector: ProcessSelector,
}

/// Why an observed process (an `[[observe]]` entry or an instance) has no pid to watch.
#[derive(Debug, thiserror::Error)]
pub enum PidsError {
    /// Its pid file cannot be read.
    #[error("cannot read the pid file {}: {source}", path.display())]
    PidFile {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Its `pids` command cannot run.
    #[error("cannot run `{cmd}`: {source}")]
    Command {
        /// The command.
        cmd: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// None of the pids it named is running.
    #[error("no running process for {0}")]
    NoneRunning(String),
    /// A split target's instance whose pid is unknown.
    #[error("the instance has no process id")]
    InstanceNoPid,
}

impl ObserveEntry {
    /// The pids it names now, or why there are none.
    pub fn pids(&self) -> Result<Vec<i32>, PidsError> {
        let pids = match &self.selector {
            ProcessSelector::PidFile(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| PidsError::PidFile {
                    path: path.clone(),
                    source,
                })?;
                parse_pids(&text)
            }
            ProcessSelector::Command(name) => pids_by_comm(name),
            ProcessSelector::PidsCommand(cmd) => {
                let out = std::process::Command::new("sh")
                    .args(["-c", cmd])
                    .output()
                    .map_err(|source| PidsError::Command {
                        cmd: cmd.clone(),
                        source,
                    })?;
                parse_pids(&String::from_utf8_lossy(&out.stdout))
            }
        };
        let alive: Vec<i32> = pids
            .into_iter()
            .filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
            .collect();
        if alive.is_empty() {
            return Err(PidsError::NoneRunning(self.describe()));
        }
        Ok(alive)
    }

    fn describe(&self) -> String {
        match &self.selector {
            ProcessSelector::PidFile(p) => format!("pid file {}", p.display()),
            ProcessSelector::Command(c) => format!("command name {c:?}"),
            ProcessSelector::PidsCommand(c) => format!("`{c}`"),
        }
    }
}

fn parse_pids(text: &str) -> Vec<i32> {
    text.split_whitespace()
        .filter_map(|w| w.parse::<i32>().ok())
        .filter(|p| *p > 0)
        .collect()
}

/// Processes whose /proc/PID/comm is `name` (the kernel keeps its first 15 bytes).
pub fn pids_by_comm(name: &str) -> Vec<i32> {
    let short: String = name.chars().take(15).collect();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim_end_matches('\n') == short)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// The step loop's observer plus the `[[observe]]` processes, the instances and the
/// target's metrics.
pub struct ExtraObserver<O: StepObserver> {
    /// The observer of the server and the CPUs.
    pub inner: O,
    /// The `[[observe]]` entries.
    pub entries: Vec<ObserveEntry>,
    extras: ServerExtras,
    running: Vec<(String, Result<super::Observer, PidsError>)>,
    before: Vec<(String, Result<Reading, MetricsError>)>,
    /// The metrics read when the window ended (None until it has; `finish` reads them then).
    after: Option<Vec<Result<Reading, MetricsError>>>,
    /// When the window began (the metrics' staleness is told against it).
    began: std::time::SystemTime,
}

impl<O: StepObserver> ExtraObserver<O> {
    /// Wraps `inner`.
    pub fn new(inner: O, entries: Vec<ObserveEntry>) -> Self {
        ExtraObserver {
            inner,
            entries,
            extras: ServerExtras::default(),
            running: Vec::new(),
            before: Vec::new(),
            after: None,
            began: std::time::SystemTime::now(),
        }
    }

    fn start_processes(&mut self) {
        self.running.clear();
        for e in &self.entries {
            match e.pids() {
                Ok(pids) if pids.len() == 1 => {
                    self.running
                        .push((e.name.clone(), Ok(observer_of(pids[0]))));
                }
                Ok(pids) => {
                    for pid in pids {
                        self.running
                            .push((format!("{}:{pid}", e.name), Ok(observer_of(pid))));
                    }
                }
                Err(why) => self.running.push((e.name.clone(), Err(why))),
            }
        }
        for i in &self.extras.instances {
            let obs = i.pid.map(observer_of).ok_or(PidsError::InstanceNoPid);
            self.running.push((i.label.clone(), obs));
        }
    }

    /// The processes' figures by name, and the process trees of a split target's instances.
    fn finish_processes(&mut self) -> (BTreeMap<String, ServerFigures>, Vec<TreeUsage>) {
        let mut trees = Vec::new();
        let mut out = BTreeMap::new();
        for (name, obs) in self.running.drain(..) {
            let figures = match obs {
                Ok(o) => {
                    let o = o.finish();
                    let instance = self.extras.instances.iter().any(|i| i.label == name);
                    if let (true, Some(t)) = (instance, &o.server) {
                        trees.push(t.clone());
                    }
                    o.into()
                }
                Err(why) => ServerFigures::Unavailable(Unavailable {
                    note: Some(why.to_string()),
                    ..Unavailable::default()
                }),
            };
            out.insert(name, figures);
        }
        (out, trees)
    }

    /// The end readings that need no wait (see [`MetricsSource::snapshot_now`]); None for a
    /// file that must wait for its rewrite.
    fn end_readings_now(&self) -> Vec<Option<Result<Reading, MetricsError>>> {
        (self.extras.metrics.iter().zip(&self.before))
            .map(|((_, source), (_, start))| source.snapshot_now(start.as_ref().ok()))
            .collect()
    }

    /// The end readings, those `now` lacks waited for as at the start.
    fn end_readings(
        &self,
        now: Vec<Option<Result<Reading, MetricsError>>>,
    ) -> Vec<Result<Reading, MetricsError>> {
        let sources = self.extras.metrics.iter().map(|(_, s)| s);
        (sources.zip(now))
            .map(|(source, read)| read.unwrap_or_else(|| source.snapshot_fresh()))
            .collect()
    }

    fn finish_metrics(&mut self) -> BTreeMap<String, ForeignJson> {
        let after = match self.after.take() {
            Some(after) => after,
            None => self.end_readings(self.end_readings_now()),
        };
        let before = std::mem::take(&mut self.before);
        let mut out = BTreeMap::new();
        for (((label, _), (_, start)), end) in self.extras.metrics.iter().zip(before).zip(after) {
            let value = window_difference(start.as_ref(), end.as_ref(), self.began);
            out.insert(label.clone(), ForeignJson::from_value(value));
        }
        out
    }
}

/// A split target has no single server process: its `server` figures (and the per-request
/// ones derived from them) become the sum of its instances' process trees.
fn sum_instances(observed: &mut Observed, trees: &[TreeUsage], requests: u64) {
    let Some(obs) = observed.observation_mut() else {
        return;
    };
    if obs.server.is_some() {
        return;
    }
    let mut total = trees[0].clone();
    for t in &trees[1..] {
        total.processes += t.processes;
        total.threads += t.threads;
        total.user_s += t.user_s;
        total.sys_s += t.sys_s;
        total.voluntary_cs += t.voluntary_cs;
        total.involuntary_cs += t.involuntary_cs;
        total.minor_faults += t.minor_faults;
        total.major_faults += t.major_faults;
    }
    obs.server = Some(total);
    obs.notes.push(format!(
        "server: the sum of {} instances' process trees (pid is the first one's; see `observed`)",
        trees.len()
    ));
    observed.per_request = super::per_request(obs, requests);
}

fn observer_of(pid: i32) -> super::Observer {
    super::Observer::start(Some(pid), &[], &[])
}

impl<O: StepObserver> StepObserver for ExtraObserver<O> {
    fn server_extras(&mut self, extras: &ServerExtras) {
        self.extras = extras.clone();
    }

    fn prepare(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        self.inner.prepare(server_pid, server_cpus, client_cpus);
    }

    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        self.began = std::time::SystemTime::now();
        self.after = None;
        self.inner.start(server_pid, server_cpus, client_cpus);
        self.start_processes();
        // Last: waiting for a metrics file's rewrite must not delay the other observers.
        self.before = self
            .extras
            .metrics
            .iter()
            .map(|(label, s)| (label.clone(), s.snapshot_fresh()))
            .collect();
    }

    fn end_window(&mut self) {
        // First the readings that need no wait: the load stops now, and the other observers'
        // ends take tens of ms, which a reading after them would count as the target's idle
        // time (memcached's: 3% of a 1 s window).
        let now = self.end_readings_now();
        self.inner.end_window();
        // Then, as at the start, the ones that wait for a rewrite.
        self.after = Some(self.end_readings(now));
    }

    fn finish(&mut self, requests: u64) -> Observed {
        let mut observed = self.inner.finish(requests);
        let (processes, trees) = self.finish_processes();
        if !trees.is_empty() {
            sum_instances(&mut observed, &trees, requests);
        }
        observed.observed.extend(processes);
        observed.target_metrics.extend(self.finish_metrics());
        observed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_read_from_text() {
        assert_eq!(parse_pids("12\n 34 x -5\n"), vec![12, 34]);
    }

    #[test]
    fn a_missing_process_is_a_reason() {
        let e = ObserveEntry {
            name: "x".into(),
            selector: ProcessSelector::Command("no-such-comm-q".into()),
        };
        assert!(e
            .pids()
            .unwrap_err()
            .to_string()
            .contains("no running process"));
    }
}
