//! Per-thread evidence of a step (issue 13): a real built-in server's threads grouped by
//! merged name, its busiest thread, run-queue wait and context switches per request, in
//! steps.jsonl and valid against its schema.

use crate::common;

const SPEC: &str = r#"
name = "threads"
duration = "1s"
warmup = "0s"
clients = [2]
placements = ["shared"]

[[targets]]
name = "reactor"
builtin = "msgr --arch reactor --threads 2"

[client]
msg_size = 64
"#;

#[test]
fn a_builtin_servers_threads_are_in_its_step() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(&spec, SPEC).unwrap();
    let out = dir.path().join("run");
    common::assert_success(&common::run_spec(&spec, &out));
    let steps = common::steps_json(&out);
    let step = &steps[0];
    assert_eq!(step["status"], "ok", "{step}");
    let threads = &step["server"]["threads"];
    let groups = threads["groups"].as_array().expect("thread groups");
    // msgr-reactor-0 and msgr-reactor-1 merge into one group, as in the flame graphs.
    let reactor = groups
        .iter()
        .find(|g| g["name"] == "msgr-reactor")
        .unwrap_or_else(|| panic!("no msgr-reactor group: {threads}"));
    assert_eq!(reactor["threads"], 2, "{reactor}");
    let busiest = &threads["busiest"];
    let pct = busiest["cpu_pct"].as_f64().unwrap();
    // Serving load for a second: the busiest thread is a reactor and did measurable work,
    // and no single thread can exceed one CPU (a little slack for the window's edges).
    assert_eq!(busiest["group"], "msgr-reactor", "{threads}");
    assert!(pct > 1.0 && pct <= 105.0, "{busiest}");
    assert!(reactor["cpu_pct"].as_f64().unwrap() >= pct);
    assert_eq!(threads["cpu_source"], "schedstat");
    // The run-queue wait: the groups' shares add up to the tree's.
    let run_delay_pct = threads["run_delay_pct"].as_f64().unwrap();
    let groups_pct: f64 = groups
        .iter()
        .map(|g| g["run_delay_pct"].as_f64().unwrap())
        .sum();
    assert!((run_delay_pct - groups_pct).abs() < 1e-6, "{threads}");
    let requests = step["requests"].as_f64().unwrap();
    assert!(requests > 100.0, "{step}");
    // The per-request figures are the server tree's counts and wait over the requests.
    let per_req = |key: &str| {
        step[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {step}"))
    };
    let server = &step["server"]["server"];
    let vol = per_req("voluntary_cs_per_req");
    assert!(vol > 0.0, "{step}");
    for (key, total) in [
        (
            "voluntary_cs_per_req",
            server["voluntary_cs"].as_f64().unwrap(),
        ),
        (
            "involuntary_cs_per_req",
            server["involuntary_cs"].as_f64().unwrap(),
        ),
        (
            "run_delay_us_per_req",
            threads["run_delay_s"].as_f64().unwrap() * 1e6,
        ),
    ] {
        let want = total / requests;
        assert!(
            (per_req(key) - want).abs() <= 1e-9 * want.max(1.0),
            "{key}: {step}"
        );
    }
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    let errors = crate::schema::validate(&schema, step);
    assert!(errors.is_empty(), "{errors:?}");
}

/// A server that forks a process per connection (tests/data/servers/forking_http.py, 2 ms
/// of CPU per request in the connection's process) under `stairbench load` as an external
/// tool that connects inside the window, and then waits a second: the connections'
/// processes are born after the window's first snapshot and gone before its last, as
/// PostgreSQL's backends under pgbench.
const FORKING: &str = r#"
name = "forking"
duration = "1s"
warmup = "0s"
clients = [2]
placements = ["shared"]

[[targets]]
name = "forking"
command = "python3 {server} {port} 0.002"
url = "http://127.0.0.1:{port}/"
ready = { log = "^ready$", timeout = "10s" }

[client]
command = "sh -c '{bin} load --json - -c {connections} -d {duration_s}s http://127.0.0.1:{port}/; sleep 1'"
parser = "stairbench"
"#;

#[test]
fn a_process_per_connection_servers_threads_add_up_to_its_cpu() {
    if common::find_program("python3").is_none() {
        common::skip_or_fail(common::not_installed("python3"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/servers/forking_http.py");
    let spec = dir.path().join("spec.toml");
    let text = FORKING
        .replace("{server}", server.to_str().unwrap())
        .replace("{bin}", common::stairbench_bin().to_str().unwrap());
    std::fs::write(&spec, text).unwrap();
    let out = dir.path().join("run");
    common::assert_success(&common::run_spec(&spec, &out));
    let steps = common::steps_json(&out);
    let step = &steps[0];
    assert_eq!(step["status"], "ok", "{step}");
    let observed = &step["server"];
    let window_s = observed["window_s"].as_f64().unwrap();
    let tree = &observed["server"];
    let tree_pct =
        100.0 * (tree["user_s"].as_f64().unwrap() + tree["sys_s"].as_f64().unwrap()) / window_s;
    // Only the listener is left at the end: the connections' processes have ended.
    assert_eq!(tree["processes"], 1, "{observed}");
    let threads = &observed["threads"];
    let groups = threads["groups"].as_array().unwrap();
    let threads_pct: f64 = groups.iter().map(|g| g["cpu_pct"].as_f64().unwrap()).sum();
    let unsampled = threads["unsampled_cpu_pct"].as_f64().unwrap_or(0.0);
    eprintln!(
        "tree {tree_pct:.1}% of a CPU; threads {threads_pct:.1}% + unsampled {unsampled:.1}%; \
         busiest {}",
        threads["busiest"]
    );
    // 2 ms a request for a second on 2 connections: the tree did work.
    assert!(tree_pct > 5.0, "{observed}");
    // The evidence adds up to the tree's CPU (ticks against schedstat's ns: within 10%).
    assert!(
        (threads_pct + unsampled - tree_pct).abs() <= 0.1 * tree_pct,
        "threads {threads_pct} + unsampled {unsampled} vs tree {tree_pct}: {observed}"
    );
    // The connections lived most of the window: the samples saw nearly all of it.
    assert!(threads_pct >= 0.8 * tree_pct, "{observed}");
    assert!(threads["ended_threads"].as_u64().unwrap() >= 2, "{threads}");
    // What the diagnosis reads: the busiest thread is a connection's process doing its
    // share, not the idle listener (0.1% of a CPU before the tree was sampled).
    let busiest = &threads["busiest"];
    assert_ne!(busiest["pid"], tree["pid"], "{threads}");
    assert!(
        busiest["cpu_pct"].as_f64().unwrap() >= 0.3 * tree_pct,
        "{threads}"
    );
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    let errors = crate::schema::validate(&schema, step);
    assert!(errors.is_empty(), "{errors:?}");
}
