//! The staircase runner: specs, plans, the step loop with fakes, the run directory, and real
//! runs of the binary (a short sweep, an interruption, a dying server).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stairbench::cli::run::write_reports;
use stairbench::fleet::driver::{Driver, EngineDriver, FakeDriver, StepLoad, StepRequest};
use stairbench::fleet::error::StepError;
use stairbench::fleet::server::{FakeLauncher, Launcher, ProcessLauncher};
use stairbench::observe::step::NullObserver;
use stairbench::placement::TopologyPlacements;
use stairbench::record::load::IntervalSink;
use stairbench::record::rundir::RunDir;
use stairbench::record::steps::{read_steps, ErrorKind, StepResult, StepStatus};
use stairbench::sweep::experiment::finish_dir;
use stairbench::sweep::plan::{Plan, Series};
use stairbench::sweep::progress::Quiet;
use stairbench::sweep::runner::{RunEnd, RunSummary, Runner};
use stairbench::sweep::spec::SpecFile;

fn plan(text: &str) -> Plan {
    plan_at(Path::new("spec.toml"), text)
}

fn plan_at(path: &Path, text: &str) -> Plan {
    let spec = SpecFile::parse(path, text).unwrap_or_else(|e| panic!("{e}"));
    Plan::new(spec, common::stairbench_bin()).unwrap_or_else(|e| panic!("{e}"))
}

fn spec_error(text: &str) -> String {
    match SpecFile::parse(Path::new("bad.toml"), text) {
        Err(e) => e.to_string(),
        Ok(spec) => match Plan::new(spec, common::stairbench_bin()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted a bad spec:\n{text}"),
        },
    }
}

/// The planned steps: a series that fell past its peak (noise on this machine can make a real
/// server's do so) adds a drift check, its peak measured again.
fn planned(steps: Vec<StepResult>) -> Vec<StepResult> {
    steps
        .into_iter()
        .filter(|s| !s.figures.drift_check)
        .collect()
}

/// Runs the loop with fakes over 4 CPUs.
fn run_fake(
    plan: &Plan,
    dir: &Path,
    driver: &mut dyn Driver,
    launcher: &mut dyn Launcher,
    stop: &AtomicBool,
) -> RunSummary {
    run_fake_on(vec![0, 1, 2, 3], plan, dir, driver, launcher, stop)
}

/// `run_fake` on a machine of `cpus` (this machine's own when real servers are pinned).
fn run_fake_on(
    cpus: Vec<usize>,
    plan: &Plan,
    dir: &Path,
    driver: &mut dyn Driver,
    launcher: &mut dyn Launcher,
    stop: &AtomicBool,
) -> RunSummary {
    let mut rundir = RunDir::create(Some(dir), &plan.name).unwrap();
    let placements = TopologyPlacements::with_cpus(cpus, plan.custom.clone());
    let mut runner = Runner {
        plan,
        dir: &mut rundir,
        launcher,
        driver,
        observer: &mut NullObserver,
        placements: &placements,
        progress: &mut Quiet,
        stop,
    };
    let summary = runner.run().unwrap();
    finish_dir(&rundir, &summary).unwrap();
    write_reports(&rundir.path).unwrap();
    summary
}

fn schema_errors(dir: &Path) -> Vec<String> {
    let schema: serde_json::Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    let text = std::fs::read_to_string(dir.join("steps.jsonl")).unwrap();
    text.lines()
        .flat_map(|l| crate::schema::validate(&schema, &serde_json::from_str(l).unwrap()))
        .collect()
}

const TWO_TARGETS: &str = r#"
name = "fake"
duration = "2s"
warmup = "0s"
clients = { from = 1, to = 16, double = true }
placements = ["shared", "separated"]
[[targets]]
name = "a"
builtin = "msgr --arch reactor"
[[targets]]
name = "b"
builtin = "msgr --arch pool"
"#;

/// Every example plans, starts with a comment saying what it reproduces and how to run it,
/// and `stairbench run EXAMPLE --dry-run` works on this machine.
#[test]
fn every_example_spec_plans_and_dry_runs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            if text.contains("\"slurm://") {
                // Planned only inside an allocation (tests/it/slurm.rs runs it in one); outside,
                // the spec reads up to its hosts, which say what to run.
                let out = common::cli_cmd()
                    .args(["run", "--dry-run"])
                    .arg(&path)
                    .env_remove("SLURM_JOB_ID")
                    .output()
                    .unwrap();
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(2), "{}: {stderr}", path.display());
                assert!(
                    stderr.contains("not inside a Slurm allocation")
                        && stderr.contains("salloc -N"),
                    "{stderr}"
                );
                continue;
            }
            let p = plan_at(&path, &text);
            assert!(p.max_steps() > 0, "{}", path.display());
            assert!(
                text.starts_with("# ") && text.contains("stairbench run examples/"),
                "{}: no comment header saying what it is and how to run it",
                path.display()
            );
            let out = common::cli_cmd()
                .args(["run", "--dry-run"])
                .arg(&path)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("estimated time: about"),
                "{}: {stdout}{}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            n += 1;
        }
    }
    assert!(n >= 6, "{n} examples");
    let demo = plan(&stairbench::cli::run::demo_spec(false));
    assert_eq!(demo.series, Series::Clients(vec![1, 2, 4, 8, 16, 32]));
    assert_eq!(demo.max_steps(), 60);
    assert!(demo.estimate() < Duration::from_secs(180));
    assert!(plan(&stairbench::cli::run::demo_spec(true)).estimate() < Duration::from_secs(25));
}

#[test]
fn bad_specs_name_file_line_column_and_key() {
    let cases = [
        ("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\nreadyy = {}\n", "bad.toml:6:1: targets[0].readyy: unknown field `readyy`"),
        ("name = \"x\"\nclients = [1, \"two\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:2:"),
        ("name = \"x\"\nclients = { from = 1, to = 8 }\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:2:11: clients: expected step = N or double = true"),
        ("name = \"x\"\nclients = [1]\nwarmup = 5\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:3:10: warmup: expected a duration string"),
        ("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"a\"\nbuiltin = \"nginx\"\n", "bad.toml:5:11: targets[0].builtin:"),
        ("name = \"x\"\nclients = [1]\non_failure = \"retry\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:3:14: on_failure: unknown variant `retry`, expected `continue` or `stop`"),
        ("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n[targets.ready]\nlog = \"(\"\n", "bad.toml:7:7: targets[0].ready.log: bad regex"),
        ("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr --arch reactr\"\n", "bad.toml:5:11: targets[0].builtin: invalid value 'reactr' for '--arch"),
        ("name = \"x\"\nclients = [1]\n[client]\ncommand = \"wrk\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:4:11: client.command: an external client needs parser"),
        // Every enumerated value names its nearest known one.
        ("name = \"x\"\nclients = [1]\non_failure = \"stpo\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:3:14: on_failure: unknown variant `stpo` (did you mean `stop`?); expected `continue` or `stop`"),
        ("name = \"x\"\nclients = [1]\nplacements = [\"seperated\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n", "bad.toml:3:15: placements[0]: unknown placement \"seperated\" (did you mean \"separated\"?)"),
        // A url that disagrees with the target's port fails here, not as N skipped steps.
        ("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"a\"\ncommand = \"nginx -p {port}\"\nport = 8080\nurl = \"http://127.0.0.1:8081/\"\n", "bad.toml:7:7: targets[0].url: \"http://127.0.0.1:8081/\" points at port 8081, but the target's port is 8080"),
        ("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"a\"\ncommand = \"srv --port {port}\"\nurl = \"http://127.0.0.1:8081/\"\n", "bad.toml:6:7: targets[0].url: \"http://127.0.0.1:8081/\" points at port 8081, but the target is started on a free port"),
    ];
    for (text, want) in cases {
        let got = spec_error(text);
        assert!(
            got.starts_with(want),
            "spec:\n{text}\nwant prefix: {want}\ngot: {got}"
        );
    }
}

#[test]
fn a_client_command_gets_the_spec_directory() {
    // A directory with a space: the placeholder is one shell word, quoted.
    let dir = tempfile::tempdir().unwrap();
    let specs = dir.path().join("my specs");
    std::fs::create_dir(&specs).unwrap();
    let p = plan_at(
        &specs.join("pg.toml"),
        "name = \"pg\"\nclients = [1]\nplacements = [\"shared\"]\n\
         [[targets]]\nname = \"m\"\nbuiltin = \"msgr\"\n\
         [client]\ncommand = \"pgbench -f {spec_dir}/hot.sql -c {clients}\"\nparser = \"regex\"\n\
         parser_options = { pattern = 'processed: (?P<requests>[0-9]+)' }\n",
    );
    let stairbench::sweep::plan::ClientPlan::Command { template, .. } = &p.client else {
        panic!("not a command client");
    };
    let canonical = std::fs::canonicalize(&specs).unwrap();
    assert_eq!(
        template,
        &format!(
            "pgbench -f '{}'/hot.sql -c {{clients}}",
            canonical.display()
        )
    );
}

