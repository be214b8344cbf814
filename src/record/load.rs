//! The load's result types as the run directory's files hold them: the JSON of
//! `stairbench load --json` ([`LoadReport`]), the per-second lines ([`IntervalLine`]) and the
//! trait that receives them while a load runs ([`IntervalSink`]), so the run-directory writer
//! and every reader need not depend on the load engine.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of the JSON that `stairbench load --json` writes (see `schema/load.schema.json`).
pub const SCHEMA_VERSION: u32 = 1;

/// Latency figures in microseconds (floating point: sub-microsecond resolution is kept).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Mean latency.
    #[serde(deserialize_with = "nan_if_null")]
    pub mean: f64,
    /// Median.
    #[serde(deserialize_with = "nan_if_null")]
    pub p50: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p90: f64,
    /// 95th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p95: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p99: f64,
    /// 99.9th percentile.
    #[serde(deserialize_with = "nan_if_null")]
    pub p999: f64,
    /// Largest latency seen.
    #[serde(deserialize_with = "nan_if_null")]
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
    /// The busiest generator thread's CPU over the window, % of one CPU (built-in engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busiest_thread_pct: Option<f64>,
    /// Time the generator threads were runnable but waiting for a CPU (schedstat), summed
    /// over threads, % of the window: 100 means one thread waited all the time (built-in
    /// engine, where the kernel keeps schedstat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_delay_pct: Option<f64>,
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
    /// Time to open all the connections, from the first connect to the last one established
    /// (paced by `--connect-rate`), seconds; 0 from a tool that does not say.
    #[serde(default)]
    pub setup_s: f64,
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
    /// TLS only: handshakes completed over the whole run (the first connections' included,
    /// so not only the window's); absent without TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshakes: Option<u64>,
    /// TLS only: how many of `tls_handshakes` resumed a session (`--tls-resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_resumed: Option<u64>,
    /// TLS only: duration of those handshakes, from the TCP connection to the end of the
    /// handshake, µs (not part of `latency_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_handshake_us: Option<LatencyUs>,
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

/// Reads a figure written as null (NaN, unavailable: JSON has no NaN) back as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// errors / (requests + errors); 0 when nothing completed either way.
pub fn error_ratio(requests: u64, errors: &BTreeMap<String, u64>) -> f64 {
    let failed: u64 = errors.values().sum();
    let total = requests + failed;
    if total == 0 {
        0.0
    } else {
        failed as f64 / total as f64
    }
}

/// Summarises a nanosecond histogram in microseconds.
pub fn latency_us(h: &hdrhistogram::Histogram<u64>) -> LatencyUs {
    if h.is_empty() {
        return LatencyUs::default();
    }
    let q = |p: f64| h.value_at_quantile(p) as f64 / 1e3;
    LatencyUs {
        mean: h.mean() / 1e3,
        p50: q(0.50),
        p90: q(0.90),
        p95: q(0.95),
        p99: q(0.99),
        p999: q(0.999),
        max: h.max() as f64 / 1e3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_ratio_counts_errors_among_all_outcomes() {
        let errors = BTreeMap::from([("http_5xx".to_string(), 30), ("timeout".to_string(), 10)]);
        assert_eq!(error_ratio(160, &errors), 0.2);
        assert_eq!(error_ratio(0, &BTreeMap::new()), 0.0);
        assert_eq!(error_ratio(0, &errors), 1.0);
    }
}
