//! `stairbench run` and `stairbench demo`: the sweep runs the plan, then the reports are
//! written from the run directory it leaves (`sweep::run` then `report::write_all`, joined
//! here so neither imports the other).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use super::demo::{self, DemoShape};
use super::gates;
use super::live::{Live, LiveArgs};
use super::progress::Bar;
use super::shell::Verbosity;
use crate::analyze::run::RunAnalysis;
use crate::exit::{OrUsage as _, Outcome, UsageError};
use crate::placement::TopologyPlacements;
use crate::record::steps::StepStatus;
use crate::sweep::experiment::{check_out, describe, run_plan, Destination, Finished};
use crate::sweep::plan::Plan;
use crate::sweep::runner::{RunEnd, RunSummary};
use crate::sweep::spec::SpecFile;

/// Options of `stairbench run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The spec (TOML). With --resume it may be left out: the run's own spec.toml is used.
    pub spec: Option<PathBuf>,
    /// Run directory to create (default: results/<name>-<timestamp>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the steps, cpusets, commands and estimated time; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Continue an interrupted run from its last finished step.
    #[arg(long, value_name = "DIR", conflicts_with = "out")]
    pub resume: Option<PathBuf>,
    /// Keep one client count for a long study (with --duration); a spec's open-loop `rate`
    /// series is held at its last rate.
    #[arg(
        long,
        value_name = "CLIENTS",
        requires = "duration",
        conflicts_with = "clients"
    )]
    pub hold: Option<usize>,
    /// Measured window of each step instead of the spec's (the warm-up is scaled with it,
    /// never lengthened), e.g. 1s for a quick trial; with --hold, the held level's, e.g. 1h.
    #[arg(long, value_name = "D", value_parser = parse_dur)]
    pub duration: Option<std::time::Duration>,
    /// Client counts instead of the spec's staircase, e.g. 1,4 (a rate series: its one count).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub clients: Option<Vec<usize>>,
    /// Write the thresholds' verdicts as JUnit XML (one test case per threshold).
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Keep a step whose CPUs other processes shared (the spec's `disturbed_pct`, 10% by
    /// default) in the analysis, marked, instead of running it again and leaving it out
    /// (for a machine that is never quiet, such as a test suite running beside itself).
    #[arg(long, env = "STAIRBENCH_KEEP_DISTURBED", hide_env_values = true)]
    pub keep_disturbed: bool,
    /// -q: no progress; -v: every per-second line too.
    #[command(flatten)]
    pub verbosity: Verbosity,
    /// --json-lines, --metrics-listen.
    #[command(flatten)]
    pub live: LiveArgs,
    /// Add the finished run to this history database (SQLite; see `stairbench history`).
    #[arg(long, value_name = "FILE")]
    pub history: Option<PathBuf>,
    /// With --history: labels kept with the run.
    #[command(flatten)]
    pub labels: super::history::LabelArgs,
}

/// Options of `stairbench demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// A shorter staircase for a first look.
    #[arg(long, help = super::demo::quick_help())]
    pub quick: bool,
    /// Run directory to create (default: results/demo-<timestamp>).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Print the plan only.
    #[arg(long)]
    pub dry_run: bool,
    /// Keep steps whose CPUs other processes shared in the analysis, marked (as `run`).
    #[arg(long, env = "STAIRBENCH_KEEP_DISTURBED", hide_env_values = true)]
    pub keep_disturbed: bool,
    /// -q: no progress; -v: every per-second line too.
    #[command(flatten)]
    pub verbosity: Verbosity,
}

fn parse_dur(s: &str) -> Result<std::time::Duration, crate::units::DurationError> {
    crate::sweep::spec::parse_duration(s)
}

/// Runs a spec.
pub fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let spec = match (&args.spec, &args.resume) {
        (Some(p), _) => SpecFile::read(p)?,
        (None, Some(dir)) => SpecFile::read_from_run(dir)?,
        (None, None) => {
            let why = "give a spec file (stairbench run SPEC) or --resume DIR";
            return Err(UsageError(why.into()).into());
        }
    };
    let mut plan = Plan::new(spec, stairbench_bin()?)?;
    plan.keep_disturbed = args.keep_disturbed;
    match (args.hold, args.duration) {
        (Some(clients), Some(d)) => plan.hold(clients, d),
        (None, Some(d)) => plan.shorten(d),
        _ => {}
    }
    if let Some(clients) = &args.clients {
        plan.with_clients(clients).or_usage()?;
    }
    let dest = Destination {
        out: args.out,
        resume: args.resume,
        ..Destination::default()
    };
    let outputs = Outputs {
        junit: args.junit,
        verbosity: args.verbosity,
        live: args.live,
        history: args.history.map(|f| (f, args.labels)),
    };
    Ok(execute(&plan, &dest, args.dry_run, &outputs)?.0)
}

