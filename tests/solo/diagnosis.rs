//! Issue 13's demonstrations: small versions of examples/limits-*.toml run on real software,
//! each checked for the limit its diagnosis names and one key figure of its evidence.

use std::path::Path;
use std::sync::Mutex;

use serde_json::Value;
use stairbench::analyze::run::diagnosis::resources::{Resource, ResourceRow};
use stairbench::analyze::run::diagnosis::{Diagnosis, Limit, Metric};

use crate::common;

/// One demonstration at a time: two at once on 2 CPUs would measure each other.
pub(crate) static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs examples/NAME.toml with 1 s steps (under `chrt -f 5` where possible); its first diagnosis, or None when a program it
/// needs is missing (skipped outside CI).
pub(crate) fn diagnose_example(name: &str, needs: &[&str]) -> Option<Diagnosis> {
    run_example(name, needs).map(|(d, _)| d)
}

/// As [`diagnose_example`], with the run's steps (steps.jsonl) too.
pub(crate) fn run_example(name: &str, needs: &[&str]) -> Option<(Diagnosis, Vec<Value>)> {
    run_example_kept(name, needs).map(|(d, steps, _)| (d, steps))
}

/// As [`run_example`], keeping the run's directory (`DIR/run`) for the example's own files.
fn run_example_kept(
    name: &str,
    needs: &[&str],
) -> Option<(Diagnosis, Vec<Value>, tempfile::TempDir)> {
    run_example_edited(name, needs, &[])
}

/// [`run_example_kept`] with each (from, to) replaced in the spec's text first.
pub(crate) fn run_example_edited(
    name: &str,
    needs: &[&str],
    edits: &[(&str, &str)],
) -> Option<(Diagnosis, Vec<Value>, tempfile::TempDir)> {
    if let Some(missing) = needs.iter().find(|p| common::find_program(p).is_none()) {
        common::skip_or_fail(common::not_installed(missing));
        return None;
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let spec = std::fs::read_to_string(examples.join(format!("{name}.toml")))
        .unwrap()
        .replace("duration = \"2s\"", "duration = \"1s\"")
        .replace("{spec_dir}", examples.to_str().unwrap());
    let spec = edits.iter().fold(spec, |s, (from, to)| {
        assert!(s.contains(from), "{name}.toml has no {from:?}");
        s.replace(from, to)
    });
    let (list, steps, dir) = run_and_analyze(&spec);
    let d = list
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("{name}: no diagnosis"));
    eprintln!("{name}: {} ({})", d.sentence, d.confidence);
    Some((d, steps, dir))
}

/// Runs the spec `text` (favoured, see [`run_favoured`]) in a temp dir: its analysis (one
/// diagnosis per series), its steps, and the dir (`DIR/run` is the run).
pub(crate) fn run_and_analyze(text: &str) -> (Vec<Diagnosis>, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join("spec.toml");
    std::fs::write(&spec_path, text).unwrap();
    let out = dir.path().join("run");
    common::assert_success(&run_favoured(&spec_path, &out));
    (analyze_json(&out), common::steps_json(&out), dir)
}

