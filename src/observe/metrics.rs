//! Target-reported metrics: a JSON file or an HdrHistogram log the target writes (the
//! `{metrics}` placeholder), a JSON endpoint on loopback, or memcached's `stats`. The step loop snapshots them at
//! both edges of the measured window and keeps the difference: numeric leaves subtracted,
//! and for a histogram log the histogram of the window.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::wire::http1::{self, Frame};

/// Format of a metrics file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    /// A JSON document of counters.
    Json,
    /// An HdrHistogram interval log.
    Hlog,
}

/// Where a target's metrics come from (templates, before a launch fills them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsPlan {
    /// A file; `{metrics}` in the template becomes the run directory's path for it.
    File {
        /// The path template.
        template: String,
        /// Its format.
        format: MetricsFormat,
    },
    /// An HTTP URL template on loopback answering JSON, or `memcache://HOST:PORT` (its `stats`).
    Url(String),
}

impl MetricsPlan {
    /// The concrete source for one launch: `path` is the run directory's file for
    /// `{metrics}`, `port` the target's port.
    pub fn resolve(&self, path: &Path, port: u16) -> MetricsSource {
        match self {
            MetricsPlan::File { template, format } => MetricsSource::File {
                path: PathBuf::from(template.replace("{metrics}", &path.display().to_string())),
                format: *format,
            },
            MetricsPlan::Url(u) => MetricsSource::Url(u.replace("{port}", &port.to_string())),
        }
    }

    /// The extension of the run directory's file.
    pub fn extension(&self) -> &'static str {
        match self {
            MetricsPlan::File {
                format: MetricsFormat::Hlog,
                ..
            } => "hlog",
            _ => "json",
        }
    }
}

/// The run directory's metrics file of a target (instance `Some(k)` of a split target).
pub fn metrics_path(out_dir: &Path, target: &str, instance: Option<usize>, ext: &str) -> PathBuf {
    let clean: String = target
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = match instance {
        Some(k) => format!("{clean}.i{k}.{ext}"),
        None => format!("{clean}.{ext}"),
    };
    out_dir.join("metrics").join(name)
}

/// A source of metrics after launch.
#[derive(Debug, Clone, PartialEq)]
pub enum MetricsSource {
    /// A file the target rewrites.
    File {
        /// Its path.
        path: PathBuf,
        /// Its format.
        format: MetricsFormat,
    },
    /// A loopback URL answering JSON, or a memcached answering `stats`.
    Url(String),
}

/// Longest wait for a metrics file's next rewrite.
pub const FRESH_WAIT: Duration = Duration::from_millis(1500);

/// One reading of a source.
#[derive(Debug, Clone)]
pub enum Snapshot {
    /// A JSON document.
    Json(Value),
    /// Every histogram of a log, added.
    Hist(Histogram<u64>),
}

/// The top-level field in which a JSON metrics file may say when it was written (Unix time,
/// nanoseconds): with it, a window's difference is scaled to the span its two readings cover.
pub const WRITTEN_FIELD: &str = "written_unix_ns";

