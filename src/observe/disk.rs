//! The storage the server waits on (the `disk` limit's evidence), sampled at both ends of the
//! window: the block devices holding the tree's open files and working directories
//! (/proc/diskstats: utilisation, queue, throughput, await), the time the tree's tasks spent
//! waiting for block I/O (delay accounting: field 42 of /proc/PID/task/TID/stat, counted only
//! with kernel.task_delayacct = 1), and the I/O throttles of the tree's cgroups (v1
//! `blkio.throttle.*`, v2 `io.max`) with what the window used of each.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::machine::procfs;
use crate::record::use_io::{DeviceUse, DiskUse, IoThrottle};

/// One device's /proc/diskstats counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskStat {
    /// Reads completed.
    pub reads: u64,
    /// Sectors (512 bytes) read.
    pub read_sectors: u64,
    /// Milliseconds spent reading.
    pub read_ms: u64,
    /// Writes completed.
    pub writes: u64,
    /// Sectors written.
    pub write_sectors: u64,
    /// Milliseconds spent writing.
    pub write_ms: u64,
    /// Milliseconds with I/O in flight.
    pub io_ms: u64,
    /// Weighted milliseconds (in-flight requests × time).
    pub weighted_ms: u64,
}

/// /proc/diskstats by "major:minor", with each device's name.
pub fn parse_diskstats(text: &str) -> BTreeMap<String, (String, DiskStat)> {
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let n = |i: usize| f.get(i)?.parse::<u64>().ok();
            let stat = DiskStat {
                reads: n(3)?,
                read_sectors: n(5)?,
                read_ms: n(6)?,
                writes: n(7)?,
                write_sectors: n(9)?,
                write_ms: n(10)?,
                io_ms: n(12)?,
                weighted_ms: n(13)?,
            };
            Some((format!("{}:{}", f[0], f[1]), (f[2].to_string(), stat)))
        })
        .collect()
}

/// Whether a thread's block-I/O delay over a span (delay accounting, both in seconds) can be
/// one: at most the span and two clock ticks. Field 42 of a sleeping thread's stat once read
/// the machine's uptime in ticks (3,831,951 at 10 h 38 min up, 0 a second later, kernel 6.18):
/// clamped to the span, a server's metrics writer waiting on a timer read as 96% storage. Such
/// a thread's storage comes from its samples instead.
pub fn plausible_blkio(delay_s: f64, span_s: f64) -> bool {
    delay_s <= span_s + 0.02
}

use crate::machine::threads::parse_blkio_ticks;

/// One throttle limit read from a cgroup: (cgroup, dev, kind, limit per second).
type Limit = (String, String, String, f64);

/// The window-start or window-end state.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DiskSample {
    /// The devices the tree uses ("major:minor").
    pub devices: BTreeSet<String>,
    /// /proc/diskstats.
    pub diskstats: BTreeMap<String, (String, DiskStat)>,
    /// Each task's block-I/O delay in ticks, by (pid, tid); None without delay accounting.
    pub blkio_ticks: Option<BTreeMap<(i32, i32), u64>>,
    /// The throttle limits of the tree's cgroups and their ancestors.
    pub limits: Vec<Limit>,
    /// What each throttled cgroup has done, by (cgroup, dev, kind): bytes or operations.
    pub used: BTreeMap<(String, String, String), u64>,
}

/// The devices (`major:minor`) holding `pid`'s working directory and open regular files.
fn devices_of(pid: i32, into: &mut BTreeSet<String>) {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    let mut add = |p: &Path| {
        if let Ok(m) = std::fs::metadata(p) {
            let dev = m.dev();
            let (major, minor) = (nix::sys::stat::major(dev), nix::sys::stat::minor(dev));
            if major != 0 && (m.is_file() || m.is_dir()) {
                into.insert(format!("{major}:{minor}"));
            }
        }
    };
    add(&dir.join("cwd"));
    if let Ok(fds) = std::fs::read_dir(dir.join("fd")) {
        for fd in fds.flatten() {
            add(&fd.path());
        }
    }
}

/// The cgroup hierarchies: (v1 blkio mount, v2 mount) from /proc/self/mounts.
fn cgroup_mounts() -> (Option<PathBuf>, Option<PathBuf>) {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut v1 = None;
    let mut v2 = None;
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        match f.as_slice() {
            [_, at, "cgroup", opts, ..] if opts.split(',').any(|o| o == "blkio") => {
                v1 = Some(PathBuf::from(at))
            }
            [_, at, "cgroup2", ..] => v2 = Some(PathBuf::from(at)),
            _ => {}
        }
    }
    (v1, v2)
}

