//! Runs over other hosts: specs with `[hosts]`, targets and client groups on network-namespace
//! hosts with Debian's sshd (see tests/it/netns.rs). Skipped with a reason when not root or without
//! sshd. The hosts share this machine's CPUs and clock: these tests check correctness, not
//! speed. The spec checks at the end need no hosts.

use crate::common;
use crate::netns;

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use netns::{describe, ns_pids, with_lab, Lab};
use serde_json::Value;
use stairbench::sweep::plan::Plan;
use stairbench::sweep::spec::SpecFile;

/// A `[hosts]` entry for a lab host.
/// A step's client groups (`per_host`) are the hosts named, in order, and its requests, sends
/// and connections are exactly theirs added (Slurm hosts are checked the same way).
pub(crate) fn assert_counts_merge_exactly<'a>(step: &'a Value, hosts: &[&str]) -> &'a Vec<Value> {
    let per_host = step["per_host"].as_array().expect("per_host");
    let named: Vec<&str> = per_host
        .iter()
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    assert_eq!(named, hosts);
    let sum = |k: &str| per_host.iter().map(|p| p[k].as_u64().unwrap()).sum::<u64>();
    assert!(sum("requests") > 0, "{step}");
    for k in ["requests", "sent", "connections"] {
        assert_eq!(step[k].as_u64().unwrap(), sum(k), "{k}: {step}");
    }
    per_host
}

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

fn run(spec_text: &str, dir: &Path) -> (Output, PathBuf) {
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, spec_text).unwrap();
    let out_dir = dir.join("run");
    (common::run_spec(&spec, &out_dir), out_dir)
}

/// The stairbench processes left in a namespace (sshd and its sessions excepted).
fn stairbench_in(ns: &str) -> Vec<String> {
    ns_pids(ns)
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() != "sshd")
        })
        .map(describe)
        .filter(|d| d.contains("stairbench") && !d.contains("sshd"))
        .collect()
}

