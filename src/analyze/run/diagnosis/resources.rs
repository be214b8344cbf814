//! The resource table (the USE method, issue 40): for each resource a series' requests pass
//! through (the load generator's CPUs, the server's CPUs and busiest thread, its CPU quota,
//! other processes on its CPUs, its sockets' queues, the link, the disk and its I/O throttle,
//! the locks its threads wait on, the process it waits on), its utilisation, saturation and
//! errors at the level the rules read (the last one), from the same figures the rules read,
//! and whether it is full by the threshold it is judged against. Each threshold is one of the
//! named constants of the rules; the reports write the table's words (report/diagnosis.rs).
//!
//! A series whose throughput still grows while its requests wait on a full storage resource is
//! latency-bound on it ([`latency_bound`]): the table says which.

use serde::{Deserialize, Serialize};

use super::limits_cpu::{
    others_pct, NEIGHBOUR_PCT, NEIGHBOUR_WAIT_PCT, QUOTA_USED_PCT, THROTTLED_PCT,
};
use super::limits_io::{BLKIO_WAITING_MIN, IO_BUSY_PCT, NEXT_DISK, WAITING_MIN, WAITING_SHARE};
use super::{
    ev, rps, us, Confidence, Ctx, Found, Level, Limit, Metric, BUSY_PCT, THREAD_BUSY_PCT,
    WAITING_PER_CPU,
};
use crate::record::observed::{Observation, StateSeconds};

/// A kind of wait (storage, locks, a socket peer) that takes at least this share (percent) of
/// the server threads' time on something (every state but waiting for work) is what its
/// requests wait on: more than all the others together.
pub const WAIT_SHARE_PCT: f64 = 50.0;

/// A resource a request passes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resource {
    /// The load generator's own CPUs.
    ClientCpus,
    /// The server's CPUs (its cpuset), by the server tree's own CPU.
    ServerCpus,
    /// The server's busiest thread, on its one CPU at a time.
    BusiestThread,
    /// The CPU quota of the server's cgroup (or a cgroup cpuset narrower than its placement).
    CpuQuota,
    /// Other processes on the server's or the load generator's CPUs.
    OtherProcesses,
    /// The server's sockets: connections with a request it has not read, and the accept queue.
    SocketQueues,
    /// The network link carrying the server's traffic.
    Link,
    /// The busiest block device the server uses.
    Disk,
    /// The most used I/O throttle of the server's cgroups.
    IoThrottle,
    /// The locks the server's threads wait on (from their thread states).
    Locks,
    /// The process the server's threads wait on through a socket (its upstream, a database),
    /// from their thread states' socket peers.
    NextHop,
}

/// What a saturation or error figure counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// Threads waiting for a CPU on average, per CPU of the set.
    ThreadsWaitingPerCpu,
    /// The load generator's threads waiting for a CPU on average.
    ThreadsWaiting,
    /// Tasks of the server's tree waiting on the resource, on average.
    TasksWaiting,
    /// Requests waiting unread in the server's sockets, on average.
    RequestsWaiting,
    /// Enforcement periods throttled, percent of all.
    ThrottledPeriodsPct,
    /// Requests in flight on the device, on average.
    DeviceQueue,
    /// Packets the qdisc held back over its rate in the window.
    PacketsHeldBack,
    /// Packets dropped and TCP segments retransmitted in the window.
    PacketsLost,
}

/// A figure and what it counts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// Its value.
    pub value: f64,
    /// What it counts.
    pub of: Quantity,
}

