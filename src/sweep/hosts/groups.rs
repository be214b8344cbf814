//! Client groups: a step's load split over this machine and other hosts, every group's
//! measured window started together (each host's clock offset applied), the windows checked
//! to overlap, and the groups' results merged exactly (histograms added).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::session::HostSession;
use crate::clock::now_ns;
use crate::load::merge::{ChannelSink, Line, LineMerger};
use crate::load::raw::RawLoad;
use crate::load::ProtoOptions;
use crate::record::load::IntervalSink;
use crate::remote::window::{plan_start, to_reference, window_overlap, Window, MIN_WINDOW_OVERLAP};
use crate::remote::{ClockOffset, RemoteStatus};
use crate::sweep::driver::{engine_config, Driver, StepLoad, StepRequest};
use crate::sweep::error::StepError;
use crate::sweep::instances::{instance_sinks, merge_loads, share};

/// Time from planning a step's common start to the start: enough for ssh to log in and the
/// generators to connect.
const START_LEAD: Duration = Duration::from_secs(3);

/// Where one client group runs.
#[derive(Debug, Clone)]
pub enum GroupHost {
    /// This machine.
    Local,
    /// A connected host.
    Remote(Arc<HostSession>),
    /// A host that could not be set up, and why.
    Down(String, String),
}

impl GroupHost {
    fn name(&self) -> &str {
        match self {
            GroupHost::Local => crate::sweep::plan::hosts::LOCAL,
            GroupHost::Remote(s) => s.name(),
            GroupHost::Down(name, _) => name,
        }
    }

    fn offset(&self) -> ClockOffset {
        match self {
            GroupHost::Remote(s) => s.offset,
            // This machine is the reference clock.
            _ => ClockOffset::default(),
        }
    }
}

/// Runs steps over the client groups (or with `single` when the plan has none).
pub struct GroupDriver {
    /// The driver of steps without client groups.
    pub single: Box<dyn Driver>,
    /// The groups, in the spec's order.
    pub groups: Vec<GroupHost>,
    /// The engine's protocol options.
    pub proto: ProtoOptions,
}

/// One group's load and its measured window in the local clock.
type GroupLoad = (StepLoad, Window);

impl Driver for GroupDriver {
    fn live_intervals(&self) -> bool {
        self.single.live_intervals()
    }

    fn signals_window(&self, req: &StepRequest) -> bool {
        // With groups it signals too, from the planned window (the loop below).
        self.groups.is_empty() && self.single.signals_window(req)
    }

    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        if self.groups.is_empty() {
            return self.single.run_step(req, sink, stop);
        }
        // A step with client groups runs on other hosts: its failures are remote ones.
        self.run_groups(req, sink, stop).map_err(StepError::Remote)
    }
}

impl GroupDriver {
    /// Runs each group's share at one planned instant and merges their loads.
    fn run_groups(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, String> {
        let n = self.groups.len();
        if req.connections < n {
            return Err(format!(
                "{n} client groups need at least {n} connections; this step opens {}",
                req.connections
            ));
        }
        let subs: Vec<StepRequest> = (0..n).map(|k| group_request(req, k, n)).collect();
        let offsets: Vec<ClockOffset> = self.groups.iter().map(GroupHost::offset).collect();
        let start = plan_start(START_LEAD, &offsets);
        let window_start_ns = start.common_start_ns + req.warmup.as_nanos() as i64;
        let window_end_ns = window_start_ns + req.duration.as_nanos() as i64;
        let mut merger = LineMerger::new(n, instance_sinks(&subs, req, true));
        let (tx, rx) = mpsc::channel::<Line>();
        let results: Vec<Result<GroupLoad, String>> = std::thread::scope(|scope| {
            let handles: Vec<_> = subs
                .iter()
                .zip(&self.groups)
                .zip(&start.host_start_ns)
                .enumerate()
                .map(|(k, ((sub, host), &at))| {
                    let tx = tx.clone();
                    let proto = &self.proto;
                    scope.spawn(move || run_group(host, sub, proto, at, k, tx, stop))
                })
                .collect();
            drop(tx);
            follow_planned_window(&rx, (window_start_ns, window_end_ns), &mut merger, sink);
            merger.flush(sink);
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("the load thread panicked".into()))
                })
                .collect()
        });
        merger.finish_instances(results.iter().all(Result::is_ok));
        self.merge(results, &subs)
    }

    fn merge(
        &self,
        results: Vec<Result<GroupLoad, String>>,
        subs: &[StepRequest],
    ) -> Result<StepLoad, String> {
        let mut windows = Vec::new();
        let mut loads = Vec::new();
        let mut failures = Vec::new();
        for (k, r) in results.into_iter().enumerate() {
            match r {
                Ok((load, window)) => {
                    windows.push(window);
                    loads.push(Ok(load));
                }
                Err(why) => failures.push(format!(
                    "client group {k} (host {}): {why}",
                    self.groups[k].name()
                )),
            }
        }
        if !failures.is_empty() {
            return Err(failures.join("; "));
        }
        let overlap = window_overlap(&windows);
        if overlap < MIN_WINDOW_OVERLAP {
            return Err(format!(
                "the client groups' measured windows overlap {:.1}% (at least {:.0}% is needed): {}",
                overlap * 100.0,
                MIN_WINDOW_OVERLAP * 100.0,
                describe_windows(&windows)
            ));
        }
        let mut merged = merge_loads(loads, subs).map_err(|e| e.to_string())?;
        let per_instance = merged.extra.remove("per_instance");
        let mut per_host: Vec<Value> = match per_instance {
            Some(Value::Array(v)) => v,
            _ => Vec::new(),
        };
        for (k, entry) in per_host.iter_mut().enumerate() {
            if let Value::Object(m) = entry {
                m.remove("instance");
                m.insert("group".into(), json!(k));
                m.insert("host".into(), json!(self.groups[k].name()));
                m.insert("window_unix_ns".into(), json!(windows[k]));
            }
        }
        merged
            .extra
            .insert("per_host".into(), Value::Array(per_host));
        merged.extra.insert("window_overlap".into(), json!(overlap));
        Ok(merged)
    }
}