#[test]
fn plan_expands_ranges_repetitions_and_rate_series() {
    let p = plan("name = \"x\"\nclients = { from = 50, to = 200, step = 50 }\nrepetitions = 3\nplacements = [\"shared\", \"balanced\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    assert_eq!(p.series, Series::Clients(vec![50, 100, 150, 200]));
    assert_eq!(p.max_steps(), 4 * 3 * 2);
    let r = plan("name = \"x\"\nclients = 8\nrate = { from = 1000, to = 3000, step = 1000 }\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    assert_eq!(
        r.series,
        Series::Rates {
            rates: vec![1000.0, 2000.0, 3000.0],
            clients: 8
        }
    );
}

#[test]
fn fake_loop_writes_each_step_and_the_reports() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(TWO_TARGETS);
    let mut driver = FakeDriver::new(|c| 1000.0 * c as f64);
    driver.fail_ids.push("b.shared.c4.r0".into());
    let mut launcher = FakeLauncher::default();
    let summary = run_fake(
        &p,
        dir.path(),
        &mut driver,
        &mut launcher,
        &AtomicBool::new(false),
    );
    assert_eq!(summary.end, RunEnd::Completed);
    // 2 targets × 2 placements × 5 counts, one server per series.
    assert_eq!(summary.steps.len(), 20);
    assert_eq!(launcher.launches, 4);
    let steps = read_steps(&dir.path().join("steps.jsonl")).unwrap();
    let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids[..3],
        ["a.shared.c1.r0", "a.shared.c2.r0", "a.shared.c4.r0"]
    );
    let failed: Vec<_> = steps
        .iter()
        .filter(|s| s.status == StepStatus::Failed)
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(
        failed[0].reason.as_deref(),
        Some("scripted failure of b.shared.c4.r0")
    );
    let ok = steps.iter().find(|s| s.id == "a.separated.c8.r0").unwrap();
    assert_eq!(ok.throughput_rps(), Some(8000.0));
    assert_eq!(
        (ok.server_cpus.as_str(), ok.client_cpus.as_str()),
        ("0-1", "2-3")
    );
    assert_eq!(ok.inflight, 8);
    for file in [
        "report.md",
        "steps.csv",
        "intervals/a.shared.c1.r0.csv",
        "hist/a.shared.c1.r0.hlog",
    ] {
        assert!(dir.path().join(file).exists(), "{file} missing");
    }
    let intervals =
        std::fs::read_to_string(dir.path().join("intervals/a.shared.c2.r0.csv")).unwrap();
    assert_eq!(
        intervals.lines().count(),
        3,
        "a header and 2 one-second lines:\n{intervals}"
    );
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(
        report.contains("20 steps: 19 ok, 1 failed, 0 skipped."),
        "{report}"
    );
    assert!(
        report.contains("| a | separated | 16000 | 16 clients |"),
        "{report}"
    );
    assert!(
        report.contains("| a | separated | 8 | 0 | ok | 8000 |"),
        "{report}"
    );
    std::fs::remove_file(dir.path().join("report.md")).unwrap();
    let out = common::cli_cmd()
        .arg("report")
        .arg(dir.path())
        .output()
        .unwrap();
    common::assert_success(&out);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report.md")).unwrap(),
        report,
        "`stairbench report` rebuilds the same report.md"
    );
    let csv = std::fs::read_to_string(dir.path().join("steps.csv")).unwrap();
    assert_eq!(csv.lines().count(), 21);
    assert_eq!(schema_errors(dir.path()), Vec::<String>::new());
}

#[test]
fn cpus_follow_clients_skips_what_does_not_fit_visibly() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"x\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 3]\ncpus_follow_clients = true\nplacements = [\"separated\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    let mut launcher = FakeLauncher::default();
    let summary = run_fake(
        &p,
        dir.path(),
        &mut FakeDriver::new(|c| c as f64),
        &mut launcher,
        &AtomicBool::new(false),
    );
    let status: Vec<_> = summary.steps.iter().map(|s| s.status).collect();
    assert_eq!(
        status,
        [StepStatus::Ok, StepStatus::Ok, StepStatus::Skipped]
    );
    assert!(summary.steps[2]
        .reason
        .as_deref()
        .unwrap()
        .contains("needs 6 CPUs; this machine has 4"));
    // The cpusets grew, so the server was restarted on its new CPUs.
    assert_eq!(
        launcher
            .cpus
            .iter()
            .map(|c| c.server.clone())
            .collect::<Vec<_>>(),
        [vec![0], vec![0, 1]]
    );
}

#[test]
fn seed_000_cpuset_table_is_used_verbatim() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sweep/crimson.toml");
    let p = plan_at(&path, &std::fs::read_to_string(&path).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = FakeLauncher::default();
    let summary = run_fake(
        &p,
        dir.path(),
        &mut FakeDriver::new(|c| c as f64),
        &mut launcher,
        &AtomicBool::new(false),
    );
    let cpus = |id: &str| {
        let s = summary.steps.iter().find(|s| s.id == id).unwrap();
        (s.server_cpus.clone(), s.client_cpus.clone(), s.status)
    };
    assert_eq!(
        cpus("msgr.seed-balanced.c4.r0"),
        ("0,56,28,84".into(), "1,57,29,85".into(), StepStatus::Ok)
    );
    assert_eq!(
        cpus("msgr.seed-separated.c8.r0"),
        ("0-7".into(), "28-35".into(), StepStatus::Ok)
    );
    // The separated table stops at 28 CPUs: 56 clients are skipped, saying why.
    let (_, _, status) = cpus("msgr.seed-separated.c56.r0");
    assert_eq!(status, StepStatus::Skipped);
    let why = summary
        .steps
        .iter()
        .find(|s| s.id == "msgr.seed-separated.c56.r0")
        .unwrap()
        .reason
        .clone()
        .unwrap();
    assert!(why.contains("no cpusets for 56"), "{why}");
}

#[test]
fn restart_step_and_hold() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"x\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 3]\nrestart = \"step\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    let mut launcher = FakeLauncher::default();
    run_fake(
        &p,
        dir.path(),
        &mut FakeDriver::new(|c| c as f64),
        &mut launcher,
        &AtomicBool::new(false),
    );
    assert_eq!(launcher.launches, 3);

    let mut held = plan(TWO_TARGETS);
    held.hold(6, Duration::from_secs(3600));
    assert_eq!(held.series, Series::Clients(vec![6]));
    assert_eq!(held.max_steps(), 4);
    assert!(held.estimate() > Duration::from_secs(4 * 3600));
}

#[test]
fn saturated_series_stops_early_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"x\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 4, 8, 16, 32]\nstop_when = \"saturated\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    let mut driver = FakeDriver::new(|c| 1000.0 * c.min(2) as f64);
    let summary = run_fake(
        &p,
        dir.path(),
        &mut driver,
        &mut FakeLauncher::default(),
        &AtomicBool::new(false),
    );
    // Flat from 2 clients on: 2→4 and 4→8 add nothing while latency doubles; 16 and 32 skipped.
    assert_eq!(
        driver.seen.iter().map(|r| r.clients).collect::<Vec<_>>(),
        [1, 2, 4, 8]
    );
    let skipped: Vec<_> = summary
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Skipped)
        .map(|s| s.clients)
        .collect();
    assert_eq!(skipped, [16, 32]);
    assert!(summary.findings[0].contains("saturated"));
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("stop_when = \"saturated\""), "{report}");
}

#[test]
fn on_failure_stop_ends_the_run_and_launch_failures_skip_their_series() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan(&TWO_TARGETS.replace("placements", "on_failure = \"stop\"\nplacements"));
    let mut driver = FakeDriver::new(|c| c as f64);
    driver.fail_ids.push("a.shared.c2.r0".into());
    let summary = run_fake(
        &p,
        dir.path(),
        &mut driver,
        &mut FakeLauncher::default(),
        &AtomicBool::new(false),
    );
    assert_eq!(summary.end, RunEnd::StoppedOnFailure);
    assert_eq!(summary.steps.len(), 2);

    let dir = tempfile::tempdir().unwrap();
    let mut launcher = FakeLauncher {
        fail_launch: Some(1),
        ..FakeLauncher::default()
    };
    let summary = run_fake(
        &plan(TWO_TARGETS),
        dir.path(),
        &mut FakeDriver::new(|c| c as f64),
        &mut launcher,
        &AtomicBool::new(false),
    );
    let first: Vec<_> = summary.steps.iter().take(5).map(|s| s.status).collect();
    assert_eq!(first[0], StepStatus::Failed);
    assert!(first[1..].iter().all(|s| *s == StepStatus::Skipped));
    assert!(summary.steps[1]
        .reason
        .as_deref()
        .unwrap()
        .starts_with("target did not start: target \"a\" exited with status 1"));
    assert_eq!(
        summary.steps[5].status,
        StepStatus::Ok,
        "the next series starts its own server"
    );
}

#[test]
fn a_failed_step_leaves_its_lines_as_partial_files_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut driver = FakeDriver::new(|c| c as f64 * 100.0);
    driver.fail_ids.push("a.shared.c2.r0".into());
    let one = "name = \"k\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2]\nplacements = [\"shared\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr --arch reactor\"\n";
    run_fake(
        &plan(one),
        dir.path(),
        &mut driver,
        &mut FakeLauncher::default(),
        &AtomicBool::new(false),
    );
    let steps = read_steps(&dir.path().join("steps.jsonl")).unwrap();
    assert_eq!(steps[1].status, StepStatus::Failed);
    let exists = |rel: &str| dir.path().join(rel).exists();
    // The completed step keeps its files; the failed one's second is there, marked partial.
    assert!(exists("intervals/a.shared.c1.r0.csv") && exists("hist/a.shared.c1.r0.hlog"));
    assert!(!exists("intervals/a.shared.c2.r0.csv") && !exists("hist/a.shared.c2.r0.hlog"));
    let partial =
        std::fs::read_to_string(dir.path().join("intervals/a.shared.c2.r0.partial.csv")).unwrap();
    assert_eq!(partial.lines().count(), 2, "{partial}");
    assert!(exists("hist/a.shared.c2.r0.partial.hlog"));
}

