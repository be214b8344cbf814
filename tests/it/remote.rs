//! Remote hosts over real ssh: namespaces on this machine, each with Debian's sshd (see
//! tests/it/netns.rs). Skipped with a reason when not root, without `ip netns`, or without sshd.
//! The hosts share this machine's CPUs and clock: these tests check correctness, not speed.

use crate::common;
use crate::netns;

use std::time::{Duration, Instant};

use netns::{describe, ns_pids_named, wait_for_named, wait_ns_holds_only, with_lab};
use stairbench::fleet::hosts::session::topology_json;
use stairbench::remote::{
    plan_start, to_reference, window_overlap, CopyOutcome, Engine, HostSpec, Remote, RemoteError,
    RemoteStatus, Window, MIN_WINDOW_OVERLAP,
};

const GRACE: Duration = Duration::from_secs(2);

#[test]
fn a_command_runs_on_two_hosts() {
    with_lab(&["a", "b"], &[], |lab| {
        for (me, other) in [("a", "b"), ("b", "a")] {
            let remote = Remote::new(lab.host(me).spec.clone());
            remote.check().unwrap();
            let out = remote.run("ip -4 -o addr show; pwd").unwrap();
            assert!(
                out.stdout.contains(&lab.host(me).address.to_string()),
                "{}",
                out.stdout
            );
            assert!(
                !out.stdout.contains(&lab.host(other).address.to_string()),
                "{}",
                out.stdout
            );
            let workdir = lab.host(me).spec.workdir.display().to_string();
            assert!(out.stdout.lines().any(|l| l == workdir), "{}", out.stdout);
        }
        let remote = Remote::new(lab.host("a").spec.clone());
        let err = remote.run("echo oops >&2; exit 3").unwrap_err();
        assert!(
            matches!(err, RemoteError::Command { code: Some(3), .. }),
            "{err}"
        );
        assert!(err.to_string().contains("oops"), "{err}");
    });
}

#[test]
fn a_stopped_process_leaves_nothing_in_the_namespace() {
    with_lab(&["a"], &[], |lab| {
        let host = lab.host("a");
        let sshd = host.sshd_pid.unwrap();
        let remote = Remote::new(host.spec.clone());
        let mut proc = remote
            .spawn("sleep 30 & sleep 31; echo never", GRACE)
            .unwrap();
        assert_eq!(proc.try_status(), RemoteStatus::Running);
        let sleeps = wait_for_named(&host.ns, "sleep", 2, Duration::from_secs(5));
        assert_eq!(sleeps.len(), 2, "both sleeps run there");
        let started = Instant::now();
        assert_eq!(proc.stop(), RemoteStatus::Killed(15));
        assert!(started.elapsed() < GRACE + Duration::from_secs(2));
        let left = wait_ns_holds_only(&host.ns, &[sshd], Duration::from_secs(5));
        let left: Vec<String> = left.into_iter().map(describe).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        assert!(!proc.output_tail().iter().any(|l| l == "never"));
    });
}

#[test]
fn a_dead_local_ssh_ends_the_remote_group() {
    with_lab(&["a"], &[], |lab| {
        let host = lab.host("a");
        let remote = Remote::new(host.spec.clone());
        let mut proc = remote.spawn("sleep 30", GRACE).unwrap();
        assert_eq!(
            wait_for_named(&host.ns, "sleep", 1, Duration::from_secs(5)).len(),
            1
        );
        let ssh = nix::unistd::Pid::from_raw(proc.channel_pid() as i32);
        nix::sys::signal::kill(ssh, nix::sys::signal::Signal::SIGKILL).unwrap();
        let left = wait_ns_holds_only(&host.ns, &[host.sshd_pid.unwrap()], Duration::from_secs(6));
        let left: Vec<String> = left.into_iter().map(describe).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
        assert!(matches!(proc.try_status(), RemoteStatus::ConnectionLost(_)));
    });
}

