//! Observation: derived metrics from recorded /proc samples, and a live busy process.

use crate::common;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::Duration;

use stairbench::machine::procfs::{self, NetCounters, TreeSample};
use stairbench::observe::{
    environment, per_request, Observation, Observer, PerfCounters, TreeUsage,
};

/// /proc/PID/stat of a server (4242) and its worker child (4243), recorded before and after
/// a window; the worker ends up reaped by... nobody: both are alive at the end.
const SERVER_BEFORE: &str = "4242 (srv) S 1 4242 4242 0 -1 4194560 1000 0 2 0 \
    500 100 0 0 20 0 3 0 373780 3133440 413 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
const SERVER_AFTER: &str = "4242 (srv) S 1 4242 4242 0 -1 4194560 1100 0 2 0 \
    650 160 0 0 20 0 3 0 373780 3133440 413 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";
const WORKER_BEFORE: &str = "4243 (srv worker) R 4242 4242 4242 0 -1 4194560 50 0 0 0 \
    100 20 0 0 20 0 1 0 373790 3133440 413 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
const WORKER_AFTER: &str = "4243 (srv worker) R 4242 4242 4242 0 -1 4194560 70 0 1 0 \
    150 40 0 0 20 0 1 0 373790 3133440 413 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
/// A child forked inside the window, which had ended and been reaped by 4242 at the end:
/// its 30 + 10 ticks show up in 4242's cutime/cstime instead.
const SERVER_AFTER_REAPED: &str = "4242 (srv) S 1 4242 4242 0 -1 4194560 1100 5 2 0 \
    650 160 30 10 20 0 3 0 373780 3133440 413 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0";

fn status(vol: u64, invol: u64) -> String {
    format!("Name:\tsrv\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t{vol}\nnonvoluntary_ctxt_switches:\t{invol}\n")
}

/// ((pid, tid), (voluntary, involuntary)) context switches of one thread.
type ThreadSwitches = ((i32, i32), (u64, u64));

fn sample(stats: &[(i32, &str)], threads: &[ThreadSwitches]) -> TreeSample {
    TreeSample {
        processes: stats
            .iter()
            .map(|&(pid, t)| (pid, procfs::parse_pid_stat(t).unwrap()))
            .collect(),
        threads: threads
            .iter()
            .map(|&(k, (v, i))| (k, procfs::parse_status_ctxt(&status(v, i)).unwrap()))
            .collect::<BTreeMap<_, _>>(),
        tasks: BTreeMap::new(),
    }
}

const PROC_STAT_BEFORE: &str = "cpu  220480 0 24133 499825 358 0 1547 87 0 0\n\
    cpu0 110071 0 11223 251002 35 0 806 50 0 0\n\
    cpu1 110409 0 12910 248823 322 0 741 36 0 0\nintr 1431883 0 0\n";
const PROC_STAT_AFTER: &str = "cpu  220680 0 24233 499925 358 0 1547 87 0 0\n\
    cpu0 110146 0 11243 251002 35 0 811 50 0 0\n\
    cpu1 110434 0 12990 248918 322 0 741 36 0 0\nintr 1431999 0 0\n";

const NET_DEV_BEFORE: &str = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo: 1148863045 6361161    0    0    0     0          0         0 1148863045 6361161    0    0    0     0       0          0\n  \
eth0: 130595479    7637    0    0    0     0          0         0   453225    4568    0    0    0     0       0          0\n";
const NET_DEV_AFTER: &str = "Inter-|   Receive                                                |  Transmit\n \
face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo: 1149263045 6381161    0    0    0     0          0         0 1149263045 6381161    0    0    0     0       0          0\n  \
eth0: 130595479    7637    0    0    0     0          0         0   453225    4568    0    0    0     0       0          0\n";

