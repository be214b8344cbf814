//! Readers of /proc text: a process tree's CPU, faults and context switches, per-CPU times,
//! loopback traffic. Each parser takes the file's text, so tests feed recorded samples.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::threads::{parse_blkio_ticks, parse_schedstat, parse_task_stat, TaskSample};

/// The counters of one process from /proc/PID/stat, in clock ticks and fault counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PidStat {
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgrp: i32,
    /// Session id.
    pub session: i32,
    /// User time of the process (all its threads, live and exited), in ticks.
    pub utime: u64,
    /// System time of the process, in ticks.
    pub stime: u64,
    /// User time of its reaped children, in ticks.
    pub cutime: u64,
    /// System time of its reaped children, in ticks.
    pub cstime: u64,
    /// Minor faults of the process plus those of its reaped children.
    pub minflt: u64,
    /// Major faults of the process plus those of its reaped children.
    pub majflt: u64,
    /// Number of threads.
    pub threads: u64,
    /// When the process started, in ticks since boot (with the pid, its identity: pids are
    /// reused).
    pub start_ticks: u64,
}

/// Parses /proc/PID/stat. The command name may hold spaces and parentheses, so fields are
/// counted from the last ')'.
pub fn parse_pid_stat(text: &str) -> Option<PidStat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state); field k of proc(5) is f[k - 3].
    let num = |k: usize| f.get(k - 3)?.parse::<u64>().ok();
    Some(PidStat {
        ppid: f.get(1)?.parse().ok()?,
        pgrp: f.get(2)?.parse().ok()?,
        session: f.get(3)?.parse().ok()?,
        minflt: num(10)? + num(11)?,
        majflt: num(12)? + num(13)?,
        utime: num(14)?,
        stime: num(15)?,
        cutime: num(16)?,
        cstime: num(17)?,
        threads: num(20)?,
        start_ticks: num(22)?,
    })
}

/// Voluntary and involuntary context switches of one thread, from /proc/PID/task/TID/status.
pub fn parse_status_ctxt(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim_start_matches(':').trim().parse::<u64>().ok())
    };
    Some((
        field("voluntary_ctxt_switches")?,
        field("nonvoluntary_ctxt_switches")?,
    ))
}

/// One CPU's times from /proc/stat, in ticks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice (guest time is already inside).
    pub user: u64,
    /// system + irq + softirq.
    pub sys: u64,
    /// irq + softirq (inside `sys`): interrupt work no task is charged for.
    pub irq: u64,
    /// idle + iowait.
    pub idle: u64,
    /// Time the hypervisor gave to someone else.
    pub steal: u64,
}

/// Parses the per-CPU lines ("cpuN ...") of /proc/stat.
pub fn parse_proc_stat(text: &str) -> BTreeMap<usize, CpuTimes> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(cpu) = f.next().and_then(|n| n.strip_prefix("cpu")) else {
            continue;
        };
        let Ok(cpu) = cpu.parse::<usize>() else {
            continue;
        };
        let v: Vec<u64> = f.map(|x| x.parse().unwrap_or(0)).collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        out.insert(
            cpu,
            CpuTimes {
                user: at(0) + at(1),
                sys: at(2) + at(5) + at(6),
                irq: at(5) + at(6),
                idle: at(3) + at(4),
                steal: at(7),
            },
        );
    }
    out
}

/// One CPU's share of the window, in percent of its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoreBusy {
    /// The CPU number.
    pub cpu: usize,
    /// Busy (user + system) time, percent of the window.
    pub busy_pct: f64,
    /// User time (user + nice), percent of the window.
    pub user_pct: f64,
    /// System time (system + irq + softirq), percent of the window.
    pub sys_pct: f64,
    /// Interrupt time (irq + softirq, inside `sys_pct`), percent of the window: work no
    /// task is charged for, such as the network stack's for loopback traffic.
    #[serde(default)]
    pub irq_pct: f64,
    /// Time stolen by the hypervisor, percent of the window.
    pub steal_pct: f64,
}