#[test]
fn a_failed_step_records_its_error_kind() {
    // The target does not start: `launch`; the series' later steps are skipped, with no kind.
    let dir = tempfile::tempdir().unwrap();
    let mut launcher = FakeLauncher {
        fail_launch: Some(1),
        ..FakeLauncher::default()
    };
    let one = "name = \"k\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2]\nplacements = [\"shared\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr --arch reactor\"\n";
    run_fake(
        &plan(one),
        dir.path(),
        &mut FakeDriver::new(|c| c as f64),
        &mut launcher,
        &AtomicBool::new(false),
    );
    let steps = read_steps(&dir.path().join("steps.jsonl")).unwrap();
    assert_eq!(steps[0].status, StepStatus::Failed);
    assert_eq!(steps[0].error_kind, Some(ErrorKind::Launch));
    assert_eq!(steps[1].status, StepStatus::Skipped);
    assert_eq!(steps[1].error_kind, None);
    let text = std::fs::read_to_string(dir.path().join("steps.jsonl")).unwrap();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .contains(r#""error_kind":"launch""#),
        "{text}"
    );
    assert_eq!(text.matches("error_kind").count(), 1, "{text}");
    assert_eq!(schema_errors(dir.path()), Vec::<String>::new());

    // The load cannot connect (nothing listens on the fake server's port): `load`.
    let dir = tempfile::tempdir().unwrap();
    let p = plan(&one.replace("clients = [1, 2]", "clients = [1]"));
    run_fake(
        &p,
        dir.path(),
        &mut EngineDriver::default(),
        &mut FakeLauncher::default(),
        &AtomicBool::new(false),
    );
    let steps = read_steps(&dir.path().join("steps.jsonl")).unwrap();
    assert_eq!(steps[0].status, StepStatus::Failed, "{:?}", steps[0]);
    assert_eq!(steps[0].error_kind, Some(ErrorKind::Load), "{:?}", steps[0]);
    assert_eq!(schema_errors(dir.path()), Vec::<String>::new());
}

/// A driver that checks the run directory before each step and stops the run at step `stop_at`.
struct Checking {
    inner: FakeDriver,
    dir: PathBuf,
    calls: usize,
    stop_at: Option<usize>,
    stop: &'static AtomicBool,
}

impl Driver for Checking {
    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        let on_disk = read_steps(&self.dir.join("steps.jsonl")).map_or(0, |s| s.len());
        assert_eq!(
            on_disk, self.calls,
            "every finished step is on disk before the next starts"
        );
        self.calls += 1;
        if Some(self.calls) == self.stop_at {
            self.stop.store(true, Ordering::SeqCst);
        }
        self.inner.run_step(req, sink, stop)
    }
}

#[test]
fn results_are_on_disk_after_each_step_and_resume_continues() {
    static STOP: AtomicBool = AtomicBool::new(false);
    let dir = tempfile::tempdir().unwrap();
    let p = plan(TWO_TARGETS);
    let mut driver = Checking {
        inner: FakeDriver::new(|c| c as f64),
        dir: dir.path().into(),
        calls: 0,
        stop_at: Some(7),
        stop: &STOP,
    };
    let summary = run_fake(
        &p,
        dir.path(),
        &mut driver,
        &mut FakeLauncher::default(),
        &STOP,
    );
    assert_eq!(summary.end, RunEnd::Interrupted);
    assert_eq!(
        summary.steps.len(),
        6,
        "the interrupted 7th step is not recorded"
    );
    assert!(std::fs::read_to_string(dir.path().join("report.md"))
        .unwrap()
        .contains("interrupted"));

    STOP.store(false, Ordering::SeqCst);
    let mut rundir = RunDir::open(dir.path().into()).unwrap();
    let placements = TopologyPlacements::with_cpus(vec![0, 1, 2, 3], BTreeMap::new());
    let mut fresh = FakeDriver::new(|c| c as f64);
    let summary = Runner {
        plan: &p,
        dir: &mut rundir,
        launcher: &mut FakeLauncher::default(),
        driver: &mut fresh,
        observer: &mut NullObserver,
        placements: &placements,
        progress: &mut Quiet,
        stop: &STOP,
    }
    .run()
    .unwrap();
    assert_eq!(summary.steps.len(), 20);
    assert_eq!(fresh.seen.len(), 14, "only the missing steps ran");
    let mut ids: Vec<_> = summary.steps.iter().map(|s| s.id.clone()).collect();
    ids.dedup();
    assert_eq!(ids.len(), 20, "no step twice");
}

#[test]
fn a_server_that_dies_fails_its_step_with_its_stderr_tail() {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"x\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2]\n[[targets]]\nname = \"fragile\"\ncommand = \"sh -c 'echo ready; sleep 0.3; echo out of memory >&2; exit 3'\"\nready = { log = \"^ready$\" }\nurl = \"msgr://127.0.0.1:{port}\"\n");
    struct Slow(FakeDriver);
    impl Driver for Slow {
        fn run_step(
            &mut self,
            req: &StepRequest,
            sink: &mut dyn IntervalSink,
            stop: &AtomicBool,
        ) -> Result<StepLoad, StepError> {
            std::thread::sleep(Duration::from_millis(800));
            self.0.run_step(req, sink, stop)
        }
    }
    let mut launcher = ProcessLauncher {
        stairbench_bin: common::stairbench_bin(),
        out_dir: dir.path().into(),
    };
    // A real server is pinned: the placement uses this machine's CPUs.
    let summary = run_fake_on(
        stairbench::cpuset::allowed(),
        &p,
        dir.path(),
        &mut Slow(FakeDriver::new(|c| c as f64)),
        &mut launcher,
        &AtomicBool::new(false),
    );
    for step in &summary.steps {
        assert_eq!(step.status, StepStatus::Failed);
        let reason = step.reason.as_deref().unwrap();
        assert!(
            reason.contains("exited with status 3") && reason.contains("out of memory"),
            "{reason}"
        );
    }

    let p = plan("name = \"x\"\nclients = [1]\n[[targets]]\nname = \"broken\"\ncommand = \"sh -c 'echo bad config line 3 >&2; exit 1'\"\nurl = \"msgr://127.0.0.1:{port}\"\n");
    let summary = run_fake_on(
        stairbench::cpuset::allowed(),
        &p,
        tempfile::tempdir().unwrap().path(),
        &mut FakeDriver::new(|c| c as f64),
        &mut launcher,
        &AtomicBool::new(false),
    );
    let reason = summary.steps[0].reason.as_deref().unwrap();
    assert!(
        reason.contains("target \"broken\" exited with status 1 before it was ready")
            && reason.contains("bad config line 3"),
        "{reason}"
    );
}

/// `stairbench run SPEC --dry-run` on spec text, in a temp dir: (success, stdout, stderr).
fn dry_run(text: &str) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, text).unwrap();
    let out = common::cli(&[
        std::ffi::OsStr::new("run"),
        spec.as_os_str(),
        std::ffi::OsStr::new("--dry-run"),
    ]);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// What the real run would find at its first step, the dry run finds with the line and key:
/// before, `url = "htp://..."` passed it and then failed every step with `unknown scheme`.
#[test]
fn dry_run_checks_urls_placeholders_and_parsers_where_they_are_written() {
    let target =
        "name = \"x\"\nclients = [1, 2]\n[[targets]]\nname = \"web\"\ncommand = \"sleep 60\"\n";
    let (ok, _, err) = dry_run(&format!("{target}url = \"htp://127.0.0.1:{{port}}/\"\n"));
    assert!(!ok);
    assert!(
        err.contains("s.toml:6:7: targets[0].url: \"htp://127.0.0.1:{port}/\": unknown scheme \"htp\" (did you mean \"http\"?)"),
        "{err}"
    );
    let client = "[client]\nurl = \"127.0.0.1:8080\"\n";
    let (ok, _, err) = dry_run(&format!("{target}{client}"));
    assert!(
        !ok && err.contains("client.url: ") && err.contains("expected SCHEME://"),
        "{err}"
    );
    let wrk = |command: &str, parser: &str| {
        format!("{target}url = \"http://127.0.0.1:{{port}}/\"\n[client]\ncommand = \"{command}\"\nparser = \"{parser}\"\n")
    };
    let (ok, _, err) = dry_run(&wrk("wrk -c{connections} http://127.0.0.1:{prot}/", "wrk"));
    assert!(!ok);
    assert!(
        err.contains("client.command: unknown placeholder {prot} (did you mean {port}?)"),
        "{err}"
    );
    let (ok, _, err) = dry_run(&wrk("wrk -c{connections} {url}", "wkr"));
    assert!(!ok && err.contains("client.parser: "), "{err}");
    // The client command is printed as it will run, its values filled in per step.
    let (ok, out, err) = dry_run(&wrk(
        "wrk -t{threads} -c{connections} -d{duration_s}s {url}",
        "wrk",
    ));
    assert!(ok, "{err}");
    let line = regex::Regex::new(
        r"\n    client: wrk -t\d+ -c2 -d\d+s 'http://127\.0\.0\.1:<free port>/'\n",
    )
    .unwrap();
    assert!(line.is_match(&out), "{out}");
    // The built-in engine's line names its url, connections and threads.
    let (ok, out, err) = dry_run("name = \"x\"\nclients = [4]\n[[targets]]\nname = \"r\"\nbuiltin = \"msgr --arch reactor\"\n");
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "    client: built-in engine at msgr://127.0.0.1:<free port>: 4 connection(s)"
        ),
        "{out}"
    );
    // One of each, in the singular ("1 targets × 1 placements" before).
    assert!(
        out.contains("experiment \"x\": 1 target × 1 placement, 1 step of "),
        "{out}"
    );
}