/// The thresholds a row is judged against: each one of the rules' named constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Threshold {
    /// Utilisation at least [`BUSY_PCT`]: no CPU left.
    BusyPct,
    /// Utilisation at least [`THREAD_BUSY_PCT`] of one CPU: the thread is saturated.
    ThreadBusyPct,
    /// Saturation at least [`WAITING_PER_CPU`] thread waiting per CPU: oversubscribed.
    WaitingPerCpu,
    /// Utilisation at least [`QUOTA_USED_PCT`] of the quota.
    QuotaUsedPct,
    /// Saturation at least [`THROTTLED_PCT`] of the periods throttled.
    ThrottledPct,
    /// Others' share at least [`NEIGHBOUR_PCT`] of CPUs [`BUSY_PCT`] busy, on which the side's
    /// threads waited at least [`NEIGHBOUR_WAIT_PCT`] of the window.
    NeighbourPct,
    /// Saturation at least [`WAITING_SHARE`] of the clients (and [`WAITING_MIN`]).
    WaitingShare,
    /// Utilisation at least [`IO_BUSY_PCT`] of the capacity.
    IoBusyPct,
    /// Saturation at least [`BLKIO_WAITING_MIN`] tasks waiting, where counted.
    BlkioWaitingMin,
    /// Share of the server threads' time at least [`WAIT_SHARE_PCT`].
    WaitSharePct,
}

impl Resource {
    /// Every resource, in the table's order.
    pub const ALL: [Resource; 11] = [
        Resource::ClientCpus,
        Resource::ServerCpus,
        Resource::BusiestThread,
        Resource::CpuQuota,
        Resource::OtherProcesses,
        Resource::SocketQueues,
        Resource::Link,
        Resource::Disk,
        Resource::IoThrottle,
        Resource::Locks,
        Resource::NextHop,
    ];
}

impl Threshold {
    /// Every threshold.
    pub const ALL: [Threshold; 10] = [
        Threshold::BusyPct,
        Threshold::ThreadBusyPct,
        Threshold::WaitingPerCpu,
        Threshold::QuotaUsedPct,
        Threshold::ThrottledPct,
        Threshold::NeighbourPct,
        Threshold::WaitingShare,
        Threshold::IoBusyPct,
        Threshold::BlkioWaitingMin,
        Threshold::WaitSharePct,
    ];

    /// The bound, in the unit of the figure it is compared with.
    pub fn value(self) -> f64 {
        match self {
            Threshold::BusyPct => BUSY_PCT,
            Threshold::ThreadBusyPct => THREAD_BUSY_PCT,
            Threshold::WaitingPerCpu => WAITING_PER_CPU,
            Threshold::QuotaUsedPct => QUOTA_USED_PCT,
            Threshold::ThrottledPct => THROTTLED_PCT,
            Threshold::NeighbourPct => NEIGHBOUR_PCT,
            Threshold::WaitingShare => WAITING_SHARE,
            Threshold::IoBusyPct => IO_BUSY_PCT,
            Threshold::BlkioWaitingMin => BLKIO_WAITING_MIN,
            Threshold::WaitSharePct => WAIT_SHARE_PCT,
        }
    }
}

/// A threshold and its value, as analysis.json holds it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bound {
    /// Which threshold.
    pub threshold: Threshold,
    /// Its value (see [`Threshold::value`]).
    pub value: f64,
}

impl From<Threshold> for Bound {
    fn from(threshold: Threshold) -> Bound {
        Bound {
            threshold,
            value: threshold.value(),
        }
    }
}

/// How a row stands against its thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Full by one of its thresholds.
    Saturated,
    /// Below every threshold.
    Room,
    /// Its figures were not measured.
    NotObserved,
}

/// One resource at one load level.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResourceRow {
    /// Which resource.
    pub resource: Resource,
    /// Its name on this machine: a thread's, a device's, a cgroup's, an interface's, a process's.
    pub name: String,
    /// How busy it was, percent of its capacity (None where it has no known capacity or was not
    /// measured).
    pub utilisation_pct: Option<f64>,
    /// The work it could not serve at once: a queue, a wait, throttling.
    pub saturation: Option<Figure>,
    /// Its errors over the window (lost packets).
    pub errors: Option<Figure>,
    /// The server threads' time on it or waiting for it, percent of their time on something
    /// (thread states; None when they were not sampled).
    pub time_share_pct: Option<f64>,
    /// The thresholds it is judged against.
    pub thresholds: Vec<Bound>,
    /// How it stands against them.
    pub state: State,
    /// The load level (clients) its figures come from.
    pub at_clients: usize,
}

