//! Runs on a real Slurm cluster: Debian's slurmctld, slurmd and munge started by the test on
//! network-namespace hosts (tests/it/slurm_lab.rs). Skipped with a reason when not root or
//! without the packages (fails in CI). The nodes share this machine's CPUs and clock: these
//! tests check correctness, not speed.

use crate::common;
use crate::netns::describe;
use crate::slurm_lab::{with_slurm, SlurmLab};

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A `[hosts]` entry for the allocation's node `+index`, its working directory in the shared
/// part of the cluster's filesystem.
fn slurm_entry(cluster: &SlurmLab, name: &str, index: usize) -> String {
    format!(
        "{name} = {{ url = \"slurm://+{index}\", workdir = \"{}\" }}\n",
        cluster.dir.join(format!("work-{name}")).display()
    )
}

/// What `stairbench run` inside `salloc -N NODES` gave: its output, and the steps of the
/// allocation still there once it had ended (its own are named `stairbench-PID`).
struct AllocatedRun {
    /// salloc's (and so stairbench's) status and output.
    out: Output,
    /// The run directory.
    dir: PathBuf,
    /// `JOB.STEP NAME NODE` of each stairbench step left in the allocation after the run.
    steps_left: Vec<String>,
}

/// Starts `bin run SPEC` inside a new allocation of `nodes` nodes (salloc with `salloc_args`,
/// bounded: 300 s); once it ends, the allocation's stairbench steps still there are listed
/// (waiting up to 10 s for ending ones to go). Finish with [`finish`].
fn spawn_in_allocation(
    cluster: &SlurmLab,
    bin: &Path,
    nodes: usize,
    salloc_args: &[&str],
    text: &str,
) -> (Child, PathBuf) {
    let spec = cluster.dir.join("spec.toml");
    std::fs::write(&spec, text).unwrap();
    let dir = cluster.dir.join("run");
    let script = r#"sh -c 'echo "stairbench-pid: $$"; exec "$@"' sh "$0" run "$1" --out "$2"; rc=$?
i=0
while [ $i -lt 50 ]; do
  left=$(squeue --steps --noheader --jobs "$SLURM_JOB_ID" --format '%i %j %N' | grep ' stairbench-')
  [ -z "$left" ] && break
  sleep 0.2; i=$((i + 1))
done
printf 'steps-left: %s\n' "$left" | tr '\n' ' '; echo
exit $rc"#;
    let child = cluster
        .command("timeout")
        // As common::cli_cmd: the lab's own daemons and sibling tests share the CPUs.
        .env("STAIRBENCH_KEEP_DISTURBED", "true")
        .args([
            "-s",
            "KILL",
            "300",
            "salloc",
            "--quiet",
            "-N",
            &nodes.to_string(),
        ])
        .args(salloc_args)
        .args(["sh", "-c", script])
        .arg(bin)
        .arg(&spec)
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    (child, dir)
}

/// Waits for a run [`spawn_in_allocation`] started.
fn finish(child: Child, dir: PathBuf) -> AllocatedRun {
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let steps_left = stdout
        .lines()
        .find_map(|l| l.strip_prefix("steps-left:"))
        .unwrap_or("(no steps-left line: the run did not end)")
        .split_whitespace()
        .collect::<Vec<_>>()
        .chunks(3)
        .map(|c| c.join(" "))
        .collect();
    AllocatedRun {
        out,
        dir,
        steps_left,
    }
}

/// [`spawn_in_allocation`] and [`finish`].
fn run_in_allocation(cluster: &SlurmLab, bin: &Path, nodes: usize, text: &str) -> AllocatedRun {
    let (child, dir) = spawn_in_allocation(cluster, bin, nodes, &[], text);
    finish(child, dir)
}

/// The stairbench processes left in node `i`'s namespace.
fn stairbench_on(cluster: &SlurmLab, i: usize) -> Vec<String> {
    crate::netns::ns_pids(&cluster.lab.hosts[i].ns)
        .into_iter()
        .map(describe)
        .filter(|d| d.contains("stairbench") && !d.contains("slurm"))
        .collect()
}

