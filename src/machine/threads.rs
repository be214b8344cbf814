//! Threads of a process tree: each thread's name, CPU time, run-queue wait and context
//! switches from /proc/PID/task/TID/{stat,schedstat,status}, the change of each over a window,
//! and the one rule that merges numbered thread names (`reactor-0..7` → `reactor`), which the
//! flame graphs use too. Parsers take the files' text, so tests feed recorded samples.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `worker-3`, `worker_3`, `worker#3` → `worker`; a name that is only digits stays.
pub fn merge_thread_name(name: &str) -> &str {
    let digits = name.len() - name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 || digits + 1 >= name.len() {
        return name;
    }
    let cut = name.len() - digits - 1;
    match name.as_bytes()[cut] {
        b'-' | b'_' | b'#' => &name[..cut],
        _ => name,
    }
}

/// One thread's counters at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskSample {
    /// The thread's name (`comm`, at most 15 bytes).
    pub name: String,
    /// User + system time from /proc/PID/task/TID/stat, in clock ticks.
    pub cpu_ticks: u64,
    /// Time on a CPU from schedstat, in nanoseconds (None where the kernel has no schedstat).
    pub run_ns: Option<u64>,
    /// Time runnable but waiting for a CPU from schedstat, in nanoseconds.
    pub wait_ns: Option<u64>,
    /// Voluntary context switches (the thread blocked).
    pub voluntary_cs: u64,
    /// Involuntary context switches (the thread was preempted).
    pub involuntary_cs: u64,
    /// Delay accounting's block-I/O wait from the same stat, in clock ticks (0 while
    /// kernel.task_delayacct is off).
    pub blkio_ticks: Option<u64>,
}

/// The thread's name (between the first '(' and the last ')') and its user + system ticks
/// from /proc/PID/task/TID/stat.
pub fn parse_task_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let name = text.get(open + 1..close)?.to_string();
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // f[0] is field 3 (state); utime is field 14, stime field 15.
    let num = |k: usize| f.get(k - 3)?.parse::<u64>().ok();
    Some((name, num(14)? + num(15)?))
}

/// Delay accounting's block-I/O wait of one task, in clock ticks (field 42 of its stat).
pub fn parse_blkio_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // rest's first field is field 3.
    rest.split_whitespace().nth(42 - 3)?.parse().ok()
}

/// (time on a CPU, time waiting on a run queue) in nanoseconds from a schedstat file.
pub fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut f = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??))
}

/// One thread's change over a window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskDelta {
    /// Its process.
    pub pid: i32,
    /// Its thread id.
    pub tid: i32,
    /// Its name at the end of the window.
    pub name: String,
    /// CPU time, in seconds (schedstat's nanoseconds where present, else clock ticks).
    pub cpu_s: f64,
    /// Time runnable but waiting for a CPU, in seconds (None without schedstat).
    pub wait_s: Option<f64>,
    /// Voluntary context switches.
    pub voluntary_cs: u64,
    /// Involuntary context switches.
    pub involuntary_cs: u64,
}

/// The change of every thread alive at the end of the window; a thread that started inside
/// the window counts from zero. `ticks_per_s` converts /proc's clock ticks.
pub fn task_deltas(
    before: &BTreeMap<(i32, i32), TaskSample>,
    after: &BTreeMap<(i32, i32), TaskSample>,
    ticks_per_s: f64,
) -> Vec<TaskDelta> {
    let zero = TaskSample::default();
    after
        .iter()
        .map(|(&(pid, tid), b)| {
            let a = before.get(&(pid, tid)).unwrap_or(&zero);
            let ns = |x: Option<u64>, y: Option<u64>| match (x, y) {
                (Some(y0), Some(y1)) => Some(y1.saturating_sub(y0) as f64 / 1e9),
                (None, Some(y1)) if before.get(&(pid, tid)).is_none() => Some(y1 as f64 / 1e9),
                _ => None,
            };
            let cpu_s = ns(a.run_ns, b.run_ns)
                .unwrap_or_else(|| b.cpu_ticks.saturating_sub(a.cpu_ticks) as f64 / ticks_per_s);
            TaskDelta {
                pid,
                tid,
                name: b.name.clone(),
                cpu_s,
                wait_s: ns(a.wait_ns, b.wait_ns),
                voluntary_cs: b.voluntary_cs.saturating_sub(a.voluntary_cs),
                involuntary_cs: b.involuntary_cs.saturating_sub(a.involuntary_cs),
            }
        })
        .collect()
}

