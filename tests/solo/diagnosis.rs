//! Issue 13's demonstrations: small versions of examples/limits-*.toml run on real software,
//! each checked for the limit its diagnosis names and one key figure of its evidence.

use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;

use crate::common;

/// One demonstration at a time: two at once on 2 CPUs would measure each other.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs examples/NAME.toml with 1 s steps (under `chrt -f 5` where possible); its first diagnosis, or None when a program it
/// needs is missing (skipped outside CI).
fn diagnose_example(name: &str, needs: &[&str]) -> Option<Value> {
    if let Some(missing) = needs.iter().find(|p| common::find_program(p).is_none()) {
        common::skip_or_fail(format!("{missing} is not installed"));
        return None;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let spec = std::fs::read_to_string(examples.join(format!("{name}.toml")))
        .unwrap()
        .replace("duration = \"2s\"", "duration = \"1s\"")
        .replace("{spec_dir}", examples.to_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("spec.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let out = dir.path().join("run");
    common::assert_success(&run_favoured(&spec_path, &out));
    let printed = common::cli(&["analyze".as_ref(), out.as_os_str(), "--json".as_ref()]);
    common::assert_success(&printed);
    let list: Value = serde_json::from_slice(&printed.stdout).unwrap();
    let d = list[0].clone();
    eprintln!("{name}: {}", d["sentence"]);
    Some(d)
}

/// `stairbench run SPEC --out OUT` under SCHED_FIFO priority 5 where `chrt` may set it
/// (other jobs then cannot delay its wake-ups and the figures are the software's, as the
/// demo's README figures are measured), else at normal priority.
fn run_favoured(spec: &Path, out: &Path) -> std::process::Output {
    let fifo_works = std::process::Command::new("chrt")
        .args(["-f", "5", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !fifo_works {
        return common::run_spec(spec, out);
    }
    std::process::Command::new("chrt")
        .args(["-f", "5"])
        .arg(common::stairbench_bin())
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The value of the last evidence entry named `metric`.
fn figure(d: &Value, metric: &str) -> f64 {
    d["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["metric"] == metric)
        .and_then(|e| e["value"].as_f64())
        .unwrap_or_else(|| panic!("no {metric} in {d:#}"))
}

#[test]
fn redis_main_thread_is_one_thread() {
    let Some(d) = diagnose_example("limits-redis", &["redis-server"]) else {
        return;
    };
    assert_eq!(d["limit"], "one_thread", "{d:#}");
    assert!(figure(&d, "busiest_thread_cpu_pct") >= 90.0, "{d:#}");
}

#[test]
fn pool_with_more_workers_than_cpus_is_oversubscribed() {
    let Some(d) = diagnose_example("limits-pool", &[]) else {
        return;
    };
    assert_eq!(d["limit"], "oversubscription", "{d:#}");
    assert!(figure(&d, "run_delay_pct") >= 100.0, "{d:#}");
}

#[test]
fn nginx_and_wrk_on_shared_cpus_fill_them() {
    let Some(d) = diagnose_example("limits-nginx", &["nginx", "wrk"]) else {
        return;
    };
    match d["limit"].as_str().unwrap() {
        "client" => assert_eq!(figure(&d, "client_saturated"), 1.0, "{d:#}"),
        "server_cpu" => assert!(figure(&d, "server_cpu_pct") >= 90.0, "{d:#}"),
        other => panic!("nginx + wrk: {other}: {d:#}"),
    }
}

#[test]
fn a_delaying_pipeline_is_outside_both_processes() {
    let Some(d) = diagnose_example("limits-outside", &["nginx", "python3"]) else {
        return;
    };
    assert_eq!(d["limit"], "outside", "{d:#}");
    let ratio = figure(&d, "little_ratio");
    assert!((0.8..1.2).contains(&ratio), "{d:#}");
    assert!(figure(&d, "server_cpu_pct") < 60.0, "{d:#}");
}
