//! The CPU resources a server can run out of besides its own cpuset, as a step records them
//! (`server.cgroup_cpu`, `server.neighbours` in steps.jsonl): the CPU quota and cpuset of the
//! cgroups its processes are in, and the other processes that took its (or the client's)
//! CPUs. `observe::cgroup_cpu` and `observe::neighbours` fill them; the diagnosis' `quota` and
//! `neighbour` rules read them.

use serde::{Deserialize, Serialize};

/// The CPU cgroups of the server's processes over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CgroupCpu {
    /// Every cgroup a server process is in, and each ancestor of one that sets a quota.
    pub groups: Vec<CpuGroup>,
    /// The CPUs the server's cpuset cgroups allow, when fewer than the placement gave it
    /// (`"0"` for a placement of `"0-1"`); None when they allow all of them.
    pub narrower_cpuset: Option<String>,
}

/// One cgroup's CPU controller over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuGroup {
    /// Its path inside its hierarchy (`/stairbench-quota`).
    pub path: String,
    /// The cgroup version: 1 (`cpu.cfs_quota_us`) or 2 (`cpu.max`).
    pub version: u8,
    /// The quota in CPUs (quota / period: 0.2 is 20% of one CPU); None when unlimited.
    pub quota_cpus: Option<f64>,
    /// The enforcement period, in microseconds.
    pub period_us: u64,
    /// Enforcement periods that elapsed in the window (`nr_periods`).
    pub periods: u64,
    /// Periods in the window in which the group was throttled (`nr_throttled`).
    pub throttled_periods: u64,
    /// Time the group's tasks were throttled in the window, in seconds (`throttled_time`,
    /// `throttled_usec`).
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub throttled_s: f64,
    /// The whole group's CPU in the window, in CPU seconds (v1 `cpuacct.usage`, v2
    /// `usage_usec`); None where the kernel does not account it.
    pub usage_s: Option<f64>,
}

impl CpuGroup {
    /// Share of the window's enforcement periods in which the group was throttled, percent.
    pub fn throttled_pct(&self) -> Option<f64> {
        (self.periods > 0).then(|| 100.0 * self.throttled_periods as f64 / self.periods as f64)
    }
}

impl CgroupCpu {
    /// The tightest quota of the server's groups (the fewest CPUs), if any sets one.
    pub fn tightest(&self) -> Option<&CpuGroup> {
        self.groups
            .iter()
            .filter(|g| g.quota_cpus.is_some())
            .min_by(|a, b| {
                a.quota_cpus
                    .unwrap_or(0.0)
                    .total_cmp(&b.quota_cpus.unwrap_or(0.0))
            })
    }

    /// The most throttled group (the largest share of throttled periods).
    pub fn most_throttled(&self) -> Option<&CpuGroup> {
        self.groups
            .iter()
            .filter(|g| g.throttled_periods > 0)
            .max_by(|a, b| {
                a.throttled_pct()
                    .unwrap_or(0.0)
                    .total_cmp(&b.throttled_pct().unwrap_or(0.0))
            })
    }
}

/// Other processes on the server's and the client's CPUs over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Neighbours {
    /// The server's CPUs' busy share that neither the server's tree nor stairbench (its load
    /// threads, its observers, the tools it started) used, % of the server's cpuset:
    /// /proc/stat's busy minus theirs and minus interrupt time.
    pub server_cpus_others_pct: Option<f64>,
    /// The same on the client's CPUs, % of the client's cpuset (the server's tree and
    /// stairbench's own left out).
    pub client_cpus_others_pct: Option<f64>,
    /// Mean interrupt time (irq + softirq) of the server's CPUs, %: no task's, left out of
    /// the others' share (on loopback it is mostly the traffic under test's network work).
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub server_irq_pct: f64,
    /// Mean interrupt time of the client's CPUs, %.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub client_irq_pct: f64,
    /// Mean steal time of the server's CPUs (a hypervisor ran another guest), %.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub server_steal_pct: f64,
    /// Mean steal time of the client's CPUs, %.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub client_steal_pct: f64,
    /// The busiest other processes, busiest first (at most five). Their shares of a cpuset
    /// add up to at most the others' total share of it (`named_within_totals`).
    pub busiest: Vec<Neighbour>,
    /// Each figure of `busiest` that read more than its CPUs allow, or named shares that
    /// added up to more than the others' total, by more than the figures' resolution (two
    /// ticks each over the window): the figure before it was clipped or scaled, and why.
    /// Empty when none.
    pub notes: Vec<String>,
}