/// The server threads' states at one level, repetitions averaged.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct StatesLevel {
    /// Thread-seconds in each state over the window, a parked group's lock waits counted as
    /// waiting for work ([`working_total`](crate::analyze::budget::working_total)).
    seconds: StateSeconds,
    /// Thread-seconds in lock waits as sampled, parked groups' included: whether the waits
    /// came with the load, apart from whether they are locks (a pool parked at one level
    /// and not at the next has the same waits, read two ways).
    raw_lock_s: f64,
    /// The window, in seconds.
    window_s: f64,
    /// The socket peer waited on longest: (its name, thread-seconds).
    peer: Option<(String, f64)>,
}

/// A level's server thread states from its repetitions' observations (None when not sampled).
pub(super) fn states_level(observed: &[Observation]) -> Option<StatesLevel> {
    let with: Vec<&Observation> = observed
        .iter()
        .filter(|o| o.thread_states.is_some() && o.window_s > 0.0)
        .collect();
    let n = with.len() as f64;
    let mut seconds = StateSeconds::default();
    let mut raw_lock_s = 0.0;
    let mut peers: Vec<(String, f64)> = Vec::new();
    for o in &with {
        let ts = o.thread_states.as_ref()?;
        seconds.add(&crate::analyze::budget::working_total(ts));
        raw_lock_s += ts.total().lock_s;
        for p in ts.groups.iter().flat_map(|g| &g.peers) {
            let name = match (&p.process, p.pid) {
                (Some(proc_name), Some(pid)) => format!("{proc_name} (pid {pid}, {})", p.addr),
                _ => p.addr.clone(),
            };
            match peers.iter_mut().find(|x| x.0 == name) {
                Some(x) => x.1 += p.thread_s / n,
                None => peers.push((name, p.thread_s / n)),
            }
        }
    }
    (n > 0.0).then(|| StatesLevel {
        seconds: seconds.scaled(1.0 / n),
        raw_lock_s: raw_lock_s / n,
        window_s: with.iter().map(|o| o.window_s).sum::<f64>() / n,
        peer: peers.into_iter().max_by(|a, b| a.1.total_cmp(&b.1)),
    })
}

impl StatesLevel {
    /// `part`'s share of the threads' time on something, percent.
    fn share_pct(&self, part: f64) -> Option<f64> {
        let busy = self.seconds.busy_s();
        (busy > 0.0).then(|| 100.0 * part / busy)
    }
    /// Threads in `part` on average over the window.
    fn mean_threads(&self, part: f64) -> f64 {
        part / self.window_s
    }
}

fn state(measured: bool, full: bool) -> State {
    match (measured, full) {
        (_, true) => State::Saturated,
        (true, false) => State::Room,
        (false, false) => State::NotObserved,
    }
}

fn row(resource: Resource, name: impl Into<String>, at: usize) -> ResourceRow {
    ResourceRow {
        resource,
        name: name.into(),
        utilisation_pct: None,
        saturation: None,
        errors: None,
        time_share_pct: None,
        thresholds: Vec::new(),
        state: State::NotObserved,
        at_clients: at,
    }
}

fn figure(value: f64, of: Quantity) -> Option<Figure> {
    value.is_finite().then_some(Figure { value, of })
}

/// The resource table of a series at the level its rules read (the last one).
pub(super) fn table(c: &Ctx) -> Vec<ResourceRow> {
    let top = c.top();
    let mut rows = vec![client_cpus(c), server_cpus(top), busiest_thread(top)];
    rows.extend(cpu_quota(top));
    rows.extend(other_processes(top));
    rows.push(socket_queues(top));
    rows.push(link(top));
    rows.extend(storage(top));
    rows.extend(locks(c));
    rows.extend(next_hop(top));
    rows
}

