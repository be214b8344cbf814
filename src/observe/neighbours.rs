//! The other processes on the server's and the client's CPUs: /proc is scanned at both ends
//! of the window (every thread's CPU and the CPUs it may run on), and the CPUs' busy share
//! from /proc/stat, less the server tree's and stairbench's own and less interrupt time
//! (irq, softirq: charged to no task, and on loopback mostly the network work of the traffic
//! under test: 10% of nginx's one CPU at 14.6k req/s from wrk), is what the others took.
//! That difference also counts what the scan cannot name (other containers' processes on a
//! shared kernel, processes whose parent ended too); the scan names the busiest it saw.
//!
//! The rules that keep the named figures true:
//! - A process's descendants that ended inside the window count as its own, for the part of
//!   their CPU that fell inside the window only. They reach its reaped-children counter
//!   (cutime + cstime) with all their CPU, lifetime included, and so do their own reaped
//!   descendants (a shell's `cargo build` brings every compiler cargo reaped): what the start
//!   scan saw of each of them (its CPU and its reaped children's by then) is taken off again.
//!   A descendant seen at neither end (born and reaped inside the window) counts fully.
//! - A process's CPU is divided by the time between its own two readings, not the window's
//!   (the other observers' ends lengthen the scans' span by tens of ms).
//! - No share exceeds what its CPUs allow: `cpu_pct` at most 100% times the CPUs its threads
//!   may run on, each cpuset share at most 100%. The rules above make that hold; a figure
//!   past it by more than a tick's resolution is clipped and `notes` says so (a descendant
//!   the start scan missed, or one orphaned to another reaper, can still cause it).
//! - The named shares of a cpuset add up to at most the others' total share of it
//!   (`Neighbours::named_within_totals`): the total is measured (/proc/stat), the named shares
//!   only apportion it.
//!
//! stairbench's own: this process (its load threads and observers), every process in the
//! process group of a child it started (the server, an external load tool), and its
//! descendants in its own group (perf). A process that left those groups (`setsid`) is
//! another's, even when it descends from stairbench or was orphaned to it; so is one that
//! only shares stairbench's own group (a script without job control runs all its commands
//! in one).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::machine::procfs::{self, CoreBusy};
use crate::record::use_cpu::{Neighbour, Neighbours};

/// How many of the busiest other processes are kept.
const KEEP: usize = 5;
/// Processes that took less than this share of the server's or the client's CPUs (percent)
/// are not named.
const NAME_MIN_PCT: f64 = 0.5;

/// One process at one end of the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcSample {
    /// `comm`.
    pub name: String,
    /// Process group.
    pub pgrp: i32,
    /// Start time since boot in ticks (with the pid, its identity).
    pub start_ticks: u64,
    /// Each thread's CPU in ticks and the CPUs it may run on, by tid.
    pub threads: BTreeMap<i32, (u64, Vec<usize>)>,
    /// The whole process's CPU in ticks (utime + stime of /proc/PID/stat), its ended
    /// threads' included.
    pub cpu_ticks: u64,
    /// Parent process id.
    pub ppid: i32,
    /// Its reaped children's CPU in ticks (cutime + cstime): where the CPU of processes that
    /// ended inside the window went.
    pub children_ticks: u64,
    /// When its threads were read, in seconds on the monotonic clock (0 when unknown).
    pub read_s: f64,
}

/// Every process at one end of the window, by pid.
pub type Scan = BTreeMap<i32, ProcSample>;

/// Scans every process and thread under `proc_root` (/proc); `ncpus` bounds the CPU numbers
/// read from each thread's affinity.
pub fn scan(proc_root: &Path, ncpus: usize) -> Scan {
    scan_from(proc_root, ncpus, &procfs::all_pid_stats(proc_root), None)
}

/// [`scan`] from every process's stat already read (`stats`); the threads of the processes
/// `tree` holds are taken from it, not read again (a window's ends read the server's tree
/// anyway: at 200 threads, 200 files fewer at each end).
pub fn scan_from(
    proc_root: &Path,
    ncpus: usize,
    stats: &BTreeMap<i32, procfs::PidStat>,
    tree: Option<&procfs::TreeSample>,
) -> Scan {
    let mut out = Scan::new();
    for (&pid, stat) in stats {
        let mut p = ProcSample {
            pgrp: stat.pgrp,
            start_ticks: stat.start_ticks,
            cpu_ticks: stat.utime + stat.stime,
            ppid: stat.ppid,
            children_ticks: stat.cutime + stat.cstime,
            ..ProcSample::default()
        };
        // The tree's threads as its own read gave them; the others' read now.
        let threads = match tree.filter(|t| t.processes.contains_key(&pid)) {
            Some(tree) => (tree.tasks.range((pid, i32::MIN)..=(pid, i32::MAX)))
                .map(|((_, tid), t)| (*tid, t.name.clone(), t.cpu_ticks))
                .collect(),
            None => match read_threads(proc_root, pid) {
                Some(threads) => threads,
                None => continue,
            },
        };
        for (tid, name, ticks) in threads {
            if tid == pid {
                p.name = name;
            }
            p.threads.insert(tid, (ticks, affinity(tid, ncpus)));
        }
        p.read_s = monotonic_s();
        out.insert(pid, p);
    }
    out
}