/// perf stat -x, output recorded on a machine with a PMU.
const PERF_CSV: &str = "# started on Sun Nov 22 05:00:00 2026\n\n\
    2000.50,msec,task-clock,2000500000,100.00,1.000,CPUs utilized\n\
    30000,,context-switches,2000500000,100.00,14.996,K/sec\n\
    400,,cpu-migrations,2000500000,100.00,199.950,/sec\n\
    120,,page-faults,2000500000,100.00,59.985,/sec\n\
    5000000000,,cycles,2000500000,100.00,2.499,GHz\n\
    4000000000,,instructions,2000500000,100.00,0.80,insn per cycle\n\
    4800000000,,ref-cycles,2000500000,100.00,,\n\
    2500000000,,stalled-cycles-frontend,2000500000,100.00,50.00,frontend cycles idle\n\
    1500000000,,stalled-cycles-backend,2000500000,100.00,30.00,backend cycles idle\n\
    9000000,,branch-misses,2000500000,100.00,,\n\
    60000000,,LLC-loads,2000500000,100.00,,\n";

fn recorded_observation(tree_after: &TreeSample, perf_csv: &str) -> Observation {
    let before = sample(
        &[(4242, SERVER_BEFORE), (4243, WORKER_BEFORE)],
        &[
            ((4242, 4242), (10, 1)),
            ((4242, 4244), (500, 20)),
            ((4243, 4243), (300, 40)),
        ],
    );
    let d = procfs::tree_delta(&before, tree_after);
    let cpus_before = procfs::parse_proc_stat(PROC_STAT_BEFORE);
    let cpus_after = procfs::parse_proc_stat(PROC_STAT_AFTER);
    let lo = |t: &str| procfs::parse_net_dev(t, "lo").unwrap();
    Observation {
        window_s: 2.0,
        server: Some(TreeUsage {
            pid: 4242,
            processes: tree_after.processes.len() as u64,
            threads: tree_after.threads.len() as u64,
            user_s: d.user_ticks as f64 / 100.0,
            sys_s: d.sys_ticks as f64 / 100.0,
            voluntary_cs: d.voluntary_cs,
            involuntary_cs: d.involuntary_cs,
            minor_faults: d.minor_faults,
            major_faults: d.major_faults,
        }),
        threads: None,
        server_cpus: procfs::core_busy(&cpus_before, &cpus_after, &[0]),
        client_cpus: procfs::core_busy(&cpus_before, &cpus_after, &[1]),
        server_cpus_busy_pct: None,
        client_cpus_busy_pct: None,
        loopback: Some(procfs::net_delta(&lo(NET_DEV_BEFORE), &lo(NET_DEV_AFTER))),
        perf: stairbench::observe::perf::parse_csv(perf_csv),
        observer_cpu_s: 0.0,
        notes: Vec::new(),
        cgroup_cpu: None,
        neighbours: None,
        sockets: None,
        link: None,
        disk: None,
        thread_states: None,
        client_thread_states: None,
        next_hops: Vec::new(),
    }
}

fn after_sample() -> TreeSample {
    sample(
        &[(4242, SERVER_AFTER), (4243, WORKER_AFTER)],
        &[
            ((4242, 4242), (12, 1)),
            ((4242, 4244), (2500, 220)),
            ((4243, 4243), (1300, 40)),
        ],
    )
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9 * b.abs().max(1.0))
}

#[test]
fn tree_cpu_faults_and_switches_from_recorded_samples() {
    let obs = recorded_observation(&after_sample(), PERF_CSV);
    let s = obs.server.as_ref().unwrap();
    // user: (650-500) + (150-100) = 200 ticks; sys: (160-100) + (40-20) = 80 ticks.
    assert!(
        (s.user_s - 2.0).abs() < 1e-9 && (s.sys_s - 0.8).abs() < 1e-9,
        "{s:?}"
    );
    assert_eq!((s.voluntary_cs, s.involuntary_cs), (2 + 2000 + 1000, 200));
    assert_eq!((s.minor_faults, s.major_faults), (100 + 20, 1));
    // cpu0: 75 user, 20 sys + 5 softirq, 0 idle → 100% busy; cpu1: 25 user + 80 sys of 200.
    assert!((obs.server_cpus[0].busy_pct - 100.0).abs() < 1e-9);
    assert!(
        (obs.client_cpus[0].busy_pct - 52.5).abs() < 1e-9,
        "{:?}",
        obs.client_cpus
    );
    assert!((obs.client_cpus[0].sys_pct - 40.0).abs() < 1e-9);
    assert_eq!(obs.loopback.unwrap().rx_packets, 20000);
}

