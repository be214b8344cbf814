//! Client groups: a step's load split over this machine and other hosts, every group's
//! measured window started together (each host's clock offset applied), the windows checked
//! to overlap, and the groups' results merged exactly (histograms added). A group that fails
//! stops the step's other groups at once; a host that fails two steps in a row is marked down
//! for the rest of the run.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

pub use super::remote_group::load_args;
use super::remote_group::{remote_load, settle_fetched, GroupFailure, GroupStart, RemoteLoad};
use super::session::HostSession;
use crate::clock::now_ns;
use crate::fleet::driver::{engine_config, Driver, StepLoad, StepRequest};
use crate::fleet::error::StepError;
use crate::fleet::instances::{instance_sinks, merge_loads, share};
use crate::load::merge::{ChannelSink, Line, LineMerger};
use crate::load::ProtoOptions;
use crate::record::load::IntervalSink;
use crate::record::overhead::{GroupOverhead, GroupTimes, StepOverhead};
use crate::remote::window::{plan_start, to_reference, window_overlap, Window, MIN_WINDOW_OVERLAP};
use crate::remote::ClockOffset;

/// Time from planning a step's common start to the start: enough for ssh to log in and the
/// generators to connect. It grows to twice the slowest remote start seen (a loaded machine
/// logs in slowly), up to `MAX_START_LEAD`.
pub const START_LEAD: Duration = Duration::from_secs(3);

/// The longest common-start lead.
pub const MAX_START_LEAD: Duration = Duration::from_secs(20);

/// Steps in a row a host may fail (ssh lost or unreachable) before it is marked down for the
/// rest of the run: it is tried once more at the step after its first failure.
pub const FAILED_STEPS_BEFORE_DOWN: u32 = 2;

/// The dry run's guess of a run's host set-up (in parallel, the binary copied: 6.5–7.4 s
/// measured with six namespace hosts on a quiet machine).
pub const SET_UP_ESTIMATE: Duration = Duration::from_secs(8);

/// The dry run's guess of the time to bring back a step's group files (one ssh session per
/// group, in parallel).
pub const FETCH_ESTIMATE: Duration = Duration::from_secs(1);

/// The name a client group may give for this machine.
pub const LOCAL: &str = "local";

/// What other hosts add to a run: the set-up once (when there are `any_hosts`), and per step
/// with client groups (`client_groups`: each one's host, `None` here) the common-start lead
/// (and with remote ones the fetch).
pub fn hosts_overhead(any_hosts: bool, client_groups: &[Option<String>]) -> (Duration, Duration) {
    let set_up = if any_hosts {
        SET_UP_ESTIMATE
    } else {
        Duration::ZERO
    };
    let per_step = if client_groups.is_empty() {
        Duration::ZERO
    } else if client_groups.iter().any(Option::is_some) {
        START_LEAD + FETCH_ESTIMATE
    } else {
        START_LEAD
    };
    (set_up, per_step)
}

/// The dry run's line of a step's client groups: each one's host and share of the step's
/// `clients`, `connections` and rate, as `group_request` splits them.
pub fn describe_shares(
    (clients, connections, rate_rps): (usize, usize, Option<f64>),
    hosts: &[Option<String>],
) -> String {
    let n = hosts.len();
    let shares: Vec<String> = hosts
        .iter()
        .enumerate()
        .map(|(k, h)| {
            let rate = rate_rps.map_or(String::new(), |r| format!(" @ {:.0}/s", r / n as f64));
            let host = h.as_deref().unwrap_or(LOCAL);
            let (c, conns) = (share(clients, n, k).max(1), share(connections, n, k));
            format!("{host} {c}/{conns}{rate}")
        })
        .collect();
    format!(
        "client groups (clients/connections each): {}",
        shares.join(", ")
    )
}

/// Where one client group runs.
#[derive(Debug, Clone)]
pub enum GroupHost {
    /// This machine.
    Local,
    /// A connected host.
    Remote(Arc<HostSession>),
    /// A host that could not be set up, or was marked down during the run, and why.
    Down(String, String),
}

