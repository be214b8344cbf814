//! What is measured beside the load: process CPU, context switches, per-core busy %, perf counters.
//!
//! An [`Observer`] is started right before a step's measured window and finished right after
//! it, so nothing of the ramp-up or the teardown is counted. It samples /proc at both ends
//! (the server's process tree, /proc/stat, /proc/net/dev) and runs `perf stat` on the tree in
//! between. What it costs is measured too: `observer_cpu_s`.
//!
//! Around it: [`step`] (the step loop's [`step::StepObserver`] trait and its observers),
//! [`extra`] (`[[observe]]` processes, a split target's instances, the target's metrics),
//! [`metrics`] (the target's own metrics: files, endpoints, window differences), [`cores`]
//! (per-core busy % columns of the intervals CSV), [`perf`] and [`environment`]. This module
//! imports only the layers below it (machine, record, cpuset); the spec sections that
//! configure it are parsed by `sweep`.

pub mod answer;
pub mod cgroup_cpu;
pub mod cores;
pub mod disk;
pub mod environment;
pub mod extra;
pub mod fds;
pub mod link;
pub mod listing;
pub mod memcached;
pub mod metrics;
pub mod neighbours;
pub mod next_hop;
pub mod perf;
pub mod sockets;
pub mod step;
pub mod thread_states;
pub mod watch;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::machine::procfs::{self, CoreBusy, NetCounters};
use crate::machine::threads::{self, ThreadUsage};

pub use environment::{environment, Environment};
pub use perf::PerfCounters;

pub use crate::record::observed::{CpuUsPerReq, Observation, PerRequest, TreeUsage};

/// Observes one measured window; see the module documentation.
#[derive(Debug)]
pub struct Observer {
    server_pid: Option<i32>,
    server_cpus: Vec<usize>,
    client_cpus: Vec<usize>,
    tree: Option<procfs::TreeSample>,
    cpu_times: BTreeMap<usize, procfs::CpuTimes>,
    loopback: Option<NetCounters>,
    perf: Option<perf::PerfStat>,
    perf_note: Option<String>,
    started: Instant,
    /// How long after the window's start perf acknowledged `enable` (its counts begin then).
    perf_late_s: f64,
    own_cpu_s: f64,
    /// The tree sampled during the window (tasks that come and go inside it).
    watch: Option<watch::TreeWatch>,
    /// The cgroup hierarchies, and the server's CPU groups at the window's start.
    cgroups: (
        Vec<cgroup_cpu::Mount>,
        BTreeMap<std::path::PathBuf, cgroup_cpu::GroupSample>,
    ),
    /// Every process and thread at the window's start (for the neighbours).
    scan: neighbours::Scan,
    /// The server's sockets sampled during the window.
    sockets: Option<sockets::SocketWatch>,
    /// The server's network namespace at the window's start.
    link: Option<link::LinkSample>,
    /// The server's storage at the window's start.
    disk: Option<disk::DiskSample>,
    /// Every thread of the server's tree and of the load generator, sampled during the window.
    states: Option<thread_states::ThreadStateWatch>,
    /// The processes the server's own connections go to, followed during the window.
    next_hops: Option<next_hop::NextHopWatch>,
}

/// perf's counts are kept only if perf started counting within this share of the window: a
/// perf slow to acknowledge (a loaded machine) would otherwise count a shorter span than
/// the requests they are divided by.
const PERF_LATE_MAX_SHARE: f64 = 0.02;

impl Observer {
    /// Starts observing now: [`Observer::prepare`] then [`Observer::begin`].
    pub fn start(
        server_pid: Option<i32>,
        server_cpus: &[usize],
        client_cpus: &[usize],
    ) -> Observer {
        let mut obs = Observer::prepare(server_pid, server_cpus, client_cpus);
        obs.begin();
        obs
    }

