//! The limits outside the CPU, by the USE method (issue 33): `concurrency` (requests waiting
//! unread inside a server that holds a fixed number at once), `network` (the link carrying
//! the traffic near its capacity) and `disk` (the server waiting on its storage). Each rule
//! quotes the figures it read and ends with what to try next; [`ruled_out`] gives `outside`
//! and `undetermined` the figures that ruled each of these resources out.

use super::{ev, rps, us, Confidence, Ctx, Evidence, Found, Level, Limit, Metric, IDLE_PCT};
use crate::record::observed::Observation;
use crate::record::use_io::{DiskUse, LinkUse};

/// Requests waiting inside the server, on average, at least this share of the clients for a
/// concurrency limit.
pub const WAITING_SHARE: f64 = 0.25;
/// ... and at least this many.
pub const WAITING_MIN: f64 = 1.0;
/// A link (or a disk, or an I/O throttle) this busy (percent of its capacity) has no room left.
pub const IO_BUSY_PCT: f64 = 80.0;
/// The server tree's tasks waiting for block I/O, on average, for a disk limit. A quarter,
/// not a half: behind a log flushed by group commit one task at a time holds the I/O while the
/// others wait on a lock, not on the device (PostgreSQL's WAL: 0.33 here with 12 backends
/// waiting on the flush and the throttle 97% used).
pub const BLKIO_WAITING_MIN: f64 = 0.25;

/// What to try next, one line per limit (the end of each sentence).
pub(super) const NEXT_CONCURRENCY: &str = "more workers or threads";
pub(super) const NEXT_NETWORK: &str = "a faster link or smaller replies";
pub(super) const NEXT_DISK: &str =
    "faster storage, a higher I/O limit, or group commit (fewer syncs per request)";

