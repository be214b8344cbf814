//! environment.json: the conditions a run was measured under, with warnings for a machine
//! unfit to benchmark.

use serde_json::{json, Value};

/// Reads the host's conditions.
pub fn environment() -> Value {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let cpu_model = read("/proc/cpuinfo").and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    let governor = read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor");
    let swap_used_kb = read("/proc/meminfo").and_then(|t| {
        let field = |name: &str| {
            t.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        };
        Some(field("SwapTotal:")?.saturating_sub(field("SwapFree:")?))
    });
    let mut warnings = Vec::new();
    if governor.as_deref().is_some_and(|g| g == "powersave") {
        warnings.push("CPU frequency governor is powersave: figures will drift".to_string());
    }
    if swap_used_kb.is_some_and(|kb| kb > 0) {
        warnings.push(format!("{} kB of swap in use", swap_used_kb.unwrap_or(0)));
    }
    if let Some(load) =
        read("/proc/loadavg").and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
    {
        let cpus = crate::cpuset::allowed().len() as f64;
        if load > cpus * 0.5 {
            warnings.push(format!(
                "load average {load:.2} on {cpus} CPUs before the run: another busy process?"
            ));
        }
    }
    json!({
        "hostname": read("/proc/sys/kernel/hostname"),
        "kernel": read("/proc/sys/kernel/osrelease").map(|r| format!("Linux {r}")),
        "cpu_model": cpu_model,
        "cpus": crate::cpuset::format(&crate::cpuset::allowed()),
        "governor": governor,
        "swap_used_kb": swap_used_kb,
        "stairbench_version": env!("CARGO_PKG_VERSION"),
        "git_revision": git_revision(),
        "warnings": warnings,
    })
}

fn git_revision() -> Option<String> {
    let out = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short",
            "HEAD",
        ])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