    /// Attaches `perf stat` to the server's tree with its counters disabled, so its start-up
    /// cost falls before the measured window. Call [`Observer::begin`] when the window starts
    /// and [`Observer::finish`] when it ends, from the same thread (perf is tied to the
    /// starting thread's life by PR_SET_PDEATHSIG).
    pub fn prepare(
        server_pid: Option<i32>,
        server_cpus: &[usize],
        client_cpus: &[usize],
    ) -> Observer {
        let cpu0 = thread_cpu_s();
        let proc_root = Path::new("/proc");
        // The tree's processes only: reading every thread's files here cost as much as a
        // window's end (200 threads: a third of the observer's fixed cost).
        let pids = server_pid.and_then(|pid| {
            let parents = listing::parents(proc_root, Duration::ZERO);
            parents
                .contains_key(&pid)
                .then(|| procfs::descendants(pid, &parents))
        });
        let (perf, perf_note) = match &pids {
            Some(pids) => match perf::PerfStat::start(pids) {
                Ok(p) => (Some(p), None),
                Err(why) => (None, Some(why.to_string())),
            },
            None => (None, None),
        };
        Observer {
            server_pid,
            server_cpus: server_cpus.to_vec(),
            client_cpus: client_cpus.to_vec(),
            tree: None,
            cpu_times: BTreeMap::new(),
            loopback: None,
            perf,
            perf_note,
            started: Instant::now(),
            perf_late_s: 0.0,
            own_cpu_s: thread_cpu_s() - cpu0,
            watch: None,
            cgroups: (cgroup_cpu::mounts(), BTreeMap::new()),
            scan: neighbours::Scan::new(),
            sockets: None,
            link: None,
            disk: None,
            states: None,
            next_hops: None,
        }
    }

    /// The window starts: /proc is sampled, then perf's counters are enabled. /proc comes
    /// first because the window is timed from it: waiting for perf's acknowledgement first
    /// started the window up to 50 ms late on a loaded machine (observed 0.95 s for 1 s).
    pub fn begin(&mut self) {
        let cpu0 = thread_cpu_s();
        // The link first: tc takes a few milliseconds, outside the window.
        self.link = self.server_pid.and_then(link::sample);
        // Every process's stat and the tree's threads read once, for the tree, its disk and
        // the neighbours.
        let stats = procfs::all_pid_stats(Path::new("/proc"));
        self.tree = self
            .server_pid
            .and_then(|pid| procfs::sample_tree_from(Path::new("/proc"), pid, &stats));
        self.disk = self.tree.as_ref().map(disk::sample);
        self.scan =
            neighbours::scan_from(Path::new("/proc"), cpu_count(), &stats, self.tree.as_ref());
        self.cgroups.1 =
            cgroup_cpu::sample(Path::new("/proc"), &self.cgroups.0, &self.tree_pids(None));
        self.cpu_times = read_proc_stat();
        self.loopback = read_loopback();
        self.started = Instant::now();
        // Off with STAIRBENCH_THREAD_STATES=0 (`thread_states::enabled`). It reads a thread's
        // system call only when stat finds it asleep (the kernel never stops the thread for it),
        // keeps within 1% of a CPU, and left a 1-CPU grpcio server's throughput within noise
        // (docs/measured.md, "What the sampling costs").
        if thread_states::enabled() {
            self.states = thread_states::ThreadStateWatch::start(thread_states::Targets {
                server: self.tree.as_ref().and(self.server_pid),
                client: true,
            })
            .ok();
        }
        // The thread states read the tree's threads for the tree watch where they run: one
        // read of each thread, not two.
        if self.states.is_none() {
            self.watch = self
                .tree
                .as_ref()
                .and(self.server_pid)
                .and_then(|pid| watch::TreeWatch::start(pid).ok());
        }
        // The sockets thread's dumps, read by the next hop while it finds nothing to follow.
        let shared = sockets::SharedDump::default();
        self.sockets = self
            .tree
            .as_ref()
            .and(self.server_pid)
            .and_then(|pid| sockets::SocketWatch::start(pid, shared.clone()).ok());
        if let Some(perf) = &mut self.perf {
            if let Err(why) = perf.enable() {
                self.perf_note = Some(why.to_string());
            }
            self.perf_late_s = self.started.elapsed().as_secs_f64();
        }
        // After perf's enable, which is timed from the window's start.
        self.next_hops = self
            .tree
            .as_ref()
            .and(self.server_pid)
            .and_then(|pid| next_hop::NextHopWatch::start(pid, shared).ok());
        self.own_cpu_s += thread_cpu_s() - cpu0;
    }

