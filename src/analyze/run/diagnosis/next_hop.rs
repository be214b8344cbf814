//! The next hop of the requests, as the rules read it (issue 40): the process the server's own
//! connections went to at a level (`server.next_hops`), read by the rules the server itself is
//! read with. Its limit is, in this order:
//! - its CPU: its process tree used [`BUSY_PCT`] of the CPUs it may run on;
//! - one thread of it: its busiest thread used [`THREAD_BUSY_PCT`] of one CPU;
//! - its concurrency: requests waited inside it (its accept queue and its connections with
//!   unread bytes) as [`concurrency`](super::limits_io::concurrency) requires of a server: at
//!   least [`WAITING_MIN`] and [`WAITING_SHARE`] of the connections to it, while it served a
//!   fixed number at once;
//! - else none of its own, and its own next hop is read in turn (up to three deep).
//!
//! `outside` says with it what is outside both processes; `concurrency` names the process
//! of the server's tree whose queue it is.

use super::limits_io::{WAITING_MIN, WAITING_SHARE};
use super::{ev, Evidence, Level, Metric, BUSY_PCT, THREAD_BUSY_PCT};
use crate::record::next_hop::NextHop;
use crate::record::observed::Observation;

/// A hop carries the requests when at least this many connections, on average, go to it.
pub const CONNECTIONS_MIN: f64 = 1.0;
/// Hops read from the server, its own next hop included.
pub const MAX_DEPTH: u32 = 3;

/// One hop at one level, its repetitions averaged, and the hop past it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct HopLevel {
    /// The hop (its name and address from the first repetition that saw it).
    pub hop: NextHop,
    /// Its own next hop, when it is outside the server's tree and has one.
    pub next: Option<Box<HopLevel>>,
}

/// What limits a hop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum HopLimit {
    /// Its CPUs were full.
    Cpu,
    /// One of its threads was.
    OneThread,
    /// Requests queued in it while it served a fixed number at once.
    Concurrency,
    /// None of its own figures shows a limit.
    Unseen,
}

/// The hop the requests go to at a level: the most connected one of the server's own, from
/// the repetitions' observations, followed to its own.
pub(super) fn hop_level(observed: &[Observation]) -> Option<HopLevel> {
    chain(observed, 1)
}

