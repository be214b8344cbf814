//! The runner's leftovers of issues 11 and 16: readiness errors that name the user's address,
//! exit codes by kind of error, client saturation judged per CPU, and observers that cover
//! the load's measured window.

use crate::common;

use std::path::Path;

/// A spec whose one target never listens: `sleep` with a tcp readiness probe.
fn never_ready_spec(dir: &Path, url: &str) -> std::path::PathBuf {
    let spec = dir.join("never.toml");
    let text = format!(
        "name = \"never\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\n\
         [[targets]]\nname = \"mute\"\ncommand = \"sleep 30\"\nurl = \"{url}\"\n\
         ready = {{ tcp = true, timeout = \"1s\" }}\n"
    );
    std::fs::write(&spec, text).unwrap();
    spec
}

#[test]
fn the_readiness_error_names_the_address_of_the_users_url() {
    let dir = tempfile::tempdir().unwrap();
    let spec = never_ready_spec(dir.path(), "http://127.0.0.1:{port}/");
    let out = common::run_spec(&spec, &dir.path().join("picked"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let re = regex::Regex::new(
        r"nothing answered at 127\.0\.0\.1:\d+ \(from url http://127\.0\.0\.1:\{port\}/\)",
    )
    .unwrap();
    assert!(re.is_match(&stderr), "{stderr}");

    // A fixed address in the url is the one probed and named, whatever port was picked.
    let port = common::free_port();
    let spec = never_ready_spec(dir.path(), &format!("http://127.0.0.1:{port}/"));
    let out = common::run_spec(&spec, &dir.path().join("fixed"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "nothing answered at 127.0.0.1:{port} (from url http://127.0.0.1:{port}/)"
        )),
        "{stderr}"
    );
}

#[test]
fn exit_codes_2_for_a_spec_error_1_for_what_could_not_run() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\nbogus = 1\n").unwrap();
    let out = common::run_spec(&bad, &dir.path().join("bad"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bogus"), "{stderr}");

    // A good spec whose output directory cannot be made: the run could not run (1), and
    // the message names the directory.
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        "name = \"good\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\n\
         [[targets]]\nname = \"m\"\nbuiltin = \"msgr\"\n",
    )
    .unwrap();
    let out = common::run_spec(&good, Path::new("/proc/x"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot create the run directory /proc/x"),
        "{stderr}"
    );

    // Nothing listens: the load could not run (1); a bad URL stays a usage error (2).
    let port = common::free_port().to_string();
    let url = format!("http://127.0.0.1:{port}/");
    let out = common::cli(&["load", &url, "-d", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("ECONNREFUSED"), "{stderr}");
    let out = common::cli(&["load", "gopher://127.0.0.1:1/"]);
    assert_eq!(out.status.code(), Some(2));

    // Other commands: a missing input named on the command line is usage (2).
    let out = common::cli(&["topology", "--sysfs", "/nonexistent-sysfs"]);
    assert_eq!(out.status.code(), Some(2));
    let missing = dir.path().join("missing.csv");
    let out = common::cli(&["analyze", missing.to_str().unwrap(), "--x", "clients"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn an_external_tool_filling_one_of_its_two_cpus_is_client_saturated() {
    if crate_cpus() < 2 {
        common::skip_or_fail("needs 2 CPUs for a client cpuset of two");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parsers/wrk_basic.txt");
    // The "tool" spins on the first CPU of its cpuset for 1.5 s, then prints a wrk output:
    // one CPU full, the other idle (or busy with whatever else runs here).
    let spin = dir.path().join("spin.sh");
    std::fs::write(
        &spin,
        "cpu=${1%%[-,]*}\ntaskset -c \"$cpu\" timeout 1.5 sh -c 'while :; do :; done'\ncat \"$2\"\n",
    )
    .unwrap();
    let spec = dir.path().join("spin.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"spin\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [2]\nplacements = [\"shared\"]\n\
             [[targets]]\nname = \"m\"\nbuiltin = \"msgr\"\n\
             [client]\ncommand = \"sh {} {{cpuset}} {}\"\nparser = \"wrk\"\n",
            spin.display(),
            data.display()
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    let load = &steps[0];
    let busy: Vec<f64> = load["client_cpu"]["per_core_busy"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert_eq!(busy.len(), 2, "one figure per CPU of the cpuset: {load:#}");
    assert!(busy.iter().any(|&b| b > 90.0), "{busy:?}");
    assert_eq!(load["client_saturated"], true, "{load:#}");
    // The observers covered the tool's whole run, and the step and report.md say so.
    assert_eq!(
        load["window"],
        "whole run (the tool cannot separate its warm-up)"
    );
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        md.contains(
            "| observed window | whole run (the tool cannot separate its warm-up): 1 of 1 steps |"
        ),
        "{md}"
    );
}

/// Runs `script` (sh, given the test's directory and a wrk output to print) as the external
/// tool of a built-in target split in `instances`; the run's steps.
fn run_tool_script(dir: &Path, script: &str, instances: usize) -> Vec<serde_json::Value> {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/parsers/wrk_basic.txt");
    let tool = dir.join("tool.sh");
    std::fs::write(&tool, script).unwrap();
    let spec = dir.join("tool.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"tool\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [2]\nplacements = [\"shared\"]\n\
             [[targets]]\nname = \"m\"\nbuiltin = \"msgr\"\ninstances = {instances}\n\
             [client]\ncommand = \"sh {} {} {}\"\nparser = \"wrk\"\n",
            tool.display(),
            dir.display(),
            data.display()
        ),
    )
    .unwrap();
    let out_dir = dir.join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    common::steps_json(&out_dir)
}

fn cpu_s(v: &serde_json::Value) -> f64 {
    v["client_cpu"]["user_s"].as_f64().unwrap() + v["client_cpu"]["sys_s"].as_f64().unwrap()
}

/// A shell's `times` (its own and its children's user and system times, `0m0.980000s`
/// each), summed in seconds.
fn times_s(path: &Path) -> f64 {
    let text = std::fs::read_to_string(path).unwrap();
    text.split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').unwrap();
            m.parse::<f64>().unwrap() * 60.0 + s.parse::<f64>().unwrap()
        })
        .sum()
}

/// Spins a fixed number of turns (about 0.35 s of a CPU), whatever else the machine does.
const SPIN: &str = "i=0; while [ $i -lt 500000 ]; do i=$((i+1)); done";

#[test]
fn split_instances_of_an_external_tool_each_report_their_own_cpu() {
    if crate_cpus() < 2 {
        common::skip_or_fail("two instances need 2 CPUs");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The first instance's tool to get here spins, then writes what it used (`times`); the
    // other waits for that file and for the spinner to be reaped, using next to nothing.
    let steps = run_tool_script(
        dir.path(),
        &format!(
            "if mkdir \"$1/first\" 2>/dev/null; then sh -c '{SPIN}'; times > \"$1/spinner.times\"\n\
             else while [ ! -e \"$1/spinner.times\" ]; do sleep 0.05; done; sleep 0.5; fi\n\
             cat \"$2\"\n"
        ),
        2,
    );
    let step = &steps[0];
    assert_eq!(step["status"], "ok", "{step:#}");
    let per = step["per_instance"].as_array().unwrap();
    let mut cpu: Vec<f64> = per.iter().map(cpu_s).collect();
    cpu.sort_by(f64::total_cmp);
    let spinner = times_s(&dir.path().join("spinner.times"));
    eprintln!("instances' client CPU: {cpu:?} s; the spinner's own `times`: {spinner} s");
    // getrusage(RUSAGE_CHILDREN) around each run charged the spinner to the waiter too
    // (0.37 and 0.35 s where the spinner used 0.37 s).
    assert!(
        cpu[0] < 0.3 * spinner,
        "the waiter's CPU is its own: {cpu:?}"
    );
    assert!(
        (cpu[1] - spinner).abs() < 0.1 * spinner + 0.03,
        "the spinner's CPU is what it says it used ({spinner} s): {cpu:?}"
    );
    assert!((cpu_s(step) - cpu[0] - cpu[1]).abs() < 1e-9, "{step:#}");
}

#[test]
fn an_external_tools_orphaned_descendants_are_its_cpu() {
    let dir = tempfile::tempdir().unwrap();
    // The spinner's parent (a subshell) exits at once: the spinner is reparented to
    // stairbench, and the tool's wait4 rusage never sees it. It writes what it used, then
    // lives on a little past the tool's end.
    let steps = run_tool_script(
        dir.path(),
        &format!(
            "(sh -c '{SPIN}; times > \"$1/orphan.times\"; sleep 1' x \"$1\" &)\n\
             while [ ! -e \"$1/orphan.times\" ]; do sleep 0.05; done\ncat \"$2\"\n"
        ),
        1,
    );
    let step = &steps[0];
    assert_eq!(step["status"], "ok", "{step:#}");
    let orphan = times_s(&dir.path().join("orphan.times"));
    let sampled = step["client_cpu_orphans_s"].as_f64().unwrap_or(0.0);
    eprintln!(
        "client CPU {} s, of it orphans {sampled} s; the orphan's own `times`: {orphan} s",
        cpu_s(step)
    );
    assert!(
        (sampled - orphan).abs() < 0.1 * orphan + 0.03,
        "the orphan used {orphan} s: {step:#}"
    );
    assert!(
        cpu_s(step) >= sampled && cpu_s(step) < sampled + 0.3 * orphan,
        "{step:#}"
    );
}

fn crate_cpus() -> usize {
    stairbench::cpuset::allowed().len()
}

/// The observed window (`server.window_s`) and the load's `duration_s` of each step of a
/// built-in-engine run against the bundled messenger server (split in `instances`) with
/// `warmup`.
fn windows_of_a_run(dir: &Path, warmup: &str, instances: usize) -> Vec<(f64, f64)> {
    let spec = dir.join(format!("w{warmup}-{instances}.toml"));
    std::fs::write(
        &spec,
        format!(
            "name = \"window\"\nduration = \"1s\"\nwarmup = \"{warmup}\"\nclients = [32]\n\
             placements = [\"shared\"]\n[[targets]]\nname = \"m\"\nbuiltin = \"msgr\"\n\
             instances = {instances}\n"
        ),
    )
    .unwrap();
    let out_dir = dir.join(format!("run{warmup}-{instances}"));
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    common::steps_json(&out_dir)
        .iter()
        .map(|s| {
            let observed = s["server"]["window_s"].as_f64().unwrap();
            (observed, s["duration_s"].as_f64().unwrap())
        })
        .collect()
}

#[test]
fn the_observers_window_is_the_loads_measured_window() {
    let dir = tempfile::tempdir().unwrap();
    // Without a warm-up the connections are opened before the window; with one, the threads
    // drain and join after it: neither is inside the observed span any more.
    // Split instances: the parts' windows, from the first start to the last end.
    for (warmup, instances) in [("0s", 1), ("300ms", 1), ("0s", 2), ("300ms", 2)] {
        let windows = windows_of_a_run(dir.path(), warmup, instances);
        assert!(!windows.is_empty());
        for (observed_s, duration_s) in windows {
            // The bug this guards against added 156-188 ms: over by 75 ms at most. Under: the
            // observer's thread woken late on a loaded 2-core machine (0.964 s seen at load
            // average 13; 0.947 and 0.949 s with 300 ms of warm-up, 0.923 s without, in full
            // parallel test runs of CI): 120 ms at most.
            let over_s = observed_s - duration_s;
            assert!(
                over_s < 0.075 && over_s > -0.12,
                "warm-up {warmup}, {instances} instance(s): observed {observed_s} s, \
                 load window {duration_s} s"
            );
        }
    }
}