/// A copy of the stairbench binary in this machine's own /tmp, which no node sees: run from
/// there, stairbench must bring itself to the nodes (sbcast).
/// No job step of the run is left in `squeue -s`, and no stairbench process on the first
/// `nodes` nodes.
fn assert_nothing_left(cluster: &SlurmLab, run: &AllocatedRun, nodes: usize) {
    assert!(
        run.steps_left.is_empty(),
        "steps left: {:?}",
        run.steps_left
    );
    for i in 0..nodes {
        let left = stairbench_on(cluster, i);
        assert!(left.is_empty(), "left on h{}: {left:?}", i + 1);
    }
}

fn private_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("stairbench");
    std::fs::copy(common::stairbench_bin(), &bin).unwrap();
    (dir, bin)
}

#[test]
fn the_lab_cluster_runs_a_step_on_each_of_its_three_nodes() {
    with_slurm(3, |cluster| {
        let out = cluster.run(
            Duration::from_secs(30),
            "srun",
            &["-N", "3", "-n", "3", "--label", "hostname"],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "srun: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            cluster.logs()
        );
        let mut names: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(_, name)| name.trim())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["h1", "h2", "h3"], "{stdout}");
    });
}

/// As on a real cluster: each node has its own /tmp, and shares the rest (here /var/tmp, where
/// the cluster's files are).
#[test]
fn the_lab_nodes_have_their_own_tmp_and_share_the_rest() {
    with_slurm(3, |cluster| {
        let here = tempfile::tempdir().unwrap();
        let private = here.path().join("mine");
        let shared = cluster.dir.join("shared");
        std::fs::write(&private, "x").unwrap();
        std::fs::write(&shared, "x").unwrap();
        let script = format!(
            "test -e {} && echo private-seen; test -e {} && echo shared-seen; true",
            private.display(),
            shared.display()
        );
        let out = cluster.run(
            Duration::from_secs(30),
            "srun",
            &["-N", "3", "-n", "3", "sh", "-c", &script],
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout.matches("shared-seen").count(), 3, "{stdout}");
        assert_eq!(stdout.matches("private-seen").count(), 0, "{stdout}");
    });
}

/// The two-host example on Slurm hosts: the server on the allocation's first node, a client
/// group on each of the two others; the same figures as over ssh (tests/it/hosts.rs): exact
/// merges, window overlap of at least 95 %, the binary broadcast to nodes that could not see
/// it, and nothing of the run left in the allocation or on the nodes.
#[test]
fn the_two_host_example_runs_on_slurm_nodes_and_leaves_no_step() {
    with_slurm(3, |cluster| {
        let text = format!(
            "name = \"slurm-two-nodes\"\nduration = \"2s\"\nwarmup = \"1s\"\nclients = [2]\n\
             placements = [\"shared\"]\n[hosts]\n{}{}{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n\
             [[client.groups]]\nhost = \"c1\"\n[[client.groups]]\nhost = \"c2\"\n",
            slurm_entry(cluster, "srv", 0),
            slurm_entry(cluster, "c1", 1),
            slurm_entry(cluster, "c2", 2),
        );
        let (_keep, bin) = private_copy();
        let started = Instant::now();
        let run = run_in_allocation(cluster, &bin, 3, &text);
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        assert!(run.out.status.success(), "{stderr}\n{}", cluster.logs());
        eprintln!(
            "figures: the run inside salloc took {:.2} s",
            took.as_secs_f64()
        );
        let steps = common::steps_json(&run.dir);
        assert_eq!(steps.len(), 1);
        let step = &steps[0];
        assert_eq!(step["status"], "ok", "{step}");
        let per_host = crate::hosts::assert_counts_merge_exactly(step, &["c1", "c2"]);
        let p = |v: &Value, k: &str| v["latency_us"][k].as_f64().unwrap();
        let (lo, hi) = (p(&per_host[0], "p50"), p(&per_host[1], "p50"));
        let p50 = p(step, "p50");
        assert!(
            p50 >= lo.min(hi) && p50 <= lo.max(hi),
            "{p50} not in [{lo}, {hi}]"
        );
        assert_eq!(
            p(step, "max"),
            p(&per_host[0], "max").max(p(&per_host[1], "max"))
        );
        let overlap = step["window_overlap"].as_f64().unwrap();
        eprintln!("figures: slurm window overlap {overlap}");
        assert!(overlap >= 0.95, "{step}");
        assert_eq!(step["server"]["host"], "srv", "{step}");
        let window_s = step["server"]["window_s"].as_f64().unwrap();
        assert!((1.8..2.4).contains(&window_s), "{window_s}");
        let env: Value = serde_json::from_str(
            &std::fs::read_to_string(run.dir.join("environment.json")).unwrap(),
        )
        .unwrap();
        for (h, node) in [("srv", "h1"), ("c1", "h2"), ("c2", "h3")] {
            let host = &env["hosts"][h];
            eprintln!(
                "figures: {h} on {node}: clock offset {}",
                host["clock_offset"]
            );
            assert_eq!(host["hostname"], node, "{host}");
            assert_eq!(host["binary"], "copied", "{host}");
            assert!(host["clock_offset"]["offset_ns"].is_i64(), "{host}");
        }
        crate::slurm_cost::assert_overhead_consistent(&run.dir, &["srv", "c1", "c2"]);
        assert_nothing_left(cluster, &run, 3);
    });
}