/// A server that never answers and prints nothing: the error says so instead of ending in
/// "its output ends with:" over nothing.
#[test]
fn a_silent_server_that_never_answers_says_it_printed_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, "name = \"x\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\nplacements = [\"shared\"]\n[[targets]]\nname = \"mute\"\ncommand = \"sleep 30\"\nurl = \"http://127.0.0.1:{port}/\"\nready = { tcp = true, timeout = \"1s\" }\n").unwrap();
    let out_dir = dir.path().join("run");
    common::run_spec(&spec, &out_dir);
    let steps = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    let reason = steps[0].reason.as_deref().unwrap_or("");
    assert!(
        reason.contains("was not ready within 1s") && reason.ends_with("; it printed nothing"),
        "{reason}"
    );
}

#[test]
fn dry_run_prints_steps_cpusets_commands_and_time() {
    let out = common::cli(&["demo", "--quick", "--dry-run"]);
    common::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("reactor.separated.c8.r0"), "{text}");
    assert!(
        text.contains(" serve msgr --arch pool --work-ns 1000 --threads "),
        "{text}"
    );
    assert!(text.contains("estimated time: about 0m"), "{text}");
}

#[test]
fn a_short_real_sweep_against_the_built_in_server() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, "name = \"real\"\nduration = \"1s\"\nwarmup = \"200ms\"\nclients = [1, 4]\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n").unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    assert_eq!(steps.len(), 2);
    for s in &steps {
        assert_eq!(s.status, StepStatus::Ok, "{:?}", s.reason);
        assert!(s.throughput_rps().unwrap() > 0.0);
        assert_server_cpu_near_clients(s);
    }
    assert_eq!(schema_errors(&out_dir), Vec::<String>::new());
    for f in [
        "spec.toml",
        "environment.json",
        "report.md",
        "steps.csv",
        "hist/reactor.shared.c4.r0.hlog",
    ] {
        assert!(out_dir.join(f).exists(), "{f}");
    }
}

/// The server's CPU per request is within a factor of 3 of the built-in client's: both do
/// about one send and one receive per request on loopback, so a figure far off (or zero)
/// means a process or a window was measured wrongly (a 2× error, a window of the wrong
/// length, shows as much).
#[track_caller]
fn assert_server_cpu_near_clients(s: &StepResult) {
    let server_us = s.per_request().cpu_us_per_req.total.unwrap();
    let load = s.load.as_ref().unwrap();
    let client_us =
        (load.client_cpu.user_s + load.client_cpu.sys_s) * 1e6 / load.requests.max(1) as f64;
    let ratio = server_us / client_us;
    assert!(
        (1.0 / 3.0..=3.0).contains(&ratio),
        "{}: server {server_us:.2} µs/request vs client {client_us:.2} µs/request",
        s.id
    );
}

/// Every process below `pid`, from /proc.
fn descendants(pid: i32) -> Vec<i32> {
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        out.extend(stairbench::process::children_of(out[i]));
        i += 1;
    }
    out.remove(0);
    out
}

const REDIS_TARGET: &str = "[[targets]]\nname = \"redis\"\ncommand = \"redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no --daemonize no\"\nurl = \"redis://127.0.0.1:{port}\"\n";

fn redis_available() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Starts `stairbench run`, sends SIGINT once a step is on disk, and checks what is left.
fn interrupt(spec_text: &str, dir: &Path) -> (PathBuf, usize) {
    let spec = dir.join("interrupt.toml");
    std::fs::write(&spec, spec_text).unwrap();
    let out_dir = dir.join("run");
    let child = common::cli_cmd()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out_dir)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let steps_file = out_dir.join("steps.jsonl");
    while std::fs::read_to_string(&steps_file).map_or(0, |t| t.lines().count()) < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no step finished"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(400));
    let below = descendants(child.id() as i32);
    assert!(!below.is_empty(), "the server should be running");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    // The whole command to paste, not "--resume DIR" to complete by hand.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let resume = format!(" run --resume {}\n", out_dir.display());
    assert!(
        stderr.contains("continue with: ") && stderr.contains(&resume),
        "{stderr}"
    );
    let steps = read_steps(&steps_file).unwrap();
    assert!(
        !steps.is_empty() && steps.len() < 6,
        "{} steps",
        steps.len()
    );
    assert!(
        steps.iter().all(|s| s.status == StepStatus::Ok),
        "{:?}",
        steps.iter().map(|s| &s.reason).collect::<Vec<_>>()
    );
    assert!(std::fs::read_to_string(out_dir.join("report.md"))
        .unwrap()
        .contains("interrupted"));
    std::thread::sleep(Duration::from_millis(100));
    for pid in below {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} outlived stairbench"
        );
    }
    (out_dir, steps.len())
}

#[test]
fn interruption_keeps_results_exits_130_and_leaves_no_process() {
    let dir = tempfile::tempdir().unwrap();
    interrupt("name = \"interrupt\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [1, 2, 4, 8, 16, 32]\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n", dir.path());
}

#[test]
fn redis_sweep_interrupted_then_resumed() {
    if !redis_available() {
        common::skip_or_fail("redis-server is not installed (apt-get install redis-server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = format!("name = \"redis\"\nduration = \"1s\"\nwarmup = \"200ms\"\nclients = [1, 2, 4, 8, 16, 32]\nplacements = [\"separated\"]\n{REDIS_TARGET}");
    let (out_dir, before) = interrupt(&text, dir.path());
    let out = common::cli_cmd()
        .arg("run")
        .arg("--resume")
        .arg(&out_dir)
        .output()
        .unwrap();
    common::assert_success(&out);
    let all = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    assert!(all.len() <= 7, "{} steps", all.len());
    let steps = planned(all);
    assert_eq!(
        steps.len(),
        6,
        "{before} before the interruption, the rest after --resume"
    );
    for s in &steps {
        assert_eq!(s.status, StepStatus::Ok, "{:?}", s.reason);
        assert!(s.throughput_rps().unwrap() > 0.0);
        assert_server_cpu_near_clients(s);
        assert!(
            s.observation().and_then(|o| o.server.as_ref()).is_some(),
            "observed the server: {:?}",
            s.server
        );
    }
    assert_eq!(schema_errors(&out_dir), Vec::<String>::new());
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        report.contains("6 steps: 6 ok, 0 failed, 0 skipped."),
        "{report}"
    );
    // The report of a resumed run says which of its steps came from before.
    assert!(
        report.contains(&format!(
            "resumed: {before} of the 6 planned steps had finished before"
        )),
        "{report}"
    );
    for f in [
        "spec.toml",
        "environment.json",
        "steps.csv",
        "intervals/redis.separated.c32.r0.csv",
        "hist/redis.separated.c32.r0.hlog",
    ] {
        assert!(out_dir.join(f).exists(), "{f}");
    }
}

/// `run --resume DIR` reads the run's copy of the spec, but `{spec_dir}` still names the
/// directory of the original (where nginx-wrk.toml keeps nginx.sh): before the run directory
/// recorded it, every resumed step failed with "sh: cannot open DIR/server.sh".
#[test]
fn resume_finds_the_scripts_beside_the_original_spec() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("server.sh"),
        format!(
            "exec '{}' serve msgr --arch reactor --threads 1 --port \"$1\"\n",
            common::stairbench_bin().display()
        ),
    )
    .unwrap();
    let text = "name = \"spec-dir\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 4, 8, 16]\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\ncommand = \"sh {spec_dir}/server.sh {port}\"\nurl = \"msgr://127.0.0.1:{port}\"\n";
    let (out_dir, before) = interrupt(text, dir.path());
    let recorded = std::fs::read_to_string(out_dir.join("spec_dir.txt")).unwrap();
    assert_eq!(
        Path::new(recorded.trim_end()),
        dir.path().canonicalize().unwrap()
    );
    let out = common::cli_cmd()
        .arg("run")
        .arg("--resume")
        .arg(&out_dir)
        .output()
        .unwrap();
    common::assert_success(&out);
    let steps = planned(read_steps(&out_dir.join("steps.jsonl")).unwrap());
    assert_eq!(steps.len(), 5, "{before} before the interruption");
    for s in &steps {
        assert_eq!(s.status, StepStatus::Ok, "{}: {:?}", s.id, s.reason);
    }
}

#[test]
fn nginx_master_and_workers_are_observed_and_ended() {
    if Command::new("nginx").arg("-v").output().is_err() {
        common::skip_or_fail("nginx is not installed (apt-get install nginx-light)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/nginx.sh");
    let spec = dir.path().join("nginx.toml");
    std::fs::write(&spec, format!("name = \"nginx\"\nduration = \"1s\"\nwarmup = \"200ms\"\nclients = [2, 8]\nplacements = [\"separated\"]\n[[targets]]\nname = \"nginx\"\ncommand = \"sh {} {{out}} {{port}} 2\"\nurl = \"http://127.0.0.1:{{port}}/\"\n", script.display())).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    for s in &steps {
        assert_eq!(s.status, StepStatus::Ok, "{:?}", s.reason);
        let processes = s
            .observation()
            .and_then(|o| o.server.as_ref())
            .unwrap()
            .processes;
        assert_eq!(processes, 3, "master and 2 workers: {:?}", s.server);
        assert_server_cpu_near_clients(s);
    }
    let mine = format!("nginx-{}", out_dir.display());
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("cmdline")).ok())
        .map(|c| c.replace('\0', " "))
        .filter(|c| c.contains(&out_dir.display().to_string()) && c.contains("nginx"))
        .collect();
    assert!(left.is_empty(), "{mine}: left running: {left:?}");
}