/// `stairbench analyze RUN --json`: the run's diagnoses (one per series), read into their type.
pub(crate) fn analyze_json(run: &Path) -> Vec<Diagnosis> {
    let printed = common::cli(&["analyze".as_ref(), run.as_os_str(), "--json".as_ref()]);
    common::assert_success(&printed);
    serde_json::from_slice(&printed.stdout).unwrap_or_else(|e| {
        panic!(
            "analyze --json is not a list of diagnoses ({e}): {}",
            String::from_utf8_lossy(&printed.stdout)
        )
    })
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
        // As bench/limits.sh: a neighbour is a limit these cases read, not a step to leave out.
        .env("STAIRBENCH_KEEP_DISTURBED", "true")
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

/// The value of the last evidence entry of `metric`; fails when the diagnosis does not quote
/// it or quotes it unmeasured (NaN, null in JSON).
pub(crate) fn figure(d: &Diagnosis, metric: Metric) -> f64 {
    d.figure(metric)
        .filter(|v| !v.is_nan())
        .unwrap_or_else(|| panic!("no {metric} in {d:#?}"))
}

/// The diagnosis's resource-table row of `resource`; fails when it has none.
pub(crate) fn row(d: &Diagnosis, resource: Resource) -> &ResourceRow {
    d.resources
        .iter()
        .find(|r| r.resource == resource)
        .unwrap_or_else(|| panic!("no {resource:?} row: {d:#?}"))
}

#[test]
fn redis_main_thread_is_one_thread() {
    let _alone = crate::alone();
    let Some(d) = diagnose_example("limits-redis", &["redis-server"]) else {
        return;
    };
    assert_eq!(d.limit, Limit::OneThread, "{d:#?}");
    assert!(figure(&d, Metric::BusiestThreadCpuPct) >= 90.0, "{d:#?}");
}

#[test]
fn pool_with_more_workers_than_cpus_is_oversubscribed() {
    let _alone = crate::alone();
    let Some(d) = diagnose_example("limits-pool", &[]) else {
        return;
    };
    assert_eq!(d.limit, Limit::Oversubscription, "{d:#?}");
    assert!(figure(&d, Metric::RunDelayPct) >= 100.0, "{d:#?}");
}

#[test]
fn nginx_and_wrk_on_shared_cpus_fill_them() {
    let _alone = crate::alone();
    let Some(d) = diagnose_example("limits-nginx", &["nginx", "wrk"]) else {
        return;
    };
    // wrk shares nginx's CPUs, so the server's own CPU cannot reach 90% of them while wrk's
    // are full: the client rule, tried first, names wrk. Catches `server_cpu` (the server
    // blamed for CPUs its generator filled) or a neighbour.
    assert_eq!(d.limit, Limit::Client, "{d:#?}");
    assert_eq!(figure(&d, Metric::ClientSaturated), 1.0, "{d:#?}");
}

#[test]
fn a_delaying_pipeline_is_outside_both_processes() {
    let _alone = crate::alone();
    let Some(d) = diagnose_example("limits-outside", &["nginx", "python3"]) else {
        return;
    };
    assert_eq!(d.limit, Limit::Outside, "{d:#?}");
    let ratio = figure(&d, Metric::LittleRatio);
    assert!((0.8..1.2).contains(&ratio), "{d:#?}");
    assert!(figure(&d, Metric::ServerCpuPct) < 60.0, "{d:#?}");
}

/// True when Debian's PostgreSQL server is installed (its binaries are not on PATH); says why
/// not otherwise (a failure in CI).
pub(crate) fn postgresql_installed() -> bool {
    let found = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.flatten()
                .any(|d| d.path().join("bin/postgres").is_file())
        })
        .unwrap_or(false);
    if !found {
        common::skip_or_fail("no PostgreSQL server (apt-get install postgresql)");
    }
    found
}

/// Mean number of backends waiting for a lock over one step, from the server's own
/// pg_stat_activity as pg-hot-row.sh sampled it (the step's target metrics).
fn lock_waiters(step: &Value) -> f64 {
    let m = &step["target_metrics"]["pg"];
    let samples = m["samples"].as_f64().unwrap_or(0.0);
    assert!(samples >= 3.0, "too few pg_stat_activity samples: {step:#}");
    m["lock_waiting"].as_f64().unwrap() / samples
}

/// The step at `clients`.
pub(crate) fn at(steps: &[Value], clients: u64) -> &Value {
    steps
        .iter()
        .find(|s| s["clients"] == clients)
        .unwrap_or_else(|| panic!("no step at {clients} clients"))
}

/// Each step's clients, throughput, server CPU per request, voluntary switches per request
/// and mean lock waiters, for the test's output (the docs quote them).
fn print_steps(name: &str, steps: &[Value]) {
    for s in steps {
        eprintln!(
            "{name}: {} clients: {:.0} tx/s, {:.0} µs CPU/tx, {:.2} voluntary switches/tx, {:.2} lock waiters",
            s["clients"],
            s["throughput_rps"].as_f64().unwrap_or(f64::NAN),
            s["cpu_us_per_req"]["total"].as_f64().unwrap_or(f64::NAN),
            s["voluntary_cs_per_req"].as_f64().unwrap_or(f64::NAN),
            lock_waiters(s)
        );
    }
}

