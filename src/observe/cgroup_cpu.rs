//! The CPU quota, throttling and cpuset of the cgroups the server's processes are in, read at
//! both ends of the window (cgroup v1: `cpu.cfs_quota_us`, `cpu.cfs_period_us`, `cpu.stat`,
//! `cpuacct.usage`, `cpuset.effective_cpus`; v2: `cpu.max`, `cpu.stat`,
//! `cpuset.cpus.effective`). A quota set on an ancestor throttles its children too, so each
//! group's ancestors that set one are read as well.
//!
//! The hierarchies are found from a mount table (`/proc/self/mountinfo`), so a test can point
//! them at a mock tree in a temporary directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::record::use_cpu::{CgroupCpu, CpuGroup};

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq)]
pub struct Mount {
    /// Where it is mounted.
    pub point: PathBuf,
    /// The cgroup path mounted there (`/` unless a container mounted a subtree).
    pub root: String,
    /// 1 or 2.
    pub version: u8,
    /// A v1 hierarchy's controllers (`cpu`, `cpuacct`, ...); empty for v2.
    pub controllers: Vec<String>,
}

/// The cgroup hierarchies of a mountinfo text (`/proc/self/mountinfo`).
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let l: Vec<&str> = left.split_whitespace().collect();
            let r: Vec<&str> = right.split_whitespace().collect();
            let (root, point) = (l.get(3)?, l.get(4)?);
            let version = match *r.first()? {
                "cgroup" => 1,
                "cgroup2" => 2,
                _ => return None,
            };
            let controllers = if version == 1 {
                r.get(2)?
                    .split(',')
                    .filter(|o| !o.contains('=') && !matches!(*o, "rw" | "ro"))
                    .map(str::to_string)
                    .collect()
            } else {
                Vec::new()
            };
            Some(Mount {
                point: PathBuf::from(point),
                root: root.to_string(),
                version,
                controllers,
            })
        })
        .collect()
}

/// The directories of a process's cgroups that hold `controller` (`cpu`, `cpuacct`,
/// `cpuset`), from its /proc/PID/cgroup text: v1 lines name their controllers, the v2 line
/// (`0::/path`) serves every controller its hierarchy has files for.
pub fn group_dirs(cgroup_text: &str, mounts: &[Mount], controller: &str) -> Vec<(u8, PathBuf)> {
    let mut out = Vec::new();
    for line in cgroup_text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let mount = if ctrls.is_empty() {
            mounts.iter().find(|m| m.version == 2)
        } else {
            ctrls
                .split(',')
                .any(|c| c == controller)
                .then(|| {
                    mounts
                        .iter()
                        .find(|m| m.version == 1 && m.controllers.iter().any(|c| c == controller))
                })
                .flatten()
        };
        let Some(m) = mount else { continue };
        let rel = path.strip_prefix(m.root.as_str()).unwrap_or(path);
        let dir = m.point.join(rel.trim_start_matches('/'));
        out.push((m.version, dir));
    }
    out
}

/// One group's counters at one end of the window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupSample {
    /// Its path inside its hierarchy.
    pub path: String,
    /// 1 or 2.
    pub version: u8,
    /// Quota in CPUs; None when unlimited.
    pub quota_cpus: Option<f64>,
    /// Period, in microseconds.
    pub period_us: u64,
    /// `nr_periods`.
    pub periods: u64,
    /// `nr_throttled`.
    pub throttled: u64,
    /// Throttled time, in nanoseconds.
    pub throttled_ns: u64,
    /// The group's CPU, in nanoseconds.
    pub usage_ns: Option<u64>,
}

/// The counters of every CPU group of `pids` (and each ancestor that sets a quota), keyed by
/// directory; `proc_root` is /proc.
pub fn sample(proc_root: &Path, mounts: &[Mount], pids: &[i32]) -> BTreeMap<PathBuf, GroupSample> {
    let mut out = BTreeMap::new();
    for pid in pids {
        let Ok(text) = std::fs::read_to_string(proc_root.join(format!("{pid}/cgroup"))) else {
            continue;
        };
        for (version, dir) in group_dirs(&text, mounts, "cpu") {
            let Some(m) = mounts
                .iter()
                .find(|m| dir.starts_with(&m.point) && m.version == version)
            else {
                continue;
            };
            let acct = cpuacct_dir(&text, mounts, &dir, version);
            let mut d = dir.as_path();
            let mut leaf = true;
            loop {
                if !out.contains_key(d) {
                    if let Some(s) = read_group(d, m, acct.as_deref().filter(|_| leaf)) {
                        if leaf || s.quota_cpus.is_some() {
                            out.insert(d.to_path_buf(), s);
                        }
                    }
                }
                leaf = false;
                match d.parent() {
                    Some(p) if p.starts_with(&m.point) => d = p,
                    _ => break,
                }
            }
        }
    }
    out
}

