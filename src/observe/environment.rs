//! Gathers the conditions a run was measured under (environment.json, whose type is the
//! record's), and warnings for a machine unfit to benchmark: a power-saving governor, swap in
//! use, another busy process.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::machine::topology::Topology;
pub use crate::record::environment::{BusySample, Environment, PerfAvailability, TopologySummary};

/// CPUs busier than this (mean %, over a sample) are shared with other work: the run's
/// figures are noisier.
pub const BUSY_WARN_PCT: f64 = 30.0;

/// Reads the running machine's environment (runs `perf stat` twice and `git` once: ~0.1 s).
pub fn environment() -> Environment {
    environment_with(None)
}

/// The environment, its busy warning from `busy` (a sample of the run's own CPUs) where
/// there is one, from the 1-minute load average otherwise.
pub fn environment_with(busy: Option<BusySample>) -> Environment {
    let topology = Topology::detect().ok();
    let cpus = topology
        .as_ref()
        .map_or_else(|| crate::cpuset::allowed().len(), |t| t.cpus.len());
    let cpu_ids: Vec<usize> = topology
        .as_ref()
        .map_or_else(|| (0..cpus).collect(), |t| t.cpu_ids());
    let governors = read_governors(Path::new("/sys"), &cpu_ids);
    let (swap_total_kb, swap_free_kb) =
        read_file("/proc/meminfo").map_or((0, 0), |t| parse_swap(&t));
    let loadavg = read_file("/proc/loadavg")
        .and_then(|t| parse_loadavg(&t))
        .unwrap_or([0.0; 3]);
    let swap_used_kb = swap_total_kb.saturating_sub(swap_free_kb);
    let perf = perf_availability();
    let mut warnings = machine_warnings(&governors, swap_used_kb);
    warnings.extend(match &busy {
        Some(sample) => busy_warning(sample, loadavg[0]),
        None => load_warning(loadavg[0], cpus),
    });
    Environment {
        hostname: read_line("/proc/sys/kernel/hostname"),
        cpu_model: read_file("/proc/cpuinfo")
            .and_then(|t| parse_cpu_model(&t))
            .unwrap_or_else(|| "unavailable".into()),
        cpus,
        topology: topology.as_ref().map(summarize),
        kernel: read_line("/proc/sys/kernel/osrelease"),
        governors,
        turbo: read_turbo(Path::new("/sys")),
        swap_total_kb,
        swap_used_kb,
        perf: Some(perf),
        stairbench_version: env!("CARGO_PKG_VERSION").to_string(),
        git_revision: git_revision(),
        loadavg,
        busy_sample: busy,
        warnings,
        hosts: BTreeMap::new(),
    }
}

/// The warning of a busy sample over [`BUSY_WARN_PCT`], naming the 1-minute load average
/// beside it (which lags: a build that just ended keeps it high for a minute).
pub fn busy_warning(sample: &BusySample, load1: f64) -> Option<String> {
    (sample.busy_pct >= BUSY_WARN_PCT).then(|| {
        format!(
            "CPUs {} were {:.0}% busy over the {:.1} s before the first step (1-minute load average {load1:.2}): another busy process is competing for them",
            sample.cpus, sample.busy_pct, sample.window_s
        )
    })
}

fn summarize(t: &Topology) -> TopologySummary {
    TopologySummary {
        nodes: t.nodes().len(),
        packages: t.packages().len(),
        cores: t.cores().len(),
        threads_per_core: t.threads_per_core(),
        smt: t.smt(),
        summary: t.summary(),
    }
}

/// The warnings for a machine unfit to benchmark: a governor other than `performance` that
/// scales the clock down (powersave, ondemand, conservative, schedutil), swap in use, and a
/// load average above half the CPUs (another busy process).
pub fn warnings(
    governors: &BTreeMap<String, String>,
    swap_used_kb: u64,
    loadavg: [f64; 3],
    cpus: usize,
) -> Vec<String> {
    let mut out = machine_warnings(governors, swap_used_kb);
    out.extend(load_warning(loadavg[0], cpus));
    out
}

/// A 1-minute load average above half the CPUs (no sample of the run's own CPUs taken).
fn load_warning(load1: f64, cpus: usize) -> Option<String> {
    (cpus > 0 && load1 > 0.5 * cpus as f64).then(|| {
        format!(
            "load average {load1:.2} is above half of the {}: another busy process is competing for them",
            crate::units::count(cpus, "CPU")
        )
    })
}

/// A clock-scaling governor, swap in use.
fn machine_warnings(governors: &BTreeMap<String, String>, swap_used_kb: u64) -> Vec<String> {
    let mut out = Vec::new();
    let slow: Vec<&str> = governors
        .iter()
        .filter(|(_, g)| {
            matches!(
                g.as_str(),
                "powersave" | "ondemand" | "conservative" | "schedutil"
            )
        })
        .map(|(cpu, _)| cpu.as_str())
        .collect();
    if !slow.is_empty() {
        let g = &governors[slow[0]];
        out.push(format!(
            "CPU frequency governor {g:?} on CPU {} scales the clock with load, so figures drift: \
             set `performance` (cpupower frequency-set -g performance)",
            slow.join(",")
        ));
    }
    if swap_used_kb > 0 {
        out.push(format!(
            "{swap_used_kb} kB of swap in use: memory pressure can stall the server; free memory or swapoff"
        ));
    }
    out
}