fn wait_clean(ns: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = stairbench_in(ns);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_server_on_one_host_and_client_groups_here_and_on_another_merge_exactly() {
    with_lab(&["srv", "cli"], &[], |lab| {
        let text = format!(
            "name = \"two-hosts\"\nduration = \"2s\"\nwarmup = \"1s\"\nclients = [2]\n\
             placements = [\"shared\"]\n[hosts]\n{}{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n\
             [[client.groups]]\nhost = \"local\"\n[[client.groups]]\nhost = \"cli\"\n",
            host_entry(lab, "srv"),
            host_entry(lab, "cli"),
        );
        let (out, dir) = run(&text, lab.dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let steps = common::steps_json(&dir);
        assert_eq!(steps.len(), 1);
        let step = &steps[0];
        assert_eq!(step["status"], "ok", "{step}");
        let schema: Value =
            serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
        let problems = crate::schema::validate(&schema, step);
        assert!(problems.is_empty(), "{problems:?}");
        let per_host = assert_counts_merge_exactly(step, &["local", "cli"]);
        // Percentiles come from the added histograms: the merged median lies between the
        // groups' medians, and the max is the larger max.
        let p = |v: &Value, k: &str| v["latency_us"][k].as_f64().unwrap();
        let (lo, hi) = (p(&per_host[0], "p50"), p(&per_host[1], "p50"));
        let p50 = p(step, "p50");
        assert!(
            p50 >= lo.min(hi) && p50 <= lo.max(hi),
            "{p50} not in [{lo}, {hi}]"
        );
        let max = p(&per_host[0], "max").max(p(&per_host[1], "max"));
        assert_eq!(p(step, "max"), max);
        assert!(step["window_overlap"].as_f64().unwrap() >= 0.95, "{step}");
        // One URL, listed once; each host's generator busy % per CPU; no loopback figures
        // for a load that crossed hosts (null, never 0).
        assert_eq!(step["url"].as_array().map(Vec::len), Some(1), "{step}");
        for p in per_host {
            let busy = p["client_busy_pct"].as_object().expect("client_busy_pct");
            assert!(
                !busy.is_empty() && busy.keys().all(|k| k.starts_with("cpu ")),
                "{p}"
            );
        }
        assert!(step["pkts_per_req"].is_null(), "{step}");
        assert!(step["server"]["loopback"].is_null(), "{step}");
        eprintln!(
            "figures: window overlap {}, groups {} + {} req/s = {} req/s",
            step["window_overlap"],
            per_host[0]["throughput_rps"],
            per_host[1]["throughput_rps"],
            step["throughput_rps"]
        );
        // The server was observed on its host.
        assert_eq!(step["server"]["host"], "srv", "{step}");
        // Observed over the planned 2 s window, not until the remote files were fetched.
        let window_s = step["server"]["window_s"].as_f64().unwrap();
        eprintln!("figures: remote server observed for {window_s} s");
        assert!((1.8..2.4).contains(&window_s), "{window_s}");
        assert!(
            step["server"]["server"]["user_s"].as_f64().is_some(),
            "{step}"
        );
        assert!(
            step["cpu_us_per_req"]["total"].as_f64().unwrap() > 0.0,
            "{step}"
        );
        // The remote group's JSON and raw record were brought back.
        let id = step["id"].as_str().unwrap();
        for f in [format!("{id}.g1.load.json"), format!("{id}.g1.raw.jsonl")] {
            assert!(dir.join("hosts").join(&f).is_file(), "{f} missing");
        }
        let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(
            report.contains("## Client groups") && report.contains("| cli |"),
            "{report}"
        );
        let env: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("environment.json")).unwrap())
                .unwrap();
        for h in ["srv", "cli"] {
            eprintln!(
                "figures: {h} clock offset {}",
                env["hosts"][h]["clock_offset"]
            );
            assert!(
                env["hosts"][h]["clock_offset"]["offset_ns"].is_i64(),
                "{env}"
            );
            assert!(env["hosts"][h]["cpus"].as_u64().unwrap() > 0, "{env}");
        }
        // What the hosts cost the run, recorded and consistent with the files.
        crate::slurm_cost::assert_overhead_consistent(&dir, &["srv", "cli"]);
        for h in ["srv", "cli"] {
            let left = wait_clean(&lab.host(h).ns);
            assert!(left.is_empty(), "left on {h}: {left:?}");
        }
    });
}

