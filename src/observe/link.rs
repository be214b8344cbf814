//! The link carrying the server's traffic (the `network` limit's evidence): in the server's
//! own network namespace, every interface's bytes (/proc/PID/net/dev) and TCP's sent and
//! retransmitted segments (/proc/PID/net/snmp) at both ends of the window, and the root
//! qdiscs' counters from `tc -s -j qdisc show` (run through `nsenter -t PID -n` when the
//! server is in another namespace than stairbench). The interface that carried the most
//! bytes is the one recorded, its utilisation taken against its qdisc's rate (a `tbf`
//! shaping it) or else its own speed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::machine::procfs::{self, NetCounters};
use crate::record::use_io::LinkUse;

/// One root qdisc's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Qdisc {
    /// Its kind (`tbf`, `noqueue`, ...).
    pub kind: String,
    /// Its rate in bytes per second, where it has one.
    pub rate_bytes_per_s: Option<f64>,
    /// Packets dropped.
    pub drops: u64,
    /// Packets held back over the rate.
    pub overlimits: u64,
    /// Bytes queued now.
    pub backlog: u64,
}

/// The namespace's counters at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkSample {
    /// Every interface's counters, by name.
    pub dev: BTreeMap<String, NetCounters>,
    /// TCP (OutSegs, RetransSegs).
    pub tcp: Option<(u64, u64)>,
    /// Root qdiscs by interface (None when tc could not be run).
    pub qdiscs: Option<BTreeMap<String, Qdisc>>,
    /// Why the qdiscs are missing.
    pub note: Option<String>,
    /// The namespace is stairbench's own (its interfaces' speeds can be read in /sys).
    pub own_namespace: bool,
    /// CPU `tc` used, in seconds.
    pub cpu_s: f64,
}

/// Every interface's counters in /proc/net/dev.
pub fn parse_dev(text: &str) -> BTreeMap<String, NetCounters> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter_map(|(name, _)| {
            let name = name.trim();
            procfs::parse_net_dev(text, name).map(|c| (name.to_string(), c))
        })
        .collect()
}

/// TCP's (OutSegs, RetransSegs) in /proc/net/snmp.
pub fn parse_snmp_tcp(text: &str) -> Option<(u64, u64)> {
    let mut tcp = text.lines().filter(|l| l.starts_with("Tcp:"));
    let names: Vec<&str> = tcp.next()?.split_whitespace().collect();
    let values: Vec<&str> = tcp.next()?.split_whitespace().collect();
    let get = |n: &str| {
        let i = names.iter().position(|x| *x == n)?;
        values.get(i)?.parse::<u64>().ok()
    };
    Some((get("OutSegs")?, get("RetransSegs")?))
}

/// The root qdiscs in `tc -s -j qdisc show`'s output, by interface.
pub fn parse_tc(json: &str) -> Option<BTreeMap<String, Qdisc>> {
    let list: Vec<Value> = serde_json::from_str(json).ok()?;
    let num = |q: &Value, k: &str| q[k].as_u64().unwrap_or(0);
    Some(
        list.iter()
            .filter(|q| q["root"].as_bool() == Some(true))
            .filter_map(|q| {
                let dev = q["dev"].as_str()?.to_string();
                let qdisc = Qdisc {
                    kind: q["kind"].as_str().unwrap_or("").to_string(),
                    rate_bytes_per_s: q["options"]["rate"].as_f64().filter(|r| *r > 0.0),
                    drops: num(q, "drops"),
                    overlimits: num(q, "overlimits"),
                    backlog: num(q, "backlog"),
                };
                Some((dev, qdisc))
            })
            .collect(),
    )
}

/// True when process `pid` is in stairbench's own network namespace.
fn same_namespace(pid: i32) -> bool {
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/net")).ok();
    let theirs = ns(&pid.to_string());
    theirs.is_some() && theirs == ns("self")
}

