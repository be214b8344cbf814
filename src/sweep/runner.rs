//! The step loop: per (target, placement) a server is started once (or per step), then each
//! point of the series × repetition is measured: observer on → load → observer off → the
//! step's line appended to steps.jsonl. Every collaborator is a trait, so the loop is
//! tested with fakes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::driver::{Driver, StepRequest};
use super::observer::StepObserver;
use super::placement::{CpuPair, PlacementSource};
use super::plan::{Plan, Series, TargetPlan};
use super::progress::Progress;
use super::server::{Launcher, Server};
use super::spec::{OnFailure, Restart, StopWhen};
use crate::record::load::{IntervalLine, IntervalSink};
use crate::record::rundir::{RunDir, StepSink};
use crate::record::steps::{now_unix_s, StepResult, StepStatus};

/// A point of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Clients.
    pub clients: usize,
    /// Open-loop rate, requests/s.
    pub rate_rps: Option<f64>,
}

/// How a run ended.
#[derive(Debug, Default)]
pub struct RunSummary {
    /// Every step of the run directory (resumed ones included), in order.
    pub steps: Vec<StepResult>,
    /// Ctrl-C (or SIGTERM) ended it.
    pub interrupted: bool,
    /// A failure ended it (`on_failure = "stop"`).
    pub stopped_on_failure: bool,
    /// Lines worth reporting (rate-search results, early stops).
    pub findings: Vec<String>,
}

/// The step loop and its collaborators.
pub struct Runner<'a> {
    /// What to run.
    pub plan: &'a Plan,
    /// Where results go.
    pub dir: &'a mut RunDir,
    /// Starts targets.
    pub launcher: &'a mut dyn Launcher,
    /// Puts load on them.
    pub driver: &'a mut dyn Driver,
    /// Watches the server.
    pub observer: &'a mut dyn StepObserver,
    /// Gives cpusets.
    pub placements: &'a dyn PlacementSource,
    /// Shows progress.
    pub progress: &'a mut dyn Progress,
    /// Ctrl-C.
    pub stop: &'a AtomicBool,
}

/// The file stem of a step.
pub fn step_id(target: &str, placement: &str, point: Point, rep: usize) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    match point.rate_rps {
        Some(r) => format!(
            "{}.{}.c{}.rate{:.0}.r{rep}",
            clean(target),
            clean(placement),
            point.clients,
            r
        ),
        None => format!(
            "{}.{}.c{}.r{rep}",
            clean(target),
            clean(placement),
            point.clients
        ),
    }
}

/// A step's cpusets: the server's and first client group's pair, and each group's own.
type StepCpus = (CpuPair, Vec<Vec<usize>>);

/// The state of one (target, placement) series while it runs.
struct SeriesState {
    server: Option<Box<dyn Server>>,
    server_cpus: Option<Vec<usize>>,
    launch_failed: Option<String>,
}