/// Starts `stairbench run` on the spec `text` (output piped) and returns once its first step
/// is on disk, with the run directory.
fn spawn_past_first_step(lab: &Lab, text: &str) -> (std::process::Child, PathBuf) {
    let spec = lab.dir.path().join("spec.toml");
    std::fs::write(&spec, text).unwrap();
    let out_dir = lab.dir.path().join("run");
    let child = common::cli_cmd()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(out_dir.join("steps.jsonl")).map_or(0, |s| s.lines().count()) < 1
    {
        assert!(Instant::now() < deadline, "no step finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    (child, out_dir)
}

#[test]
fn a_killed_remote_server_fails_its_step_and_the_run_goes_on() {
    with_lab(&["srv"], &[], |lab| {
        let text = format!(
            "name = \"killed\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [1, 2, 3, 4]\n\
             placements = [\"shared\"]\n[hosts]\n{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n",
            host_entry(lab, "srv"),
        );
        let (child, out_dir) = spawn_past_first_step(lab, &text);
        // Kill the server once the first step is on disk.
        let ns = lab.host("srv").ns.clone();
        let server = ns_pids(&ns)
            .into_iter()
            .find(|&p| describe(p).contains(" serve msgr"))
            .expect("the server runs in the host's namespace");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(server as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A failed step makes the run exit 1; the other steps still ran.
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&out_dir);
        assert_eq!(steps.len(), 4, "{steps:?}");
        assert_eq!(steps[0]["status"], "ok", "{}", steps[0]);
        let failed: Vec<&Value> = steps.iter().filter(|s| s["status"] == "failed").collect();
        assert!(!failed.is_empty(), "{steps:?}");
        let reason = failed[0]["reason"].as_str().unwrap();
        assert!(
            reason.contains("host srv") && reason.contains("killed by signal 9"),
            "{reason}"
        );
        // The server is started again for the next step.
        assert_eq!(steps[3]["status"], "ok", "{}", steps[3]);
        let left = wait_clean(&ns);
        assert!(left.is_empty(), "left on srv: {left:?}");
    });
}

#[test]
fn an_unreachable_host_fails_its_steps_with_the_reason() {
    with_lab(&["cli"], &["gone"], |lab| {
        let gone = &lab.host("gone").spec;
        let text = format!(
            "name = \"gone\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2]\n\
             placements = [\"shared\"]\n[hosts]\n{}gone = {{ url = \"{}\", identity_file = \"{}\" }}\n\
             [[targets]]\nname = \"here\"\nbuiltin = \"msgr --arch reactor --bind 0.0.0.0\"\n\
             url = \"msgr://10.213.1.1:{{port}}\"\n\
             [[targets]]\nname = \"there\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"gone\"\n\
             [[client.groups]]\nhost = \"cli\"\n",
            host_entry(lab, "cli"),
            gone.url(),
            gone.identity_file.as_ref().unwrap().display(),
        );
        let (out, dir) = run(&text, lab.dir.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A failed step makes the run exit 1; the other steps still ran.
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&dir);
        assert_eq!(steps.len(), 4, "{steps:?}");
        for s in steps.iter().filter(|s| s["target"] == "here") {
            assert_eq!(s["status"], "ok", "{s}");
            assert_eq!(s["per_host"][0]["host"], "cli", "{s}");
        }
        for s in steps.iter().filter(|s| s["target"] == "there") {
            assert_eq!(s["status"], "failed", "{s}");
            let reason = s["reason"].as_str().unwrap();
            assert!(
                reason.contains("\"gone\"") && reason.contains("cannot be reached"),
                "{reason}"
            );
        }
        assert!(stderr.contains("host gone"), "{stderr}");
    });
}

/// A `local://` host is this machine reached through the engine trait (`sh`, no ssh): the
/// target runs as a remote one (its process group, the remote observer), a client group runs
/// there beside one in-process, and the windows start together. Needs no root and no sshd.
#[test]
fn a_local_host_runs_the_remote_path_without_ssh() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path().join("work");
    let text = format!(
        "name = \"local-host\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [2]\n\
         placements = [\"shared\"]\n[hosts]\nhere = {{ url = \"local://\", workdir = \"{}\" }}\n\
         [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"here\"\n\
         [[client.groups]]\nhost = \"local\"\n[[client.groups]]\nhost = \"here\"\n",
        work.display()
    );
    let (out, dir) = run(&text, tmp.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let steps = common::steps_json(&dir);
    let step = &steps[0];
    assert_eq!(step["status"], "ok", "{step}");
    let per_host = step["per_host"].as_array().expect("per_host");
    let hosts: Vec<&str> = per_host
        .iter()
        .map(|p| p["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["local", "here"]);
    let sum: u64 = per_host
        .iter()
        .map(|p| p["requests"].as_u64().unwrap())
        .sum();
    assert!(sum > 0 && step["requests"].as_u64() == Some(sum), "{step}");
    assert!(step["window_overlap"].as_f64().unwrap() >= 0.95, "{step}");
    // Observed by `stairbench observe` started through the engine, as on a remote host.
    assert_eq!(step["server"]["host"], "here", "{step}");
    assert!(
        step["server"]["server"]["user_s"].as_f64().is_some(),
        "{step}"
    );
    let env: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("environment.json")).unwrap())
            .unwrap();
    assert_eq!(env["hosts"]["here"]["local"], "local://127.0.0.1", "{env}");
    assert_eq!(
        env["hosts"]["here"]["clock_offset"]["offset_ns"], 0,
        "{env}"
    );
    // The binary is linked, not copied; the group's files were taken from the workdir.
    assert!(std::fs::symlink_metadata(work.join("stairbench"))
        .unwrap()
        .is_symlink());
    let id = step["id"].as_str().unwrap();
    assert!(dir
        .join("hosts")
        .join(format!("{id}.g1.load.json"))
        .is_file());
    assert!(!work.join(format!("{id}.g1.load.json")).exists());
}

fn plan_error(text: &str) -> String {
    let file = SpecFile::parse(Path::new("s.toml"), text).map_err(|e| e.to_string());
    match file.and_then(|f| Plan::new(f, common::stairbench_bin()).map_err(|e| e.to_string())) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e) => e,
    }
}