impl GroupHost {
    fn name(&self) -> &str {
        match self {
            GroupHost::Local => LOCAL,
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
    /// Each host's failed steps in a row.
    pub failed_in_a_row: BTreeMap<String, u32>,
    /// Lines for the run's notes (a host marked down), taken by the step loop.
    pub notes: Vec<String>,
    /// The slowest remote start seen (an ssh login, or a remote load's start up to its
    /// process group).
    pub slowest_start: Duration,
}

impl GroupDriver {
    /// A driver over `groups` (none: `single` runs every step).
    pub fn new(single: Box<dyn Driver>, groups: Vec<GroupHost>, proto: ProtoOptions) -> Self {
        let slowest_start = (groups.iter())
            .filter_map(|g| match g {
                GroupHost::Remote(s) => Some(s.login),
                _ => None,
            })
            .max()
            .unwrap_or_default();
        GroupDriver {
            single,
            groups,
            proto,
            failed_in_a_row: BTreeMap::new(),
            notes: Vec::new(),
            slowest_start,
        }
    }

    /// The common-start lead of the next step: `START_LEAD`, or twice the slowest remote start
    /// seen, at most `MAX_START_LEAD`.
    pub fn start_lead(&self) -> Duration {
        (self.slowest_start * 2).clamp(START_LEAD, MAX_START_LEAD)
    }
}

/// One group's load and its timing in the local clock.
type GroupLoad = (StepLoad, GroupTimes);

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
        self.run_groups(req, sink, stop)
            .map_err(|e| StepError::Remote(e.to_string()))
    }

    fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }
}

/// Why a step over client groups failed.
#[derive(Debug, thiserror::Error)]
pub enum GroupsError {
    /// Fewer connections than groups.
    #[error(
        "{groups} client groups need at least {groups} connections; this step opens {connections}"
    )]
    TooFewConnections {
        /// The groups.
        groups: usize,
        /// The step's connections.
        connections: usize,
    },
    /// A group's host was down from the start, or groups failed: each `client group K (host
    /// H): why`, joined.
    #[error("{0}")]
    Groups(String),
    /// Stopped (Ctrl-C).
    #[error("interrupted")]
    Interrupted,
    /// The groups' windows overlap too little to add their loads.
    #[error("the client groups' measured windows overlap {:.1}% (at least {:.0}% is needed): {}", .overlap * 100.0, MIN_WINDOW_OVERLAP * 100.0, describe_windows(.windows))]
    Overlap {
        /// Their overlap, a fraction of the longest window.
        overlap: f64,
        /// Each group's window.
        windows: Vec<(i64, i64)>,
    },
    /// Their loads could not be merged.
    #[error("{0}")]
    Merge(String),
}

