//! Issue 33's demonstrations of the limits outside the CPU, each on real software and
//! confirmed by a tool other than stairbench: a worker pool (gunicorn, `ss`), a shaped link
//! (nginx behind tbf, the qdisc's own counters) and a throttled disk (PostgreSQL, its own
//! pg_stat_activity). The link and the disk need root (namespaces, cgroups).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::Value;

use crate::common;
use crate::diagnosis::{at, postgresql_installed, row, run_example};
use stairbench::analyze::run::diagnosis::resources::{Resource, State};
use stairbench::analyze::run::diagnosis::{Diagnosis, Limit, Metric};

/// The value of the last evidence entry of `metric` (NaN when it was quoted unmeasured, which
/// the checks' comparisons then fail); fails when the diagnosis does not quote it.
pub(crate) fn quoted(d: &Diagnosis, metric: Metric) -> f64 {
    d.figure(metric)
        .unwrap_or_else(|| panic!("no {metric} in {d:#?}"))
}

/// A shell command run every 100 ms on a thread while a demonstration runs; each output kept.
pub(crate) struct Poll {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Vec<String>>,
}

impl Poll {
    pub(crate) fn start(script: &'static str) -> Poll {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut out = Vec::new();
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(o) = std::process::Command::new("sh")
                    .args(["-c", script])
                    .output()
                {
                    out.push(String::from_utf8_lossy(&o.stdout).into_owned());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            out
        });
        Poll { stop, handle }
    }

    pub(crate) fn finish(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap()
    }
}

/// True when running as root; says why not otherwise (a failure in CI).
pub(crate) fn root(example: &str) -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let is_root = unsafe { libc::geteuid() } == 0;
    if !is_root {
        common::skip_or_fail(format!(
            "{example} needs root (network namespaces, tc, cgroups)"
        ));
    }
    is_root
}

/// gunicorn's sockets (its processes are `python3 -m gunicorn`), as `ss -Htanp` lists them.
const GUNICORN_SS: &str = "p=$(pgrep -d'|' -f 'm gunicorn') && ss -Htanp | grep -E \"pid=($p),\"";

/// Requests waiting in gunicorn's sockets in one sample of [`GUNICORN_SS`]: its established
/// connections with unread bytes (Recv-Q > 0) plus its listen socket's accept queue.
fn gunicorn_waiting(sample: &str) -> u64 {
    sample
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let recv: u64 = f.get(1)?.parse().ok()?;
            match *f.first()? {
                "LISTEN" => Some(recv),
                "ESTAB" => Some(u64::from(recv > 0)),
                _ => None,
            }
        })
        .sum()
}

/// True when Debian's python3 has gunicorn (python3-gunicorn); says why not otherwise.
pub(crate) fn gunicorn_installed() -> bool {
    let found = std::process::Command::new("/usr/bin/python3")
        // A name from the package, not the import alone: an emptied package directory (a
        // half-removed install) still imports, as a namespace package.
        .args(["-c", "from gunicorn.app.wsgiapp import WSGIApplication"])
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        common::skip_or_fail("no gunicorn for /usr/bin/python3 (apt-get install python3-gunicorn)");
    }
    found
}

#[test]
fn gunicorn_with_two_sync_workers_is_a_concurrency_limit() {
    let _alone = crate::alone();
    if !gunicorn_installed() {
        return;
    }
    let ss = Poll::start(GUNICORN_SS);
    let run = run_example("limits-workers", &["ss", "pgrep"]);
    let samples = ss.finish();
    let Some((d, _)) = run else {
        return;
    };
    let seen = samples
        .iter()
        .map(|s| gunicorn_waiting(s))
        .max()
        .unwrap_or(0);
    let waiting = quoted(&d, Metric::WaitingRequests);
    eprintln!(
        "limits-workers: {} ({}): {waiting:.1} requests waiting at 16 clients (stairbench), up to {seen} (ss, {} samples)",
        d.limit,
        d.confidence,
        samples.len()
    );
    assert_eq!(d.limit, Limit::Concurrency, "{d:#?}");
    // 2 workers hold 2 of the 16 requests: most of the rest wait inside the server.
    assert!(waiting >= 8.0, "{d:#?}");
    assert!(seen >= 8, "ss saw at most {seen} waiting: {d:#?}");
    let at_once = quoted(&d, Metric::ServedAtOnce);
    assert!((1.0..4.0).contains(&at_once), "{d:#?}");
}

/// (overlimits, drops, bytes sent) of the tbf qdisc in one `tc -s -j` sample.
fn qdisc_counters(sample: &str) -> Option<(u64, u64, u64)> {
    let list: Vec<Value> = serde_json::from_str(sample).ok()?;
    let q = list.iter().find(|q| q["kind"] == "tbf")?;
    Some((
        q["overlimits"].as_u64()?,
        q["drops"].as_u64()?,
        q["bytes"].as_u64()?,
    ))
}