    /// Ends the window: samples /proc again, stops perf, and returns the differences.
    pub fn finish(mut self) -> Observation {
        let cpu0 = thread_cpu_s();
        let window_s = self.started.elapsed().as_secs_f64();
        let mut states = self
            .states
            .take()
            .map(thread_states::ThreadStateWatch::finish);
        let watched = match self.watch.take() {
            Some(w) => Some(w.finish()),
            None => states.as_mut().map(|s| watch::Watched {
                last: std::mem::take(&mut s.tasks),
                samples: s.passes,
                cpu_s: 0.0,
            }),
        };
        let mut states = states.unwrap_or_default();
        let (next_hops, next_hops_cpu_s) = self
            .next_hops
            .take()
            .map_or((Vec::new(), 0.0), next_hop::NextHopWatch::finish);
        let (sockets, blkio_seen, sockets_cpu_s) = self
            .sockets
            .take()
            .map_or((None, BTreeMap::new(), 0.0), sockets::SocketWatch::finish);
        let stats_after = procfs::all_pid_stats(Path::new("/proc"));
        // The thread states' last read is the tree's threads at the end where they ran.
        let tree_after = self
            .server_pid
            .and_then(|pid| match states.end_tasks.take() {
                Some(tasks) => procfs::tree_of(pid, &stats_after, tasks),
                None => procfs::sample_tree_from(Path::new("/proc"), pid, &stats_after),
            });
        let cpu_after = read_proc_stat();
        let lo_after = read_loopback();
        let pids = self.tree_pids(tree_after.as_ref());
        let cgroups_after = cgroup_cpu::sample(Path::new("/proc"), &self.cgroups.0, &pids);
        let scan_after = neighbours::scan_from(
            Path::new("/proc"),
            cpu_count(),
            &stats_after,
            tree_after.as_ref(),
        );
        let mut notes = Vec::new();
        let server = self.server_usage(tree_after.as_ref(), watched.as_ref(), &mut notes);
        let threads = self.thread_usage(
            tree_after.as_ref(),
            window_s,
            watched.as_ref(),
            server.as_ref(),
            &mut notes,
        );
        let (mut counters, perf_cpu_s) = self.finish_perf(&mut notes);
        if self.perf_late_s > PERF_LATE_MAX_SHARE * window_s {
            let note = drop_counts(&mut counters, self.perf_late_s);
            notes.push(note);
        }
        let server_cpus = procfs::core_busy(&self.cpu_times, &cpu_after, &self.server_cpus);
        let client_cpus = procfs::core_busy(&self.cpu_times, &cpu_after, &self.client_cpus);
        let loopback = match (&self.loopback, &lo_after) {
            (Some(a), Some(b)) => Some(procfs::net_delta(a, b)),
            _ => {
                notes.push("no `lo` line in /proc/net/dev: loopback traffic unavailable".into());
                None
            }
        };
        let allowed = cgroup_cpu::allowed_cpus(Path::new("/proc"), &self.cgroups.0, &pids);
        let cgroup_cpu = cgroup_cpu::observation(
            &self.cgroups.1,
            &cgroups_after,
            allowed.as_deref(),
            &self.server_cpus,
        );
        let neighbours = neighbours::neighbours(
            &self.scan,
            &scan_after,
            &neighbours::Window {
                window_s,
                server_cpus: &self.server_cpus,
                client_cpus: &self.client_cpus,
                server_busy: &server_cpus,
                client_busy: &client_cpus,
                tree: pids.iter().copied().collect(),
                tree_cpu_s: server.as_ref().map(|t| t.user_s + t.sys_s),
                own_groups: neighbours::own_groups(),
                own_pid: std::process::id() as i32,
            },
        );
        let (link, disk, io_cpu_s) =
            self.finish_io(window_s, tree_after.as_ref(), blkio_seen, &mut notes);
        let watch_cpu_s = watched.as_ref().map_or(0.0, |w| w.cpu_s);
        let own_cpu_s = self.own_cpu_s
            + (thread_cpu_s() - cpu0)
            + watch_cpu_s
            + sockets_cpu_s
            + io_cpu_s
            + states.cpu_s
            + next_hops_cpu_s;
        Observation {
            window_s,
            server,
            threads,
            server_cpus_busy_pct: mean_busy(&server_cpus),
            client_cpus_busy_pct: mean_busy(&client_cpus),
            server_cpus,
            client_cpus,
            loopback,
            perf: counters,
            observer_cpu_s: own_cpu_s + perf_cpu_s,
            notes,
            cgroup_cpu,
            neighbours,
            sockets,
            link,
            disk,
            thread_states: states.server,
            client_thread_states: states.client,
            next_hops,
        }
    }

