//! `--metrics-listen ADDR`: the running step's figures as an OpenMetrics/Prometheus endpoint,
//! encoded by the `prometheus-client` crate and served by small blocking threads (a GET
//! answered with the exposition; no web framework for one read-only page): one per scrape,
//! at most [`MAX_SCRAPES`] at once, each reading at most [`MAX_REQUEST_BYTES`] of request head
//! within 2 s, so a stalled or hostile scraper delays no other.
//!
//! Families, each labelled `target`, `placement`, `clients`, `rep` (one series per step):
//! `stairbench_requests_total` (requests completed in the measured window, from the per-second
//! histograms), `stairbench_throughput_rps` and `stairbench_inflight` (the last per-second
//! line), `stairbench_errors_total` (the per-second error count; by `kind` once the step ends,
//! from its result), `stairbench_latency_seconds` (a histogram of the window's latencies);
//! unlabelled, `stairbench_heap_bytes` (stairbench's own heap in use, for soaks).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;

use crate::exit::UsageError;
use crate::record::load::{IntervalLine, LoadReport};
use crate::sweep::progress::LiveStep;

/// A step's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    target: String,
    placement: String,
    clients: u64,
    rep: u64,
}

/// A step's labels and an error kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    target: String,
    placement: String,
    clients: u64,
    rep: u64,
    kind: String,
}

impl StepLabels {
    fn of(step: &LiveStep) -> StepLabels {
        StepLabels {
            target: step.target.clone(),
            placement: step.placement.clone(),
            clients: step.clients as u64,
            rep: step.rep as u64,
        }
    }

    fn with_kind(&self, kind: &str) -> ErrorLabels {
        ErrorLabels {
            target: self.target.clone(),
            placement: self.placement.clone(),
            clients: self.clients,
            rep: self.rep,
            kind: kind.to_string(),
        }
    }
}

/// Upper bounds of the latency buckets, seconds: 25 µs doubling to about 26 s.
fn latency_bounds_s() -> Vec<f64> {
    (0..21).map(|i| 25e-6 * f64::powi(2.0, i)).collect()
}

/// A latency histogram kept as the counts of its exposed buckets and their sum. Each
/// second's HdrHistogram is folded into the buckets as it comes (one pass over its counts),
/// so what the endpoint holds is fixed in size: a kept HdrHistogram would grow mid-run the
/// first time a latency landed in a higher range.
#[derive(Clone, Debug, Default)]
pub struct LatencyHistogram {
    buckets: Arc<Mutex<Buckets>>,
}

/// The counts of [`latency_bounds_s`]' buckets (one more for +Inf) and the latencies' sum.
#[derive(Debug, Default)]
struct Buckets {
    /// Latencies in each bucket (not cumulative), the last above every bound.
    counts: Vec<u64>,
    /// Sum of the latencies, ns.
    sum_ns: f64,
    /// Latencies added.
    len: u64,
}