#[test]
fn reaped_children_stay_counted() {
    let mut after = after_sample();
    after
        .processes
        .insert(4242, procfs::parse_pid_stat(SERVER_AFTER_REAPED).unwrap());
    let d = procfs::tree_delta(
        &sample(&[(4242, SERVER_BEFORE), (4243, WORKER_BEFORE)], &[]),
        &after,
    );
    assert_eq!((d.user_ticks, d.sys_ticks), (200 + 30, 80 + 10));
    assert_eq!(d.minor_faults, 120 + 5);
}

#[test]
fn per_request_figures_from_recorded_samples() {
    let obs = recorded_observation(&after_sample(), PERF_CSV);
    let r = per_request(&obs, 10_000);
    // 2.0 s user, 0.8 s sys over 10 000 requests.
    assert!(close(r.cpu_us_per_req.user, 200.0), "{r:?}");
    assert!(close(r.cpu_us_per_req.sys, 80.0), "{r:?}");
    assert!(close(r.cpu_us_per_req.total, 280.0), "{r:?}");
    assert!(close(r.cs_per_req, 3.0), "perf's count wins: {r:?}");
    assert!(close(r.migr_per_req, 0.04));
    assert!(close(r.ipc, 0.8));
    assert!(close(r.iprc, 4.0 / 4.8));
    assert!(
        close(r.scpi, 2.5 / 4.0),
        "the larger stall count per instruction"
    );
    assert!(close(r.llc_loads_per_req, 6000.0));
    assert!(close(r.pkts_per_req, 2.0));
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "cpu_us_per_req",
        "cs_per_req",
        "migr_per_req",
        "ipc",
        "iprc",
        "scpi",
        "llc_loads_per_req",
        "pkts_per_req",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert!(json["cpu_us_per_req"]["total"].is_number());
}

#[test]
fn unavailable_counters_stay_unavailable() {
    let no_pmu = "812.33,msec,task-clock,1,100.00,,\n15234,,context-switches,1,100.00,,\n\
        12,,cpu-migrations,1,100.00,,\n340,,page-faults,1,100.00,,\n\
        <not supported>,,cycles,0,100.00,,\n<not supported>,,instructions,0,100.00,,\n\
        <not supported>,,ref-cycles,0,100.00,,\n<not supported>,,stalled-cycles-frontend,0,100.00,,\n\
        <not supported>,,stalled-cycles-backend,0,100.00,,\n<not supported>,,branch-misses,0,100.00,,\n\
        <not supported>,,LLC-loads,0,100.00,,\n";
    let obs = recorded_observation(&after_sample(), no_pmu);
    let r = per_request(&obs, 10_000);
    assert_eq!(
        (r.ipc, r.iprc, r.scpi, r.llc_loads_per_req),
        (None, None, None, None)
    );
    assert!(close(r.cs_per_req, 1.5234));
    let json = serde_json::to_value(&obs).unwrap();
    assert!(
        json["perf"]["cycles"].is_null(),
        "null, never 0: {}",
        json["perf"]
    );
    assert!(obs
        .perf
        .note
        .as_deref()
        .unwrap()
        .contains("cycles <not supported>"));

    // Without perf at all, context switches come from /proc and migrations are unknown.
    let mut bare = obs.clone();
    bare.perf = PerfCounters::default();
    let r = per_request(&bare, 10_000);
    assert!(close(r.cs_per_req, (3002.0 + 200.0) / 10_000.0), "{r:?}");
    assert_eq!(r.migr_per_req, None);
    assert!(
        per_request(&bare, 0).cpu_us_per_req.total.is_none(),
        "no requests, no ratio"
    );
    let round: Observation = serde_json::from_value(json).unwrap();
    assert_eq!(round, obs);
}