/// Scaling governor per CPU from cpufreq, "unavailable" where there is none (VMs, containers).
pub fn read_governors(sysfs: &Path, cpus: &[usize]) -> BTreeMap<String, String> {
    cpus.iter()
        .map(|cpu| {
            let path = sysfs.join(format!(
                "devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
            ));
            let g = std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unavailable".into());
            (cpu.to_string(), g)
        })
        .collect()
}

/// Turbo state: intel_pstate's no_turbo (inverted) or cpufreq's boost; "unavailable" otherwise.
pub fn read_turbo(sysfs: &Path) -> String {
    let read = |p: &str| {
        std::fs::read_to_string(sysfs.join(p))
            .ok()
            .map(|s| s.trim().to_string())
    };
    if let Some(no_turbo) = read("devices/system/cpu/intel_pstate/no_turbo") {
        return if no_turbo == "1" { "off" } else { "on" }.into();
    }
    if let Some(boost) = read("devices/system/cpu/cpufreq/boost") {
        return if boost == "1" { "on" } else { "off" }.into();
    }
    "unavailable".into()
}

/// (SwapTotal, SwapFree) in kB from /proc/meminfo.
pub fn parse_swap(meminfo: &str) -> (u64, u64) {
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| {
                v.trim_start_matches(':')
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    (field("SwapTotal"), field("SwapFree"))
}

/// The three load averages of /proc/loadavg.
pub fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut f = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([f.next()??, f.next()??, f.next()??])
}

/// The first "model name" of /proc/cpuinfo (or "Model"/"cpu model" on other architectures).
pub fn parse_cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|l| {
        let (key, value) = l.split_once(':')?;
        matches!(key.trim(), "model name" | "Model" | "cpu model").then(|| value.trim().to_string())
    })
}

fn perf_availability() -> PerfAvailability {
    let software = super::perf::probe("task-clock");
    let hardware = super::perf::probe("instructions");
    let note = match (&software, &hardware) {
        (Ok(()), Ok(())) => None,
        (Ok(()), Err(why)) => Some(format!("hardware counters unavailable: {why}")),
        (Err(why), _) => Some(format!("perf cannot count here: {why}")),
    };
    PerfAvailability {
        software: software.is_ok(),
        hardware: hardware.is_ok(),
        note,
    }
}

/// `git rev-parse --short HEAD` in the source tree stairbench was built from.
fn git_revision() -> String {
    Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The trimmed content of a one-line file, or "unknown".
fn read_line(path: &str) -> String {
    read_file(path).map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

fn read_file(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_warning_follows_the_sample_not_the_load_average() {
        let sample = |busy_pct| BusySample {
            cpus: "0-1".into(),
            busy_pct,
            window_s: 0.5,
        };
        // A build that just ended: the load average is high, the CPUs are idle.
        assert_eq!(busy_warning(&sample(3.0), 2.23), None);
        let w = busy_warning(&sample(97.0), 0.4).unwrap();
        assert!(
            w.starts_with("CPUs 0-1 were 97% busy over the 0.5 s"),
            "{w}"
        );
        assert!(w.contains("1-minute load average 0.40"), "{w}");
        assert!(load_warning(2.23, 2).is_some());
    }

    #[test]
    fn unfit_machine_gets_each_warning() {
        let governors = BTreeMap::from([
            ("0".to_string(), "performance".to_string()),
            ("1".into(), "powersave".into()),
        ]);
        let w = warnings(&governors, 2048, [1.5, 1.0, 0.5], 2);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].contains("\"powersave\" on CPU 1"), "{}", w[0]);
        assert!(w[1].contains("2048 kB of swap in use"), "{}", w[1]);
        assert!(w[2].contains("another busy process"), "{}", w[2]);
    }

    #[test]
    fn fit_machine_gets_none() {
        let governors = BTreeMap::from([
            ("0".to_string(), "performance".to_string()),
            ("1".into(), "unavailable".into()),
        ]);
        assert!(warnings(&governors, 0, [0.9, 0.5, 0.2], 2).is_empty());
    }

    #[test]
    fn parses_meminfo_loadavg_cpuinfo() {
        let meminfo = "MemTotal:        8000000 kB\nSwapTotal:       2097148 kB\nSwapFree:        2000000 kB\n";
        assert_eq!(parse_swap(meminfo), (2097148, 2000000));
        assert_eq!(
            parse_loadavg("0.52 0.58 0.59 2/312 12345\n"),
            Some([0.52, 0.58, 0.59])
        );
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9354P 32-Core Processor\n";
        assert_eq!(
            parse_cpu_model(cpuinfo).as_deref(),
            Some("AMD EPYC 9354P 32-Core Processor")
        );
    }

    #[test]
    fn governors_and_turbo_from_a_sysfs_tree() {
        let dir = tempfile::tempdir().unwrap();
        let gov = dir.path().join("devices/system/cpu/cpu0/cpufreq");
        std::fs::create_dir_all(&gov).unwrap();
        std::fs::write(gov.join("scaling_governor"), "powersave\n").unwrap();
        let boost = dir.path().join("devices/system/cpu/cpufreq");
        std::fs::create_dir_all(&boost).unwrap();
        std::fs::write(boost.join("boost"), "1\n").unwrap();
        let g = read_governors(dir.path(), &[0, 1]);
        assert_eq!(g["0"], "powersave");
        assert_eq!(g["1"], "unavailable");
        assert_eq!(read_turbo(dir.path()), "on");
        assert_eq!(read_turbo(Path::new("/nonexistent")), "unavailable");
    }
}
