//! The runner's finishing touches: the saturation note, `repetitions = "auto"`, comparisons
//! checked before a run, the server's per-core busy % per second and the heat-map step, and
//! the example specs.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use stairbench::cli::run::write_reports;
use stairbench::fleet::driver::{Driver, FakeDriver};
use stairbench::fleet::server::FakeLauncher;
use stairbench::observe::step::NullObserver;
use stairbench::placement::TopologyPlacements;
use stairbench::record::rundir::RunDir;
use stairbench::record::steps::StepResult;
use stairbench::record::steps::StepStatus;
use stairbench::sweep::experiment::finish_dir;
use stairbench::sweep::plan::estimate::Done;
use stairbench::sweep::plan::Plan;
use stairbench::sweep::progress::{Position, Progress, Quiet};
use stairbench::sweep::runner::{RunSummary, Runner};
use stairbench::sweep::spec::SpecFile;

/// The page's data of a run directory, read once as `stairbench report` reads it.
fn page_of(dir: &Path) -> stairbench::report::html::ReportData {
    let report = stairbench::report::Report::read(dir).unwrap();
    stairbench::report::html::report_data(&report, None)
}

fn plan(text: &str) -> Plan {
    let spec = SpecFile::parse(Path::new("spec.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    Plan::new(spec, common::stairbench_bin()).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the loop with a fake driver and launcher over 4 CPUs, then writes the reports.
fn run_fake(plan: &Plan, dir: &Path, driver: &mut dyn Driver) -> RunSummary {
    run_fake_on(plan, dir, driver, vec![0, 1, 2, 3])
}

fn run_fake_on(plan: &Plan, dir: &Path, driver: &mut dyn Driver, cpus: Vec<usize>) -> RunSummary {
    run_fake_showing(plan, dir, driver, cpus, &mut Quiet)
}

fn run_fake_showing(
    plan: &Plan,
    dir: &Path,
    driver: &mut dyn Driver,
    cpus: Vec<usize>,
    progress: &mut dyn Progress,
) -> RunSummary {
    let mut rundir = RunDir::create(Some(dir), &plan.name).unwrap();
    rundir.write_file("spec.toml", &plan.spec.text).unwrap();
    let placements = TopologyPlacements::with_cpus(cpus, plan.custom.clone());
    let mut runner = Runner {
        plan,
        dir: &mut rundir,
        launcher: &mut FakeLauncher::default(),
        driver,
        observer: &mut NullObserver,
        placements: &placements,
        progress,
        stop: &AtomicBool::new(false),
    };
    let summary = runner.run().unwrap();
    finish_dir(&rundir, &summary).unwrap();
    write_reports(&rundir.path).unwrap();
    summary
}

fn saturating_spec(clients: &str) -> String {
    format!("name = \"x\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = {clients}\nstop_when = \"saturated\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n")
}

#[test]
fn saturation_note_names_the_skipped_counts_or_none() {
    // Flat from 2 clients on: saturation is seen at 8.
    let dir = tempfile::tempdir().unwrap();
    let p = plan(&saturating_spec("[1, 2, 4, 8, 16, 32]"));
    let mut driver = FakeDriver::new(|c| 1000.0 * c.min(2) as f64);
    let mut shown = Positions::default();
    let summary = run_fake_showing(&p, dir.path(), &mut driver, vec![0, 1, 2, 3], &mut shown);
    let note = &summary.findings[0];
    assert!(note.contains("from 2 clients to 8 clients"), "{note}");
    // The ETA counts the steps that stop_when skips as taking no time.
    let left: Vec<_> = shown.seen.iter().map(|at| at.left).collect();
    // At 8 clients (the step whose result shows the saturation), the rest still counted.
    assert_eq!(left[3], p.run_time() * 3);
    assert_eq!(left[4..], [std::time::Duration::ZERO; 2]);
    assert!(note.ends_with("skipped: 16, 32 clients"), "{note}");
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.contains("skipped: 16, 32 clients"), "{report}");

    // The same curve ending at 8: the last count ran, nothing is skipped.
    let dir = tempfile::tempdir().unwrap();
    let p = plan(&saturating_spec("[1, 2, 4, 8]"));
    let mut driver = FakeDriver::new(|c| 1000.0 * c.min(2) as f64);
    let summary = run_fake(&p, dir.path(), &mut driver);
    let note = &summary.findings[0];
    assert!(note.ends_with("none skipped"), "{note}");
    assert!(!note.contains("larger counts"), "{note}");
    assert!(summary
        .steps
        .iter()
        .all(|s| s.status != StepStatus::Skipped));
}

#[test]
fn saturation_never_acts_on_steps_that_measured_the_client() {
    // Flat from 2 clients on, as above, but the load generator saturated from 4 clients on:
    // those steps measured the client, so they are no evidence of the server's saturation.
    let dir = tempfile::tempdir().unwrap();
    let p = plan(&saturating_spec("[1, 2, 4, 8, 16, 32]"));
    let mut driver = FakeDriver::new(|c| 1000.0 * c.min(2) as f64);
    driver.client_saturated_from = Some(4);
    let summary = run_fake(&p, dir.path(), &mut driver);
    assert!(
        !summary.findings.iter().any(|f| f.contains("stop_when")),
        "{:?}",
        summary.findings
    );
    assert_eq!(summary.steps.len(), 6);
    assert!(summary.steps.iter().all(|s| s.status == StepStatus::Ok));
    // Most of its levels measured the client: stdout says so, in one sentence.
    let analysis = stairbench::report::analyze_run(dir.path()).unwrap();
    let line = stairbench::cli::run::measured_the_client(&analysis.series[0]).unwrap();
    assert!(
        line.starts_with("a / ") && line.contains(": this series measured the load generator, not a: it saturated its CPUs at 4, 8, 16, 32 clients (4 of 6 load levels)"),
        "{line}"
    );

    // Saturated from 16 only: the server's flat stretch 2, 4, 8 still stops the series.
    let dir = tempfile::tempdir().unwrap();
    let mut driver = FakeDriver::new(|c| 1000.0 * c.min(2) as f64);
    driver.client_saturated_from = Some(16);
    let summary = run_fake(&p, dir.path(), &mut driver);
    assert!(summary.findings[0].ends_with("skipped: 16, 32 clients"));
    let analysis = stairbench::report::analyze_run(dir.path()).unwrap();
    assert_eq!(
        stairbench::cli::run::measured_the_client(&analysis.series[0]),
        None,
        "the skipped levels measured nothing"
    );
}

/// Keeps every position the loop shows.
#[derive(Default)]
struct Positions {
    total: usize,
    seen: Vec<Position>,
}

impl Progress for Positions {
    fn begin(&mut self, total: usize, _: usize) {
        self.total = total;
    }
    fn at(&mut self, at: &Position) {
        self.seen.push(*at);
    }
    fn step(&mut self, _: &str) {}
    fn live(&mut self, _: f64) {}
    fn done(&mut self, _: &StepResult) {}
    fn note(&mut self, _: &str) {}
    fn finish(&mut self) {}
}

#[test]
fn progress_counts_planned_steps_with_repetitions_inside_them() {
    // Auto repetitions: 1 client never settles (5 runs), 2 settle at once (2), 4 after 3.
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"auto\"\nduration = \"1s\"\nwarmup = \"0s\"\nrepetitions = \"auto\"\nclients = [1, 2, 4]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    let mut driver = noisy_driver();
    let mut shown = Positions::default();
    run_fake_showing(&p, dir.path(), &mut driver, vec![0, 1, 2, 3], &mut shown);
    assert_eq!(shown.total, 3, "three planned steps, not 15 runs");
    let labels: Vec<String> = shown.seen.iter().map(Position::label).collect();
    assert_eq!(labels[0], "step 1/3 (repetition 1 of at most 5)");
    assert_eq!(labels[5], "step 2/3 (repetition 1 of at most 5)");
    assert_eq!(
        labels.last().unwrap(),
        "step 3/3 (repetition 3 of at most 5)"
    );
    assert_eq!(labels.len(), 5 + 2 + 3);
    // The first ETA is the dry run's estimate; the next steps are expected to take as many
    // runs as the finished ones did (5, then (5 + 2) / 2 = 3.5).
    assert_eq!(shown.seen[0].left, p.estimate());
    assert_eq!(shown.seen[5].left, p.run_time().mul_f64(5.0 * 2.0));
    assert_eq!(shown.seen[7].left, p.run_time().mul_f64(3.5));
    // The dry run prints that estimate.
    let placements = TopologyPlacements::with_cpus(vec![0, 1, 2, 3], p.custom.clone());
    let dry = stairbench::sweep::experiment::describe(&p, &placements);
    let secs = p.estimate().as_secs_f64().round() as u64;
    let want = format!("estimated time: about {}m{:02}s", secs / 60, secs % 60);
    assert!(dry.contains(&want), "{want}: {dry}");
    let at_start = Done {
        steps: 0,
        runs: 0,
        runs_of_step: 0,
        series_started: 0,
        skipping: 0,
    };
    assert_eq!(p.time_left(at_start), p.estimate());
}

/// The Tomcat example's shape: its dry run said 1m06s and it took 79 s, the two profile
/// passes left out of the model. Now they are in it, the dry run states what it assumes, and
/// the run's first line and the progress line's first ETA are the same figure.
#[test]
fn the_estimate_counts_profile_passes_and_the_first_eta_is_it() {
    let p = plan("name = \"prof\"\nduration = \"5s\"\nwarmup = \"3s\"\nclients = [1, 2, 4, 8]\nplacements = [\"shared\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n[profile]\nat = [\"busy\", \"saturated\"]\nseconds = 5\n");
    // 4 runs of 3 + 5 + 0.15 s, one server start of 0.3 s, 2 passes of 3 + 5 + 1 s.
    let want_s = 4.0 * 8.15 + 0.3 + 2.0 * 9.0;
    assert!(
        (p.estimate().as_secs_f64() - want_s).abs() < 1e-6,
        "{:?}",
        p.estimate()
    );
    let at_start = Done {
        steps: 0,
        runs: 0,
        runs_of_step: 0,
        series_started: 0,
        skipping: 0,
    };
    assert_eq!(p.time_left(at_start), p.estimate());
    let placements = TopologyPlacements::with_cpus(vec![0, 1, 2, 3], p.custom.clone());
    let dry = stairbench::sweep::experiment::describe(&p, &placements);
    assert!(dry.contains("estimated time: about 0m51s"), "{dry}");
    assert!(
        dry.contains("assuming each run 3 s warm-up + 5 s window + 0 s cool-down + 0.15 s to connect and record; each server ready 0.3 s after its start; 2 profile passes a series of 9 s each"),
        "{dry}"
    );
    let first_line = stairbench::sweep::experiment::estimate_line(&p, &placements);
    assert!(
        first_line.starts_with("estimated time: about 0m51s (assuming each run"),
        "{first_line}"
    );
}

/// Throughput by client count and call: 1 client never settles, 2 settle at once, 4 after 3.
fn noisy_driver() -> FakeDriver {
    let calls = std::rc::Rc::new(std::cell::RefCell::new(std::collections::BTreeMap::new()));
    FakeDriver::new(move |clients| {
        let mut calls = calls.borrow_mut();
        let n: &mut usize = calls.entry(clients).or_default();
        *n += 1;
        let script: &[f64] = match clients {
            1 => &[1000.0, 1200.0],
            2 => &[2000.0, 2001.0],
            _ => &[4000.0, 4200.0, 4100.0],
        };
        script[(*n - 1) % script.len()]
    })
}

#[test]
fn auto_repetitions_repeat_until_the_throughput_settles() {
    let text = "name = \"auto\"\nduration = \"1s\"\nwarmup = \"0s\"\nrepetitions = \"auto\"\nclients = [1, 2, 4]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n";
    let p = plan(text);
    // At most, every point runs 5 times.
    assert_eq!(p.max_steps(), 3 * 5);
    let placements = TopologyPlacements::with_cpus(vec![0, 1, 2, 3], p.custom.clone());
    let dry = stairbench::sweep::experiment::describe(&p, &placements);
    assert!(dry.contains("3 steps of 2 to 5 runs"), "{dry}");
    assert!(dry.contains("(at most 15 runs)"), "{dry}");
    assert!(
        dry.contains("client cpus 0-3, 2 to 5 runs (auto: until the throughput's CV < 3%)"),
        "{dry}"
    );

    let dir = tempfile::tempdir().unwrap();
    let summary = run_fake(&p, dir.path(), &mut noisy_driver());
    let runs = |c: usize| -> Vec<usize> {
        summary
            .steps
            .iter()
            .filter(|s| s.clients == c)
            .map(|s| s.rep)
            .collect()
    };
    // Each run is its own line of steps.jsonl, rep 0, 1, 2...
    assert_eq!(runs(1), [0, 1, 2, 3, 4]);
    assert_eq!(runs(2), [0, 1]);
    assert_eq!(runs(4), [0, 1, 2]);
    let lines = std::fs::read_to_string(dir.path().join("steps.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 10);

    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let section = &report[report.find("## Noisy steps").unwrap()..];
    // The noisy-steps table only, not the merged-percentiles table after it.
    let section = &section[..section.find("Each repeated level").unwrap_or(section.len())];
    assert!(section.contains("`repetitions = \"auto\"`"), "{section}");
    let noisy = format!(
        "| a | shared | 1 | 5 | {:.1}% | still noisy after 5 runs |",
        cv_pct(&[1000.0, 1200.0, 1000.0, 1200.0, 1000.0])
    );
    assert!(section.contains(&noisy), "{noisy} in {section}");
    let settled = format!(
        "| a | shared | 4 | 3 | {:.1}% | settled |",
        cv_pct(&[4000.0, 4200.0, 4100.0])
    );
    assert!(section.contains(&settled), "{settled} in {section}");
    // 2 clients settled after 2 runs: not among those that needed more.
    assert!(!section.contains("| a | shared | 2 | 2 |"), "{section}");
}

/// Sample standard deviation over the mean, in percent.
fn cv_pct(v: &[f64]) -> f64 {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    100.0 * var.sqrt() / mean
}

fn spec_error(text: &str) -> String {
    let spec = match SpecFile::parse(Path::new("bad.toml"), text) {
        Ok(spec) => spec,
        Err(e) => return e.to_string(),
    };
    match Plan::new(spec, common::stairbench_bin()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("accepted a bad spec:\n{text}"),
    }
}

const TWO_TARGETS: &str = "name = \"c\"\nclients = [1, 2, 4]\nplacements = [\"shared\", \"separated\"]\n[[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\n[[targets]]\nname = \"pool\"\nbuiltin = \"msgr --arch pool\"\n";

#[test]
fn comparisons_are_checked_before_the_run() {
    let good = format!("{TWO_TARGETS}[[comparisons]]\na = \"reactor/shared@4\"\nbaseline = \"pool\"\nmetric = \"p99\"\n");
    plan(&good);
    // Lines 1-9 are TWO_TARGETS; [[comparisons]] is line 10.
    let cases = [
        (
            "a = \"reactr\"\nb = \"pool\"\n",
            "bad.toml:11:5: comparisons[0].a: unknown target \"reactr\" (did you mean \"reactor\"?): expected one of reactor, pool",
        ),
        (
            "a = \"reactor\"\nbaseline = \"pool/sideways\"\n",
            "bad.toml:12:12: comparisons[0].baseline: unknown placement \"sideways\"",
        ),
        (
            "a = \"reactor@8\"\nb = \"pool\"\n",
            "bad.toml:11:5: comparisons[0].a: no step has 8 clients: the series steps through 1, 2, 4",
        ),
        (
            "a = \"reactor@eight\"\nb = \"pool\"\n",
            "bad.toml:11:5: comparisons[0].a: \"reactor@eight\": \"eight\" after '@' is not a client count",
        ),
        (
            "a = \"reactor\"\nb = \"pool\"\nmetrc = \"p99\"\n",
            "bad.toml:13:9: comparisons[0].metrc: unknown field `metrc`",
        ),
        (
            "a = \"reactor\"\nb = \"pool\"\nmetric = \"speed\"\n",
            "bad.toml:10:1: comparisons[0]: unknown variant `speed`",
        ),
        (
            "a = \"reactor\"\n",
            "bad.toml:10:1: comparisons[0]: missing field `b`",
        ),
    ];
    for (entry, want) in cases {
        let err = spec_error(&format!("{TWO_TARGETS}[[comparisons]]\n{entry}"));
        assert!(err.starts_with(want), "want {want}\n got {err}");
    }
}

/// The columns of an intervals CSV by header name.
fn csv_column(text: &str, name: &str) -> Vec<(f64, String)> {
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == name)
        .unwrap_or_else(|| panic!("no {name} in {header:?}"));
    lines
        .map(|l| {
            let cells: Vec<&str> = l.split(',').collect();
            (
                cells[0].parse().unwrap(),
                cells.get(col).unwrap_or(&"").to_string(),
            )
        })
        .collect()
}

#[test]
fn intervals_hold_the_servers_per_core_busy_and_the_heat_map_shows_it() {
    // cpu0 exists on every Linux machine: both sides on it, one figure per second each.
    let dir = tempfile::tempdir().unwrap();
    let p = plan("name = \"cores\"\nduration = \"3s\"\nwarmup = \"0s\"\nclients = [1, 2]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n");
    run_fake_on(
        &p,
        dir.path(),
        &mut FakeDriver::new(|c| 100.0 * c as f64),
        vec![0],
    );
    let csv = std::fs::read_to_string(dir.path().join("intervals/a.shared.c2.r0.csv")).unwrap();
    let server = csv_column(&csv, "server_per_core_busy");
    let client = csv_column(&csv, "client_per_core_busy");
    assert_eq!(server.len(), 3, "{csv}");
    for ((t, s), (_, c)) in server.iter().zip(&client) {
        assert!(*t > 0.0);
        for cell in [s, c] {
            let v: f64 = cell.parse().unwrap_or_else(|_| panic!("{cell:?} in {csv}"));
            assert!((0.0..=100.0).contains(&v), "{csv}");
        }
    }
    let data = page_of(dir.path());
    let heat = data.heat_map.expect("a heat map");
    // The busiest step of the first (only) series: 2 clients, on the server's cores.
    assert_eq!(heat.step_id, "a.shared.c2.r0");
    assert!(heat.label.starts_with("server cores"), "{}", heat.label);
    assert_eq!(heat.cores, ["cpu0"]);
    assert_eq!(heat.seconds.len(), 3);
    let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    // One core is a sentence, not a one-row heat map.
    assert!(html.contains("one core (cpu0), busy"), "{html}");
}

const HEAT: &str = "name = \"heat\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1, 2, 4]\nplacements = [\"shared\", \"separated\"]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n[[targets]]\nname = \"b\"\nbuiltin = \"msgr\"\n";

#[test]
fn heat_map_step_is_the_first_series_busiest_unless_the_spec_chooses() {
    // Throughput peaks at 2 clients; later series are faster, but the first series is shown.
    let curve = |c: usize| {
        if c == 2 {
            300.0
        } else {
            100.0 * c as f64 / 4.0
        }
    };
    let dir = tempfile::tempdir().unwrap();
    run_fake(&plan(HEAT), dir.path(), &mut FakeDriver::new(curve));
    let data = page_of(dir.path());
    assert_eq!(data.heat_map.unwrap().step_id, "a.shared.c2.r0");

    let chosen = format!("{HEAT}[report]\nheat_map = \"b/separated@4\"\n");
    let dir = tempfile::tempdir().unwrap();
    run_fake(&plan(&chosen), dir.path(), &mut FakeDriver::new(curve));
    let data = page_of(dir.path());
    assert_eq!(data.heat_map.unwrap().step_id, "b.separated.c4.r0");

    let err = spec_error(&format!("{HEAT}[report]\nheat_map = \"b/separated@3\"\n"));
    assert!(
        err.starts_with("bad.toml:13:12: report.heat_map: no step has 3 clients"),
        "{err}"
    );
    let err = spec_error(&format!("{HEAT}[report]\nheat_mp = \"b\"\n"));
    assert!(err.contains("report.heat_mp: unknown field"), "{err}");
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

fn dry_run(path: &Path) -> String {
    let out = common::cli_cmd()
        .args(["run", "--dry-run"])
        .arg(path)
        .output()
        .unwrap();
    common::assert_success(&out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_seed_000_table_example_skips_what_this_machine_lacks_visibly() {
    let out = dry_run(&example("crimson-msgr-table.toml"));
    // The seed's table names CPUs up to 111: skipped here with the reason, unless this is
    // the seed's machine.
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online < 112 {
        assert!(
            out.contains(
                "reactor.seed-separated.c2.r0: skipped: client cpuset \"28-29\" names CPU 28"
            ),
            "{out}"
        );
        assert!(out.contains("step(s) are skipped on this machine"), "{out}");
    }
    // A count the table has no row for is skipped, saying which counts it has.
    assert!(
        out.contains("reactor.seed-balanced.c1.r0: skipped: custom placement \"balanced\" has no cpusets for 1 CPUs (it lists 2, 4, 8"),
        "{out}"
    );
    // The small table (same format) runs its 1-client step wherever there are 2 CPUs.
    if online >= 2 {
        assert!(
            out.contains("reactor.small-separated.c1.r0: server cpus 0 client cpus 1"),
            "{out}"
        );
    }
    // The example's copy of the seed's table is the one the tests check.
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/sweep/seed000-cpusets.json");
    assert_eq!(
        std::fs::read_to_string(example("seed000-cpusets.json")).unwrap(),
        std::fs::read_to_string(data).unwrap()
    );
}

#[test]
fn the_rate_search_example_bisects_between_its_bounds() {
    let path = example("msgr-rate-search.toml");
    let p = Plan::new(SpecFile::read(&path).unwrap(), common::stairbench_bin()).unwrap();
    match p.series {
        stairbench::sweep::plan::Series::Find { lo, hi, p99_ms, .. } => {
            assert!(lo < hi && p99_ms > 0.0)
        }
        other => panic!("not a rate search: {other:?}"),
    }
    let out = dry_run(&path);
    assert!(out.contains("reactor.separated.c4.rate2000.r0"), "{out}");
}