fn client_cpus(c: &Ctx) -> ResourceRow {
    // A saturated level is left out of the knee: the first one is where the client ran out.
    let l = c
        .levels
        .iter()
        .find(|l| l.client_saturated)
        .unwrap_or(c.top());
    let mut r = row(Resource::ClientCpus, "the load generator", l.clients);
    r.utilisation_pct = l.client_cpu_pct;
    r.saturation = l
        .client_run_delay_pct
        .and_then(|p| figure(p / 100.0, Quantity::ThreadsWaiting));
    r.thresholds = vec![Threshold::BusyPct.into()];
    r.state = state(
        l.client_cpu_pct.is_some(),
        l.client_saturated || l.client_cpu_pct.is_some_and(|p| p >= BUSY_PCT),
    );
    r
}

fn server_cpus(top: &Level) -> ResourceRow {
    let n = top.server_cpus;
    let name = format!("{n} CPU{}", if n == 1 { "" } else { "s" });
    let mut r = row(Resource::ServerCpus, name, top.clients);
    r.utilisation_pct = top.server_cpu_pct;
    let per_cpu = top.run_delay_pct.map(|p| p / 100.0 / n.max(1) as f64);
    r.saturation = per_cpu.and_then(|w| figure(w, Quantity::ThreadsWaitingPerCpu));
    r.time_share_pct = top.states.as_ref().and_then(|s| {
        let t = &s.seconds;
        s.share_pct(t.on_cpu_user_s + t.on_cpu_sys_s + t.runqueue_s)
    });
    r.thresholds = vec![Threshold::BusyPct.into(), Threshold::WaitingPerCpu.into()];
    r.state = state(
        top.server_cpu_pct.is_some(),
        top.server_cpu_pct.is_some_and(|p| p >= BUSY_PCT)
            || per_cpu.is_some_and(|w| w >= WAITING_PER_CPU),
    );
    r
}

fn busiest_thread(top: &Level) -> ResourceRow {
    let name = top.busiest.as_ref().map_or("", |b| b.0.as_str());
    let mut r = row(Resource::BusiestThread, name, top.clients);
    let pct = top.busiest.as_ref().map(|b| b.1);
    r.utilisation_pct = pct;
    r.thresholds = vec![Threshold::ThreadBusyPct.into()];
    r.state = state(pct.is_some(), pct.is_some_and(|p| p >= THREAD_BUSY_PCT));
    r
}

fn cpu_quota(top: &Level) -> Option<ResourceRow> {
    if let Some(q) = top.cpu.quota.as_ref() {
        let mut r = row(
            Resource::CpuQuota,
            format!("cgroup {}: {:.2} CPUs", q.path, q.quota_cpus),
            top.clients,
        );
        let (used, thr) = (q.used_pct(), q.throttled_pct());
        r.utilisation_pct = Some(used);
        r.saturation = figure(thr, Quantity::ThrottledPeriodsPct);
        r.thresholds = vec![
            Threshold::QuotaUsedPct.into(),
            Threshold::ThrottledPct.into(),
        ];
        r.state = state(true, used >= QUOTA_USED_PCT || thr >= THROTTLED_PCT);
        return Some(r);
    }
    let (set, used) = top.cpu.narrower.clone()?;
    let n = crate::cpuset::parse(&set).ok()?.len() as f64;
    let mut r = row(
        Resource::CpuQuota,
        format!("cpuset cgroup: CPUs {set}"),
        top.clients,
    );
    let pct = 100.0 * used / n;
    r.utilisation_pct = Some(pct);
    r.thresholds = vec![Threshold::QuotaUsedPct.into()];
    r.state = state(true, pct >= QUOTA_USED_PCT);
    Some(r)
}