impl Runner<'_> {
    /// Runs every series; results already in the directory (`--resume`) are kept and skipped.
    pub fn run(&mut self) -> Result<RunSummary, String> {
        let mut done: BTreeMap<String, StepResult> = self
            .dir
            .steps()?
            .into_iter()
            .map(|s| (s.id.clone(), s))
            .collect();
        let mut summary = RunSummary::default();
        self.progress.begin(self.plan.max_steps(), done.len());
        if self.plan.compares_balanced_and_separated() {
            for note in self.placements.notes() {
                self.progress.note(&note);
                summary.findings.push(note);
            }
        }
        'all: for target in &self.plan.targets {
            for placement in &self.plan.placements {
                let end = self.run_series(target, placement, &mut done, &mut summary)?;
                if end {
                    break 'all;
                }
            }
        }
        let mut steps: Vec<StepResult> = self.dir.steps()?;
        steps.sort_by(|a, b| a.started_unix_s.total_cmp(&b.started_unix_s));
        summary.steps = steps;
        self.progress.finish();
        Ok(summary)
    }

    /// Runs one series; true when the whole run must end.
    fn run_series(
        &mut self,
        target: &TargetPlan,
        placement: &str,
        done: &mut BTreeMap<String, StepResult>,
        summary: &mut RunSummary,
    ) -> Result<bool, String> {
        let mut state = SeriesState {
            server: None,
            server_cpus: None,
            launch_failed: None,
        };
        let mut points = PointGen::new(&self.plan.series);
        let mut history: Vec<(f64, f64)> = Vec::new();
        let mut history_points: Vec<Point> = Vec::new();
        let mut saturated: Option<String> = None;
        let mut end_run = false;
        while let Some(point) = points.next() {
            let mut reps = Vec::new();
            for rep in 0..self.plan.repetitions.max_runs() {
                if !self.plan.repetitions.again(rep, &ok_throughputs(&reps)) {
                    break;
                }
                if self.stop.load(Ordering::Relaxed) {
                    summary.interrupted = true;
                    end_run = true;
                    break;
                }
                let id = step_id(&target.name, placement, point, rep);
                if let Some(prev) = done.get(&id) {
                    reps.push(prev.clone());
                    continue;
                }
                let step = match &saturated {
                    Some(why) => self.skipped(&id, target, placement, point, rep, why.clone()),
                    None => self.one_step(&id, target, placement, point, rep, &mut state),
                };
                if self.stop.load(Ordering::Relaxed) {
                    summary.interrupted = true;
                    end_run = true;
                    break;
                }
                self.dir
                    .append(&step)
                    .map_err(|e| format!("writing steps.jsonl: {e}"))?;
                self.progress.done(&step);
                done.insert(id, step.clone());
                let failed = step.status == StepStatus::Failed;
                reps.push(step);
                if failed && self.plan.on_failure == OnFailure::Stop {
                    summary.stopped_on_failure = true;
                    end_run = true;
                    break;
                }
                if saturated.is_none() && !self.plan.cooldown.is_zero() {
                    self.sleep(self.plan.cooldown);
                }
            }
            if end_run {
                break;
            }
            let agg = aggregate(&reps);
            points.observe(point, agg.map(|a| a.2));
            if let Some((thr, lat, _)) = agg {
                history.push((thr, lat));
                history_points.push(point);
            }
            if saturated.is_none()
                && self.plan.stop_when == Some(StopWhen::Saturated)
                && is_saturated(&history)
            {
                let from = history_points[history_points.len() - 3];
                let why = super::policy::saturation_note(from, point, &points.remaining());
                self.progress
                    .note(&format!("{} / {placement}: {why}", target.name));
                summary
                    .findings
                    .push(format!("{} / {placement}: {why}", target.name));
                saturated = Some(why);
            }
        }
        if let Some(found) = points.finding(&target.name, placement) {
            self.progress.note(&found);
            summary.findings.push(found);
        }
        if !end_run {
            self.profile_series(
                target,
                placement,
                &mut state.server,
                &mut state.server_cpus,
                summary,
            )?;
        }
        if let Some(mut s) = state.server.take() {
            s.stop();
        }
        Ok(end_run)
    }

    fn skipped(
        &self,
        id: &str,
        target: &TargetPlan,
        placement: &str,
        point: Point,
        rep: usize,
        why: String,
    ) -> StepResult {
        let mut step =
            StepResult::empty(id.to_string(), &target.name, placement, point.clients, rep);
        step.rate_rps = point.rate_rps;
        step.inflight = point.clients * self.plan.connections_per_client * target.depth;
        step.status = StepStatus::Skipped;
        step.reason = Some(why);
        step
    }

    fn one_step(
        &mut self,
        id: &str,
        target: &TargetPlan,
        placement: &str,
        point: Point,
        rep: usize,
        state: &mut SeriesState,
    ) -> StepResult {
        let mut step = self.skipped(id, target, placement, point, rep, String::new());
        step.reason = None;
        self.progress.step(&format!(
            "{} {placement} c={}{}",
            target.name,
            point.clients,
            point
                .rate_rps
                .map_or(String::new(), |r| format!(" rate={r:.0}"))
        ));
        let (cpus, group_cpus) = match self.step_cpus(target, placement, point) {
            Ok(c) => c,
            Err((status, why)) => {
                step.status = status;
                step.reason = Some(why);
                return step;
            }
        };
        step.server_cpus = crate::cpuset::format(&cpus.server);
        step.client_cpus = crate::cpuset::format(&cpus.client);
        if let Some(why) = &state.launch_failed {
            step.reason = Some(format!("target did not start: {why}"));
            return step;
        }
        let server = match self.ensure_server(target, &cpus, point.clients, state) {
            Ok(s) => s,
            Err(why) => {
                step.status = StepStatus::Failed;
                step.reason = Some(why);
                return step;
            }
        };
        step.started_unix_s = now_unix_s();
        let outcome = self.measure(id, target, point, &cpus, group_cpus, server);
        if let Some(why) = server.died() {
            step.status = StepStatus::Failed;
            step.reason = Some(format!("the server died during the step: {why}"));
            state.server = None;
            return step;
        }
        match outcome {
            Ok((load, observed)) => {
                step.load = Some(load);
                step.server = observed.server;
                step.derived = observed.derived;
                (step.status, step.reason) = verdict(&step, self.plan.max_error_ratio);
            }
            Err(why) => {
                step.status = StepStatus::Failed;
                step.reason = Some(why);
            }
        }
        if self.plan.restart == Restart::Step {
            if let Some(mut s) = state.server.take() {
                s.stop();
            }
        }
        step
    }

    /// The step's cpusets (the server's on its host, the first client group's on its own) and
    /// each client group's. A host that is down fails the step; a placement the hosts cannot
    /// give skips it.
    fn step_cpus(
        &self,
        target: &TargetPlan,
        placement: &str,
        point: Point,
    ) -> Result<StepCpus, (StepStatus, String)> {
        let follow = self.plan.cpus_follow_clients.then_some(point.clients);
        let groups = &self.plan.hosts.client_groups;
        let hosts = target.host.iter().chain(groups.iter().flatten());
        if let Some(why) = hosts.filter_map(|h| self.placements.host_down(h)).next() {
            return Err((StepStatus::Failed, why));
        }
        let server_host = target.host.as_deref();
        let on = |client_host: Option<&str>| {
            self.placements
                .cpus_on(server_host, client_host, placement, follow)
                .map_err(|why| (StepStatus::Skipped, why))
        };
        let cpus = on(groups.first().and_then(Option::as_deref))?;
        let group_cpus = groups
            .iter()
            .map(|g| on(g.as_deref()).map(|p| p.client))
            .collect::<Result<_, _>>()
            .map_err(|(status, why)| (status, format!("a client group: {why}")))?;
        Ok((cpus, group_cpus))
    }

    fn ensure_server<'s>(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        state: &'s mut SeriesState,
    ) -> Result<&'s mut Box<dyn Server>, String> {
        let stale = state.server_cpus.as_ref() != Some(&cpus.server);
        if let Some(s) = state.server.as_mut() {
            if let Some(why) = s.died() {
                state.server = None;
                return Err(format!("the server had died: {why}"));
            }
        }
        if stale || state.server.is_none() || self.plan.restart == Restart::Step {
            if let Some(mut old) = state.server.take() {
                old.stop();
            }
            match self.launcher.launch(target, cpus, clients, self.stop) {
                Ok(s) => {
                    state.server = Some(s);
                    state.server_cpus = Some(cpus.server.clone());
                }
                Err(why) => {
                    state.launch_failed = Some(first_line(&why));
                    return Err(why);
                }
            }
        }
        state.server.as_mut().ok_or_else(|| "no server".to_string())
    }

    fn measure(
        &mut self,
        id: &str,
        target: &TargetPlan,
        point: Point,
        cpus: &CpuPair,
        group_cpus: Vec<Vec<usize>>,
        server: &mut Box<dyn Server>,
    ) -> Result<(crate::record::load::LoadReport, super::observer::Observed), String> {
        let connections = point.clients * self.plan.connections_per_client;
        let threads = self
            .plan
            .client_threads
            .unwrap_or(cpus.client.len())
            .clamp(1, connections);
        let port = server.port();
        let extras = server.extras();
        self.observer.server_extras(&extras);
        let host = target
            .host
            .as_ref()
            .and_then(|h| self.plan.hosts.hosts.get(h));
        let url = super::hosts::plan::fill_host(&target.url, host);
        // What this machine's observers watch: the server when it runs here, the client
        // when its (first) group does.
        let groups = &self.plan.hosts.client_groups;
        let local_client = match groups.iter().position(Option::is_none) {
            _ if groups.is_empty() => cpus.client.clone(),
            Some(k) => group_cpus[k].clone(),
            None => Vec::new(),
        };
        let local_server = if target.host.is_none() {
            cpus.server.clone()
        } else {
            Vec::new()
        };
        let req = StepRequest {
            instances: super::instances::addrs(&extras, &url),
            group_cpus,
            step_id: id.to_string(),
            url: url.replace("{port}", &port.to_string()),
            port,
            clients: point.clients,
            connections,
            depth: target.depth,
            threads,
            duration: self.plan.duration,
            warmup: self.plan.warmup,
            timeout: self.plan.timeout,
            rate_rps: point.rate_rps,
            client_cpus: cpus.client.clone(),
            out_dir: self.dir.path.clone(),
        };
        let mut sink = self
            .dir
            .step_sink(id)
            .map_err(|e| format!("writing the step's files: {e}"))?;
        sink.log_histograms = self.driver.live_intervals();
        let pid = server.pid();
        let mut sink = LoopSink {
            inner: sink,
            observer: &mut *self.observer,
            progress: &mut *self.progress,
            started: false,
            pid,
            cpus: CpuPair {
                server: cpus.server.clone(),
                client: local_client,
            },
            local_server,
            cores: None,
            live: self.driver.live_intervals(),
        };
        // perf attaches now, before the load: its start-up must not fall inside the window.
        sink.observer
            .prepare(sink.pid, &sink.cpus.server, &sink.cpus.client);
        // Client groups start their windows at a planned instant and say so (window_started).
        let grouped = !self.plan.hosts.client_groups.is_empty();
        // A driver that signals its window (the built-in engine) starts them itself, after
        // connecting and warming up; others start them now or at their first window line.
        let signals = self.driver.signals_window(&req);
        if !grouped && !signals && (self.plan.warmup.is_zero() || !self.driver.live_intervals()) {
            sink.start_observer();
        }
        let result = self.driver.run_step(&req, &mut sink, self.stop);
        if !sink.started {
            sink.start_observer();
        }
        let requests = result.as_ref().map_or(0, |l| l.report.requests);
        let observed = sink.observer.finish(requests);
        let hist = result.as_ref().ok().and_then(|l| l.hist_ns.clone());
        let cores_cpu_s = sink
            .finish(hist)
            .map_err(|e| format!("writing the step's files: {e}"))?;
        let load = result?;
        let mut observed = observed;
        super::cores::add_observer_cpu(&mut observed.derived, cores_cpu_s);
        observed.derived.extend(load.extra);
        Ok((load.report, observed))
    }

    fn sleep(&self, d: Duration) {
        let end = std::time::Instant::now() + d;
        while std::time::Instant::now() < end && !self.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Sits between the driver and the run directory: writes the intervals, starts the
/// observer at the end of the warm-up, feeds the progress bar.
struct LoopSink<'a> {
    inner: StepSink,
    observer: &'a mut dyn StepObserver,
    progress: &'a mut dyn Progress,
    started: bool,
    pid: Option<i32>,
    /// The server's cpus (on its host) and this machine's client cpus.
    cpus: CpuPair,
    /// The server's cpus when it runs on this machine (empty otherwise).
    local_server: Vec<usize>,
    /// The per-core busy % columns, from the observers' start.
    cores: Option<super::cores::CoreColumns>,
    /// The driver's lines come while it runs.
    live: bool,
}