    /// The server tree's pids at the window's start and, when given, at its end.
    fn tree_pids(&self, after: Option<&procfs::TreeSample>) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .tree
            .iter()
            .chain(after)
            .flat_map(|t| t.processes.keys().copied())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// The link and the disk at the window's end against its start, and the CPU `tc` used. A
    /// task the samples saw (`blkio_seen`: first and last) counts from its first sample when
    /// the start did not see it, and to its last when the end did not.
    fn finish_io(
        &mut self,
        window_s: f64,
        tree_after: Option<&procfs::TreeSample>,
        blkio_seen: sockets::BlkioSeen,
        notes: &mut Vec<String>,
    ) -> (
        Option<crate::record::use_io::LinkUse>,
        Option<crate::record::use_io::DiskUse>,
        f64,
    ) {
        let Some(pid) = self.server_pid else {
            return (None, None, 0.0);
        };
        let (link_after, mut disk_after) = (link::sample(pid), tree_after.map(disk::sample));
        if let Some(ticks) = disk_after.as_mut().and_then(|d| d.blkio_ticks.as_mut()) {
            for (task, &(_, last)) in &blkio_seen {
                ticks.entry(*task).or_insert(last);
            }
        }
        if let Some(ticks) = self.disk.as_mut().and_then(|d| d.blkio_ticks.as_mut()) {
            for (task, (first, _)) in blkio_seen {
                ticks.entry(task).or_insert(first);
            }
        }
        let mut cpu_s = 0.0;
        let link = match (self.link.take(), link_after) {
            (Some(a), Some(b)) => {
                cpu_s += a.cpu_s + b.cpu_s;
                notes.extend(b.note.clone());
                link::link_use(&a, &b, window_s)
            }
            _ => None,
        };
        let disk = match (self.disk.take(), disk_after) {
            (Some(a), Some(b)) => disk::disk_use(&a, &b, window_s),
            _ => None,
        };
        if disk.is_some() {
            notes.extend(disk::delayacct_note());
        }
        (link, disk, cpu_s)
    }

    fn server_usage(
        &self,
        after: Option<&procfs::TreeSample>,
        watched: Option<&watch::Watched>,
        notes: &mut Vec<String>,
    ) -> Option<TreeUsage> {
        let pid = self.server_pid?;
        let (Some(before), Some(after)) = (&self.tree, after) else {
            notes.push(format!(
                "server process {pid} was not running at both ends of the window"
            ));
            return None;
        };
        let d = match watched {
            Some(w) => procfs::tree_delta(before, &watch::with_ended_switches(after, w)),
            None => procfs::tree_delta(before, after),
        };
        if d.threads_lost > 0 {
            notes.push(format!(
                "{} server threads ended during the window: their context switches are not counted",
                d.threads_lost
            ));
        }
        let ticks = procfs::ticks_per_s();
        Some(TreeUsage {
            pid,
            processes: after.processes.len() as u64,
            threads: after.threads.len() as u64,
            user_s: d.user_ticks as f64 / ticks,
            sys_s: d.sys_ticks as f64 / ticks,
            voluntary_cs: d.voluntary_cs,
            involuntary_cs: d.involuntary_cs,
            minor_faults: d.minor_faults,
            major_faults: d.major_faults,
        })
    }