const TARGET: &str = "[[targets]]\nname = \"t\"\nbuiltin = \"msgr\"\n";

#[test]
fn bad_hosts_are_refused_before_anything_starts() {
    let base = "name = \"x\"\nclients = [1]\n";
    let e = plan_error(&format!("{base}{TARGET}host = \"nowhere\"\n"));
    assert!(
        e.contains("targets[0].host") && e.contains("\"nowhere\"") && e.contains("[hosts]"),
        "{e}"
    );
    let e = plan_error(&format!(
        "{base}[hosts]\na = \"ssh://root@10.0.0.1\"\n{TARGET}[[client.groups]]\nhost = \"b\"\n"
    ));
    assert!(
        e.contains("client.groups[0].host") && e.contains("defined: a"),
        "{e}"
    );
    let e = plan_error(&format!("{base}[hosts]\na = \"http://10.0.0.1\"\n{TARGET}"));
    assert!(e.contains("hosts.a") && e.contains("ssh://"), "{e}");
    let e = plan_error(&format!(
        "{base}[hosts]\na = {{ url = \"ssh://10.0.0.1\", identity_file = \"/no/such/key\" }}\n{TARGET}"
    ));
    assert!(
        e.contains("identity file") && e.contains("/no/such/key"),
        "{e}"
    );
    let e = plan_error(&format!(
        "{base}[hosts]\na = \"ssh://10.0.0.1\"\n{TARGET}host = \"a\"\ninstances = 2\n"
    ));
    assert!(e.contains("instances"), "{e}");
    let e = plan_error(&format!(
        "{base}[hosts]\na = \"ssh://10.0.0.1\"\n{TARGET}[[client.groups]]\nhost = \"a\"\n"
    ));
    assert!(
        e.contains("loopback") && e.contains("targets[0].url"),
        "{e}"
    );
}

/// What a remote client group is told to run parses as `stairbench load`'s own options.
mod group_load_args {
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::Parser;
    use stairbench::fleet::driver::StepRequest;
    use stairbench::fleet::hosts::groups::load_args;
    use stairbench::load::ProtoOptions;

    /// `stairbench load`'s own options, to read back what a remote group is told.
    #[derive(Parser)]
    struct Load {
        #[command(flatten)]
        args: stairbench::cli::load::LoadArgs,
    }

    #[test]
    fn remote_loads_exit_0_whatever_their_error_ratio_and_keep_preload() {
        let sub = StepRequest {
            step_id: "s".into(),
            url: "redis://127.0.0.1:6379".into(),
            port: 6379,
            clients: 1,
            connections: 2,
            depth: 1,
            message: None,
            threads: 1,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(1),
            rate_rps: None,
            client_cpus: Vec::new(),
            out_dir: PathBuf::new(),
            instances: Vec::new(),
            group_cpus: Vec::new(),
            group_targets: Vec::new(),
        };
        let proto = ProtoOptions {
            preload: true,
            ..ProtoOptions::default()
        };
        let args = load_args(&sub, &proto);
        assert_eq!(args[0], "load");
        let parsed = Load::try_parse_from(
            std::iter::once("stairbench").chain(args[1..].iter().map(String::as_str)),
        )
        .unwrap()
        .args;
        // The step counts the group's errors; an exit status of 3 would fail the whole step.
        assert_eq!(parsed.max_error_ratio, 1.0);
        assert!(parsed.config().proto.preload);
    }
}

