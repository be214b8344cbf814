//! The load engine: pinned threads, each with its own event loop and connections; closed
//! loop (connections × depth in flight) or open loop (a fixed rate, latency counted from the
//! intended send time); one HdrHistogram per thread, merged; a line per second.

mod accounting;
pub mod arrivals;
pub mod budget;
pub mod external;
mod fdlimit;
mod h2;
pub use h2::probe;
pub mod kvd;
pub mod merge;
mod pipelined;
mod preload;
pub mod protocol;
pub mod raw;
mod recorder;
pub mod shm;
pub mod sources;
pub mod target;
pub mod template;
pub mod tls;
mod transport;
mod worker;

use std::time::Duration;

use std::sync::atomic::AtomicBool;

use crate::record::load::{IntervalSink, LoadReport};

/// Everything one load run needs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Target URL: `http://`, `https://`, `redis://`, `msgr://` (the scheme picks the protocol).
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
    /// Open loop: how the gaps between requests are drawn.
    pub arrivals: arrivals::Arrivals,
    /// A linear ramp of the rate (open loop) or of the working connections (closed loop).
    pub ramp: Option<arrivals::Ramp>,
    /// Protocol options.
    pub proto: ProtoOptions,
    /// Source addresses and pacing of the connections (`--source-addrs`, `--connect-rate`).
    pub connect: sources::ConnectOptions,
    /// What one generator thread's connections may hold together of replies not yet whole
    /// (see [`budget`]).
    pub reply_budget_bytes: usize,
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
    /// gRPC: the request message's bytes (serialized protobuf, `--body-file`); none is the
    /// empty message.
    pub body_file: Option<std::sync::Arc<[u8]>>,
    /// gRPC: a message made per call from JSON with placeholders (`--data`); each stream
    /// sends its own (`body_file` then holds the first, for `--verbose`).
    pub grpc_calls: Option<std::sync::Arc<template::grpc::CallTemplate>>,
    /// gRPC: a streaming call's shape (`--stream-messages`, or the method's in its .proto);
    /// none for unary calls.
    pub grpc_stream: Option<protocol::grpc::GrpcStream>,
    /// Redis key space size.
    pub keys: u64,
    /// Redis share of GETs (the rest are SETs), 0..=1.
    pub read_ratio: f64,
    /// Redis SET value size in bytes.
    pub value_size: usize,
    /// Redis key distribution.
    pub distribution: Distribution,
    /// Base seed; connection i uses `seed * 1000 + i` (deterministic, as the benchkv study).
    pub seed: u64,
    /// msgr request and reply payload size in bytes.
    pub msg_size: usize,
    /// Redis: SET every key of the key space before the load starts (so GETs find them).
    pub preload: bool,
    /// TLS options (`https://`).
    pub tls: tls::TlsOptions,
    /// HTTP: every request on a new connection (`Connection: close`), so each pays a
    /// connection set-up (and a TLS handshake).
    pub new_connection_per_request: bool,
    /// `--requests`: the request file (HTTP requests or redis commands) instead of the above.
    pub requests: Option<std::sync::Arc<template::RequestFile>>,
    /// How each connection picks from `requests`.
    pub order: template::Order,
    /// HTTP/2: with prior knowledge on `http://` (as `h2c://`), by ALPN on `https://`.
    pub http2: bool,
    /// memcached: the text commands (get/set) or the meta ones (mg/ms).
    pub memcache_commands: protocol::memcache::Commands,
}