impl GroupDriver {
    /// Runs each group's share at one planned instant and merges their loads. The first
    /// group to fail stops the others.
    fn run_groups(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, GroupsError> {
        let n = self.groups.len();
        if req.connections < n {
            return Err(GroupsError::TooFewConnections {
                groups: n,
                connections: req.connections,
            });
        }
        if let Some(why) = self.down_reason() {
            return Err(GroupsError::Groups(why));
        }
        let subs: Vec<StepRequest> = (0..n).map(|k| group_request(req, k, n)).collect();
        let offsets: Vec<ClockOffset> = self.groups.iter().map(GroupHost::offset).collect();
        let lead = self.start_lead();
        let start = plan_start(lead, &offsets);
        let window_start_ns = start.common_start_ns + req.warmup.as_nanos() as i64;
        let window_end_ns = window_start_ns + req.duration.as_nanos() as i64;
        let mut merger = LineMerger::new(n, instance_sinks(&subs, req, true));
        let (tx, rx) = mpsc::channel::<Line>();
        // Set by Ctrl-C or by the first group that fails: the others stop at once.
        let halt = AtomicBool::new(false);
        let slowest_start_ns = AtomicU64::new(0);
        let results: Vec<Result<GroupLoad, GroupFailure>> = std::thread::scope(|scope| {
            let handles: Vec<_> = subs
                .iter()
                .zip(&self.groups)
                .zip(&start.host_start_ns)
                .enumerate()
                .map(|(k, ((sub, host), &at))| {
                    let tx = tx.clone();
                    let proto = group_proto(&self.proto, req, k);
                    let (halt, slowest) = (&halt, &slowest_start_ns);
                    let start = GroupStart { at, lead, slowest };
                    scope.spawn(move || {
                        let result = run_group(host, sub, &proto, start, k, tx, halt);
                        if result.is_err() {
                            halt.store(true, Ordering::Relaxed);
                        }
                        result
                    })
                })
                .collect();
            drop(tx);
            let window = (window_start_ns, window_end_ns);
            follow_planned_window(&rx, window, &mut merger, sink, (stop, &halt));
            merger.flush(sink);
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(GroupFailure::Load("the load thread panicked".into()))
                    })
                })
                .collect()
        });
        let slowest = Duration::from_nanos(slowest_start_ns.load(Ordering::Relaxed));
        self.slowest_start = self.slowest_start.max(slowest);
        self.count_host_failures(&results);
        let merged = if stop.load(Ordering::Relaxed) {
            Err(GroupsError::Interrupted)
        } else {
            let planned = (window_start_ns, window_end_ns);
            self.merge(results, &subs, (start.common_start_ns, lead), planned)
        };
        merger.finish_instances(merged.is_ok());
        settle_fetched(&req.out_dir, &subs, merged.is_ok());
        merged
    }

    /// Why the step cannot run: a group's host is down.
    fn down_reason(&self) -> Option<String> {
        self.groups.iter().enumerate().find_map(|(k, g)| match g {
            GroupHost::Down(name, why) => Some(format!("client group {k} (host {name}): {why}")),
            _ => None,
        })
    }

    /// Counts each host's failed steps in a row; a host at `FAILED_STEPS_BEFORE_DOWN` is
    /// marked down (its groups' later steps fail at once) and the run's notes say so.
    fn count_host_failures(&mut self, results: &[Result<GroupLoad, GroupFailure>]) {
        let mut down = Vec::new();
        for (k, r) in results.iter().enumerate() {
            let name = self.groups[k].name().to_string();
            match r {
                Ok(_) => {
                    self.failed_in_a_row.remove(&name);
                }
                Err(GroupFailure::Host(why)) => {
                    let count = self.failed_in_a_row.entry(name.clone()).or_insert(0);
                    *count += 1;
                    if *count == FAILED_STEPS_BEFORE_DOWN {
                        down.push((name, why.clone()));
                    }
                }
                Err(_) => {}
            }
        }
        for (name, why) in down {
            self.notes.push(format!(
                "host {name}: marked down for the rest of the run after failing \
                 {FAILED_STEPS_BEFORE_DOWN} steps in a row; its client group's later steps \
                 fail at once. Last reason: {why}"
            ));
            let why = format!(
                "marked down after failing {FAILED_STEPS_BEFORE_DOWN} steps in a row: {why}"
            );
            for g in self.groups.iter_mut().filter(|g| g.name() == name) {
                *g = GroupHost::Down(name.clone(), why.clone());
            }
        }
    }

    /// Merges the groups' loads; `(start_ns, lead)`: the step's agreed start (this clock) and
    /// its lead, for the overhead figures.
    fn merge(
        &mut self,
        results: Vec<Result<GroupLoad, GroupFailure>>,
        subs: &[StepRequest],
        (start_ns, lead): (i64, Duration),
        planned: Window,
    ) -> Result<StepLoad, GroupsError> {
        let mut times = Vec::new();
        let mut loads = Vec::new();
        let mut failures = Vec::new();
        let mut stopped = 0;
        for (k, r) in results.into_iter().enumerate() {
            let host = self.groups[k].name();
            match r {
                Ok((load, t)) => {
                    times.push(t);
                    loads.push(Ok(load));
                }
                Err(GroupFailure::Host(why) | GroupFailure::Load(why)) => {
                    failures.push(format!("client group {k} (host {host}): {why}"))
                }
                Err(GroupFailure::Stopped) => stopped += 1,
            }
        }
        if !failures.is_empty() {
            let mut why = failures.join("; ");
            if stopped > 0 {
                why.push_str(&format!("; the other {stopped} group(s) were stopped"));
            }
            return Err(GroupsError::Groups(why));
        }
        let windows: Vec<_> = times.iter().map(|t| t.window_ns).collect();
        let overlap = window_overlap(&windows);
        if overlap < MIN_WINDOW_OVERLAP {
            return Err(GroupsError::Overlap { overlap, windows });
        }
        let lead_ms = lead.as_secs_f64() * 1e3;
        let overhead = StepOverhead::of(&times, start_ns, lead_ms);
        // A group ready only after the agreed start (a negative margin) took the lead and
        // that much to start: the next step's lead is twice it (`start_lead`).
        if let Some(late_us) = overhead.start_margin_us.map(|m| -m).filter(|&l| l > 0.0) {
            let late = Duration::from_secs_f64(late_us / 1e6);
            self.slowest_start = self.slowest_start.max(lead + late);
        }
        let observed_overlap = window_overlap(&[&windows[..], &[planned]].concat());
        let mut merged = merge_loads(loads, subs).map_err(|e| GroupsError::Merge(e.to_string()))?;
        let mut per_host = std::mem::take(&mut merged.figures.per_instance);
        for (k, part) in per_host.iter_mut().enumerate() {
            part.instance = None;
            part.group = Some(k);
            part.host = Some(self.groups[k].name().to_string());
            part.window_unix_ns = Some(windows[k]);
            part.overhead = Some(GroupOverhead::of(&times[k], start_ns));
            part.client_busy_pct = Some(merged_busy(&subs[k], &part.load.client_cpu.per_core_busy));
        }
        // Threads of different hosts side by side mean nothing: each host's are in per_host.
        merged.report.client_cpu.per_core_busy.clear();
        merged.figures.per_host = per_host;
        merged.figures.window_overlap = Some(overlap);
        merged.figures.observed_window_overlap = Some(observed_overlap);
        merged.figures.groups_overhead = Some(overhead);
        Ok(merged)
    }
}

