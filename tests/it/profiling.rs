//! Profiles inside runs: real short runs of the built-in msgr server with a `[profile]`
//! section, checked through the run directory and report.md. Skipped with a reason where perf
//! cannot record.

use crate::common;

use std::path::Path;
use std::process::Command;

use stairbench::record::profiles::{read_lines, PassRecord, ProfileLine};

/// Why perf cannot record here, if it cannot.
fn perf_unusable() -> Option<String> {
    if let Err(e) = stairbench::profile::capture::check_perf() {
        return Some(e.to_string());
    }
    let out = Command::new("perf")
        .args(["record", "-q", "-o", "/dev/null", "-e", "cpu-clock", "true"])
        .output()
        .ok()?;
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).trim().to_string())
}

fn spec(clients: &str, profile: &str) -> String {
    format!(
        r#"name = "prof"
duration = "1s"
warmup = "300ms"
clients = {clients}
[[targets]]
name = "reactor"
builtin = "msgr --arch reactor --threads 1"
[profile]
{profile}
"#
    )
}

/// Runs `stairbench run` on a spec into `dir/out`; `path` replaces PATH for the run.
fn run(dir: &Path, text: &str, path: Option<&str>) -> std::path::PathBuf {
    let spec = dir.join("spec.toml");
    std::fs::write(&spec, text).unwrap();
    let out = dir.join("out");
    let mut cmd = common::cli_cmd();
    cmd.arg("run").arg(&spec).arg("--out").arg(&out);
    if let Some(p) = path {
        cmd.env("PATH", p);
    }
    let result = cmd.output().unwrap();
    assert!(
        result.status.success(),
        "stairbench run failed:\n{}",
        String::from_utf8_lossy(&result.stderr)
    );
    out
}

fn passes(out: &Path) -> Vec<PassRecord> {
    read_lines(out)
        .into_iter()
        .filter_map(|l| match l {
            ProfileLine::Pass(p) => Some(p),
            _ => None,
        })
        .collect()
}

#[test]
fn an_explicit_level_gets_its_profile_and_report_section() {
    if let Some(why) = perf_unusable() {
        common::skip_or_fail(format!("perf cannot record here: {why}"));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = run(tmp.path(), &spec("[1, 2]", "at = [2]\nseconds = 1\n"), None);
    let step = out.join("profiles/reactor.shared.c2.r0");
    let folded = std::fs::read_to_string(step.join("cpu.folded")).unwrap();
    assert!(folded.lines().count() > 0, "empty folded stacks");
    let svg = std::fs::read_to_string(step.join("cpu.svg")).unwrap();
    assert!(svg.contains("<svg"), "not an SVG");
    let pass = &passes(&out)[0];
    assert!(pass.ok, "{pass:?}");
    assert_eq!(pass.levels, ["requested"]);
    let during = pass.throughput_rps.unwrap();
    assert!(during > 0.0 && pass.step_throughput_rps > 0.0, "{pass:?}");
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("## Profiles"), "{md}");
    assert!(
        md.contains(&format!(
            "Throughput while profiling: {during:.0} requests/s"
        )),
        "{md}"
    );
    assert!(
        md.contains("[flame graph](profiles/reactor.shared.c2.r0/cpu.svg)"),
        "{md}"
    );
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("href=\"profiles/reactor.shared.c2.r0/cpu.svg\""));
}

#[test]
fn busy_and_saturated_get_a_differential_graph() {
    if let Some(why) = perf_unusable() {
        common::skip_or_fail(format!("perf cannot record here: {why}"));
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = run(
        tmp.path(),
        &spec("[1, 2, 8]", "at = [\"busy\", \"saturated\"]\nseconds = 1\n"),
        None,
    );
    let passes = passes(&out);
    let step_of = |level: &str| {
        passes
            .iter()
            .find(|p| p.levels.iter().any(|l| l == level))
            .map(|p| (p.clients, p.step.clone()))
    };
    let lines = read_lines(&out);
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    match (step_of("busy"), step_of("saturated")) {
        (Some(a), Some(b)) if a.1 != b.1 => {
            let (low, high) = if a.0 < b.0 { (a, b) } else { (b, a) };
            let diff = out.join(format!("profiles/diff-{}-vs-{}", low.1, high.1));
            assert!(diff.join("cpu.diff.svg").exists(), "{lines:?}");
            assert!(md.contains("differential flame graph"), "{md}");
        }
        // The machine put both at one level (or had no busy point): the report says so.
        _ => assert!(
            md.contains("no differential graph") || md.contains("no busy point"),
            "{md}"
        ),
    }
}

#[test]
fn without_perf_the_run_goes_on_and_the_report_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("no-perf-here");
    std::fs::create_dir_all(&empty).unwrap();
    let out = run(
        tmp.path(),
        &spec("[1]", "at = [1]\nseconds = 1\n"),
        Some(empty.to_str().unwrap()),
    );
    let steps = std::fs::read_to_string(out.join("steps.jsonl")).unwrap();
    assert!(steps.contains("\"status\":\"ok\""), "{steps}");
    assert!(!out.join("profiles").exists());
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(
        md.contains("- reactor / shared: no profile: perf is not installed"),
        "{md}"
    );
}

