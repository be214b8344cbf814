//! Seed 004's two-rank kvd daemon with each rank on its own host: examples/kvd-two-hosts.toml
//! run small on two network-namespace hosts (tests/it/netns.rs; they share this machine's
//! /dev/shm, CPUs and clock: correctness, not speed), and the spec checks that keep a
//! shared-memory client on its daemon's machine (no hosts needed).

use crate::common;
use crate::netns;

use std::path::Path;

use netns::{describe, ns_pids, with_lab, Lab};
use serde_json::Value;
use stairbench::sweep::plan::Plan;
use stairbench::sweep::spec::SpecFile;

fn example() -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kvd-two-hosts.toml"),
    )
    .unwrap()
}

/// A `[hosts]` entry for a lab host.
fn host_entry(lab: &Lab, name: &str) -> String {
    let spec = &lab.host(name).spec;
    format!(
        "{name} = {{ url = \"{}\", identity_file = \"{}\", workdir = \"{}\", known_hosts_file = \"{}\" }}\n",
        spec.url(),
        spec.identity_file.as_ref().unwrap().display(),
        spec.workdir.display(),
        spec.known_hosts_file.as_ref().unwrap().display()
    )
}

/// The example at 1 s steps, clients 1 and 2 per rank, one placement, on the lab's hosts a
/// and b (their own addresses), with a region name no other test uses.
fn small_example(lab: &Lab, name: &str) -> String {
    let (a, b) = (lab.host("a").address, lab.host("b").address);
    let text = example()
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace("warmup = \"1s\"", "warmup = \"500ms\"")
        .replace("clients = [2, 4, 8, 16, 32]", "clients = [2, 4]")
        .replace(
            "placements = [\"shared\", \"separated\"]",
            "placements = [\"shared\"]",
        )
        .replace("a = \"ssh://bench@192.0.2.10\"\n", &host_entry(lab, "a"))
        .replace("b = \"ssh://bench@192.0.2.11\"\n", &host_entry(lab, "b"))
        .replace("192.0.2.10:17301", &format!("{a}:17301"))
        .replace("192.0.2.11:17302", &format!("{b}:17302"))
        .replace("sb-kvd", name);
    assert!(
        text.contains("clients = [2, 4]") && text.contains(&format!("{b}:17302")),
        "{text}"
    );
    assert!(!text.contains("192.0.2."), "{text}");
    text
}

/// The stairbench processes left in a namespace (sshd and its sessions excepted).
fn stairbench_in(ns: &str) -> Vec<String> {
    ns_pids(ns)
        .into_iter()
        .map(describe)
        .filter(|d| d.contains("stairbench") && !d.contains("sshd"))
        .collect()
}