#[test]
fn postgresql_hot_row_behind_client_work_is_contention() {
    let _alone = crate::alone();
    if !postgresql_installed() {
        return;
    }
    // Up to 8 clients: at 16 the queue on the row grows until throughput falls 10-12% past
    // its peak (888 -> 782 tx/s here, 1433 -> 1265 in CI), between contention and coherency.
    // At 8 the queue has formed (3.3-3.75 waiters) and throughput is still flat.
    let Some((d, steps, _dir)) = run_example_edited(
        "limits-contention",
        &["pgbench", "psql"],
        &[("clients = [1, 2, 4, 8, 16]", "clients = [1, 2, 4, 8]")],
    ) else {
        return;
    };
    print_steps("contention", &steps);
    // One run, one limit. Catches coherency (a fall past the peak read as crosstalk),
    // undetermined or outside.
    assert_eq!(d.limit, Limit::Contention, "{d:#?}");
    // The blocking the rule read, and the server's own account of its cause: nobody waits
    // for the row at 1 client, a queue forms on it at 8.
    assert!(figure(&d, Metric::VoluntaryCsPerReq) > 0.0, "{d:#?}");
    assert!(lock_waiters(at(&steps, 1)) < 0.5, "{steps:#?}");
    assert!(lock_waiters(at(&steps, 8)) >= 2.0, "{steps:#?}");
}

#[test]
fn postgresql_hot_row_held_across_round_trips_is_coherency() {
    let _alone = crate::alone();
    if !postgresql_installed() {
        return;
    }
    let Some((d, steps)) = run_example("limits-coherency", &["pgbench", "psql"]) else {
        return;
    };
    print_steps("coherency", &steps);
    assert_eq!(d.limit, Limit::Coherency, "{d:#?}");
    // Throughput after the peak well below it (the rule's own figures), and the server's own
    // account of why: at 16 clients most backends are queued on the row.
    let throughput: Vec<f64> = d
        .evidence
        .iter()
        .filter(|e| e.metric == Metric::ThroughputRps)
        .map(|e| {
            assert!(!e.value.is_nan(), "throughput not measured: {d:#?}");
            e.value
        })
        .collect();
    assert!(throughput[1] < 0.9 * throughput[0], "{d:#?}");
    assert!(lock_waiters(at(&steps, 1)) < 0.5, "{steps:#?}");
    assert!(lock_waiters(at(&steps, 16)) >= 6.0, "{steps:#?}");
}

/// True when this process may make cgroups (root); says why not otherwise (a failure in CI).
fn root() -> bool {
    // Safety: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        common::skip_or_fail("making a CPU cgroup needs root");
    }
    root
}

/// `cpu.stat`'s counter `key`.
fn cpu_stat(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {text}"))
}

#[test]
fn nginx_in_a_cgroup_with_a_cpu_quota_is_quota() {
    let _alone = crate::alone();
    if !root() {
        return;
    }
    let Some((d, _, dir)) = run_example_kept("limits-quota", &["nginx", "wrk"]) else {
        return;
    };
    // The kernel's own count, from the cgroup's cpu.stat as nginx-quota.sh copied it.
    let read = |end: &str| {
        std::fs::read_to_string(dir.path().join(format!("run/quota-cpu.stat.{end}")))
            .unwrap_or_else(|e| panic!("quota-cpu.stat.{end}: {e}"))
    };
    let (a, b) = (read("start"), read("end"));
    let periods = cpu_stat(&b, "nr_periods ") - cpu_stat(&a, "nr_periods ");
    let throttled = cpu_stat(&b, "nr_throttled ") - cpu_stat(&a, "nr_throttled ");
    eprintln!(
        "limits-quota: the cgroup's cpu.stat: throttled in {throttled} of {periods} periods over the run"
    );
    assert_eq!(d.limit, Limit::Quota, "{d:#?}");
    assert_eq!(figure(&d, Metric::QuotaCpus), 0.2, "{d:#?}");
    assert!(figure(&d, Metric::ThrottledPeriodsPct) >= 20.0, "{d:#?}");
    assert!(
        throttled * 5 >= periods && periods > 0,
        "{throttled} of {periods}"
    );
}

#[test]
fn nginx_beside_a_pinned_cpu_hog_is_neighbour() {
    let _alone = crate::alone();
    let Some((d, _, dir)) = run_example_kept(
        "limits-neighbour",
        &["nginx", "wrk", "setsid", "taskset", "chrt"],
    ) else {
        return;
    };
    let hog_pct = hog_cpu_pct(dir.path(), "limits-neighbour");
    assert_eq!(d.limit, Limit::Neighbour, "{d:#?}");
    assert!(figure(&d, Metric::NeighboursPct) >= 10.0, "{d:#?}");
    assert!(d.sentence.contains("sh (pid"), "{d:#?}");
    assert!(hog_pct >= 20.0, "the hog took {hog_pct:.0}% of one CPU");
}