/// A target's metrics that could not be read: the message names the file or URL.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// An HdrHistogram log that cannot be read.
    #[error(transparent)]
    Hlog(#[from] crate::record::hlog::HlogError),
    /// A metrics file that cannot be read.
    #[error("cannot read the metrics file {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A metrics file that is not JSON.
    #[error("{} is not JSON: {source}", path.display())]
    FileJson {
        /// The file.
        path: PathBuf,
        /// What serde said.
        source: serde_json::Error,
    },
    /// A URL that is not `http://` (or `memcache://`).
    #[error("{0:?}: expected an http:// (or memcache://) URL on 127.0.0.1")]
    NotHttp(String),
    /// A URL whose host and port do not resolve.
    #[error("{0:?}: cannot read the host and port")]
    HostPort(String),
    /// A URL off this machine.
    #[error("{0:?}: metrics are read from loopback only (127.0.0.1, ::1, localhost)")]
    NotLoopback(String),
    /// Connecting, writing or reading failed.
    #[error("{doing} {url}: {source}")]
    Io {
        /// "cannot connect to", "writing to" or "reading".
        doing: &'static str,
        /// The URL.
        url: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// No whole answer in time.
    #[error("reading {url}: no whole answer within {} s ({bytes} bytes came)", ANSWER_WAIT.as_secs_f64())]
    Timeout {
        /// The URL.
        url: String,
        /// Bytes read by then.
        bytes: usize,
    },
    /// An answer over [`MAX_METRICS_ANSWER`].
    #[error("{0}: the answer is over {max} MiB; a metrics endpoint should answer a small JSON document", max = MAX_METRICS_ANSWER >> 20)]
    TooLarge(String),
    /// The peer closed before a header.
    #[error("{0}: the answer has no HTTP header")]
    NoHeader(String),
    /// The peer closed inside the body.
    #[error("{url}: the answer ends before its body is whole ({bytes} bytes came)")]
    Truncated {
        /// The URL.
        url: String,
        /// Bytes read.
        bytes: usize,
    },
    /// A status other than 200 (its status line, at most 200 bytes).
    #[error("{url} answered {status:?}")]
    Status {
        /// The URL.
        url: String,
        /// The status line.
        status: String,
    },
    /// An answer the HTTP/1 framer refuses (its error kind).
    #[error("{url}: {}", invalid_answer(kind))]
    Invalid {
        /// The URL.
        url: String,
        /// How the framer found it malformed.
        kind: http1::Malformed,
    },
    /// A memcached's `stats` that could not be read.
    #[error(transparent)]
    Memcached(#[from] super::memcached::StatsError),
    /// A body that is not JSON.
    #[error("{url} did not answer JSON: {source}")]
    AnswerJson {
        /// The URL.
        url: String,
        /// What serde said.
        source: serde_json::Error,
    },
}

/// One reading of a source, with what is known of its age.
#[derive(Debug, Clone)]
pub struct Reading {
    /// What was read.
    pub snapshot: Snapshot,
    /// When its content was written: the file's own [`WRITTEN_FIELD`] when it has one, else
    /// its mtime; None for an endpoint (it answers for the moment it is asked).
    pub written: Option<SystemTime>,
    /// `written` is the file's own timestamp (exact), not its mtime.
    pub own_time: bool,
}

impl MetricsSource {
    /// Reads it once it reflects this moment: a file is read after its next rewrite (up to
    /// `FRESH_WAIT`), since a target rewrites it periodically and a busy CPU can delay that.
    /// A file not rewritten meanwhile is still read; its `written` tells how old it is.
    pub fn snapshot_fresh(&self) -> Result<Reading, MetricsError> {
        let mut modified = None;
        if let MetricsSource::File { path, .. } = self {
            let asked = SystemTime::now();
            let deadline = std::time::Instant::now() + FRESH_WAIT;
            loop {
                modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                if modified.is_some_and(|m| m >= asked) || std::time::Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        self.reading(modified)
    }

    /// Reads it at the window's end. A file that dates its own content is read as it is: its
    /// counts and its time were taken together, so a reading up to one rewrite old is exact
    /// over the span it gives, and waiting for the next rewrite would stretch that span over
    /// the time after the load stopped (grpcio's counts read 9% low at 16 clients in 1 s
    /// steps). One not rewritten since `start`, or with no time of its own, waits as
    /// [`Self::snapshot_fresh`] does.
    pub fn snapshot_at_end(&self, start: Option<&Reading>) -> Result<Reading, MetricsError> {
        self.snapshot_now(start)
            .unwrap_or_else(|| self.snapshot_fresh())
    }

    /// The reading at the window's end when it needs no wait: an endpoint's answer (it is
    /// dated by its arrival), or a file dated by itself and rewritten since `start`. None
    /// when the file must be waited for.
    pub fn snapshot_now(&self, start: Option<&Reading>) -> Option<Result<Reading, MetricsError>> {
        let MetricsSource::File { path, .. } = self else {
            return Some(self.snapshot_fresh());
        };
        let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        let now = self.reading(modified).ok()?;
        let newer = match start.and_then(|s| s.written) {
            Some(began) => now.written.is_some_and(|w| w > began),
            None => true,
        };
        (now.own_time && newer).then_some(Ok(now))
    }

    /// Reads it now, dated by its own time field, else by `modified`.
    fn reading(&self, modified: Option<SystemTime>) -> Result<Reading, MetricsError> {
        let snapshot = self.snapshot()?;
        let own = match &snapshot {
            Snapshot::Json(v) => v
                .get(WRITTEN_FIELD)
                .and_then(Value::as_u64)
                .map(|ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns)),
            Snapshot::Hist(_) => None,
        };
        Ok(Reading {
            snapshot,
            own_time: own.is_some(),
            written: own.or(modified),
        })
    }

    /// Reads it now.
    pub fn snapshot(&self) -> Result<Snapshot, MetricsError> {
        match self {
            MetricsSource::File { path, format } => {
                if *format == MetricsFormat::Hlog {
                    return Ok(Snapshot::Hist(crate::record::hlog::read_hlog_or_empty(
                        path,
                    )?));
                }
                let bytes = std::fs::read(path).map_err(|source| MetricsError::ReadFile {
                    path: path.clone(),
                    source,
                })?;
                serde_json::from_slice(&bytes)
                    .map(Snapshot::Json)
                    .map_err(|source| MetricsError::FileJson {
                        path: path.clone(),
                        source,
                    })
            }
            MetricsSource::Url(url) if url.starts_with(super::memcached::SCHEME) => {
                let (addr, _) = parse_url(url)?;
                let mut stats =
                    super::memcached::stats(addr, url).map_err(MetricsError::Memcached)?;
                // memcached counts as it is asked: the answer's arrival dates the reading, so
                // a window's difference says the span it covers (`span_s`), however late a
                // busy server answered at either edge.
                let now = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH);
                stats[WRITTEN_FIELD] = json!(now.unwrap_or_default().as_nanos() as u64);
                Ok(Snapshot::Json(stats))
            }
            MetricsSource::Url(url) => http_get_json(url).map(Snapshot::Json),
        }
    }
}

/// What changed between two snapshots: numeric leaves subtracted (a leaf absent at the start
/// counts from 0; others keep their end value); for histograms, the window's own summary.
pub fn difference(before: &Snapshot, after: &Snapshot) -> Value {
    match (before, after) {
        (Snapshot::Json(a), Snapshot::Json(b)) => json_window(a, b),
        (Snapshot::Hist(a), Snapshot::Hist(b)) => {
            let mut window = b.clone();
            match window.subtract(a) {
                Ok(()) => hist_summary(&window),
                // The end's histogram is the whole run's, not the window's: never show it as
                // the window's figures.
                Err(e) => unavailable(&format!(
                    "the histogram at the window's end does not contain the one at its start ({e:?}); was the target restarted or its log rewritten?"
                )),
            }
        }
        (Snapshot::Json(_), Snapshot::Hist(_)) | (Snapshot::Hist(_), Snapshot::Json(_)) => {
            unavailable("the metrics changed format between the window's edges")
        }
    }
}

/// The window that begins at `began` of a source, from its readings at both edges, as a
/// step records it: unavailable when the file was not rewritten between them (its
/// difference would be 0 or stale, not measured). When both readings carry the file's own
/// timestamp, `span_s` is the span the difference really covers (its counts stay exact):
/// per-second figures drawn from it divide by that span, not by the load's window.
pub fn window_difference(
    before: Result<&Reading, &MetricsError>,
    after: Result<&Reading, &MetricsError>,
    began: SystemTime,
) -> Value {
    let (a, b) = match (before, after) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => return json!({ "note": why.to_string() }),
    };
    if let (Some(wa), Some(wb)) = (a.written, b.written) {
        if wb <= wa {
            return unavailable(&format!(
                "the metrics file was not rewritten during the window (last written {})",
                relative_to(wb, began)
            ));
        }
    }
    let mut out = difference(&a.snapshot, &b.snapshot);
    if let (true, Some(wa), Some(wb), Value::Object(m)) =
        (a.own_time && b.own_time, a.written, b.written, &mut out)
    {
        let span_s = wb.duration_since(wa).unwrap_or_default().as_secs_f64();
        m.insert(SPAN_FIELD.into(), json!(span_s));
    }
    out
}

/// The field of a window's difference that holds the span its readings cover, in seconds.
pub const SPAN_FIELD: &str = "span_s";

/// `N ms before it began` / `N ms after it began, and not since`.
fn relative_to(at: SystemTime, began: SystemTime) -> String {
    match began.duration_since(at) {
        Ok(d) => format!("{} ms before it began", d.as_millis()),
        Err(e) => format!(
            "{} ms after it began, and not since",
            e.duration().as_millis()
        ),
    }
}

/// A JSON snapshot's window: numeric leaves subtracted, except two top-level objects a
/// target may add: `gauges` (values now: the end's are kept) and `histograms` (name →
/// HdrHistogram since the start, V2-deflate + base64: each becomes the window's summary, its
/// histogram under `hdr`), so one target reports several named histograms.
fn json_window(before: &Value, after: &Value) -> Value {
    let mut out = json_difference(Some(before), after);
    if let Value::Object(m) = &mut out {
        m.remove(WRITTEN_FIELD);
    }
    if let (Some(g), Value::Object(m)) = (after.get("gauges"), &mut out) {
        m.insert("gauges".into(), g.clone());
    }
    if let (Some(Value::Object(hists)), Value::Object(m)) = (after.get("histograms"), &mut out) {
        let window: Map<String, Value> = hists
            .iter()
            .map(|(name, end)| {
                let start = before.get("histograms").and_then(|h| h.get(name));
                (name.clone(), hist_window(start, end))
            })
            .collect();
        m.insert("histograms".into(), Value::Object(window));
    }
    out
}

/// The window of one named histogram: its summary plus the window's histogram (`hdr`).
fn hist_window(start: Option<&Value>, end: &Value) -> Value {
    use crate::record::hist_b64::{decode, encode};
    let decoded = |v: &Value| {
        v.as_str()
            .ok_or("not a string".to_string())
            .and_then(|t| decode(t).map_err(|e| e.to_string()))
    };
    let mut window = match decoded(end) {
        Ok(h) => h,
        Err(e) => return unavailable(&format!("the histogram at the window's end: {e}")),
    };
    if let Some(start) = start {
        let subtracted =
            decoded(start).and_then(|a| window.subtract(&a).map_err(|e| format!("{e:?}")));
        if let Err(e) = subtracted {
            return unavailable(&format!(
                "the histogram at the window's end does not contain the one at its start ({e}); was the target restarted?"
            ));
        }
    }
    let mut summary = hist_summary(&window);
    summary["hdr"] = json!(encode(&window));
    summary
}

/// A difference that could not be taken: `note` says why (the reports show it in place of
/// the figures).
fn unavailable(why: &str) -> Value {
    json!({"note": format!("unavailable: {why}")})
}

fn json_difference(before: Option<&Value>, after: &Value) -> Value {
    match after {
        Value::Number(n) => {
            let a = before.and_then(Value::as_f64).unwrap_or(0.0);
            let b = n.as_f64().unwrap_or(0.0);
            match (before.and_then(Value::as_i64), n.as_i64()) {
                (Some(x), Some(y)) => json!(y - x),
                (None, Some(y)) if before.is_none_or(|v| !v.is_number()) => json!(y),
                _ => json!(b - a),
            }
        }
        Value::Object(m) => {
            let out: Map<String, Value> = m
                .iter()
                .map(|(k, v)| (k.clone(), json_difference(before.and_then(|b| b.get(k)), v)))
                .collect();
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| json_difference(before.and_then(|b| b.get(i)), v))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A histogram's count and percentiles, in the unit the target recorded.
pub fn hist_summary(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!({"count": 0});
    }
    let q = |p: f64| h.value_at_quantile(p);
    json!({
        "count": h.len(),
        "mean": h.mean(),
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "p999": q(0.999),
        "max": h.max(),
    })
}

/// Host, port and path of an `http://` (or `memcache://`) URL on loopback (nothing else is
/// reached).
pub fn parse_url(url: &str) -> Result<(SocketAddr, String), MetricsError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix(super::memcached::SCHEME))
        .ok_or_else(|| MetricsError::NotHttp(url.into()))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].to_string()),
        None => (rest, "/".to_string()),
    };
    let with_port = if authority
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        authority.to_string()
    } else {
        format!("{authority}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| MetricsError::HostPort(url.into()))?;
    if !addr.ip().is_loopback() {
        return Err(MetricsError::NotLoopback(url.into()));
    }
    Ok((addr, path))
}

/// Largest answer (head and body) a metrics URL may give, bytes: a metrics document is
/// small, and a bound keeps a runaway endpoint from taking the runner's memory.
pub const MAX_METRICS_ANSWER: usize = 16 * 1024 * 1024;
/// Longest a metrics URL may take to answer in all (connect, request, whole answer).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// GETs a URL on loopback over plain HTTP/1.0 and parses the body as JSON: at most
/// [`MAX_METRICS_ANSWER`] bytes within 2 s; a body framed by Content-Length or chunks must be
/// whole.
pub fn http_get_json(url: &str) -> Result<Value, MetricsError> {
    let (addr, path) = parse_url(url)?;
    let until = Instant::now() + ANSWER_WAIT;
    let mut stream = TcpStream::connect_timeout(&addr, ANSWER_WAIT)
        .map_err(|source| io_error("cannot connect to", url, source))?;
    let _ = stream.set_write_timeout(Some(ANSWER_WAIT));
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|source| io_error("writing to", url, source))?;
    let body = read_answer(url, &mut stream, until)?;
    json_body(url, &body)
}