impl LoopSink<'_> {
    fn start_observer(&mut self) {
        self.observer
            .start(self.pid, &self.cpus.server, &self.cpus.client);
        self.cores = Some(super::cores::CoreColumns::start(
            self.live,
            &self.local_server,
            &self.cpus.client,
        ));
        self.started = true;
    }

    /// Flushes the step's files; returns the CPU seconds the per-core sampling used.
    fn finish(self, hist: Option<Histogram<u64>>) -> std::io::Result<f64> {
        let mut inner = self.inner;
        let cores_cpu_s = self.cores.map_or(0.0, |c| c.finish(&mut inner));
        // An external tool gives no per-second histograms: log its whole-window one.
        if let Some(h) = hist {
            inner.ensure_one(h)?;
        }
        inner.finish()?;
        Ok(cores_cpu_s)
    }
}

impl IntervalSink for LoopSink<'_> {
    fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        match self.cores.as_mut() {
            Some(cores) => cores.line(line, hist_ns, &mut self.inner),
            None => self.inner.interval(line, hist_ns),
        }
        // The line that closes the warm-up has elapsed exactly 0 (the engine cuts an interval
        // there): the window starts now. Earlier warm-up lines are negative.
        if !self.started && line.elapsed_s >= -1e-6 {
            self.start_observer();
        }
        self.progress.live(line.ops_per_s);
    }

    fn window_started(&mut self) {
        if !self.started {
            self.start_observer();
        }
    }

    fn window_ended(&mut self) {
        if self.started {
            self.observer.end_window();
        }
        if let Some(cores) = self.cores.as_mut() {
            cores.end_window();
        }
    }
}

