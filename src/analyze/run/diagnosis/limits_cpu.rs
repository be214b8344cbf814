//! The CPU limits outside the server's own cpuset: a cgroup's CPU quota or cpuset (`quota`),
//! and other processes on the server's or the client's CPUs (`neighbour`); and what
//! confidence means for every limit: high only when the deciding levels' noise is below the
//! margin the rule needs and no neighbour took 10% of either side's CPUs, with the noisy
//! levels and the neighbours named beside the diagnosis.
//!
//! The figures a sentence quotes come from one repetition (the level's median one for the
//! deciding figure), never from two: a thread's share and its cpuset's cannot then disagree.

use super::{ev, rps, Confidence, Ctx, Evidence, Found, Level, Limit, Metric, BUSY_PCT};
use crate::record::observed::Observation;
use crate::record::steps::StepResult;
use crate::record::use_cpu::{Neighbour, Neighbours};

/// A group throttled in at least this share of its periods (percent) ran out of its quota.
pub const THROTTLED_PCT: f64 = 20.0;
/// A server using at least this share of its quota (percent) has none left.
pub const QUOTA_USED_PCT: f64 = 90.0;
/// Other processes that took at least this share of the server's or the client's CPUs
/// (percent) are neighbours worth naming; below it, noise of the measurement.
pub const NEIGHBOUR_PCT: f64 = 10.0;
/// Neighbours limit a side only when its threads waited on the run queue for at least this
/// share of the window (percent, summed over threads): below it they took idle time.
pub const NEIGHBOUR_WAIT_PCT: f64 = 10.0;
/// The largest throughput CV (fraction) of a deciding level for a high confidence: the
/// tightest throughput margin a rule needs is the coherency rule's 10% fall.
pub const HIGH_MAX_CV: f64 = 0.10;

/// One repetition's quota figures (the tightest quota of the server's groups).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct QuotaRep {
    pub(super) path: String,
    pub(super) version: u8,
    pub(super) quota_cpus: f64,
    pub(super) periods: u64,
    pub(super) throttled_periods: u64,
    pub(super) throttled_s: f64,
    pub(super) window_s: f64,
    /// The server tree's CPU in the same window, in CPUs.
    pub(super) server_cpus_used: f64,
}

impl QuotaRep {
    pub(super) fn throttled_pct(&self) -> f64 {
        if self.periods == 0 {
            0.0
        } else {
            100.0 * self.throttled_periods as f64 / self.periods as f64
        }
    }
    pub(super) fn used_pct(&self) -> f64 {
        100.0 * self.server_cpus_used / self.quota_cpus
    }
}

/// A level's CPU evidence beyond the cpuset: the quota, the cgroup cpuset, the neighbours.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct CpuLevel {
    /// The median repetition's quota figures (by throttled share).
    pub(super) quota: Option<QuotaRep>,
    /// Every repetition throttled in at least THROTTLED_PCT of its periods.
    pub(super) quota_reps_agree: bool,
    /// The cgroup cpuset narrower than the placement's, and the server's CPU in CPUs.
    pub(super) narrower: Option<(String, f64)>,
    /// The median repetition's neighbours (by the larger side's share).
    pub(super) neighbours: Option<Neighbours>,
    /// The smallest of the repetitions' larger-side neighbour shares, percent.
    pub(super) neighbours_min_pct: Option<f64>,
    /// The same repetition's server and client CPUs' busy % (/proc/stat, everything on them).
    pub(super) busy_pct: (Option<f64>, Option<f64>),
    /// The same repetition's server tree CPU, % of its cpuset.
    pub(super) server_own_pct: Option<f64>,
}

fn tree_cpus_used(o: &Observation) -> Option<f64> {
    let t = o.server.as_ref()?;
    (o.window_s > 0.0).then(|| (t.user_s + t.sys_s) / o.window_s)
}

pub(super) fn others_pct(n: &Neighbours) -> f64 {
    n.server_cpus_others_pct
        .unwrap_or(0.0)
        .max(n.client_cpus_others_pct.unwrap_or(0.0))
}

/// The element of `v` at the median of `key` (the lower one of an even count).
fn median_by<T: Clone>(mut v: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    v.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let i = v.len().checked_sub(1)? / 2;
    v.get(i).cloned()
}