/// The body as JSON (surrounding white space allowed).
pub fn json_body(url: &str, body: &[u8]) -> Result<Value, MetricsError> {
    serde_json::from_slice(body.trim_ascii()).map_err(|source| MetricsError::AnswerJson {
        url: url.into(),
        source,
    })
}

fn io_error(doing: &'static str, url: &str, source: std::io::Error) -> MetricsError {
    MetricsError::Io {
        doing,
        url: url.into(),
        source,
    }
}

/// Reads the answer until it is whole (or the peer closes), bounded in bytes and time: its
/// body.
fn read_answer(url: &str, stream: &mut TcpStream, until: Instant) -> Result<Vec<u8>, MetricsError> {
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut answer = Answer::new(url);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(MetricsError::Timeout {
                url: url.into(),
                bytes: raw.len(),
            });
        }
        let _ = stream.set_read_timeout(Some(left));
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_error("reading", url, e)),
        };
        if raw.len() + n > MAX_METRICS_ANSWER {
            return Err(MetricsError::TooLarge(url.into()));
        }
        raw.extend_from_slice(&buf[..n]);
        if let Some(body) = answer.take(&raw, n == 0)? {
            return Ok(body);
        }
    }
}

/// One answer being framed by the load's own HTTP/1.1 parser ([`http1::Framer`], here reading
/// a body without a length to the close), its body collected as it is framed.
struct Answer<'u> {
    url: &'u str,
    framer: http1::Framer,
    body: Vec<u8>,
}