#[test]
fn wrk_through_its_parser_against_nginx() {
    let missing = ["nginx", "wrk"].into_iter().find(|p| {
        Command::new("sh")
            .args(["-c", &format!("command -v {p}")])
            .output()
            .map_or(true, |o| !o.status.success())
    });
    if let Some(p) = missing {
        common::skip_or_fail(format!(
            "{p} is not installed (apt-get install nginx-light wrk)"
        ));
        return;
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let text = std::fs::read_to_string(examples.join("nginx-wrk.toml"))
        .unwrap()
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace("clients = [1, 2, 4, 8, 16, 32, 64]", "clients = [2, 8]")
        .replace("{spec_dir}", &examples.display().to_string());
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("wrk.toml");
    std::fs::write(&spec, text).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    assert_eq!(steps.len(), 2);
    for s in &steps {
        assert_eq!(s.status, StepStatus::Ok, "{:?}", s.reason);
        let load = s.load.as_ref().unwrap();
        assert!(load.url.starts_with("wrk -t1 -c"), "{}", load.url);
        assert!(load.throughput_rps > 100.0 && load.latency_us.p99 > 0.0);
        assert!(
            load.latency_us.p999.is_nan(),
            "wrk prints no p99.9: unavailable, not zero"
        );
        assert!(
            load.client_cpu.user_s + load.client_cpu.sys_s > 0.0,
            "wrk's own CPU is measured"
        );
        let tool = s.figures.tool.as_ref().unwrap();
        assert!(tool.latency_us.get("p75").copied().flatten().is_some());
    }
    assert_eq!(schema_errors(&out_dir), Vec::<String>::new());
}

#[test]
fn killed_outright_its_servers_die_too() {
    if !redis_available() {
        common::skip_or_fail("redis-server is not installed (apt-get install redis-server)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("kill.toml");
    std::fs::write(&spec, format!("name = \"kill\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [1, 2, 4]\n{REDIS_TARGET}")).unwrap();
    let out_dir = dir.path().join("run");
    let mut child = common::cli_cmd()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out_dir)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut below = Vec::new();
    while below.is_empty() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
        below = descendants(child.id() as i32);
    }
    assert!(!below.is_empty(), "the server should be running");
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = |pid: &i32| !Path::new(&format!("/proc/{pid}")).exists();
    let start = Instant::now();
    while !below.iter().all(gone) && start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<_> = below.iter().filter(|p| !gone(p)).collect();
    assert!(
        left.is_empty(),
        "PR_SET_PDEATHSIG should have ended {left:?}"
    );
}

/// nginx, wrk and redis-benchmark on PATH (or in /usr/sbin); under `CI=true` a missing one
/// fails the test instead of skipping it.
fn tools_available(tools: &[&str]) -> bool {
    if let Some(p) = tools.iter().find(|p| common::find_program(p).is_none()) {
        common::skip_or_fail(common::not_installed(p));
        return false;
    }
    true
}

/// A spec whose target is examples/nginx.sh answering every request with `status`, driven
/// by `client` (a `[client]` table), in `dir`.
fn nginx_status_spec(dir: &Path, status: u16, extra: &str, client: &str) -> PathBuf {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let script = std::fs::read_to_string(examples.join("nginx.sh"))
        .unwrap()
        .replace(
            "return 200 \"hello from nginx\\n\"",
            &format!("return {status} \"status {status}\\n\""),
        );
    assert!(script.contains(&format!("return {status}")));
    std::fs::write(dir.join("nginx-status.sh"), script).unwrap();
    let spec = dir.join(format!("status{status}.toml"));
    std::fs::write(
        &spec,
        format!(
            "name = \"status{status}\"\nduration = \"1s\"\nwarmup = \"0s\"\n{extra}\nplacements = [\"separated\"]\n\
             [[targets]]\nname = \"nginx\"\ncommand = \"sh {{spec_dir}}/nginx-status.sh {{out}} {{port}} 1\"\n\
             url = \"http://127.0.0.1:{{port}}/\"\nready = {{ tcp = true, timeout = \"5s\" }}\n{client}\n"
        ),
    )
    .unwrap();
    spec
}

const WRK_CLIENT: &str = "[client]\ncommand = \"wrk -t1 -c{connections} -d{duration_s}s --latency http://127.0.0.1:{port}/\"\nparser = \"wrk\"";

#[test]
fn wrk_steps_against_nginx_500s_are_errors_exit_3_and_count_no_request() {
    if !tools_available(&["nginx", "wrk"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = nginx_status_spec(dir.path(), 500, "clients = [2, 4]", WRK_CLIENT);
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 step(s) had errors above max_error_ratio"),
        "{stderr}"
    );
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 2);
    // Every request of the first level failed: the series stops there, the rest skipped.
    assert_eq!(steps[1]["status"], "skipped", "{}", steps[1]);
    assert!(
        steps[1]["reason"]
            .as_str()
            .unwrap()
            .starts_with("every request failed at 2 clients (http_non_2xx_3xx "),
        "{}",
        steps[1]
    );
    for s in &steps[..1] {
        assert_eq!(s["status"], "errors", "{s}");
        assert!(s["error_ratio"].as_f64().unwrap() > 0.999, "{s}");
        assert_eq!(s["requests"], 0, "a 500 is not a request: {s}");
        assert_eq!(s["throughput_rps"], 0.0, "{s}");
        assert!(
            s["errors"]["http_non_2xx_3xx"].as_u64().unwrap() > 100,
            "{s}"
        );
        assert!(s["reason"]
            .as_str()
            .unwrap()
            .contains("over max_error_ratio = 0.01"));
    }
    assert_eq!(schema_errors(&out_dir), Vec::<String>::new());
}

#[test]
fn run_exits_0_when_the_errors_are_allowed_2_on_a_bad_spec_1_when_a_target_cannot_start() {
    if !tools_available(&["nginx", "wrk"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The same server, with every error allowed: the steps are ok.
    let spec = nginx_status_spec(
        dir.path(),
        500,
        "clients = [2]\nmax_error_ratio = 1.0",
        WRK_CLIENT,
    );
    let out = common::run_spec(&spec, &dir.path().join("allowed"));
    common::assert_success(&out);
    let steps = common::steps_json(&dir.path().join("allowed"));
    assert_eq!(steps[0]["status"], "ok");
    assert_eq!(steps[0]["error_ratio"], 1.0);

    let bad = nginx_status_spec(dir.path(), 500, "clients = [2]\nmax_error_ratio = 2", "");
    let out = common::run_spec(&bad, &dir.path().join("bad"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("max_error_ratio: expected a share"),
        "{stderr}"
    );

    let boom = dir.path().join("boom.toml");
    std::fs::write(&boom, "name = \"boom\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2]\n[[targets]]\nname = \"boom\"\ncommand = \"sh -c 'echo line one; echo fatal: no config file >&2; exit 7'\"\nurl = \"http://127.0.0.1:{port}/\"\n").unwrap();
    let out = common::run_spec(&boom, &dir.path().join("boom"));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exited with status 7 before it was ready")
            && stderr.contains("its output ends with:\n    fatal: no config file"),
        "the console shows the cause: {stderr}"
    );
    let md = std::fs::read_to_string(dir.path().join("boom/report.md")).unwrap();
    assert!(md.contains("fatal: no config file"), "{md}");
}

#[test]
fn a_rate_search_against_a_server_that_errors_finds_no_rate() {
    if !tools_available(&["nginx"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let spec = nginx_status_spec(
        dir.path(),
        500,
        "clients = 2\nrate = { from = 200, to = 2000 }\nfind = { p99_ms = 50, max_steps = 3 }",
        "",
    );
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let steps = common::steps_json(&out_dir);
    assert_eq!(
        steps.len(),
        1,
        "the lowest rate failed: nothing above it is tried"
    );
    assert_eq!(steps[0]["status"], "errors");
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(md.contains("even 200 requests/s missed p99"), "{md}");
}

#[test]
fn paths_with_quotes_spaces_and_dollars_are_single_words_and_run_nothing() {
    if !tools_available(&["nginx", "wrk"]) {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let nasty = root.path().join("it's a $(touch PWNED) dir");
    std::fs::create_dir(&nasty).unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    std::fs::copy(examples.join("nginx.sh"), nasty.join("nginx.sh")).unwrap();
    let text = std::fs::read_to_string(examples.join("nginx-wrk.toml"))
        .unwrap()
        .replace("duration = \"5s\"", "duration = \"1s\"")
        .replace("clients = [1, 2, 4, 8, 16, 32, 64]", "clients = [2]");
    std::fs::write(nasty.join("nginx-wrk.toml"), text).unwrap();
    // The default output directory (relative, under the nasty one) and a relative spec path:
    // `{out}` and `{spec_dir}` must reach nginx.sh absolute and whole.
    let out = common::cli_cmd()
        .args(["run", "nginx-wrk.toml"])
        .current_dir(&nasty)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    common::assert_success(&out);
    let pwned: Vec<_> = walk(root.path())
        .into_iter()
        .chain([Path::new(env!("CARGO_MANIFEST_DIR")).join("PWNED")])
        .filter(|p| p.exists())
        .filter(|p| p.file_name().is_some_and(|n| n == "PWNED"))
        .collect();
    assert!(pwned.is_empty(), "a placeholder was executed: {pwned:?}");
    let results: Vec<_> = std::fs::read_dir(nasty.join("results")).unwrap().collect();
    assert_eq!(results.len(), 1);
    let run_dir = results[0].as_ref().unwrap().path();
    let steps = common::steps_json(&run_dir);
    assert_eq!(steps[0]["status"], "ok", "{}", steps[0]);
    let prefixes = std::fs::read_dir(&run_dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("nginx-")
        })
        .count();
    assert_eq!(prefixes, 1, "nginx's prefix is in the run directory, once");
}

/// Every path under `dir` (not following links).
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

#[test]
fn every_example_runs_from_the_repository_root_with_a_short_duration() {
    if !tools_available(&["nginx", "wrk", "redis-server", "redis-benchmark"])
        || !common::tomcat_available()
    {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    // The server examples/running-redis.toml expects to be running already.
    let _running = crate::running::example_server();
    let mut ran = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        // Other hosts are not here: two-hosts.toml is dry-run in every_example_spec_plans,
        // kvd-two-hosts.toml runs on namespace hosts in kvd_hosts, slurm-two-nodes.toml's
        // spec runs in a Slurm allocation in slurm.rs.
        if path.extension().is_none_or(|e| e != "toml")
            || name.ends_with("two-hosts")
            || name.contains("slurm")
        {
            continue;
        }
        // wrk takes whole seconds only.
        let out = common::cli_cmd()
            .current_dir(root)
            .args(["run", "--duration", "1s", "--clients", "2", "--out"])
            .arg(dir.path().join(&name))
            .arg(Path::new("examples").join(path.file_name().unwrap()))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let steps = common::steps_json(&dir.path().join(&name));
        assert!(steps.iter().all(|s| s["status"] != "failed"), "{name}");
        ran.push(name);
    }
    assert!(ran.len() >= 7, "{ran:?}");
}

#[test]
fn duration_and_clients_override_the_spec_for_a_quick_trial() {
    let mut p = plan("name = \"q\"\nduration = \"10s\"\nwarmup = \"2s\"\nclients = [1, 2, 4, 8]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    p.shorten(Duration::from_secs(1));
    p.with_clients(&[2, 3]).unwrap();
    assert_eq!(p.duration, Duration::from_secs(1));
    assert_eq!(p.warmup, Duration::from_millis(200));
    assert_eq!(p.series, Series::Clients(vec![2, 3]));
    assert!(p.with_clients(&[0]).is_err());
}

/// fleet::driver's helpers (were its unit tests): the saturation rule and command placeholders.
mod driver_helpers {
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use hdrhistogram::Histogram;
    use stairbench::fleet::driver::{
        any_cpu_saturated, fill, shell_word, tool_saturated, CommandDriver, Driver, StepRequest,
    };
    use stairbench::fleet::error::StepError;
    use stairbench::record::load::IntervalSink;

    #[test]
    fn a_tool_is_saturated_when_one_of_its_cpus_is_full_not_their_average() {
        // The old rule, CPU time over the cores: (95 + 10) / 2 = 52.5% → not saturated.
        assert!(any_cpu_saturated(&[95.0, 10.0]));
        assert!(!any_cpu_saturated(&[89.0, 89.0]));
        assert!(!any_cpu_saturated(&[]));
        assert!(!any_cpu_saturated(&[f64::NAN, 50.0]));
        // A full CPU the tool hardly used (another process filled it) is not the tool's limit.
        assert!(tool_saturated(&[95.0], 0.9, 1.0));
        assert!(!tool_saturated(&[99.0], 0.1, 1.0));
        assert!(!tool_saturated(&[50.0], 1.0, 1.0));
    }

    #[test]
    fn a_tool_is_saturated_only_when_it_wanted_the_cpu_all_along() {
        // pgbench at 0.93 s of CPU over 2 s, never kept waiting, on a CPU other jobs kept
        // 100% busy: not the limit.
        assert!(!tool_saturated(&[100.0], 0.93, 2.0));
        // A one-thread tool that filled one CPU of two itself is; so is one that ran 0.45 s
        // and waited 1.05 s for the CPU other jobs held.
        assert!(tool_saturated(&[98.0, 10.0], 1.9, 2.0));
        assert!(tool_saturated(&[100.0, 10.0], 0.45 + 1.05, 1.55));
        // Its own CPU alone is not enough either: spread thin, no CPU was full.
        assert!(!tool_saturated(&[60.0, 60.0], 1.9, 2.0));
        assert!(!tool_saturated(&[100.0], 1.0, 0.0));
    }

    #[test]
    fn output_that_does_not_parse_is_a_parse_error() {
        let mut driver = CommandDriver {
            template: "echo not json".into(),
            parser: Box::new(stairbench::load::external::StairbenchJson),
        };
        let req = StepRequest {
            step_id: "s".into(),
            url: String::new(),
            port: 1,
            clients: 1,
            connections: 1,
            depth: 1,
            message: None,
            threads: 1,
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            timeout: Duration::from_secs(1),
            rate_rps: None,
            client_cpus: stairbench::cpuset::allowed(),
            out_dir: std::env::temp_dir(),
            instances: Vec::new(),
            group_cpus: Vec::new(),
            group_targets: Vec::new(),
        };
        struct Discard;
        impl IntervalSink for Discard {
            fn interval(&mut self, _: &stairbench::record::load::IntervalLine, _: &Histogram<u64>) {
            }
        }
        let err = driver
            .run_step(&req, &mut Discard, &AtomicBool::new(false))
            .err()
            .unwrap();
        assert!(matches!(err, StepError::Parse(_)), "{err:?}");
        assert!(
            err.to_string().contains("its output did not parse"),
            "{err}"
        );
    }

    #[test]
    fn fills_placeholders() {
        let s = fill(
            "wrk -c{clients} -t{threads} http://127.0.0.1:{port}/",
            &[
                ("clients", "8".into()),
                ("threads", "2".into()),
                ("port", "8080".into()),
            ],
        );
        assert_eq!(s, "wrk -c8 -t2 http://127.0.0.1:8080/");
    }

    #[test]
    fn placeholders_are_single_shell_words_and_run_nothing() {
        let nasty = "/tmp/it's a $(touch PWNED) `x` dir";
        let line = fill("printf %s {out}", &[("out", nasty.into())]);
        let out = std::process::Command::new("sh")
            .args(["-c", &line])
            .current_dir(std::env::temp_dir())
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), nasty);
        assert_eq!(shell_word("/srv/run-1/a.b"), "/srv/run-1/a.b");
        assert_eq!(shell_word(""), "''");
    }
}

/// Plan::new on small specs (were sweep::plan's unit tests).
mod plan_units {
    use std::path::{Path, PathBuf};

    use stairbench::sweep::plan::{Plan, Series};
    use stairbench::sweep::spec::{SpecError, SpecFile};

    fn plan(text: &str) -> Result<Plan, SpecError> {
        Plan::new(
            SpecFile::parse(Path::new("s.toml"), text)?,
            PathBuf::from("stairbench"),
        )
    }

    #[test]
    fn the_issue_example_plans() {
        let p = plan("name = \"interrupt\"\nduration = \"2s\"\nwarmup = \"0s\"\nclients = [1, 2, 4, 8, 16, 32]\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n").unwrap();
        assert_eq!(p.series, Series::Clients(vec![1, 2, 4, 8, 16, 32]));
        assert_eq!(p.max_steps(), 6);
        assert_eq!(p.targets[0].url, "msgr://127.0.0.1:{port}");
        assert!(p.targets[0].port_from_log && !p.targets[0].ready_tcp);
    }

    #[test]
    fn unknown_placement_is_located() {
        let err = plan("name = \"x\"\nclients = [1]\nplacements = [\"shared\", \"sideways\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n")
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.starts_with("s.toml:3:25: placements[1]: unknown placement"),
            "{err}"
        );
    }

    #[test]
    fn find_series() {
        let p = plan("name = \"x\"\nclients = 4\nrate = { from = 1000, to = 64000 }\nfind = { p99_ms = 10 }\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n").unwrap();
        assert!(matches!(
            p.series,
            Series::Find {
                clients: 4,
                max_steps: 7,
                ..
            }
        ));
    }
}

/// The series policies: repetitions and the saturation note (were sweep::policy's unit tests).
mod policy_units {
    use serde::Deserialize;
    use stairbench::sweep::plan::saturation_note;
    use stairbench::sweep::plan::Point;
    use stairbench::sweep::spec::Repetitions;

    fn c(clients: usize) -> Point {
        Point {
            clients,
            rate_rps: None,
        }
    }

    #[test]
    fn saturation_note_names_exactly_the_skipped_points() {
        let note = saturation_note(c(2), c(8), &[c(16), c(32)]);
        assert!(note.contains("from 2 clients to 8 clients"), "{note}");
        assert!(note.ends_with("skipped: 16, 32 clients"), "{note}");
        let last = saturation_note(c(16), c(64), &[]);
        assert!(last.ends_with("none skipped"), "{last}");
        assert!(!last.contains("larger counts"), "{last}");
        let rate = |r| Point {
            clients: 4,
            rate_rps: Some(r),
        };
        let note = saturation_note(rate(1000.0), rate(3000.0), &[rate(4000.0)]);
        assert!(
            note.contains("from 1000 requests/s to 3000 requests/s"),
            "{note}"
        );
        assert!(note.ends_with("skipped: 4000 requests/s"), "{note}");
    }

    #[test]
    fn repetitions_read_a_count_or_auto() {
        #[derive(Deserialize)]
        struct T {
            r: Repetitions,
        }
        let read = |s: &str| toml::from_str::<T>(&format!("r = {s}")).map(|t| t.r);
        assert_eq!(read("3").unwrap(), Repetitions::Fixed(3));
        assert_eq!(read("\"auto\"").unwrap(), Repetitions::Auto);
        assert!(read("0").is_err());
        assert!(read("\"often\"")
            .unwrap_err()
            .message()
            .contains("\"auto\""));
    }

    #[test]
    fn auto_repeats_until_settled_or_five_runs() {
        let auto = Repetitions::Auto;
        assert!(auto.again(0, &[]));
        assert!(auto.again(1, &[100.0]));
        assert!(!auto.again(2, &[100.0, 101.0]));
        assert!(auto.again(2, &[100.0, 120.0]));
        assert!(!auto.again(5, &[100.0, 150.0, 50.0, 120.0, 80.0]));
        // A failed run ends the point.
        assert!(!auto.again(2, &[100.0]));
        assert_eq!(auto.max_runs(), 5);
        let fixed = Repetitions::Fixed(2);
        assert!(fixed.again(1, &[100.0]) && !fixed.again(2, &[100.0, 300.0]));
    }
}

/// Placements over a plain list of CPUs (was a unit test of sweep::placement).
mod placement_units {
    use std::collections::BTreeMap;

    use stairbench::placement::{CpuPair, CpusError, PlacementSource, TopologyPlacements};

    #[test]
    fn two_cpus() {
        let p = TopologyPlacements::with_cpus(vec![0, 1], BTreeMap::new());
        assert_eq!(
            p.cpus("separated", None).unwrap(),
            CpuPair {
                server: vec![0],
                client: vec![1]
            }
        );
        assert_eq!(
            p.cpus("shared", None).unwrap(),
            CpuPair {
                server: vec![0, 1],
                client: vec![0, 1]
            }
        );
        let err = p.cpus("separated", Some(2)).unwrap_err();
        assert!(matches!(err, CpusError::TooFewCpus(_)), "{err:?}");
        assert!(err.to_string().contains("needs 4 CPUs"), "{err}");
        assert_eq!(
            p.cpus("nope", None).unwrap_err(),
            CpusError::Unknown("nope".into())
        );
    }
}

/// Spec reading: located errors and the duration notation (were sweep::spec's unit tests).
mod spec_units {
    use std::path::Path;
    use std::time::Duration;

    use stairbench::sweep::spec::{format_duration, SpecError, SpecFile};

    fn parse(text: &str) -> Result<SpecFile, SpecError> {
        SpecFile::parse(Path::new("t.toml"), text)
    }

    #[test]
    fn durations_format_in_spec_notation() {
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(2)), "2s");
    }

    #[test]
    fn unknown_key_is_located() {
        let err =
            parse("name = \"x\"\n[[targets]]\nname = \"a\"\nbuiltn = \"msgr\"\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("t.toml:4:1: targets[0].builtn:"), "{msg}");
        assert!(msg.contains("unknown field"), "{msg}");
    }

    #[test]
    fn bad_duration_is_located() {
        let err = parse("name = \"x\"\nduration = \"2 parsecs\"\ntargets = []\n").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("t.toml:2:12: duration:"), "{msg}");
        assert!(msg.contains("unknown unit"), "{msg}");
    }

    #[test]
    fn error_at_names_a_later_problem() {
        let f = parse("name = \"x\"\n\n[[targets]]\nname = \"a\"\nbuiltin = \"nope\"\n").unwrap();
        let msg = f.error_at(&["targets", "0", "builtin"], "bad").to_string();
        assert_eq!(msg, "t.toml:5:11: targets[0].builtin: bad");
    }
}

#[test]
fn a_target_that_ignores_sigterm_is_killed_after_the_grace_and_the_report_says_so() {
    // Python keeps an ignored SIGTERM ignored (it installs a handler for SIGINT only).
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("stubborn");
    std::fs::create_dir(&marker).unwrap();
    let spec = dir.path().join("stubborn.toml");
    std::fs::write(&spec, format!("name = \"stubborn\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\n[[targets]]\nname = \"stubborn\"\ncommand = \"sh -c \\\"trap '' TERM; exec python3 -m http.server {{port}} --bind 127.0.0.1 --directory {}\\\"\"\nurl = \"http://127.0.0.1:{{port}}/\"\n", marker.display())).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let note = "stubborn / shared: target \"stubborn\" ignored SIGTERM for 2s and was killed \
                (SIGKILL); if another signal stops it cleanly, set stop_signal";
    let notes = std::fs::read_to_string(out_dir.join("notes.txt")).unwrap();
    assert!(notes.contains(note), "{notes}");
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(report.contains(note), "{report}");
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("cmdline")).ok())
        .map(|c| c.replace('\0', " "))
        .filter(|c| c.contains(&marker.display().to_string()) && c.contains("http.server"))
        .collect();
    assert!(left.is_empty(), "left running: {left:?}");
}

