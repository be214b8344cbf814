//! What the step loop measures beside the load, behind [`StepObserver`].
//!
//! [`FullObserver`] is the `observe` module's; [`ProcObserver`] is a small /proc-only one
//! (no perf) kept for machines and tests where perf must stay out of the picture: it reads: the server's process tree CPU (user, sys), its
//! context switches, and the busy % of the server's and client's CPUs. The derived
//! per-request figures follow seed 003's benchreport columns.

use std::time::Instant;

use serde_json::{json, Map, Value};

/// Figures of one measured window.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The server's figures (JSON object).
    pub server: Value,
    /// Derived per-request figures and the observers' own CPU.
    pub derived: Map<String, Value>,
}

/// Watches one step's measured window.
pub trait StepObserver {
    /// Starts watching (just before the load's measured window).
    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]);
    /// Stops watching; `requests` completed in the window turn totals into per-request figures.
    fn finish(&mut self, requests: u64) -> Observed;
}

/// The `observe` module's observer: /proc, `perf stat` (software and, where the machine has
/// them, hardware counters), loopback packets; derived per-request figures.
#[derive(Debug, Default)]
pub struct FullObserver {
    running: Option<crate::observe::Observer>,
}

impl StepObserver for FullObserver {
    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        self.running = Some(crate::observe::Observer::start(
            server_pid,
            server_cpus,
            client_cpus,
        ));
    }

    fn finish(&mut self, requests: u64) -> Observed {
        let Some(running) = self.running.take() else {
            return Observed::default();
        };
        let obs = running.finish();
        let per = crate::observe::per_request(&obs, requests);
        let mut derived = match serde_json::to_value(&per) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        };
        derived.insert("observer_cpu_s".into(), json!(obs.observer_cpu_s));
        Observed {
            server: serde_json::to_value(&obs).unwrap_or(Value::Null),
            derived,
        }
    }
}

/// Observes nothing (for the fake-driver tests and for targets without a pid).
#[derive(Debug, Default)]
pub struct NullObserver;

impl StepObserver for NullObserver {
    fn start(&mut self, _: Option<i32>, _: &[usize], _: &[usize]) {}
    fn finish(&mut self, _: u64) -> Observed {
        Observed::default()
    }
}

#[derive(Debug, Clone, Default)]
struct TreeSample {
    user_ticks: u64,
    sys_ticks: u64,
    voluntary_cs: u64,
    involuntary_cs: u64,
    processes: usize,
}

/// Per-core (busy, total) jiffies from /proc/stat.
type CoreTicks = Vec<(u64, u64)>;

/// Reads /proc before and after the window.
#[derive(Debug, Default)]
pub struct ProcObserver {
    pid: Option<i32>,
    server_cpus: Vec<usize>,
    client_cpus: Vec<usize>,
    before: Option<(Instant, TreeSample, CoreTicks)>,
}

impl StepObserver for ProcObserver {
    fn start(&mut self, server_pid: Option<i32>, server_cpus: &[usize], client_cpus: &[usize]) {
        self.pid = server_pid;
        self.server_cpus = server_cpus.to_vec();
        self.client_cpus = client_cpus.to_vec();
        let tree = server_pid.map(sample_tree).unwrap_or_default();
        self.before = Some((Instant::now(), tree, core_ticks()));
    }