/// Each thread of `pid`: (tid, name, user + system ticks); None when it is gone.
fn read_threads(proc_root: &Path, pid: i32) -> Option<Vec<(i32, String, u64)>> {
    let entries = std::fs::read_dir(proc_root.join(format!("{pid}/task"))).ok()?;
    let threads = entries.flatten().filter_map(|e| {
        let tid = e.file_name().to_str()?.parse::<i32>().ok()?;
        let text = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let (name, ticks) = crate::machine::threads::parse_task_stat(&text)?;
        Some((tid, name, ticks))
    });
    Some(threads.collect())
}

/// The monotonic clock, in seconds.
fn monotonic_s() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}

/// The CPUs thread `tid` may run on (empty when it cannot be read: then it counts on none).
fn affinity(tid: i32, ncpus: usize) -> Vec<usize> {
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(tid)) {
        Ok(set) => (0..ncpus)
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Each process's CPU over the window, in ticks: in all, on the CPUs of `a`, on those of `b`
/// (a thread's ticks shared out evenly over the CPUs it may run on).
/// - Threads that ended inside the window (a step's load threads, joined before its end is
///   scanned) are no longer listed: their CPU is the process's growth less its live
///   threads', placed where the ended threads were allowed to run (stairbench's own load
///   threads, missed this way, once read as others taking 80% of the client's CPUs in the
///   memcached study).
/// - Descendants that ended inside the window (a shell's commands, a build's compilers, an
///   external load tool reaped before the end scan) are in no end scan: their CPU is their
///   ancestor's reaped-children growth less what they had used by the start
///   (`reaped_before`), placed where the ancestor may run (children inherit its affinity).
///   Without it, a shell loop of short commands beside a server took its CPU unnamed.
///
/// `reaped` says whose reaped children count: not stairbench's own, whose children are
/// external load tools, counted from their own rusage by the analysis (counting them here
/// too would take them off the others' share twice).
fn process_ticks(
    before: &Scan,
    after: &Scan,
    (a, b): (&[usize], &[usize]),
    reaped: &dyn Fn(i32) -> bool,
) -> BTreeMap<i32, [f64; 3]> {
    let earlier = reaped_before(before, after);
    let mut out = BTreeMap::new();
    for (pid, p) in after {
        let old = same(before, *pid, p);
        let mut t = [0.0; 3];
        let mut live = 0;
        for (tid, (ticks, allowed)) in &p.threads {
            let was = old.and_then(|o| o.threads.get(tid)).map_or(0, |x| x.0);
            let d = ticks.saturating_sub(was);
            live += d;
            add(&mut t, d as f64, &[allowed], a, b);
        }
        let grown = p.cpu_ticks.saturating_sub(old.map_or(0, |o| o.cpu_ticks));
        let gone: Vec<&Vec<usize>> = old
            .iter()
            .flat_map(|o| &o.threads)
            .filter(|(tid, _)| !p.threads.contains_key(tid))
            .map(|(_, (_, allowed))| allowed)
            .collect();
        let own: Vec<&Vec<usize>> = p.threads.values().map(|(_, allowed)| allowed).collect();
        let place = if gone.is_empty() { &own } else { &gone };
        add(&mut t, grown.saturating_sub(live) as f64, place, a, b);
        if reaped(*pid) {
            let counter = p
                .children_ticks
                .saturating_sub(old.map_or(0, |o| o.children_ticks));
            let ticks = counter.saturating_sub(earlier.get(pid).copied().unwrap_or(0));
            add(&mut t, ticks as f64, &own, a, b);
        }
        out.insert(*pid, t);
    }
    out
}

/// `pid`'s sample in `scan` when it is the same process as `p` (a pid reused during the
/// window is another process: all of its CPU is new).
fn same<'a>(scan: &'a Scan, pid: i32, p: &ProcSample) -> Option<&'a ProcSample> {
    scan.get(&pid).filter(|o| o.start_ticks == p.start_ticks)
}

