//! The runner's finishing touches: the saturation note, `repetitions = "auto"`, comparisons
//! checked before a run, the server's per-core busy % per second and the heat-map step, and
//! the example specs.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use stairbench::sweep::driver::{Driver, FakeDriver};
use stairbench::sweep::experiment::finish_dir;
use stairbench::sweep::observer::NullObserver;
use stairbench::sweep::placement::TopologyPlacements;
use stairbench::sweep::plan::Plan;
use stairbench::sweep::progress::Quiet;
use stairbench::sweep::result::StepStatus;
use stairbench::sweep::rundir::RunDir;
use stairbench::sweep::runner::{RunSummary, Runner};
use stairbench::sweep::server::FakeLauncher;
use stairbench::sweep::spec::SpecFile;

const BIN: &str = env!("CARGO_BIN_EXE_stairbench");

fn plan(text: &str) -> Plan {
    let spec = SpecFile::parse(Path::new("spec.toml"), text).unwrap_or_else(|e| panic!("{e}"));
    Plan::new(spec, PathBuf::from(BIN)).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs the loop with a fake driver and launcher over 4 CPUs, then writes the reports.
fn run_fake(plan: &Plan, dir: &Path, driver: &mut dyn Driver) -> RunSummary {
    let mut rundir = RunDir::create(Some(dir), &plan.name).unwrap();
    rundir.write_file("spec.toml", &plan.spec.text).unwrap();
    let placements = TopologyPlacements::with_cpus(vec![0, 1, 2, 3], plan.custom.clone());
    let mut runner = Runner {
        plan,
        dir: &mut rundir,
        launcher: &mut FakeLauncher::default(),
        driver,
        observer: &mut NullObserver,
        placements: &placements,
        progress: &mut Quiet,
        stop: &AtomicBool::new(false),
    };
    let summary = runner.run().unwrap();
    finish_dir(&rundir, &summary).unwrap();
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
    let summary = run_fake(&p, dir.path(), &mut driver);
    let note = &summary.findings[0];
    assert!(note.contains("from 2 clients to 8 clients"), "{note}");
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