/// The status of a measured step: `errors` when its failed requests are over the allowed
/// share (so the analysis leaves it out), `ok` otherwise.
pub fn verdict(step: &StepResult, max_error_ratio: f64) -> (StepStatus, Option<String>) {
    let ratio = step.error_ratio();
    if ratio <= max_error_ratio {
        return (StepStatus::Ok, None);
    }
    let kinds = step.load.as_ref().map_or(String::new(), |l| {
        l.errors
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    });
    let why = format!(
        "{:.1}% of requests failed ({kinds}), over max_error_ratio = {max_error_ratio}",
        ratio * 100.0
    );
    (StepStatus::Errors, Some(why))
}

/// Throughputs (req/s) of a point's ok repetitions so far.
fn ok_throughputs(reps: &[StepResult]) -> Vec<f64> {
    reps.iter()
        .filter(|s| s.status == StepStatus::Ok)
        .filter_map(StepResult::throughput_rps)
        .collect()
}

/// Mean throughput, mean latency and mean p99 (ms) of a point's ok repetitions.
fn aggregate(reps: &[StepResult]) -> Option<(f64, f64, f64)> {
    let ok: Vec<&crate::record::load::LoadReport> = reps
        .iter()
        .filter(|s| s.status == StepStatus::Ok)
        .filter_map(|s| s.load.as_ref())
        .collect();
    if ok.is_empty() {
        return None;
    }
    let n = ok.len() as f64;
    Some((
        ok.iter().map(|l| l.throughput_rps).sum::<f64>() / n,
        ok.iter().map(|l| l.latency_us.mean).sum::<f64>() / n,
        ok.iter().map(|l| p99_with_timeouts_us(l)).sum::<f64>() / n / 1000.0,
    ))
}

