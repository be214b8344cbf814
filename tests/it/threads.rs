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
    assert!(threads["run_delay_pct"].as_f64().unwrap() >= 0.0);
    let requests = step["requests"].as_f64().unwrap();
    assert!(requests > 100.0, "{step}");
    let vol = step["voluntary_cs_per_req"].as_f64().unwrap();
    let invol = step["involuntary_cs_per_req"].as_f64().unwrap();
    assert!(vol > 0.0 && invol >= 0.0, "{vol} {invol}");
    // The per-request figures are the server tree's counts over the requests.
    let server_vol = step["server"]["server"]["voluntary_cs"].as_f64().unwrap();
    assert!((vol - server_vol / requests).abs() < 1e-9 * vol.max(1.0));
    assert!(step["run_delay_us_per_req"].as_f64().is_some(), "{step}");
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    let errors = crate::schema::validate(&schema, step);
    assert!(errors.is_empty(), "{errors:?}");
}
