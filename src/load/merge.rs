//! Merging the loads of a step's parts (split instances, client groups) into the step's:
//! per-second lines merged line by line as they arrive, window signals turned into one
//! window, counts summed and HdrHistograms added exactly (never averaged percentiles).

use std::collections::VecDeque;
use std::sync::mpsc;

use hdrhistogram::Histogram;

use crate::record::load::{IntervalLine, IntervalSink, LoadReport};
use crate::record::rundir::StepSink;

/// What a part (instance or client group `k`) tells the thread that merges them.
pub enum Line {
    /// Part `k`'s per-second line.
    Interval(usize, IntervalLine, Histogram<u64>),
    /// A part's measured window started.
    WindowStarted,
    /// A part's measured window ended.
    WindowEnded,
}

/// Sends a part's lines and window signals to the thread that merges them.
pub struct ChannelSink {
    /// The part.
    pub k: usize,
    /// Where its lines go.
    pub tx: mpsc::Sender<Line>,
}

impl IntervalSink for ChannelSink {
    fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        let _ = self
            .tx
            .send(Line::Interval(self.k, line.clone(), hist_ns.clone()));
    }

    fn window_started(&mut self) {
        let _ = self.tx.send(Line::WindowStarted);
    }

    fn window_ended(&mut self) {
        let _ = self.tx.send(Line::WindowEnded);
    }
}

/// Turns the parts' window signals into the step's: started at the first part's start,
/// ended at the last part's end, so the observers cover every part's measured window.
pub struct WindowSpan {
    /// The parts.
    pub parts: usize,
    /// Parts whose window started.
    pub started: usize,
    /// Parts whose window ended.
    pub ended: usize,
}

impl WindowSpan {
    /// Passes a part's message on: its line to the merger, the step's window signals once.
    pub fn on(&mut self, msg: Line, merger: &mut LineMerger, sink: &mut dyn IntervalSink) {
        match msg {
            Line::Interval(k, line, hist) => merger.push(k, line, hist, sink),
            Line::WindowStarted => {
                self.started += 1;
                if self.started == 1 {
                    sink.window_started();
                }
            }
            Line::WindowEnded => {
                self.ended += 1;
                if self.ended == self.parts {
                    sink.window_ended();
                }
            }
        }
    }
}

/// Merges the instances' per-second lines: the i-th lines of all instances make the i-th
/// line of the step (the instances start together and tick at the same rate).
pub struct LineMerger {
    queues: Vec<VecDeque<(IntervalLine, Histogram<u64>)>>,
    sinks: Vec<Option<StepSink>>,
}

impl LineMerger {
    pub fn new(n: usize, sinks: Vec<Option<StepSink>>) -> Self {
        LineMerger {
            queues: vec![VecDeque::new(); n],
            sinks,
        }
    }

    pub fn push(
        &mut self,
        k: usize,
        line: IntervalLine,
        hist: Histogram<u64>,
        out: &mut dyn IntervalSink,
    ) {
        if let Some(Some(s)) = self.sinks.get_mut(k) {
            s.interval(&line, &hist);
        }
        self.queues[k].push_back((line, hist));
        while self.queues.iter().all(|q| !q.is_empty()) {
            self.emit(out);
        }
    }

    /// Lines left when the loads ended (an instance that ticked once more).
    pub fn flush(&mut self, out: &mut dyn IntervalSink) {
        while self.queues.iter().any(|q| !q.is_empty()) {
            self.emit(out);
        }
    }

    fn emit(&mut self, out: &mut dyn IntervalSink) {
        let row: Vec<(IntervalLine, Histogram<u64>)> = self
            .queues
            .iter_mut()
            .filter_map(VecDeque::pop_front)
            .collect();
        let (line, hist) = merge_lines(&row);
        out.interval(&line, &hist);
    }

    /// Flushes each part's own files; they are named `.partial` unless every part `complete`d.
    pub fn finish_instances(self, complete: bool) {
        for s in self.sinks.into_iter().flatten() {
            let _ = s.finish(complete);
        }
    }
}