fn chain(observed: &[Observation], depth: u32) -> Option<HopLevel> {
    let first = observed
        .iter()
        .flat_map(|o| o.next_hops.iter())
        .filter(|h| h.depth == depth)
        .max_by(|a, b| a.connections_mean.total_cmp(&b.connections_mean))?;
    let same: Vec<&NextHop> = observed
        .iter()
        .filter_map(|o| {
            o.next_hops
                .iter()
                .find(|h| h.depth == depth && h.addr == first.addr)
        })
        .collect();
    let mean = |f: fn(&NextHop) -> f64| same.iter().map(|h| f(h)).sum::<f64>() / same.len() as f64;
    let mean_of = |f: fn(&NextHop) -> Option<f64>| {
        let v: Vec<f64> = same.iter().filter_map(|h| f(h)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let hop = NextHop {
        connections_mean: mean(|h| h.connections_mean),
        accept_queue_mean: mean(|h| h.accept_queue_mean),
        unread_connections_mean: mean(|h| h.unread_connections_mean),
        in_service_mean: mean_of(|h| h.in_service_mean),
        cpu_pct: mean_of(|h| h.cpu_pct),
        busiest_thread_pct: mean_of(|h| h.busiest_thread_pct),
        cpus_busy_pct: mean_of(|h| h.cpus_busy_pct),
        ..first.clone()
    };
    let next = (!hop.in_tree && depth < MAX_DEPTH)
        .then(|| chain(observed, depth + 1))
        .flatten()
        .map(Box::new);
    (hop.connections_mean >= CONNECTIONS_MIN).then_some(HopLevel { hop, next })
}

impl HopLevel {
    /// Its own limit, from its own figures.
    pub(super) fn own_limit(&self) -> HopLimit {
        let h = &self.hop;
        // Its tree used at least what its busiest thread did (the two come from different
        // counters: at one CPU either may read a little over the other).
        // Its CPUs full is its CPU limit, whoever else used them: a proxy pinned beside its
        // upstream takes a share of the upstream's CPU (gunicorn 88% and nginx 10% of one).
        let tree = tree_cpu_pct(h);
        if let Some(cpus) = h.cpus {
            let full = BUSY_PCT * cpus as f64;
            if tree.is_some_and(|c| c >= full) || h.cpus_busy_pct.is_some_and(|b| b >= full) {
                return HopLimit::Cpu;
            }
        }
        if h.busiest_thread_pct.is_some_and(|b| b >= THREAD_BUSY_PCT) {
            return HopLimit::OneThread;
        }
        let waiting = h.waiting_mean();
        if waiting >= WAITING_MIN && waiting >= WAITING_SHARE * h.connections_mean {
            return HopLimit::Concurrency;
        }
        HopLimit::Unseen
    }

    /// The hop whose limit the requests meet: this one, or the first past it with one of its
    /// own when this one shows none or only a queue (its workers waiting on the next).
    pub(super) fn limiting(&self) -> &HopLevel {
        let own = self.own_limit();
        if matches!(own, HopLimit::Unseen | HopLimit::Concurrency) {
            if let Some(next) = &self.next {
                let deeper = next.limiting();
                if deeper.own_limit() != HopLimit::Unseen {
                    return deeper;
                }
            }
        }
        self
    }

    /// `gunicorn (pid 12, 127.0.0.1:8000)`; its address alone when no process holds it here.
    pub(super) fn label(&self) -> String {
        self.hop.label()
    }

    /// What its own figures say, for a sentence: "serves 2.0 requests at once while 29.8
    /// wait in its accept queue: a concurrency limit in it".
    pub(super) fn clause(&self) -> String {
        let h = &self.hop;
        let waiting = waiting_text(h);
        let cpu = h
            .cpu_pct
            .map_or(String::new(), |c| format!("{c:.0}% of one CPU"));
        match (self.own_limit(), h.pid) {
            (_, None) => format!(
                "takes {:.1} connections, and no process of this machine holds its listening socket (a remote host, or another network namespace): the limit is there",
                h.connections_mean
            ),
            (HopLimit::Cpu, _) => format!(
                "uses {}% of one CPU, its {} CPU{} full{}, with {waiting}: a CPU limit in it",
                tree_cpu_pct(h).unwrap_or(0.0).round(),
                h.cpus.unwrap_or(0),
                if h.cpus == Some(1) { "" } else { "s" },
                others_text(h)
            ),
            (HopLimit::OneThread, _) => format!(
                "has a thread {:.0}% busy (of one CPU) with {waiting}: one thread of it is the limit",
                h.busiest_thread_pct.unwrap_or(0.0)
            ),
            (HopLimit::Concurrency, _) => format!(
                "serves {} while {waiting}, using {cpu}: a concurrency limit in it",
                at_once_text(h)
            ),
            (HopLimit::Unseen, _) => format!(
                "neither queues nor is busy ({waiting}; {}; {cpu}): its own limit is not seen",
                at_once_text(h)
            ),
        }
    }

    /// What to try next about it.
    pub(super) fn next_step(&self) -> String {
        let h = &self.hop;
        let who = match (&h.command, h.pid) {
            (Some(c), Some(pid)) => format!("{c} (pid {pid})"),
            _ => return format!("look at what answers at {} and widen it", h.addr),
        };
        match self.own_limit() {
            HopLimit::Cpu => format!("more CPUs for {who}, or less CPU per request in it"),
            HopLimit::OneThread => {
                format!("spread {who}'s work over more threads or instances")
            }
            HopLimit::Concurrency => format!("more workers or threads in {who}"),
            HopLimit::Unseen => format!("find what {who} waits on (its own thread states)"),
        }
    }

    /// The sentence's words for this hop and, when the limit is past it, for the hop that
    /// holds it: "its upstream X, which ...; X waits in turn on Y, which ...".
    pub(super) fn reading(&self) -> String {
        let limiting = self.limiting();
        let mut text = format!("{}, which {}", self.label(), self.clause());
        if !std::ptr::eq(limiting, self) {
            text.push_str(&format!(
                "; it waits in turn on {}, which {}",
                limiting.label(),
                limiting.clause()
            ));
        }
        text
    }

    /// The figures of this hop and of the one that holds the limit, as evidence.
    pub(super) fn evidence(&self, at: Option<usize>) -> Vec<Evidence> {
        let mut out = Vec::new();
        let limiting = self.limiting();
        for hop in [self, limiting] {
            if !out.is_empty() && std::ptr::eq(hop, self) {
                continue;
            }
            let h = &hop.hop;
            let who = hop.label();
            out.push(ev(
                Metric::NextHopConnections,
                h.connections_mean,
                at,
                format!("connections open to {who} (depth {}), mean", h.depth),
            ));
            out.push(ev(
                Metric::NextHopWaiting,
                h.waiting_mean(),
                at,
                format!("requests waiting inside {who}: its accept queue ({:.1}) and its connections with unread bytes ({:.1}), mean", h.accept_queue_mean, h.unread_connections_mean),
            ));
            if let Some(n) = h.in_service_mean {
                out.push(ev(
                    Metric::NextHopInService,
                    n,
                    at,
                    format!(
                        "threads of {who} serving a request (sampled), of {}",
                        h.threads
                    ),
                ));
            }
            if let Some(c) = h.cpu_pct {
                out.push(ev(
                    Metric::NextHopCpuPct,
                    c,
                    at,
                    format!(
                        "{who}'s CPU, % of one CPU (it may use {})",
                        h.cpus.map_or("unknown".into(), |n| format!("{n}"))
                    ),
                ));
            }
            if let Some(b) = h.cpus_busy_pct {
                out.push(ev(
                    Metric::NextHopCpusBusyPct,
                    b,
                    at,
                    format!("{who}'s CPUs busy, by every process on them, % of one CPU"),
                ));
            }
            if let Some(b) = h.busiest_thread_pct {
                out.push(ev(
                    Metric::NextHopBusiestThreadPct,
                    b,
                    at,
                    format!("{who}'s busiest thread, % of one CPU"),
                ));
            }
        }
        out
    }
}

/// The hop's CPU, % of one CPU: its tree's, or its busiest thread's when that read more.
fn tree_cpu_pct(h: &NextHop) -> Option<f64> {
    match (h.cpu_pct, h.busiest_thread_pct) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// " (other processes took 10% of one CPU of them)" when others' share of the hop's CPUs was
/// 5% of one CPU or more; else nothing.
fn others_text(h: &NextHop) -> String {
    let others = h.cpus_busy_pct.unwrap_or(0.0) - tree_cpu_pct(h).unwrap_or(0.0);
    if others >= 5.0 {
        format!(" (other processes took {others:.0}% of one CPU of them)")
    } else {
        String::new()
    }
}

/// "29.8 wait in its accept queue and 1.0 unread in its connections".
fn waiting_text(h: &NextHop) -> String {
    let mut t = format!("{:.1} wait in its accept queue", h.accept_queue_mean);
    if h.unread_connections_mean >= 0.05 {
        t.push_str(&format!(
            " and {:.1} unread in its connections",
            h.unread_connections_mean
        ));
    }
    t
}

/// "2.0 requests at once (of its 3 threads)".
fn at_once_text(h: &NextHop) -> String {
    match h.in_service_mean {
        Some(n) => format!("{n:.1} requests at once (of its {} threads)", h.threads),
        None => "an unknown number at once".into(),
    }
}

/// The hop the requests at level `l` go to, outside the server's tree.
pub(super) fn outside_hop(l: &Level) -> Option<&HopLevel> {
    l.io.hop.as_ref().filter(|h| !h.hop.in_tree)
}

/// The hop inside the server's tree whose queue holds at least half of the requests waiting
/// in the tree (`waiting`): the process of the tree that holds the concurrency limit.
pub(super) fn queue_in_tree(l: &Level, waiting: f64) -> Option<&HopLevel> {
    l.io.hop
        .as_ref()
        .filter(|h| h.hop.in_tree && h.hop.pid.is_some() && h.hop.waiting_mean() >= 0.5 * waiting)
}

#[cfg(test)]
mod tests;