/// What the start scan saw of the processes that ended inside the window (their CPU and
/// their reaped children's by then), by the process whose reaped-children counter they
/// reached: the nearest ancestor alive at the end, up the start scan's parent links through
/// ancestors that ended too (a process reaps its children before it ends: a shell, make,
/// cargo, timeout wait for theirs; each ancestor's counter carries them up to the next).
/// The ancestor's counter grew by all of their CPU; this part of it fell before the window.
/// - An ancestor missing from the start scan (its read raced its start) is the process
///   alive under that pid at the end when it started no later than the descendant.
/// - A descendant orphaned to another reaper (a double fork) is still taken off the
///   ancestor: the ancestor is then charged less, never more, than it used.
/// - A descendant the start scan missed is counted whole: only the clip guards that.
fn reaped_before(before: &Scan, after: &Scan) -> BTreeMap<i32, u64> {
    let alive = |pid: i32, s: &ProcSample| same(after, pid, s).is_some();
    let mut out = BTreeMap::new();
    for (pid, s) in before {
        if alive(*pid, s) {
            continue;
        }
        let mut up = s.ppid;
        // A chain of parent links holds each process once; the bound guards a pid reused
        // between two reads of the scan.
        let reaper = (0..=before.len()).find_map(|_| match before.get(&up) {
            Some(u) if alive(up, u) => Some(Some(up)),
            Some(u) => {
                up = u.ppid;
                None
            }
            None => Some(
                after
                    .get(&up)
                    .filter(|n| n.start_ticks <= s.start_ticks)
                    .map(|_| up),
            ),
        });
        if let Some(r) = reaper.flatten() {
            *out.entry(r).or_default() += s.cpu_ticks + s.children_ticks;
        }
    }
    out
}

/// Adds `ticks` to `t`, spread evenly over the affinities in `place`.
fn add(t: &mut [f64; 3], ticks: f64, place: &[&Vec<usize>], a: &[usize], b: &[usize]) {
    let share = |allowed: &[usize], set: &[usize]| {
        if allowed.is_empty() {
            0.0
        } else {
            allowed.iter().filter(|c| set.contains(c)).count() as f64 / allowed.len() as f64
        }
    };
    if ticks <= 0.0 || place.is_empty() {
        t[0] += ticks.max(0.0);
        return;
    }
    let n = place.len() as f64;
    t[0] += ticks;
    t[1] += ticks * place.iter().map(|c| share(c, a)).sum::<f64>() / n;
    t[2] += ticks * place.iter().map(|c| share(c, b)).sum::<f64>() / n;
}

/// What the neighbours computation needs to know of the window.
#[derive(Debug, Clone, Default)]
pub struct Window<'a> {
    /// Its length, in seconds.
    pub window_s: f64,
    /// The server's CPUs.
    pub server_cpus: &'a [usize],
    /// The client's CPUs.
    pub client_cpus: &'a [usize],
    /// Busy % of each server CPU (/proc/stat).
    pub server_busy: &'a [CoreBusy],
    /// Busy % of each client CPU (/proc/stat).
    pub client_busy: &'a [CoreBusy],
    /// The server tree's pids (at either end).
    pub tree: BTreeSet<i32>,
    /// The server tree's CPU over the window, in seconds (its reaped children's included).
    pub tree_cpu_s: Option<f64>,
    /// stairbench's process groups (its own, and each tracked child's).
    pub own_groups: BTreeSet<i32>,
    /// stairbench's pid.
    pub own_pid: i32,
}