/// Where a v1 group's CPU is accounted: the same directory when cpu and cpuacct share a
/// hierarchy, else the process's cpuacct group.
fn cpuacct_dir(cgroup_text: &str, mounts: &[Mount], dir: &Path, version: u8) -> Option<PathBuf> {
    if version == 2 || dir.join("cpuacct.usage").exists() {
        return Some(dir.to_path_buf());
    }
    group_dirs(cgroup_text, mounts, "cpuacct")
        .into_iter()
        .find(|(v, _)| *v == 1)
        .map(|(_, d)| d)
}

fn read_group(dir: &Path, m: &Mount, acct: Option<&Path>) -> Option<GroupSample> {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    let (quota_cpus, period_us) = if m.version == 1 {
        let quota: i64 = read("cpu.cfs_quota_us")?.trim().parse().ok()?;
        let period: u64 = read("cpu.cfs_period_us")?.trim().parse().ok()?;
        (quota_cpus(quota, period), period)
    } else {
        parse_cpu_max(&read("cpu.max")?)?
    };
    let stat = parse_cpu_stat(&read("cpu.stat").unwrap_or_default());
    let get = |k: &str| stat.get(k).copied();
    let usage_ns = if m.version == 1 {
        acct.and_then(|a| std::fs::read_to_string(a.join("cpuacct.usage")).ok())
            .and_then(|t| t.trim().parse().ok())
    } else {
        get("usage_usec").map(|u| u * 1000)
    };
    let throttled_ns = get("throttled_time").or_else(|| get("throttled_usec").map(|u| u * 1000));
    Some(GroupSample {
        path: group_path(m, dir),
        version: m.version,
        quota_cpus,
        period_us,
        periods: get("nr_periods").unwrap_or(0),
        throttled: get("nr_throttled").unwrap_or(0),
        throttled_ns: throttled_ns.unwrap_or(0),
        usage_ns,
    })
}

/// A group's path inside its hierarchy (`/` for the root).
fn group_path(m: &Mount, dir: &Path) -> String {
    let rel = dir.strip_prefix(&m.point).unwrap_or(dir);
    let path = format!("{}/{}", m.root.trim_end_matches('/'), rel.display());
    match path.trim_end_matches('/') {
        "" => "/".into(),
        p => p.into(),
    }
}

fn quota_cpus(quota_us: i64, period_us: u64) -> Option<f64> {
    (quota_us > 0 && period_us > 0).then(|| quota_us as f64 / period_us as f64)
}

/// v2's `cpu.max` (`20000 100000`, `max 100000`): the quota in CPUs and the period.
pub fn parse_cpu_max(text: &str) -> Option<(Option<f64>, u64)> {
    let mut f = text.split_whitespace();
    let quota = f.next()?;
    let period: u64 = f.next()?.parse().ok()?;
    let quota = match quota {
        "max" => None,
        q => quota_cpus(q.parse().ok()?, period),
    };
    Some((quota, period))
}