fn other_processes(top: &Level) -> Option<ResourceRow> {
    let n = top.cpu.neighbours.as_ref()?;
    let (server_busy, client_busy) = top.cpu.busy_pct;
    let taken = |others: Option<f64>, busy: Option<f64>, wait: Option<f64>| {
        others.is_some_and(|o| o >= NEIGHBOUR_PCT)
            && busy.is_some_and(|b| b >= BUSY_PCT)
            && wait.is_none_or(|w| w >= NEIGHBOUR_WAIT_PCT)
    };
    let server = n.server_cpus_others_pct.unwrap_or(0.0);
    let client = n.client_cpus_others_pct.unwrap_or(0.0);
    let side = if server >= client {
        "on the server's CPUs"
    } else {
        "on the load generator's CPUs"
    };
    let mut r = row(Resource::OtherProcesses, side, top.clients);
    r.utilisation_pct = Some(others_pct(n));
    r.thresholds = vec![Threshold::NeighbourPct.into()];
    r.state = state(
        true,
        taken(n.server_cpus_others_pct, server_busy, top.run_delay_pct)
            || taken(
                n.client_cpus_others_pct,
                client_busy,
                top.client_run_delay_pct,
            ),
    );
    Some(r)
}

fn socket_queues(top: &Level) -> ResourceRow {
    let mut r = row(
        Resource::SocketQueues,
        "the server's connections and accept queue",
        top.clients,
    );
    let waiting = top.io.waiting;
    r.saturation = waiting.and_then(|w| figure(w, Quantity::RequestsWaiting));
    r.thresholds = vec![Threshold::WaitingShare.into()];
    let clients = top.clients as f64;
    r.state = state(
        waiting.is_some(),
        waiting.is_some_and(|w| w >= WAITING_MIN && w >= WAITING_SHARE * clients),
    );
    r
}

fn link(top: &Level) -> ResourceRow {
    let Some(l) = top.io.link.as_ref() else {
        return row(Resource::Link, "", top.clients);
    };
    let name = match l.capacity_bits_per_s {
        Some(_) => l.interface.clone(),
        None => format!("{} (no known capacity)", l.interface),
    };
    let mut r = row(Resource::Link, name, top.clients);
    r.utilisation_pct = l.utilisation_pct;
    r.saturation = figure(l.overlimits, Quantity::PacketsHeldBack);
    r.errors = figure(l.drops + l.retrans, Quantity::PacketsLost);
    r.thresholds = vec![Threshold::IoBusyPct.into()];
    r.state = state(true, l.utilisation_pct.is_some_and(|u| u >= IO_BUSY_PCT));
    r
}

/// The device and the throttle: the tasks waiting for block I/O (delay accounting, or the
/// thread states' storage waits) and the storage share of the threads' time are the
/// throttle's when there is one (every I/O passes it first), else the device's.
fn storage(top: &Level) -> Vec<ResourceRow> {
    let states = top.states.as_ref();
    let waiting = top
        .io
        .disk
        .as_ref()
        .and_then(|d| d.blkio_waiting)
        .or_else(|| states.map(|s| s.mean_threads(s.seconds.storage_s)));
    let share = states.and_then(|s| s.share_pct(s.seconds.storage_s));
    let waited = |full: bool| {
        full && waiting.is_none_or(|w| w >= BLKIO_WAITING_MIN)
            || share.is_some_and(|s| s >= WAIT_SHARE_PCT)
    };
    let thresholds = vec![
        Threshold::IoBusyPct.into(),
        Threshold::BlkioWaitingMin.into(),
        Threshold::WaitSharePct.into(),
    ];
    let disk = top.io.disk.as_ref();
    let throttle = disk.and_then(|d| d.throttle.as_ref());
    let mut rows = Vec::new();
    let mut device = row(Resource::Disk, "", top.clients);
    if let Some((name, util, queue)) = disk.and_then(|d| d.device.as_ref()) {
        device.name = name.clone();
        device.utilisation_pct = Some(*util);
        device.saturation = figure(*queue, Quantity::DeviceQueue);
        device.thresholds = thresholds.clone();
        device.state = state(true, waited(*util >= IO_BUSY_PCT));
    }
    if throttle.is_none() {
        device.time_share_pct = share;
        if device.state != State::Saturated && share.is_some_and(|s| s >= WAIT_SHARE_PCT) {
            device.state = State::Saturated;
        }
        if let Some(w) = waiting {
            device.saturation = figure(w, Quantity::TasksWaiting);
        }
    }
    rows.push(device);
    if let Some((group, dev, kind, limit, pct)) = throttle {
        let mut r = row(
            Resource::IoThrottle,
            format!("cgroup {group}: {kind} on {dev}, {limit:.0}/s"),
            top.clients,
        );
        r.utilisation_pct = Some(*pct);
        r.saturation = waiting.and_then(|w| figure(w, Quantity::TasksWaiting));
        r.time_share_pct = share;
        r.thresholds = thresholds;
        r.state = state(true, waited(*pct >= IO_BUSY_PCT));
        rows.push(r);
    }
    rows
}