/// The cgroup paths of `pid`: (v1 blkio path, v2 path).
fn cgroups_of(pid: i32) -> (Option<String>, Option<String>) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let mut v1 = None;
    let mut v2 = None;
    for l in text.lines() {
        let mut f = l.splitn(3, ':');
        let (_, ctrl, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        if ctrl.split(',').any(|c| c == "blkio") {
            v1 = Some(path.to_string());
        } else if ctrl.is_empty() {
            v2 = Some(path.to_string());
        }
    }
    (v1, v2)
}

/// `path` and its ancestors below the hierarchy's root ("/a/b" → "/a/b", "/a").
fn with_ancestors(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = path.trim_end_matches('/').to_string();
    while !p.is_empty() {
        out.push(p.clone());
        p = p
            .rsplit_once('/')
            .map_or(String::new(), |(a, _)| a.to_string());
    }
    out
}

/// The limits of a v1 blkio group: `blkio.throttle.{read,write}_{bps,iops}_device`.
fn v1_limits(dir: &Path, cgroup: &str, out: &mut Vec<Limit>) {
    for kind in ["read_bps", "write_bps", "read_iops", "write_iops"] {
        let file = dir.join(format!("blkio.throttle.{kind}_device"));
        for l in std::fs::read_to_string(file).unwrap_or_default().lines() {
            if let Some((dev, v)) = l.split_once(' ') {
                if let Ok(v) = v.trim().parse::<f64>() {
                    out.push((cgroup.into(), dev.into(), kind.into(), v));
                }
            }
        }
    }
}

/// What a v1 blkio group did: bytes and operations by (dev, kind).
fn v1_used(dir: &Path) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for (file, unit) in [
        ("blkio.throttle.io_service_bytes_recursive", "bps"),
        ("blkio.throttle.io_serviced_recursive", "iops"),
    ] {
        for l in std::fs::read_to_string(dir.join(file))
            .unwrap_or_default()
            .lines()
        {
            let f: Vec<&str> = l.split_whitespace().collect();
            if let [dev, op @ ("Read" | "Write"), n] = f.as_slice() {
                let kind = format!("{}_{unit}", op.to_lowercase());
                out.insert(((*dev).into(), kind), n.parse().unwrap_or(0));
            }
        }
    }
    out
}

/// The limits of a v2 group (`io.max`: `MAJ:MIN rbps=N wbps=max riops=N wiops=max`).
pub fn parse_io_max(text: &str, cgroup: &str, out: &mut Vec<Limit>) {
    for (dev, kind, v) in v2_fields(text, ["rbps", "wbps", "riops", "wiops"]) {
        if let Ok(v) = v.parse::<f64>() {
            out.push((cgroup.into(), dev.into(), kind.into(), v));
        }
    }
}

/// What a v2 group did (`io.stat`: `MAJ:MIN rbytes=N wbytes=N rios=N wios=N ...`).
pub fn parse_io_stat(text: &str) -> BTreeMap<(String, String), u64> {
    v2_fields(text, ["rbytes", "wbytes", "rios", "wios"])
        .map(|(dev, kind, v)| ((dev.to_string(), kind.to_string()), v.parse().unwrap_or(0)))
        .collect()
}

