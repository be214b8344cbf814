//! Target-reported metrics: a JSON file or an HdrHistogram log the target writes (the
//! `{metrics}` placeholder), or a JSON endpoint on loopback. The step loop snapshots them at
//! both edges of the measured window and keeps the difference: numeric leaves subtracted,
//! and for a histogram log the histogram of the window.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

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
    /// An HTTP URL template on loopback.
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
    /// A loopback URL answering JSON.
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
    pub fn snapshot_fresh(&self) -> Result<Reading, String> {
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
    pub fn snapshot(&self) -> Result<Snapshot, String> {
        match self {
            MetricsSource::File { path, format } => {
                if *format == MetricsFormat::Hlog {
                    return crate::record::hlog::read_hlog_or_empty(path)
                        .map(Snapshot::Hist)
                        .map_err(|e| e.to_string());
                }
                let bytes = std::fs::read(path)
                    .map_err(|e| format!("cannot read the metrics file {}: {e}", path.display()))?;
                serde_json::from_slice(&bytes)
                    .map(Snapshot::Json)
                    .map_err(|e| format!("{} is not JSON: {e}", path.display()))
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
    before: Result<&Reading, &str>,
    after: Result<&Reading, &str>,
    began: SystemTime,
) -> Value {
    let (a, b) = match (before, after) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => return json!({ "note": why }),
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
            .and_then(decode)
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

/// Host, port and path of an `http://` URL on loopback (nothing else is reached).
pub fn parse_url(url: &str) -> Result<(SocketAddr, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?}: expected an http:// URL on 127.0.0.1"))?;
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
        .ok_or_else(|| format!("{url:?}: cannot read the host and port"))?;
    if !addr.ip().is_loopback() {
        return Err(format!(
            "{url:?}: metrics are read from loopback only (127.0.0.1, ::1, localhost)"
        ));
    }
    Ok((addr, path))
}

/// Largest answer (head and body) a metrics URL may give, bytes: a metrics document is
/// small, and a bound keeps a runaway endpoint from taking the runner's memory.
pub const MAX_METRICS_ANSWER: usize = 16 * 1024 * 1024;
/// Largest head of a metrics URL's answer, bytes.
const MAX_METRICS_HEAD: usize = 64 * 1024;
/// Longest a metrics URL may take to answer in all (connect, request, whole answer).
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// GETs a URL on loopback over plain HTTP/1.0 and parses the body as JSON: at most
/// [`MAX_METRICS_ANSWER`] bytes within 2 s; a body framed by Content-Length or chunks must be
/// whole.
pub fn http_get_json(url: &str) -> Result<Value, String> {
    let (addr, path) = parse_url(url)?;
    let until = Instant::now() + ANSWER_WAIT;
    let mut stream = TcpStream::connect_timeout(&addr, ANSWER_WAIT)
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let _ = stream.set_write_timeout(Some(ANSWER_WAIT));
    let request =
        format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("writing to {url}: {e}"))?;
    let body = read_answer(url, &mut stream, until)?;
    json_body(url, &body)
}

/// The body as JSON (surrounding white space allowed).
pub fn json_body(url: &str, body: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(body.trim_ascii()).map_err(|e| format!("{url} did not answer JSON: {e}"))
}

/// Reads the answer until its body is whole (or the peer closes), bounded in bytes and time.
fn read_answer(url: &str, stream: &mut TcpStream, until: Instant) -> Result<Vec<u8>, String> {
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut head = None;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "reading {url}: no whole answer within {} s ({} bytes came)",
                ANSWER_WAIT.as_secs_f64(),
                raw.len()
            ));
        }
        let _ = stream.set_read_timeout(Some(left));
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading {url}: {e}")),
        };
        if raw.len() + n > MAX_METRICS_ANSWER {
            return Err(format!(
                "{url}: the answer is over {} MiB; a metrics endpoint should answer a small JSON document",
                MAX_METRICS_ANSWER >> 20
            ));
        }
        raw.extend_from_slice(&buf[..n]);
        if head.is_none() {
            head = parse_head(url, &raw)?;
        }
        let Some(h) = &head else {
            if n == 0 {
                return Err(format!("{url}: the answer has no HTTP header"));
            }
            continue;
        };
        // A chunked body can only be whole when the bytes end a line; cheap to ask first.
        if n == 0 || h.framing != Framing::Chunked || raw.ends_with(b"\r\n") {
            if let Some(body) = body_of(url, h, &raw, n == 0)? {
                return Ok(body);
            }
        }
    }
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// After this many bytes.
    Length(usize),
    /// With a zero-size chunk.
    Chunked,
    /// When the peer closes.
    Close,
}