    fn finish(&mut self, requests: u64) -> Observed {
        let own_start = own_cpu_s();
        let Some((t0, tree0, cores0)) = self.before.take() else {
            return Observed::default();
        };
        let wall_s = t0.elapsed().as_secs_f64();
        let tree1 = self.pid.map(sample_tree).unwrap_or_default();
        let cores1 = core_ticks();
        let tick = clock_tick_s();
        let user_s = tree1.user_ticks.saturating_sub(tree0.user_ticks) as f64 * tick;
        let sys_s = tree1.sys_ticks.saturating_sub(tree0.sys_ticks) as f64 * tick;
        let vol = tree1.voluntary_cs.saturating_sub(tree0.voluntary_cs);
        let invol = tree1.involuntary_cs.saturating_sub(tree0.involuntary_cs);
        let busy = |cpus: &[usize]| -> Vec<f64> {
            cpus.iter()
                .map(|&c| busy_pct(&cores0, &cores1, c))
                .collect()
        };
        let server = json!({
            "pid": self.pid,
            "processes": tree1.processes,
            "window_s": wall_s,
            "cpu_user_s": user_s,
            "cpu_sys_s": sys_s,
            "cpu_utilization": if wall_s > 0.0 { (user_s + sys_s) / wall_s } else { 0.0 },
            "voluntary_cs": vol,
            "involuntary_cs": invol,
            "per_core_busy": busy(&self.server_cpus),
            "client_per_core_busy": busy(&self.client_cpus),
        });
        let mut derived = Map::new();
        if requests > 0 && self.pid.is_some() {
            let per = |x: f64| x / requests as f64;
            derived.insert(
                "cpu_us_per_req".into(),
                json!({
                    "user": per(user_s * 1e6),
                    "sys": per(sys_s * 1e6),
                    "total": per((user_s + sys_s) * 1e6),
                }),
            );
            derived.insert("cs_per_req".into(), json!(per((vol + invol) as f64)));
        }
        derived.insert("observer_cpu_s".into(), json!(own_cpu_s() - own_start));
        Observed { server, derived }
    }
}

fn sample_tree(root: i32) -> TreeSample {
    let mut sample = TreeSample::default();
    for pid in descendants(root) {
        let Some((user, sys)) = stat_times(pid) else {
            continue;
        };
        sample.user_ticks += user;
        sample.sys_ticks += sys;
        sample.processes += 1;
        let (v, i) = task_switches(pid);
        sample.voluntary_cs += v;
        sample.involuntary_cs += i;
    }
    sample
}

/// `root` and every process below it.
fn descendants(root: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                if let Some(pp) = super::process::parent_of(pid) {
                    parents.push((pid, pp));
                }
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    out
}

/// utime and stime (clock ticks) of a whole process, all threads included.
fn stat_times(pid: i32) -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat[stat.rfind(')')? + 2..].split_whitespace().collect();
    // Fields after the name start at field 3 (state); utime is field 14, stime 15.
    Some((fields.get(11)?.parse().ok()?, fields.get(12)?.parse().ok()?))
}

/// Context switches summed over a process's threads.
fn task_switches(pid: i32) -> (u64, u64) {
    let mut total = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return total;
    };
    for t in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            let value = |l: &str| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            if line.starts_with("voluntary_ctxt_switches") {
                total.0 += value(line);
            } else if line.starts_with("nonvoluntary_ctxt_switches") {
                total.1 += value(line);
            }
        }
    }
    total
}

fn core_ticks() -> CoreTicks {
    let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for line in stat.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        let mut parts = rest.split_whitespace();
        let Some(Ok(cpu)) = parts.next().map(str::parse::<usize>) else {
            continue;
        };
        let v: Vec<u64> = parts.filter_map(|x| x.parse().ok()).collect();
        let total: u64 = v.iter().take(8).sum();
        let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
        if out.len() <= cpu {
            out.resize(cpu + 1, (0, 0));
        }
        out[cpu] = (total.saturating_sub(idle), total);
    }
    out
}

fn busy_pct(before: &CoreTicks, after: &CoreTicks, cpu: usize) -> f64 {
    match (before.get(cpu), after.get(cpu)) {
        (Some(b), Some(a)) if a.1 > b.1 => {
            100.0 * (a.0.saturating_sub(b.0)) as f64 / (a.1 - b.1) as f64
        }
        _ => 0.0,
    }
}

fn clock_tick_s() -> f64 {
    // Safety: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    1.0 / if hz > 0 { hz as f64 } else { 100.0 }
}

/// CPU seconds this thread has used (the observer's own cost).
fn own_cpu_s() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map_or(0.0, |t| t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observes_a_busy_child() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
            .spawn()
            .unwrap();
        let mut obs = ProcObserver::default();
        obs.start(Some(child.id() as i32), &[0], &[0]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let got = obs.finish(1000);
        let _ = child.kill();
        let _ = child.wait();
        let cpu = got.derived["cpu_us_per_req"]["total"].as_f64().unwrap();
        assert!(cpu > 0.0, "{got:?}");
        assert!(got.server["per_core_busy"][0].as_f64().unwrap() >= 0.0);
    }
}