#[test]
fn a_target_with_its_own_stop_signal_is_stopped_with_it_and_not_killed() {
    // The same TERM-ignoring server, stopped with INT (Python exits on KeyboardInterrupt)
    // within a stop_timeout of 5s: no kill, no note; the spec's keys are checked.
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("int-stops");
    std::fs::create_dir(&marker).unwrap();
    let spec = dir.path().join("int.toml");
    let body = format!("name = \"int\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\n[[targets]]\nname = \"int\"\ncommand = \"sh -c \\\"trap '' TERM; exec python3 -m http.server {{port}} --bind 127.0.0.1 --directory {}\\\"\"\nurl = \"http://127.0.0.1:{{port}}/\"\nstop_signal = \"INT\"\nstop_timeout = \"5s\"\n", marker.display());
    std::fs::write(&spec, &body).unwrap();
    let out_dir = dir.path().join("run");
    let started = Instant::now();
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let notes = std::fs::read_to_string(out_dir.join("notes.txt")).unwrap_or_default();
    assert!(!notes.contains("was killed"), "{notes}");
    let stopped_with = "target \"int\" is stopped with SIGINT and killed if still running 5s later";
    assert!(notes.contains(stopped_with), "{notes}");
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(report.contains(stopped_with), "{report}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    std::fs::write(&spec, body.replace("\"INT\"", "\"STOP\"")).unwrap();
    let out = common::cli_cmd()
        .args(["run", "--dry-run"])
        .arg(&spec)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("targets[0].stop_signal: unknown signal \"STOP\": expected one of TERM, INT"),
        "{err}"
    );
}