/// Samples the network namespace of process `pid`; None when its /proc is gone.
pub fn sample(pid: i32) -> Option<LinkSample> {
    let net = Path::new("/proc").join(pid.to_string()).join("net");
    let dev = parse_dev(&std::fs::read_to_string(net.join("dev")).ok()?);
    let tcp = std::fs::read_to_string(net.join("snmp"))
        .ok()
        .and_then(|t| parse_snmp_tcp(&t));
    let own_namespace = same_namespace(pid);
    let mut cmd = if own_namespace {
        Command::new("tc")
    } else {
        let mut c = Command::new("nsenter");
        c.args(["-t", &pid.to_string(), "-n", "tc"]);
        c
    };
    cmd.args(["-s", "-j", "qdisc", "show"]);
    let (out, cpu_s) = run_timed(cmd);
    let (qdiscs, note) = match out {
        Ok((true, stdout, _)) => match parse_tc(&stdout) {
            Some(q) => (Some(q), None),
            None => (None, Some("link: tc's JSON could not be read".to_string())),
        },
        Ok((false, _, stderr)) => (
            None,
            Some(format!(
                "link: the qdiscs could not be read ({}): {}",
                if own_namespace {
                    "tc"
                } else {
                    "nsenter into the server's network namespace needs root"
                },
                stderr.trim()
            )),
        ),
        Err(e) => (
            None,
            Some(format!(
                "link: the qdiscs could not be read: tc (iproute2): {e}"
            )),
        ),
    };
    Some(LinkSample {
        dev,
        tcp,
        qdiscs,
        note,
        own_namespace,
        cpu_s,
    })
}

/// Runs `cmd` to its end: (succeeded, stdout, stderr) and the CPU it used, in seconds (reaped
/// with wait4 so the observers' cost includes it).
fn run_timed(mut cmd: Command) -> (std::io::Result<(bool, String, String)>, f64) {
    use std::io::Read;
    use std::process::Stdio;
    let mut child = match cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return (Err(e), 0.0),
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut o) = child.stdout.take() {
        let _ = o.read_to_string(&mut stdout);
    }
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    let mut status = 0;
    // SAFETY: rusage is plain data filled by the kernel.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child (its pipes are closed: it has ended or is ending).
    let r = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let ok = r > 0 && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (
        Ok((ok, stdout, stderr)),
        tv(usage.ru_utime) + tv(usage.ru_stime),
    )
}

/// The interface's own speed in bits per second (/sys/class/net/IF/speed, in Mbit/s; virtual
/// interfaces report none).
fn speed_bits_per_s(iface: &str) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{iface}/speed")).ok()?;
    let mbit: f64 = text.trim().parse().ok()?;
    (mbit > 0.0).then_some(mbit * 1e6)
}