/// The other processes' share of the server's and the client's CPUs.
pub fn neighbours(before: &Scan, after: &Scan, w: &Window) -> Option<Neighbours> {
    if w.window_s <= 0.0 || (w.server_busy.is_empty() && w.client_busy.is_empty()) {
        return None;
    }
    let tps = procfs::ticks_per_s();
    // In stairbench's own group, only its descendants (at either end) are its own: a script
    // without job control runs every command in one group.
    let own_pgrp = after.get(&w.own_pid).map(|p| p.pgrp);
    let descendants: BTreeSet<i32> = [before, after]
        .iter()
        .flat_map(|scan| {
            let parents = scan.iter().map(|(pid, p)| (*pid, p.ppid)).collect();
            procfs::descendants(w.own_pid, &parents)
        })
        .collect();
    let own = |pid: i32| {
        pid == w.own_pid
            || after.get(&pid).is_some_and(|p| {
                w.own_groups.contains(&p.pgrp)
                    && (Some(p.pgrp) != own_pgrp || descendants.contains(&pid))
            })
    };
    let ticks = process_ticks(before, after, (w.server_cpus, w.client_cpus), &|p| !own(p));
    let sum = |keep: &dyn Fn(i32) -> bool| {
        ticks
            .iter()
            .filter(|(p, _)| keep(**p))
            .fold([0.0; 3], |s, (_, t)| {
                [s[0] + t[0], s[1] + t[1], s[2] + t[2]]
            })
    };
    let tree_scan = sum(&|p| w.tree.contains(&p));
    let own_scan = sum(&|p| !w.tree.contains(&p) && own(p));
    // The tree's CPU from its own counters (they keep its reaped children's), placed on the
    // two cpusets as its scanned threads were.
    let tree_s = w.tree_cpu_s.unwrap_or(tree_scan[0] / tps);
    let placed = |i: usize| {
        if tree_scan[0] > 0.0 {
            tree_s * tree_scan[i] / tree_scan[0]
        } else {
            0.0
        }
    };
    let others_pct = |busy: &[CoreBusy], cpus: &[usize], i: usize| {
        let mean = mean(busy.iter().map(|c| c.busy_pct - c.irq_pct))?;
        let mine_s = placed(i) + own_scan[i] / tps;
        Some((mean - 100.0 * mine_s / w.window_s / cpus.len().max(1) as f64).max(0.0))
    };
    let sides = (w.server_cpus.len(), w.client_cpus.len());
    let mut busiest: Vec<(Neighbour, usize, f64)> = ticks
        .iter()
        .filter(|(p, _)| !w.tree.contains(p) && !own(**p))
        .map(|(pid, t)| named(*pid, t, before, &after[pid], w.window_s, sides))
        .filter(|(n, ..)| n.server_cpus_pct.max(n.client_cpus_pct) >= NAME_MIN_PCT)
        .collect();
    busiest.sort_by(|(a, ..), (b, ..)| larger(b).total_cmp(&larger(a)));
    busiest.truncate(KEEP);
    let mut notes = Vec::new();
    for (n, cpus, res_pct) in &mut busiest {
        clip(n, *cpus, sides, *res_pct, &mut notes);
    }
    let mut n = Neighbours {
        server_cpus_others_pct: others_pct(w.server_busy, w.server_cpus, 1),
        client_cpus_others_pct: others_pct(w.client_busy, w.client_cpus, 2),
        server_irq_pct: mean(w.server_busy.iter().map(|c| c.irq_pct)).unwrap_or(0.0),
        client_irq_pct: mean(w.client_busy.iter().map(|c| c.irq_pct)).unwrap_or(0.0),
        server_steal_pct: mean(w.server_busy.iter().map(|c| c.steal_pct)).unwrap_or(0.0),
        client_steal_pct: mean(w.client_busy.iter().map(|c| c.steal_pct)).unwrap_or(0.0),
        busiest: busiest.into_iter().map(|(n, ..)| n).collect(),
        notes,
    };
    // Two ticks per named process over the window: what their sum may exceed the total by
    // through the reading's granularity alone.
    let res_pct = 200.0 * n.busiest.len() as f64 / tps / w.window_s;
    let totals = [n.server_cpus_others_pct, n.client_cpus_others_pct];
    for ((sum, total), (side, cpus)) in n
        .named_within_totals()
        .iter()
        .zip(totals)
        .zip([("server's", sides.0), ("client's", sides.1)])
    {
        if let (Some(sum), Some(total)) = (sum, total) {
            if *sum > total + res_pct / cpus.max(1) as f64 {
                n.notes.push(format!(
                    "the named processes' shares of the {side} CPUs added up to {sum:.1}%, more than the others' total {total:.1}%: scaled down to it"
                ));
            }
        }
    }
    Some(n)
}

/// One process's CPU over the window, % of one CPU, as `neighbours` would name it (before
/// the clip): its threads' and its descendants' that ended inside the window, for their part
/// inside it. None when the end scan does not hold it.
pub fn cpu_pct(before: &Scan, after: &Scan, pid: i32, window_s: f64) -> Option<f64> {
    let p = after.get(&pid)?;
    let t = process_ticks(before, after, (&[], &[]), &|_| true).remove(&pid)?;
    Some(named(pid, &t, before, p, window_s, (1, 1)).0.cpu_pct)
}

/// A named process from its ticks over the window (`t`: in all, on the server's CPUs, on the
/// client's), with the number of CPUs its threads may run on and its figures' resolution
/// (two ticks over its span, % of one CPU). Its span is the time between its own two
/// readings; a process born inside the window has the window's.
fn named(
    pid: i32,
    t: &[f64; 3],
    before: &Scan,
    p: &ProcSample,
    window_s: f64,
    (server_n, client_n): (usize, usize),
) -> (Neighbour, usize, f64) {
    let tps = procfs::ticks_per_s();
    let span_s = same(before, pid, p)
        .filter(|o| o.read_s > 0.0)
        .map(|o| p.read_s - o.read_s)
        .filter(|s| *s > 0.0)
        .unwrap_or(window_s);
    let pct = |t: f64, cpus: usize| 100.0 * t / tps / span_s / cpus.max(1) as f64;
    let cpus: BTreeSet<usize> = p.threads.values().flat_map(|(_, c)| c).copied().collect();
    let n = Neighbour {
        pid,
        name: p.name.clone(),
        cpu_pct: pct(t[0], 1),
        server_cpus_pct: pct(t[1], server_n),
        client_cpus_pct: pct(t[2], client_n),
    };
    (n, cpus.len(), 200.0 / tps / span_s)
}

/// The larger of a process's two cpuset shares: the busiest first.
fn larger(n: &Neighbour) -> f64 {
    n.server_cpus_pct.max(n.client_cpus_pct)
}