/// A group's generator busy % per CPU of its host (its threads' busy % summed over the CPU
/// each is pinned to, `cpus[t % len]`; by thread when it has no cpuset).
fn merged_busy(sub: &StepRequest, threads: &[f64]) -> BTreeMap<String, f64> {
    let mut busy = BTreeMap::new();
    // A thread whose busy % is unknown (NaN) adds nothing, and keeps its place.
    for (t, pct) in threads.iter().enumerate().filter(|(_, p)| p.is_finite()) {
        let key = match sub.client_cpus.len() {
            0 => format!("thread {t}"),
            n => format!("cpu {}", sub.client_cpus[t % n]),
        };
        *busy.entry(key).or_insert(0.0) += pct;
    }
    busy
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
        url: req
            .group_targets
            .get(k)
            .map_or_else(|| req.url.clone(), |t| t.url.clone()),
        instances: Vec::new(),
        group_cpus: Vec::new(),
        group_targets: Vec::new(),
        ..req.clone()
    }
}

/// Group `k`'s protocol options: the spec's, its seed moved by the group's target's offset.
fn group_proto(proto: &ProtoOptions, req: &StepRequest, k: usize) -> ProtoOptions {
    let mut proto = proto.clone();
    if let Some(t) = req.group_targets.get(k) {
        proto.seed = proto.seed.wrapping_add(t.seed_offset);
    }
    proto
}