/// Busy % of each of `cpus` between two /proc/stat samples (CPUs missing from either are left out).
pub fn core_busy(
    before: &BTreeMap<usize, CpuTimes>,
    after: &BTreeMap<usize, CpuTimes>,
    cpus: &[usize],
) -> Vec<CoreBusy> {
    let mut out = Vec::new();
    for &cpu in cpus {
        let (Some(a), Some(b)) = (before.get(&cpu), after.get(&cpu)) else {
            continue;
        };
        let user = b.user.saturating_sub(a.user) as f64;
        let sys = b.sys.saturating_sub(a.sys) as f64;
        let idle = b.idle.saturating_sub(a.idle) as f64;
        let steal = b.steal.saturating_sub(a.steal) as f64;
        let irq = b.irq.saturating_sub(a.irq) as f64;
        let total = user + sys + idle + steal;
        let pct = |x: f64| if total > 0.0 { 100.0 * x / total } else { 0.0 };
        out.push(CoreBusy {
            cpu,
            busy_pct: pct(user + sys),
            user_pct: pct(user),
            sys_pct: pct(sys),
            irq_pct: pct(irq),
            steal_pct: pct(steal),
        });
    }
    out
}

/// Packet and byte counters of one interface from /proc/net/dev.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
}

/// The counters of interface `iface` (e.g. "lo") in /proc/net/dev.
pub fn parse_net_dev(text: &str, iface: &str) -> Option<NetCounters> {
    let line = text.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        (name.trim() == iface).then_some(rest)
    })?;
    let v: Vec<u64> = line
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    Some(NetCounters {
        rx_bytes: *v.first()?,
        rx_packets: *v.get(1)?,
        tx_bytes: *v.get(8)?,
        tx_packets: *v.get(9)?,
    })
}

/// The change of each counter between two samples.
pub fn net_delta(before: &NetCounters, after: &NetCounters) -> NetCounters {
    NetCounters {
        rx_bytes: after.rx_bytes.saturating_sub(before.rx_bytes),
        rx_packets: after.rx_packets.saturating_sub(before.rx_packets),
        tx_bytes: after.tx_bytes.saturating_sub(before.tx_bytes),
        tx_packets: after.tx_packets.saturating_sub(before.tx_packets),
    }
}

/// A snapshot of a process tree: each process's stat and each thread's context switches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeSample {
    /// /proc/PID/stat of every process of the tree, by pid.
    pub processes: BTreeMap<i32, PidStat>,
    /// (voluntary, involuntary) context switches of every thread of the tree, by (pid, tid).
    pub threads: BTreeMap<(i32, i32), (u64, u64)>,
    /// Every thread's name, CPU time and run-queue wait, by (pid, tid).
    pub tasks: BTreeMap<(i32, i32), TaskSample>,
}

/// The change of a process tree's counters over a window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeDelta {
    /// User ticks.
    pub user_ticks: u64,
    /// System ticks.
    pub sys_ticks: u64,
    /// Voluntary context switches.
    pub voluntary_cs: u64,
    /// Involuntary context switches.
    pub involuntary_cs: u64,
    /// Minor faults.
    pub minor_faults: u64,
    /// Major faults.
    pub major_faults: u64,
    /// Threads present at the start that ended during the window (their switches are lost).
    pub threads_lost: u64,
}

/// The tree's change between two snapshots. CPU and faults count each process's own and its
/// reaped children's, so a child that ends inside the window moves into its parent's figures
/// without loss; context switches are per thread and those of threads that ended are lost.
pub fn tree_delta(before: &TreeSample, after: &TreeSample) -> TreeDelta {
    let sum = |s: &TreeSample, f: fn(&PidStat) -> u64| s.processes.values().map(f).sum::<u64>();
    let mut d = TreeDelta {
        user_ticks: sum(after, |p| p.utime + p.cutime)
            .saturating_sub(sum(before, |p| p.utime + p.cutime)),
        sys_ticks: sum(after, |p| p.stime + p.cstime)
            .saturating_sub(sum(before, |p| p.stime + p.cstime)),
        minor_faults: sum(after, |p| p.minflt).saturating_sub(sum(before, |p| p.minflt)),
        major_faults: sum(after, |p| p.majflt).saturating_sub(sum(before, |p| p.majflt)),
        ..TreeDelta::default()
    };
    for (key, &(vol, invol)) in &after.threads {
        let (v0, i0) = before.threads.get(key).copied().unwrap_or((0, 0));
        d.voluntary_cs += vol.saturating_sub(v0);
        d.involuntary_cs += invol.saturating_sub(i0);
    }
    d.threads_lost = before
        .threads
        .keys()
        .filter(|k| !after.threads.contains_key(k))
        .count() as u64;
    d
}

/// The pids of `root` and all its descendants, from a map of pid → parent pid.
pub fn descendants(root: i32, parents: &BTreeMap<i32, i32>) -> Vec<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for (&pid, &ppid) in parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            out.extend(kids.iter().copied().filter(|k| *k != root));
        }
        i += 1;
    }
    out
}