/// The server's threads waiting on a lock at the first level and at the last, on average, as
/// sampled (a parked group's futex waits included, so that the two levels count alike): what
/// the load added is their difference.
pub(super) fn lock_waiting_threads(c: &Ctx) -> Option<(f64, f64)> {
    let (f, t) = (c.first().states.as_ref()?, c.top().states.as_ref()?);
    Some((f.mean_threads(f.raw_lock_s), t.mean_threads(t.raw_lock_s)))
}

/// Lock waits count as full only when they came with the load (a quarter more than at the
/// first level): a futex wait is also how an idle helper thread sleeps on its condition
/// variable (redis's four bio threads: 80% of the tree's time on something at every level).
pub(super) fn locks(c: &Ctx) -> Option<ResourceRow> {
    let top = c.top();
    let s = top.states.as_ref()?;
    let mut r = row(Resource::Locks, "futexes, flock, fcntl locks", top.clients);
    r.saturation = figure(s.mean_threads(s.seconds.lock_s), Quantity::TasksWaiting);
    r.time_share_pct = s.share_pct(s.seconds.lock_s);
    r.thresholds = vec![Threshold::WaitSharePct.into()];
    // Grown with the load on the waits as sampled; a lock by the share of the working
    // threads' time. Judged both on the working threads' reading, the built-in pool (8
    // workers, 1 CPU) read saturated at 32 clients: parked at 1 client (0.9% on a CPU) and not
    // at 32 (3.6%), its 9.7 and 9.35 threads waiting read as 0 and 7.46.
    let grew = c.first().states.as_ref().is_none_or(|f| {
        s.mean_threads(s.raw_lock_s) >= (1.0 + super::FLAT_GROWTH) * f.mean_threads(f.raw_lock_s)
    });
    r.state = state(
        true,
        grew && r.time_share_pct.is_some_and(|p| p >= WAIT_SHARE_PCT),
    );
    Some(r)
}

/// The process the server's own connections went to (its next-hop record: its CPU against its
/// CPUs, the requests waiting inside it, full when its own figures show a limit), else the
/// socket peer the server's threads waited on.
fn next_hop(top: &Level) -> Option<ResourceRow> {
    if let Some(h) = top.io.hop.as_ref() {
        let hop = &h.limiting().hop;
        let mut r = row(Resource::NextHop, h.limiting().label(), top.clients);
        r.utilisation_pct = match (hop.cpu_pct, hop.cpus) {
            (Some(c), Some(n)) if n > 0 => Some(c / n as f64),
            _ => None,
        };
        r.saturation = figure(hop.waiting_mean(), Quantity::RequestsWaiting);
        r.thresholds = vec![Threshold::BusyPct.into(), Threshold::WaitingShare.into()];
        r.state = state(
            hop.pid.is_some(),
            h.limiting().own_limit() != super::next_hop::HopLimit::Unseen,
        );
        return Some(r);
    }
    let s = top.states.as_ref()?;
    let (name, _) = s.peer.clone()?;
    let mut r = row(Resource::NextHop, name, top.clients);
    r.saturation = figure(s.mean_threads(s.seconds.socket_s), Quantity::TasksWaiting);
    r.time_share_pct = s.share_pct(s.seconds.socket_s);
    r.thresholds = vec![Threshold::WaitSharePct.into()];
    r.state = state(true, r.time_share_pct.is_some_and(|p| p >= WAIT_SHARE_PCT));
    Some(r)
}

