//! Seed 003's experiment on real software: a short examples/tomcat.toml (Debian's tomcat10
//! started by examples/tomcat.sh) through the built-in HTTP client, with its profile passes
//! and its diagnosis. In the solo binary: a JVM warming up beside other tests recompiles and
//! frees JIT code during the recording, and the map written after it cannot name that code
//! (CI saw 48% of the Java samples unnamed there, 0% alone); a map taken as the recording
//! starts, merged with the last one, names that code too.

use std::path::{Path, PathBuf};

use serde_json::Value;
use stairbench::analyze::run::diagnosis::resources::{Resource, State};
use stairbench::analyze::run::diagnosis::{Limit, Metric};

use crate::common;

use crate::common::tomcat_available;
use crate::diagnosis::{analyze_json, figure, row};

/// A profile pass of a JVM: its perf map was written and kept beside the perf script, and
/// under 10% of the samples running Java code carry an unnamed JIT frame (`[perf-PID.map]`;
/// 100% before stairbench asked the JVM for its map). Shared with the Tomcat vs Netty test.
pub fn assert_jit_frames_named(pass: &Value, dir: &Path) {
    let jvms = pass["jvms"].as_array().expect("a JVM was recorded");
    assert!(!jvms.is_empty(), "{pass:#}");
    for j in jvms {
        let map = j["map_file"].as_str().unwrap_or_else(|| panic!("{j:#}"));
        assert!(dir.join(map).is_file(), "{} has no {map}", dir.display());
        assert!(j["symbols"].as_u64().unwrap() > 100, "{j:#}");
        // the example scripts start their JVMs with frame pointers: no advice is due
        assert_eq!(j["preserve_frame_pointer"], true, "{j:#}");
    }
    let cpu = pass["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == "cpu")
        .expect("a cpu event");
    let java = &cpu["java"];
    let java_pct = java["java_pct"]
        .as_f64()
        .unwrap_or_else(|| panic!("{cpu:#}"));
    assert!(java_pct > 5.0, "so little Java code: {cpu:#}");
    let unnamed = java["unnamed_jit_pct"].as_f64().unwrap();
    eprintln!("{}: {java_pct:.0}% of the samples run Java, {unnamed:.1}% of those with an unnamed JIT frame", dir.display());
    assert!(
        unnamed < 10.0,
        "{unnamed:.1}% of the Java samples have an unnamed JIT frame"
    );
    // the full graph is drawn with the java palette: JIT-compiled Java green (red under 120,
    // green over 190), which the default palette never draws (its red is 205 or more)
    let svg = std::fs::read_to_string(dir.join("cpu.svg")).unwrap();
    let green = svg.split("fill=\"rgb(").skip(1).any(|rest| {
        let rgb: Vec<u32> = rest
            .split(')')
            .next()
            .unwrap()
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        rgb.len() == 3 && rgb[0] < 120 && rgb[1] > 190
    });
    assert!(green, "{}/cpu.svg has no green (Java) frame", dir.display());
}

#[test]
fn a_short_tomcat_staircase_has_thread_figures_profiles_and_a_diagnosis() {
    let _alone = crate::alone();
    if !tomcat_available() {
        return;
    }
    let (_dir, out) = run_short_example(
        "tomcat.toml",
        &[
            ("duration = \"5s\"", "duration = \"1s\""),
            ("warmup = \"3s\"", "warmup = \"1s\""),
            (
                "clients = [1, 2, 4, 8, 16, 32, 64, 128]",
                "clients = [1, 8]",
            ),
            ("seconds = 5", "seconds = 1"),
        ],
        &[],
    );

    let steps = common::steps_json(&out);
    assert_eq!(steps.len(), 2, "{steps:?}");
    for s in &steps {
        assert_eq!(s["status"], "ok", "{s:#}");
        assert!(s["requests"].as_u64().unwrap() > 0, "{s:#}");
        // The connector's pool, named by tomcat.sh, shows as one merged thread group.
        let groups = s["server"]["threads"]["groups"].as_array().unwrap();
        assert!(
            groups.iter().any(|g| g["name"] == "tomcat-exec"),
            "{groups:?}"
        );
    }

    let (lines, passes) = profile_passes(&out);
    assert!(!passes.is_empty(), "{lines}");
    for p in &passes {
        if p["ok"] == true {
            let d = out.join(p["dir"].as_str().unwrap());
            for f in ["cpu.user.svg", "cpu.kernel.svg"] {
                assert!(d.join(f).is_file(), "{} has no {f}", d.display());
            }
            assert_jit_frames_named(p, &d);
        } else {
            // Without perf the run goes on and says why (CI has perf: it must work there).
            assert!(!common::in_ci(), "{p:#}");
            assert!(p["reason"].as_str().is_some_and(|r| !r.is_empty()), "{p:#}");
        }
    }

    let list = analyze_json(&out);
    let d = list.first().expect("no diagnosis");
    assert_eq!(d.target, "tomcat", "{d:#?}");
    eprintln!("tomcat: {} ({})", d.sentence, d.limit);
    // Tomcat's one CPU fills (docs/analysis.md: 95% busy from 4 clients on, CPU per request
    // falling): catches a client, neighbour, oversubscription or undetermined reading.
    assert_eq!(d.limit, Limit::ServerCpu, "{d:#?}");
    assert!(figure(d, Metric::ServerCpuPct) >= 90.0, "{d:#?}");
    let sentence = d.sentence.as_str();
    assert!(sentence.starts_with("tomcat/separated "), "{sentence}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains(sentence),
        "report.md does not open with the diagnosis"
    );
}

/// Runs `examples/NAME` made short by `edits` (each `(from, to)` must apply; the spec must
/// also hold each of `keeps`), with `{spec_dir}` the examples directory: the temporary
/// directory (kept while the test reads the run) and the run directory in it.
fn run_short_example(
    name: &str,
    edits: &[(&str, &str)],
    keeps: &[&str],
) -> (tempfile::TempDir, PathBuf) {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut spec = std::fs::read_to_string(examples.join(name)).unwrap();
    for (from, to) in edits {
        assert!(spec.contains(from), "{name} no longer holds {from:?}");
        spec = spec.replace(from, to);
    }
    for keep in keeps {
        assert!(spec.contains(keep), "{name} no longer holds {keep:?}");
    }
    let spec = spec.replace("{spec_dir}", examples.to_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let spec_path = dir.path().join(name);
    std::fs::write(&spec_path, spec).unwrap();
    let out = dir.path().join("run");
    common::assert_success(&common::run_spec(&spec_path, &out));
    (dir, out)
}

/// Debian's libnetty-java and a JDK's javac (examples/netty.sh compiles NettyHello.java).
fn netty_available() -> bool {
    if !Path::new("/usr/share/java/netty-codec-http.jar").is_file()
        || common::find_program("javac").is_none()
    {
        common::skip_or_fail(
            "libnetty-java (with javac) is not installed (Debian: apt-get install libnetty-java default-jdk-headless)",
        );
        return false;
    }
    true
}

/// The whole study, short: Tomcat and Netty under the same staircase with three repetitions,
/// a throughput and a CPU-per-request verdict (Welch's t-test) at each level, both JVMs'
/// JIT frames named, and the off-CPU chain graph with its cost and its largest paths.
#[test]
fn tomcat_and_netty_are_compared_with_a_verdict_at_each_level() {
    let _alone = crate::alone();
    if !tomcat_available() || !netty_available() {
        return;
    }
    let (_dir, out) = run_short_example(
        "tomcat-vs-netty.toml",
        &[
            ("duration = \"3s\"", "duration = \"1s\""),
            ("warmup = \"2s\"", "warmup = \"1s\""),
            ("clients = [1, 4, 16, 64]", "clients = [1, 16]"),
            ("seconds = 3", "seconds = 1"),
        ],
        &["repetitions = 3", "\"offcpu\""],
    );

    let steps = common::steps_json(&out);
    assert_eq!(steps.len(), 2 * 2 * 3, "{steps:?}");
    for s in steps.iter().filter(|s| s["target"] == "netty") {
        assert_eq!(s["status"], "ok", "{s:#}");
        let groups = s["server"]["threads"]["groups"].as_array().unwrap();
        assert!(groups.iter().any(|g| g["name"] == "netty-io"), "{groups:?}");
    }

    let analysis: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("analysis.json")).unwrap()).unwrap();
    for metric in ["throughput_rps", "cpu_us_per_req"] {
        for clients in [1, 16] {
            let c = analysis["comparisons"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["metric"] == metric && c["a"]["clients"] == clients)
                .unwrap_or_else(|| panic!("no {metric} comparison at {clients} clients"));
            let r = &c["relation"];
            assert!(
                ["faster", "slower", "equal", "within noise"]
                    .contains(&r["verdict"].as_str().unwrap()),
                "{c:#}"
            );
            assert!(r["p_value"].as_f64().is_some(), "no test: {c:#}");
        }
    }

    let (lines, passes) = profile_passes(&out);
    for server in ["tomcat", "netty"] {
        let ok: Vec<&Value> = passes
            .iter()
            .filter(|p| p["target"] == server && p["ok"] == true)
            .collect();
        assert!(!ok.is_empty(), "{server}: no profile: {lines}");
        for p in ok {
            let d = out.join(p["dir"].as_str().unwrap());
            assert_jit_frames_named(p, &d);
            let offcpu = p["events"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["event"] == "offcpu")
                .unwrap_or_else(|| panic!("no off-CPU chains: {p:#}"));
            let cost = &offcpu["cost"];
            assert!(cost["events"].as_u64().unwrap() > 0, "{offcpu:#}");
            assert!(
                cost["perf_data_mb_per_s"].as_f64().unwrap() > 0.0,
                "{offcpu:#}"
            );
            let paths = cost["paths"].as_array().unwrap();
            // the server's own event-loop or pool threads block and are woken
            let own = if server == "tomcat" {
                "tomcat-exec"
            } else {
                "netty-io"
            };
            assert!(
                paths.iter().any(|x| x["blocked_thread"] == own),
                "{server}: {paths:#?}"
            );
            assert!(d.join("offcpu.svg").is_file() && d.join("offcpu.paths.md").is_file());
        }
    }
}