/// Snapshots the live tree rooted at `root` under the proc tree at `proc_root` ("/proc").
/// Returns None when the root process is gone. Every descendant counts, whatever its session:
/// daemons start their own (PostgreSQL's postmaster calls `setsid`), and leaving those out
/// dropped PostgreSQL's backends from its tree.
pub fn sample_tree(proc_root: &Path, root: i32) -> Option<TreeSample> {
    sample_tree_from(proc_root, root, &all_pid_stats(proc_root))
}

/// [`sample_tree`] from every process's stat already read (`stats`, by pid): a window's ends
/// read them once for the tree, the neighbours and the disk together.
pub fn sample_tree_from(
    proc_root: &Path,
    root: i32,
    stats: &BTreeMap<i32, PidStat>,
) -> Option<TreeSample> {
    let pids = tree_pids(root, stats)?;
    let tasks = (pids.iter())
        .flat_map(|&pid| {
            let tasks = read_tasks(proc_root, pid);
            tasks.into_iter().map(move |(tid, t)| ((pid, tid), t))
        })
        .collect();
    Some(tree_with(&pids, stats, tasks))
}

/// The tree rooted at `root` from every process's stat (`stats`) and its threads as read
/// already (`tasks`, by (pid, tid); those of other processes left out). None when the root is
/// gone.
pub fn tree_of(
    root: i32,
    stats: &BTreeMap<i32, PidStat>,
    tasks: BTreeMap<(i32, i32), TaskSample>,
) -> Option<TreeSample> {
    Some(tree_with(&tree_pids(root, stats)?, stats, tasks))
}

/// `root` and its descendants, from every process's stat; None when the root is gone.
fn tree_pids(root: i32, stats: &BTreeMap<i32, PidStat>) -> Option<Vec<i32>> {
    stats.get(&root)?;
    let parents: BTreeMap<i32, i32> = stats.iter().map(|(&pid, s)| (pid, s.ppid)).collect();
    Some(descendants(root, &parents))
}

/// The tree of the processes `pids` with the threads of theirs among `tasks`.
fn tree_with(
    pids: &[i32],
    stats: &BTreeMap<i32, PidStat>,
    tasks: BTreeMap<(i32, i32), TaskSample>,
) -> TreeSample {
    let mut sample = TreeSample::default();
    for &pid in pids {
        sample.processes.insert(pid, stats[&pid]);
    }
    for (key, task) in tasks {
        if sample.processes.contains_key(&key.0) {
            sample
                .threads
                .insert(key, (task.voluntary_cs, task.involuntary_cs));
            sample.tasks.insert(key, task);
        }
    }
    sample
}

/// pid → parent pid of every process under the proc tree at `proc_root` ("/proc").
pub fn parent_map(proc_root: &Path) -> BTreeMap<i32, i32> {
    all_pid_stats(proc_root)
        .into_iter()
        .map(|(pid, s)| (pid, s.ppid))
        .collect()
}

/// /proc/PID/stat of every process under the proc tree at `proc_root` ("/proc"), by pid.
pub fn all_pid_stats(proc_root: &Path) -> BTreeMap<i32, PidStat> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        // A process may end between listing and reading: skip it.
        if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|t| parse_pid_stat(&t))
        {
            out.insert(pid, stat);
        }
    }
    out
}

pub fn read_tasks(proc_root: &Path, pid: i32) -> Vec<(i32, TaskSample)> {
    let Ok(entries) = std::fs::read_dir(proc_root.join(format!("{pid}/task"))) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let tid = e.file_name().to_str()?.parse::<i32>().ok()?;
            Some((tid, read_task(&e.path())?))
        })
        .collect()
}

/// One thread's files (a thread that ended between listing and reading is None).
fn read_task(dir: &Path) -> Option<TaskSample> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let (voluntary_cs, involuntary_cs) = parse_status_ctxt(&read("status")?)?;
    let stat = read("stat")?;
    let (name, cpu_ticks) = parse_task_stat(&stat)?;
    let sched = read("schedstat").and_then(|t| parse_schedstat(&t));
    Some(TaskSample {
        name,
        cpu_ticks,
        run_ns: sched.map(|s| s.0),
        wait_ns: sched.map(|s| s.1),
        voluntary_cs,
        involuntary_cs,
        blkio_ticks: parse_blkio_ticks(&stat),
    })
}