/// An answer's head, read.
#[derive(Debug, Clone, Copy)]
struct Head {
    /// Where the body starts.
    body_at: usize,
    framing: Framing,
}

/// The body of a whole answer `raw` of `url` (the bytes it sent until it closed): what a
/// test or fuzz target feeds the reader without a socket.
pub fn answer_body(url: &str, raw: &[u8]) -> Result<Vec<u8>, String> {
    match parse_head(url, raw)? {
        Some(h) => Ok(body_of(url, &h, raw, true)?.expect("a closed answer is whole or an error")),
        None => Err(format!("{url}: the answer has no HTTP header")),
    }
}

/// The head of the answer in `raw`, `None` while incomplete; a status other than 200, a
/// head over 64 KiB or a bad Content-Length is an error naming the URL.
fn parse_head(url: &str, raw: &[u8]) -> Result<Option<Head>, String> {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        if raw.len() > MAX_METRICS_HEAD {
            return Err(format!(
                "{url}: the answer's head is over {} KiB",
                MAX_METRICS_HEAD >> 10
            ));
        }
        return Ok(None);
    };
    let head = &raw[..end];
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let status = lines.next().unwrap_or_default();
    let code = status
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .nth(1);
    if code != Some(b"200".as_slice()) {
        let shown = String::from_utf8_lossy(&status[..status.len().min(200)]);
        return Err(format!("{url} answered {shown:?}"));
    }
    let mut framing = Framing::Close;
    for line in lines {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (line[..colon].trim_ascii(), line[colon + 1..].trim_ascii());
        if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value.rsplit(|&b| b == b',').next().unwrap_or_default();
            if last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                framing = Framing::Chunked;
            }
        } else if name.eq_ignore_ascii_case(b"content-length") && framing != Framing::Chunked {
            let n = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<usize>().ok());
            let Some(n) = n else {
                let shown = String::from_utf8_lossy(&value[..value.len().min(40)]);
                return Err(format!("{url}: bad Content-Length {shown:?}"));
            };
            framing = Framing::Length(n);
        }
    }
    Ok(Some(Head {
        body_at: end + 4,
        framing,
    }))
}

/// The body after `head` in `raw`: `None` while it may still grow (`closed` false).
fn body_of(url: &str, head: &Head, raw: &[u8], closed: bool) -> Result<Option<Vec<u8>>, String> {
    let body = &raw[head.body_at.min(raw.len())..];
    match head.framing {
        Framing::Length(n) if body.len() >= n => Ok(Some(body[..n].to_vec())),
        Framing::Length(n) if closed => Err(format!(
            "{url}: the body ends after {} of its {n} bytes (Content-Length)",
            body.len()
        )),
        Framing::Length(_) => Ok(None),
        Framing::Chunked => match dechunk(body) {
            Ok(Some(b)) => Ok(Some(b)),
            Ok(None) if closed => Err(format!(
                "{url}: the chunked body ends before its last chunk"
            )),
            Ok(None) => Ok(None),
            Err(e) => Err(format!("{url}: {e}")),
        },
        Framing::Close => Ok(closed.then(|| body.to_vec())),
    }
}

/// Longest chunk-size line (with its extensions), bytes.
const MAX_CHUNK_LINE: usize = 4096;