/// A level's CPU evidence from its repetitions.
pub(super) fn cpu_level(reps: &[&StepResult]) -> CpuLevel {
    // Each repetition's neighbours without an external load tool's CPU (see `without_tool`).
    let observed: Vec<Observation> = reps
        .iter()
        .filter_map(|s| {
            let mut o = s.observation()?.clone();
            o.neighbours = o.neighbours.take().map(|n| without_tool(s, n));
            Some(o)
        })
        .collect();
    let quotas: Vec<QuotaRep> = observed
        .iter()
        .filter_map(|o| {
            let g = o.cgroup_cpu.as_ref()?.tightest()?;
            Some(QuotaRep {
                path: g.path.clone(),
                version: g.version,
                quota_cpus: g.quota_cpus?,
                periods: g.periods,
                throttled_periods: g.throttled_periods,
                throttled_s: g.throttled_s,
                window_s: o.window_s,
                server_cpus_used: tree_cpus_used(o)?,
            })
        })
        .collect();
    let quota_reps_agree =
        !quotas.is_empty() && quotas.iter().all(|q| q.throttled_pct() >= THROTTLED_PCT);
    let narrower = observed.iter().find_map(|o| {
        let set = o.cgroup_cpu.as_ref()?.narrower_cpuset.clone()?;
        Some((set, tree_cpus_used(o)?))
    });
    let with_neighbours: Vec<&Observation> =
        observed.iter().filter(|o| o.neighbours.is_some()).collect();
    let rep = median_by(with_neighbours.clone(), |o| {
        o.neighbours.as_ref().map_or(0.0, others_pct)
    });
    CpuLevel {
        quota: median_by(quotas, QuotaRep::throttled_pct),
        quota_reps_agree,
        narrower,
        neighbours: rep.and_then(|o| o.neighbours.clone()),
        neighbours_min_pct: with_neighbours
            .iter()
            .filter_map(|o| o.neighbours.as_ref().map(others_pct))
            .min_by(f64::total_cmp),
        busy_pct: rep.map_or((None, None), |o| {
            (o.server_cpus_busy_pct, o.client_cpus_busy_pct)
        }),
        server_own_pct: rep.and_then(|o| {
            let cpus = o.server_cpus.len().max(1) as f64;
            tree_cpus_used(o).map(|c| 100.0 * c / cpus)
        }),
    }
}

/// The neighbours' shares less an external load tool's CPU: the tool's process lives only
/// inside the window, so the observer's scans at its ends never see it and count it among the
/// others; its CPU (from its own rusage) is shared out evenly over the client's CPUs.
fn without_tool(s: &StepResult, mut n: Neighbours) -> Neighbours {
    let Some(load) = s.load.as_ref().filter(|_| s.figures.tool.is_some()) else {
        return n;
    };
    let client = crate::cpuset::parse(&s.client_cpus).unwrap_or_default();
    let server = crate::cpuset::parse(&s.server_cpus).unwrap_or_default();
    if client.is_empty() || load.duration_s <= 0.0 {
        return n;
    }
    let tool_s = load.client_cpu.user_s + load.client_cpu.sys_s;
    let on = |cpus: &[usize]| {
        let shared = client.iter().filter(|c| cpus.contains(c)).count() as f64;
        100.0 * tool_s * shared / client.len() as f64 / load.duration_s / cpus.len().max(1) as f64
    };
    let less = |x: Option<f64>, by: f64| x.map(|v| (v - by).max(0.0));
    n.client_cpus_others_pct = less(n.client_cpus_others_pct, on(&client));
    n.server_cpus_others_pct = less(n.server_cpus_others_pct, on(&server));
    // The named shares stay within the totals they are now read beside.
    n.named_within_totals();
    n
}

fn cpus(n: f64) -> String {
    format!(
        "{n:.2} CPU{}",
        if (n - 1.0).abs() < 1e-9 { "" } else { "s" }
    )
}