#[test]
fn loopback_counters_are_deltas() {
    let a = NetCounters {
        rx_bytes: 10,
        rx_packets: 2,
        tx_bytes: 10,
        tx_packets: 2,
    };
    let b = NetCounters {
        rx_bytes: 110,
        rx_packets: 7,
        tx_bytes: 90,
        tx_packets: 6,
    };
    let d = procfs::net_delta(&a, &b);
    assert_eq!(
        (d.rx_bytes, d.rx_packets, d.tx_bytes, d.tx_packets),
        (100, 5, 80, 4)
    );
}

/// A busy grandchild: the root shell only waits, its subshell spins. The tree's CPU must be
/// the subshell's.
#[test]
fn live_busy_process_tree() {
    let mut child = Command::new("sh")
        .args(["-c", "(while :; do :; done) & wait"])
        .process_group(0)
        .spawn()
        .expect("sh runs");
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(50));
    let observer = Observer::start(Some(pid), &[0], &[1]);
    std::thread::sleep(Duration::from_millis(500));
    let obs = observer.finish();
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();

    let s = obs.server.as_ref().expect("the tree was observed");
    eprintln!("figures: a 500 ms window measured {:.4} s", obs.window_s);
    assert!(s.processes >= 2, "root and subshell: {s:?}");
    let cpu_s = s.user_s + s.sys_s;
    // The spinner's share of a core depends on what else runs (a CI machine under load gave
    // it 12%); two 10 ms ticks is the least that proves its CPU was seen in the tree.
    assert!(
        cpu_s >= 0.02 && cpu_s <= obs.window_s + 0.02,
        "cpu {cpu_s} in {} s: {s:?}",
        obs.window_s
    );
    // The window spans the 500 ms sleep between start and finish, so never less; 0.511-0.573 s
    // measured (5 runs, load average 14); at most twice the largest overshoot. Catches a
    // window that ends before the sleep does, or counts the observer's start-up twice.
    assert!(
        (0.5..=0.65).contains(&obs.window_s),
        "a 500 ms window measured {} s",
        obs.window_s
    );
    assert_eq!(obs.server_cpus.len(), 1);
    assert_eq!(obs.client_cpus.len(), 1);
    assert!(
        obs.observer_cpu_s > 0.0 && obs.observer_cpu_s < 0.5,
        "{}",
        obs.observer_cpu_s
    );
    assert!(obs.loopback.is_some());
    match obs.perf.task_clock_ms {
        Some(ms) => {
            // perf counts the tree's processes as they were when it attached.
            assert!(ms > 10.0, "task-clock {ms} ms");
            assert!(obs.perf.context_switches.is_some());
        }
        None => eprintln!("perf could not count here: {:?}", obs.perf.note),
    }
    if obs.perf.cycles.is_none() {
        assert!(obs.perf.note.is_some(), "an unavailable counter says why");
    }
    let r = per_request(&obs, 1000);
    assert!(r.cpu_us_per_req.total.unwrap() >= 20.0, "{r:?}");
}

#[test]
fn gone_server_is_a_note_not_a_crash() {
    let observer = Observer::start(Some(i32::MAX - 1), &[0], &[]);
    let obs = observer.finish();
    assert!(obs.server.is_none());
    assert!(obs.perf.context_switches.is_none());
    assert!(!obs.notes.is_empty());
    assert!(obs.client_cpus.is_empty());
}