    fn thread_usage(
        &self,
        after: Option<&procfs::TreeSample>,
        window_s: f64,
        watched: Option<&watch::Watched>,
        tree: Option<&TreeUsage>,
        notes: &mut Vec<String>,
    ) -> Option<ThreadUsage> {
        let (Some(before), Some(after)) = (&self.tree, after) else {
            return None;
        };
        let empty = watch::Watched::default();
        let (tasks, ended) = watch::with_ended(&after.tasks, watched.unwrap_or(&empty));
        let deltas = threads::task_deltas(&before.tasks, &tasks, procfs::ticks_per_s());
        let mut usage = threads::thread_usage(&deltas, window_s);
        usage.ended_threads = ended;
        let threads_s: f64 = deltas.iter().map(|d| d.cpu_s).sum();
        if let Some(note) = unsampled(&mut usage, tree, threads_s, window_s) {
            notes.push(note);
        }
        Some(usage)
    }

    fn finish_perf(&mut self, notes: &mut Vec<String>) -> (PerfCounters, f64) {
        let Some(perf) = self.perf.take() else {
            let note = match (&self.perf_note, self.server_pid) {
                (Some(why), _) => why.clone(),
                (None, None) => "no server process to attach perf to".into(),
                (None, Some(pid)) => {
                    format!("server process {pid} was gone before perf could attach")
                }
            };
            let counters = PerfCounters {
                note: Some(note),
                ..PerfCounters::default()
            };
            notes.extend(counters.note.clone());
            return (counters, 0.0);
        };
        let result = perf.finish();
        notes.extend(result.counters.note.clone());
        (result.counters, result.perf_cpu_s)
    }
}

/// Below this share of the tree's CPU, what the samples missed is left unsaid (the tree's
/// CPU counts 10-ms ticks, the threads' schedstat nanoseconds).
const UNSAMPLED_MIN_SHARE: f64 = 0.05;

/// The tree's CPU that no thread's figures hold: tasks that began and ended between two
/// samples, known only from their parents' reaped-children times. Sets
/// `unsampled_cpu_pct` and returns the note saying so, when it is worth saying.
fn unsampled(
    usage: &mut ThreadUsage,
    tree: Option<&TreeUsage>,
    threads_s: f64,
    window_s: f64,
) -> Option<String> {
    let tree_s = tree.map(|t| t.user_s + t.sys_s)?;
    let missing_s = tree_s - threads_s;
    if window_s <= 0.0 || missing_s <= UNSAMPLED_MIN_SHARE * tree_s || missing_s < 0.02 {
        return None;
    }
    let pct = 100.0 * missing_s / window_s;
    usage.unsampled_cpu_pct = Some(pct);
    Some(format!(
        "threads: {pct:.1}% of a CPU of the server tree's was used by tasks that began and ended \
         between two samples ({} ms apart), known only from their parents' reaped-children \
         times (`unsampled_cpu_pct`)",
        watch::WATCH_EVERY.as_millis()
    ))
}

/// Leaves out perf's counts (context switches, migrations, faults, cache loads...) that covered less
/// than the window because perf started `late_s` into it; ratios of two counts (IPC and the
/// like) cover the same span and stay. Returns the note saying so.
fn drop_counts(counters: &mut PerfCounters, late_s: f64) -> String {
    counters.context_switches = None;
    counters.cpu_migrations = None;
    counters.page_faults = None;
    counters.task_clock_ms = None;
    counters.branch_misses = None;
    counters.llc_loads = None;
    format!(
        "perf started counting {:.0} ms into the window (slow to acknowledge on a busy \
         machine): its counts are left out, its ratios (IPC and the like) kept; context \
         switches come from /proc",
        late_s * 1e3
    )
}