/// The run's profiles.jsonl (its text, for messages) and its profile passes.
fn profile_passes(out: &Path) -> (String, Vec<Value>) {
    let lines = std::fs::read_to_string(out.join("profiles.jsonl")).unwrap();
    let passes = lines
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["kind"] == "pass")
        .collect();
    (lines, passes)
}

/// The JVM's own view of Tomcat's pool (tomcat.sh's /jvm-threads: "THREADS BLOCKED"), from the
/// port the java process listens on, polled during the run.
const JVM_THREADS: &str =
    "p=$(ss -Hltnp | grep '\"java\"' | awk '{print $4}' | sed 's/.*://' | head -1) && \
     [ -n \"$p\" ] && curl -s --max-time 1 http://127.0.0.1:$p/jvm-threads";

/// Issue 40's lock in a JVM (examples/limits-jvm-lock.toml): Tomcat's JSP holds one monitor
/// for 2 ms a request while it sleeps, so Tomcat's CPUs and the client idle while its pool's
/// threads wait. Before the lock rule it read `outside` ("the limit is outside both
/// processes"), although the locks row of its own resource table was saturated. Confirmed by
/// the JVM's own thread states: the most pool threads BLOCKED on a monitor in one poll.
#[test]
fn a_tomcat_whose_threads_wait_on_one_monitor_is_contention_on_a_lock() {
    let _alone = crate::alone();
    if !tomcat_available() {
        return;
    }
    let poll = crate::limits_io::Poll::start(JVM_THREADS);
    let run = crate::diagnosis::run_example("limits-jvm-lock", &["ss", "curl"]);
    let seen = poll.finish();
    let Some((d, _)) = run else {
        return;
    };
    let blocked = seen
        .iter()
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let sentence = d.sentence.as_str();
    eprintln!("limits-jvm-lock: the JVM saw at most {blocked} pool threads BLOCKED; {sentence}");
    assert_eq!(d.limit, Limit::Contention, "{d:#?}");
    // Its resource table's locks row is full: the server's threads spent most of their working
    // time waiting on locks, more of them as the load grew. Either rule may name it: the lock
    // rule from that row, or `contention` first when the switches per request grew too (a CI
    // run: 2.46 to 4.29).
    let locks = row(&d, Resource::Locks);
    assert_eq!(locks.state, State::Saturated, "{d:#?}");
    let share = locks
        .time_share_pct
        .unwrap_or_else(|| panic!("no time share in the locks row: {d:#?}"));
    assert!(share >= 50.0, "{d:#?}");
    if sentence.contains("contention on a lock") {
        // 16 clients, one request holding the monitor: most of the others wait for it, as
        // the JVM's own thread states say too.
        let grew = figure(&d, Metric::LockWaitingThreads);
        assert!(grew >= 6.0, "{d:#?}");
    }
    assert!(
        blocked >= 8,
        "the JVM saw at most {blocked} threads BLOCKED"
    );
}