/// Runs the demo: reactor vs pool messenger servers, each on its own CPUs (see
/// [`super::demo`]); waits for the machine to settle first and ends with the verdict.
pub fn demo(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let cpus = crate::cpuset::allowed();
    let shape = DemoShape {
        quick: args.quick,
        cpus: cpus.len(),
    };
    let spec = SpecFile::parse(Path::new("demo.toml"), &demo::spec(shape))?;
    let mut plan = Plan::new(spec, stairbench_bin()?)?;
    plan.keep_disturbed = args.keep_disturbed;
    let mut notes = Vec::new();
    if !shape.separable() {
        notes.push(demo::unseparable_note(cpus.len()));
        println!("{}", notes[0]);
    }
    if args.dry_run {
        // One settle sample, as the run takes before its first step: how busy the CPUs are
        // decides how many repetitions `auto` will need.
        let now = demo::settle(&cpus, std::time::Duration::ZERO);
        plan.auto_runs = demo::expected_auto_runs(now.busy_pct);
        let (code, _) = execute(&plan, &Destination::default(), true, &Outputs::default())?;
        println!("{}", demo::settle_plan(shape));
        if let Some(line) = demo::busy_estimate_note(&mut plan, now.busy_pct) {
            println!("{line}");
        }
        return Ok(code);
    }
    // Chosen here rather than by the run, so the verdict can read the run's analysis.
    let out = args.out.unwrap_or_else(|| {
        Path::new("results").join(format!("demo-{}", crate::record::rundir::timestamp()))
    });
    let mut dest = Destination {
        out: Some(out.clone()),
        ..Destination::default()
    };
    check_out(&dest).or_usage()?;
    let settled = demo::settle(&cpus, shape.settle_limit());
    plan.auto_runs = demo::expected_auto_runs(settled.busy_pct);
    println!("{}", settled.note(&cpus));
    notes.push(settled.note(&cpus));
    dest.notes = notes;
    dest.busy = Some(settled.sample(&cpus));
    let outputs = Outputs {
        verbosity: args.verbosity,
        ..Outputs::default()
    };
    // The analysis the reports were written from: the run directory is read once.
    let (code, analysis) = execute(&plan, &dest, false, &outputs)?;
    for line in demo::verdict(analysis.as_ref(), !settled.settled) {
        println!("note: {line}");
    }
    Ok(code)
}

/// The demo's spec for this machine's CPUs.
pub fn demo_spec(quick: bool) -> String {
    demo::spec(DemoShape {
        quick,
        cpus: crate::cpuset::allowed().len(),
    })
}

/// What a run writes besides its run directory.
#[derive(Debug, Default)]
struct Outputs {
    /// `--junit FILE`.
    junit: Option<PathBuf>,
    /// `-q`, `-v`.
    verbosity: Verbosity,
    /// `--json-lines`, `--metrics-listen`.
    live: LiveArgs,
    /// `--history FILE` and its `--label`s.
    history: Option<(PathBuf, super::history::LabelArgs)>,
}

/// Runs the plan (or, `dry_run`, describes it) and writes its reports; the exit code and the
/// analysis the reports were written from (none for a dry run).
fn execute(
    plan: &Plan,
    dest: &Destination,
    dry_run: bool,
    outputs: &Outputs,
) -> anyhow::Result<(ExitCode, Option<RunAnalysis>)> {
    if dry_run {
        let placements = TopologyPlacements::detect(plan.custom.clone());
        print!("{}", describe(plan, &placements));
        return Ok((ExitCode::SUCCESS, None));
    }
    // A directory already holding a run is a usage error (2); one that cannot be written is
    // a failure of the run (1), found by run_plan.
    check_out(dest).or_usage()?;
    // Servers already running answer, and their processes exist, before any load (exit 2).
    crate::sweep::plan::running::preflight(plan)?;
    if dest.resume.is_none() && !outputs.verbosity.quiet {
        let placements = TopologyPlacements::detect(plan.custom.clone());
        eprintln!(
            "{}",
            crate::sweep::experiment::estimate_line(plan, &placements)
        );
    }
    let stop = crate::signals::stop_flag();
    let bar = Bar::new(outputs.verbosity.quiet);
    let mut progress = Live::new(bar, outputs.live.open()?, outputs.verbosity.verbose);
    let Finished { dir, summary } =
        run_plan(plan, dest, &mut progress, stop).map_err(anyhow::Error::msg)?;
    // The figures as the reports define them (the analysis the reports were written from, so
    // the last lines and report.md/report.html can never disagree).
    let analysis = Some(write_reports(&dir)?);
    let verdicts = analysis.as_ref().map_or(&[][..], |a| &a.thresholds[..]);
    // With the JSON lines on standard output, the words go to standard error.
    let mut out: Box<dyn Write> = if outputs.live.json_lines_on_stdout() {
        Box::new(std::io::stderr())
    } else {
        Box::new(std::io::stdout())
    };
    print_summary(&summary, &dir, analysis.as_ref(), &mut out)?;
    if let Some(path) = &outputs.junit {
        let cases = crate::report::junit::threshold_cases(verdicts);
        gates::write_junit(path, &plan.name, &cases)?;
    }
    if let Some((file, labels)) = &outputs.history {
        super::history::add_run(file, &dir, labels)?;
    }
    let code = Outcome::first([run_outcome(&summary), gates::threshold_outcome(verdicts)]).into();
    Ok((code, analysis))
}