/// The bytes of a chunked body: `None` while its last chunk has not come, an error (where
/// and what) for a chunk size that is not hexadecimal or data not followed by CRLF. Bytes,
/// not text: a chunk may end inside a UTF-8 character.
pub fn dechunk(body: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let line_end = |at: usize| body[at..].windows(2).position(|w| w == b"\r\n");
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(eol) = line_end(at) else {
            if body.len() - at > MAX_CHUNK_LINE {
                return Err(format!(
                    "a chunk-size line at byte {at} is over {MAX_CHUNK_LINE} bytes"
                ));
            }
            return Ok(None);
        };
        let line = &body[at..at + eol];
        let size = line
            .split(|&b| b == b';')
            .next()
            .unwrap_or_default()
            .trim_ascii();
        let n = (!size.is_empty() && size.len() <= 15 && size.iter().all(u8::is_ascii_hexdigit))
            .then(|| usize::from_str_radix(std::str::from_utf8(size).expect("hex digits"), 16).ok())
            .flatten();
        let Some(n) = n else {
            let shown = line[..line.len().min(40)].escape_ascii();
            return Err(format!(
                "bad chunk size \"{shown}\" at byte {at} of the body"
            ));
        };
        at += eol + 2;
        if n == 0 {
            // Trailer fields, then the empty line that ends the body.
            loop {
                let Some(eol) = line_end(at) else {
                    return Ok(None);
                };
                if eol == 0 {
                    return Ok(Some(out));
                }
                at += eol + 2;
            }
        }
        if n > MAX_METRICS_ANSWER - out.len() {
            return Err(format!(
                "the chunked body is over {} MiB",
                MAX_METRICS_ANSWER >> 20
            ));
        }
        if body.len() - at < n + 2 {
            return Ok(None);
        }
        if &body[at + n..at + n + 2] != b"\r\n" {
            return Err(format!(
                "the chunk at byte {at} of the body is not followed by CRLF"
            ));
        }
        out.extend_from_slice(&body[at..at + n]);
        at += n + 2;
    }
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

    #[test]
    fn only_loopback_urls() {
        assert!(parse_url("http://127.0.0.1:9/metrics").is_ok());
        assert!(parse_url("http://[::1]:9/").is_ok());
        let err = parse_url("http://192.0.2.1:9/").unwrap_err();
        assert!(err.contains("loopback"), "{err}");
        assert!(parse_url("https://127.0.0.1/").is_err());
    }

    #[test]
    fn chunked_bodies_are_joined_as_bytes() {
        let whole = |b: &[u8]| dechunk(b).unwrap().unwrap();
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
            assert_eq!(dechunk(&body[..cut]), Ok(None), "{cut}");
        }
    }

    #[test]
    fn bad_chunks_and_framing_are_errors_naming_the_url() {
        let url = "http://127.0.0.1:9/m";
        let answer = |rest: &str| answer_body(url, format!("HTTP/1.1 200 OK\r\n{rest}").as_bytes());
        let e = answer("Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\nzz\r\nab\r\n0\r\n\r\n")
            .unwrap_err();
        assert!(
            e.starts_with(url) && e.contains("bad chunk size \"zz\" at byte 7"),
            "{e}"
        );
        let e = answer("Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n").unwrap_err();
        assert!(e.contains("ends before its last chunk"), "{e}");
        let e = answer("Transfer-Encoding: chunked\r\n\r\n2\r\n{}xx0\r\n\r\n").unwrap_err();
        assert!(e.contains("not followed by CRLF"), "{e}");
        let e = answer("Content-Length: 10\r\n\r\n{}").unwrap_err();
        assert!(e.contains("ends after 2 of its 10 bytes"), "{e}");
        assert_eq!(answer("Content-Length: 2\r\n\r\n{}tail").unwrap(), b"{}");
        assert_eq!(answer("\r\n{}").unwrap(), b"{}");
        let e = answer_body(url, b"HTTP/1.1 500 Oops\r\n\r\n").unwrap_err();
        assert!(e.contains("answered \"HTTP/1.1 500 Oops\""), "{e}");
        let huge = format!(
            "Transfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            MAX_METRICS_ANSWER + 1
        );
        assert!(answer(&huge).unwrap_err().contains("over 16 MiB"));
    }
}