/// The threads of one merged name over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadGroup {
    /// The merged thread name (`reactor` for `reactor-0..7`).
    pub name: String,
    /// Threads of this name seen in the window: alive at its end, or ended inside it (seen
    /// by the samples taken during it).
    pub threads: u64,
    /// Their CPU time, in percent of one CPU over the window (200 = two CPUs' worth).
    pub cpu_pct: f64,
    /// The busiest one of them, in percent of one CPU.
    pub max_thread_cpu_pct: f64,
    /// Their time runnable but waiting for a CPU, in percent of the window (summed over
    /// threads, so above 100 when several wait at once); None without schedstat.
    pub run_delay_pct: Option<f64>,
    /// Their voluntary context switches.
    pub voluntary_cs: u64,
    /// Their involuntary context switches.
    pub involuntary_cs: u64,
}

/// The busiest single thread of a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BusiestThread {
    /// Its name as the kernel has it.
    pub name: String,
    /// Its merged name (its group).
    pub group: String,
    /// Its process.
    pub pid: i32,
    /// Its thread id.
    pub tid: i32,
    /// Its CPU time, in percent of one CPU over the window.
    pub cpu_pct: f64,
}

/// A process tree's threads over a window, grouped by merged name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
// Read back tolerantly: a field an older run lacks is absent, not the whole figure.
#[serde(default)]
pub struct ThreadUsage {
    /// One entry per merged name, busiest first.
    pub groups: Vec<ThreadGroup>,
    /// The busiest single thread (None when the tree had no thread).
    pub busiest: Option<BusiestThread>,
    /// All threads' time runnable but waiting for a CPU, in seconds (None without schedstat).
    pub run_delay_s: Option<f64>,
    /// `run_delay_s` in percent of the window: 100 means one thread waited all the time on
    /// average, which a busy % does not show.
    pub run_delay_pct: Option<f64>,
    /// Where per-thread CPU came from: `schedstat` (ns) or `stat` (10 ms clock ticks).
    pub cpu_source: String,
    /// Threads among `groups` that ended inside the window (a process per connection's),
    /// counted with their CPU up to their last sample.
    #[serde(default)]
    pub ended_threads: u64,
    /// The tree's CPU that no thread's figures hold, % of one CPU: tasks that began and ended
    /// between two samples, known only from their parents' reaped-children times (None when
    /// under 5% of the tree's CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsampled_cpu_pct: Option<f64>,
}