/// `quota`: a cgroup's CPU quota throttled the server, or its cpuset holds fewer CPUs than the
/// placement gave it and the server filled them.
pub(super) fn quota(c: &Ctx) -> Option<Found> {
    let top = c.top();
    if let Some(q) = top.cpu.quota.as_ref() {
        if q.throttled_pct() >= THROTTLED_PCT || q.used_pct() >= QUOTA_USED_PCT {
            return Some(quota_found(c, top, q));
        }
    }
    let (set, used) = top.cpu.narrower.clone()?;
    let n = crate::cpuset::parse(&set).ok()?.len() as f64;
    (used >= QUOTA_USED_PCT / 100.0 * n).then(|| Found {
        limit: Limit::Quota,
        confidence: Confidence::Medium,
        evidence: vec![ev(
            Metric::CgroupCpusetCpus,
            n,
            Some(top.clients),
            format!("the server's cpuset cgroup allows only CPUs {set}, fewer than its placement's"),
        )],
        because: format!(
            "its cpuset cgroup allows only CPU{} {set} of the {} its placement gave it, and the server used {} at {} clients: a cgroup cpuset limit",
            if n == 1.0 { "" } else { "s" },
            top.server_cpus,
            cpus(used),
            top.clients
        ),
        next: "widen the cgroup's cpuset (cpuset.cpus) or give the placement only the CPUs it allows".into(),
    })
}

fn quota_found(c: &Ctx, top: &Level, q: &QuotaRep) -> Found {
    let (thr, used) = (q.throttled_pct(), q.used_pct());
    let agree = q.throttled_pct() >= 50.0 && used >= 80.0 && top.cpu.quota_reps_agree;
    let evidence = vec![
        ev(
            Metric::QuotaCpus,
            q.quota_cpus,
            Some(top.clients),
            format!(
                "the CPU quota of cgroup {} (v{}), in CPUs",
                q.path, q.version
            ),
        ),
        ev(
            Metric::ThrottledPeriodsPct,
            thr,
            Some(top.clients),
            format!(
                "{} of {} enforcement periods throttled",
                q.throttled_periods, q.periods
            ),
        ),
        ev(
            Metric::ThrottledS,
            q.throttled_s,
            Some(top.clients),
            format!("time throttled in the {:.1} s window", q.window_s),
        ),
        ev(
            Metric::ServerQuotaUsedPct,
            used,
            Some(top.clients),
            "the server's CPU, % of the quota",
        ),
    ];
    let file = if q.version == 1 {
        "cpu.cfs_quota_us"
    } else {
        "cpu.max"
    };
    Found {
        limit: Limit::Quota,
        confidence: if agree && c.flat_throughput() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!(
            "its cgroup {} allows {} ({file}) and throttled it in {} of {} periods ({:.2} s throttled in {:.1} s) at {} clients, while the server used {} ({used:.0}% of the quota) and throughput stayed near {}: a CPU quota limit",
            q.path,
            cpus(q.quota_cpus),
            q.throttled_periods,
            q.periods,
            q.throttled_s,
            q.window_s,
            top.clients,
            cpus(q.server_cpus_used),
            rps(top.throughput_rps)
        ),
        next: format!("raise the cgroup's CPU quota ({file}) or run the server outside that cgroup"),
    }
}