/// The `MAJ:MIN key=value ...` lines of a v2 io file as (device, kind, value): `keys` name
/// its read-bytes, write-bytes, read-operations and write-operations fields, in that order
/// (the kinds `read_bps`, `write_bps`, `read_iops`, `write_iops`); other fields are skipped.
fn v2_fields<'a>(
    text: &'a str,
    keys: [&'a str; 4],
) -> impl Iterator<Item = (&'a str, &'static str, &'a str)> + 'a {
    const KINDS: [&str; 4] = ["read_bps", "write_bps", "read_iops", "write_iops"];
    text.lines().flat_map(move |l| {
        let mut f = l.split_whitespace();
        let dev = f.next().unwrap_or_default();
        f.filter_map(move |kv| {
            let (k, v) = kv.split_once('=')?;
            let i = keys.iter().position(|x| *x == k)?;
            Some((dev, KINDS[i], v))
        })
    })
}

/// Samples the tree `tree` (read at a window's end): its tasks' block-I/O delay is taken
/// from the tree's own stat reads.
pub fn sample(tree: &procfs::TreeSample) -> DiskSample {
    let mut s = DiskSample {
        diskstats: parse_diskstats(&std::fs::read_to_string("/proc/diskstats").unwrap_or_default()),
        ..DiskSample::default()
    };
    let accounting = std::fs::read_to_string("/proc/sys/kernel/task_delayacct")
        .map_or(true, |t| t.trim() != "0");
    let mut groups: BTreeSet<(bool, String)> = BTreeSet::new();
    for &pid in tree.processes.keys() {
        devices_of(pid, &mut s.devices);
        let (v1, v2) = cgroups_of(pid);
        groups.extend(v1.map(|p| (true, p)));
        groups.extend(v2.map(|p| (false, p)));
    }
    s.blkio_ticks = accounting.then(|| {
        tree.tasks
            .iter()
            .filter_map(|(task, t)| Some((*task, t.blkio_ticks?)))
            .collect()
    });
    throttles(&groups, &mut s);
    s
}

/// Each task's block-I/O delay of process `pid`.
pub fn blkio_of(pid: i32, into: &mut BTreeMap<(i32, i32), u64>) {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return;
    };
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(ticks) = std::fs::read_to_string(t.path().join("stat"))
            .ok()
            .and_then(|s| parse_blkio_ticks(&s))
        {
            into.insert((pid, tid), ticks);
        }
    }
}

/// The limits (and usage) of the tree's cgroups and their ancestors.
fn throttles(groups: &BTreeSet<(bool, String)>, s: &mut DiskSample) {
    let (v1_root, v2_root) = cgroup_mounts();
    let mut seen = BTreeSet::new();
    for (v1, path) in groups {
        let Some(root) = (if *v1 { &v1_root } else { &v2_root }) else {
            continue;
        };
        for group in with_ancestors(path) {
            if !seen.insert((*v1, group.clone())) {
                continue;
            }
            let dir = root.join(group.trim_start_matches('/'));
            let before = s.limits.len();
            if *v1 {
                v1_limits(&dir, &group, &mut s.limits);
            } else {
                let text = std::fs::read_to_string(dir.join("io.max")).unwrap_or_default();
                parse_io_max(&text, &group, &mut s.limits);
            }
            if s.limits.len() == before {
                continue;
            }
            let used = if *v1 {
                v1_used(&dir)
            } else {
                parse_io_stat(&std::fs::read_to_string(dir.join("io.stat")).unwrap_or_default())
            };
            for ((dev, kind), n) in used {
                s.used.insert((group.clone(), dev, kind), n);
            }
        }
    }
}

/// The window's figures between two samples; None when the tree uses no block device and
/// has no throttle.
pub fn disk_use(before: &DiskSample, after: &DiskSample, window_s: f64) -> Option<DiskUse> {
    if window_s <= 0.0 {
        return None;
    }
    let devices: Vec<DeviceUse> = before
        .devices
        .union(&after.devices)
        .filter_map(|dev| device_use(dev, before, after, window_s))
        .collect();
    let throttles: Vec<IoThrottle> = after
        .limits
        .iter()
        .map(|(cgroup, dev, kind, limit)| {
            let key = (cgroup.clone(), dev.clone(), kind.clone());
            let n0 = before.used.get(&key).copied().unwrap_or(0);
            let n1 = after.used.get(&key).copied().unwrap_or(0);
            let used = n1.saturating_sub(n0) as f64 / window_s;
            IoThrottle {
                cgroup: cgroup.clone(),
                dev: dev.clone(),
                kind: kind.clone(),
                limit_per_s: *limit,
                used_per_s: used,
                use_pct: if *limit > 0.0 {
                    100.0 * used / limit
                } else {
                    0.0
                },
            }
        })
        .collect();
    // Only tasks seen at both ends (or by the samples between): a task's total since its
    // birth is not the window's. No more than every task waiting all the time, or the figure
    // is not believable and is left out.
    let blkio_delay_s = match (&before.blkio_ticks, &after.blkio_ticks) {
        (Some(a), Some(b)) => Some(
            b.iter()
                .filter_map(|(k, t)| Some(t.saturating_sub(*a.get(k)?)))
                .sum::<u64>() as f64
                / procfs::ticks_per_s(),
        )
        .filter(|&d| d <= 1.05 * window_s * b.len() as f64),
        _ => None,
    };
    if devices.is_empty() && throttles.is_empty() {
        return None;
    }
    Some(DiskUse {
        devices,
        blkio_delay_s,
        blkio_waiting_mean: blkio_delay_s.map(|d| d / window_s),
        throttles,
    })
}