#[test]
fn killed_outright_mid_step_it_leaves_no_process_and_resume_redoes_only_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("killed.toml");
    std::fs::write(&spec, "name = \"killed\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 4]\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n").unwrap();
    let out_dir = dir.path().join("run");
    let mut child = common::cli_cmd()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out_dir)
        .spawn()
        .unwrap();
    let steps_file = out_dir.join("steps.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&steps_file).map_or(0, |t| t.lines().count()) < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no step finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Inside the second step's window.
    std::thread::sleep(Duration::from_millis(300));
    let below = descendants(child.id() as i32);
    assert!(!below.is_empty(), "the server should be running");
    let first = std::fs::read_to_string(&steps_file).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = child.wait();
    let start = Instant::now();
    let alive = |pids: &[i32]| -> Vec<i32> {
        pids.iter()
            .copied()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat"))
                    .is_ok_and(|s| !s.contains(") Z "))
            })
            .collect()
    };
    while !alive(&below).is_empty() && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(alive(&below), Vec::<i32>::new(), "outlived stairbench");
    let out = common::cli_cmd()
        .arg("run")
        .arg("--resume")
        .arg(&out_dir)
        .output()
        .unwrap();
    common::assert_success(&out);
    let after = std::fs::read_to_string(&steps_file).unwrap();
    assert!(
        after.starts_with(&first),
        "the finished steps are kept as they were"
    );
    let steps = planned(read_steps(&steps_file).unwrap());
    let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "reactor.shared.c1.r0",
            "reactor.shared.c2.r0",
            "reactor.shared.c4.r0"
        ]
    );
    assert!(steps.iter().all(|s| s.status == StepStatus::Ok));
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Result<SmallDisk, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| format!("mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cannot mount a tmpfs (needs root): {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(SmallDisk { dir })
    }

    /// Writes a file until the disk is full.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.dir.path().join("filler");
        let mut f = std::fs::File::create(&path).unwrap();
        let block = [0u8; 4096];
        while f.write_all(&block).is_ok() {}
        path
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_disk_stops_the_run_keeping_every_finished_step_and_resume_goes_on() {
    let disk = match SmallDisk::mount("2m") {
        Ok(d) => d,
        Err(why) => return common::skip_or_fail(why),
    };
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("full.toml");
    std::fs::write(&spec, "name = \"full\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 4]\nplacements = [\"shared\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n").unwrap();
    let out_dir = disk.dir.path().join("run");
    let child = common::cli_cmd()
        .arg("run")
        .arg(&spec)
        .arg("--out")
        .arg(&out_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let steps_file = out_dir.join("steps.jsonl");
    let start = Instant::now();
    while std::fs::read_to_string(&steps_file).map_or(0, |t| t.lines().count()) < 1 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no step finished"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = std::fs::read_to_string(&steps_file).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let filler = disk.fill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(
        stderr.contains(&format!(" run --resume {}`", out_dir.display())),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&steps_file).unwrap(), first);
    assert!(!out_dir.join("intervals/reactor.shared.c2.r0.csv").exists());
    assert!(!out_dir.join("hist/reactor.shared.c2.r0.hlog").exists());
    std::fs::remove_file(filler).unwrap();
    let out = common::cli_cmd()
        .arg("run")
        .arg("--resume")
        .arg(&out_dir)
        .output()
        .unwrap();
    common::assert_success(&out);
    let steps = planned(read_steps(&steps_file).unwrap());
    let ids: Vec<&str> = steps.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "reactor.shared.c1.r0",
            "reactor.shared.c2.r0",
            "reactor.shared.c4.r0"
        ]
    );
    assert!(steps.iter().all(|s| s.status == StepStatus::Ok));
    assert!(!out_dir
        .join("intervals/reactor.shared.c2.r0.partial.csv")
        .exists());
}