/// `neighbour`: other processes took 10% or more of the server's or the client's CPUs and
/// those CPUs had no room left.
pub(super) fn neighbour(c: &Ctx) -> Option<Found> {
    let top = c.top();
    let n = top.cpu.neighbours.as_ref()?;
    let (server_busy, client_busy) = top.cpu.busy_pct;
    // Others that only filled idle time (a job under `nice`, which the scheduler preempts
    // whenever the server wakes) took CPU nobody wanted: a side's threads must have waited
    // on the run queue too, where the kernel says (schedstat).
    let taken = |others: Option<f64>, busy: Option<f64>, wait: Option<f64>| {
        let (o, b) = (others?, busy?);
        let waited = wait.is_none_or(|w| w >= NEIGHBOUR_WAIT_PCT);
        (o >= NEIGHBOUR_PCT && b >= BUSY_PCT && waited).then_some((o, b))
    };
    let server = taken(n.server_cpus_others_pct, server_busy, top.run_delay_pct);
    let client = taken(
        n.client_cpus_others_pct,
        client_busy,
        top.client_run_delay_pct,
    );
    if server.is_none() && client.is_none() {
        return None;
    }
    let mut evidence = Vec::new();
    let mut parts = Vec::new();
    let mut sides = Vec::new();
    if let Some((others, busy)) = server {
        let own = top
            .cpu
            .server_own_pct
            .map(|p| format!(", the server itself {p:.0}%"))
            .unwrap_or_default();
        let cpus_n = top.server_cpus;
        parts.push(format!(
            "other processes took {others:.0}% of its {cpus_n} CPU{} at {} clients while {} {busy:.0}% busy (steal {:.0}%{own}){}",
            if cpus_n == 1 { "" } else { "s" },
            top.clients,
            if cpus_n == 1 { "it was" } else { "they were" },
            n.server_steal_pct,
            named(n, |x| x.server_cpus_pct)
        ));
        side_evidence(
            &mut evidence,
            top.clients,
            "server's",
            others,
            busy,
            n,
            |x| x.server_cpus_pct,
        );
        sides.push("the server's");
    }
    if let Some((others, busy)) = client {
        parts.push(format!(
            "{}{others:.0}% of the load generator's CPUs, {busy:.0}% busy (steal {:.0}%){}",
            if parts.is_empty() {
                "other processes took "
            } else {
                ""
            },
            n.client_steal_pct,
            named(n, |x| x.client_cpus_pct)
        ));
        side_evidence(
            &mut evidence,
            top.clients,
            "load generator's",
            others,
            busy,
            n,
            |x| x.client_cpus_pct,
        );
        sides.push("the load generator's");
    }
    let worst = server
        .into_iter()
        .chain(client)
        .map(|x| x.0)
        .fold(0.0, f64::max);
    let agree = worst >= 2.0 * NEIGHBOUR_PCT
        && top
            .cpu
            .neighbours_min_pct
            .is_some_and(|m| m >= NEIGHBOUR_PCT);
    Some(Found {
        limit: Limit::Neighbour,
        confidence: if agree {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!("{}: a neighbour limit", parts.join(", and ")),
        next: format!(
            "move the other processes off {} CPUs (or give it CPUs of its own) and run again",
            sides.join(" and ")
        ),
    })
}

/// `; the busiest: sh (pid 77) 47%, ...`: the three busiest other processes by `share`.
fn named(n: &Neighbours, share: fn(&Neighbour) -> f64) -> String {
    let mut by: Vec<&Neighbour> = n.busiest.iter().filter(|x| share(x) >= 1.0).collect();
    by.sort_by(|a, b| share(b).total_cmp(&share(a)));
    let named: Vec<String> = by
        .iter()
        .take(3)
        .map(|x| format!("{} (pid {}) {:.0}%", x.name, x.pid, share(x)))
        .collect();
    if named.is_empty() {
        " (none of them alive at both ends of the window to be named)".into()
    } else {
        format!("; the busiest: {}", named.join(", "))
    }
}

fn side_evidence(
    evidence: &mut Vec<Evidence>,
    clients: usize,
    side: &str,
    others: f64,
    busy: f64,
    n: &Neighbours,
    share: fn(&Neighbour) -> f64,
) {
    let at = Some(clients);
    evidence.push(ev(
        Metric::NeighboursPct,
        others,
        at,
        format!("other processes' share of the {side} CPUs (busy minus the server's and stairbench's own)"),
    ));
    evidence.push(ev(
        Metric::CpusBusyPct,
        busy,
        at,
        format!("the {side} CPUs' busy %, everything on them"),
    ));
    if let Some(x) = n
        .busiest
        .iter()
        .max_by(|a, b| share(a).total_cmp(&share(b)))
    {
        evidence.push(ev(
            Metric::BusiestNeighbourPct,
            share(x),
            at,
            format!("{} (pid {}), its share of the {side} CPUs", x.name, x.pid),
        ));
    }
}

/// Caps a limit's confidence by what the other evidence says, and returns the notes that say
/// why, for stdout beside the diagnosis: neighbours that took 10% of either side's CPUs past
/// the knee (no other limit is then named at high confidence), and deciding levels noisier
/// than the margin a rule needs.
pub(super) fn cap(
    c: &Ctx,
    limit: Limit,
    confidence: &mut Confidence,
    evidence: &mut Vec<Evidence>,
) -> Vec<String> {
    let mut notes = Vec::new();
    let worst = c
        .past_knee()
        .iter()
        .filter_map(|l| Some((l, l.cpu.neighbours.as_ref()?)))
        .map(|(l, n)| {
            (
                l.clients,
                n.server_cpus_others_pct.unwrap_or(0.0),
                n.client_cpus_others_pct.unwrap_or(0.0),
                n,
            )
        })
        .max_by(|a, b| a.1.max(a.2).total_cmp(&b.1.max(b.2)));
    if let Some((clients, s, cl, n)) = worst.filter(|w| w.1.max(w.2) >= NEIGHBOUR_PCT) {
        if limit != Limit::Neighbour {
            evidence.push(ev(
                Metric::NeighboursPct,
                s.max(cl),
                Some(clients),
                "other processes' share of the server's or the client's CPUs: no limit is named at high confidence",
            ));
            if *confidence == Confidence::High {
                *confidence = Confidence::Medium;
            }
            // Who they were, on the side where they took more: an idle machine's share that
            // no scan names (the VM's own accounting, processes gone with their parents)
            // reads differently from a named compiler.
            let who = if s >= cl {
                named(n, |x| x.server_cpus_pct)
            } else {
                named(n, |x| x.client_cpus_pct)
            };
            notes.push(format!(
                "other processes took {s:.0}% of the server's CPUs and {cl:.0}% of the client's at {clients} clients{who}: no limit is named at high confidence"
            ));
        }
    }
    let noisy: Vec<&Level> = c.levels.iter().filter(|l| l.noisy).collect();
    if !noisy.is_empty() {
        let list: Vec<String> = noisy
            .iter()
            .map(|l| {
                let s = if l.clients == 1 { "" } else { "s" };
                format!(
                    "{} client{s} (CV {:.0}%)",
                    l.clients,
                    100.0 * l.throughput_cv
                )
            })
            .collect();
        notes.push(format!(
            "still noisy after their repetitions: {}",
            list.join(", ")
        ));
    }
    let deciding = [c.from, c.levels.len() - 1];
    let too_noisy = deciding
        .iter()
        .filter_map(|&i| c.levels.get(i))
        .find(|l| l.throughput_cv > HIGH_MAX_CV);
    if let Some(l) = too_noisy {
        if *confidence == Confidence::High {
            *confidence = Confidence::Medium;
            notes.push(format!(
                "confidence medium, not high: throughput at {} clients varied {:.0}% (CV) over its repetitions, more than the {:.0}% margin the rules need",
                l.clients,
                100.0 * l.throughput_cv,
                100.0 * HIGH_MAX_CV
            ));
        }
    }
    notes
}

/// For `outside` and `undetermined`: the figures that ruled the quota and the neighbours out.
pub(super) fn ruled_out(c: &Ctx, out: &mut Vec<Evidence>) {
    let top = c.top();
    let at = Some(top.clients);
    match &top.cpu.quota {
        Some(q) => out.push(ev(
            Metric::ThrottledPeriodsPct,
            q.throttled_pct(),
            at,
            format!(
                "quota: cgroup {} ({}) throttled in {:.0}% of its periods, the server used {:.0}% of its quota (a limit needs {THROTTLED_PCT:.0}% throttled or {QUOTA_USED_PCT:.0}% used)",
                q.path,
                cpus(q.quota_cpus),
                q.throttled_pct(),
                q.used_pct()
            ),
        )),
        None => out.push(ev(Metric::QuotaCpus, f64::NAN, at, "quota: no CPU quota on the server's cgroups")),
    }
    match &top.cpu.neighbours {
        Some(n) => out.push(ev(
            Metric::NeighboursPct,
            others_pct(n),
            at,
            format!("neighbour: other processes took {:.0}% of the server's CPUs and {:.0}% of the client's{} (a limit needs {NEIGHBOUR_PCT:.0}% on CPUs {BUSY_PCT:.0}% busy, and the side's threads waiting {NEIGHBOUR_WAIT_PCT:.0}% of the window for a CPU)", n.server_cpus_others_pct.unwrap_or(0.0), n.client_cpus_others_pct.unwrap_or(0.0), top.run_delay_pct.map(|w| format!("; the server's threads waited {w:.0}% of the window for a CPU")).unwrap_or_default()),
        )),
        None => out.push(ev(Metric::NeighboursPct, f64::NAN, at, "neighbour: the other processes were not observed")),
    }
}