impl<'u> Answer<'u> {
    fn new(url: &'u str) -> Self {
        Answer {
            url,
            framer: http1::Framer::for_one_answer(MAX_METRICS_ANSWER as u64),
            body: Vec::new(),
        }
    }

    /// Frames `raw`, all the answer's bytes so far (`closed`: the peer closed after them):
    /// the body once the answer is whole and says 200, `None` while it may still grow, an
    /// error naming the URL otherwise.
    fn take(&mut self, raw: &[u8], closed: bool) -> Result<Option<Vec<u8>>, MetricsError> {
        let url = self.url.to_string();
        let frame = if closed {
            self.framer.at_close(raw, false, &mut self.body)
        } else {
            self.framer.frame_into(raw, false, &mut self.body)
        };
        match frame {
            Frame::Incomplete if closed && !raw.windows(4).any(|w| w == b"\r\n\r\n") => {
                Err(MetricsError::NoHeader(url))
            }
            Frame::Incomplete if closed => Err(MetricsError::Truncated {
                url,
                bytes: raw.len(),
            }),
            Frame::Incomplete => Ok(None),
            Frame::Done { status: 200, .. } => Ok(Some(std::mem::take(&mut self.body))),
            Frame::Done { .. } => {
                let status = raw.split(|&b| b == b'\n').next().unwrap_or_default();
                let status = status.strip_suffix(b"\r").unwrap_or(status);
                let shown = String::from_utf8_lossy(&status[..status.len().min(200)]);
                Err(MetricsError::Status {
                    url,
                    status: shown.into_owned(),
                })
            }
            Frame::Invalid(kind) => Err(MetricsError::Invalid { url, kind }),
        }
    }
}