#[test]
fn a_killed_remote_process_is_detected() {
    with_lab(&["a"], &[], |lab| {
        let host = lab.host("a");
        let remote = Remote::new(host.spec.clone());
        let mut proc = remote.spawn("echo started; exec sleep 30", GRACE).unwrap();
        let sleeps = wait_for_named(&host.ns, "sleep", 1, Duration::from_secs(5));
        assert_eq!(sleeps.len(), 1);
        let pid = nix::unistd::Pid::from_raw(sleeps[0] as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        assert_eq!(
            proc.wait_timeout(Duration::from_secs(5)),
            RemoteStatus::Killed(9)
        );
        assert_eq!(proc.output_tail(), ["started"]);

        let mut proc = remote.spawn("exit 4", GRACE).unwrap();
        assert_eq!(
            proc.wait_timeout(Duration::from_secs(5)),
            RemoteStatus::Exited(4)
        );
    });
}

#[test]
fn a_host_whose_sshd_dies_is_a_lost_connection() {
    with_lab(&["a"], &[], |lab| {
        let host = lab.host("a");
        let remote = Remote::new(host.spec.clone());
        let mut proc = remote.spawn("sleep 30", GRACE).unwrap();
        assert_eq!(
            wait_for_named(&host.ns, "sleep", 1, Duration::from_secs(5)).len(),
            1
        );
        for pid in ns_pids_named(&host.ns, "sshd") {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL).unwrap();
        }
        let status = proc.wait_timeout(Duration::from_secs(10));
        assert!(
            matches!(status, RemoteStatus::ConnectionLost(_)),
            "{status:?}"
        );
        // The session's stdin closed with sshd: the watchdog ended the group.
        let left = wait_ns_holds_only(&host.ns, &[], Duration::from_secs(5));
        let left: Vec<String> = left.into_iter().map(describe).collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    });
}

#[test]
fn the_binary_is_copied_once_and_runs_there() {
    with_lab(&["a"], &[], |lab| {
        let remote = Remote::new(lab.host("a").spec.clone());
        let bin = common::stairbench_bin();
        assert_eq!(
            remote.copy_binary_if_missing(&bin).unwrap(),
            CopyOutcome::Copied
        );
        assert_eq!(
            remote.copy_binary_if_missing(&bin).unwrap(),
            CopyOutcome::AlreadyPresent
        );
        // A binary that differs (same version, other bytes) is replaced.
        remote.run("printf x >> stairbench").unwrap();
        assert_eq!(
            remote.copy_binary_if_missing(&bin).unwrap(),
            CopyOutcome::Copied
        );
        let version = remote.run("./stairbench --version").unwrap().stdout;
        let local = common::cli(&["--version"]);
        assert_eq!(version, String::from_utf8_lossy(&local.stdout));

        let topo = topology_json(&remote).unwrap();
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
        assert!(
            topo.cpus >= cpus,
            "remote saw {} cpus, we see {cpus}",
            topo.cpus
        );

        remote.run("echo fetched > out.txt").unwrap();
        let local_copy = lab.dir.path().join("fetched.txt");
        remote.fetch_file("out.txt".as_ref(), &local_copy).unwrap();
        assert_eq!(std::fs::read_to_string(&local_copy).unwrap(), "fetched\n");
        let err = remote
            .fetch_file("missing.txt".as_ref(), &local_copy)
            .unwrap_err();
        assert!(matches!(err, RemoteError::Copy { .. }), "{err}");
    });
}

#[test]
fn clocks_of_namespaces_agree() {
    with_lab(&["a", "b"], &[], |lab| {
        let mut offsets = Vec::new();
        for name in ["a", "b"] {
            let offset = Remote::new(lab.host(name).spec.clone())
                .clock_offset()
                .unwrap();
            eprintln!("{name}: {offset:?}");
            assert!(offset.uncertainty_ns < 50_000_000, "{offset:?}");
            // One kernel clock: the true offset is 0, within the measured uncertainty.
            assert!(
                offset.offset_ns.abs() <= offset.uncertainty_ns + 1_000_000,
                "{offset:?}"
            );
            offsets.push(offset);
        }
        let windows: Vec<_> = offsets
            .iter()
            .map(|o| {
                to_reference(
                    (1_000_000_000 + o.offset_ns, 11_000_000_000 + o.offset_ns),
                    o,
                )
            })
            .collect();
        assert_eq!(window_overlap(&windows), 1.0);
    });
}

#[test]
fn a_refused_key_or_a_changed_host_key_is_refused() {
    with_lab(&["a"], &[], |lab| {
        let spec = &lab.host("a").spec;
        let other_key = lab.dir.path().join("other_key");
        let keygen = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&other_key)
            .status()
            .unwrap();
        assert!(keygen.success());
        let stranger = HostSpec {
            identity_file: Some(other_key),
            ..spec.clone()
        };
        let err = Remote::new(stranger).check().unwrap_err();
        assert!(matches!(err, RemoteError::Unreachable { .. }), "{err}");
        assert!(err.to_string().contains("Permission denied"), "{err}");

        // The host is known with another key: never accepted silently.
        let known = lab.dir.path().join("known_elsewhere");
        let other_pub = std::fs::read_to_string(lab.dir.path().join("client_key.pub")).unwrap();
        std::fs::write(&known, format!("{} {}", spec.address, other_pub)).unwrap();
        let impostor = HostSpec {
            known_hosts_file: Some(known),
            ..spec.clone()
        };
        let err = Remote::new(impostor).check().unwrap_err();
        assert!(matches!(err, RemoteError::Unreachable { .. }), "{err}");
        assert!(
            err.to_string().contains("Host key verification failed"),
            "{err}"
        );
        Remote::new(spec.clone()).check().unwrap();
    });
}

