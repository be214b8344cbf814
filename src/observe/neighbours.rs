//! The other processes on the server's and the client's CPUs: /proc is scanned at both ends
//! of the window (every thread's CPU and the CPUs it may run on), and the CPUs' busy share
//! from /proc/stat, less the server tree's and stairbench's own and less interrupt time
//! (irq, softirq: charged to no task, and on loopback mostly the network work of the traffic
//! under test: 10% of nginx's one CPU at 14.6k req/s from wrk), is what the others took.
//! That difference also counts what the scan cannot name (other containers' processes on a
//! shared kernel, processes whose parent ended too); the scan names the busiest it saw, a
//! process's children that ended inside the window counted as its own.
//!
//! stairbench's own: this process (its load threads and observers), and every process in
//! the process group of a child it started (the server, an external load tool) or in its own
//! group (perf). A process that left those groups (`setsid`) is another's, even when it was
//! orphaned to stairbench.

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
}

/// Every process at one end of the window, by pid.
pub type Scan = BTreeMap<i32, ProcSample>;

/// Scans every process and thread under `proc_root` (/proc); `ncpus` bounds the CPU numbers
/// read from each thread's affinity.
pub fn scan(proc_root: &Path, ncpus: usize) -> Scan {
    let mut out = Scan::new();
    for (pid, stat) in procfs::all_pid_stats(proc_root) {
        let Ok(entries) = std::fs::read_dir(proc_root.join(format!("{pid}/task"))) else {
            continue;
        };
        let mut p = ProcSample {
            pgrp: stat.pgrp,
            start_ticks: stat.start_ticks,
            cpu_ticks: stat.utime + stat.stime,
            ppid: stat.ppid,
            children_ticks: stat.cutime + stat.cstime,
            ..ProcSample::default()
        };
        for e in entries.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let Some((name, ticks)) = std::fs::read_to_string(e.path().join("stat"))
                .ok()
                .and_then(|t| crate::machine::threads::parse_task_stat(&t))
            else {
                continue;
            };
            if tid == pid {
                p.name = name;
            }
            p.threads.insert(tid, (ticks, affinity(tid, ncpus)));
        }
        out.insert(pid, p);
    }
    out
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
/// - Children that ended inside the window (a shell's commands, a build's compilers, an
///   external load tool reaped before the end scan) are in no scan: their CPU is their
///   parent's reaped-children growth, less what the ones seen at the start had already used,
///   placed where the parent may run (children inherit its affinity). Without it, a shell
///   loop of short commands beside a server took its CPU unnamed.
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
    let mut out = BTreeMap::new();
    for (pid, p) in after {
        // A pid reused during the window is another process: all of its CPU is new.
        let old = before.get(pid).filter(|o| o.start_ticks == p.start_ticks);
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
            add(
                &mut t,
                reaped_ticks(*pid, p, old, before, after) as f64,
                &own,
                a,
                b,
            );
        }
        out.insert(*pid, t);
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

/// The CPU of `pid`'s children that it reaped inside the window: its reaped-children
/// counter's growth, less what the children seen at the start and gone at the end (so
/// reaped by it: a live parent keeps its children) had used by then.
fn reaped_ticks(
    pid: i32,
    p: &ProcSample,
    old: Option<&ProcSample>,
    before: &Scan,
    after: &Scan,
) -> u64 {
    let grown = p
        .children_ticks
        .saturating_sub(old.map_or(0, |o| o.children_ticks));
    if grown == 0 {
        return 0;
    }
    let earlier: u64 = before
        .iter()
        .filter(|(c, s)| {
            s.ppid == pid && after.get(c).is_none_or(|n| n.start_ticks != s.start_ticks)
        })
        .map(|(_, s)| s.cpu_ticks + s.children_ticks)
        .sum();
    grown.saturating_sub(earlier)
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
    let own = |pid: i32| {
        pid == w.own_pid
            || after
                .get(&pid)
                .is_some_and(|p| w.own_groups.contains(&p.pgrp))
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
    let pct = |t: f64, cpus: usize| 100.0 * t / tps / w.window_s / cpus.max(1) as f64;
    let mut busiest: Vec<Neighbour> = ticks
        .iter()
        .filter(|(p, _)| !w.tree.contains(p) && !own(**p))
        .map(|(pid, t)| Neighbour {
            pid: *pid,
            name: after[pid].name.clone(),
            cpu_pct: pct(t[0], 1),
            server_cpus_pct: pct(t[1], w.server_cpus.len()),
            client_cpus_pct: pct(t[2], w.client_cpus.len()),
        })
        .filter(|n| n.server_cpus_pct.max(n.client_cpus_pct) >= NAME_MIN_PCT)
        .collect();
    busiest.sort_by(|a, b| {
        b.server_cpus_pct
            .max(b.client_cpus_pct)
            .total_cmp(&a.server_cpus_pct.max(a.client_cpus_pct))
    });
    busiest.truncate(KEEP);
    Some(Neighbours {
        server_cpus_others_pct: others_pct(w.server_busy, w.server_cpus, 1),
        client_cpus_others_pct: others_pct(w.client_busy, w.client_cpus, 2),
        server_irq_pct: mean(w.server_busy.iter().map(|c| c.irq_pct)).unwrap_or(0.0),
        client_irq_pct: mean(w.client_busy.iter().map(|c| c.irq_pct)).unwrap_or(0.0),
        server_steal_pct: mean(w.server_busy.iter().map(|c| c.steal_pct)).unwrap_or(0.0),
        client_steal_pct: mean(w.client_busy.iter().map(|c| c.steal_pct)).unwrap_or(0.0),
        busiest,
    })
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
        // CPUs allowed) 20% of one CPU, half of it counted on each.
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
            (40, proc("cc1", 40, &[(40, b * 2 / 10, &[0, 1])])),
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
        assert!((n.busiest[1].client_cpus_pct - 10.0).abs() < 1.0, "{n:?}");
        assert!((n.busiest[1].cpu_pct - 20.0).abs() < 1.0, "{n:?}");
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
}