/// Runs one group: here with the engine, on a host with `stairbench load` through its engine. `halt`
/// stops it early.
fn run_group(
    host: &GroupHost,
    sub: &StepRequest,
    proto: &ProtoOptions,
    start: GroupStart,
    k: usize,
    tx: mpsc::Sender<Line>,
    halt: &AtomicBool,
) -> Result<GroupLoad, GroupFailure> {
    let mut chan = ChannelSink { k, tx };
    match host {
        GroupHost::Local => {
            let config = engine_config(proto, sub);
            let outcome = crate::load::run_at(&config, Some(start.at), &mut chan, halt).map_err(
                |e| match e {
                    crate::load::LoadError::Stopped => GroupFailure::Stopped,
                    e => GroupFailure::Load(e.to_string()),
                },
            )?;
            if halt.load(Ordering::Relaxed) {
                return Err(GroupFailure::Stopped);
            }
            let load = StepLoad {
                report: outcome.report,
                hist_ns: Some(outcome.hist_ns),
                figures: Default::default(),
            };
            // This machine's clock is the reference.
            let times = GroupTimes {
                started_ns: outcome.window_unix_ns.0 - sub.warmup.as_nanos() as i64,
                window_ns: outcome.window_unix_ns,
                ready_ns: Some(outcome.ready_unix_ns),
                on_disk_ns: None,
            };
            Ok((load, times))
        }
        GroupHost::Remote(session) => {
            let RemoteLoad {
                raw,
                report,
                on_disk_ns,
            } = remote_load(session, sub, proto, &start, halt)?;
            for (line, hist) in &raw.lines {
                chan.interval(line, hist);
            }
            let offset_ns = session.offset.offset_ns;
            let window_ns = to_reference(raw.window_unix_ns, &session.offset);
            let times = GroupTimes {
                started_ns: window_ns.0 - sub.warmup.as_nanos() as i64,
                window_ns,
                ready_ns: raw.ready_unix_ns.map(|r| r - offset_ns),
                on_disk_ns: Some(on_disk_ns),
            };
            let load = StepLoad {
                report,
                hist_ns: Some(raw.hist_ns),
                figures: Default::default(),
            };
            Ok((load, times))
        }
        GroupHost::Down(name, why) => Err(GroupFailure::Host(format!("host {name:?}: {why}"))),
    }
}

/// Merges the groups' lines as they come while signalling the planned window to the
/// observers: the window follows the clock, not the lines (which come at the end). Ctrl-C
/// (`stop`) sets `halt`; once `halt` is set (a group failed) a started window ends at once.
fn follow_planned_window(
    rx: &mpsc::Receiver<Line>,
    (window_start_ns, window_end_ns): (i64, i64),
    merger: &mut LineMerger,
    sink: &mut dyn IntervalSink,
    (stop, halt): (&AtomicBool, &AtomicBool),
) {
    let (mut started, mut ended) = (false, false);
    loop {
        if stop.load(Ordering::Relaxed) {
            halt.store(true, Ordering::Relaxed);
        }
        let halted = halt.load(Ordering::Relaxed);
        if !started && !halted && now_ns() >= window_start_ns {
            sink.window_started();
            started = true;
        }
        if started && !ended && (halted || now_ns() >= window_end_ns) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_s_busy_is_summed_per_cpu_of_its_host() {
        let req = StepRequest {
            step_id: "s".into(),
            url: "msgr://10.0.0.2:7000".into(),
            port: 7000,
            clients: 3,
            connections: 3,
            depth: 1,
            message: None,
            threads: 3,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(1),
            rate_rps: None,
            client_cpus: vec![2, 5],
            out_dir: std::path::PathBuf::new(),
            instances: Vec::new(),
            group_cpus: Vec::new(),
            group_targets: Vec::new(),
        };
        let threads = [40.0, 30.0, 20.0];
        let busy = merged_busy(&req, &threads);
        // Threads 0 and 2 run on CPU 2, thread 1 on CPU 5.
        assert_eq!(busy.get("cpu 2"), Some(&60.0));
        assert_eq!(busy.get("cpu 5"), Some(&30.0));
        let no_cpuset = StepRequest {
            client_cpus: Vec::new(),
            ..req
        };
        let busy = merged_busy(&no_cpuset, &threads);
        assert_eq!(busy.len(), 3);
        assert_eq!(busy.get("thread 1"), Some(&30.0));
    }
}
