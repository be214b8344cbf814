//! Split instances (the messenger study's "left" and "right" halves): a target with `instances = N` runs
//! N copies of the server, each on an equal share of the server cpuset with its own port;
//! the load is split the same way and run concurrently, one share of the client cpuset per
//! instance. The step sums the instances: throughputs and counts added, HdrHistograms merged
//! exactly (latency recomputed from the merged histogram, never averaged percentiles), the
//! per-second lines merged line by line; each instance's own figures go to `per_instance`.

use std::sync::atomic::AtomicBool;
use std::sync::{mpsc, Arc};

use hdrhistogram::Histogram;

use super::driver::{Driver, InstanceAddr, StepLoad, StepRequest};
use super::error::{LaunchError, StepError};
use super::server::{instance_label, Launcher, Server};
use super::target::TargetPlan;
use crate::load::merge::{
    mean_only_latency, merged_hist, sum_reports, ChannelSink, Line, LineMerger, WindowSpan,
};
use crate::observe::step::{InstanceInfo, ServerExtras};
use crate::placement::CpuPair;
use crate::record::figures::{LoadPart, StepFigures};
use crate::record::load::{IntervalSink, LoadReport};
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
    ) -> Result<Box<dyn Server>, LaunchError> {
        let n = target.instances;
        if n <= 1 {
            return self.inner.launch(target, cpus, clients, stop);
        }
        if cpus.server.len() < n {
            return Err(LaunchError::Start(format!(
                "{n} instances of target {:?} do not fit on {} server CPU(s)",
                target.name,
                cpus.server.len()
            )));
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
                    return Err(LaunchError::Instance {
                        instance: k,
                        instances: n,
                        source: Box::new(why),
                    });
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
    fn stop(&mut self) -> Option<String> {
        let notes: Vec<String> = self
            .parts
            .iter_mut()
            .filter_map(|p| p.server.stop())
            .collect();
        (!notes.is_empty()).then(|| notes.join("; "))
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
pub type DriverFactory = Arc<
    dyn Fn() -> Result<Box<dyn Driver>, crate::load::external::ParserConfigError> + Send + Sync,
>;

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
                            .map_err(|e| StepError::Load(e.to_string()))?
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
        merger.finish_instances(results.iter().all(Result::is_ok));
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
    let hists: Vec<Option<&Histogram<u64>>> = loads.iter().map(|l| l.hist_ns.as_ref()).collect();
    let hist = merged_hist(&hists).map_err(|e| StepError::Load(e.to_string()))?;
    let mut report = sum_reports(&reports);
    report.latency_us = match &hist {
        Some(h) if !h.is_empty() => crate::record::load::latency_us(h),
        _ => mean_only_latency(&reports),
    };
    let per_instance = (loads.into_iter().zip(subs).enumerate())
        .map(|(k, (l, sub))| instance_part(k, l, sub))
        .collect();
    Ok(StepLoad {
        report,
        hist_ns: hist,
        figures: StepFigures {
            per_instance,
            ..StepFigures::default()
        },
    })
}

/// Instance `k`'s part of the step (`per_instance`): its own load and figures, where it went.
fn instance_part(k: usize, load: StepLoad, sub: &StepRequest) -> LoadPart {
    LoadPart {
        instance: Some(k),
        port: Some(sub.port),
        client_cpus: Some(crate::cpuset::format(&sub.client_cpus)),
        figures: load.figures,
        load: load.report,
        ..LoadPart::default()
    }
}