#[test]
fn dry_run_lists_the_profile_passes() {
    let tmp = tempfile::tempdir().unwrap();
    let spec_path = tmp.path().join("spec.toml");
    std::fs::write(
        &spec_path,
        spec("[1, 2, 4]", "at = [\"busy\", 4]\nseconds = 3\n"),
    )
    .unwrap();
    let out = common::cli_cmd()
        .args(["run", "--dry-run"])
        .arg(&spec_path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("profile passes after each series' measured steps: at busy, 4 clients; perf records the server for 3 s"),
        "{text}"
    );
    assert!(
        text.contains("reactor / shared: busy (decided when the series' steps are done), profiles/reactor.shared.c4.r0/"),
        "{text}"
    );
}

#[test]
fn a_bad_profile_section_is_located() {
    let tmp = tempfile::tempdir().unwrap();
    let spec_path = tmp.path().join("bad.toml");
    std::fs::write(&spec_path, spec("[1, 2]", "at = [3]\n")).unwrap();
    let out = common::cli_cmd()
        .args(["run", "--dry-run"])
        .arg(&spec_path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad.toml:9:7: profile.at[0]:"), "{err}");
    assert!(
        err.contains("3 clients is not a step of the series"),
        "{err}"
    );
}

#[test]
fn with_fakes_a_pass_runs_after_the_series_and_a_target_without_pid_is_explained() {
    use stairbench::fleet::driver::FakeDriver;
    use stairbench::fleet::server::FakeLauncher;
    use stairbench::observe::step::NullObserver;
    use stairbench::placement::TopologyPlacements;
    use stairbench::record::rundir::RunDir;
    use stairbench::sweep::plan::Plan;
    use stairbench::sweep::progress::Quiet;
    use stairbench::sweep::runner::Runner;
    use stairbench::sweep::spec::SpecFile;
    use std::sync::atomic::AtomicBool;

    let text = spec("[1, 2, 4]", "at = [2]\nseconds = 0.2\n");
    let spec = SpecFile::parse(Path::new("spec.toml"), &text).unwrap();
    let plan = Plan::new(spec, common::stairbench_bin()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut dir = RunDir::create(Some(tmp.path()), &plan.name).unwrap();
    let mut driver = FakeDriver::new(|c| 1000.0 * c as f64);
    let placements = TopologyPlacements::with_cpus(vec![0, 1, 2, 3], plan.custom.clone());
    let stop = AtomicBool::new(false);
    let summary = Runner {
        plan: &plan,
        dir: &mut dir,
        launcher: &mut FakeLauncher::default(),
        driver: &mut driver,
        observer: &mut NullObserver,
        placements: &placements,
        progress: &mut Quiet,
        stop: &stop,
    }
    .run()
    .unwrap();
    assert_eq!(summary.steps.len(), 3, "the pass is not a step");
    let lines = read_lines(tmp.path());
    match &lines[..] {
        [ProfileLine::Pass(p)] => {
            assert!(!p.ok);
            assert_eq!(
                p.reason.as_deref(),
                Some("the target has no process id to record")
            );
            assert_eq!(p.step_throughput_rps, 2000.0);
            assert!(p.throughput_rps.is_some());
            let last = driver.seen.last().unwrap();
            assert_eq!(last.step_id, "reactor.shared.c2.r0.profile");
            assert_eq!(last.clients, 2);
        }
        [ProfileLine::Missing(m)] => assert!(m.reason.contains("perf"), "{m:?}"),
        other => panic!("{other:?}"),
    }
}