#[test]
fn environment_describes_this_machine() {
    let env = environment();
    assert!(env.cpus >= 1);
    assert_eq!(env.stairbench_version, env!("CARGO_PKG_VERSION"));
    assert_eq!(env.governors.len(), env.cpus);
    assert!(["on", "off", "unavailable"].contains(&env.turbo.as_str()));
    assert!(env.swap_used_kb <= env.swap_total_kb);
    assert!(!env.kernel.is_empty() && env.kernel != "unknown");
    let json = serde_json::to_value(&env).unwrap();
    for key in [
        "hostname",
        "cpu_model",
        "cpus",
        "topology",
        "kernel",
        "governors",
        "turbo",
        "swap_total_kb",
        "swap_used_kb",
        "perf",
        "stairbench_version",
        "git_revision",
        "loadavg",
        "warnings",
    ] {
        assert!(json.get(key).is_some(), "{key} in environment.json");
    }
    let perf = env
        .perf
        .as_ref()
        .expect("perf availability is always gathered");
    if !perf.software || !perf.hardware {
        assert!(perf.note.is_some(), "unavailable perf says why");
    }
}

#[test]
fn perf_counts_only_from_begin_not_from_prepare() {
    // perf acknowledging `enable` over 20 ms late (a busy machine) has its counts left out,
    // which leaves nothing to check: try again, and fail if it is late every time.
    for _ in 0..3 {
        let obs = spin_between_prepare_and_begin();
        assert!(
            obs.window_s < 1.3,
            "the window starts at begin: {}",
            obs.window_s
        );
        if let Some(ms) = obs.perf.task_clock_ms {
            assert!(
                ms <= obs.window_s * 1000.0 + 50.0,
                "task-clock {ms} ms over a {} s window",
                obs.window_s
            );
            return;
        }
        if !obs.notes.iter().any(|n| n.contains("into the window")) {
            common::skip_or_fail(format!("perf could not count here: {:?}", obs.perf.note));
            return;
        }
        // Late: the counts are left out together, and the note says so.
        assert!(obs.perf.context_switches.is_none(), "{:?}", obs.perf);
    }
    panic!("perf acknowledged `enable` late three times in a row: nothing was checked");
}

/// A spinner observed 600 ms between prepare and begin, then 1 s after begin.
fn spin_between_prepare_and_begin() -> Observation {
    let mut child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .process_group(0)
        .spawn()
        .expect("sh runs");
    let pid = child.id() as i32;
    let mut observer = Observer::prepare(Some(pid), &[0], &[1]);
    // The spinner runs 600 ms while perf is attached but disabled: none of it may count.
    std::thread::sleep(Duration::from_millis(600));
    observer.begin();
    std::thread::sleep(Duration::from_millis(1000));
    let obs = observer.finish();
    let _ = child.kill();
    let _ = child.wait();
    obs
}

/// A shell that runs a spinner (`sh -c`, in a subshell of its own when `through_subshell`:
/// then the spinner is the shell's grandchild) until the test creates the stop file; then it
/// sleeps, alive at the window's end. Its own process group, so that it is no part of
/// stairbench's.
fn shell_with_a_spinner(stop: &std::path::Path, through_subshell: bool) -> std::process::Child {
    let spin = r#"sh -c 'while [ ! -e "$1" ]; do :; done' x "$1""#;
    let script = if through_subshell {
        format!("({spin}; true); sleep 30")
    } else {
        format!("{spin}; sleep 30")
    };
    Command::new("sh")
        .args(["-c", &script, "x"])
        .arg(stop)
        .process_group(0)
        .spawn()
        .expect("sh runs")
}

fn end_group(child: &mut std::process::Child) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = child.wait();
}

fn scan_now() -> stairbench::observe::neighbours::Scan {
    let ncpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    stairbench::observe::neighbours::scan(std::path::Path::new("/proc"), ncpus)
}

/// The CPU of the live processes of process group `pgrp`, in ticks.
fn group_cpu_ticks(pgrp: i32) -> u64 {
    procfs::all_pid_stats(std::path::Path::new("/proc"))
        .values()
        .filter(|s| s.pgrp == pgrp)
        .map(|s| s.utime + s.stime)
        .sum()
}

