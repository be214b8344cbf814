//! The load engine: pinned threads, each with its own event loop and connections; closed
//! loop (connections × depth in flight) or open loop (a fixed rate, latency counted from the
//! intended send time); one HdrHistogram per thread, merged; a line per second.

mod accounting;
pub mod external;
mod fdlimit;
pub mod hlog;
mod preload;
pub mod protocol;
pub mod raw;
mod recorder;
pub mod shm;
pub mod target;
mod worker;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Version of the JSON that `stairbench load --json` writes (see `schema/load.schema.json`).
pub const SCHEMA_VERSION: u32 = 1;

/// Everything one load run needs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Target URL: `http://`, `redis://`, `msgr://` (the scheme picks the protocol).
    pub url: String,
    /// Total connections, spread over the threads.
    pub connections: usize,
    /// Generator threads (each with its own event loop).
    pub threads: usize,
    /// The measured window.
    pub duration: Duration,
    /// Load run before the measured window, left out of the statistics.
    pub warmup: Duration,
    /// A request unanswered for this long is an error of kind `timeout`.
    pub timeout: Duration,
    /// Requests in flight per connection (pipelined).
    pub depth: usize,
    /// Open loop: total requests per second on a schedule. `None` is closed loop.
    pub rate_rps: Option<f64>,
    /// CPUs to pin the generator threads to, one thread per CPU round-robin.
    pub cpuset: Option<Vec<usize>>,
    /// Protocol options.
    pub proto: ProtoOptions,
}

/// Options of the wire protocols; each protocol reads the ones it knows.
#[derive(Debug, Clone)]
pub struct ProtoOptions {
    /// HTTP method.
    pub method: String,
    /// Extra HTTP headers, `Name: value`.
    pub headers: Vec<String>,
    /// HTTP request body.
    pub body: Option<String>,
    /// Redis key space size.
    pub keys: u64,
    /// Redis share of GETs (the rest are SETs), 0..=1.
    pub read_ratio: f64,
    /// Redis SET value size in bytes.
    pub value_size: usize,
    /// Redis key distribution.
    pub distribution: Distribution,
    /// Base seed; connection i uses `seed * 1000 + i` (deterministic, as seed 004).
    pub seed: u64,
    /// msgr request and reply payload size in bytes.
    pub msg_size: usize,
    /// Redis: SET every key of the key space before the load starts (so GETs find them).
    pub preload: bool,
}

impl Default for ProtoOptions {
    fn default() -> Self {
        ProtoOptions {
            method: "GET".into(),
            headers: Vec::new(),
            body: None,
            keys: 1024,
            read_ratio: 1.0,
            value_size: 16,
            distribution: Distribution::Uniform,
            seed: 1,
            msg_size: 4096,
            preload: false,
        }
    }
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            url: String::new(),
            connections: 1,
            threads: 1,
            duration: Duration::from_secs(10),
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(10),
            depth: 1,
            rate_rps: None,
            cpuset: None,
            proto: ProtoOptions::default(),
        }
    }
}

/// How keys are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// Zipf with exponent theta (0 < theta).
    Zipf(f64),
}

/// Latency figures in microseconds (floating point: sub-microsecond resolution is kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Mean latency.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest latency seen.
    pub max: f64,
}

/// The generator's own CPU use over the measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClientCpu {
    /// User CPU seconds of the whole generator process.
    pub user_s: f64,
    /// System CPU seconds of the whole generator process.
    pub sys_s: f64,
    /// Busy % of each generator thread (each pinned to one core when a cpuset is given);
    /// open loop's spin before a due request is waiting, not counted.
    pub per_core_busy: Vec<f64>,
}