/// Both hosts wait for their reading of a common start and print their clock when it comes:
/// 10 s windows from those starts overlap by far more than the 95% a step needs.
#[test]
fn windows_start_together_on_two_hosts() {
    with_lab(&["a", "b"], &[], |lab| {
        let remotes: Vec<Remote> = ["a", "b"]
            .map(|n| Remote::new(lab.host(n).spec.clone()))
            .into();
        let offsets: Vec<_> = remotes.iter().map(|r| r.clock_offset().unwrap()).collect();
        let plan = plan_start(Duration::from_secs(4), &offsets);
        let mut procs: Vec<_> = remotes
            .iter()
            .zip(&plan.host_start_ns)
            .map(|(remote, start_ns)| {
                // Poll the clock every 5 ms (a step's load generator would sleep_until_ns).
                let wait = format!(
                    "while [ \"$(date +%s%N)\" -lt {start_ns} ]; do sleep 0.005; done; date +%s%N"
                );
                remote.spawn(&wait, GRACE).unwrap()
            })
            .collect();
        let windows: Vec<Window> = procs
            .iter_mut()
            .zip(&offsets)
            .map(|(proc, offset)| {
                assert_eq!(
                    proc.wait_timeout(Duration::from_secs(10)),
                    RemoteStatus::Exited(0)
                );
                let started_ns: i64 = proc.output_tail()[0].parse().unwrap();
                to_reference((started_ns, started_ns + 10_000_000_000), offset)
            })
            .collect();
        let overlap = window_overlap(&windows);
        eprintln!(
            "common start {} windows {windows:?} overlap {overlap}",
            plan.common_start_ns
        );
        assert!(overlap >= MIN_WINDOW_OVERLAP, "{overlap}");
        for (start, _) in &windows {
            assert!(
                *start >= plan.common_start_ns,
                "started before the common start"
            );
        }
    });
}

#[test]
fn unreachable_hosts_fail_clearly_within_the_connect_timeout() {
    with_lab(&["up"], &["dead", "nosshd", "silent"], |lab| {
        // "dead" loses its address: nothing answers ARP. "nosshd" refuses the connection.
        let dead = lab.host("dead");
        let flush = std::process::Command::new("ip")
            .args(["-n", &dead.ns, "-4", "addr", "flush", "scope", "global"])
            .status()
            .unwrap();
        assert!(flush.success());
        // "silent" drops every answer, so only ssh's ConnectTimeout ends the wait.
        let silent = lab.host("silent");
        let client = format!("{}/32", silent.address).replace(".2/32", ".1/32");
        let route = std::process::Command::new("ip")
            .args(["-n", &silent.ns, "route", "add", "blackhole", &client])
            .status()
            .unwrap();
        assert!(route.success());
        for name in ["dead", "nosshd", "silent"] {
            let remote = Remote::new(lab.host(name).spec.clone());
            let started = Instant::now();
            let err = remote.check().unwrap_err();
            let took = started.elapsed();
            let text = err.to_string();
            eprintln!("{name}: {text} after {took:?}");
            assert!(matches!(err, RemoteError::Unreachable { .. }), "{text}");
            assert!(text.contains(&format!("host {name:?}")), "{text}");
            assert!(text.contains(&lab.host(name).address.to_string()), "{text}");
            assert!(took < Duration::from_secs(9), "{name} took {took:?}");
        }
        let err = Remote::new(lab.host("nosshd").spec.clone())
            .spawn("sleep 30", GRACE)
            .unwrap_err();
        assert!(matches!(err, RemoteError::Unreachable { .. }), "{err}");
        let err = Remote::new(lab.host("nosshd").spec.clone())
            .clock_offset()
            .unwrap_err();
        assert!(matches!(err, RemoteError::Unreachable { .. }), "{err}");
        Remote::new(lab.host("up").spec.clone()).check().unwrap();
    });
}