impl Default for ProtoOptions {
    fn default() -> Self {
        ProtoOptions {
            method: "GET".into(),
            headers: Vec::new(),
            body: None,
            body_file: None,
            grpc_calls: None,
            grpc_stream: None,
            keys: 1024,
            read_ratio: 1.0,
            value_size: 16,
            distribution: Distribution::Uniform,
            seed: 1,
            msg_size: 4096,
            preload: false,
            tls: tls::TlsOptions::default(),
            new_connection_per_request: false,
            requests: None,
            order: template::Order::Weighted,
            http2: false,
            memcache_commands: protocol::memcache::Commands::Text,
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
            arrivals: arrivals::Arrivals::Uniform,
            ramp: None,
            proto: ProtoOptions::default(),
            connect: sources::ConnectOptions::default(),
            reply_budget_bytes: budget::DEFAULT_REPLY_BUDGET_BYTES,
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

/// What a finished load run hands back beside its report.
#[derive(Debug, Clone)]
pub struct LoadOutcome {
    /// The summary (the JSON).
    pub report: LoadReport,
    /// All latencies of the measured window, nanoseconds (corrected in open loop).
    pub hist_ns: hdrhistogram::Histogram<u64>,
    /// The measured window on this host's wall clock, (start, end) in ns since the Unix epoch.
    pub window_unix_ns: (i64, i64),
    /// When every connection was open and the load ready to start, on this host's wall clock,
    /// ns since the Unix epoch (with a start time given: when it began waiting for it).
    pub ready_unix_ns: i64,
}

pub mod engine;

#[doc(hidden)]
pub use h2::fuzz_client_connection;

/// Runs one load to completion (warm-up, measured window, drain). `stop` ends it early
/// (Ctrl-C): the figures of what was measured so far are still returned.
pub fn run(
    config: &LoadConfig,
    sink: &mut dyn IntervalSink,
    stop: &AtomicBool,
) -> Result<LoadOutcome, LoadError> {
    run_at(config, None, sink, stop)
}

/// `run`, with the warm-up starting when the wall clock reads `start_at_unix_ns` (after the
/// connections are open), so loads on several hosts measure the same window.
pub fn run_at(
    config: &LoadConfig,
    start_at_unix_ns: Option<i64>,
    sink: &mut dyn IntervalSink,
    stop: &AtomicBool,
) -> Result<LoadOutcome, LoadError> {
    engine::check_start_at(start_at_unix_ns)?;
    let shared_memory = config.url.starts_with("shm://") || config.url.starts_with("kvd://");
    if shared_memory && config.connect != sources::ConnectOptions::default() {
        return Err(LoadError::BadInput(
            "--source-addrs and --connect-rate work with socket targets, not shm:// or kvd://"
                .into(),
        ));
    }
    if config.url.starts_with("shm://") {
        if config.proto.requests.is_some() {
            return Err(LoadError::BadInput(
                "--requests works with http:// and redis:// targets only".into(),
            ));
        }
        if config.ramp.is_some() || config.arrivals != arrivals::Arrivals::Uniform {
            return Err(LoadError::BadInput(
                "--ramp and --arrivals poisson work with socket targets, not shm://".into(),
            ));
        }
        return shm::run(config, start_at_unix_ns, sink, stop);
    }
    if config.url.starts_with("kvd://") {
        return kvd::run(config, start_at_unix_ns, sink, stop);
    }
    engine::run_sockets(config, start_at_unix_ns, sink, stop)
}

/// Why a load run could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The URL or an option is unusable.
    #[error("{0}")]
    BadInput(String),
    /// The target could not be reached.
    #[error("cannot connect to {addr}: {}", fdlimit::connect_cause(.error))]
    Connect {
        /// The address tried.
        addr: String,
        /// The OS error (said in the message, so not returned as its `source()`: printed
        /// with its causes the reason would come twice).
        error: std::io::Error,
    },
    /// Connections still not established `limit_s` after their connect.
    #[error("cannot connect to {addr}: {established} of {connections} connections of a thread were established, the others not within {limit_s} s of their connect (the server did not accept in time{})", if *.connections > 10000 { "; a burst of connects overflows the listen backlog: pace them with --connect-rate; past about 14,000 connections from one source address to one destination, spread them over more with --source-addrs" } else if *.connections > 1000 { "; a burst of connects overflows the listen backlog: pace them with --connect-rate" } else { "" })]
    ConnectTimeout {
        /// The address tried.
        addr: String,
        /// The thread's connections established.
        established: usize,
        /// The thread's connections.
        connections: usize,
        /// How long each may take.
        limit_s: f64,
    },
    /// Stopped (Ctrl-C, or another client group failed) while waiting for the common start.
    #[error("stopped before the common start: nothing was measured")]
    Stopped,
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
    /// A generator thread ended without its totals (it panicked or returned early): the
    /// figures would silently leave its requests out.
    #[error("only {reported} of {threads} generator threads reported their totals: the load's figures would be incomplete")]
    LostThread {
        /// Threads whose totals arrived.
        reported: usize,
        /// Threads started.
        threads: usize,
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