/// `cpu.stat`'s `key value` lines.
pub fn parse_cpu_stat(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// The groups' change over the window: the quota as it was at the end, the counters'
/// differences (a group present at one end only is left out).
pub fn delta(
    before: &BTreeMap<PathBuf, GroupSample>,
    after: &BTreeMap<PathBuf, GroupSample>,
) -> Vec<CpuGroup> {
    after
        .iter()
        .filter_map(|(dir, b)| {
            let a = before.get(dir)?;
            Some(CpuGroup {
                path: b.path.clone(),
                version: b.version,
                quota_cpus: b.quota_cpus,
                period_us: b.period_us,
                periods: b.periods.saturating_sub(a.periods),
                throttled_periods: b.throttled.saturating_sub(a.throttled),
                throttled_s: b.throttled_ns.saturating_sub(a.throttled_ns) as f64 / 1e9,
                usage_s: match (a.usage_ns, b.usage_ns) {
                    (Some(x), Some(y)) => Some(y.saturating_sub(x) as f64 / 1e9),
                    _ => None,
                },
            })
        })
        .collect()
}

/// The CPUs the cpuset cgroups of `pids` allow, intersected (None when no cpuset group was
/// readable).
pub fn allowed_cpus(proc_root: &Path, mounts: &[Mount], pids: &[i32]) -> Option<Vec<usize>> {
    let mut allowed: Option<Vec<usize>> = None;
    for pid in pids {
        let Ok(text) = std::fs::read_to_string(proc_root.join(format!("{pid}/cgroup"))) else {
            continue;
        };
        for (version, dir) in group_dirs(&text, mounts, "cpuset") {
            let file = if version == 1 {
                ["cpuset.effective_cpus", "cpuset.cpus"]
            } else {
                ["cpuset.cpus.effective", "cpuset.cpus.effective"]
            };
            let Some(cpus) = file
                .iter()
                .find_map(|f| std::fs::read_to_string(dir.join(f)).ok())
                .and_then(|t| crate::cpuset::parse(t.trim()).ok())
                .filter(|c| !c.is_empty())
            else {
                continue;
            };
            allowed = Some(match allowed {
                None => cpus,
                Some(a) => a.into_iter().filter(|c| cpus.contains(c)).collect(),
            });
        }
    }
    allowed
}

/// The CPU cgroups' figures from the two ends' samples, with the cpuset when it is narrower
/// than the placement's `server_cpus`. None when no group was readable at both ends.
pub fn observation(
    before: &BTreeMap<PathBuf, GroupSample>,
    after: &BTreeMap<PathBuf, GroupSample>,
    allowed: Option<&[usize]>,
    server_cpus: &[usize],
) -> Option<CgroupCpu> {
    let groups = delta(before, after);
    let narrower = allowed
        .map(|a| {
            server_cpus
                .iter()
                .copied()
                .filter(|c| a.contains(c))
                .collect::<Vec<_>>()
        })
        .filter(|within| !server_cpus.is_empty() && within.len() < server_cpus.len())
        .map(|within| crate::cpuset::format(&within));
    (!groups.is_empty() || narrower.is_some()).then_some(CgroupCpu {
        groups,
        narrower_cpuset: narrower,
    })
}

/// The mount table of this process's namespace (the server's too).
pub fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| parse_mountinfo(&t))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn mountinfo_names_each_hierarchy_and_its_controllers() {
        let m = parse_mountinfo(V1_MOUNTINFO);
        assert_eq!(m.len(), 5, "{m:?}");
        assert_eq!(m[0].controllers, vec!["cpu"]);
        assert_eq!(m[0].point, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert!(m[3].controllers.is_empty(), "{m:?}");
        assert_eq!(m[4].version, 2);
        let dirs = group_dirs("1:cpu:/box\n2:cpuacct:/box\n0::/\n", &m, "cpu");
        assert_eq!(
            dirs,
            vec![
                (1, PathBuf::from("/sys/fs/cgroup/cpu/box")),
                (2, PathBuf::from("/sys/fs/cgroup/unified"))
            ]
        );
    }

    #[test]
    fn cpu_max_reads_a_quota_or_none() {
        assert_eq!(parse_cpu_max("20000 100000\n"), Some((Some(0.2), 100000)));
        assert_eq!(parse_cpu_max("max 100000\n"), Some((None, 100000)));
        assert_eq!(parse_cpu_max("garbage"), None);
    }

    fn write(dir: &Path, file: &str, text: &str) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(file), text).unwrap();
    }

    /// A mock /proc with one process in `cgroup_text`, and a mount table whose hierarchies
    /// live under `root`.
    fn mock_proc(root: &Path, cgroup_text: &str) -> PathBuf {
        let proc_root = root.join("proc");
        write(&proc_root.join("7"), "cgroup", cgroup_text);
        proc_root
    }

    #[test]
    fn a_v2_quota_on_the_parent_and_its_throttling_are_read_on_a_mock_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let cg = tmp.path().join("cg");
        let mounts = vec![Mount {
            point: cg.clone(),
            root: "/".into(),
            version: 2,
            controllers: vec![],
        }];
        let proc_root = mock_proc(tmp.path(), "0::/box/leaf\n");
        write(&cg.join("box"), "cpu.max", "20000 100000\n");
        write(&cg.join("box/leaf"), "cpu.max", "max 100000\n");
        let stat = |p: u64, t: u64, us: u64| {
            format!("usage_usec {us}\nuser_usec 1\nsystem_usec 1\nnr_periods {p}\nnr_throttled {t}\nthrottled_usec {}\n", t * 80_000)
        };
        write(&cg.join("box"), "cpu.stat", &stat(100, 10, 5_000_000));
        write(&cg.join("box/leaf"), "cpu.stat", &stat(100, 0, 5_000_000));
        write(&cg.join("box/leaf"), "cpuset.cpus.effective", "0\n");
        let before = sample(&proc_root, &mounts, &[7]);
        assert_eq!(before.len(), 2, "{before:?}");
        write(&cg.join("box"), "cpu.stat", &stat(120, 29, 5_400_000));
        write(&cg.join("box/leaf"), "cpu.stat", &stat(120, 0, 5_400_000));
        let after = sample(&proc_root, &mounts, &[7]);
        let allowed = allowed_cpus(&proc_root, &mounts, &[7]);
        let obs = observation(&before, &after, allowed.as_deref(), &[0, 1]).unwrap();
        let tight = obs.tightest().unwrap();
        assert_eq!(tight.path, "/box");
        assert_eq!(tight.quota_cpus, Some(0.2));
        assert_eq!((tight.periods, tight.throttled_periods), (20, 19));
        assert!((tight.throttled_s - 19.0 * 0.08).abs() < 1e-9, "{tight:?}");
        assert_eq!(tight.usage_s, Some(0.4));
        assert_eq!(tight.throttled_pct(), Some(95.0));
        assert_eq!(obs.most_throttled().unwrap().path, "/box");
        let leaf = obs.groups.iter().find(|g| g.path == "/box/leaf").unwrap();
        assert_eq!(leaf.quota_cpus, None);
        assert_eq!(obs.narrower_cpuset.as_deref(), Some("0"));
    }

    #[test]
    fn a_v1_quota_with_cpuacct_in_its_own_hierarchy_is_read_on_a_mock_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let sys = tmp.path().join("sys");
        let text = V1_MOUNTINFO.replace("/sys/fs/cgroup", sys.to_str().unwrap());
        let mounts = parse_mountinfo(&text);
        let proc_root = mock_proc(tmp.path(), "3:cpuset:/\n2:cpuacct:/q\n1:cpu:/q\n0::/\n");
        let cpu = sys.join("cpu/q");
        write(&sys.join("cpu"), "cpu.cfs_quota_us", "-1\n");
        write(&sys.join("cpu"), "cpu.cfs_period_us", "100000\n");
        write(&cpu, "cpu.cfs_quota_us", "20000\n");
        write(&cpu, "cpu.cfs_period_us", "100000\n");
        write(
            &cpu,
            "cpu.stat",
            "nr_periods 5\nnr_throttled 5\nthrottled_time 400000000\n",
        );
        write(&sys.join("cpuacct/q"), "cpuacct.usage", "1000000000\n");
        write(&sys.join("cpuset"), "cpuset.effective_cpus", "0-1\n");
        let before = sample(&proc_root, &mounts, &[7]);
        write(
            &cpu,
            "cpu.stat",
            "nr_periods 15\nnr_throttled 14\nthrottled_time 1200000000\n",
        );
        write(&sys.join("cpuacct/q"), "cpuacct.usage", "1200000000\n");
        let after = sample(&proc_root, &mounts, &[7]);
        let allowed = allowed_cpus(&proc_root, &mounts, &[7]);
        let obs = observation(&before, &after, allowed.as_deref(), &[0]).unwrap();
        // The unlimited root is not a server group's ancestor with a quota: left out.
        assert_eq!(obs.groups.len(), 1, "{obs:?}");
        let g = &obs.groups[0];
        assert_eq!((g.path.as_str(), g.version), ("/q", 1));
        assert_eq!((g.periods, g.throttled_periods), (10, 9));
        assert!((g.throttled_s - 0.8).abs() < 1e-9);
        assert!((g.usage_s.unwrap() - 0.2).abs() < 1e-9);
        assert_eq!(obs.narrower_cpuset, None);
    }
}