/// The last guard: a named process's shares clipped to what its CPUs allow (`cpu_pct` to
/// 100% times the `cpus` its threads may run on, when known; each cpuset share to 100%),
/// with a note when one exceeded it by more than `res_pct` (% of one CPU), the resolution.
fn clip(
    n: &mut Neighbour,
    cpus: usize,
    (server_n, client_n): (usize, usize),
    res_pct: f64,
    notes: &mut Vec<String>,
) {
    let mut over = Vec::new();
    let mut cap = |v: &mut f64, max: f64, res: f64, what: &str| {
        if *v > max {
            if *v > max + res {
                over.push(format!("{v:.1}% {what} (at most {max:.0}%)"));
            }
            *v = max;
        }
    };
    if cpus > 0 {
        cap(&mut n.cpu_pct, 100.0 * cpus as f64, res_pct, "of one CPU");
    }
    let per = |k: usize| res_pct / k.max(1) as f64;
    cap(
        &mut n.server_cpus_pct,
        100.0,
        per(server_n),
        "of the server's CPUs",
    );
    cap(
        &mut n.client_cpus_pct,
        100.0,
        per(client_n),
        "of the client's CPUs",
    );
    if !over.is_empty() {
        notes.push(format!(
            "{} (pid {}) read {}, more than its CPUs allow: clipped (a descendant the start scan missed, or one another process reaped, is counted whole)",
            n.name,
            n.pid,
            over.join(", ")
        ));
    }
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// stairbench's own process groups: its own and those of the children it started.
pub fn own_groups() -> BTreeSet<i32> {
    let mut groups: BTreeSet<i32> = crate::process::tracked().into_iter().collect();
    groups.insert(nix::unistd::getpgrp().as_raw());
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(name: &str, pgrp: i32, threads: &[(i32, u64, &[usize])]) -> ProcSample {
        ProcSample {
            name: name.into(),
            pgrp,
            start_ticks: 1,
            cpu_ticks: threads.iter().map(|t| t.1).sum(),
            threads: threads
                .iter()
                .map(|(t, ticks, cpus)| (*t, (*ticks, cpus.to_vec())))
                .collect(),
            ppid: 1,
            children_ticks: 0,
            read_s: 0.0,
        }
    }

    /// `p` with its parent and reaped children's counter.
    fn under(mut p: ProcSample, ppid: i32, children_ticks: u64) -> ProcSample {
        p.ppid = ppid;
        p.children_ticks = children_ticks;
        p
    }

    /// A one-second window over CPU 0 (the server's) and CPU 1 (the client's), both busy
    /// `busy` %, stairbench being pid 20 in group 20 and the server's tree pid 10.
    fn window<'a>(busy: &'a [CoreBusy; 2]) -> Window<'a> {
        Window {
            window_s: 1.0,
            server_cpus: &[0],
            client_cpus: &[1],
            server_busy: &busy[..1],
            client_busy: &busy[1..],
            tree: [10].into(),
            tree_cpu_s: Some(0.0),
            own_groups: [20].into(),
            own_pid: 20,
        }
    }

    fn core(cpu: usize, busy: f64) -> CoreBusy {
        CoreBusy {
            cpu,
            busy_pct: busy,
            user_pct: busy,
            sys_pct: 0.0,
            irq_pct: 0.0,
            steal_pct: 0.0,
        }
    }

    #[test]
    fn a_hog_pinned_on_the_servers_cpu_is_named_and_the_rest_is_the_servers_and_ours() {
        let tps = procfs::ticks_per_s();
        let (a, b) = (0, tps as u64);
        // One second: the server (pid 10) uses 40% of CPU 0, a hog (pid 30, its own group)
        // 55% of CPU 0, stairbench (pid 20) 80% of CPU 1, a loose process (pid 40, both
        // CPUs allowed) 10% of one CPU, half of it counted on each.
        let before: Scan = [
            (10, proc("nginx", 10, &[(10, a, &[0])])),
            (20, proc("stairbench", 20, &[(20, a, &[1])])),
            (30, proc("sh", 30, &[(30, a, &[0])])),
            (40, proc("cc1", 40, &[(40, a, &[0, 1])])),
        ]
        .into();
        let after: Scan = [
            (10, proc("nginx", 10, &[(10, b * 4 / 10, &[0])])),
            (20, proc("stairbench", 20, &[(20, b * 8 / 10, &[1])])),
            (30, proc("sh", 30, &[(30, b * 55 / 100, &[0])])),
            (40, proc("cc1", 40, &[(40, b / 10, &[0, 1])])),
        ]
        .into();
        let server_busy = [core(0, 100.0)];
        let client_busy = [core(1, 95.0)];
        let w = Window {
            window_s: 1.0,
            server_cpus: &[0],
            client_cpus: &[1],
            server_busy: &server_busy,
            client_busy: &client_busy,
            tree: [10].into(),
            tree_cpu_s: Some(0.4),
            own_groups: [20].into(),
            own_pid: 20,
        };
        let n = neighbours(&before, &after, &w).unwrap();
        assert!(
            (n.server_cpus_others_pct.unwrap() - 60.0).abs() < 1.0,
            "{n:?}"
        );
        assert!(
            (n.client_cpus_others_pct.unwrap() - 15.0).abs() < 1.0,
            "{n:?}"
        );
        assert_eq!(n.busiest.len(), 2, "{n:?}");
        assert_eq!((n.busiest[0].pid, n.busiest[0].name.as_str()), (30, "sh"));
        assert!((n.busiest[0].server_cpus_pct - 55.0).abs() < 1.0, "{n:?}");
        assert!((n.busiest[1].client_cpus_pct - 5.0).abs() < 1.0, "{n:?}");
        assert!((n.busiest[1].cpu_pct - 10.0).abs() < 1.0, "{n:?}");
        assert!(n.notes.is_empty(), "{n:?}");
    }

    #[test]
    fn a_process_sharing_only_stairbenchs_group_is_anothers_its_descendants_are_its_own() {
        // A script without job control (group 5, its shell pid 4) ran stairbench (pid 20) and
        // a hog (pid 30) beside it; stairbench started perf (pid 31), which started a
        // helper (pid 32), and a server (group 40) whose script started a daemon that left
        // for a group of its own (pid 33, group 33). Each of the four in group 5 used a
        // quarter of CPU 0 (the server's); the daemon used half of CPU 1 (the client's).
        let quarter = procfs::ticks_per_s() as u64 / 4;
        let at = |ticks: u64| -> Scan {
            let mut scan: Scan = [(20, 4), (30, 4), (31, 20), (32, 31)]
                .into_iter()
                .map(|(pid, ppid)| {
                    let p = proc("p", 5, &[(pid, ticks, &[0])]);
                    (pid, under(p, ppid, 0))
                })
                .collect();
            scan.insert(41, under(proc("sh", 40, &[(41, 0, &[1])]), 20, 0));
            scan.insert(33, under(proc("d", 33, &[(33, 2 * ticks, &[1])]), 41, 0));
            scan
        };
        let busy = [core(0, 100.0), core(1, 50.0)];
        let w = Window {
            own_groups: [5, 40].into(),
            ..window(&busy)
        };
        let n = neighbours(&at(0), &at(quarter), &w).unwrap();
        let mut named: Vec<i32> = n.busiest.iter().map(|x| x.pid).collect();
        named.sort_unstable();
        assert_eq!(named, [30, 33], "{n:?}");
        // CPU 0 full: the hog's quarter is the others', the rest stairbench's.
        assert!(
            (n.server_cpus_others_pct.unwrap() - 25.0).abs() < 1.0,
            "{n:?}"
        );
    }

    #[test]
    fn threads_that_ended_in_the_window_are_still_their_process_cpu() {
        // stairbench's main thread (any CPU) and a load thread pinned to CPU 1 that used
        // 50 ticks in the window and was joined before the end scan.
        let before: Scan = [(
            20,
            proc("stairbench", 20, &[(20, 10, &[0, 1]), (21, 5, &[1])]),
        )]
        .into();
        let mut after = proc("stairbench", 20, &[(20, 20, &[0, 1])]);
        after.cpu_ticks = 15 + 10 + 50;
        let after: Scan = [(20, after)].into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&20], [60.0, 5.0, 55.0]);
    }

    #[test]
    fn interrupt_time_is_no_neighbours() {
        // The client's CPU 95% busy: the tool (stairbench's group) 37%, softirq 55%.
        let tps = procfs::ticks_per_s() as u64;
        let before: Scan = [(20, proc("wrk", 20, &[(20, 0, &[1])]))].into();
        let after: Scan = [(20, proc("wrk", 20, &[(20, tps * 37 / 100, &[1])]))].into();
        let mut client = core(1, 95.0);
        client.irq_pct = 55.0;
        let client_busy = [client];
        let w = Window {
            window_s: 1.0,
            server_cpus: &[0],
            client_cpus: &[1],
            server_busy: &[],
            client_busy: &client_busy,
            own_groups: [20].into(),
            own_pid: 1,
            ..Window::default()
        };
        let n = neighbours(&before, &after, &w).unwrap();
        assert!(
            (n.client_cpus_others_pct.unwrap() - 3.0).abs() < 1.0,
            "{n:?}"
        );
        assert_eq!(n.client_irq_pct, 55.0);
    }

    #[test]
    fn children_that_ended_in_the_window_are_their_parents_cpu() {
        // A shell (pid 30, pinned to CPU 0) ran short commands inside the window: 40 ticks,
        // none of them in either scan, plus one (pid 31) seen at the start with 25 ticks
        // that used 10 more before the shell reaped it (its 35 all went to the counter).
        let mut sh0 = proc("sh", 30, &[(30, 100, &[0])]);
        sh0.children_ticks = 500;
        let mut cmd = proc("sleep", 30, &[(31, 25, &[0])]);
        cmd.ppid = 30;
        let before: Scan = [(30, sh0.clone()), (31, cmd)].into();
        let mut sh1 = sh0;
        sh1.threads.insert(30, (102, vec![0]));
        sh1.cpu_ticks = 102;
        sh1.children_ticks = 500 + 40 + 35;
        let after: Scan = [(30, sh1)].into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&30], [2.0 + 40.0 + 10.0, 52.0, 0.0]);
    }

    #[test]
    fn a_pid_reused_in_the_window_counts_all_of_its_cpu() {
        let before: Scan = [(5, proc("old", 5, &[(5, 1000, &[0])]))].into();
        let mut new = proc("new", 5, &[(5, 30, &[0])]);
        new.start_ticks = 99;
        let after: Scan = [(5, new)].into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&5], [30.0, 30.0, 0.0]);
    }

    #[test]
    fn a_child_seen_at_the_start_charges_its_parent_only_what_it_used_inside_the_window() {
        // A shell (pid 30, CPU 0) whose child (31) had used 400 ticks by the start and 420
        // when the shell reaped it: the counter grew 420, the window holds 20 of them.
        let before: Scan = [
            (30, under(proc("bash", 30, &[(30, 10, &[0])]), 1, 0)),
            (31, under(proc("cc1", 30, &[(31, 400, &[0])]), 30, 0)),
        ]
        .into();
        let after: Scan = [(30, under(proc("bash", 30, &[(30, 10, &[0])]), 1, 420))].into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&30], [20.0, 20.0, 0.0]);
    }

    #[test]
    fn grandchildren_reaped_through_ended_parents_count_only_inside_the_window() {
        // bash (30) → subshell (31) → cargo (32) → rustc (33), all but bash seen at the start
        // and gone at the end: rustc 400 → 420 reaped by cargo (already holding 50 of reaped
        // build scripts), cargo 100 → 110 reaped by the subshell (5 → 6), the subshell by
        // bash. Bash's counter grew by all of it (586 ticks); 31 fell inside the window.
        let before: Scan = [
            (30, under(proc("bash", 30, &[(30, 10, &[0, 1])]), 1, 1000)),
            (31, under(proc("bash", 30, &[(31, 5, &[0, 1])]), 30, 0)),
            (32, under(proc("cargo", 30, &[(32, 100, &[0, 1])]), 31, 50)),
            (33, under(proc("rustc", 30, &[(33, 400, &[0, 1])]), 32, 0)),
        ]
        .into();
        let grown = 6 + (110 + 50 + 420);
        let after: Scan = [(
            30,
            under(proc("bash", 30, &[(30, 10, &[0, 1])]), 1, 1000 + grown),
        )]
        .into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&30], [31.0, 15.5, 15.5]);
        // Cargo still alive at the end: rustc's CPU is cargo's, none of it bash's.
        let cargo = under(proc("cargo", 30, &[(32, 110, &[0, 1])]), 30, 50 + 420);
        let before: Scan = [
            (30, under(proc("bash", 30, &[(30, 10, &[0, 1])]), 1, 1000)),
            (32, under(proc("cargo", 30, &[(32, 100, &[0, 1])]), 30, 50)),
            (33, under(proc("rustc", 30, &[(33, 400, &[0, 1])]), 32, 0)),
        ]
        .into();
        let after: Scan = [
            (30, under(proc("bash", 30, &[(30, 10, &[0, 1])]), 1, 1000)),
            (32, cargo),
        ]
        .into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&30], [0.0, 0.0, 0.0]);
        assert_eq!(t[&32], [30.0, 15.0, 15.0]);
    }

    #[test]
    fn descendants_born_inside_the_window_count_fully_and_a_missing_parent_still_takes_its_own() {
        // The subshell (31) seen at the start ran a command (born and reaped inside the
        // window: 70 ticks) and was reaped by bash: bash is charged the command whole.
        let before: Scan = [
            (30, under(proc("bash", 30, &[(30, 10, &[0])]), 1, 0)),
            (31, under(proc("bash", 30, &[(31, 5, &[0])]), 30, 0)),
        ]
        .into();
        let after: Scan = [(30, under(proc("bash", 30, &[(30, 10, &[0])]), 1, 5 + 70))].into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&30][0], 70.0);
        // make (40) was missed by the start scan (its read raced its start) but its compiler
        // (41, 300 ticks by then) was seen under it; make reaped it at 330. make's counter is
        // counted from 0, less the compiler's 300 seen at the start.
        let mut make = under(proc("make", 40, &[(40, 2, &[0])]), 1, 330);
        make.start_ticks = 1;
        let before: Scan = [(41, under(proc("cc1", 40, &[(41, 300, &[0])]), 40, 0))].into();
        let after: Scan = [(40, make)].into();
        let t = process_ticks(&before, &after, (&[0], &[1]), &|_| true);
        assert_eq!(t[&40][0], 2.0 + 30.0);
        // A process under that pid at the end that started after the compiler is another
        // one: it is not charged less.
        let mut other = under(proc("other", 40, &[(40, 2, &[0])]), 1, 0);
        other.start_ticks = 9;
        let mut cc1 = under(proc("cc1", 40, &[(41, 300, &[0])]), 40, 0);
        cc1.start_ticks = 5;
        let t = process_ticks(
            &[(41, cc1)].into(),
            &[(40, other)].into(),
            (&[0], &[1]),
            &|_| true,
        );
        assert_eq!(t[&40][0], 2.0);
    }

    #[test]
    fn a_process_on_one_cpu_never_reads_over_100_percent_and_a_clip_says_so() {
        let tps = procfs::ticks_per_s() as u64;
        let busy = [core(0, 100.0), core(1, 0.0)];
        // The shell pinned to CPU 0 reaped, inside one second, a compiler seen at the start
        // with 4 s of CPU that used 1 s more: it used one CPU, not five.
        let before: Scan = [
            (30, under(proc("sh", 30, &[(30, 0, &[0])]), 1, 0)),
            (31, under(proc("rustc", 30, &[(31, 4 * tps, &[0])]), 30, 0)),
        ]
        .into();
        let after: Scan = [(30, under(proc("sh", 30, &[(30, 0, &[0])]), 1, 5 * tps))].into();
        let n = neighbours(&before, &after, &window(&busy)).unwrap();
        assert_eq!(n.busiest.len(), 1, "{n:?}");
        assert!((n.busiest[0].cpu_pct - 100.0).abs() < 0.01, "{n:?}");
        assert!(n.notes.is_empty(), "{n:?}");
        // The start scan missed the compiler: its 4 s before the window reach the shell. The
        // guard clips to the one CPU the shell may run on, and says so.
        let before: Scan = [(30, under(proc("sh", 30, &[(30, 0, &[0])]), 1, 0))].into();
        let n = neighbours(&before, &after, &window(&busy)).unwrap();
        let sh = &n.busiest[0];
        assert_eq!((sh.cpu_pct, sh.server_cpus_pct), (100.0, 100.0), "{n:?}");
        assert!(
            n.notes
                .iter()
                .any(|x| x.contains("sh (pid 30) read 500.0% of one CPU")),
            "{n:?}"
        );
    }

    #[test]
    fn a_process_is_timed_between_its_own_two_readings() {
        // Read 1.1 s apart in a window timed 1.0 s (the scans are slower than the window):
        // 110 ticks are 100% of one CPU, not 110%.
        let tps = procfs::ticks_per_s();
        let busy = [core(0, 100.0), core(1, 0.0)];
        let mut a = proc("hog", 30, &[(30, 0, &[0])]);
        a.read_s = 50.0;
        let mut b = proc("hog", 30, &[(30, (1.1 * tps) as u64, &[0])]);
        b.read_s = 51.1;
        let n = neighbours(&[(30, a)].into(), &[(30, b)].into(), &window(&busy)).unwrap();
        assert!((n.busiest[0].cpu_pct - 100.0).abs() < 0.5, "{n:?}");
        assert!(n.notes.is_empty(), "{n:?}");
    }

    #[test]
    fn named_shares_never_add_up_to_more_than_the_others_total() {
        // The others took 53% of the server's CPU (/proc/stat); the scan's even split puts
        // 61% and 20% on it: both are scaled to add up to 53%, in proportion.
        let tps = procfs::ticks_per_s() as u64;
        let busy = [core(0, 53.0), core(1, 0.0)];
        let before: Scan = [
            (30, proc("sh", 30, &[(30, 0, &[0])])),
            (40, proc("cc1", 40, &[(40, 0, &[0])])),
        ]
        .into();
        let after: Scan = [
            (30, proc("sh", 30, &[(30, tps * 61 / 100, &[0])])),
            (40, proc("cc1", 40, &[(40, tps * 20 / 100, &[0])])),
        ]
        .into();
        let n = neighbours(&before, &after, &window(&busy)).unwrap();
        let total = n.server_cpus_others_pct.unwrap();
        assert!((total - 53.0).abs() < 0.01, "{n:?}");
        let (sh, cc1) = (&n.busiest[0], &n.busiest[1]);
        assert!(sh.server_cpus_pct <= total, "{n:?}");
        assert!(
            (sh.server_cpus_pct + cc1.server_cpus_pct - total).abs() < 0.01,
            "{n:?}"
        );
        assert!(
            (sh.server_cpus_pct / cc1.server_cpus_pct - 61.0 / 20.0).abs() < 0.01,
            "{n:?}"
        );
        assert!(n.notes.iter().any(|x| x.contains("81.0%")), "{n:?}");
        // Within the figures' resolution (two ticks each) it is scaled without a note.
        let busy = [core(0, 80.0), core(1, 0.0)];
        let n = neighbours(&before, &after, &window(&busy)).unwrap();
        assert!(
            n.busiest.iter().map(|x| x.server_cpus_pct).sum::<f64>() <= 80.0 + 1e-9,
            "{n:?}"
        );
        assert!(n.notes.is_empty(), "{n:?}");
    }
}
