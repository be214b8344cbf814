//! The daemon's figures: counters, gauges and phase histograms kept by the daemon thread
//! and handed over every [`PUBLISH_EVERY`], and the `--metrics FILE` writer.
//!
//! The file is `serve msgr`'s (`threads.<name>.{busy_ns, loops, ops}`) plus `counters`
//! (totals since the start), `gauges` (values now) and `histograms` (name → the histogram
//! since the start, ns, V2-deflate + base64), which the target-metrics reader turns into the
//! measured window's own histogram.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::serve::stats::{metrics_json, write_json, ThreadStat};

/// How often the daemon hands its figures to the writer.
pub const PUBLISH_EVERY: Duration = Duration::from_millis(20);
/// How often the metrics file is rewritten.
pub const WRITE_EVERY: Duration = Duration::from_millis(200);

/// The phase histograms' names (and the ping-pong at start, [`super::calibrate`]), in the order of [`Phases`]' fields.
pub const PHASES: [&str; 5] = [
    "rtt",
    "call_to_flush",
    "flush_to_cb",
    "incoming_turnaround",
    "ping_pong",
];

/// Totals since the start.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Counters {
    /// Turns of the poll loop.
    pub loops: u64,
    /// Requests taken from the client slots.
    pub shm_requests: u64,
    /// Of those, answered from this rank's table.
    pub local: u64,
    /// Of those, forwarded to their owner.
    pub remote: u64,
    /// Forwarded requests answered by their owner.
    pub remote_done: u64,
    /// GETs of a key never SET (local or as the owner): misses, not errors.
    pub misses: u64,
    /// Requests from peers answered by this rank.
    pub incoming: u64,
    /// Writes to the peer connections.
    pub flushes: u64,
    /// Requests answered `peer_down` (their owner had failed).
    pub peer_down: u64,
    /// Requests refused as malformed (no key number, key out of range, unknown op).
    pub bad_requests: u64,
    /// Peers that failed (closed, reset, or sent a malformed frame).
    pub peer_failures: u64,
    /// Sum over loops of the remote requests in flight (÷ loops: the mean in flight).
    pub inflight_sum: u64,
}

/// Values now.
#[derive(Debug, Default, Clone, Copy, serde::Serialize)]
pub struct Gauges {
    /// Remote requests in flight.
    pub inflight: u64,
    /// Peers connected.
    pub peers_up: u64,
    /// Ranks in all (this one included).
    pub ranks: u64,
    /// This daemon's rank.
    pub rank: u64,
}

/// The four phase histograms and the ping-pong's, ns.
#[derive(Debug, Clone)]
pub struct Phases(pub [Histogram<u64>; 5]);

impl Phases {
    /// Empty histograms (3 significant digits, growing as needed).
    pub fn new() -> Self {
        let h = || {
            let mut h = Histogram::<u64>::new(3).expect("3 digits");
            h.auto(true);
            h
        };
        Phases([h(), h(), h(), h(), h()])
    }

    /// Records `ns` into phase `i` (an index into [`PHASES`]).
    pub fn record(&mut self, i: usize, ns: u64) {
        let _ = self.0[i].record(ns);
    }
}

impl Default for Phases {
    fn default() -> Self {
        Phases::new()
    }
}

/// What the daemon has published, read by the writer and tests.
pub struct Shared {
    /// The daemon thread's CPU clock, loops and completed requests.
    pub thread: Arc<ThreadStat>,
    state: Mutex<(Counters, Gauges, Phases)>,
}

impl Shared {
    /// Nothing published yet, for the thread called `name`.
    pub fn new(name: String) -> Self {
        Shared {
            thread: ThreadStat::new(name),
            state: Mutex::new(Default::default()),
        }
    }

    /// Takes the daemon's figures since its last call: counters and histograms added,
    /// gauges replaced; the daemon's own histograms are reset.
    pub fn publish(&self, counters: &Counters, gauges: Gauges, phases: &mut Phases) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.0 = *counters;
        s.1 = gauges;
        for (total, part) in s.2 .0.iter_mut().zip(phases.0.iter_mut()) {
            let _ = total.add(&*part);
            part.reset();
        }
        self.thread
            .ops
            .store(counters.shm_requests, Ordering::Relaxed);
        self.thread.loops.store(counters.loops, Ordering::Relaxed);
    }

    /// The counters published last.
    pub fn counters(&self) -> Counters {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// The metrics file's JSON.
    pub fn json(&self) -> Value {
        let mut out = metrics_json(std::slice::from_ref(&self.thread));
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let hists: Map<String, Value> = PHASES
            .iter()
            .zip(&s.2 .0)
            .map(|(n, h)| (n.to_string(), json!(crate::record::hist_b64::encode(h))))
            .collect();
        out["counters"] = serde_json::to_value(s.0).unwrap_or(Value::Null);
        out["gauges"] = serde_json::to_value(s.1).unwrap_or(Value::Null);
        out["histograms"] = Value::Object(hists);
        out
    }
}

/// Writes the metrics file now, then every [`WRITE_EVERY`] until `stop`.
pub fn spawn_writer(
    shared: Arc<Shared>,
    path: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::io::Result<JoinHandle<()>> {
    write_json(&path, &shared.json())?;
    std::thread::Builder::new()
        .name("kvd-metrics".into())
        .spawn(move || {
            // Off the daemon's CPU: the rewrites must not wait for its time slices.
            let _ = crate::serve::stats::run_on_any_cpu();
            let mut slept = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
                slept += Duration::from_millis(20);
                if slept >= WRITE_EVERY {
                    slept = Duration::ZERO;
                    if let Err(e) = write_json(&path, &shared.json()) {
                        eprintln!("kvd: cannot write {}: {e}", path.display());
                    }
                }
            }
        })
}
