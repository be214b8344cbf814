//! `--metrics-listen ADDR`: the running step's figures as an OpenMetrics/Prometheus endpoint,
//! encoded by the `prometheus-client` crate and served by one small blocking thread (a GET
//! answered with the exposition; no web framework for one read-only page).
//!
//! Families, each labelled `target`, `placement`, `clients`, `rep` (one series per step):
//! `stairbench_requests_total` (requests completed in the measured window, from the per-second
//! histograms), `stairbench_throughput_rps` and `stairbench_inflight` (the last per-second
//! line), `stairbench_errors_total` (the per-second error count; by `kind` once the step ends,
//! from its result), `stairbench_latency_seconds` (a histogram of the window's latencies).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// A latency histogram kept as an HdrHistogram (ns) and exposed in classic buckets at each
/// scrape, so a second's thousands of latencies are added in one merge, not one by one.
#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    hist_ns: Arc<Mutex<Histogram<u64>>>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        let hist = Histogram::new(3).expect("3 significant digits is a valid precision");
        LatencyHistogram {
            hist_ns: Arc::new(Mutex::new(hist)),
        }
    }
}

impl LatencyHistogram {
    fn add(&self, other: &Histogram<u64>) {
        if let Ok(mut h) = self.hist_ns.lock() {
            let _ = h.add(other);
        }
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let h = self.hist_ns.lock().map_err(|_| std::fmt::Error)?;
        let mut buckets = Vec::new();
        let mut below_ns = 0u64;
        let mut counted = 0u64;
        for bound_s in latency_bounds_s() {
            let bound_ns = (bound_s * 1e9) as u64;
            let n = if h.is_empty() {
                0
            } else {
                h.count_between(below_ns, bound_ns)
                    - if below_ns == 0 {
                        0
                    } else {
                        h.count_at(below_ns)
                    }
            };
            buckets.push((bound_s, n));
            counted += n;
            below_ns = bound_ns;
        }
        buckets.push((f64::INFINITY, h.len() - counted.min(h.len())));
        let sum_s = h.mean() * h.len() as f64 / 1e9;
        encoder.encode_histogram::<NoLabelSet>(sum_s, h.len(), &buckets, None)
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

/// Answers each connection in turn until the process ends.
fn serve(listener: TcpListener, registry: Registry) {
    for stream in listener.incoming().flatten() {
        let _ = answer(stream, &registry);
    }
}

/// Reads one request's head; GET /metrics (or /) gets the exposition, anything else 404.
fn answer(stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut header = String::new();
    while reader.read_line(&mut header)? > 2 {
        header.clear();
    }
    let mut words = request_line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET", "/metrics" | "/") => {
            let mut body = String::new();
            prometheus_client::encoding::text::encode(&mut body, registry)
                .map_err(std::io::Error::other)?;
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body,
            )
        }
        _ => (
            "404 Not Found",
            "text/plain",
            "not found: GET /metrics\n".to_string(),
        ),
    };
    let mut stream = stream;
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
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
        r.register("lat", "x", f);
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
        assert!(
            text.contains("lat_count{target=\"\",placement=\"\",clients=\"0\",rep=\"0\"} 6"),
            "{text}"
        );
    }
}