impl Neighbours {
    /// Keeps one sentence's figures adding up: where the named processes' shares of a
    /// cpuset add up to more than the others' total share of it, each is scaled down in
    /// proportion so that they add up to the total. The total is the measured figure (the
    /// CPUs' busy share over the window from /proc/stat, less the server's, stairbench's own
    /// and interrupt time), the one the rules read; the named shares only apportion it (each
    /// thread's CPU shared out evenly over the CPUs it may run on, each read to a tick), so
    /// they never raise it. Returns, per side (server, client), the named shares' sum before
    /// scaling where one applied.
    pub fn named_within_totals(&mut self) -> [Option<f64>; 2] {
        let out = [
            scale_named(&mut self.busiest, self.server_cpus_others_pct, |n| {
                &mut n.server_cpus_pct
            }),
            scale_named(&mut self.busiest, self.client_cpus_others_pct, |n| {
                &mut n.client_cpus_pct
            }),
        ];
        let larger = |n: &Neighbour| n.server_cpus_pct.max(n.client_cpus_pct);
        self.busiest.sort_by(|a, b| larger(b).total_cmp(&larger(a)));
        out
    }
}

/// Scales each of `named`'s `share` down in proportion when they add up to more than
/// `total`; returns their sum before when it did.
fn scale_named(
    named: &mut [Neighbour],
    total: Option<f64>,
    share: fn(&mut Neighbour) -> &mut f64,
) -> Option<f64> {
    let total = total?.max(0.0);
    let sum: f64 = named.iter_mut().map(|n| *share(n)).sum();
    if sum <= total {
        return None;
    }
    for n in named.iter_mut() {
        *share(n) *= total / sum;
    }
    Some(sum)
}

/// One other process on the server's or the client's CPUs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Neighbour {
    /// Its process id.
    pub pid: i32,
    /// Its name (`/proc/PID/comm`).
    pub name: String,
    /// Its CPU over the window (between its own two readings), % of one CPU: its threads'
    /// and its descendants' that ended inside the window, for their part inside it; at most
    /// 100% times the CPUs its threads may run on.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub cpu_pct: f64,
    /// Its CPU on the server's CPUs, % of the server's cpuset (each thread's CPU shared out
    /// over the CPUs it may run on), at most 100% and at most `server_cpus_others_pct`.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub server_cpus_pct: f64,
    /// Its CPU on the client's CPUs, % of the client's cpuset (the same sharing out), at most
    /// 100% and at most `client_cpus_others_pct`.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub client_cpus_pct: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(pid: i32, server: f64, client: f64) -> Neighbour {
        Neighbour {
            pid,
            name: format!("p{pid}"),
            cpu_pct: server + client,
            server_cpus_pct: server,
            client_cpus_pct: client,
        }
    }

    #[test]
    fn named_shares_are_scaled_per_side_to_the_others_total_and_resorted() {
        // "other processes took 53% … the busiest: sh 61%": the server's side is scaled
        // (61 + 25 → 53), the client's (20 ≤ 40) is left alone.
        let mut n = Neighbours {
            server_cpus_others_pct: Some(53.0),
            client_cpus_others_pct: Some(40.0),
            busiest: vec![
                named(1, 61.0, 0.0),
                named(2, 25.0, 0.0),
                named(3, 0.0, 20.0),
            ],
            ..Neighbours::default()
        };
        assert_eq!(n.named_within_totals(), [Some(86.0), None]);
        let share = |pid: i32| n.busiest.iter().find(|x| x.pid == pid).unwrap().clone();
        assert!((share(1).server_cpus_pct - 61.0 * 53.0 / 86.0).abs() < 1e-9);
        assert!((share(2).server_cpus_pct - 25.0 * 53.0 / 86.0).abs() < 1e-9);
        assert_eq!(share(3).client_cpus_pct, 20.0);
        assert!(n.busiest.iter().all(|x| x.server_cpus_pct <= 53.0));
        // Busiest first again: 37.6, 20 (the client's), 15.4.
        let order: Vec<i32> = n.busiest.iter().map(|x| x.pid).collect();
        assert_eq!(order, [1, 3, 2]);
        // A side with no total (its CPUs' busy share unread) bounds nothing; a total of 0
        // leaves no named share on that side.
        let mut n = Neighbours {
            server_cpus_others_pct: None,
            client_cpus_others_pct: Some(0.0),
            busiest: vec![named(1, 61.0, 5.0)],
            ..Neighbours::default()
        };
        assert_eq!(n.named_within_totals(), [None, Some(5.0)]);
        assert_eq!(
            (n.busiest[0].server_cpus_pct, n.busiest[0].client_cpus_pct),
            (61.0, 0.0)
        );
    }
}
