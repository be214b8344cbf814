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

impl LatencyUs {
    /// No request completed: every figure NaN.
    pub fn not_measured() -> LatencyUs {
        let nan = f64::NAN;
        LatencyUs {
            mean: nan,
            p50: nan,
            p90: nan,
            p95: nan,
            p99: nan,
            p999: nan,
            max: nan,
        }
    }
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
    /// HTTP only: the failed requests of `errors`' http_* classes per status code (403, 503).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub error_statuses: BTreeMap<u16, u64>,
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
    /// gRPC streaming calls only: their messages, counted beside the calls (`sent` and
    /// `requests` count calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grpc_stream: Option<StreamFigures>,
    /// The generator's CPU use.
    pub client_cpu: ClientCpu,
    /// The step measured the client, not the server: a CPU of the generator was over 90%
    /// busy (its threads' busy time summed per CPU), or in open loop more than 1% of the
    /// sends were late.
    pub client_saturated: bool,
}

/// A streaming gRPC load's messages (client-streaming, server-streaming or bidirectional
/// calls), beside its calls.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamFigures {
    /// Messages each call sends (`--stream-messages`: client-streaming and bidirectional
    /// calls; 1 for a server-streaming call).
    pub messages_per_call: u32,
    /// Request messages of the calls counted in `sent` (warm-up and drain included).
    pub messages_sent: u64,
    /// Reply messages read whole over the run, of calls of any end (warm-up and drain
    /// included, as `sent`).
    pub messages_received: u64,
    /// Reply messages of the measured window's successful calls (`requests`).
    pub window_messages: u64,
    /// `window_messages` per second of the measured window.
    pub messages_per_s: f64,
    /// Streamed replies: latency from a successful call's (intended) send to its first
    /// reply message, µs, of the window's calls that had one (to the call's end is
    /// `latency_us`); absent for single-message replies and when no call had a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_message_us: Option<LatencyUs>,
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