/// The p99 of a run counting its timed-out requests, which the latency figures leave out: a
/// timed-out request is slower than any target, so when over 1% of the requests tried timed
/// out, the p99 is infinite.
fn p99_with_timeouts_us(load: &crate::record::load::LoadReport) -> f64 {
    let timeouts = load.errors.get("timeout").copied().unwrap_or(0);
    let tried = load.requests + load.errors.values().sum::<u64>();
    if tried > 0 && timeouts as f64 / tried as f64 > 0.01 {
        return f64::INFINITY;
    }
    load.latency_us.p99
}

/// Two steps in a row added under 5% throughput while latency kept growing.
pub fn is_saturated(history: &[(f64, f64)]) -> bool {
    let [.., a, b, c] = history else { return false };
    let flat = |x: &(f64, f64), y: &(f64, f64)| y.0 < x.0 * 1.05;
    let slower = |x: &(f64, f64), y: &(f64, f64)| y.1 > x.1;
    flat(a, b) && flat(b, c) && slower(a, b) && slower(b, c)
}

fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or("");
    line.split("; its output ends with")
        .next()
        .unwrap_or(line)
        .to_string()
}

/// The points of a series, one at a time (a rate search picks the next from the last).
enum PointGen {
    List(std::vec::IntoIter<Point>),
    Find(FindState),
}

struct FindState {
    clients: usize,
    p99_ms: f64,
    lo: f64,
    hi: f64,
    left: usize,
    best_ok: Option<f64>,
    worst_bad: Option<f64>,
    next: Option<f64>,
}