/// What a malformed answer of [`http1::Framer`] means, in a sentence.
fn invalid_answer(kind: &http1::Malformed) -> String {
    use http1::Malformed;
    match kind {
        Malformed::TeAndContentLength => {
            "the answer has both Transfer-Encoding and Content-Length, \
             a sign of response splitting (RFC 9112 §6.3): refused, as the load refuses it"
                .to_string()
        }
        Malformed::ConflictingContentLength => {
            "the answer has two different Content-Length values".to_string()
        }
        Malformed::BadChunk => "a bad chunk in the chunked body (a size that is not hexadecimal, \
             a line over 4 KiB, or data not followed by CRLF)"
            .to_string(),
        Malformed::BodyTooLarge => format!(
            "the body is over {} MiB; a metrics endpoint should answer a small JSON document",
            MAX_METRICS_ANSWER >> 20
        ),
        Malformed::Unexpected101 => "the answer switches protocols (101)".to_string(),
        Malformed::BadResponse => "the answer is not HTTP/1.x (a bad status line, header field or \
             Content-Length, or a head over 64 KiB)"
            .to_string(),
        Malformed::NoLength => "the answer's length cannot be told".to_string(),
    }
}

/// The body of a whole answer `raw` of `url` (the bytes it sent until it closed): what a
/// test or fuzz target feeds the reader without a socket.
pub fn answer_body(url: &str, raw: &[u8]) -> Result<Vec<u8>, MetricsError> {
    let body = Answer::new(url).take(raw, true)?;
    Ok(body.expect("at the close an answer is whole or an error"))
}