/// The hog's CPU over its life (its own and its reaped children's), % of one CPU, from its
/// /proc/PID/stat line and /proc/uptime as nginx-neighbour.sh copied them.
fn hog_cpu_pct(dir: &std::path::Path, case: &str) -> f64 {
    let (f, uptime) = hog_stat(dir);
    let num = |k: usize| f[k - 3].parse::<f64>().unwrap();
    let tps = 100.0;
    let own_s = (num(14) + num(15)) / tps;
    let children_s = (num(16) + num(17)) / tps;
    let life_s = uptime.trim().parse::<f64>().unwrap() - num(22) / tps;
    let pct = 100.0 * (own_s + children_s) / life_s;
    eprintln!("{case}: the hog's CPU from /proc: {own_s:.1} s its own and {children_s:.1} s its children's in {life_s:.1} s, {pct:.0}% of one CPU");
    pct
}

/// The hog's /proc/PID/stat fields from field 3 on (field k is at k - 3), and
/// /proc/uptime's line, as nginx-neighbour.sh copied them to hog.stat.
fn hog_stat(dir: &std::path::Path) -> (Vec<String>, String) {
    let text = std::fs::read_to_string(dir.join("run/hog.stat")).unwrap();
    let (stat, uptime) = text.split_once('\n').unwrap();
    let fields = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .map(String::from)
        .collect();
    (fields, uptime.to_string())
}

/// A hog made of processes that each live a millisecond (/bin/true over and over): no scan of
/// /proc sees them, but its shell's reaped-children counter does, and the neighbour named is
/// the shell with their CPU, beside what the kernel counted for it.
#[test]
fn a_hog_of_short_lived_processes_is_named_by_their_parent() {
    let _alone = crate::alone();
    let Some((d, steps, dir)) = run_example_edited(
        "limits-neighbour",
        &["nginx", "wrk", "setsid", "taskset", "chrt"],
        &[(
            "nginx-neighbour.sh {out} {port} 1",
            "nginx-neighbour.sh {out} {port} 1 0 forks",
        )],
    ) else {
        return;
    };
    let hog_pct = hog_cpu_pct(dir.path(), "limits-neighbour (forks)");
    let top = steps.last().unwrap();
    let named = top["server"]["neighbours"]["busiest"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "sh")
        .unwrap_or_else(|| panic!("no sh among {top:#}"));
    let named_pct = named["cpu_pct"].as_f64().unwrap();
    eprintln!("limits-neighbour (forks): the shell named with {named_pct:.0}% of one CPU");
    assert!(hog_pct >= 20.0, "the hog took {hog_pct:.0}% of one CPU");
    // Its children's CPU is the shell's: within half and twice of the kernel's figure
    // over the hog's life (the last step's window is part of it).
    assert!(
        named_pct >= hog_pct / 2.0 && named_pct <= hog_pct * 2.0,
        "named {named_pct:.0}%, the kernel's {hog_pct:.0}%"
    );
    assert_eq!(d.limit, Limit::Neighbour, "{d:#?}");
}

/// The same hog under `nice -n 19` takes only the time nginx leaves idle: the CPU is as busy
/// and the hog's share as large, but nginx's thread barely waited for it (the kernel's
/// run-queue wait), so the neighbour is not named: nginx's own CPU is.
#[test]
fn a_niced_hog_beside_nginx_is_not_its_limit() {
    let _alone = crate::alone();
    let Some((d, steps, dir)) = run_example_edited(
        "limits-neighbour",
        &["nginx", "wrk", "setsid", "taskset", "chrt", "nice"],
        &[(
            "nginx-neighbour.sh {out} {port} 1",
            "nginx-neighbour.sh {out} {port} 1 19",
        )],
    ) else {
        return;
    };
    let (f, _) = hog_stat(dir.path());
    // Field 19 of /proc/PID/stat: the hog's niceness, from the kernel.
    assert_eq!(f[19 - 3], "19", "{f:?}");
    let top = steps.last().unwrap();
    let waited = top["server"]["threads"]["run_delay_pct"].as_f64().unwrap();
    let others = top["server"]["neighbours"]["server_cpus_others_pct"]
        .as_f64()
        .unwrap();
    eprintln!("limits-neighbour at nice 19: others took {others:.0}% of nginx's CPU, nginx's threads waited {waited:.1}% of the window");
    assert!(waited < 10.0, "{top:#}");
    assert_ne!(d.limit, Limit::Neighbour, "{d:#?}");
}