fn describe_windows(windows: &[Window]) -> String {
    let first = windows.iter().map(|w| w.0).min().unwrap_or(0);
    windows
        .iter()
        .enumerate()
        .map(|(k, w)| {
            format!(
                "group {k} from {:+.3} s to {:+.3} s",
                (w.0 - first) as f64 / 1e9,
                (w.1 - first) as f64 / 1e9
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Group `k`'s share of a step: clients, connections, threads and rate split equally; its own
/// cpuset.
fn group_request(req: &StepRequest, k: usize, n: usize) -> StepRequest {
    let connections = share(req.connections, n, k);
    StepRequest {
        step_id: format!("{}.g{k}", req.step_id),
        clients: share(req.clients, n, k).max(1),
        connections,
        threads: req
            .group_cpus
            .get(k)
            .map_or(1, Vec::len)
            .clamp(1, connections.max(1)),
        rate_rps: req.rate_rps.map(|r| r / n as f64),
        client_cpus: req.group_cpus.get(k).cloned().unwrap_or_default(),
        instances: Vec::new(),
        group_cpus: Vec::new(),
        ..req.clone()
    }
}

/// Runs one group: here with the engine, on a host with `stairbench load` over ssh.
fn run_group(
    host: &GroupHost,
    sub: &StepRequest,
    proto: &ProtoOptions,
    start_at_ns: i64,
    k: usize,
    tx: mpsc::Sender<Line>,
    stop: &AtomicBool,
) -> Result<GroupLoad, String> {
    let mut chan = ChannelSink { k, tx };
    match host {
        GroupHost::Local => {
            let config = engine_config(proto, sub);
            let outcome = crate::load::run_at(&config, Some(start_at_ns), &mut chan, stop)
                .map_err(|e| e.to_string())?;
            let load = StepLoad {
                report: outcome.report,
                hist_ns: Some(outcome.hist_ns),
                extra: serde_json::Map::new(),
            };
            Ok((load, outcome.window_unix_ns))
        }
        GroupHost::Remote(session) => {
            let raw = remote_load(session, sub, proto, start_at_ns, stop)?;
            for (line, hist) in &raw.0.lines {
                chan.interval(line, hist);
            }
            let window = to_reference(raw.0.window_unix_ns, &session.offset);
            let load = StepLoad {
                report: raw.1,
                hist_ns: Some(raw.0.hist_ns),
                extra: serde_json::Map::new(),
            };
            Ok((load, window))
        }
        GroupHost::Down(name, why) => Err(format!("host {name:?}: {why}")),
    }
}

/// Runs `stairbench load` on the host, waits for it (ending it on Ctrl-C or when it overruns)
/// and fetches its JSON and raw record into the run directory's `hosts/`.
fn remote_load(
    session: &HostSession,
    sub: &StepRequest,
    proto: &ProtoOptions,
    start_at_ns: i64,
    stop: &AtomicBool,
) -> Result<(RawLoad, crate::record::load::LoadReport), String> {
    let json_name = format!("{}.load.json", sub.step_id);
    let raw_name = format!("{}.raw.jsonl", sub.step_id);
    let mut args = load_args(sub, proto);
    args.extend([
        "--start-at".into(),
        start_at_ns.to_string(),
        "--json".into(),
        json_name.clone(),
        "--raw".into(),
        raw_name.clone(),
        "--quiet".into(),
    ]);
    let line = session.command(&args);
    let mut process = session
        .remote
        .spawn(&line, Duration::from_secs(2))
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now()
        + START_LEAD
        + sub.warmup
        + sub.duration
        + sub.timeout
        + Duration::from_secs(30);
    wait_for_load(&mut process, deadline, stop)?;
    let fetch = |name: &str| fetch_file(session, &hosts_dir(&sub.out_dir), name);
    let report = serde_json::from_str(&fetch(&json_name)?)
        .map_err(|e| format!("{json_name} from the host: {e}"))?;
    let raw = crate::load::raw::read(&fetch(&raw_name)?)?;
    Ok((raw, report))
}

/// Waits for the remote `stairbench load` to exit 0, stopping it on Ctrl-C or past `deadline`.
fn wait_for_load(
    process: &mut crate::remote::process::RemoteProcess,
    deadline: Instant,
    stop: &AtomicBool,
) -> Result<(), String> {
    let status = loop {
        let status = process.wait_timeout(Duration::from_millis(50));
        if status != RemoteStatus::Running {
            break status;
        }
        if stop.load(Ordering::Relaxed) {
            process.stop();
            return Err("interrupted".into());
        }
        if Instant::now() > deadline {
            process.stop();
            return Err("stairbench load did not end in time; it was stopped".into());
        }
    };
    if status != RemoteStatus::Exited(0) {
        return Err(format!(
            "stairbench load {}",
            process.ending(&status, 5, " | ")
        ));
    }
    Ok(())
}

/// Copies `name` from the host's working directory into `dir`, removes it there, and reads it.
fn fetch_file(session: &HostSession, dir: &Path, name: &str) -> Result<String, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let local = dir.join(name);
    session
        .remote
        .fetch(Path::new(name), &local)
        .map_err(|e| e.to_string())?;
    let _ = session.remote.run(&format!(
        "rm -f -- {}",
        crate::remote::ssh::shell_quote(name)
    ));
    std::fs::read_to_string(&local).map_err(|e| format!("reading {}: {e}", local.display()))
}

/// Merges the groups' lines as they come while signalling the planned window to the
/// observers: the window follows the clock, not the lines (which come at the end).
fn follow_planned_window(
    rx: &mpsc::Receiver<Line>,
    (window_start_ns, window_end_ns): (i64, i64),
    merger: &mut LineMerger,
    sink: &mut dyn IntervalSink,
) {
    let (mut started, mut ended) = (false, false);
    loop {
        if !started && now_ns() >= window_start_ns {
            sink.window_started();
            started = true;
        }
        if started && !ended && now_ns() >= window_end_ns {
            sink.window_ended();
            ended = true;
        }
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(Line::Interval(k, line, hist)) => merger.push(k, line, hist, sink),
            // The parts' own signals: the planned window above is the step's.
            Ok(Line::WindowStarted | Line::WindowEnded) => {}
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
}

/// `stairbench load` arguments for a group's share of a step.
pub fn load_args(sub: &StepRequest, proto: &ProtoOptions) -> Vec<String> {
    let secs = |d: Duration| format!("{}ms", d.as_millis());
    let mut args: Vec<String> = vec![
        "load".into(),
        sub.url.clone(),
        "--connections".into(),
        sub.connections.to_string(),
        "--threads".into(),
        sub.threads.to_string(),
        "--duration".into(),
        secs(sub.duration),
        "--warmup".into(),
        secs(sub.warmup),
        "--timeout".into(),
        secs(sub.timeout),
        "--depth".into(),
        sub.depth.to_string(),
    ];
    if !sub.client_cpus.is_empty() {
        args.extend(["--cpuset".into(), crate::cpuset::format(&sub.client_cpus)]);
    }
    if let Some(r) = sub.rate_rps {
        args.extend(["--rate".into(), r.to_string()]);
    }
    args.extend(["--method".into(), proto.method.clone()]);
    for h in &proto.headers {
        args.extend(["--header".into(), h.clone()]);
    }
    if let Some(b) = &proto.body {
        args.extend(["--body".into(), b.clone()]);
    }
    let distribution = match proto.distribution {
        crate::load::Distribution::Uniform => "uniform".to_string(),
        crate::load::Distribution::Zipf(t) => format!("zipf:{t}"),
    };
    args.extend([
        "--keys".into(),
        proto.keys.to_string(),
        "--read-ratio".into(),
        proto.read_ratio.to_string(),
        "--value-size".into(),
        proto.value_size.to_string(),
        "--distribution".into(),
        distribution,
        "--seed".into(),
        proto.seed.to_string(),
        "--msg-size".into(),
        proto.msg_size.to_string(),
        // The step records the group's errors; the exit status must only say it ran.
        "--max-error-ratio".into(),
        "1".into(),
    ]);
    if proto.preload {
        args.push("--preload".into());
    }
    args
}

/// Where the fetched files of a step's groups go.
pub fn hosts_dir(out_dir: &Path) -> PathBuf {
    out_dir.join("hosts")
}