/// The rows a limit names: the resource it says ran out (none for coherency, a shape of the
/// curve, and for undetermined).
pub fn named_by(limit: Limit) -> &'static [Resource] {
    match limit {
        Limit::Client => &[Resource::ClientCpus],
        Limit::ServerCpu | Limit::Oversubscription => &[Resource::ServerCpus],
        Limit::OneThread => &[Resource::BusiestThread],
        Limit::Quota => &[Resource::CpuQuota],
        Limit::Neighbour => &[Resource::OtherProcesses],
        Limit::Concurrency => &[Resource::SocketQueues],
        Limit::Network => &[Resource::Link],
        Limit::Disk => &[Resource::IoThrottle, Resource::Disk],
        Limit::Contention => &[Resource::Locks],
        Limit::Outside => &[Resource::NextHop],
        Limit::Coherency | Limit::Undetermined => &[],
    }
}

/// A series still scaling (throughput not flat past where it would saturate) whose server's
/// CPUs have room while its storage is full, or its threads wait mostly on storage: its
/// latency is bound by the disk; throughput grows only as each I/O carries more requests.
/// The rule reads the table.
pub(super) fn latency_bound(c: &Ctx) -> Option<Found> {
    if c.flat_throughput() {
        return None;
    }
    let rows = table(c);
    let full = |r: Resource| {
        rows.iter()
            .find(|x| x.resource == r && x.state == State::Saturated)
    };
    if full(Resource::ServerCpus).is_some() || full(Resource::BusiestThread).is_some() {
        return None;
    }
    let storage = full(Resource::IoThrottle).or_else(|| full(Resource::Disk))?;
    let top = c.top();
    let at = Some(top.clients);
    let mut evidence = Vec::new();
    let mut because = String::new();
    if let Some(l) = top.latency_us {
        evidence.push(ev(
            Metric::MeanLatencyUs,
            l,
            at,
            "mean latency at the last level",
        ));
        because = format!("each request takes {} on average", us(l));
    }
    if let Some(s) = storage.time_share_pct {
        because.push_str(&format!(
            ", the server's threads spending {s:.0}% of their time on something blocked on storage"
        ));
    }
    let (metric, what) = match storage.resource {
        Resource::IoThrottle => (Metric::IoThrottleUsePct, "throttle"),
        _ => (Metric::DiskUtilPct, "device"),
    };
    evidence.push(ev(
        metric,
        storage.utilisation_pct.unwrap_or(f64::NAN),
        at,
        format!("{}: % of its capacity", storage.name),
    ));
    if let Some(w) = storage
        .saturation
        .filter(|f| f.of == Quantity::TasksWaiting)
    {
        evidence.push(ev(
            Metric::BlkioWaiting,
            w.value,
            at,
            "the server tree's tasks waiting for block I/O, mean",
        ));
    }
    let sep = if because.is_empty() { "" } else { "; " };
    because.push_str(&format!(
        "{sep}its storage {what} ({}) is {:.0}% used while its CPUs are {:.0}% busy",
        storage.name,
        storage.utilisation_pct.unwrap_or(f64::NAN),
        top.server_cpu_pct.unwrap_or(0.0)
    ));
    let grouped = ops_per_request(c);
    because.push_str(&format!(
        ": latency-bound on the disk, throughput still growing (to {} at {}){}",
        rps(top.throughput_rps),
        super::clients_text(top.clients),
        grouped.clone().unwrap_or_default()
    ));
    Some(Found {
        limit: Limit::Disk,
        confidence: Confidence::Low,
        evidence,
        because,
        // Writes already grouped: fewer syncs per request is what it does.
        next: match grouped {
            Some(_) => "faster storage or a higher I/O limit (its I/O already carries several requests each)".into(),
            None => NEXT_DISK.into(),
        },
    })
}