/// The shell's reaped-children counter (cutime + cstime, ticks) from its /proc/PID/stat.
fn children_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..]
        .split_whitespace()
        .collect();
    f[16 - 3].parse::<u64>().unwrap() + f[17 - 3].parse::<u64>().unwrap()
}

/// A spinner that used 0.6 s of CPU before a 0.5 s window and ended 0.1 s into it reaches
/// its shell's reaped-children counter with all of its CPU: the shell is charged the window's
/// part (about 0.1 s), never the spinner's life (130% of one CPU and more, as the shell read
/// before the grandchild's start was taken off too), whether the spinner is its child or its
/// grandchild.
#[test]
fn a_spinner_reaped_inside_the_window_charges_its_shell_only_the_windows_part() {
    for through_subshell in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let stop = dir.path().join("stop");
        let mut sh = shell_with_a_spinner(&stop, through_subshell);
        // 0.6 s of the spinner's CPU before the window, however busy the machine (bounded).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let enough = (0.6 * procfs::ticks_per_s()) as u64;
        while group_cpu_ticks(sh.id() as i32) < enough && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let before = scan_now();
        let t0 = std::time::Instant::now();
        let counter0 = children_ticks(sh.id());
        std::thread::sleep(Duration::from_millis(100));
        std::fs::write(&stop, "").unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let counter1 = children_ticks(sh.id());
        let after = scan_now();
        let window_s = t0.elapsed().as_secs_f64();
        end_group(&mut sh);
        let pid = sh.id() as i32;
        let charged =
            stairbench::observe::neighbours::cpu_pct(&before, &after, pid, window_s).unwrap();
        let reaped_pct = (counter1 - counter0) as f64 / procfs::ticks_per_s() / window_s * 100.0;
        eprintln!(
            "through a subshell {through_subshell}: the shell's counter grew {reaped_pct:.0}% of the window, charged {charged:.0}%"
        );
        // The case must hold the bug's cause: the spinner's life (0.6 s at least) reached the
        // counter inside the window.
        assert!(reaped_pct >= 80.0, "the spinner used {reaped_pct:.0}%");
        assert!(charged <= 45.0, "charged {charged:.0}% of one CPU");
    }
}

/// A shell loop of short spinners, each born and reaped inside the window, is charged their
/// CPU, all of it: the shell's counter growth less at most the spinner that straddled the
/// window's start.
#[test]
fn a_loop_of_short_spinners_is_charged_to_its_shell() {
    let mut sh = Command::new("sh")
        .args([
            "-c",
            "while :; do sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'; done",
        ])
        .process_group(0)
        .spawn()
        .expect("sh runs");
    std::thread::sleep(Duration::from_millis(300));
    let before = scan_now();
    let t0 = std::time::Instant::now();
    let counter0 = children_ticks(sh.id());
    std::thread::sleep(Duration::from_millis(500));
    let counter1 = children_ticks(sh.id());
    let after = scan_now();
    let window_s = t0.elapsed().as_secs_f64();
    end_group(&mut sh);
    let charged =
        stairbench::observe::neighbours::cpu_pct(&before, &after, sh.id() as i32, window_s)
            .unwrap();
    let reaped_pct = (counter1 - counter0) as f64 / procfs::ticks_per_s() / window_s * 100.0;
    eprintln!("loop of short spinners: counter grew {reaped_pct:.0}%, charged {charged:.0}%");
    assert!(reaped_pct >= 10.0, "the spinners used {reaped_pct:.0}%");
    assert!(
        charged <= 110.0,
        "charged {charged:.0}%: one spinner at a time"
    );
    assert!(
        charged >= reaped_pct - 20.0,
        "charged {charged:.0}% of a counter growth of {reaped_pct:.0}%"
    );
}