/// One per-second line of the whole step from the instances' lines.
pub fn merge_lines(row: &[(IntervalLine, Histogram<u64>)]) -> (IntervalLine, Histogram<u64>) {
    let mut hist = row.first().map_or_else(
        || Histogram::new(3).expect("3 significant digits"),
        |r| r.1.clone(),
    );
    for (_, h) in row.iter().skip(1) {
        let _ = hist.add(h);
    }
    let ops: f64 = row.iter().map(|(l, _)| l.ops_per_s).sum();
    let mean_latency_ms = if !hist.is_empty() {
        hist.mean() / 1e6
    } else if ops > 0.0 {
        row.iter()
            .map(|(l, _)| l.mean_latency_ms * l.ops_per_s)
            .sum::<f64>()
            / ops
    } else {
        f64::NAN
    };
    let line = IntervalLine {
        elapsed_s: row
            .iter()
            .map(|(l, _)| l.elapsed_s)
            .fold(f64::MIN, f64::max),
        inflight: row.iter().map(|(l, _)| l.inflight).sum(),
        ops_per_s: ops,
        mb_per_s: row.iter().map(|(l, _)| l.mb_per_s).sum(),
        mean_latency_ms,
        errors: row.iter().map(|(l, _)| l.errors).sum(),
        per_core_busy: row
            .iter()
            .flat_map(|(l, _)| l.per_core_busy.clone())
            .collect(),
    };
    (line, hist)
}

/// Two parts' histograms that cannot be added (their ranges or precisions differ).
#[derive(Debug, thiserror::Error)]
#[error("merging histograms: {0:?}")]
pub struct MergeError(hdrhistogram::errors::AdditionError);

/// The parts' histograms added (None when a part gave none: an external tool's).
pub fn merged_hist(
    hists: &[Option<&Histogram<u64>>],
) -> Result<Option<Histogram<u64>>, MergeError> {
    let mut out: Option<Histogram<u64>> = None;
    for h in hists {
        let Some(h) = *h else { return Ok(None) };
        match &mut out {
            Some(o) => o.add(h).map_err(MergeError)?,
            None => out = Some(h.clone()),
        }
    }
    Ok(out)
}

/// Without histograms only the mean and the max merge exactly; percentiles are unavailable.
pub fn mean_only_latency(reports: &[&LoadReport]) -> crate::record::load::LatencyUs {
    let n: u64 = reports.iter().map(|r| r.requests).sum();
    let mean = reports
        .iter()
        .map(|r| r.latency_us.mean * r.requests as f64)
        .sum::<f64>()
        / n.max(1) as f64;
    crate::record::load::LatencyUs {
        mean,
        p50: f64::NAN,
        p90: f64::NAN,
        p95: f64::NAN,
        p99: f64::NAN,
        p999: f64::NAN,
        max: reports
            .iter()
            .map(|r| r.latency_us.max)
            .fold(f64::NAN, f64::max),
    }
}