/// `, as each I/O carries more requests (0.95 operations per request at 1 client, 0.12 at
/// 64)`: the throttle's operations per request falling with the load (group commit), None
/// when they do not fall by a quarter or are not known.
fn ops_per_request(c: &Ctx) -> Option<String> {
    let per = |l: &Level| {
        let (_, _, kind, limit, pct) = l.io.disk.as_ref()?.throttle.as_ref()?;
        (kind.ends_with("iops") && l.throughput_rps > 0.0)
            .then(|| pct / 100.0 * limit / l.throughput_rps)
    };
    let (a, b) = (per(c.first())?, per(c.top())?);
    (b < (1.0 - super::FLAT_GROWTH) * a).then(|| {
        format!(
            " as each I/O carries more requests ({a:.2} operations per request at {}, {b:.2} at {})",
            super::clients_text(c.first().clients),
            c.top().clients
        )
    })
}

/// Why no limit is named, from the table: the resources full (whose rule's other figures did
/// not agree), those with room and those not observed.
pub(super) fn undetermined_because(rows: &[ResourceRow]) -> String {
    let of = |st: State| -> Vec<String> {
        rows.iter()
            .filter(|r| r.state == st)
            .map(|r| r.resource.to_string())
            .collect()
    };
    let (full, room, missing) = (
        of(State::Saturated),
        of(State::Room),
        of(State::NotObserved),
    );
    let mut parts = Vec::new();
    if !full.is_empty() {
        parts.push(format!(
            "{} full, but not in the shape of its limit",
            full.join(", ")
        ));
    }
    if !room.is_empty() {
        parts.push(format!("{} with room", room.join(", ")));
    }
    if !missing.is_empty() {
        parts.push(format!("{} not observed", missing.join(", ")));
    }
    format!(
        "no rule fits the evidence ({}): undetermined",
        parts.join("; ")
    )
}

/// What to try next when no rule fits: more repetitions only when noise is why (a deciding
/// level varied more than the rules' margin); else the figures not observed, or more load.
pub(super) fn next_when_undetermined(c: &Ctx, rows: &[ResourceRow]) -> String {
    let noisy = c
        .levels
        .iter()
        .filter(|l| l.noisy || l.throughput_cv > super::limits_cpu::HIGH_MAX_CV)
        .count();
    if noisy > 0 {
        return "run more repetitions or longer steps, with a profile pass, so that the noisy levels settle".into();
    }
    let missing: Vec<String> = rows
        .iter()
        .filter(|r| r.state == State::NotObserved)
        .map(|r| r.resource.to_string())
        .collect();
    if !missing.is_empty() {
        return format!(
            "observe what the table lists as not observed ({}), with a profile pass",
            missing.join(", ")
        );
    }
    format!(
        "run past {} clients, with a profile pass, to find what fills first",
        c.top().clients
    )
}

impl std::fmt::Display for Resource {
    /// Its name in a sentence and in the reports' table.
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(match self {
            Resource::ClientCpus => "the load generator's CPUs",
            Resource::ServerCpus => "the server's CPUs",
            Resource::BusiestThread => "its busiest thread",
            Resource::CpuQuota => "its CPU quota",
            Resource::OtherProcesses => "other processes",
            Resource::SocketQueues => "its sockets' queues",
            Resource::Link => "the link",
            Resource::Disk => "the disk",
            Resource::IoThrottle => "its I/O throttle",
            Resource::Locks => "locks",
            Resource::NextHop => "the next hop",
        })
    }
}
