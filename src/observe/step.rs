//! What the step loop measures beside the load, behind [`StepObserver`]: the
//! [`super::Observer`] in real runs (the server's process tree, per-core busy %, perf
//! counters, loopback packets, and per-request figures as the Tomcat/rxNetty study's benchreport columns),
//! nothing in the fake-driver tests.

use std::any::Any;
use std::sync::Arc;

use super::metrics::MetricsSource;

/// Figures of one measured window, in the step record's types.
pub use crate::record::figures::Observed;

/// What the running server offers beside its own pid: its instances and metrics sources.
#[derive(Debug, Clone, Default)]
pub struct ServerExtras {
    /// Each instance of a split target (empty for a single one).
    pub instances: Vec<InstanceInfo>,
    /// Metrics sources, by label (the target's name, or `name.iK` for an instance).
    pub metrics: Vec<(String, MetricsSource)>,
    /// The server runs on another host: observed there, not here. What reaching that host
    /// takes belongs to the caller (sweep's hosts), so it is held opaque here; the caller's
    /// own observer downcasts it.
    pub remote: Option<RemoteServer>,
}

/// A server on another host, as its launcher describes it to its observer (see
/// [`ServerExtras::remote`]).
pub type RemoteServer = Arc<dyn Any + Send + Sync>;

/// One instance of a split target.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceInfo {
    /// Label in the results (`name.iK`).
    pub label: String,
    /// Its process.
    pub pid: Option<i32>,
    /// Its port.
    pub port: u16,
    /// Its CPUs.
    pub cpus: Vec<usize>,
}

/// Watches one step's measured window.
pub trait StepObserver {
    /// Told, before each step, what the server offers beyond its pid (instances, metrics).
    fn server_extras(&mut self, _extras: &ServerExtras) {}
    /// Gets ready before the load starts (costly set-up such as attaching perf, so that it
    /// does not fall inside the measured window). Optional: `start` works without it.
    fn prepare(
        &mut self,
        _server_pid: Option<i32>,
        _server_cpus: &[usize],
        _client_cpus: &[usize],
    ) {
    }
    /// Starts watching (just before the load's measured window).
    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]);
    /// The window ended before the load's results are in (client groups on other hosts): stop
    /// counting now; `finish` comes later. Optional.
    fn end_window(&mut self) {}
    /// Stops watching; `requests` completed in the window turn totals into per-request figures.
    fn finish(&mut self, requests: u64) -> Observed;
}

/// The [`super::Observer`]: /proc, `perf stat` (software and, where the machine has
/// them, hardware counters), loopback packets; derived per-request figures.
#[derive(Debug, Default)]
pub struct FullObserver {
    running: Option<crate::observe::Observer>,
    /// What `end_window` measured, waiting for `finish`.
    ended: Option<crate::observe::Observation>,
}

impl StepObserver for FullObserver {
    fn prepare(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        self.running = Some(crate::observe::Observer::prepare(
            server_pid,
            server_cpus,
            client_cpus,
        ));
    }

    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        match &mut self.running {
            Some(prepared) => prepared.begin(),
            None => {
                self.running = Some(crate::observe::Observer::start(
                    server_pid,
                    server_cpus,
                    client_cpus,
                ))
            }
        }
    }

    fn end_window(&mut self) {
        if let Some(running) = self.running.take() {
            self.ended = Some(running.finish());
        }
    }

    fn finish(&mut self, requests: u64) -> Observed {
        let obs = match (self.ended.take(), self.running.take()) {
            (Some(obs), _) => obs,
            (None, Some(running)) => running.finish(),
            (None, None) => return Observed::default(),
        };
        Observed {
            per_request: crate::observe::per_request(&obs, requests),
            observer_cpu_s: Some(obs.observer_cpu_s),
            server: Some(obs.into()),
            ..Observed::default()
        }
    }
}

/// Observes nothing (for the fake-driver tests and for targets without a pid).
#[derive(Debug, Default)]
pub struct NullObserver;

impl StepObserver for NullObserver {
    fn start(&mut self, _: Option<i32>, _: &[usize], _: &[usize]) {}
    fn finish(&mut self, _: u64) -> Observed {
        Observed::default()
    }
}