/// The window's figures of the interface that carried the most bytes; None without traffic.
pub fn link_use(before: &LinkSample, after: &LinkSample, window_s: f64) -> Option<LinkUse> {
    let (iface, d) = after
        .dev
        .iter()
        .filter_map(|(name, a)| Some((name, procfs::net_delta(before.dev.get(name)?, a))))
        .max_by_key(|(_, d)| d.rx_bytes + d.tx_bytes)?;
    if d.rx_bytes + d.tx_bytes == 0 || window_s <= 0.0 {
        return None;
    }
    let q0 = before.qdiscs.as_ref().and_then(|q| q.get(iface));
    let q1 = after.qdiscs.as_ref().and_then(|q| q.get(iface));
    let speed = after
        .own_namespace
        .then(|| speed_bits_per_s(iface))
        .flatten();
    let rate = q1.and_then(|q| q.rate_bytes_per_s).map(|r| r * 8.0);
    let capacity = rate.or(speed);
    let tx = d.tx_bytes as f64 / window_s;
    let rx = d.rx_bytes as f64 / window_s;
    // An egress qdisc shapes what is sent; an interface's speed limits either direction.
    let busiest = if rate.is_some() { tx } else { tx.max(rx) };
    let (out0, re0) = before.tcp.unwrap_or_default();
    let (out1, re1) = after.tcp.unwrap_or_default();
    let diff = |a: Option<&Qdisc>, b: Option<&Qdisc>, f: fn(&Qdisc) -> u64| match (a, b) {
        (Some(a), Some(b)) => f(b).saturating_sub(f(a)),
        _ => 0,
    };
    Some(LinkUse {
        interface: iface.clone(),
        tx_bytes_per_s: tx,
        rx_bytes_per_s: rx,
        speed_bits_per_s: speed,
        qdisc: q1.map(|q| q.kind.clone()),
        qdisc_rate_bits_per_s: rate,
        capacity_bits_per_s: capacity,
        utilisation_pct: capacity.map(|c| 100.0 * busiest * 8.0 / c),
        qdisc_drops: diff(q0, q1, |q| q.drops),
        qdisc_overlimits: diff(q0, q1, |q| q.overlimits),
        qdisc_backlog_bytes: q1.map_or(0, |q| q.backlog),
        tcp_retrans_segs: re1.saturating_sub(re0),
        tcp_out_segs: out1.saturating_sub(out0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TC: &str = r#"[{"kind":"noqueue","handle":"0:","dev":"lo","root":true,"refcnt":2,"options":{},"bytes":0,"packets":0,"drops":0,"overlimits":0,"requeues":0,"backlog":0,"qlen":0},
{"kind":"tbf","handle":"8001:","dev":"veth1","root":true,"refcnt":3,"options":{"rate":25000000,"burst":65525,"lat":50000},"bytes":10,"packets":1,"drops":7,"overlimits":900,"requeues":0,"backlog":3000,"qlen":2}]"#;

    fn sample_with(tx: u64, drops: u64, overlimits: u64) -> LinkSample {
        let mut tc = parse_tc(TC).unwrap();
        let q = tc.get_mut("veth1").unwrap();
        q.drops = drops;
        q.overlimits = overlimits;
        LinkSample {
            dev: BTreeMap::from([
                ("lo".to_string(), NetCounters::default()),
                (
                    "veth1".to_string(),
                    NetCounters {
                        tx_bytes: tx,
                        rx_bytes: tx / 50,
                        ..NetCounters::default()
                    },
                ),
            ]),
            tcp: Some((1000 + tx / 1000, 5 + drops)),
            qdiscs: Some(tc),
            note: None,
            own_namespace: false,
            cpu_s: 0.0,
        }
    }

    #[test]
    fn a_shaped_links_use_is_taken_against_its_qdiscs_rate() {
        let a = sample_with(0, 7, 900);
        let b = sample_with(48_000_000, 17, 1900);
        let l = link_use(&a, &b, 2.0).unwrap();
        assert_eq!(l.interface, "veth1");
        assert_eq!(l.qdisc.as_deref(), Some("tbf"));
        assert_eq!(l.qdisc_rate_bits_per_s, Some(200e6));
        // 24 MB/s sent against 25 MB/s.
        assert!((l.utilisation_pct.unwrap() - 96.0).abs() < 1e-9, "{l:?}");
        assert_eq!((l.qdisc_drops, l.qdisc_overlimits), (10, 1000));
        assert_eq!(l.tcp_retrans_segs, 10);
        assert_eq!(l.qdisc_backlog_bytes, 3000);
    }

    #[test]
    fn proc_net_files_parse() {
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop fifo colls carrier compressed\n    lo: 100 2 0 0 0 0 0 0 100 2 0 0 0 0 0 0\n  eth0: 5 1 0 0 0 0 0 0 7 1 0 0 0 0 0 0\n";
        let d = parse_dev(dev);
        assert_eq!(d.len(), 2);
        assert_eq!(d["eth0"].tx_bytes, 7);
        let snmp = "Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs\nTcp: 1 200 4000 12\n";
        assert_eq!(parse_snmp_tcp(snmp), Some((4000, 12)));
    }
}