/// Writes a finished (or interrupted) run directory's reports from its files (steps.jsonl,
/// notes.txt, the raw files), as `stairbench report` rebuilds them; returns the analysis they
/// were written from.
pub fn write_reports(dir: &Path) -> anyhow::Result<RunAnalysis> {
    let report = crate::report::Report::read(dir).map_err(|e| anyhow::Error::msg(e.to_string()))?;
    crate::report::write_all(dir, &report)
        .map_err(|e| anyhow::Error::msg(format!("writing the reports: {e}")))?;
    Ok(report.analysis)
}

fn print_summary(
    summary: &RunSummary,
    dir: &Path,
    analysis: Option<&RunAnalysis>,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    if let Some(analysis) = analysis {
        for line in crate::report::findings::stdout_lines(analysis) {
            writeln!(out, "{line}")?;
        }
        for line in analysis.series.iter().filter_map(measured_the_client) {
            writeln!(out, "{line}")?;
        }
        gates::print_thresholds(&analysis.thresholds, out)?;
    }
    writeln!(out, "run directory: {}", dir.display())?;
    writeln!(out, "report:        {}", dir.join("report.html").display())?;
    writeln!(out, "               {}", dir.join("report.md").display())?;
    match &summary.end {
        RunEnd::ThresholdAbort(why) => eprintln!("aborted: {why}"),
        RunEnd::HostsGone(why) => {
            eprintln!("stopped: {why}; no later step was run, the finished ones are kept")
        }
        RunEnd::Interrupted => eprintln!(
            "interrupted: the finished steps are kept; continue with: {}",
            crate::sweep::runner::resume_command(dir)
        ),
        RunEnd::Completed | RunEnd::StoppedOnFailure => {}
    }
    for status in [
        StepStatus::Failed,
        StepStatus::Errors,
        StepStatus::Skipped,
        StepStatus::Disturbed,
    ] {
        let n = summary.steps.iter().filter(|s| s.status == status).count();
        if n > 0 {
            eprintln!(
                "{n} step(s) {}: see why in the report",
                status_words(status)
            );
        }
    }
    Ok(())
}

fn status_words(status: StepStatus) -> &'static str {
    match status {
        StepStatus::Failed => "failed (could not run)",
        StepStatus::Errors => "had errors above max_error_ratio",
        StepStatus::Skipped => "skipped",
        StepStatus::Disturbed => {
            "disturbed (other processes shared their CPUs; left out of the analysis)"
        }
        StepStatus::Ok => "ok",
    }
}

/// The one sentence for a series most of whose load levels saturated the load generator:
/// its figures are the client's, whatever the peak line says of the server.
pub fn measured_the_client(series: &crate::analyze::run::SeriesAnalysis) -> Option<String> {
    let saturated: Vec<&crate::analyze::run::LoadPoint> = (series.points.iter())
        .filter(|p| p.client_saturated)
        .collect();
    if saturated.len() * 2 <= series.points.len() {
        return None;
    }
    let levels: Vec<String> = saturated
        .iter()
        .map(|p| match p.rate_rps {
            Some(r) => format!("{r:.0} requests/s"),
            None => p.clients.to_string(),
        })
        .collect();
    let unit = if series.open_loop { "" } else { " clients" };
    Some(format!(
        "{} / {}: this series measured the load generator, not {}: it saturated its CPUs at {}{unit} ({} of {} load levels), so those levels show how fast the client is; give the server the costlier side (more work per request) or the load generator more CPUs",
        series.target,
        series.placement,
        series.target,
        levels.join(", "),
        saturated.len(),
        series.points.len()
    ))
}

/// The run's exit code: 130 interrupted, 1 a step failed (or the run stopped on one), 3 a
/// step's errors were over `max_error_ratio`, 0 every planned step ran (skips by policy
/// included).
pub fn run_outcome(summary: &RunSummary) -> Outcome {
    let has = |status| summary.steps.iter().any(|s| s.status == status);
    Outcome::first([
        if summary.end == RunEnd::Interrupted {
            Outcome::Interrupted
        } else {
            Outcome::Ok
        },
        if matches!(summary.end, RunEnd::StoppedOnFailure | RunEnd::HostsGone(_))
            || has(StepStatus::Failed)
        {
            Outcome::Failure
        } else {
            Outcome::Ok
        },
        if has(StepStatus::Errors) {
            Outcome::Errors
        } else {
            Outcome::Ok
        },
    ])
}

/// The stairbench binary that runs built-in servers: `STAIRBENCH_BIN`, else this executable.
fn stairbench_bin() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("STAIRBENCH_BIN") {
        return Ok(PathBuf::from(p));
    }
    crate::fleet::server::default_stairbench_bin()
        .or_else(|| std::env::current_exe().ok())
        .context("cannot find the stairbench binary for built-in servers; set STAIRBENCH_BIN")
}