#[test]
fn the_dry_run_lists_the_groups_shares_and_counts_the_hosts_time() {
    let out = common::cli(&["run", "examples/two-hosts.toml", "--dry-run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    // clients = [2, 4, 8, 16], one connection each, split between here and "cli".
    for want in [
        "client groups (clients/connections each): local 1/1, cli 1/1",
        "client groups (clients/connections each): local 8/8, cli 8/8",
    ] {
        assert!(text.contains(want), "{want} missing: {text}");
    }
    // Four steps of 1 s warm-up and 5 s window, plus the hosts' set-up once and, per step,
    // the 3 s common-start lead and the fetch: at least 4 × 6 + 4 × 3 = 36 s.
    let line = text
        .lines()
        .find(|l| l.starts_with("estimated time"))
        .unwrap();
    let about = line.split("about ").nth(1).unwrap();
    let (m, rest) = about.split_once('m').unwrap();
    let secs: u64 = m.parse::<u64>().unwrap() * 60 + rest[..2].parse::<u64>().unwrap();
    assert!(secs >= 36 + 8, "{line}");
    assert!(line.contains("host set-up"), "{line}");
}

/// Established TCP connections in namespace `ns` other than ssh's (local port 22).
fn load_connections_in(ns: &str) -> usize {
    let out = std::process::Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-tnH", "state", "established"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(2)
                .is_some_and(|a| !a.ends_with(":22"))
        })
        .count()
}

#[test]
fn a_server_host_lost_mid_step_is_tried_once_more_then_marked_down() {
    with_lab(&["srv"], &[], |lab| {
        let text = format!(
            "name = \"lost\"\nduration = \"3s\"\nwarmup = \"0s\"\nclients = [1, 2, 3, 4, 5]\n\
             placements = [\"shared\"]\n[hosts]\n{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n",
            host_entry(lab, "srv"),
        );
        let started = Instant::now();
        let (child, out_dir) = spawn_past_first_step(lab, &text);
        // Once the second step's 2 connections are open (its window running), the host dies:
        // every process there, sshd included.
        let ns = lab.host("srv").ns.clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        while load_connections_in(&ns) < 2 {
            assert!(Instant::now() < deadline, "the second step did not connect");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        for pid in ns_pids(&lab.host("srv").ns) {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&out_dir);
        let status: Vec<&str> = steps
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            status,
            ["ok", "failed", "failed", "failed", "failed"],
            "{steps:#?}"
        );
        let reason = |k: usize| steps[k]["reason"].as_str().unwrap().to_string();
        // Lost mid-step: ssh's reason; tried once more: cannot be reached; then down at once.
        assert!(
            reason(1).contains("host srv") && reason(1).contains("ssh session ended"),
            "{}",
            reason(1)
        );
        assert!(reason(2).contains("cannot be reached"), "{}", reason(2));
        for k in [3, 4] {
            assert!(
                reason(k).contains("\"srv\" was marked down after failing 2 steps in a row"),
                "{}",
                reason(k)
            );
        }
        let notes = std::fs::read_to_string(out_dir.join("notes.txt")).unwrap();
        assert!(
            notes.contains(
                "host srv: marked down for the rest of the run after failing 2 steps in a row"
            ),
            "{notes}"
        );
        // Nothing waited for the lost host: one step, a retry, two that fail at once.
        assert!(took < Duration::from_secs(60), "{took:?}");
    });
}
