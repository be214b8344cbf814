//! Split instances (seed 000's "left" and "right" halves): a target with `instances = N` runs
//! N copies of the server, each on an equal share of the server cpuset with its own port;
//! the load is split the same way and run concurrently, one share of the client cpuset per
//! instance. The step sums the instances: throughputs and counts added, HdrHistograms merged
//! exactly (latency recomputed from the merged histogram, never averaged percentiles), the
//! per-second lines merged line by line; each instance's own figures go to `per_instance`.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};

use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use super::driver::{Driver, InstanceAddr, StepLoad, StepRequest};
use super::error::StepError;
use super::plan::{ClientPlan, Plan, Series, TargetPlan};
use super::server::{instance_label, Launcher, Server};
use crate::observe::step::{InstanceInfo, ServerExtras};
use crate::placement::{CpuPair, PlacementSource};
use crate::record::load::{IntervalLine, IntervalSink, LoadReport};
use crate::record::rundir::{RunDir, StepSink};

/// `n` contiguous shares of `cpus`, as equal as the count allows (the first ones take the
/// remainder). Needs `cpus.len() >= n`.
pub fn split_cpus(cpus: &[usize], n: usize) -> Vec<Vec<usize>> {
    let n = n.max(1);
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    for k in 0..n {
        let len = share(cpus.len(), n, k);
        out.push(cpus[at..at + len].to_vec());
        at += len;
    }
    out
}

/// The client side's shares: like [`split_cpus`], or, with fewer CPUs than instances, the
/// CPUs taken in turn (clients may share a core; servers may not).
pub fn client_shares(cpus: &[usize], n: usize) -> Vec<Vec<usize>> {
    if cpus.len() >= n {
        split_cpus(cpus, n)
    } else if cpus.is_empty() {
        vec![Vec::new(); n]
    } else {
        (0..n).map(|k| vec![cpus[k % cpus.len()]]).collect()
    }
}

/// Part `k` of `total` split in `n`.
pub fn share(total: usize, n: usize, k: usize) -> usize {
    total / n + usize::from(k < total % n)
}