/// Declares [`RequestError`]: each variant with the key it is counted under in `errors`.
macro_rules! error_kinds {
    ($($(#[$doc:meta])* $variant:ident = $name:literal,)*) => {
        /// Why a request failed, as the built-in engine counts it: the keys of
        /// [`LoadReport::errors`] (an external tool's own keys and gRPC's `grpc_status N NAME:
        /// message` are that tool's and server's words, not these).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum RequestError {
            $($(#[$doc])* #[serde(rename = $name)] $variant,)*
        }

        impl RequestError {
            /// Every kind, in declaration order.
            pub const ALL: &'static [RequestError] = &[$(RequestError::$variant,)*];

            /// The key it is counted under (`timeout`, `http_5xx`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(RequestError::$variant => $name,)*
                }
            }
        }
    };
}

error_kinds! {
    /// No answer within the request timeout.
    Timeout = "timeout",
    /// The server closed the connection with requests in flight.
    Closed = "closed",
    /// The connection could not be opened.
    Connect = "connect",
    /// The TLS handshake failed.
    TlsHandshake = "tls_handshake",
    /// A TLS protocol failure on an open connection.
    TlsError = "tls_error",
    /// A socket read or write failed.
    IoError = "io_error",
    /// HTTP status 1xx as a final answer.
    Http1xx = "http_1xx",
    /// HTTP status 3xx.
    Http3xx = "http_3xx",
    /// HTTP status 4xx.
    Http4xx = "http_4xx",
    /// HTTP status 5xx.
    Http5xx = "http_5xx",
    /// HTTP/1.1: a reply that is not HTTP.
    HttpBadResponse = "http_bad_response",
    /// HTTP/1.1: 101 Switching Protocols to a request that asked for none.
    HttpUnexpected101 = "http_unexpected_101",
    /// HTTP/1.1: a malformed chunked body.
    HttpBadChunk = "http_bad_chunk",
    /// HTTP/1.1: both Transfer-Encoding and Content-Length.
    HttpTeAndContentLength = "http_te_and_content_length",
    /// HTTP/1.1: Content-Length headers that disagree.
    HttpConflictingContentLength = "http_conflicting_content_length",
    /// HTTP/1.1: a body larger than the engine reads.
    HttpBodyTooLarge = "http_body_too_large",
    /// HTTP/1.1: a reply whose length cannot be told.
    HttpNoLength = "http_no_length",
    /// HTTP/2: a connection error of kind PROTOCOL_ERROR.
    H2Protocol = "h2_protocol",
    /// HTTP/2: HPACK could not decode a header block.
    H2Compression = "h2_compression",
    /// HTTP/2: a frame of the wrong size.
    H2FrameSize = "h2_frame_size",
    /// HTTP/2: flow-control windows broken.
    H2FlowControl = "h2_flow_control",
    /// HTTP/2: a frame on a closed stream.
    H2StreamClosed = "h2_stream_closed",
    /// HTTP/2: a header block over the engine's limit.
    H2HeadersTooLarge = "h2_headers_too_large",
    /// HTTP/2: a flood of control frames.
    H2Flood = "h2_flood",
    /// HTTP/2: the server's GOAWAY carried an error.
    H2Goaway = "h2_goaway",
    /// HTTP/2: the server reset the stream.
    H2Reset = "h2_reset",
    /// HTTP/2: a response without `:status`.
    H2NoStatus = "h2_no_status",
    /// gRPC: a call that ended without `grpc-status`.
    GrpcNoStatus = "grpc_no_status",
    /// gRPC: a message whose length prefix is broken.
    GrpcFraming = "grpc_framing",
    /// gRPC: a `grpc-status` that is no number.
    GrpcBadStatus = "grpc_bad_status",
    /// gRPC: a compressed message on a call that announced no compression.
    GrpcCompressedUnannounced = "grpc_compressed_unannounced",
    /// gRPC: a unary call answered with other than one message.
    GrpcMessageCount = "grpc_message_count",
    /// RESP: an error reply.
    RespError = "resp_error",
    /// RESP: bytes that are no reply.
    RespBadReply = "resp_bad_reply",
    /// memcache: NOT_STORED.
    MemcacheNotStored = "memcache_not_stored",
    /// memcache: SERVER_ERROR.
    MemcacheServerError = "memcache_server_error",
    /// memcache: CLIENT_ERROR.
    MemcacheClientError = "memcache_client_error",
    /// memcache: ERROR.
    MemcacheError = "memcache_error",
    /// memcache: bytes that are no reply.
    MemcacheBadReply = "memcache_bad_reply",
    /// memcache: a VALUE whose length does not match its data.
    MemcacheBadValue = "memcache_bad_value",
    /// msgr: a frame that is not one.
    BadFrame = "bad_frame",
    /// msgr: a reply whose payload is not the message size.
    ShortBody = "short_body",
    /// A reply larger than any one reply may be.
    ReplyTooLarge = "reply_too_large",
    /// The connection held more unanswered reply bytes than the thread's budget.
    ReplyOverBudget = "reply_over_budget",
    /// A reply where no request was in flight.
    UnexpectedReply = "unexpected_reply",
    /// shmkv/kvd: the server stopped.
    ServerStopped = "server_stopped",
    /// shmkv: any other shared-memory failure.
    ShmError = "shm_error",
    /// kvd: the peer holding the key is down.
    PeerDown = "peer_down",
    /// kvd: a status other than found, not found or peer down.
    BadRequest = "bad_request",
    /// The errors of kinds past the 64 distinct kinds a thread keeps.
    OtherKinds = "other_kinds",
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl LoadReport {
    /// Requests of the measured window that failed with `kind`.
    pub fn errors_of(&self, kind: RequestError) -> u64 {
        self.errors.get(kind.as_str()).copied().unwrap_or(0)
    }
}

/// Reads a figure written as null (NaN, unavailable: JSON has no NaN) back as NaN.
pub fn nan_if_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Failed requests in words, each kind with its count and an HTTP class with its status codes:
/// `http_4xx 27715 (403 ×27715), timeout 3`.
pub fn errors_text(errors: &BTreeMap<String, u64>, statuses: &BTreeMap<u16, u64>) -> String {
    let kind_text = |(kind, n): (&String, &u64)| {
        let codes: Vec<String> = statuses
            .iter()
            .filter(|(code, _)| kind.strip_prefix("http_") == Some(&format!("{}xx", *code / 100)))
            .map(|(code, m)| format!("{code} ×{m}"))
            .collect();
        match codes.is_empty() {
            true => format!("{kind} {n}"),
            false => format!("{kind} {n} ({})", codes.join(", ")),
        }
    };
    errors.iter().map(kind_text).collect::<Vec<_>>().join(", ")
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

/// Summarises a nanosecond histogram in microseconds; every figure NaN (null in JSON, "–" in
/// the reports) when no request completed: a latency of 0 would read as a fast server.
pub fn latency_us(h: &hdrhistogram::Histogram<u64>) -> LatencyUs {
    if h.is_empty() {
        return LatencyUs::not_measured();
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
    fn errors_name_their_http_status_codes_under_their_class() {
        let errors = BTreeMap::from([
            ("http_4xx".to_string(), 30),
            ("http_5xx".to_string(), 2),
            ("timeout".to_string(), 1),
        ]);
        let statuses = BTreeMap::from([(403, 20), (404, 10), (503, 2)]);
        assert_eq!(
            errors_text(&errors, &statuses),
            "http_4xx 30 (403 ×20, 404 ×10), http_5xx 2 (503 ×2), timeout 1"
        );
        assert_eq!(
            errors_text(&errors, &BTreeMap::new()),
            "http_4xx 30, http_5xx 2, timeout 1"
        );
    }

    #[test]
    fn no_completed_request_has_no_latency_not_a_zero_one() {
        let empty = hdrhistogram::Histogram::<u64>::new(3).unwrap();
        let l = latency_us(&empty);
        assert!(l.mean.is_nan() && l.p99.is_nan() && l.max.is_nan(), "{l:?}");
        let line = serde_json::to_string(&l).unwrap();
        assert!(line.contains("\"p99\":null"), "{line}");
    }

    #[test]
    fn error_ratio_counts_errors_among_all_outcomes() {
        let errors = BTreeMap::from([("http_5xx".to_string(), 30), ("timeout".to_string(), 10)]);
        assert_eq!(error_ratio(160, &errors), 0.2);
        assert_eq!(error_ratio(0, &BTreeMap::new()), 0.0);
        assert_eq!(error_ratio(0, &errors), 1.0);
    }

    /// The keys the built-in engine counted errors under while its kinds were `&'static str`
    /// (main at 3302f11), sorted.
    const KINDS_BEFORE: [&str; 50] = [
        "bad_frame",
        "bad_request",
        "closed",
        "connect",
        "grpc_bad_status",
        "grpc_compressed_unannounced",
        "grpc_framing",
        "grpc_message_count",
        "grpc_no_status",
        "h2_compression",
        "h2_flood",
        "h2_flow_control",
        "h2_frame_size",
        "h2_goaway",
        "h2_headers_too_large",
        "h2_no_status",
        "h2_protocol",
        "h2_reset",
        "h2_stream_closed",
        "http_1xx",
        "http_3xx",
        "http_4xx",
        "http_5xx",
        "http_bad_chunk",
        "http_bad_response",
        "http_body_too_large",
        "http_conflicting_content_length",
        "http_no_length",
        "http_te_and_content_length",
        "http_unexpected_101",
        "io_error",
        "memcache_bad_reply",
        "memcache_bad_value",
        "memcache_client_error",
        "memcache_error",
        "memcache_not_stored",
        "memcache_server_error",
        "other_kinds",
        "peer_down",
        "reply_over_budget",
        "reply_too_large",
        "resp_bad_reply",
        "resp_error",
        "server_stopped",
        "shm_error",
        "short_body",
        "timeout",
        "tls_error",
        "tls_handshake",
        "unexpected_reply",
    ];

    #[test]
    fn every_error_kind_keeps_its_key_both_ways() {
        let mut keys = Vec::new();
        for &k in RequestError::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{k}\""), "{k:?}");
            assert_eq!(serde_json::from_str::<RequestError>(&json).unwrap(), k);
            keys.push(k.as_str());
        }
        keys.sort_unstable();
        assert_eq!(keys, KINDS_BEFORE);
        assert!(serde_json::from_str::<RequestError>("\"grpc_status 14 UNAVAILABLE\"").is_err());
    }

    /// The wire layer's kinds are enums (`http1::Malformed`, `grpc::Broken`), each mapped to
    /// one `RequestError` by a match the compiler checks: a kind written as text would be
    /// looked up at run time and could be counted under another name.
    #[test]
    fn the_wire_layer_names_no_error_kind_as_text() {
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/wire");
        let written =
            regex::Regex::new(r#"(?:Err|Invalid|Broken|broke|ok_or)\("([a-z0-9_]+)"\)"#).unwrap();
        for file in ["http1.rs", "grpc.rs"] {
            let text = std::fs::read_to_string(src.join(file)).unwrap();
            let found: Vec<&str> = written
                .captures_iter(&text)
                .map(|c| c.get(1).unwrap().as_str())
                .collect();
            assert!(found.is_empty(), "{file} writes kinds as text: {found:?}");
        }
    }

    #[test]
    fn a_reports_errors_read_back_by_kind() {
        let old = r#"{"timeout": 5, "http_5xx": 20, "grpc_status 14 UNAVAILABLE": 2}"#;
        let report = LoadReport {
            errors: serde_json::from_str(old).unwrap(),
            ..LoadReport::default()
        };
        assert_eq!(report.errors_of(RequestError::Timeout), 5);
        assert_eq!(report.errors_of(RequestError::Http5xx), 20);
        assert_eq!(report.errors_of(RequestError::Http4xx), 0);
        let written = serde_json::to_value(&report.errors).unwrap();
        assert_eq!(
            written,
            serde_json::from_str::<serde_json::Value>(old).unwrap()
        );
    }
}