fn wait_clean(ns: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let left = stairbench_in(ns);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// One rank's daemon over a step's window: both ranks, remote requests both ways, no failure.
/// Its RTT and turnaround p50 (µs) and remote requests answered.
pub(crate) fn check_rank(step: &Value, label: &str, rank: u64) -> (f64, f64, u64) {
    let m = &step["target_metrics"][label];
    // The groups' start beside the daemon's window, so a window that missed the load says so.
    let shown = format!(
        "{m}; groups_overhead {}, observed_window_overlap {}",
        step["groups_overhead"], step["observed_window_overlap"]
    );
    assert_eq!(m["gauges"]["rank"], rank, "{label}: {shown}");
    assert_eq!(m["gauges"]["ranks"], 2, "{label}: {shown}");
    assert_eq!(m["gauges"]["peers_up"], 1, "{label}: {shown}");
    let counter = |k: &str| {
        m["counters"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k}: {shown}"))
    };
    // Requests crossed ranks: this rank forwarded some and answered some of its peer's.
    assert!(counter("remote_done") > 0, "{label}: {shown}");
    assert!(counter("incoming") > 0, "{label}: {shown}");
    assert!(counter("local") > 0, "{label}: {shown}");
    for k in ["peer_down", "bad_requests", "peer_failures"] {
        assert_eq!(counter(k), 0, "{label} {k}: {shown}");
    }
    let rtt = &m["histograms"]["rtt"];
    assert_eq!(
        rtt["count"].as_u64(),
        Some(counter("remote_done")),
        "{label}: every remote request answered in the window is timed: {shown}"
    );
    let p50_us = rtt["p50"].as_f64().unwrap() / 1e3;
    let turnaround_us = m["histograms"]["incoming_turnaround"]["p50"]
        .as_f64()
        .unwrap()
        / 1e3;
    assert!(p50_us > 0.0 && turnaround_us > 0.0, "{label}: {shown}");
    (p50_us, turnaround_us, counter("remote_done"))
}

#[test]
fn the_two_host_example_runs_small_with_each_rank_on_its_host() {
    let _turn = common::kvd_staircase_turn();
    with_lab(&["a", "b"], &[], |lab| {
        let name = common::unique_name("kvdh");
        let spec = lab.dir.path().join("kvd.toml");
        std::fs::write(&spec, small_example(lab, &name)).unwrap();
        let dir = lab.dir.path().join("run");
        let started = std::time::Instant::now();
        let out = common::run_spec(&spec, &dir);
        common::assert_success(&out);
        eprintln!(
            "figures: run of 2 steps, set-up included: {:.1} s",
            started.elapsed().as_secs_f64()
        );
        // A step whose groups started after the observers' window is disturbed and run again.
        let steps: Vec<Value> = (common::steps_json(&dir).into_iter())
            .filter(|s| {
                let late = s["status"] == "disturbed";
                if late {
                    eprintln!("run again: {}: {}", s["id"], s["reason"]);
                }
                !late
            })
            .collect();
        assert_eq!(steps.len(), 2, "{steps:?}");
        for (step, per_rank) in steps.iter().zip([1, 2]) {
            assert_eq!(step["status"], "ok", "{step}");
            let errors = step["errors"].as_object().map_or(0, serde_json::Map::len);
            assert_eq!(errors, 0, "no error of any kind: {step}");
            assert_eq!(step["error_ratio"].as_f64(), Some(0.0), "{step}");
            let schema: Value =
                serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
            let problems = crate::schema::validate(&schema, step);
            assert!(problems.is_empty(), "{problems:?}");
            assert!(step["requests"].as_u64().unwrap() > 0, "{step}");
            // Each host's group loaded its own host's rank, per_rank clients each.
            let per_host = step["per_host"].as_array().expect("per_host");
            let hosts: Vec<&str> = per_host
                .iter()
                .map(|p| p["host"].as_str().unwrap())
                .collect();
            assert_eq!(hosts, ["a", "b"], "{step}");
            for p in per_host {
                assert_eq!(p["connections"], per_rank, "{p}");
            }
            let urls: Vec<&str> = (step["url"].as_array().expect("url list").iter())
                .filter_map(Value::as_str)
                .collect();
            let want = [format!("kvd://{name}"), format!("kvd://{name}-r1")];
            assert_eq!(urls, want, "{step}");
            let (r0, t0, n0) = check_rank(step, "kvd", 0);
            let (r1, t1, n1) = check_rank(step, "kvd.r1", 1);
            eprintln!(
                "figures: {per_rank} clients/rank: {:.0} req/s, remote answered {n0} / {n1}, RTT p50 rank 0 {r0:.1} µs, rank 1 {r1:.1} µs; turnaround p50 {t0:.1} / {t1:.1} µs",
                step["throughput_rps"].as_f64().unwrap()
            );
            // Rank 0 is the step's server, observed on its host; rank 1 is observed on its own.
            assert_eq!(step["server"]["host"], "a", "{step}");
            let r1 = &step["observed"]["kvd.r1"];
            assert_eq!(r1["host"], "b", "{step}");
            assert!(r1["server"]["user_s"].as_f64().is_some(), "{r1}");
        }
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        for rank in ["rank 0", "rank 1"] {
            for t in ["RTT scaling", "Little's law", "Phases"] {
                let title = format!("### {t} (shared, {rank})");
                assert!(report.contains(&title), "{title}: {report}");
            }
        }
        for h in ["a", "b"] {
            let left = wait_clean(&lab.host(h).ns);
            assert!(left.is_empty(), "left on {h}: {left:?}");
        }
        // Each rank removed its region when it was stopped (the hosts share /dev/shm).
        for region in [name.clone(), format!("{name}-r1")] {
            let path = format!("/dev/shm/stairbench.shmkv.{region}");
            assert!(!Path::new(&path).exists(), "{path} left behind");
        }
    });
}

#[test]
fn a_rank_killed_on_its_host_fails_the_step_with_its_name_and_the_next_step_runs() {
    let _turn = common::kvd_staircase_turn();
    with_lab(&["a", "b"], &[], |lab| {
        let name = common::unique_name("kvdk");
        let text = small_example(lab, &name).replace("clients = [2, 4]", "clients = [2, 4, 6]");
        let spec = lab.dir.path().join("kvd.toml");
        std::fs::write(&spec, text).unwrap();
        let dir = lab.dir.path().join("run");
        let child = common::cli_cmd()
            .arg("run")
            .arg(&spec)
            .arg("--out")
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
        while std::fs::read_to_string(dir.join("steps.jsonl")).map_or(0, |s| s.lines().count()) < 1
        {
            assert!(std::time::Instant::now() < deadline, "no step finished");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Rank 1 runs on host b only.
        let rank1 = ns_pids(&lab.host("b").ns)
            .into_iter()
            .find(|&p| describe(p).contains(" serve kvd"))
            .expect("rank 1 runs in host b's namespace");
        assert!(describe(rank1).contains(&format!("{name}-r1")));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(rank1 as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A failed step makes the run exit 1; the other steps still ran.
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&dir);
        assert_eq!(steps.len(), 3, "{steps:?}");
        assert_eq!(steps[0]["status"], "ok", "{}", steps[0]);
        assert_eq!(steps[1]["status"], "failed", "{}", steps[1]);
        let reason = steps[1]["reason"].as_str().unwrap();
        assert!(
            reason.contains("rank 1 on host b") && reason.contains("killed by signal 9"),
            "{reason}"
        );
        // Both ranks are started again for the next step.
        assert_eq!(steps[2]["status"], "ok", "{}", steps[2]);
        check_rank(&steps[2], "kvd.r1", 1);
        for h in ["a", "b"] {
            let left = wait_clean(&lab.host(h).ns);
            assert!(left.is_empty(), "left on {h}: {left:?}");
        }
    });
}

fn plan_error(text: &str) -> String {
    let file = SpecFile::parse(Path::new("s.toml"), text).map_err(|e| e.to_string());
    match file.and_then(|f| Plan::new(f, common::stairbench_bin()).map_err(|e| e.to_string())) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e,
    }
}

#[test]
fn shared_memory_clients_must_be_on_their_daemons_host() {
    let ex = example();
    // A client group on a host where no rank runs.
    let e = plan_error(&ex.replace(
        "[[client.groups]]\nhost = \"b\"",
        "[[client.groups]]\nhost = \"local\"",
    ));
    assert!(
        e.contains("targets[0].rank_hosts")
            && e.contains("shared-memory")
            && e.contains("client group 1 runs on local")
            && e.contains("a, b"),
        "{e}"
    );
    // A daemon here with clients on a host.
    let one = "name = \"x\"\nclients = [2]\n[hosts]\nb = \"ssh://10.0.0.2\"\n\
               [[targets]]\nname = \"kvd\"\nbuiltin = \"kvd --name n\"\nurl = \"kvd://n\"\n\
               ready = { log = \"^kvd\" }\n";
    let e = plan_error(&format!("{one}[[client.groups]]\nhost = \"b\"\n"));
    assert!(
        e.contains("targets[0].host")
            && e.contains("(kvd://)")
            && e.contains("runs on local")
            && e.contains("client group 0 runs on b"),
        "{e}"
    );
    // One rank list, one host per rank, every rank started by the runner.
    let e = plan_error(&ex.replace("rank_hosts = [\"a\", \"b\"]", "rank_hosts = [\"a\"]"));
    assert!(
        e.contains("rank_hosts") && e.contains("1 host(s) for the 2 rank(s)"),
        "{e}"
    );
    let e = plan_error(&ex.replace("--name sb-kvd", "--name sb-kvd --spawn-peers"));
    assert!(e.contains("--spawn-peers"), "{e}");
    let e = plan_error(&ex.replace(
        "rank_hosts = [\"a\", \"b\"]",
        "rank_hosts = [\"a\", \"local\"]",
    ));
    assert!(
        e.contains("targets[0].rank_hosts[1]") && e.contains("this machine"),
        "{e}"
    );
    let e = plan_error(&ex.replace("rank_hosts = [\"a\", \"b\"]", "rank_hosts = [\"a\", \"c\"]"));
    assert!(e.contains("\"c\"") && e.contains("[hosts]"), "{e}");
    // `{host}` in --ranks is a rank's host's address: only with rank_hosts.
    let e = plan_error(
        &ex.replace("rank_hosts = [\"a\", \"b\"]", "host = \"a\"")
            .replace("192.0.2.10:17301", "{host}:17301"),
    );
    assert!(
        e.contains("targets[0].builtin") && e.contains("{host} in --ranks"),
        "{e}"
    );
    let e = plan_error(&ex.replace("builtin = \"kvd", "rank_hosts_of = 1\nbuiltin = \"kvd"));
    assert!(e.contains("rank_hosts_of"), "{e}");
}

#[test]
fn the_two_host_example_plans_each_rank_on_its_host() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("kvd.toml");
    std::fs::write(&spec, example()).unwrap();
    let out = common::cli(&["run".as_ref(), spec.as_os_str(), "--dry-run".as_ref()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for (host, rank, name) in [("a", 0, "sb-kvd"), ("b", 1, "sb-kvd-r1")] {
        // One line per launch: `on host a: ... 'serve' 'kvd' ...; on host b: ...`.
        let want = format!("'--rank' '{rank}' '--name' '{name}' ");
        let found = stdout
            .split("on host ")
            .any(|part| part.starts_with(&format!("{host}: ")) && part.contains(&want));
        assert!(found, "{want} on {host}: {stdout}");
    }
}