/// The parts' reports summed: counts and rates added, latency left for the caller to fill.
pub fn sum_reports(reports: &[&LoadReport]) -> LoadReport {
    let sum_u = |f: fn(&LoadReport) -> u64| reports.iter().map(|r| f(r)).sum::<u64>();
    let sum_f = |f: fn(&LoadReport) -> f64| reports.iter().map(|r| f(r)).sum::<f64>();
    let connections: usize = reports.iter().map(|r| r.connections).sum();
    let mut errors = std::collections::BTreeMap::new();
    for r in reports {
        for (k, v) in &r.errors {
            *errors.entry(k.clone()).or_insert(0) += v;
        }
    }
    let mut error_statuses = std::collections::BTreeMap::new();
    for r in reports {
        for (code, n) in &r.error_statuses {
            *error_statuses.entry(*code).or_insert(0) += n;
        }
    }
    let any_rate = reports.iter().any(|r| r.rate_rps.is_some());
    let any_omitted = reports.iter().any(|r| r.omitted.is_some());
    LoadReport {
        schema: crate::record::load::SCHEMA_VERSION,
        // Each URL once (client groups share one); a step line lists its parts' URLs.
        url: reports.iter().fold(String::new(), |mut urls, r| {
            if !urls.split(' ').any(|u| u == r.url) {
                if !urls.is_empty() {
                    urls.push(' ');
                }
                urls.push_str(&r.url);
            }
            urls
        }),
        connections,
        threads: reports.iter().map(|r| r.threads).sum(),
        depth: reports.first().map_or(1, |r| r.depth),
        rate_rps: any_rate.then(|| sum_f(|r| r.rate_rps.unwrap_or(0.0))),
        requests: sum_u(|r| r.requests),
        sent: sum_u(|r| r.sent),
        resent: sum_u(|r| r.resent),
        error_ratio: crate::record::load::error_ratio(sum_u(|r| r.requests), &errors),
        redis_hits: reports.iter().map(|r| r.redis_hits).sum(),
        redis_misses: reports.iter().map(|r| r.redis_misses).sum(),
        errors,
        error_statuses,
        duration_s: reports.iter().map(|r| r.duration_s).fold(0.0, f64::max),
        throughput_rps: sum_f(|r| r.throughput_rps),
        bytes_sent: sum_u(|r| r.bytes_sent),
        bytes_received: sum_u(|r| r.bytes_received),
        connect_time_s: reports
            .iter()
            .map(|r| r.connect_time_s * r.connections as f64)
            .sum::<f64>()
            / connections.max(1) as f64,
        // The hosts open their connections at the same time: the slowest one's set-up.
        setup_s: reports.iter().map(|r| r.setup_s).fold(0.0, f64::max),
        latency_us: crate::record::load::LatencyUs::default(),
        // Uncorrected latencies come without their histogram: they cannot be merged exactly.
        uncorrected_latency_us: None,
        omitted: any_omitted.then(|| sum_u(|r| r.omitted.unwrap_or(0))),
        late_sends: any_omitted.then(|| sum_u(|r| r.late_sends.unwrap_or(0))),
        // Without the lag histograms, the worst instance's p99 bounds the merged one.
        send_lag_p99_us: reports
            .iter()
            .filter_map(|r| r.send_lag_p99_us)
            .reduce(f64::max),
        tls_handshakes: reports.iter().map(|r| r.tls_handshakes).sum(),
        tls_resumed: reports.iter().map(|r| r.tls_resumed).sum(),
        // The handshake percentiles come without their histograms: not merged.
        tls_handshake_us: None,
        grpc_stream: merge_streams(reports),
        client_cpu: crate::record::load::ClientCpu {
            user_s: sum_f(|r| r.client_cpu.user_s),
            sys_s: sum_f(|r| r.client_cpu.sys_s),
            per_core_busy: reports
                .iter()
                .flat_map(|r| r.client_cpu.per_core_busy.clone())
                .collect(),
            // Parts on different hosts or CPUs: the worst part's figure.
            busiest_thread_pct: reports
                .iter()
                .filter_map(|r| r.client_cpu.busiest_thread_pct)
                .reduce(f64::max),
            run_delay_pct: reports
                .iter()
                .filter_map(|r| r.client_cpu.run_delay_pct)
                .reduce(f64::max),
        },
        client_saturated: reports.iter().any(|r| r.client_saturated),
    }
}

/// The parts' stream figures summed (the first-message percentiles come without their
/// histograms: not merged); none when no part made streaming calls.
fn merge_streams(reports: &[&LoadReport]) -> Option<crate::record::load::StreamFigures> {
    let parts: Vec<_> = reports
        .iter()
        .filter_map(|r| r.grpc_stream.as_ref())
        .collect();
    let first = parts.first()?;
    Some(crate::record::load::StreamFigures {
        messages_per_call: first.messages_per_call,
        messages_sent: parts.iter().map(|p| p.messages_sent).sum(),
        messages_received: parts.iter().map(|p| p.messages_received).sum(),
        window_messages: parts.iter().map(|p| p.window_messages).sum(),
        messages_per_s: parts.iter().map(|p| p.messages_per_s).sum(),
        first_message_us: None,
    })
}