/// The threads of a tree between two samples, grouped by merged name.
pub fn thread_usage(
    before: &procfs::TreeSample,
    after: &procfs::TreeSample,
    window_s: f64,
) -> ThreadUsage {
    let deltas = threads::task_deltas(&before.tasks, &after.tasks, procfs::ticks_per_s());
    threads::thread_usage(&deltas, window_s)
}

/// The per-request figures of an observation over `requests` completed requests.
pub fn per_request(obs: &Observation, requests: u64) -> PerRequest {
    let per = |x: Option<f64>| x.filter(|_| requests > 0).map(|v| v / requests as f64);
    let ratio = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b > 0 => Some(a as f64 / b as f64),
        _ => None,
    };
    let server = obs.server.as_ref();
    let p = &obs.perf;
    let cs = p
        .context_switches
        .or_else(|| server.map(|s| s.voluntary_cs + s.involuntary_cs));
    let stalled = p.stalled_cycles_frontend.max(p.stalled_cycles_backend);
    PerRequest {
        cpu_us_per_req: CpuUsPerReq {
            user: per(server.map(|s| s.user_s * 1e6)),
            sys: per(server.map(|s| s.sys_s * 1e6)),
            total: per(server.map(|s| (s.user_s + s.sys_s) * 1e6)),
        },
        cs_per_req: per(cs.map(|v| v as f64)),
        voluntary_cs_per_req: per(server.map(|s| s.voluntary_cs as f64)),
        involuntary_cs_per_req: per(server.map(|s| s.involuntary_cs as f64)),
        run_delay_us_per_req: per(obs
            .threads
            .as_ref()
            .and_then(|t| t.run_delay_s)
            .map(|s| s * 1e6)),
        migr_per_req: per(p.cpu_migrations.map(|v| v as f64)),
        ipc: ratio(p.instructions, p.cycles),
        iprc: ratio(p.instructions, p.ref_cycles),
        scpi: ratio(stalled, p.instructions),
        llc_loads_per_req: per(p.llc_loads.map(|v| v as f64)),
        pkts_per_req: per(obs.loopback.map(|l| l.rx_packets as f64)),
    }
}

fn mean_busy(cores: &[CoreBusy]) -> Option<f64> {
    (!cores.is_empty()).then(|| cores.iter().map(|c| c.busy_pct).sum::<f64>() / cores.len() as f64)
}

fn read_proc_stat() -> BTreeMap<usize, procfs::CpuTimes> {
    std::fs::read_to_string("/proc/stat")
        .map(|t| procfs::parse_proc_stat(&t))
        .unwrap_or_default()
}

fn read_loopback() -> Option<NetCounters> {
    let text = std::fs::read_to_string("/proc/net/dev").ok()?;
    procfs::parse_net_dev(&text, "lo")
}

/// CPUs the kernel can bring online (the bound of a thread's affinity mask).
fn cpu_count() -> usize {
    // Safety: sysconf with a constant argument.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    usize::try_from(n).unwrap_or(1).max(1)
}

/// CPU time of the calling thread, in seconds.
pub(crate) fn thread_cpu_s() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as f64 + t.tv_nsec() as f64 / 1e9)
        .unwrap_or(0.0)
}

/// The wait before a sampling thread's next sample: `base`, or longer when its last sample
/// cost `cost_s` of CPU, so that the sampling stays within `share` of one CPU. A thousand
/// connections make a socket dump cost milliseconds, and two thousand threads a tree read:
/// sampled at their base rate the observers took 27-61% of a CPU (docs/measured.md).
fn spaced(base: Duration, cost_s: f64, share: f64) -> Duration {
    let wait_s = cost_s / share;
    if wait_s.is_finite() && wait_s > 0.0 {
        base.max(Duration::from_secs_f64(wait_s.min(3600.0)))
    } else {
        base
    }
}

/// A pass a sampling thread repeats (a socket dump, a read of the tree's tasks), each
/// next one due [`spaced`] after the last began: its base spacing, or longer when the pass
/// cost so much CPU that the base would exceed `share` of one CPU.
#[derive(Debug)]
pub(crate) struct Paced {
    base: Duration,
    share: f64,
    next: Instant,
}