/// Every numeric leaf of a JSON value as `a.b.c = x` pairs (for the report).
pub fn leaves(value: &Value) -> Vec<(String, f64)> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<(String, f64)>) {
        let join = |k: &str| {
            if prefix.is_empty() {
                k.to_string()
            } else {
                format!("{prefix}.{k}")
            }
        };
        match v {
            Value::Number(n) => out.push((prefix.to_string(), n.as_f64().unwrap_or(f64::NAN))),
            Value::Object(m) => m.iter().for_each(|(k, v)| walk(&join(k), v, out)),
            Value::Array(a) => a
                .iter()
                .enumerate()
                .for_each(|(i, v)| walk(&join(&i.to_string()), v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_leaves_are_subtracted() {
        let a = Snapshot::Json(
            json!({"threads": {"t0": {"busy_ns": 100, "loops": 5}}, "up": 1.5, "v": "x"}),
        );
        let b = Snapshot::Json(
            json!({"threads": {"t0": {"busy_ns": 350, "loops": 9}, "t1": {"loops": 2}}, "up": 2.0, "v": "y"}),
        );
        let d = difference(&a, &b);
        assert_eq!(d["threads"]["t0"]["busy_ns"], 250);
        assert_eq!(d["threads"]["t0"]["loops"], 4);
        assert_eq!(d["threads"]["t1"]["loops"], 2);
        assert_eq!(d["up"], 0.5);
        assert_eq!(d["v"], "y");
    }

    #[test]
    fn a_histogram_log_gives_the_windows_histogram() {
        let mut start = Histogram::<u64>::new(3).unwrap();
        start.record_n(1_000, 50).unwrap();
        let mut end = start.clone();
        end.record_n(9_000, 10).unwrap();
        let d = difference(&Snapshot::Hist(start), &Snapshot::Hist(end));
        assert_eq!(d["count"], 10);
        assert!((8_990..=9_010).contains(&d["p50"].as_u64().unwrap()), "{d}");
    }

    #[test]
    fn named_histograms_give_their_windows_and_gauges_keep_their_end() {
        use crate::record::hist_b64::{decode, encode};
        let mut start = Histogram::<u64>::new(3).unwrap();
        start.record_n(1_000, 50).unwrap();
        let mut end = start.clone();
        end.record_n(9_000, 10).unwrap();
        let a = json!({"counters": {"loops": 5}, "gauges": {"inflight": 3},
            "histograms": {"rtt": encode(&start)}});
        let b = json!({"counters": {"loops": 8}, "gauges": {"inflight": 2},
            "histograms": {"rtt": encode(&end), "new": encode(&start)}});
        let d = difference(&Snapshot::Json(a), &Snapshot::Json(b));
        assert_eq!(d["counters"]["loops"], 3);
        assert_eq!(d["gauges"]["inflight"], 2);
        assert_eq!(d["histograms"]["rtt"]["count"], 10);
        assert_eq!(d["histograms"]["new"]["count"], 50);
        let window = decode(d["histograms"]["rtt"]["hdr"].as_str().unwrap()).unwrap();
        assert_eq!(window.len(), 10);
        // A restarted target: the end holds less than the start.
        let c = json!({"histograms": {"rtt": encode(&end)}});
        let e = json!({"histograms": {"rtt": encode(&start)}});
        let d = difference(&Snapshot::Json(c), &Snapshot::Json(e));
        assert!(d["histograms"]["rtt"]["note"]
            .as_str()
            .unwrap()
            .contains("unavailable"));
    }

    fn reading(v: Value, written_ms: Option<u64>, own_time: bool) -> Reading {
        Reading {
            snapshot: Snapshot::Json(v),
            written: written_ms.map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            own_time,
        }
    }

    #[test]
    fn a_file_not_rewritten_during_the_window_is_unavailable() {
        let t = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let a = reading(json!({"ops": 5}), Some(9_700), false);
        let d = window_difference(Ok(&a), Ok(&a.clone()), t(10_000));
        assert_eq!(
            d["note"],
            "unavailable: the metrics file was not rewritten during the window (last written 300 ms before it began)"
        );
        let b = reading(json!({"ops": 5}), Some(10_150), false);
        let d = window_difference(Ok(&b), Ok(&b.clone()), t(10_000));
        let note = d["note"].as_str().unwrap();
        assert!(
            note.contains("150 ms after it began, and not since"),
            "{note}"
        );
        // Rewritten (mtime only): the plain difference, 0 included, and no span.
        let c = reading(json!({"ops": 5}), Some(11_100), false);
        let d = window_difference(Ok(&a), Ok(&c), t(10_000));
        assert_eq!(d["ops"], 0);
        assert!(d.get(SPAN_FIELD).is_none());
        // An endpoint answers for now: never stale.
        let e = reading(json!({"ops": 5}), None, false);
        let f = reading(json!({"ops": 9}), None, false);
        assert_eq!(window_difference(Ok(&e), Ok(&f), t(10_000))["ops"], 4);
    }

    #[test]
    fn own_timestamps_give_the_span_the_difference_covers() {
        let t = |ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(ms);
        let a = reading(
            json!({"threads": {"t": {"ops": 100}}, WRITTEN_FIELD: 10_100_000_000u64}),
            Some(10_100),
            true,
        );
        let b = reading(
            json!({"threads": {"t": {"ops": 500}}, WRITTEN_FIELD: 10_900_000_000u64}),
            Some(10_900),
            true,
        );
        let d = window_difference(Ok(&a), Ok(&b), t(10_000));
        assert_eq!(d["threads"]["t"]["ops"], 400, "{d}");
        assert!((d[SPAN_FIELD].as_f64().unwrap() - 0.8).abs() < 1e-9, "{d}");
        assert!(d.get(WRITTEN_FIELD).is_none(), "{d}");
    }

    /// A file rewritten 300 ms from now by another thread (as a target does), and its source.
    fn file_rewritten_later(first: &Value, second: Value) -> (tempfile::TempDir, MetricsSource) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        std::fs::write(&path, first.to_string()).unwrap();
        let later = path.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::write(later, second.to_string()).unwrap();
        });
        let format = MetricsFormat::Json;
        (dir, MetricsSource::File { path, format })
    }

    #[test]
    fn a_file_dated_by_itself_is_read_at_the_window_end_as_it_is() {
        let now_ns = |ms: u64| {
            let t = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap();
            (t.as_nanos() as u64).saturating_sub(ms * 1_000_000)
        };
        let start = reading(json!({"calls": 1}), None, true);
        // Dated by itself and newer than the start: its counts and time go together, so it
        // is read now, not after the next rewrite (which would come after the load stopped).
        let dated = json!({"calls": 7, WRITTEN_FIELD: now_ns(10)});
        let (_d, source) =
            file_rewritten_later(&dated, json!({"calls": 9, WRITTEN_FIELD: now_ns(0)}));
        let start_at = SystemTime::UNIX_EPOCH + Duration::from_nanos(now_ns(500));
        let start = Reading {
            written: Some(start_at),
            ..start
        };
        let end = source.snapshot_at_end(Some(&start)).unwrap();
        assert!(matches!(&end.snapshot, Snapshot::Json(v) if v["calls"] == 7));
        assert!(end.own_time);
        // Not rewritten since the start: it waits for the rewrite.
        let dated_old = json!({"calls": 7, WRITTEN_FIELD: now_ns(1000)});
        let (_d, source) = file_rewritten_later(&dated_old, json!({"calls": 9}));
        let end = source.snapshot_at_end(Some(&start)).unwrap();
        assert!(matches!(&end.snapshot, Snapshot::Json(v) if v["calls"] == 9));
        // No time of its own (an mtime only): it waits for the rewrite.
        let (_d, source) = file_rewritten_later(&json!({"calls": 7}), json!({"calls": 9}));
        let end = source.snapshot_at_end(None).unwrap();
        assert!(matches!(&end.snapshot, Snapshot::Json(v) if v["calls"] == 9));
    }

    #[test]
    fn only_loopback_urls() {
        assert!(parse_url("http://127.0.0.1:9/metrics").is_ok());
        assert!(parse_url("http://[::1]:9/").is_ok());
        let err = parse_url("http://192.0.2.1:9/").unwrap_err().to_string();
        assert!(err.contains("loopback"), "{err}");
        assert!(parse_url("https://127.0.0.1/").is_err());
    }

    #[test]
    fn chunked_bodies_are_joined_as_bytes() {
        let url = "http://127.0.0.1:9/m";
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let whole = |b: &[u8]| answer_body(url, &[&head[..], b].concat()).unwrap();
        assert_eq!(whole(b"3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n"), b"{\"a\":1}");
        // A chunk boundary inside a two-byte character, extensions and trailers.
        let split = "{\"\u{e9}\":1}".as_bytes();
        let mut body = b"3;x=y\r\n".to_vec();
        body.extend_from_slice(&split[..3]);
        body.extend_from_slice(b"\r\n5\r\n");
        body.extend_from_slice(&split[3..]);
        body.extend_from_slice(b"\r\n0\r\nX-T: 1\r\n\r\n");
        assert_eq!(whole(&body), split);
        for cut in 0..body.len() {
            let e = answer_body(url, &[&head[..], &body[..cut]].concat())
                .unwrap_err()
                .to_string();
            assert!(e.contains("ends before its body is whole"), "{cut}: {e}");
        }
    }

    #[test]
    fn bad_chunks_and_framing_are_errors_naming_the_url() {
        let url = "http://127.0.0.1:9/m";
        let answer = |rest: &str| answer_body(url, format!("HTTP/1.1 200 OK\r\n{rest}").as_bytes());
        let e = answer("Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\nab\r\n0\r\n\r\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with(url) && e.contains("a bad chunk"), "{e}");
        let e = answer("Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ends before its body is whole"), "{e}");
        let e = answer("Transfer-Encoding: chunked\r\n\r\n2\r\n{}xx0\r\n\r\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("a bad chunk"), "{e}");
        let e = answer("Content-Length: 10\r\n\r\n{}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("ends before its body is whole"), "{e}");
        assert_eq!(answer("Content-Length: 2\r\n\r\n{}tail").unwrap(), b"{}");
        assert_eq!(answer("\r\n{}").unwrap(), b"{}");
        let e = answer("Content-Length: x\r\n\r\n{}")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not HTTP/1.x"), "{e}");
        let e = answer_body(url, b"HTTP/1.1 500 Oops\r\n\r\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("answered \"HTTP/1.1 500 Oops\""), "{e}");
        let e = answer_body(url, b"HTTP/1.1 200 OK\r\nX: y")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no HTTP header"), "{e}");
        let huge = format!(
            "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            MAX_METRICS_ANSWER + 1
        );
        assert!(answer(&huge)
            .unwrap_err()
            .to_string()
            .contains("over 16 MiB"));
    }

    /// Both framings at once: the load refuses such a reply (`http_te_and_content_length`);
    /// the metrics reader used to pick the chunks and go on.
    const TE_AND_CL: &[u8] = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\
        Content-Length: 15\r\n\r\n7\r\n{\"a\":1}\r\n0\r\n\r\n";

    #[test]
    fn an_answer_with_transfer_encoding_and_content_length_is_refused_as_the_load_refuses_it() {
        let url = "http://127.0.0.1:9/m";
        let e = answer_body(url, TE_AND_CL).unwrap_err().to_string();
        assert!(
            e.starts_with(url) && e.contains("both Transfer-Encoding and Content-Length"),
            "{e}"
        );
        // The load's connections frame with the same parser.
        assert_eq!(
            http1::parse_response(TE_AND_CL),
            Frame::Invalid(http1::Malformed::TeAndContentLength)
        );
    }

    #[test]
    fn a_metrics_url_answering_with_both_framings_is_an_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut request = [0u8; 1024];
            let _ = s.read(&mut request);
            s.write_all(TE_AND_CL).unwrap();
        });
        let e = http_get_json(&url).unwrap_err().to_string();
        server.join().unwrap();
        assert!(
            e.contains("both Transfer-Encoding and Content-Length"),
            "{e}"
        );
    }

    #[test]
    fn memcached_stats_window_subtracts_counters_and_keeps_gauges() {
        use crate::observe::memcached::parse_stats;
        let a =
            parse_stats(b"STAT cmd_get 100\r\nSTAT threads 4\r\nSTAT rusage_user 1.5\r\nEND\r\n");
        let b =
            parse_stats(b"STAT cmd_get 250\r\nSTAT threads 4\r\nSTAT rusage_user 2.0\r\nEND\r\n");
        let w = difference(&Snapshot::Json(a.unwrap()), &Snapshot::Json(b.unwrap()));
        assert_eq!(w["cmd_get"], 150);
        assert_eq!(w["rusage_user"], 0.5);
        assert_eq!(w["gauges"]["threads"], 4);
    }

    #[test]
    fn memcached_is_read_on_loopback_only() {
        assert!(parse_url("memcache://192.0.2.1:11211")
            .unwrap_err()
            .to_string()
            .contains("loopback"));
        assert!(parse_url("memcache://127.0.0.1:11211").is_ok());
    }
}