/// Outside an allocation, a Slurm host is refused at its `[hosts]` key with what to run.
#[test]
fn a_slurm_host_outside_an_allocation_is_refused_at_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.toml");
    std::fs::write(
        &spec,
        "name = \"x\"\nduration = \"1s\"\nclients = [1]\n[hosts]\nsrv = \"slurm://+0\"\n\
         [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n",
    )
    .unwrap();
    let mut cmd = common::cli_cmd();
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("SLURM_") {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(dir.path().join("run"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("hosts.srv") || stderr.contains("host \"srv\""),
        "{stderr}"
    );
    assert!(stderr.contains("not inside a Slurm allocation"), "{stderr}");
    assert!(stderr.contains("salloc -N 2 stairbench run"), "{stderr}");
    assert!(!dir.path().join("run").join("steps.jsonl").exists());
}

/// A run inside an allocation made with `--no-kill` that loses node `node` `delay` after
/// its first step's line was written.
struct LostRun {
    run: AllocatedRun,
    /// When each step's line was written: step k's time is from line k to line k + 1 (the
    /// first is when the node was about to be lost).
    written: Vec<Instant>,
    /// When the node was lost.
    killed: Instant,
    /// From the allocation's request to its end.
    took: Duration,
}

fn run_losing_node(cluster: &mut SlurmLab, text: &str, node: usize, delay: Duration) -> LostRun {
    let started = Instant::now();
    let (child, dir) =
        spawn_in_allocation(cluster, &common::stairbench_bin(), 2, &["--no-kill"], text);
    let steps_file = dir.join("steps.jsonl");
    let lines = || std::fs::read_to_string(&steps_file).map_or(0, |s| s.lines().count());
    while lines() < 1 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no first step"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(delay);
    cluster.lose_node(node);
    let killed = Instant::now();
    let mut written = vec![Instant::now(); 1];
    while written.len() < 5 && started.elapsed() < Duration::from_secs(120) {
        if lines() > written.len() {
            written.push(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = finish(child, dir);
    LostRun {
        run,
        written,
        killed,
        took: started.elapsed(),
    }
}

/// A node lost mid-step (its slurmd, slurmstepd and tasks killed): stairbench notices by
/// itself, not when Slurm declares the node down (SlurmdTimeout): the server's observer goes
/// quiet, a connection to the node's slurmd is refused, and the step fails with that reason
/// within 10 s of the loss (that step, or the next when the window ended first); the node is
/// tried once more and then marked down; nothing hangs and no step is left but the lost
/// node's. The allocation is made with `--no-kill`, so Slurm keeps it when it declares the
/// node down.
#[test]
fn a_node_lost_mid_step_fails_it_with_slurm_s_reason_then_is_marked_down() {
    with_slurm(2, |cluster| {
        let text = format!(
            "name = \"lost\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [1, 2, 3, 4, 5]\n\
             placements = [\"shared\"]\n[hosts]\n{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n",
            slurm_entry(cluster, "srv", 0),
        );
        // Into the second step's window, then h1's slurmd dies.
        let LostRun {
            run,
            written,
            killed,
            took,
        } = run_losing_node(cluster, &text, 0, Duration::from_millis(700));
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        assert_eq!(run.out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&run.dir);
        let status: Vec<&str> = steps
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect();
        let reason = |k: usize| steps[k]["reason"].as_str().unwrap_or("").to_string();
        eprintln!(
            "figures: statuses {status:?}, run {:.1} s, {:.1} s after the kill",
            took.as_secs_f64(),
            killed.elapsed().as_secs_f64()
        );
        for (k, s) in steps.iter().enumerate() {
            eprintln!("figures: step {k}: {} {}", s["status"], reason(k));
        }
        // Lost mid-step: Slurm's reason; tried once more: no step can be made there; then
        // down at once.
        let all_reasons: Vec<String> = (0..steps.len()).map(reason).collect();
        assert_eq!(status.len(), 5, "{all_reasons:#?}");
        assert_eq!(status[0], "ok", "{all_reasons:#?}");
        // The step the node is lost in fails, or (when its window ends before Slurm declares
        // the node down) ends with the clients' errors and the next one fails: with Slurm's
        // reason, said once. Then no step can be made there; then the host is down.
        // On a loaded machine the kill can land after the second step's load ended: that step
        // is then ok, and the third is the one that fails with Slurm's reason.
        assert!(
            status[2..].iter().all(|s| *s == "failed" || *s == "errors"),
            "{status:?}"
        );
        let lost = "its host no longer answers: node h1 was lost: its slurmd (";
        let k = (1..5)
            .find(|&k| reason(k).contains(lost))
            .unwrap_or_else(|| panic!("no step says the node was lost: {all_reasons:#?}"));
        assert!(k <= 2, "{all_reasons:#?}");
        assert!(reason(k).contains("on host srv"), "{}", reason(k));
        assert!(
            reason(k).contains(") refused the connection: its Slurm daemon is gone"),
            "{}",
            reason(k)
        );
        assert_eq!(reason(k).matches("was lost").count(), 1, "{}", reason(k));
        assert!(
            reason(k + 1).contains("(slurm://h1) cannot be reached through Slurm"),
            "{all_reasons:#?}"
        );
        for j in k + 2..5 {
            assert!(
                reason(j).contains("\"srv\" was marked down after failing 2 steps in a row"),
                "{all_reasons:#?}"
            );
        }
        assert_eq!(written.len(), 5);
        let noticed = written[k] - killed;
        eprintln!(
            "figures: the step saying the node was lost was written {:.2} s after the loss",
            noticed.as_secs_f64()
        );
        assert!(noticed <= Duration::from_secs(10), "{noticed:?}");
        // Slurm keeps the lost node's steps (ending, never ended) until the node returns or
        // the allocation ends; none is left on the node that lives.
        let elsewhere: Vec<&String> = run
            .steps_left
            .iter()
            .filter(|s| !s.ends_with(" h1"))
            .collect();
        assert!(elsewhere.is_empty(), "steps left: {:?}", run.steps_left);
        eprintln!("figures: steps left on the lost node: {:?}", run.steps_left);
        assert!(took < Duration::from_secs(90), "{took:?}");
    });
}

/// The processes here whose command line holds `needle`.
fn local_processes_with(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            found.push(describe(pid));
        }
    }
    found
}

/// An allocation whose time limit is reached mid-run (salloc's shortest, one minute; slurmctld
/// looks for jobs over their limit every 30 s): the step in progress fails with Slurm's words
/// once, the finished steps stay on disk with the report, the run stops there with why and a
/// non-zero status (salloc does not signal its command: stairbench notices by itself), and
/// nothing is left: no job step, no process on the nodes or here.
#[test]
fn an_allocation_that_ends_mid_run_stops_the_run_with_slurm_s_reason() {
    with_slurm(2, |cluster| {
        let clients: Vec<String> = (1..=60).map(|c| c.to_string()).collect();
        let text = format!(
            "name = \"time-limit\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [{}]\n\
             placements = [\"shared\"]\n[hosts]\n{}{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n\
             [[client.groups]]\nhost = \"c1\"\n",
            clients.join(", "),
            slurm_entry(cluster, "srv", 0),
            slurm_entry(cluster, "c1", 1),
        );
        let started = Instant::now();
        let (child, dir) =
            spawn_in_allocation(cluster, &common::stairbench_bin(), 2, &["--time=1"], &text);
        let run = finish(child, dir);
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&run.out.stdout);
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        let steps = common::steps_json(&run.dir);
        let status: Vec<&str> = steps
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect();
        let reason = |k: usize| steps[k]["reason"].as_str().unwrap_or("").to_string();
        let last = steps.len() - 1;
        eprintln!(
            "figures: the run in a one-minute allocation ended {:.1} s after salloc started, \
             {} steps ({status:?}); the last: {}",
            took.as_secs_f64(),
            steps.len(),
            reason(last)
        );
        for (k, s) in steps
            .iter()
            .enumerate()
            .filter(|(_, s)| s["status"] != "ok")
        {
            eprintln!("figures: step {k}: {} {}", s["status"], reason(k));
        }
        assert_eq!(run.out.status.code(), Some(1), "{stderr}");
        // The time limit is reached at 60 s, seen by slurmctld within 30 s more.
        assert!(took > Duration::from_secs(55), "{took:?}: {stderr}");
        assert!(took < Duration::from_secs(150), "{took:?}: {stderr}");
        // Finished steps are kept; the one in progress failed, with Slurm's words once; none
        // after it.
        assert!(last >= 1, "{status:?}\n{stderr}");
        assert!(status[..last].iter().all(|s| *s == "ok"), "{status:?}");
        assert_eq!(status[last], "failed", "{}", reason(last));
        // srun's words, or (when the step's tasks were only told to stop) the allocation's
        // end as Slurm reports it.
        let words = [
            "DUE TO TIME LIMIT",
            "has expired",
            "already completing",
            "the Slurm allocation",
        ];
        let said: usize = words.iter().map(|w| reason(last).matches(w).count()).sum();
        assert_eq!(said, 1, "{}", reason(last));
        let stopped = stderr
            .lines()
            .find(|l| l.starts_with("stopped: the Slurm allocation "))
            .unwrap_or_else(|| panic!("no stopped line: {stderr}"));
        assert!(
            stopped.contains("has ended") && stopped.contains("no later step was run"),
            "{stopped}"
        );
        assert_eq!(stderr.matches("stopped: ").count(), 1, "{stderr}");
        let notes = std::fs::read_to_string(run.dir.join("notes.txt")).unwrap();
        assert!(notes.contains("the run stopped there"), "{notes}");
        assert!(run.dir.join("report.html").is_file());
        assert!(
            run.steps_left.is_empty(),
            "steps left: {:?}",
            run.steps_left
        );
        // What the checks of quiet channels cost a run whose nodes answer: each is one
        // connection to a slurmd, which logs it as an error line.
        let probes: usize = (cluster.nodes.iter())
            .map(|n| cluster.log(&format!("slurmd-{n}.log")))
            .map(|log| {
                log.matches("service_connection: slurm_receive_msg: Zero Bytes")
                    .count()
            })
            .sum();
        eprintln!(
            "figures: slurmd probes during {} steps: {probes}",
            steps.len()
        );
        assert!(probes <= steps.len(), "{probes} probes");
        let pid = stdout
            .lines()
            .find_map(|l| l.strip_prefix("stairbench-pid: "))
            .unwrap_or_else(|| panic!("no pid line: {stdout}"))
            .trim()
            .to_string();
        let job_steps = format!("--job-name=stairbench-{pid}");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let on_nodes: Vec<String> = (0..2).flat_map(|i| stairbench_on(cluster, i)).collect();
            let here = local_processes_with(&job_steps);
            let alive = Path::new(&format!("/proc/{pid}")).exists();
            if on_nodes.is_empty() && here.is_empty() && !alive {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "left: on the nodes {on_nodes:?}, here {here:?}, stairbench alive: {alive}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    });
}

/// A client group's node lost mid-step: its `stairbench load` does not end with the window,
/// stairbench checks the node's slurmd, finds it gone and fails the step with that reason
/// within 10 s of the loss, without waiting for Slurm to declare the node down; the node is
/// tried once more, then marked down.
#[test]
fn a_client_group_s_node_lost_mid_step_fails_it_within_ten_seconds() {
    with_slurm(2, |cluster| {
        let text = format!(
            "name = \"lost-group\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [1, 2, 3, 4, 5]\n\
             placements = [\"shared\"]\n[hosts]\n{}{}\
             [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n\
             [[client.groups]]\nhost = \"c1\"\n",
            slurm_entry(cluster, "srv", 0),
            slurm_entry(cluster, "c1", 1),
        );
        let LostRun {
            run,
            written,
            killed,
            took,
        } = run_losing_node(cluster, &text, 1, Duration::from_millis(1200));
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        assert_eq!(run.out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&run.dir);
        let reason = |k: usize| steps[k]["reason"].as_str().unwrap_or("").to_string();
        let all_reasons: Vec<String> = (0..steps.len()).map(reason).collect();
        for (k, s) in steps.iter().enumerate() {
            eprintln!("figures: step {k}: {} {}", s["status"], reason(k));
        }
        assert_eq!(steps.len(), 5, "{all_reasons:#?}");
        assert_eq!(steps[0]["status"], "ok", "{all_reasons:#?}");
        let k = (1..5)
            .find(|&k| reason(k).contains("node h2 was lost: its slurmd ("))
            .unwrap_or_else(|| panic!("no step says the node was lost: {all_reasons:#?}"));
        assert!(k <= 2, "{all_reasons:#?}");
        assert_eq!(steps[k]["status"], "failed", "{all_reasons:#?}");
        assert!(reason(k).contains("host c1"), "{}", reason(k));
        assert_eq!(reason(k).matches("was lost").count(), 1, "{}", reason(k));
        assert!(
            reason(4).contains("marked down after failing 2 steps in a row"),
            "{all_reasons:#?}"
        );
        let noticed = written[k] - killed;
        eprintln!(
            "figures: the step saying the client group's node was lost was written {:.2} s after the loss",
            noticed.as_secs_f64()
        );
        assert!(noticed <= Duration::from_secs(10), "{noticed:?}");
        assert!(took < Duration::from_secs(90), "{took:?}");
    });
}

/// The Slurm step environment of the `serve kvd` process of region `region` in node `i`'s
/// namespace, once it runs: `(SLURM_STEP_ID, SLURM_PROCID, SLURM_STEP_NUM_TASKS)`.
fn kvd_task_on(cluster: &SlurmLab, i: usize, region: &str) -> Option<(String, String, String)> {
    crate::netns::ns_pids(&cluster.lab.hosts[i].ns)
        .into_iter()
        .find_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let words: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let at = words.iter().position(|w| *w == b"--name")?;
            let is_kvd =
                words.iter().any(|w| *w == b"kvd") && words.get(at + 1)? == &region.as_bytes();
            is_kvd.then_some(pid)?;
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let var = |k: &str| {
                (environ.split(|&b| b == 0))
                    .find_map(|kv| kv.strip_prefix(format!("{k}=").as_bytes()))
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default()
            };
            Some((
                var("SLURM_STEP_ID"),
                var("SLURM_PROCID"),
                var("SLURM_STEP_NUM_TASKS"),
            ))
        })
}

/// examples/kvd-slurm.toml at 1 s steps, clients 1 and 2 per rank, one placement, rank j on
/// the allocation's node `+nodes[j]`, with region `name`.
fn small_kvd_example(cluster: &SlurmLab, name: &str, nodes: [usize; 2]) -> String {
    let example = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kvd-slurm.toml"),
    )
    .unwrap();
    let text = example
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace("warmup = \"1s\"", "warmup = \"500ms\"")
        .replace("clients = [2, 4, 8, 16, 32]", "clients = [2, 4]")
        .replace(
            "placements = [\"shared\", \"separated\"]",
            "placements = [\"shared\"]",
        )
        .replace(
            "n0 = \"slurm://+0\"\n",
            &slurm_entry(cluster, "n0", nodes[0]),
        )
        .replace(
            "n1 = \"slurm://+1\"\n",
            &slurm_entry(cluster, "n1", nodes[1]),
        )
        .replace("sb-kvd", name);
    assert!(
        text.contains("clients = [2, 4]") && text.contains("workdir") && !text.contains("sb-kvd"),
        "{text}"
    );
    text
}

/// examples/kvd-slurm.toml, short, with its ranks the other way round (rank 0 on the
/// allocation's second node, rank 1 on its first: Slurm numbers a step's tasks in the
/// allocation's node order, not in rank_hosts' order): both ranks run as tasks of ONE job step
/// (the same step id in their environment, two tasks), each on its rank's node with its own
/// region, they answer each other's keys (remote requests counted by both), the client
/// groups' counts merge exactly, and nothing is left once the run ends.
#[test]
fn the_kvd_example_starts_its_ranks_as_one_job_step() {
    let _turn = common::kvd_staircase_turn();
    with_slurm(2, |cluster| {
        let name = common::unique_name("kvds");
        let text = small_kvd_example(cluster, &name, [1, 0]);
        assert!(text.contains("n0 = { url = \"slurm://+1\""), "{text}");
        let started = Instant::now();
        let (child, dir) = spawn_in_allocation(cluster, &common::stairbench_bin(), 2, &[], &text);
        // Rank 0 (region NAME) on h2, rank 1 (NAME-r1) on h1, seen while the run runs.
        let rank1 = format!("{name}-r1");
        let (mut on_h2, mut on_h1) = (None, None);
        while (on_h2.is_none() || on_h1.is_none()) && started.elapsed() < Duration::from_secs(60) {
            on_h2 = on_h2.or_else(|| kvd_task_on(cluster, 1, &name));
            on_h1 = on_h1.or_else(|| kvd_task_on(cluster, 0, &rank1));
            std::thread::sleep(Duration::from_millis(30));
        }
        let run = finish(child, dir);
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        assert!(run.out.status.success(), "{stderr}\n{}", cluster.logs());
        eprintln!(
            "figures: the kvd run inside salloc (2 steps of 1 s) took {:.2} s",
            took.as_secs_f64()
        );
        let (rank0, rank1) = (on_h2.expect("rank 0 on h2"), on_h1.expect("rank 1 on h1"));
        assert_eq!(rank0.0, rank1.0, "one job step: {rank0:?} {rank1:?}");
        assert!(!rank0.0.is_empty(), "{rank0:?}");
        assert_eq!((rank0.2.as_str(), rank1.2.as_str()), ("2", "2"));
        // Task 0 is on the allocation's first node (h1): rank 1's.
        assert_eq!((rank0.1.as_str(), rank1.1.as_str()), ("1", "0"));
        let steps = common::steps_json(&run.dir);
        assert_eq!(steps.len(), 2, "{steps:?}");
        for step in &steps {
            assert_eq!(step["status"], "ok", "{step}");
            assert_eq!(step["error_ratio"].as_f64(), Some(0.0), "{step}");
            crate::hosts::assert_counts_merge_exactly(step, &["n0", "n1"]);
            let urls: Vec<&str> = (step["url"].as_array().expect("url list").iter())
                .filter_map(Value::as_str)
                .collect();
            assert_eq!(urls, [format!("kvd://{name}"), format!("kvd://{name}-r1")]);
            let (_, _, n0) = crate::kvd_hosts::check_rank(step, "kvd", 0);
            let (_, _, n1) = crate::kvd_hosts::check_rank(step, "kvd.r1", 1);
            eprintln!(
                "figures: {} clients: {:.0} req/s, remote requests answered by rank 0 / 1: {n0} / {n1}",
                step["clients"],
                step["throughput_rps"].as_f64().unwrap()
            );
            assert_eq!(step["server"]["host"], "n0", "{step}");
            assert_eq!(step["observed"]["kvd.r1"]["host"], "n1", "{step}");
        }
        let env: Value = serde_json::from_str(
            &std::fs::read_to_string(run.dir.join("environment.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(env["hosts"]["n0"]["hostname"], "h2", "{}", env["hosts"]);
        assert_eq!(env["hosts"]["n1"]["hostname"], "h1", "{}", env["hosts"]);
        assert_nothing_left(cluster, &run, 2);
        for region in [name.clone(), format!("{name}-r1")] {
            let path = format!("/dev/shm/stairbench.shmkv.{region}");
            assert!(!Path::new(&path).exists(), "{path} left behind");
        }
        print_step_start_times(cluster);
    });
}

/// What starting two tasks takes on the test cluster, printed as a figure: one job step over
/// two nodes against two steps of one node, one after the other (as each rank is started on
/// its own host), inside one allocation; medians of 5 alternations.
fn print_step_start_times(cluster: &SlurmLab) {
    let script = r#"t() { date +%s%N; }
for i in 1 2 3 4 5; do
  a=$(t); srun --overlap -N 2 -n 2 --ntasks-per-node=1 --quiet true || exit 1; b=$(t)
  srun --overlap -N 1 -n 1 -w h1 --quiet true && srun --overlap -N 1 -n 1 -w h2 --quiet true || exit 1
  c=$(t); echo "one $(( (b - a) / 1000 )) two $(( (c - b) / 1000 ))"
done"#;
    let out = cluster.run(
        Duration::from_secs(120),
        "salloc",
        &["--quiet", "-N", "2", "sh", "-c", script],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut one_us = Vec::new();
    let mut two_us = Vec::new();
    for line in stdout.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        if let ["one", a, "two", b] = w[..] {
            one_us.push(a.parse::<u64>().unwrap());
            two_us.push(b.parse::<u64>().unwrap());
        }
    }
    assert_eq!(one_us.len(), 5, "{stdout}");
    one_us.sort_unstable();
    two_us.sort_unstable();
    eprintln!(
        "figures: starting 2 tasks: one step over 2 nodes {:.1} ms, two steps of 1 node one after the other {:.1} ms (medians of 5)",
        one_us[2] as f64 / 1e3,
        two_us[2] as f64 / 1e3
    );
}

/// A rank killed mid-run (rank 1's process, on its node): that step fails saying which rank
/// on which host, and the next step starts both ranks again as one job step, which answers
/// remote keys; nothing is left afterwards.
#[test]
fn a_kvd_rank_killed_in_its_job_step_fails_that_step_and_the_next_starts_both_again() {
    let _turn = common::kvd_staircase_turn();
    with_slurm(2, |cluster| {
        let name = common::unique_name("kvdk");
        let text = small_kvd_example(cluster, &name, [0, 1])
            .replace("clients = [2, 4]", "clients = [2, 4, 6]");
        let started = Instant::now();
        let (child, dir) = spawn_in_allocation(cluster, &common::stairbench_bin(), 2, &[], &text);
        let steps_file = dir.join("steps.jsonl");
        while std::fs::read_to_string(&steps_file).map_or(0, |s| s.lines().count()) < 1 {
            assert!(
                started.elapsed() < Duration::from_secs(90),
                "no step finished"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let rank1 = format!("{name}-r1");
        let pid = crate::netns::ns_pids(&cluster.lab.hosts[1].ns)
            .into_iter()
            .find(|&p| describe(p).contains(" serve kvd") && describe(p).contains(&rank1))
            .expect("rank 1 runs on h2");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let run = finish(child, dir);
        let stderr = String::from_utf8_lossy(&run.out.stderr);
        assert_eq!(run.out.status.code(), Some(1), "{stderr}");
        let steps = common::steps_json(&run.dir);
        assert_eq!(steps.len(), 3, "{steps:?}");
        assert_eq!(steps[0]["status"], "ok", "{}", steps[0]);
        assert_eq!(steps[1]["status"], "failed", "{}", steps[1]);
        let reason = steps[1]["reason"].as_str().unwrap();
        assert!(
            reason.contains("rank 1 on host n1") && reason.contains("killed by signal 9"),
            "{reason}"
        );
        assert_eq!(steps[2]["status"], "ok", "{}", steps[2]);
        crate::kvd_hosts::check_rank(&steps[2], "kvd", 0);
        crate::kvd_hosts::check_rank(&steps[2], "kvd.r1", 1);
        assert_nothing_left(cluster, &run, 2);
    });
}