/// Refuses, before anything starts, a split target its placements cannot hold: more
/// instances than server CPUs, or fewer connections than instances.
pub fn check_fit(plan: &Plan, placements: &dyn PlacementSource) -> Result<(), String> {
    for target in plan.targets.iter().filter(|t| t.instances > 1) {
        let n = target.instances;
        let counts = match &plan.series {
            Series::Clients(c) => c.clone(),
            Series::Rates { clients, .. } | Series::Find { clients, .. } => vec![*clients],
        };
        if let Some(&c) = counts
            .iter()
            .find(|&&c| c * plan.connections_per_client < n)
        {
            return Err(format!(
                "target {:?} has instances = {n} but the step with {c} clients opens only {} connections: each instance needs at least one (raise clients or connections_per_client, or lower instances)",
                target.name,
                c * plan.connections_per_client
            ));
        }
        for placement in &plan.placements {
            for &c in &counts {
                let follow = plan.cpus_follow_clients.then_some(c);
                // A placement that cannot give cpusets skips its steps anyway.
                let Ok(cpus) = placements.cpus(placement, follow) else {
                    continue;
                };
                if cpus.server.len() < n {
                    return Err(format!(
                        "target {:?} has instances = {n} but placement {placement:?}{} gives the server {} CPU(s) ({}): each instance needs a CPU of its own; lower instances or use a placement with at least {n} server CPUs",
                        target.name,
                        follow.map_or(String::new(), |c| format!(" at {c} clients")),
                        cpus.server.len(),
                        crate::cpuset::format(&cpus.server)
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Starts the instances of split targets through an inner launcher (single targets pass).
pub struct SplitLauncher<L: Launcher> {
    /// Starts each instance.
    pub inner: L,
}

impl<L: Launcher> SplitLauncher<L> {
    fn instance(target: &TargetPlan, cpus: &CpuPair, k: usize) -> (TargetPlan, CpuPair) {
        let n = target.instances;
        let mut t = target.clone();
        t.instance = Some(k);
        t.port = target.port.map(|p| p + k as u16);
        let pair = CpuPair {
            server: split_cpus(&cpus.server, n).swap_remove(k),
            client: client_shares(&cpus.client, n).swap_remove(k),
        };
        (t, pair)
    }
}

impl<L: Launcher> Launcher for SplitLauncher<L> {
    fn launch(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        stop: &AtomicBool,
    ) -> Result<Box<dyn Server>, String> {
        let n = target.instances;
        if n <= 1 {
            return self.inner.launch(target, cpus, clients, stop);
        }
        if cpus.server.len() < n {
            return Err(format!(
                "{n} instances of target {:?} do not fit on {} server CPU(s)",
                target.name,
                cpus.server.len()
            ));
        }
        let mut parts = MultiServer { parts: Vec::new() };
        for k in 0..n {
            let (t, pair) = Self::instance(target, cpus, k);
            match self.inner.launch(&t, &pair, clients, stop) {
                Ok(s) => parts.parts.push(Part {
                    label: instance_label(&target.name, k),
                    server: s,
                    cpus: pair.server,
                }),
                Err(why) => {
                    parts.stop();
                    return Err(format!("instance {k} of {n}: {why}"));
                }
            }
        }
        Ok(Box::new(parts))
    }

    fn describe(&self, target: &TargetPlan, cpus: &CpuPair, clients: usize) -> String {
        if target.instances <= 1 || cpus.server.len() < target.instances {
            return self.inner.describe(target, cpus, clients);
        }
        (0..target.instances)
            .map(|k| {
                let (t, pair) = Self::instance(target, cpus, k);
                format!(
                    "[{}] {}",
                    t.instance.unwrap_or(k),
                    self.inner.describe(&t, &pair, clients)
                )
            })
            .collect::<Vec<_>>()
            .join("\n    server: ")
    }
}

struct Part {
    label: String,
    server: Box<dyn Server>,
    cpus: Vec<usize>,
}

/// The instances of a split target, ended together.
struct MultiServer {
    parts: Vec<Part>,
}

impl Server for MultiServer {
    /// None: no single process is the server; each instance is observed in `observed`.
    fn pid(&self) -> Option<i32> {
        None
    }
    fn port(&self) -> u16 {
        self.parts.first().map_or(0, |p| p.server.port())
    }
    fn died(&mut self) -> Option<String> {
        self.parts.iter_mut().find_map(|p| {
            p.server
                .died()
                .map(|why| format!("instance {}: {why}", p.label))
        })
    }
    fn stop(&mut self) {
        for p in &mut self.parts {
            p.server.stop();
        }
    }
    fn extras(&self) -> ServerExtras {
        let mut extras = ServerExtras::default();
        for p in &self.parts {
            extras.instances.push(InstanceInfo {
                label: p.label.clone(),
                pid: p.server.pid(),
                port: p.server.port(),
                cpus: p.cpus.clone(),
            });
            extras.metrics.extend(p.server.extras().metrics);
        }
        extras
    }
}

/// The instances' addresses of a step (empty for a single server).
pub fn addrs(extras: &ServerExtras, url_template: &str) -> Vec<InstanceAddr> {
    extras
        .instances
        .iter()
        .map(|i| InstanceAddr {
            port: i.port,
            url: url_template.replace("{port}", &i.port.to_string()),
        })
        .collect()
}

/// Makes a fresh driver (one per instance, inside its own thread).
pub type DriverFactory = Arc<dyn Fn() -> Result<Box<dyn Driver>, String> + Send + Sync>;

/// The factory of a plan's client.
pub fn driver_factory(client: &ClientPlan) -> DriverFactory {
    match client {
        ClientPlan::Engine { proto } => {
            let proto = proto.clone();
            Arc::new(move || {
                Ok(Box::new(super::driver::EngineDriver {
                    proto: proto.clone(),
                }) as Box<dyn Driver>)
            })
        }
        ClientPlan::Command {
            template,
            parser,
            options,
        } => {
            let (template, parser, options) = (template.clone(), parser.clone(), options.clone());
            Arc::new(move || {
                Ok(Box::new(super::driver::CommandDriver {
                    template: template.clone(),
                    parser: crate::load::external::by_name(&parser, &options)
                        .map_err(|e| e.to_string())?,
                }) as Box<dyn Driver>)
            })
        }
    }
}

/// Runs single steps with `single` and split ones with one driver per instance.
pub struct SplitDriver {
    /// The driver of unsplit steps.
    pub single: Box<dyn Driver>,
    /// Makes the instances' drivers.
    pub make: DriverFactory,
}

impl Driver for SplitDriver {
    fn live_intervals(&self) -> bool {
        self.single.live_intervals()
    }

    fn signals_window(&self, req: &StepRequest) -> bool {
        // Split parts forward their window signals through the channel; the step's window
        // runs from the first part's start to the last part's end.
        self.single.signals_window(req)
    }

    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        if req.instances.len() <= 1 {
            return self.single.run_step(req, sink, stop);
        }
        self.run_split(req, sink, stop)
    }
}

/// Instance `k`'s share of a step.
pub fn sub_request(req: &StepRequest, k: usize) -> StepRequest {
    let n = req.instances.len();
    let connections = share(req.connections, n, k);
    StepRequest {
        step_id: format!("{}.i{k}", req.step_id),
        url: req.instances[k].url.clone(),
        port: req.instances[k].port,
        clients: share(req.clients, n, k).max(1),
        connections,
        threads: share(req.threads, n, k).clamp(1, connections.max(1)),
        rate_rps: req.rate_rps.map(|r| r / n as f64),
        client_cpus: client_shares(&req.client_cpus, n).swap_remove(k),
        instances: Vec::new(),
        ..req.clone()
    }
}

/// What a part (instance or client group `k`) tells the thread that merges them.
pub(crate) enum Line {
    /// Part `k`'s per-second line.
    Interval(usize, IntervalLine, Histogram<u64>),
    /// A part's measured window started.
    WindowStarted,
    /// A part's measured window ended.
    WindowEnded,
}

/// Sends a part's lines and window signals to the thread that merges them.
pub(crate) struct ChannelSink {
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
struct WindowSpan {
    parts: usize,
    started: usize,
    ended: usize,
}

impl WindowSpan {
    fn on(&mut self, msg: Line, merger: &mut LineMerger, sink: &mut dyn IntervalSink) {
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

impl SplitDriver {
    /// Runs each instance's share in its own thread with its own driver; merges their lines
    /// as they come and their loads at the end.
    fn run_split(
        &self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        let n = req.instances.len();
        if req.connections < n {
            return Err(StepError::Load(format!(
                "{n} instances need at least {n} connections; this step opens {}",
                req.connections
            )));
        }
        let subs: Vec<StepRequest> = (0..n).map(|k| sub_request(req, k)).collect();
        let live = self.single.live_intervals();
        let mut merger = LineMerger::new(n, instance_sinks(&subs, req, live));
        let (tx, rx) = mpsc::channel::<Line>();
        let results: Vec<Result<StepLoad, StepError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = subs
                .iter()
                .enumerate()
                .map(|(k, sub)| {
                    let mut chan = ChannelSink { k, tx: tx.clone() };
                    let make = self.make.clone();
                    scope.spawn(move || {
                        make()
                            .map_err(StepError::Load)?
                            .run_step(sub, &mut chan, stop)
                    })
                })
                .collect();
            drop(tx);
            let mut span = WindowSpan {
                parts: n,
                started: 0,
                ended: 0,
            };
            for msg in rx {
                span.on(msg, &mut merger, sink);
            }
            merger.flush(sink);
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(StepError::Load("the load thread panicked".into())))
                })
                .collect()
        });
        merger.finish_instances();
        merge_loads(results, &subs)
    }
}

/// Each instance's own per-second CSV and histogram log (`<step>.iK`), when the run
/// directory can hold them.
pub(crate) fn instance_sinks(
    subs: &[StepRequest],
    req: &StepRequest,
    live: bool,
) -> Vec<Option<StepSink>> {
    let dir = RunDir::open(req.out_dir.clone()).ok();
    subs.iter()
        .map(|s| {
            let mut sink = dir.as_ref()?.step_sink(&s.step_id).ok()?;
            sink.log_histograms = live;
            Some(sink)
        })
        .collect()
}

/// Merges the instances' per-second lines: the i-th lines of all instances make the i-th
/// line of the step (the instances start together and tick at the same rate).
pub(crate) struct LineMerger {
    queues: Vec<VecDeque<(IntervalLine, Histogram<u64>)>>,
    sinks: Vec<Option<StepSink>>,
}

impl LineMerger {
    pub(crate) fn new(n: usize, sinks: Vec<Option<StepSink>>) -> Self {
        LineMerger {
            queues: vec![VecDeque::new(); n],
            sinks,
        }
    }

    pub(crate) fn push(
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
    pub(crate) fn flush(&mut self, out: &mut dyn IntervalSink) {
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

    pub(crate) fn finish_instances(self) {
        for s in self.sinks.into_iter().flatten() {
            let _ = s.finish();
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

/// The step's load from its instances' loads; when some failed, their errors joined, of the
/// first one's kind.
pub fn merge_loads(
    results: Vec<Result<StepLoad, StepError>>,
    subs: &[StepRequest],
) -> Result<StepLoad, StepError> {
    let mut loads = Vec::new();
    let mut failures = Vec::new();
    let mut kind = None;
    for (k, r) in results.into_iter().enumerate() {
        match r {
            Ok(l) => loads.push(l),
            Err(why) => {
                kind.get_or_insert(why.kind());
                failures.push(format!("instance {k} (port {}): {why}", subs[k].port));
            }
        }
    }
    if let Some(kind) = kind {
        return Err(StepError::new(kind, failures.join("; ")));
    }
    let reports: Vec<&LoadReport> = loads.iter().map(|l| &l.report).collect();
    let hist = merged_hist(&loads).map_err(StepError::Load)?;
    let mut report = sum_reports(&reports);
    report.latency_us = match &hist {
        Some(h) if !h.is_empty() => crate::record::load::latency_us(h),
        _ => mean_only_latency(&reports),
    };
    let per_instance: Vec<Value> = loads
        .iter()
        .zip(subs)
        .enumerate()
        .map(|(k, (l, sub))| instance_json(k, l, sub))
        .collect();
    let mut extra = Map::new();
    extra.insert("per_instance".into(), Value::Array(per_instance));
    Ok(StepLoad {
        report,
        hist_ns: hist,
        extra,
    })
}

/// The instances' histograms added (None when a driver gave none: an external tool's).
fn merged_hist(loads: &[StepLoad]) -> Result<Option<Histogram<u64>>, String> {
    let mut out: Option<Histogram<u64>> = None;
    for l in loads {
        let Some(h) = &l.hist_ns else { return Ok(None) };
        match &mut out {
            Some(o) => o.add(h).map_err(|e| format!("merging histograms: {e:?}"))?,
            None => out = Some(h.clone()),
        }
    }
    Ok(out)
}

/// Without histograms only the mean and the max merge exactly; percentiles are unavailable.
fn mean_only_latency(reports: &[&LoadReport]) -> crate::record::load::LatencyUs {
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

fn sum_reports(reports: &[&LoadReport]) -> LoadReport {
    let sum_u = |f: fn(&LoadReport) -> u64| reports.iter().map(|r| f(r)).sum::<u64>();
    let sum_f = |f: fn(&LoadReport) -> f64| reports.iter().map(|r| f(r)).sum::<f64>();
    let connections: usize = reports.iter().map(|r| r.connections).sum();
    let mut errors = std::collections::BTreeMap::new();
    for r in reports {
        for (k, v) in &r.errors {
            *errors.entry(k.clone()).or_insert(0) += v;
        }
    }
    let any_rate = reports.iter().any(|r| r.rate_rps.is_some());
    let any_omitted = reports.iter().any(|r| r.omitted.is_some());
    LoadReport {
        schema: crate::record::load::SCHEMA_VERSION,
        url: reports
            .iter()
            .map(|r| r.url.as_str())
            .collect::<Vec<_>>()
            .join(" "),
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
        duration_s: reports.iter().map(|r| r.duration_s).fold(0.0, f64::max),
        throughput_rps: sum_f(|r| r.throughput_rps),
        bytes_sent: sum_u(|r| r.bytes_sent),
        bytes_received: sum_u(|r| r.bytes_received),
        connect_time_s: reports
            .iter()
            .map(|r| r.connect_time_s * r.connections as f64)
            .sum::<f64>()
            / connections.max(1) as f64,
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
        client_cpu: crate::record::load::ClientCpu {
            user_s: sum_f(|r| r.client_cpu.user_s),
            sys_s: sum_f(|r| r.client_cpu.sys_s),
            per_core_busy: reports
                .iter()
                .flat_map(|r| r.client_cpu.per_core_busy.clone())
                .collect(),
        },
        client_saturated: reports.iter().any(|r| r.client_saturated),
    }
}

fn instance_json(k: usize, load: &StepLoad, sub: &StepRequest) -> Value {
    let mut obj = match serde_json::to_value(&load.report) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    obj.remove("schema");
    obj.insert("instance".into(), json!(k));
    obj.insert("port".into(), json!(sub.port));
    obj.insert(
        "client_cpus".into(),
        json!(crate::cpuset::format(&sub.client_cpus)),
    );
    for (key, v) in &load.extra {
        obj.insert(key.clone(), v.clone());
    }
    Value::Object(obj)
}