/// A process a target started and left to stairbench (a double fork in a session of its
/// own, like the neighbour demonstration's CPU hog) outlives each step's client, whose stop
/// ends only what appeared after the client started; it goes when the run ends.
#[test]
fn a_targets_orphan_outlives_each_steps_client_and_not_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("orphan.pid");
    let target = dir.path().join("target.sh");
    std::fs::write(
        &target,
        "(setsid sh -c 'echo $$ > \"$1\"; while sleep 0.05; do :; done' x \"$1\" &)\n\
         exec python3 -m http.server \"$2\" --bind 127.0.0.1\n",
    )
    .unwrap();
    // The client fails (and so does its step) when the orphan is gone.
    let spec = dir.path().join("orphan.toml");
    std::fs::write(
        &spec,
        format!(
            r#"name = "orphan"
duration = "1s"
warmup = "0s"
clients = [1, 2, 3]
placements = ["shared"]
[[targets]]
name = "t"
command = "sh {target} {pidfile} {{port}}"
ready = {{ tcp = true, timeout = "20s" }}
[client]
command = "sh -c 'sleep 0.3; kill -0 $(cat {pidfile}) && echo requests: 10 && echo duration: 0.3'"
parser = "regex"
parser_options = {{ patterns = ['requests: (?P<requests>[0-9]+)', 'duration: (?P<duration_s>[0-9.]+)'] }}
"#,
            target = target.display(),
            pidfile = pidfile.display(),
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 3, "{}", String::from_utf8_lossy(&out.stderr));
    for step in &steps {
        assert_eq!(step["status"], "ok", "the orphan was gone: {step:#}");
    }
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = || unsafe { libc::kill(pid, 0) } == 0;
    let start = std::time::Instant::now();
    while alive() && start.elapsed() < std::time::Duration::from_secs(3) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(!alive(), "the orphan {pid} outlived the run");
}

/// Busy loops on every CPU of this machine, killed on drop.
struct Hogs(Vec<std::process::Child>);

impl Hogs {
    fn start() -> Hogs {
        let n = std::thread::available_parallelism().map_or(2, |n| n.get());
        Hogs(
            (0..n)
                .map(|_| {
                    Command::new("sh")
                        .args([
                            "-c",
                            "end=$(($(date +%s) + 60)); while [ $(date +%s) -lt $end ]; do :; done",
                        ])
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(std::process::Child::id).collect()
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn a_step_whose_cpus_others_shared_is_disturbed_run_again_and_left_out() {
    // Its hogs spin on every CPU: the soak beside them would be a neighbour.
    let _turn = common::busy_machine_turn();
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("hog.toml");
    std::fs::write(
        &spec,
        "name = \"hog\"\nduration = \"300ms\"\nwarmup = \"0s\"\nclients = [1]\nplacements = [\"shared\"]\n\
         [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor --threads 1\"\n",
    )
    .unwrap();
    let hogs = Hogs::start();
    let out_dir = dir.path().join("run");
    let out = common::cli_cmd()
        .env_remove("STAIRBENCH_KEEP_DISTURBED")
        .args([
            "run",
            spec.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    hogs_pids_checked(&hogs, &out_dir);
    drop(hogs);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let steps = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    // The repetition and its two re-runs, each disturbed: none counted as the point's run.
    let statuses: Vec<StepStatus> = steps.iter().map(|s| s.status).collect();
    assert_eq!(statuses, [StepStatus::Disturbed; 3], "{stderr}");
    assert!(
        stderr.contains("was disturbed; running it again although its CPUs were still"),
        "{stderr}"
    );
    let analysis: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("analysis.json")).unwrap())
            .unwrap();
    // Left out of the analysis, as a client-saturated step is: no level to fit or compare.
    let points = &analysis["series"][0]["points"];
    assert_eq!(points.as_array().map_or(0, Vec::len), 0, "{analysis}");
    // The report counts them and each row says by whom.
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        md.contains("3 steps were disturbed (other processes shared their CPUs)")
            && md.matches("| disturbed: other processes took ").count() == 3,
        "{md}"
    );
}

/// Checks every step names the busiest other process of its own window (the hogs, or on a
/// busy machine whatever else was busier), with a share no more than its side's total.
fn hogs_pids_checked(hogs: &Hogs, out_dir: &Path) {
    assert!(!hogs.pids().is_empty());
    for s in read_steps(&out_dir.join("steps.jsonl")).unwrap() {
        let d = s
            .figures
            .disturbed
            .as_ref()
            .expect("a disturbed step says by whom");
        let (side, total) = d.worst();
        assert!(total >= 10.0 && !d.kept, "{d:?}");
        let b = d
            .busiest
            .as_ref()
            .unwrap_or_else(|| panic!("the busiest is named: {d:?} {:?}", s.observation()));
        let share = |n: &stairbench::record::use_cpu::Neighbour| {
            if side == "server" {
                n.server_cpus_pct
            } else {
                n.client_cpus_pct
            }
        };
        let window = s.observation().and_then(|o| o.neighbours.as_ref()).unwrap();
        // The hogs share the test's process group, and so stairbench's: still others'.
        assert!(
            window
                .busiest
                .iter()
                .any(|n| hogs.pids().contains(&(n.pid as u32))),
            "the hogs {:?} named: {window:?}",
            hogs.pids()
        );
        let top = window.busiest.iter().map(share).fold(0.0, f64::max);
        assert_eq!(share(b), top, "the busiest of the same window: {window:?}");
        let share = share(b);
        assert!(share <= total + 1.0, "the busiest within the total: {d:?}");
        let reason = s.reason.as_deref().unwrap();
        assert!(
            reason.starts_with("other processes took ")
                && reason.contains(&format!("pid {}", b.pid)),
            "{reason}"
        );
    }
}

/// One series of a fake whose throughput is `rps(clients, k)` at its k-th step: (summary,
/// steps, analysis.json).
fn drift_series(
    rps: impl Fn(usize, usize) -> f64 + 'static,
) -> (RunSummary, Vec<StepResult>, serde_json::Value) {
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"drift\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 4, 8]\nplacements = [\"shared\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    let k = std::cell::Cell::new(0);
    let mut driver = FakeDriver::new(move |c| {
        k.set(k.get() + 1);
        rps(c, k.get() - 1)
    });
    let mut launcher = FakeLauncher::default();
    let stop = AtomicBool::new(false);
    let summary = run_fake(&p, dir.path(), &mut driver, &mut launcher, &stop);
    let steps = read_steps(&dir.path().join("steps.jsonl")).unwrap();
    let analysis = std::fs::read_to_string(dir.path().join("analysis.json")).unwrap();
    assert_eq!(schema_errors(dir.path()), Vec::<String>::new());
    (summary, steps, serde_json::from_str(&analysis).unwrap())
}

/// A series whose throughput fell past its peak has the peak measured once more after its
/// last level, as a repetition of its own marked `drift_check` and kept out of the level's
/// figures. A machine slowing 15% a step (the load doing nothing) shows at the peak's load
/// too: the diagnosis notes it; a fall the load made holds when measured again. A series
/// that did not fall gets no extra step (the 20 of `fake_loop_writes_each_step_and_the_reports`).
#[test]
fn a_fall_past_the_peak_is_checked_for_drift_by_measuring_the_peak_again() {
    let (summary, steps, analysis) = drift_series(|_, k| 10_000.0 * 0.85f64.powi(k as i32));
    let ids: Vec<(&str, bool)> = steps
        .iter()
        .map(|s| (s.id.as_str(), s.figures.drift_check))
        .collect();
    assert_eq!(
        ids,
        [
            ("a.shared.c1.r0", false),
            ("a.shared.c2.r0", false),
            ("a.shared.c4.r0", false),
            ("a.shared.c8.r0", false),
            ("a.shared.c1.r1", true)
        ]
    );
    let line = summary
        .findings
        .iter()
        .find(|l| l.contains("measured again"))
        .unwrap_or_else(|| panic!("no drift line: {:#?}", summary.findings));
    assert!(
        line.contains("throughput fell from 10000 req/s at 1 client to 6141 at 8 clients; 1 client measured again after it: 5220 req/s (-48% against its first measure, the last level within 10% of it: the machine slowed"),
        "{line}"
    );
    let point = &analysis["series"][0]["points"][0];
    assert_eq!(point["repetitions"], 1, "{point:#}");
    assert_eq!(point["throughput_rps"]["mean"], 10_000.0, "{point:#}");
    // 10000 × 0.85⁴, the fifth step's.
    let again = point["again_rps"].as_f64().unwrap();
    assert!((again - 5220.06).abs() < 0.01, "{point:#}");
    let notes = analysis["diagnosis"][0]["notes"].to_string();
    assert!(notes.contains("1 client measured again after the last level gave 5220 req/s against 10.0k req/s at first (-48%), and the last level 6141 req/s: the machine slowed"), "{notes}");

    // The load's own fall: the peak (2 clients) gives its throughput again.
    let curve = |c: usize| match c {
        1 => 5000.0,
        2 => 10_000.0,
        4 => 9500.0,
        _ => 7000.0,
    };
    let (summary, steps, analysis) = drift_series(move |c, _| curve(c));
    let last = steps.last().unwrap();
    assert_eq!(
        (last.id.as_str(), last.figures.drift_check),
        ("a.shared.c2.r1", true)
    );
    assert!(
        summary
            .findings
            .iter()
            .any(|l| l.contains("+0% against its first measure: the fall held")),
        "{:#?}",
        summary.findings
    );
    assert_eq!(analysis["series"][0]["points"][1]["again_rps"], 10_000.0);
    let notes = analysis["diagnosis"][0]["notes"].to_string();
    assert!(!notes.contains("slowed"), "{notes}");

    // Rising to the last level, or falling one level past the peak measured once (the
    // analysis reads no fall there): nothing to check.
    for curve in [
        |c: usize| 1000.0 * c as f64,
        |c: usize| 1000.0 * c.min(4) as f64 - 2000.0 * (c / 8) as f64,
    ] {
        let (_, steps, _) = drift_series(move |c, _| curve(c));
        assert_eq!(steps.len(), 4);
        assert!(steps.iter().all(|s| !s.figures.drift_check));
    }
}