fn device_use(
    dev: &str,
    before: &DiskSample,
    after: &DiskSample,
    window_s: f64,
) -> Option<DeviceUse> {
    let (_, a) = before.diskstats.get(dev)?;
    let (name, b) = after.diskstats.get(dev)?;
    let d = |f: fn(&DiskStat) -> u64| f(b).saturating_sub(f(a)) as f64;
    let ios = d(|s| s.reads) + d(|s| s.writes);
    let window_ms = window_s * 1e3;
    Some(DeviceUse {
        device: name.clone(),
        dev: dev.to_string(),
        util_pct: (100.0 * d(|s| s.io_ms) / window_ms).min(100.0),
        queue_mean: d(|s| s.weighted_ms) / window_ms,
        reads_per_s: d(|s| s.reads) / window_s,
        writes_per_s: d(|s| s.writes) / window_s,
        read_bytes_per_s: 512.0 * d(|s| s.read_sectors) / window_s,
        write_bytes_per_s: 512.0 * d(|s| s.write_sectors) / window_s,
        await_ms: (ios > 0.0).then(|| (d(|s| s.read_ms) + d(|s| s.write_ms)) / ios),
    })
}

/// Why the block-I/O delay is missing, when it is.
pub fn delayacct_note() -> Option<String> {
    let on = std::fs::read_to_string("/proc/sys/kernel/task_delayacct").ok()?;
    (on.trim() == "0").then(|| {
        "disk: kernel.task_delayacct is 0, so the tree's block-I/O delay is not counted \
         (sysctl kernel.task_delayacct=1 turns it on)"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diskstats_and_a_tasks_blkio_delay_parse() {
        let text = " 254       0 vda 100 0 800 50 200 0 1600 400 0 900 450 0 0 0 0 10 5\n";
        let d = parse_diskstats(text);
        let (name, s) = &d["254:0"];
        assert_eq!(name, "vda");
        assert_eq!(
            (s.reads, s.writes, s.io_ms, s.weighted_ms),
            (100, 200, 900, 450)
        );
        let stat = "42 (post gres) S 1 42 42 0 -1 4194304 10 0 0 0 5 6 0 0 20 0 1 0 100 1000 10 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 77 0 0";
        assert_eq!(parse_blkio_ticks(stat), Some(77));
    }

    #[test]
    fn a_throttle_and_a_device_over_a_window() {
        let stat = |writes, io_ms| DiskStat {
            writes,
            write_sectors: writes * 8,
            write_ms: writes * 2,
            io_ms,
            weighted_ms: io_ms * 3,
            ..DiskStat::default()
        };
        let side = |writes, io_ms, wbytes, ticks| DiskSample {
            devices: BTreeSet::from(["254:0".to_string()]),
            diskstats: BTreeMap::from([("254:0".into(), ("vda".into(), stat(writes, io_ms)))]),
            blkio_ticks: Some(BTreeMap::from([((1, 1), ticks)])),
            limits: vec![("/pg".into(), "254:0".into(), "write_bps".into(), 1e6)],
            used: BTreeMap::from([(("/pg".into(), "254:0".into(), "write_bps".into()), wbytes)]),
        };
        let u = disk_use(&side(0, 0, 0, 0), &side(100, 1800, 1_900_000, 150), 2.0).unwrap();
        let dev = &u.devices[0];
        assert_eq!(dev.util_pct, 90.0);
        assert_eq!(dev.queue_mean, 2.7);
        assert_eq!(dev.await_ms, Some(2.0));
        assert_eq!(u.throttles[0].use_pct, 95.0);
        assert_eq!(u.blkio_delay_s, Some(150.0 / procfs::ticks_per_s()));
        let mut limits = Vec::new();
        parse_io_max(
            "8:0 rbps=max wbps=1048576 riops=max wiops=120\n",
            "/x",
            &mut limits,
        );
        assert_eq!(limits.len(), 2);
        assert_eq!(
            parse_io_stat("8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0\n")
                [&("8:0".to_string(), "write_iops".to_string())],
            4
        );
        assert_eq!(with_ancestors("/a/b"), vec!["/a/b", "/a"]);
    }
}
