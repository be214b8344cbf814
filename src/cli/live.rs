//! What `load` and `run` show while they run, for tools outside: `--json-lines FILE|-` (every
//! per-second line as a JSON object, flushed as it comes, so `jq` or a plot can follow) and
//! `--metrics-listen ADDR` (see [`super::metrics`]). [`Live`] wraps the progress bar of a run
//! and feeds both.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::metrics::MetricsEndpoint;
use super::progress::Bar;
use crate::record::load::{IntervalLine, LoadReport};
use crate::record::steps::StepResult;
use crate::sweep::progress::{LiveStep, Progress};

/// The live outputs' options, shared by `load` and `run`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LiveArgs {
    /// Write every per-second line as a JSON object (one per line, flushed at once) to FILE,
    /// or to standard output with `-` (the human summary then goes to standard error).
    #[arg(long, value_name = "FILE|-")]
    pub json_lines: Option<PathBuf>,
    /// Serve OpenMetrics/Prometheus metrics of the running step at http://ADDR/metrics
    /// (ADDR: PORT or HOST:PORT; 127.0.0.1 when only a port is given, 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
}

impl LiveArgs {
    /// Whether the JSON lines go to standard output.
    pub fn json_lines_on_stdout(&self) -> bool {
        self.json_lines
            .as_deref()
            .is_some_and(|p| p.as_os_str() == "-")
    }

    /// Opens the outputs asked for (the file created, the endpoint listening, its URL said on
    /// standard error), so a bad path or a taken port fails before any load.
    pub fn open(&self) -> anyhow::Result<LiveOutputs> {
        let json_lines = self
            .json_lines
            .as_deref()
            .map(JsonLines::create)
            .transpose()?;
        let metrics = match &self.metrics_listen {
            Some(addr) => {
                let endpoint = MetricsEndpoint::listen(addr)?;
                eprintln!("metrics: http://{}/metrics", endpoint.addr());
                Some(endpoint)
            }
            None => None,
        };
        Ok(LiveOutputs {
            json_lines,
            metrics,
        })
    }
}

/// The open live outputs.
#[derive(Default)]
pub struct LiveOutputs {
    json_lines: Option<JsonLines>,
    metrics: Option<MetricsEndpoint>,
}

impl LiveOutputs {
    /// A per-second line of `step`.
    pub fn interval(&mut self, step: &LiveStep, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        if let Some(j) = &mut self.json_lines {
            j.line(step, line, hist_ns);
        }
        if let Some(m) = &self.metrics {
            m.interval(step, line, hist_ns);
        }
    }

    /// A step (or the load) ended with these figures: the exact error counts by kind.
    pub fn done(&mut self, step: &LiveStep, load: &LoadReport) {
        if let Some(m) = &self.metrics {
            m.done(step, load);
        }
    }
}

/// One JSON object per per-second line.
#[derive(Serialize)]
struct JsonLine<'a> {
    target: &'a str,
    placement: &'a str,
    clients: usize,
    rep: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_rps: Option<f64>,
    #[serde(flatten)]
    line: &'a IntervalLine,
    /// Requests completed in the interval (its histogram's count), for the lines of the
    /// measured window (the warm-up's lines carry no histogram).
    #[serde(skip_serializing_if = "Option::is_none")]
    requests: Option<u64>,
    /// Median latency of the interval, ms (absent when nothing completed).
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_ms: Option<f64>,
    /// 99th percentile latency of the interval, ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_ms: Option<f64>,
}

/// The `--json-lines` writer: every line flushed as written; a failed write (a reader that
/// went away) is said once and ends the output, not the load.
pub struct JsonLines {
    out: Option<Box<dyn Write + Send>>,
    path: String,
}

impl JsonLines {
    /// Creates FILE, or writes to standard output for `-`.
    pub fn create(path: &Path) -> anyhow::Result<JsonLines> {
        let out: Box<dyn Write + Send> = if path.as_os_str() == "-" {
            Box::new(std::io::stdout())
        } else {
            let file = std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?;
            Box::new(file)
        };
        Ok(JsonLines {
            out: Some(out),
            path: path.display().to_string(),
        })
    }

    /// Writes one line.
    pub fn line(&mut self, step: &LiveStep, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        let Some(out) = &mut self.out else { return };
        let in_window = line.elapsed_s > 0.0;
        let q = |p: f64| {
            (in_window && !hist_ns.is_empty()).then(|| hist_ns.value_at_quantile(p) as f64 / 1e6)
        };
        let record = JsonLine {
            target: &step.target,
            placement: &step.placement,
            clients: step.clients,
            rep: step.rep,
            rate_rps: step.rate_rps,
            line,
            requests: in_window.then(|| hist_ns.len()),
            p50_ms: q(0.5),
            p99_ms: q(0.99),
        };
        let written = serde_json::to_writer(&mut *out, &record)
            .map_err(std::io::Error::from)
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush());
        if let Err(e) = written {
            eprintln!("--json-lines {}: {e}; no more lines are written", self.path);
            self.out = None;
        }
    }
}

/// The progress of a run with its live outputs: the bar shows, the outputs export.
pub struct Live {
    /// The progress shown.
    pub inner: Bar,
    /// The outputs fed.
    pub outputs: LiveOutputs,
    /// `-v`: every per-second line on standard error too.
    pub verbose: bool,
}

impl Live {
    /// Wraps `inner`.
    pub fn new(inner: Bar, outputs: LiveOutputs, verbose: bool) -> Self {
        Live {
            inner,
            outputs,
            verbose,
        }
    }
}

impl Progress for Live {
    fn begin(&mut self, total: usize, done: usize) {
        self.inner.begin(total, done);
    }
    fn at(&mut self, at: &crate::sweep::progress::Position) {
        self.inner.at(at);
    }
    fn step(&mut self, label: &str) {
        self.inner.step(label);
    }
    fn live(&mut self, ops_per_s: f64) {
        self.inner.live(ops_per_s);
    }
    fn interval(&mut self, step: &LiveStep, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        if self.verbose {
            self.inner.line(&format!(
                "{} {} c={} rep {}: {:>6.1} s {:>11.1} ops/s {:>9} mean, {} in flight, {} errors",
                step.target,
                step.placement,
                step.clients,
                step.rep,
                line.elapsed_s,
                line.ops_per_s,
                crate::units::duration_us(line.mean_latency_ms * 1e3),
                line.inflight,
                line.errors
            ));
        }
        self.outputs.interval(step, line, hist_ns);
        self.inner.interval(step, line, hist_ns);
    }
    fn done(&mut self, step: &StepResult) {
        let live = LiveStep {
            target: step.target.clone(),
            placement: step.placement.clone(),
            clients: step.clients,
            rep: step.rep,
            rate_rps: step.rate_rps,
        };
        if let Some(load) = &step.load {
            self.outputs.done(&live, load);
        }
        self.inner.done(step);
    }
    fn note(&mut self, text: &str) {
        self.inner.note(text);
    }
    fn finish(&mut self) {
        self.inner.finish();
    }
}