/// Groups a window's thread deltas by merged name; `window_s` turns times into shares.
pub fn thread_usage(deltas: &[TaskDelta], window_s: f64) -> ThreadUsage {
    let pct = |s: f64| {
        if window_s > 0.0 {
            100.0 * s / window_s
        } else {
            0.0
        }
    };
    let mut groups: BTreeMap<&str, ThreadGroup> = BTreeMap::new();
    let has_wait = !deltas.is_empty() && deltas.iter().all(|d| d.wait_s.is_some());
    for d in deltas {
        let name = merge_thread_name(&d.name);
        let g = groups.entry(name).or_insert_with(|| ThreadGroup {
            name: name.to_string(),
            threads: 0,
            cpu_pct: 0.0,
            max_thread_cpu_pct: 0.0,
            run_delay_pct: has_wait.then_some(0.0),
            voluntary_cs: 0,
            involuntary_cs: 0,
        });
        g.threads += 1;
        g.cpu_pct += pct(d.cpu_s);
        g.max_thread_cpu_pct = g.max_thread_cpu_pct.max(pct(d.cpu_s));
        if let (Some(total), Some(w)) = (g.run_delay_pct.as_mut(), d.wait_s) {
            *total += pct(w);
        }
        g.voluntary_cs += d.voluntary_cs;
        g.involuntary_cs += d.involuntary_cs;
    }
    let mut groups: Vec<ThreadGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| b.cpu_pct.total_cmp(&a.cpu_pct).then(a.name.cmp(&b.name)));
    let busiest = deltas
        .iter()
        .max_by(|a, b| a.cpu_s.total_cmp(&b.cpu_s))
        .map(|d| BusiestThread {
            name: d.name.clone(),
            group: merge_thread_name(&d.name).to_string(),
            pid: d.pid,
            tid: d.tid,
            cpu_pct: pct(d.cpu_s),
        });
    let run_delay_s = has_wait.then(|| deltas.iter().filter_map(|d| d.wait_s).sum::<f64>());
    ThreadUsage {
        groups,
        busiest,
        run_delay_pct: run_delay_s.map(pct),
        run_delay_s,
        cpu_source: if deltas.iter().all(|d| d.wait_s.is_some()) {
            "schedstat".into()
        } else {
            "stat".into()
        },
        ended_threads: 0,
        unsampled_cpu_pct: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_threads_drops_numeric_suffixes_only() {
        assert_eq!(merge_thread_name("worker-12"), "worker");
        assert_eq!(merge_thread_name("msgr-worker-3"), "msgr-worker");
        assert_eq!(merge_thread_name("pool_1"), "pool");
        assert_eq!(merge_thread_name("reactor#0"), "reactor");
        assert_eq!(merge_thread_name("h2o"), "h2o");
        assert_eq!(merge_thread_name("-1"), "-1");
        assert_eq!(merge_thread_name("java"), "java");
    }

    #[test]
    fn task_stat_with_a_paren_in_the_name() {
        // Recorded from a thread renamed `a) b` (utime 250, stime 75).
        let text = "4243 (a) b) R 1 4242 4242 0 -1 4194560 120 7 3 1 250 75 10 5 20 0 4 0 \
                    100 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        assert_eq!(parse_task_stat(text), Some(("a) b".into(), 325)));
        assert_eq!(parse_task_stat("12 (x) S 1"), None);
    }

    #[test]
    fn schedstat_has_run_and_wait() {
        assert_eq!(
            parse_schedstat("1534789012 20311022 812\n"),
            Some((1_534_789_012, 20_311_022))
        );
        assert_eq!(parse_schedstat(""), None);
    }

    fn sample(name: &str, ticks: u64, run_ms: u64, wait_ms: u64, vol: u64) -> TaskSample {
        TaskSample {
            name: name.into(),
            cpu_ticks: ticks,
            run_ns: Some(run_ms * 1_000_000),
            wait_ns: Some(wait_ms * 1_000_000),
            voluntary_cs: vol,
            involuntary_cs: vol / 10,
            blkio_ticks: None,
        }
    }

    #[test]
    fn threads_group_by_merged_name_and_keep_the_busiest() {
        let before = BTreeMap::from([
            ((10, 10), sample("srv", 0, 0, 0, 0)),
            ((10, 11), sample("reactor-0", 0, 100, 10, 100)),
            ((10, 12), sample("reactor-1", 0, 100, 10, 100)),
        ]);
        // Over 2 s: reactor-0 ran 1.9 s (95% of a CPU) and waited 0.4 s; reactor-1 ran 0.5 s;
        // reactor-2 started inside the window and ran 0.1 s.
        let after = BTreeMap::from([
            ((10, 10), sample("srv", 0, 10, 0, 3)),
            ((10, 11), sample("reactor-0", 0, 2000, 410, 1100)),
            ((10, 12), sample("reactor-1", 0, 600, 110, 600)),
            ((10, 13), sample("reactor-2", 0, 100, 0, 10)),
        ]);
        let d = task_deltas(&before, &after, 100.0);
        let u = thread_usage(&d, 2.0);
        assert_eq!(u.groups.len(), 2);
        let r = &u.groups[0];
        assert_eq!((r.name.as_str(), r.threads), ("reactor", 3));
        assert!((r.cpu_pct - 125.0).abs() < 1e-9, "{}", r.cpu_pct);
        assert!((r.max_thread_cpu_pct - 95.0).abs() < 1e-9);
        assert!((r.run_delay_pct.unwrap() - 25.0).abs() < 1e-9);
        assert_eq!(r.voluntary_cs, 1000 + 500 + 10);
        let b = u.busiest.unwrap();
        assert_eq!(
            (b.name.as_str(), b.group.as_str(), b.tid),
            ("reactor-0", "reactor", 11)
        );
        assert!((b.cpu_pct - 95.0).abs() < 1e-9);
        assert!((u.run_delay_s.unwrap() - 0.5).abs() < 1e-9);
        assert!((u.run_delay_pct.unwrap() - 25.0).abs() < 1e-9);
        assert_eq!(u.cpu_source, "schedstat");
    }

    #[test]
    fn without_schedstat_cpu_comes_from_ticks_and_wait_is_unknown() {
        let tick = |name: &str, t: u64| TaskSample {
            name: name.into(),
            cpu_ticks: t,
            ..TaskSample::default()
        };
        let before = BTreeMap::from([((1, 1), tick("redis-server", 100))]);
        let after = BTreeMap::from([((1, 1), tick("redis-server", 198))]);
        let u = thread_usage(&task_deltas(&before, &after, 100.0), 1.0);
        assert!((u.busiest.unwrap().cpu_pct - 98.0).abs() < 1e-9);
        assert_eq!(u.run_delay_s, None);
        assert_eq!(u.groups[0].run_delay_pct, None);
        assert_eq!(u.cpu_source, "stat");
    }
}