#[test]
fn nginx_behind_a_shaped_link_is_a_network_limit() {
    let _alone = crate::alone();
    if !root("limits-link") {
        return;
    }
    let tc = Poll::start("ip netns exec sb-link tc -s -j qdisc show dev sb-link-n 2>/dev/null");
    let run = run_example("limits-link", &["nginx", "tc", "ip", "ss"]);
    let samples = tc.finish();
    let Some((d, _)) = run else {
        return;
    };
    // The counters grow from the qdisc's creation: the last sample holds the run's totals.
    let (overlimits, drops, bytes) = samples
        .iter()
        .filter_map(|s| qdisc_counters(s))
        .next_back()
        .expect("no tbf counters read during the run");
    let util = quoted(&d, Metric::LinkUtilisationPct);
    eprintln!(
        "limits-link: {} ({}): link {util:.0}% used at 16 clients (stairbench); the qdisc counted {overlimits} overlimits, {drops} drops, {:.0} MB sent",
        d.limit,
        d.confidence,
        bytes as f64 / 1e6
    );
    assert_eq!(d.limit, Limit::Network, "{d:#?}");
    assert!(util >= 80.0, "{d:#?}");
    assert!(overlimits > 0, "the qdisc never held a packet back");
    let per_req = quoted(&d, Metric::BytesPerReq);
    assert!((60_000.0..80_000.0).contains(&per_req), "{d:#?}");
}

#[test]
fn postgresql_on_a_throttled_disk_is_a_disk_limit() {
    let _alone = crate::alone();
    if !root("limits-disk") || !postgresql_installed() {
        return;
    }
    let Some((d, steps)) = run_example("limits-disk", &["pgbench", "psql"]) else {
        return;
    };
    let top = at(&steps, 16);
    let m = &top["target_metrics"]["pg"];
    let samples = m["samples"].as_f64().unwrap_or(0.0);
    assert!(samples >= 3.0, "too few pg_stat_activity samples: {top:#}");
    let wal = m["wal_waiting"].as_f64().unwrap() / samples;
    eprintln!(
        "limits-disk: {} ({}): {}; pg_stat_activity: {wal:.1} backends waiting on the WAL flush at 16 clients",
        d.limit, d.confidence, d.sentence
    );
    assert_eq!(d.limit, Limit::Disk, "{d:#?}");
    assert!(quoted(&d, Metric::IoThrottleUsePct) >= 80.0, "{d:#?}");
    // The server's own account: its backends wait for the WAL flush.
    assert!(wal >= 0.5, "{top:#}");
}

/// Write operations the cgroup `sb-fsync`'s throttle has let through (its own v1
/// blkio.throttle.io_serviced), 0 before the group exists.
fn fsync_group_writes() -> u64 {
    std::fs::read_to_string("/sys/fs/cgroup/blkio/sb-fsync/blkio.throttle.io_serviced")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[1] == "Write").then(|| f[2].parse::<u64>().ok())?
        })
        .sum()
}

/// Issue 40's first case: redis syncing every write behind 100 write IOPS, still scaling at
/// 256 clients (each sync carries more writes). Catches `undetermined` ("run more
/// repetitions") for a series whose own evidence shows its throttle full, and a diagnosis
/// that names the disk from a throttle the cgroup's own counters do not show full.
#[test]
fn redis_syncing_every_write_behind_an_iops_throttle_is_latency_bound_on_the_disk() {
    let _alone = crate::alone();
    if !root("limits-fsync") {
        return;
    }
    if !std::path::Path::new("/sys/fs/cgroup/blkio/blkio.throttle.write_iops_device").exists() {
        common::skip_or_fail("limits-fsync's check reads cgroup v1 blkio counters");
        return;
    }
    let (before, start) = (fsync_group_writes(), std::time::Instant::now());
    let Some((d, steps)) = run_example("limits-fsync", &["redis-server"]) else {
        return;
    };
    let writes_per_s = (fsync_group_writes() - before) as f64 / start.elapsed().as_secs_f64();
    let x = |c: u64| at(&steps, c)["throughput_rps"].as_f64().unwrap();
    eprintln!(
        "limits-fsync: {} ({}): {}; blkio.throttle.io_serviced: {writes_per_s:.0} writes/s over the run; {:.0} -> {:.0} req/s",
        d.limit, d.confidence, d.sentence, x(1), x(256)
    );
    assert_eq!(d.limit, Limit::Disk, "{d:#?}");
    assert_eq!(d.knee_clients, None, "{d:#?}");
    assert!(d.sentence.contains("latency-bound on the disk"), "{d:#?}");
    assert_eq!(
        row(&d, Resource::IoThrottle).state,
        State::Saturated,
        "{d:#?}"
    );
    // The cgroup's own counters: writes near the limit over the run (its start and the gaps
    // between steps write less), and each write carrying many requests at the top.
    assert!((40.0..=110.0).contains(&writes_per_s), "{writes_per_s}");
    assert!(x(256) >= 10.0 * x(1), "{} -> {}", x(1), x(256));
}