/// How long [`wait_until_quiet`] waited and how busy the CPUs were at the end.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quiet {
    /// Seconds spent waiting.
    pub waited_s: f64,
    /// Mean busy % of the CPUs over the last sample of the wait.
    pub busy_pct: f64,
    /// Whether they dropped under the threshold before the limit.
    pub settled: bool,
}

impl Quiet {
    /// "3% busy after 0.5 s".
    pub fn describe(&self) -> String {
        format!("{:.0}% busy after {:.1} s", self.busy_pct, self.waited_s)
    }
}

/// How long one busy sample of [`wait_until_quiet`] lasts.
pub const QUIET_SAMPLE: std::time::Duration = std::time::Duration::from_millis(500);

/// Waits, at most `limit` (and not past `stop`), until `cpus` are less than `below_pct`
/// busy over one [`QUIET_SAMPLE`] (/proc/stat shows the CPUs free at once; the load average
/// stays high for a minute after a build ends).
pub fn wait_until_quiet(
    cpus: &[usize],
    below_pct: f64,
    limit: std::time::Duration,
    stop: &std::sync::atomic::AtomicBool,
) -> Quiet {
    let start = std::time::Instant::now();
    let read = || parse_proc_stat(&std::fs::read_to_string("/proc/stat").unwrap_or_default());
    let mut before = read();
    loop {
        std::thread::sleep(QUIET_SAMPLE);
        let after = read();
        let busy = core_busy(&before, &after, cpus);
        let busy_pct = busy.iter().map(|c| c.busy_pct).sum::<f64>() / busy.len().max(1) as f64;
        let waited = start.elapsed();
        let settled = busy_pct < below_pct;
        if settled || waited >= limit || stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Quiet {
                waited_s: waited.as_secs_f64(),
                busy_pct,
                settled,
            };
        }
        before = after;
    }
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, 100 on almost every Linux).
pub fn ticks_per_s() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let text = "4242 (my (odd) srv) S 1 4242 4242 0 -1 4194560 120 7 3 1 250 75 10 5 20 0 4 0 \
                    100 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_pid_stat(text).unwrap();
        assert_eq!((s.ppid, s.pgrp, s.session), (1, 4242, 4242));
        assert_eq!((s.minflt, s.majflt), (127, 4));
        assert_eq!((s.utime, s.stime, s.cutime, s.cstime), (250, 75, 10, 5));
        assert_eq!(s.threads, 4);
        assert_eq!(s.start_ticks, 100);
    }

    #[test]
    fn a_descendant_in_a_session_of_its_own_is_part_of_the_tree() {
        let tmp = tempfile::tempdir().unwrap();
        // (pid, ppid, session): 10 the root, 11 its child, 12 a setsid'd child of 11 (a
        // daemon's own session, as PostgreSQL's postmaster) and 13 that one's child.
        for (pid, ppid, session) in [(10, 1, 5), (11, 10, 5), (12, 11, 12), (13, 12, 12)] {
            let dir = tmp.path().join(pid.to_string());
            std::fs::create_dir(&dir).unwrap();
            let stat = format!(
                "{pid} (p) S {ppid} {pid} {session} 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 100 0 0"
            );
            std::fs::write(dir.join("stat"), stat).unwrap();
        }
        let tree = sample_tree(tmp.path(), 10).unwrap();
        assert_eq!(
            tree.processes.keys().copied().collect::<Vec<_>>(),
            vec![10, 11, 12, 13]
        );
    }

    #[test]
    fn descendants_follow_parents() {
        let parents = BTreeMap::from([(10, 1), (11, 10), (12, 11), (13, 1), (14, 10)]);
        let mut d = descendants(10, &parents);
        d.sort_unstable();
        assert_eq!(d, vec![10, 11, 12, 14]);
    }

    #[test]
    fn net_dev_finds_lo() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo: 1000 10 0 0 0 0 0 0 1000 10 0 0 0 0 0 0\n  \
eth0: 5 1 0 0 0 0 0 0 7 2 0 0 0 0 0 0\n";
        let lo = parse_net_dev(text, "lo").unwrap();
        assert_eq!(
            (lo.rx_bytes, lo.rx_packets, lo.tx_bytes, lo.tx_packets),
            (1000, 10, 1000, 10)
        );
        assert_eq!(parse_net_dev(text, "eth0").unwrap().tx_packets, 2);
        assert!(parse_net_dev(text, "wlan0").is_none());
    }
}