impl LatencyHistogram {
    fn add(&self, other: &Histogram<u64>) {
        if other.is_empty() {
            return;
        }
        let Ok(mut b) = self.buckets.lock() else {
            return;
        };
        let bounds = latency_bounds_s();
        b.counts.resize(bounds.len() + 1, 0);
        let mut below_ns = 0u64;
        let mut counted = 0u64;
        for (i, bound_s) in bounds.iter().enumerate() {
            let bound_ns = (bound_s * 1e9) as u64;
            // (below, bound]: a latency on a bound is in that bound's bucket.
            let n = other.count_between(below_ns, bound_ns)
                - if below_ns == 0 {
                    0
                } else {
                    other.count_at(below_ns)
                };
            b.counts[i] += n;
            counted += n;
            below_ns = bound_ns;
        }
        b.counts[bounds.len()] += other.len() - counted.min(other.len());
        b.sum_ns += other.mean() * other.len() as f64;
        b.len += other.len();
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let b = self.buckets.lock().map_err(|_| std::fmt::Error)?;
        let bounds = latency_bounds_s().into_iter().chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(b.counts.iter().copied().chain(std::iter::repeat(0)))
            .collect();
        encoder.encode_histogram::<NoLabelSet>(b.sum_ns / 1e9, b.len, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// stairbench's own heap in use, read at each scrape: what glibc's allocator handed out and
/// has not had back (`mallinfo2`: `uordblks` + `hblkhd`). Unlike the resident set it leaves
/// out the free memory an arena keeps, so a soak tells a leak from fragmentation.
#[derive(Clone, Debug, Default)]
struct HeapBytes;

impl TypedMetric for HeapBytes {
    const TYPE: MetricType = MetricType::Gauge;
}

impl EncodeMetric for HeapBytes {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        // Safety: mallinfo2 takes no argument and only reads the allocator's counters.
        let m = unsafe { libc::mallinfo2() };
        encoder.encode_gauge(&((m.uordblks + m.hblkhd) as u64))
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// The metric families, shared by the endpoint's thread and the load.
#[derive(Clone, Default)]
struct Families {
    requests: Family<StepLabels, Counter>,
    errors_live: Family<StepLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    throughput: Family<StepLabels, Gauge<f64, AtomicU64>>,
    inflight: Family<StepLabels, Gauge>,
    latency: Family<StepLabels, LatencyHistogram>,
}

impl Families {
    fn registry(&self) -> Registry {
        let mut r = Registry::with_prefix("stairbench");
        r.register(
            "requests",
            "Requests completed in the step's measured window",
            self.requests.clone(),
        );
        r.register(
            "errors_live",
            "Failed requests of the step's measured window, all kinds, counted each second",
            self.errors_live.clone(),
        );
        r.register(
            "errors",
            "Failed requests of the finished step's measured window, by kind",
            self.errors.clone(),
        );
        r.register(
            "throughput_rps",
            "Requests completed per second in the step's last one-second interval",
            self.throughput.clone(),
        );
        r.register(
            "inflight",
            "Requests in flight at the end of the step's last one-second interval",
            self.inflight.clone(),
        );
        r.register(
            "latency_seconds",
            "Latency of the requests completed in the step's measured window",
            self.latency.clone(),
        );
        r.register(
            "heap_bytes",
            "stairbench's own heap in use (glibc mallinfo2: uordblks + hblkhd), read at the scrape",
            HeapBytes,
        );
        r
    }
}

/// A listening endpoint and the families it serves.
pub struct MetricsEndpoint {
    addr: SocketAddr,
    families: Families,
}

impl MetricsEndpoint {
    /// Listens on ADDR (PORT alone: 127.0.0.1:PORT) and serves from a thread. An address other
    /// hosts can reach is said on standard error: the endpoint has no authentication.
    pub fn listen(addr: &str) -> anyhow::Result<MetricsEndpoint> {
        let addr = resolve(addr)?;
        if !addr.ip().is_loopback() {
            eprintln!(
                "warning: --metrics-listen {addr} is reachable from other hosts and has no authentication; use 127.0.0.1:PORT (or an ssh tunnel) unless that is intended"
            );
        }
        let listener =
            TcpListener::bind(addr).with_context(|| format!("--metrics-listen {addr}"))?;
        let addr = listener.local_addr()?;
        let families = Families::default();
        let registry = families.registry();
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(listener, registry))
            .context("starting the metrics thread")?;
        Ok(MetricsEndpoint { addr, families })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A per-second line of a step: the window's lines (elapsed > 0) add to the requests,
    /// errors and latencies; every line sets the throughput and in-flight gauges.
    pub fn interval(&self, step: &LiveStep, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        let f = &self.families;
        let labels = StepLabels::of(step);
        f.throughput.get_or_create(&labels).set(line.ops_per_s);
        f.inflight
            .get_or_create(&labels)
            .set(i64::try_from(line.inflight).unwrap_or(i64::MAX));
        if line.elapsed_s > 0.0 {
            f.requests.get_or_create(&labels).inc_by(hist_ns.len());
            f.errors_live.get_or_create(&labels).inc_by(line.errors);
            f.latency.get_or_create(&labels).add(hist_ns);
        }
    }

    /// A step ended: its errors by kind, as its result counts them.
    pub fn done(&self, step: &LiveStep, load: &LoadReport) {
        let labels = StepLabels::of(step);
        for (kind, n) in &load.errors {
            self.families
                .errors
                .get_or_create(&labels.with_kind(kind))
                .inc_by(*n);
        }
    }
}

/// ADDR as a socket address: `PORT` (loopback), `HOST:PORT`, `[::1]:PORT`.
fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    let bad = || {
        UsageError(format!(
            "--metrics-listen {addr:?}: expected PORT or HOST:PORT, e.g. 127.0.0.1:9464"
        ))
    };
    if let Ok(port) = addr.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let mut addrs = addr.to_socket_addrs().map_err(|_| bad())?;
    Ok(addrs.next().ok_or_else(bad)?)
}

/// Most bytes of a request head a scraper may send; a longer one is answered 431.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a scraper has to send its request head (answered 408 after), and to take the
/// answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);
/// Scrapes answered at once, each on its own thread; one more is answered 503 at once.
pub const MAX_SCRAPES: usize = 16;

/// What a request head asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// `GET /metrics` (or `GET /`): the exposition.
    Metrics,
    /// Another method or path (404).
    Other,
    /// No request line (400).
    Malformed,
    /// A head over [`MAX_REQUEST_BYTES`] (431).
    TooLarge,
}

/// What the head in `got` asks for: `None` while it may still grow (no blank line yet, under
/// the limit, and `ended` false: the scraper has not closed its side).
pub fn parse_request(got: &[u8], ended: bool) -> Option<Asked> {
    let end = find(got, b"\r\n\r\n").or_else(|| find(got, b"\n\n"));
    match end {
        Some(at) if at > MAX_REQUEST_BYTES => return Some(Asked::TooLarge),
        None if got.len() >= MAX_REQUEST_BYTES => return Some(Asked::TooLarge),
        None if !ended => return None,
        _ => {}
    }
    let line = got.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line
        .split(u8::is_ascii_whitespace)
        .filter(|w| !w.is_empty());
    let (Some(method), Some(target)) = (words.next(), words.next()) else {
        return Some(Asked::Malformed);
    };
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    Some(match (method, path) {
        (b"GET", b"/metrics" | b"/") => Asked::Metrics,
        _ => Asked::Other,
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Answers every connection on a thread of its own, at most [`MAX_SCRAPES`] at once, until
/// the process ends: a scraper that stalls holds its own thread only.
fn serve(listener: TcpListener, registry: Registry) {
    let registry = Arc::new(registry);
    let active = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // Out of descriptors, say: a pause, not a busy loop.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_SCRAPES {
            active.fetch_sub(1, Ordering::SeqCst);
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = reply(&stream, "503 Service Unavailable", "text/plain", "busy\n");
            continue;
        }
        let (registry, done) = (registry.clone(), Active(active.clone()));
        let spawned = std::thread::Builder::new()
            .name("metrics-scrape".into())
            .spawn(move || {
                let _done = done;
                let _ = answer(stream, &registry);
            });
        // A thread that could not start dropped its `Active` with the closure.
        drop(spawned);
    }
}

/// One scrape in progress; dropping it (the scrape's end, or a panic) frees its place.
struct Active(Arc<AtomicUsize>);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads a request head of at most [`MAX_REQUEST_BYTES`] within [`SCRAPE_TIMEOUT`]; GET
/// /metrics (or /) gets the exposition, another path 404, a head too long 431, none in time
/// 408.
fn answer(stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_write_timeout(Some(SCRAPE_TIMEOUT))?;
    let until = Instant::now() + SCRAPE_TIMEOUT;
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    let asked = loop {
        let ended = match until.checked_duration_since(Instant::now()) {
            None => None,
            Some(left) if left.is_zero() => None,
            Some(left) => {
                stream.set_read_timeout(Some(left))?;
                let room = (MAX_REQUEST_BYTES + 4 - got.len()).min(buf.len());
                match (&stream).read(&mut buf[..room]) {
                    Ok(0) => Some(true),
                    Ok(n) => {
                        got.extend_from_slice(&buf[..n]);
                        Some(false)
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => Some(false),
                    Err(e) if is_timeout(&e) => None,
                    Err(e) => return Err(e),
                }
            }
        };
        let Some(ended) = ended else {
            let why = "no whole request head within 2 s\n";
            return reply(&stream, "408 Request Timeout", "text/plain", why);
        };
        if let Some(asked) = parse_request(&got, ended) {
            break asked;
        }
    };
    match asked {
        Asked::Metrics => {
            let mut body = String::new();
            prometheus_client::encoding::text::encode(&mut body, registry)
                .map_err(std::io::Error::other)?;
            let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
            reply(&stream, "200 OK", kind, &body)
        }
        Asked::Other => reply(
            &stream,
            "404 Not Found",
            "text/plain",
            "not found: GET /metrics\n",
        ),
        Asked::Malformed => reply(
            &stream,
            "400 Bad Request",
            "text/plain",
            "no request line\n",
        ),
        Asked::TooLarge => {
            let why = format!("the request head is over {MAX_REQUEST_BYTES} bytes\n");
            reply(
                &stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                &why,
            )
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// Writes a whole answer and closes.
fn reply(mut stream: &TcpStream, status: &str, kind: &str, body: &str) -> std::io::Result<()> {
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()?;
    // Whatever the scraper sent past its head is dropped; a shutdown (not a reset by the
    // close of a socket with unread bytes) lets it read the whole answer.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_every_latency_once() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for ns in [
            10_000,
            30_000,
            50_000,
            50_000,
            2_000_000_000,
            60_000_000_000,
        ] {
            h.record(ns).unwrap();
        }
        let f: Family<StepLabels, LatencyHistogram> = Family::default();
        let labels = StepLabels::of(&LiveStep::default());
        f.get_or_create(&labels).add(&h);
        let mut r = Registry::default();
        r.register("lat", "x", f.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        // Cumulative counts in bound order: 25 µs, 50 µs (inclusive), ... 3.28 s, ..., +Inf.
        let counts: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("lat_bucket"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(counts.len(), 22, "{text}");
        assert_eq!((counts[0], counts[1], counts[2]), (1, 4, 4), "{text}");
        assert_eq!((counts[16], counts[17], counts[20]), (4, 5, 5), "{text}");
        assert_eq!(counts[21], 6, "{text}");
        assert!(text.contains("le=\"+Inf\""), "{text}");
        // A second histogram adds to the first's buckets, sum and count.
        f.get_or_create(&labels).add(&h);
        let mut twice = String::new();
        prometheus_client::encoding::text::encode(&mut twice, &r).unwrap();
        assert!(twice.contains(" 12\n"), "{twice}");
        let bucket_1 = twice.lines().find(|l| l.starts_with("lat_bucket")).unwrap();
        assert!(bucket_1.ends_with(" 2"), "{twice}");
        assert!(
            text.contains("lat_count{target=\"\",placement=\"\",clients=\"0\",rep=\"0\"} 6"),
            "{text}"
        );
    }

    #[test]
    fn request_heads_are_bounded_and_read_as_bytes() {
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", false),
            Some(Asked::Metrics)
        );
        assert_eq!(
            parse_request(b"GET /?x=1 HTTP/1.0\n\n", false),
            Some(Asked::Metrics)
        );
        assert_eq!(
            parse_request(b"GET /metrics HTTP/1.1\r\nHost: x\r\n", false),
            None
        );
        // A scraper that closes after its request line is still answered.
        assert_eq!(
            parse_request(b"GET /metrics\r\n", true),
            Some(Asked::Metrics)
        );
        assert_eq!(
            parse_request(b"POST /metrics HTTP/1.1\r\n\r\n", false),
            Some(Asked::Other)
        );
        assert_eq!(
            parse_request(b"\xff\xfe /metrics\r\n\r\n", false),
            Some(Asked::Other)
        );
        assert_eq!(parse_request(b"\r\n\r\n", false), Some(Asked::Malformed));
        assert_eq!(parse_request(b"", true), Some(Asked::Malformed));
        let mut long = b"GET /".to_vec();
        long.resize(MAX_REQUEST_BYTES, b'a');
        assert_eq!(parse_request(&long[..MAX_REQUEST_BYTES - 1], false), None);
        assert_eq!(parse_request(&long, false), Some(Asked::TooLarge));
        long.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert_eq!(parse_request(&long, false), Some(Asked::TooLarge));
    }
}