impl PointGen {
    fn new(series: &Series) -> PointGen {
        match series {
            Series::Clients(c) => PointGen::List(
                c.iter()
                    .map(|&clients| Point {
                        clients,
                        rate_rps: None,
                    })
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            Series::Rates { rates, clients } => PointGen::List(
                rates
                    .iter()
                    .map(|&r| Point {
                        clients: *clients,
                        rate_rps: Some(r),
                    })
                    .collect::<Vec<_>>()
                    .into_iter(),
            ),
            Series::Find {
                lo,
                hi,
                p99_ms,
                max_steps,
                clients,
            } => PointGen::Find(FindState {
                clients: *clients,
                p99_ms: *p99_ms,
                lo: *lo,
                hi: *hi,
                left: *max_steps,
                best_ok: None,
                worst_bad: None,
                next: Some(*lo),
            }),
        }
    }

    fn next(&mut self) -> Option<Point> {
        match self {
            PointGen::List(it) => it.next(),
            PointGen::Find(f) => {
                if f.left == 0 {
                    return None;
                }
                let rate = f.next.take()?;
                f.left -= 1;
                Some(Point {
                    clients: f.clients,
                    rate_rps: Some(rate),
                })
            }
        }
    }

    /// The points not yet given (a rate search's are not known in advance: none).
    fn remaining(&self) -> Vec<Point> {
        match self {
            PointGen::List(it) => it.as_slice().to_vec(),
            PointGen::Find(_) => Vec::new(),
        }
    }

    /// Feeds back a point's p99 (ms), None when it failed.
    fn observe(&mut self, point: Point, p99_ms: Option<f64>) {
        let PointGen::Find(f) = self else { return };
        let Some(rate) = point.rate_rps else { return };
        if p99_ms.is_some_and(|p| p <= f.p99_ms) {
            f.best_ok = Some(f.best_ok.map_or(rate, |b: f64| b.max(rate)));
        } else {
            f.worst_bad = Some(f.worst_bad.map_or(rate, |b: f64| b.min(rate)));
        }
        f.next = match (f.best_ok, f.worst_bad) {
            (None, _) => None,
            (Some(ok), None) if ok < f.hi => Some(f.hi),
            (Some(_), None) => None,
            (Some(ok), Some(bad)) => Some((ok + bad) / 2.0).filter(|_| (bad - ok) / bad > 0.01),
        };
        let _ = f.lo;
    }

    fn finding(&self, target: &str, placement: &str) -> Option<String> {
        let PointGen::Find(f) = self else { return None };
        Some(match f.best_ok {
            Some(best) => format!(
                "{target} / {placement}: highest rate with p99 <= {} ms: {best:.0} requests/s{}",
                f.p99_ms,
                f.worst_bad
                    .map_or(" (the top of the range)".to_string(), |b| format!(
                        " ({b:.0} did not meet it)"
                    ))
            ),
            None => format!(
                "{target} / {placement}: even {:.0} requests/s missed p99 <= {} ms",
                f.lo, f.p99_ms
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saturation_needs_two_flat_steps_with_rising_latency() {
        assert!(!is_saturated(&[(100.0, 1.0), (200.0, 1.0)]));
        assert!(is_saturated(&[(100.0, 1.0), (102.0, 2.0), (103.0, 3.0)]));
        assert!(!is_saturated(&[(100.0, 1.0), (102.0, 2.0), (150.0, 3.0)]));
        assert!(!is_saturated(&[(100.0, 3.0), (102.0, 2.0), (103.0, 1.0)]));
    }

    #[test]
    fn bisection_converges_on_the_threshold() {
        let series = Series::Find {
            lo: 1000.0,
            hi: 64000.0,
            p99_ms: 10.0,
            max_steps: 12,
            clients: 4,
        };
        let mut gen = PointGen::new(&series);
        let mut tried = Vec::new();
        while let Some(p) = gen.next() {
            let rate = p.rate_rps.unwrap();
            tried.push(rate);
            // p99 crosses 10 ms at 20000 requests/s.
            gen.observe(p, Some(rate / 2000.0));
        }
        assert_eq!(tried[..2], [1000.0, 64000.0]);
        let PointGen::Find(f) = &gen else {
            unreachable!()
        };
        let best = f.best_ok.unwrap();
        assert!(best <= 20000.0 && best > 19000.0, "{best} after {tried:?}");
    }

    #[test]
    fn timeouts_over_one_percent_miss_any_p99_target() {
        let mut load = crate::record::load::LoadReport {
            requests: 990,
            ..Default::default()
        };
        load.latency_us.p99 = 500.0;
        load.errors.insert("timeout".into(), 9);
        assert_eq!(p99_with_timeouts_us(&load), 500.0);
        load.errors.insert("timeout".into(), 11);
        assert_eq!(p99_with_timeouts_us(&load), f64::INFINITY);
    }

    #[test]
    fn a_step_over_the_error_ratio_is_errors() {
        let mut step = StepResult::empty("s".into(), "t", "shared", 1, 0);
        step.load = Some(crate::record::load::LoadReport {
            requests: 98,
            errors: [("http_5xx".to_string(), 2)].into(),
            ..Default::default()
        });
        assert_eq!(verdict(&step, 0.02).0, StepStatus::Ok);
        let (status, why) = verdict(&step, 0.01);
        assert_eq!(status, StepStatus::Errors);
        assert!(why
            .unwrap()
            .contains("2.0% of requests failed (http_5xx 2)"));
    }
}