impl Paced {
    /// A pass due now.
    pub(crate) fn new(base: Duration, share: f64) -> Paced {
        Paced {
            base,
            share,
            next: Instant::now(),
        }
    }

    /// Whether the next pass is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        now >= self.next
    }

    /// Runs a pass begun at `now`; the next is due from its CPU cost.
    pub(crate) fn run<T>(&mut self, now: Instant, pass: impl FnOnce() -> T) -> T {
        let cpu0 = thread_cpu_s();
        let out = pass();
        self.next = now + spaced(self.base, thread_cpu_s() - cpu0, self.share);
        out
    }

    /// Puts the next pass off until `at` at the soonest.
    pub(crate) fn not_before(&mut self, at: Instant) {
        self.next = self.next.max(at);
    }

    /// The time from now until the next pass is due.
    pub(crate) fn wait(&self) -> Duration {
        self.next.saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_costly_pass_puts_the_next_off_by_its_cost_over_the_share() {
        let mut p = Paced::new(Duration::from_millis(50), 0.01);
        let t0 = Instant::now();
        assert!(p.due(t0));
        p.run(t0, || ());
        assert!(!p.due(t0) && p.due(t0 + Duration::from_millis(50)));
        // 2 ms of this thread's CPU at 1%: the next is 200 ms after this one began.
        p.run(t0, || {
            let cpu0 = thread_cpu_s();
            while thread_cpu_s() - cpu0 < 0.002 {}
        });
        assert!(!p.due(t0 + Duration::from_millis(190)), "{p:?}");
        assert!(p.due(t0 + Duration::from_millis(260)), "{p:?}");
        p.not_before(t0 + Duration::from_secs(1));
        assert!(!p.due(t0 + Duration::from_millis(990)), "{p:?}");
    }

    #[test]
    fn a_costly_sample_spaces_the_next_within_the_budget() {
        let base = Duration::from_millis(50);
        // 0.2 ms at 1%: 20 ms, under the base.
        assert_eq!(spaced(base, 0.000_2, 0.01), base);
        // 6 ms at 1%: 600 ms.
        assert_eq!(spaced(base, 0.006, 0.01), Duration::from_millis(600));
        assert_eq!(spaced(base, f64::NAN, 0.01), base);
    }

    fn observation(perf: PerfCounters) -> Observation {
        Observation {
            window_s: 1.0,
            server: Some(TreeUsage {
                pid: 1,
                processes: 1,
                threads: 2,
                user_s: 0.5,
                sys_s: 0.25,
                voluntary_cs: 300,
                involuntary_cs: 100,
                minor_faults: 0,
                major_faults: 0,
            }),
            threads: None,
            server_cpus: Vec::new(),
            client_cpus: Vec::new(),
            server_cpus_busy_pct: None,
            client_cpus_busy_pct: None,
            loopback: None,
            perf,
            observer_cpu_s: 0.0,
            notes: Vec::new(),
            cgroup_cpu: None,
            neighbours: None,
            sockets: None,
            link: None,
            disk: None,
            thread_states: None,
            client_thread_states: None,
            next_hops: Vec::new(),
        }
    }

    #[test]
    fn a_late_perfs_counts_give_way_to_procs_and_its_ratios_stay() {
        let mut perf = PerfCounters {
            context_switches: Some(350),
            cpu_migrations: Some(7),
            cycles: Some(2_000),
            instructions: Some(3_000),
            ..PerfCounters::default()
        };
        assert_eq!(
            per_request(&observation(perf.clone()), 100).cs_per_req,
            Some(3.5)
        );
        let note = drop_counts(&mut perf, 0.05);
        assert!(note.contains("50 ms into the window"), "{note}");
        let per = per_request(&observation(perf), 100);
        // /proc's voluntary + involuntary over the whole window, not perf's shorter count.
        assert_eq!(per.cs_per_req, Some(4.0));
        assert_eq!(per.migr_per_req, None);
        assert_eq!(per.ipc, Some(1.5));
    }
}