/// The result of one load run: the JSON that `stairbench load --json` writes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    /// JSON layout version.
    pub schema: u32,
    /// Target URL.
    pub url: String,
    /// Connections opened.
    pub connections: usize,
    /// Generator threads.
    pub threads: usize,
    /// Requests in flight per connection.
    pub depth: usize,
    /// Open-loop target rate (requests/s), absent in closed loop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_rps: Option<f64>,
    /// Requests completed successfully in the measured window.
    pub requests: u64,
    /// Requests the server received: every request written to the wire (warm-up, `--preload`
    /// and final drain included), a request written again after its connection closed counted
    /// once, one written behind a closing reply and never written again not counted.
    pub sent: u64,
    /// Requests written a second time, on a new connection, because the server closed the one
    /// they were written on before reading them (nginx's `keepalive_requests`).
    #[serde(default)]
    pub resent: u64,
    /// Failed requests by kind (timeout, http_5xx, resp_error, closed, ...).
    pub errors: BTreeMap<String, u64>,
    /// Failed share of the measured window's requests: errors / (requests + errors).
    #[serde(default)]
    pub error_ratio: f64,
    /// Redis only: GETs of the measured window that found their key (a bulk reply).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_hits: Option<u64>,
    /// Redis only: GETs of the measured window whose key was absent (a nil reply); they are
    /// successful requests, but measure a lookup that found nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_misses: Option<u64>,
    /// Length of the measured window in seconds.
    pub duration_s: f64,
    /// Completed requests per second of the measured window.
    pub throughput_rps: f64,
    /// Bytes written in the measured window.
    pub bytes_sent: u64,
    /// Bytes read in the measured window.
    pub bytes_received: u64,
    /// Mean time to open a connection, seconds.
    pub connect_time_s: f64,
    /// Latency of completed requests (in open loop: from the intended send time).
    pub latency_us: LatencyUs,
    /// Open loop only: latency from the actual send time (what a naive tool reports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncorrected_latency_us: Option<LatencyUs>,
    /// Open loop only: requests that left later than their intended time (no free connection).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub omitted: Option<u64>,
    /// Open loop only: scheduled requests the generator got to more than max(100 µs, one
    /// schedule interval) after their due time, although its timer wakes it before each
    /// (it was busy or descheduled); a wait for a free connection is `omitted`, not this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_sends: Option<u64>,
    /// Open loop only: 99th percentile of how late the generator got to each scheduled
    /// request after its due time (its send lag), µs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_lag_p99_us: Option<f64>,
    /// The generator's CPU use.
    pub client_cpu: ClientCpu,
    /// The step measured the client, not the server: a CPU of the generator was over 90%
    /// busy (its threads' busy time summed per CPU), or in open loop more than 1% of the
    /// sends were late.
    pub client_saturated: bool,
}

/// One per-second line of a running load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IntervalLine {
    /// Seconds since the measured window started (negative during warm-up).
    pub elapsed_s: f64,
    /// Requests in flight at the end of the interval.
    pub inflight: u64,
    /// Completed requests per second in the interval.
    pub ops_per_s: f64,
    /// Megabytes (10^6) per second received in the interval.
    pub mb_per_s: f64,
    /// Mean latency in the interval, milliseconds.
    pub mean_latency_ms: f64,
    /// Errors in the interval.
    pub errors: u64,
    /// Busy % of each generator thread in the interval.
    pub per_core_busy: Vec<f64>,
}

/// Receives the per-second lines (and their histograms, in nanoseconds) while a load runs.
pub trait IntervalSink {
    /// Called once per interval, in order.
    fn interval(&mut self, line: &IntervalLine, hist_ns: &hdrhistogram::Histogram<u64>);
    /// The measured window starts now (from drivers whose lines come late, e.g. from other
    /// hosts, so the observers still start on time).
    fn window_started(&mut self) {}
    /// The measured window ends now (as `window_started`, for lines that come late).
    fn window_ended(&mut self) {}
}

/// What a finished load run hands back beside its report.
#[derive(Debug, Clone)]
pub struct LoadOutcome {
    /// The summary (the JSON).
    pub report: LoadReport,
    /// All latencies of the measured window, nanoseconds (corrected in open loop).
    pub hist_ns: hdrhistogram::Histogram<u64>,
    /// The per-second lines of the measured window.
    pub intervals: Vec<IntervalLine>,
    /// The measured window on this host's wall clock, (start, end) in ns since the Unix epoch.
    pub window_unix_ns: (i64, i64),
}

pub mod engine;
pub use accounting::error_ratio;
pub use engine::{run, run_at};

/// Why a load run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The URL or an option is unusable.
    #[error("{0}")]
    BadInput(String),
    /// The target could not be reached.
    #[error("cannot connect to {addr}: {}", fdlimit::connect_cause(.source))]
    Connect {
        /// The address tried.
        addr: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// Too few file descriptors for the connections asked for, even at the hard limit.
    #[error("{connections} connections need {needed} open files, but this process may open at most {hard_limit} (hard RLIMIT_NOFILE): raise it (`ulimit -n {needed}` as root, or LimitNOFILE= for a service) or use at most {usable} connections")]
    FdLimit {
        /// Connections asked for.
        connections: usize,
        /// Descriptors the load needs (connections plus the engine's own).
        needed: u64,
        /// The hard limit.
        hard_limit: u64,
        /// Connections that fit under the hard limit.
        usable: u64,
    },
    /// Any other I/O failure of the engine itself.
    #[error("{context}")]
    Io {
        /// What the engine was doing.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}
