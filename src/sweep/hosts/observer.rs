//! Observing a server on another host: `stairbench observe` runs there over ssh, attached
//! before the load, told over its stdin when the window starts and ends, and answers with the
//! same observation the local observers make.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Stdio};

use serde_json::{json, Value};

use super::server::RemoteTarget;
use crate::observe::step::{Observed, ServerExtras, StepObserver};
use crate::observe::Observation;

/// Passes everything to `inner`, except a remote server's own figures, which come from its
/// host.
pub struct HostObserver<O: StepObserver> {
    /// The local observers.
    pub inner: O,
    /// Some client group runs on another host: this machine's `lo` does not carry its load.
    pub remote_clients: bool,
    remote: Option<RemoteTarget>,
    running: Option<Running>,
}

struct Running {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl<O: StepObserver> HostObserver<O> {
    /// Wraps the local observers.
    pub fn new(inner: O) -> Self {
        HostObserver {
            inner,
            remote_clients: false,
            remote: None,
            running: None,
        }
    }

    fn spawn(target: &RemoteTarget, server_cpus: &[usize]) -> Option<Running> {
        let mut args = vec![
            "observe".to_string(),
            "--pid".into(),
            target.pid.to_string(),
        ];
        if !server_cpus.is_empty() {
            args.extend(["--server-cpus".into(), crate::cpuset::format(server_cpus)]);
        }
        let line = target
            .session
            .remote
            .in_workdir(&target.session.command(&args));
        let mut child = target
            .session
            .remote
            .spawn_piped(&line, Stdio::null())
            .ok()?;
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take()?);
        // "ready": perf is attached there, its start-up is over before the load starts.
        let mut ready = String::new();
        let _ = stdout.read_line(&mut ready);
        Some(Running {
            child,
            stdin,
            stdout,
        })
    }

    fn tell(&mut self, word: &str) {
        if let Some(stdin) = self.running.as_mut().and_then(|r| r.stdin.as_mut()) {
            let _ = writeln!(stdin, "{word}");
            let _ = stdin.flush();
        }
    }

    fn remote_observation(&mut self) -> Result<Observation, String> {
        self.tell("stop");
        let mut running = self
            .running
            .take()
            .ok_or("the remote observer did not start")?;
        drop(running.stdin.take());
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut running.stdout, &mut text);
        let _ = running.child.wait();
        let last = text.lines().last().unwrap_or("");
        serde_json::from_str(last)
            .map_err(|e| format!("the remote observer answered {last:?}: {e}"))
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
            Some(target) => {
                self.running = Self::spawn(target, server_cpus);
                self.inner.prepare(None, &[], client_cpus);
            }
            None => self.inner.prepare(server_pid, server_cpus, client_cpus),
        }
    }

    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        if self.remote.is_none() {
            return self.inner.start(server_pid, server_cpus, client_cpus);
        }
        if self.running.is_none() {
            if let Some(target) = self.remote.clone() {
                self.running = Self::spawn(&target, server_cpus);
            }
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
        let remote = self.remote_observation();
        let mut observed = self.inner.finish(requests);
        let local_cpu_s = observed
            .derived
            .get("observer_cpu_s")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        let host = self.remote.as_ref().map(|r| r.session.name().to_string());
        match remote {
            Ok(mut obs) => {
                // Its `lo` carries none of the load's traffic, which reaches it over the network.
                obs.loopback = None;
                obs.notes.push(LOOPBACK_NOTE.into());
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
                observed.server = json!({ "host": host, "notes": [why] });
            }
        }
        observed
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
