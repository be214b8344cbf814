//! Six namespace hosts (tests/it/netns.rs): a server on one, client groups on five more and
//! here. One run checks set-up per host (cold, with the binary copied, and warm), the groups'
//! window overlap and exact merge, an ssh session dropped mid-step (the step fails with ssh's
//! reason, the host is tried again and works), a host that dies mid-step (the step fails
//! quickly, the other groups stop, the host is tried once more, then marked down with a note),
//! and the fetch of the groups' files (one ssh session per group against the four sessions of
//! before). Figures go to stderr as `figures:` lines. The hosts share this machine's CPUs.

use crate::common;
use crate::netns;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use netns::{describe, ns_pids, with_lab, Lab};
use serde_json::Value;
use stairbench::fleet::hosts::session::connect;
use stairbench::remote::{HostSpec, Remote};

const CLIENTS: [&str; 5] = ["c1", "c2", "c3", "c4", "c5"];

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

/// Each host set up as a run sets it up (check, binary, topology, environment, clock), all
/// in parallel; seconds per host.
fn set_up_all(specs: &[HostSpec]) -> Vec<(String, f64)> {
    let bin = common::stairbench_bin();
    std::thread::scope(|scope| {
        let handles: Vec<_> = specs
            .iter()
            .map(|spec| {
                let bin = bin.clone();
                scope.spawn(move || {
                    let t = Instant::now();
                    let session = connect(spec.clone(), &bin, &BTreeMap::new());
                    assert!(session.is_ok(), "{}: {:?}", spec.name, session.err());
                    (spec.name.clone(), t.elapsed().as_secs_f64())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn spec_text(lab: &Lab) -> String {
    let mut text = String::from(
        "name = \"six\"\nduration = \"2s\"\nwarmup = \"1s\"\nclients = [6, 7, 8, 9, 10, 11]\n\
         placements = [\"shared\"]\n[hosts]\n",
    );
    for name in ["srv"].iter().chain(&CLIENTS) {
        text.push_str(&host_entry(lab, name));
    }
    text.push_str(
        "[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n\
         [[client.groups]]\nhost = \"local\"\n",
    );
    for name in CLIENTS {
        text.push_str(&format!("[[client.groups]]\nhost = \"{name}\"\n"));
    }
    text
}

fn lines_in(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

/// Waits (at most `limit`) for steps.jsonl to hold `n` lines; the time it took.
fn wait_for_steps(steps: &Path, n: usize, limit: Duration) -> Duration {
    let t = Instant::now();
    while lines_in(steps) < n {
        assert!(t.elapsed() < limit, "step {n} did not end within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

/// Waits until the step's window has run a second: the local group's per-second lines (which,
/// unlike the remote groups', are written as they come) hold the warm-up's and one more.
fn wait_into_window(out: &Path, step: &str) {
    let csv = out.join("intervals").join(format!("{step}.g0.csv"));
    let t = Instant::now();
    while lines_in(&csv) < 3 {
        assert!(
            t.elapsed() < Duration::from_secs(40),
            "{step} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(pids: impl IntoIterator<Item = u32>) {
    for pid in pids {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn spawn_run(spec: &Path, out: &Path) -> Child {
    common::cli_cmd()
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn six_hosts_set_up_overlap_and_survive_a_dropped_session_and_a_dead_host() {
    const NAMES: [&str; 6] = ["srv", "c1", "c2", "c3", "c4", "c5"];
    with_lab(&NAMES, &[], |lab| {
        let specs: Vec<HostSpec> = NAMES.iter().map(|n| lab.host(n).spec.clone()).collect();
        for (round, label) in ["cold (binary copied)", "warm"].iter().enumerate() {
            let times = set_up_all(&specs);
            let secs: Vec<String> = times.iter().map(|(h, s)| format!("{h} {s:.2}")).collect();
            eprintln!(
                "figures: set-up {label}, round {round}: {}",
                secs.join(", ")
            );
        }
        let spec = lab.dir.path().join("spec.toml");
        std::fs::write(&spec, spec_text(lab)).unwrap();
        let out = lab.dir.path().join("run");
        let steps_file = out.join("steps.jsonl");
        let started = Instant::now();
        let child = spawn_run(&spec, &out);
        wait_for_steps(&steps_file, 1, Duration::from_secs(120));
        eprintln!(
            "figures: set-up (warm, 6 hosts) and first step: {:.1} s",
            started.elapsed().as_secs_f64()
        );

        // Step 2: c2's ssh session dropped mid-step (its sshd session killed, the host up).
        let c2 = lab.host("c2");
        wait_into_window(&out, "reactor.shared.c7.r0");
        let listener = c2.sshd_pid.unwrap();
        let sessions = netns::ns_pids_named(&c2.ns, "sshd");
        kill(sessions.into_iter().filter(|&p| p != listener));
        let failed_in = wait_for_steps(&steps_file, 2, Duration::from_secs(20));
        eprintln!(
            "figures: step failed {:.2} s after c2's ssh session was dropped",
            failed_in.as_secs_f64()
        );

        // Step 3: c2 is tried again and works. Step 4: c3 dies mid-step (every process there).
        let c3 = lab.host("c3");
        wait_for_steps(&steps_file, 3, Duration::from_secs(60));
        wait_into_window(&out, "reactor.shared.c9.r0");
        kill(ns_pids(&c3.ns));
        let failed_in = wait_for_steps(&steps_file, 4, Duration::from_secs(20));
        eprintln!(
            "figures: step failed {:.2} s after host c3 died",
            failed_in.as_secs_f64()
        );
        let out_put = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out_put.stderr);
        eprintln!(
            "figures: the whole run took {:.1} s",
            started.elapsed().as_secs_f64()
        );
        assert_eq!(out_put.status.code(), Some(1), "{stderr}");
        check_steps(&common::steps_json(&out), failed_in);
        check_notes_and_files(&out);
        for name in ["srv", "c1", "c2", "c4", "c5"] {
            let left = stairbench_left(&lab.host(name).ns);
            assert!(left.is_empty(), "left on {name}: {left:?}");
        }
        compare_fetches(lab, &out);
    });
}

fn check_steps(steps: &[Value], c3_failed_in: Duration) {
    assert_eq!(steps.len(), 6, "{steps:#?}");
    let status: Vec<&str> = steps
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        status,
        ["ok", "failed", "ok", "failed", "failed", "failed"],
        "{steps:#?}"
    );
    for s in [&steps[0], &steps[2]] {
        let per_host = s["per_host"].as_array().unwrap();
        let hosts: Vec<&str> = per_host
            .iter()
            .map(|p| p["host"].as_str().unwrap())
            .collect();
        assert_eq!(hosts, ["local", "c1", "c2", "c3", "c4", "c5"]);
        let sum: u64 = per_host
            .iter()
            .map(|p| p["requests"].as_u64().unwrap())
            .sum();
        assert_eq!(s["requests"].as_u64().unwrap(), sum, "{s}");
        assert!(sum > 0);
        let overlap = s["window_overlap"].as_f64().unwrap();
        eprintln!("figures: step {} window overlap {overlap:.4}", s["id"]);
        assert!(overlap >= 0.95, "{s}");
    }
    let reason = |k: usize| steps[k]["reason"].as_str().unwrap().to_string();
    for k in [1, 3, 4, 5] {
        eprintln!("figures: step {} failed: {}", k + 1, reason(k));
    }
    // The dropped session: ssh's own words, said once, and the other groups stopped.
    let r = reason(1);
    assert!(r.contains("client group 2 (host c2)"), "{r}");
    assert!(r.contains("its ssh session ended"), "{r}");
    assert!(r.contains("were stopped"), "{r}");
    assert_eq!(r.matches("closed by remote host").count(), 1, "{r}");
    // The dead host: quickly (well before the 3 s lead, 1 s warm-up, 2 s window and fetch of
    // a full step), with the reason.
    let r = reason(3);
    assert!(r.contains("client group 3 (host c3)"), "{r}");
    assert!(r.contains("were stopped"), "{r}");
    assert!(
        c3_failed_in < Duration::from_secs(4),
        "{c3_failed_in:?}: {r}"
    );
    // Tried once more: ssh's reason, in its case.
    let r = reason(4);
    assert!(
        r.contains("host c3") && r.contains("Connection refused"),
        "{r}"
    );
    // Then down: the step fails at once with why.
    let r = reason(5);
    assert!(r.contains("marked down"), "{r}");
    assert!(steps.iter().all(|s| s["error_kind"] != "io"));
}

fn check_notes_and_files(out: &Path) {
    let notes = std::fs::read_to_string(out.join("notes.txt")).unwrap();
    assert!(
        notes.contains("host c3: marked down for the rest of the run"),
        "{notes}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("host c3: marked down"), "{report}");
    assert!(report.contains("Connection refused"), "{report}");
    // A failed step leaves no file under a result's name; its fetched files are partial.
    let steps = common::steps_json(out);
    let exists = |rel: String| out.join(rel).exists();
    for s in &steps {
        let id = s["id"].as_str().unwrap();
        let ok = s["status"] == "ok";
        assert_eq!(exists(format!("intervals/{id}.csv")), ok, "{id}");
        assert_eq!(exists(format!("hist/{id}.hlog")), ok, "{id}");
        for k in 0..6 {
            assert_eq!(exists(format!("intervals/{id}.g{k}.csv")), ok, "{id} g{k}");
        }
        for k in 1..6 {
            assert_eq!(
                exists(format!("hosts/{id}.g{k}.load.json")),
                ok,
                "{id} g{k}"
            );
        }
    }
}

/// The stairbench processes left in a namespace.
fn stairbench_left(ns: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = ns_pids(ns)
            .into_iter()
            .map(describe)
            .filter(|d| d.contains("stairbench") && !d.contains("sshd"))
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The groups' files brought back as before (per host: scp, rm, scp, rm, one session after
/// another) and as now (one session), hosts in parallel both ways; alternated, medians.
fn compare_fetches(lab: &Lab, out: &Path) {
    let steps = common::steps_json(out);
    let id = steps[0]["id"].as_str().unwrap();
    let hosts = ["c1", "c2", "c4", "c5"];
    let names = [format!("{id}.g1.load.json"), format!("{id}.g1.raw.jsonl")];
    let place = || {
        for h in hosts {
            let work = &lab.host(h).spec.workdir;
            for n in &names {
                std::fs::copy(out.join("hosts").join(n), work.join(n)).unwrap();
            }
        }
    };
    let dest = lab.dir.path().join("fetched");
    std::fs::create_dir_all(&dest).unwrap();
    let (mut before, mut after) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        place();
        before.push(in_parallel(lab, &hosts, |r| {
            for n in &names {
                r.fetch_file(Path::new(n), &dest.join(n)).unwrap();
                r.run(&format!("rm -f -- {n}")).unwrap();
            }
        }));
        place();
        after.push(in_parallel(lab, &hosts, |r| {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let bodies = r.take_files(&refs).unwrap();
            assert_eq!(
                bodies[0],
                std::fs::read(out.join("hosts").join(&names[0])).unwrap()
            );
        }));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let size: u64 = names
        .iter()
        .map(|n| std::fs::metadata(out.join("hosts").join(n)).unwrap().len())
        .sum();
    eprintln!(
        "figures: fetching one group's files ({size} bytes) from 4 hosts at once: \
         {:.2} s as before (4 ssh sessions each), {:.2} s now (1 session); runs {before:?} vs {after:?}",
        median(&mut before.clone()),
        median(&mut after.clone())
    );
}

/// Seconds until `f` has run for every host, each on its own thread.
fn in_parallel(lab: &Lab, hosts: &[&str], f: impl Fn(&Remote) + Sync) -> f64 {
    let t = Instant::now();
    std::thread::scope(|scope| {
        for h in hosts {
            let remote = Remote::new(lab.host(h).spec.clone());
            let f = &f;
            scope.spawn(move || f(&remote));
        }
    });
    t.elapsed().as_secs_f64()
}

/// A host that vanishes without closing its connections (its link down: no reset, no FIN):
/// ssh's keep-alive ends the session within about 3 × 2 s, and the process says so.
#[test]
fn a_host_whose_network_vanishes_is_noticed_within_the_keep_alive() {
    with_lab(&["gone"], &[], |lab| {
        let host = lab.host("gone");
        let remote = Remote::new(host.spec.clone());
        let mut process = remote.spawn("sleep 60", Duration::from_secs(1)).unwrap();
        let links = std::process::Command::new("ip")
            .args(["-n", &host.ns, "-o", "link", "show"])
            .output()
            .unwrap();
        let links = String::from_utf8_lossy(&links.stdout);
        let link = links
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap())
            .find(|name| *name != "lo")
            .expect("the host's veth")
            .to_string();
        let t = Instant::now();
        let down = std::process::Command::new("ip")
            .args(["-n", &host.ns, "link", "set", "dev", &link, "down"])
            .status()
            .unwrap();
        assert!(down.success());
        let status = process.wait_timeout(Duration::from_secs(20));
        let took = t.elapsed();
        eprintln!(
            "figures: a vanished host's session ended after {:.1} s: {status}",
            took.as_secs_f64()
        );
        assert!(
            matches!(status, stairbench::remote::RemoteStatus::ConnectionLost(_)),
            "{status:?}"
        );
        assert!(took < Duration::from_secs(12), "{took:?}");
    });
}