/// One level's USE evidence, repetitions averaged.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct IoLevel {
    /// Requests waiting inside the server (unread connections + accept queue), mean.
    pub(super) waiting: Option<f64>,
    /// Of those, connections with unread bytes.
    pub(super) unread: Option<f64>,
    /// Of those, the accept queue.
    pub(super) accept: Option<f64>,
    pub(super) link: Option<LinkLevel>,
    pub(super) disk: Option<DiskLevel>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct LinkLevel {
    pub(super) interface: String,
    pub(super) qdisc: Option<String>,
    pub(super) capacity_bits_per_s: Option<f64>,
    pub(super) utilisation_pct: Option<f64>,
    pub(super) bits_per_s: f64,
    pub(super) drops: f64,
    pub(super) overlimits: f64,
    pub(super) retrans: f64,
    pub(super) bytes_per_req: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct DiskLevel {
    /// The busiest device: (name, util %, mean queue).
    pub(super) device: Option<(String, f64, f64)>,
    pub(super) blkio_waiting: Option<f64>,
    /// The most used throttle: (cgroup, dev, kind, limit per s, use %).
    pub(super) throttle: Option<(String, String, String, f64, f64)>,
}

fn mean(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The level's USE evidence from its repetitions' observations.
pub(super) fn io_level(observed: &[Observation], throughput_rps: f64) -> IoLevel {
    let sockets: Vec<_> = observed.iter().filter_map(|o| o.sockets.as_ref()).collect();
    let links: Vec<&LinkUse> = observed.iter().filter_map(|o| o.link.as_ref()).collect();
    let disks: Vec<&DiskUse> = observed.iter().filter_map(|o| o.disk.as_ref()).collect();
    IoLevel {
        waiting: mean(sockets.iter().map(|s| s.waiting_mean)),
        unread: mean(sockets.iter().map(|s| s.unread_connections_mean)),
        accept: mean(sockets.iter().map(|s| s.accept_queue_mean)),
        link: link_level(&links, throughput_rps),
        disk: disk_level(&disks),
    }
}

fn link_level(links: &[&LinkUse], throughput_rps: f64) -> Option<LinkLevel> {
    let first = links.first()?;
    let same: Vec<&&LinkUse> = links
        .iter()
        .filter(|l| l.interface == first.interface)
        .collect();
    let m = |f: fn(&LinkUse) -> f64| mean(same.iter().map(|l| f(l))).unwrap_or(0.0);
    let tx = m(|l| l.tx_bytes_per_s);
    let busiest = if first.qdisc_rate_bits_per_s.is_some() {
        tx
    } else {
        tx.max(m(|l| l.rx_bytes_per_s))
    };
    Some(LinkLevel {
        interface: first.interface.clone(),
        qdisc: first.qdisc.clone(),
        capacity_bits_per_s: first.capacity_bits_per_s,
        utilisation_pct: mean(same.iter().filter_map(|l| l.utilisation_pct)),
        bits_per_s: 8.0 * busiest,
        drops: m(|l| l.qdisc_drops as f64),
        overlimits: m(|l| l.qdisc_overlimits as f64),
        retrans: m(|l| l.tcp_retrans_segs as f64),
        bytes_per_req: (throughput_rps > 0.0).then(|| tx / throughput_rps),
    })
}

fn disk_level(disks: &[&DiskUse]) -> Option<DiskLevel> {
    let first = disks.first()?;
    let device = first
        .devices
        .iter()
        .map(|d| {
            let util = mean(disks.iter().flat_map(|u| {
                u.devices
                    .iter()
                    .filter(|x| x.dev == d.dev)
                    .map(|x| x.util_pct)
            }));
            let queue = mean(disks.iter().flat_map(|u| {
                u.devices
                    .iter()
                    .filter(|x| x.dev == d.dev)
                    .map(|x| x.queue_mean)
            }));
            (d.device.clone(), util.unwrap_or(0.0), queue.unwrap_or(0.0))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1));
    let throttle = first
        .throttles
        .iter()
        .map(|t| {
            let pct = mean(disks.iter().flat_map(|u| {
                u.throttles
                    .iter()
                    .filter(|x| x.cgroup == t.cgroup && x.dev == t.dev && x.kind == t.kind)
                    .map(|x| x.use_pct)
            }));
            (
                t.cgroup.clone(),
                t.dev.clone(),
                t.kind.clone(),
                t.limit_per_s,
                pct.unwrap_or(0.0),
            )
        })
        .max_by(|a, b| a.4.total_cmp(&b.4));
    Some(DiskLevel {
        device,
        blkio_waiting: mean(disks.iter().filter_map(|d| d.blkio_waiting_mean)),
        throttle,
    })
}

/// Neither the server's CPUs nor its busiest thread are busy at level `l`.
fn server_idle(l: &Level) -> bool {
    l.server_cpu_pct.is_some_and(|p| p < IDLE_PCT)
        && !l
            .busiest
            .as_ref()
            .is_some_and(|b| b.1 >= super::THREAD_BUSY_PCT)
}

/// The server holds a fixed number of requests at once: the rest wait unread in its sockets
/// while its CPUs idle.
pub(super) fn concurrency(c: &Ctx) -> Option<Found> {
    let top = c.top();
    if !c.flat_throughput() || !server_idle(top) {
        return None;
    }
    let waiting = top.io.waiting?;
    let clients = top.clients as f64;
    if waiting < WAITING_MIN || waiting < WAITING_SHARE * clients {
        return None;
    }
    let cpu = top.server_cpu_pct.unwrap_or(0.0);
    let mut evidence = vec![
        ev(
            Metric::WaitingRequests,
            waiting,
            Some(top.clients),
            "requests waiting inside the server: connections with unread bytes plus the accept queue (sampled)",
        ),
        ev(
            Metric::ServerCpuPct,
            cpu,
            Some(top.clients),
            "the server's own CPU, % of its cpuset",
        ),
    ];
    let parts = format!(
        "{:.1} in connections it had not read, {:.1} in its accept queue",
        top.io.unread.unwrap_or(0.0),
        top.io.accept.unwrap_or(0.0)
    );
    // Little's law at the lowest level: the time one request takes when none waits.
    let service = c.first().latency_us;
    let at_once = service.map(|r| top.throughput_rps * r / 1e6);
    let mut served = String::new();
    if let (Some(n), Some(r)) = (at_once, service) {
        evidence.push(ev(
            Metric::ServedAtOnce,
            n,
            Some(top.clients),
            format!(
                "X × service time (the mean latency at {} clients): requests the server holds at once",
                c.first().clients
            ),
        ));
        served = format!(
            " and it served about {n:.1} at once ({} × {} at {} client{})",
            rps(top.throughput_rps),
            us(r),
            c.first().clients,
            if c.first().clients == 1 { "" } else { "s" }
        );
    }
    // Two independent figures agree: what waited (sampled in the server) and what Little's
    // law leaves of the clients once the served ones are taken away.
    let agree = at_once.is_some_and(|n| (clients - n - waiting).abs() <= 0.3 * clients);
    Some(Found {
        limit: Limit::Concurrency,
        confidence: if agree && c.separate_client() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!(
            "its CPUs are {cpu:.0}% busy while on average {waiting:.1} of the {} requests waited unread inside it ({parts}){served}, throughput staying near {}: a concurrency limit (a fixed pool of workers or threads, or a connection cap)",
            top.clients,
            rps(top.throughput_rps)
        ),
        next: NEXT_CONCURRENCY.into(),
    })
}

/// The link at level `l` is near its capacity.
pub(super) fn link_busy(l: &Level) -> bool {
    l.io.link
        .as_ref()
        .and_then(|k| k.utilisation_pct)
        .is_some_and(|u| u >= IO_BUSY_PCT)
}

/// The link carrying the traffic is near its capacity.
pub(super) fn network(c: &Ctx) -> Option<Found> {
    let top = c.top();
    if !link_busy(top) {
        return None;
    }
    let l = top.io.link.as_ref()?;
    let util = l.utilisation_pct?;
    l.capacity_bits_per_s?;
    let mut evidence = vec![
        ev(
            Metric::LinkUtilisationPct,
            util,
            Some(top.clients),
            format!(
                "{}: bits per second against its capacity ({})",
                l.interface,
                capacity_text(l)
            ),
        ),
        ev(
            Metric::LinkBitsPerS,
            l.bits_per_s,
            Some(top.clients),
            format!("{}: the busier direction", l.interface),
        ),
    ];
    let mut because = format!(
        "the link {} ({}) carried {}, {util:.0}% of it",
        l.interface,
        capacity_text(l),
        bits(l.bits_per_s)
    );
    if let Some(b) = l.bytes_per_req {
        evidence.push(ev(
            Metric::BytesPerReq,
            b,
            Some(top.clients),
            "bytes the server sent per request",
        ));
        because.push_str(&format!(
            ", {:.1} KiB per request at {}",
            b / 1024.0,
            rps(top.throughput_rps)
        ));
    }
    for (metric, v, note) in [
        (
            Metric::QdiscOverlimits,
            l.overlimits,
            "packets the qdisc held back over its rate",
        ),
        (Metric::QdiscDrops, l.drops, "packets the qdisc dropped"),
        (
            Metric::TcpRetransSegs,
            l.retrans,
            "TCP segments retransmitted",
        ),
    ] {
        evidence.push(ev(
            metric,
            v,
            Some(top.clients),
            format!("{note}, over the window"),
        ));
    }
    because.push_str(&format!(
        ", with {:.0} overlimits, {:.0} drops and {:.0} TCP retransmits over the window",
        l.overlimits, l.drops, l.retrans
    ));
    let saturated = l.overlimits + l.drops > 0.0;
    Some(Found {
        limit: Limit::Network,
        confidence: if util >= 90.0 && saturated && (c.flat_throughput() || c.from == 0) {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!("{because}: a network limit"),
        next: NEXT_NETWORK.into(),
    })
}

fn capacity_text(l: &LinkLevel) -> String {
    match (&l.qdisc, l.capacity_bits_per_s) {
        (Some(q), Some(c)) if q != "noqueue" => format!("{q} at {}", bits(c)),
        (_, Some(c)) => format!("speed {}", bits(c)),
        _ => "no known capacity".into(),
    }
}

/// `200 Mbit/s`.
fn bits(b: f64) -> String {
    if b >= 1e9 {
        format!("{:.2} Gbit/s", b / 1e9)
    } else {
        format!("{:.1} Mbit/s", b / 1e6)
    }
}

/// The disk or I/O throttle at level `l` is near its capacity, or its tasks wait on it.
fn disk_evidence(l: &Level) -> Option<(&DiskLevel, bool, bool)> {
    let d = l.io.disk.as_ref()?;
    let throttled = d.throttle.as_ref().is_some_and(|t| t.4 >= IO_BUSY_PCT);
    let device = d.device.as_ref().is_some_and(|t| t.1 >= IO_BUSY_PCT);
    Some((d, throttled, device))
}

/// The server waits on its storage.
pub(super) fn disk(c: &Ctx) -> Option<Found> {
    let top = c.top();
    if !c.flat_throughput() || !server_idle(top) {
        return None;
    }
    let (d, throttled, device) = disk_evidence(top)?;
    let waiting = d.blkio_waiting;
    if !(throttled || device) || waiting.is_some_and(|w| w < BLKIO_WAITING_MIN) {
        return None;
    }
    let at = Some(top.clients);
    let mut evidence = Vec::new();
    let mut parts = Vec::new();
    if let Some(w) = waiting {
        evidence.push(ev(
            Metric::BlkioWaiting,
            w,
            at,
            "the server tree's tasks waiting for block I/O, mean (delay accounting)",
        ));
        parts.push(format!(
            "on average {w:.1} of its tasks waited for block I/O"
        ));
    }
    if let Some((group, dev, kind, limit, pct)) = &d.throttle {
        evidence.push(ev(
            Metric::IoThrottleUsePct,
            *pct,
            at,
            format!("cgroup {group}: {kind} on {dev}, limit {limit:.0}/s"),
        ));
        parts.push(format!(
            "its cgroup's {kind} throttle on {dev} ({}/s) was {pct:.0}% used",
            per_s(kind, *limit)
        ));
    }
    if let Some((name, util, queue)) = &d.device {
        evidence.push(ev(
            Metric::DiskUtilPct,
            *util,
            at,
            format!("{name}: share of the window with I/O in flight"),
        ));
        parts.push(format!("{name} was {util:.0}% busy (queue {queue:.1})"));
    }
    Some(Found {
        limit: Limit::Disk,
        confidence: if waiting.is_some() && c.separate_client() {
            Confidence::High
        } else {
            Confidence::Medium
        },
        evidence,
        because: format!(
            "{} while its CPUs are {:.0}% busy and throughput stays near {}: a disk limit",
            parts.join(", "),
            top.server_cpu_pct.unwrap_or(0.0),
            rps(top.throughput_rps)
        ),
        next: NEXT_DISK.into(),
    })
}

fn per_s(kind: &str, v: f64) -> String {
    if kind.ends_with("bps") {
        format!("{:.2} MB", v / 1e6)
    } else {
        format!("{v:.0} operations")
    }
}

/// For `outside` and `undetermined`: the figures that ruled out each of these resources at
/// the last level (or that they were not observed).
pub(super) fn ruled_out(c: &Ctx) -> Vec<Evidence> {
    let top = c.top();
    let at = Some(top.clients);
    let missing = |metric: Metric, why: &str| ev(metric, f64::NAN, at, why);
    let mut out = Vec::new();
    out.push(match top.io.waiting {
        Some(w) => ev(
            Metric::WaitingRequests,
            w,
            at,
            format!(
                "concurrency: {w:.1} requests waited unread in the server's sockets on average (a limit needs {WAITING_MIN:.0} and {:.0}% of the clients)",
                100.0 * WAITING_SHARE
            ),
        ),
        None => missing(Metric::WaitingRequests, "concurrency: the server's sockets were not sampled"),
    });
    out.push(match &top.io.link {
        Some(l) => match l.utilisation_pct {
            Some(u) => ev(
                Metric::LinkUtilisationPct,
                u,
                at,
                format!(
                    "network: {} carried {} against {} (a limit needs {IO_BUSY_PCT:.0}%)",
                    l.interface,
                    bits(l.bits_per_s),
                    capacity_text(l)
                ),
            ),
            None => ev(
                Metric::LinkBitsPerS,
                l.bits_per_s,
                at,
                format!(
                    "network: {} carried {} and has no known capacity (no speed, no shaping qdisc)",
                    l.interface,
                    bits(l.bits_per_s)
                ),
            ),
        },
        None => missing(
            Metric::LinkUtilisationPct,
            "network: the server's link was not observed",
        ),
    });
    match &top.io.disk {
        Some(d) => {
            let util = d.device.as_ref().map_or(0.0, |x| x.1);
            let name = d
                .device
                .as_ref()
                .map_or("no device".into(), |x| x.0.clone());
            out.push(ev(
                Metric::DiskUtilPct,
                util,
                at,
                format!(
                    "disk: {name} was {util:.0}% busy{}; the tree's tasks waited for block I/O {} (a limit needs {IO_BUSY_PCT:.0}% busy or throttled, and {BLKIO_WAITING_MIN} tasks waiting)",
                    d.throttle.as_ref().map_or(String::new(), |t| format!(
                        ", its cgroup's {} throttle {:.0}% used",
                        t.2, t.4
                    )),
                    d.blkio_waiting.map_or("(not counted: kernel.task_delayacct = 0)".into(), |w| format!("{w:.2} on average"))
                ),
            ));
        }
        None => out.push(missing(
            Metric::DiskUtilPct,
            "disk: the server's storage was not observed",
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::use_io::{DeviceUse, IoThrottle, SocketQueues};

    fn obs(waiting: f64, util: Option<f64>, throttle_pct: f64) -> Observation {
        Observation {
            sockets: Some(SocketQueues {
                waiting_mean: waiting,
                unread_connections_mean: waiting,
                ..SocketQueues::default()
            }),
            link: Some(LinkUse {
                interface: "veth".into(),
                tx_bytes_per_s: 24e6,
                qdisc: Some("tbf".into()),
                qdisc_rate_bits_per_s: Some(200e6),
                capacity_bits_per_s: Some(200e6),
                utilisation_pct: util,
                qdisc_overlimits: 10,
                ..LinkUse::default()
            }),
            disk: Some(DiskUse {
                devices: vec![DeviceUse {
                    device: "vda".into(),
                    dev: "254:0".into(),
                    util_pct: 10.0,
                    ..DeviceUse::default()
                }],
                blkio_delay_s: Some(2.0),
                blkio_waiting_mean: Some(1.0),
                throttles: vec![IoThrottle {
                    cgroup: "/pg".into(),
                    dev: "254:0".into(),
                    kind: "write_bps".into(),
                    limit_per_s: 1e6,
                    used_per_s: throttle_pct * 1e4,
                    use_pct: throttle_pct,
                }],
            }),
            ..Observation::default()
        }
    }

    #[test]
    fn a_levels_use_evidence_is_averaged_over_its_repetitions() {
        let l = io_level(
            &[obs(10.0, Some(90.0), 95.0), obs(12.0, Some(100.0), 85.0)],
            375.0,
        );
        assert_eq!(l.waiting, Some(11.0));
        let link = l.link.unwrap();
        assert_eq!(link.utilisation_pct, Some(95.0));
        assert_eq!(link.bytes_per_req, Some(64_000.0));
        assert_eq!(link.bits_per_s, 192e6);
        let disk = l.disk.unwrap();
        assert_eq!(disk.throttle.unwrap().4, 90.0);
        assert_eq!(disk.blkio_waiting, Some(1.0));
    }
}
