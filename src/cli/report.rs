//! `stairbench report` and `stairbench compare`.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::analyze::compare::runs::{compare_dirs, Comparison};
use crate::analyze::stats::TestOptions;
use crate::exit::UsageError;
use crate::report::compare::{gate_message, render_text};

/// Options of `stairbench report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// A run directory (with steps.jsonl).
    pub dir: PathBuf,
}

/// Options of `stairbench compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// Run directories; the first is the reference the others are measured against.
    #[arg(required = true, num_args = 2.., value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// The figure compared.
    #[arg(long, value_enum, default_value = "throughput_rps")]
    pub metric: crate::analyze::compare::Metric,
    /// Exit 1 when a step of a later run is slower than the first run's by more than PCT
    /// percent and Welch's t-test finds the difference (a gate for CI); without repetitions
    /// the noise is unknown and the threshold alone decides.
    #[arg(long, value_name = "PCT")]
    pub fail_if_slower: Option<f64>,
    /// Differences smaller than PCT percent of the first run's mean are "equal", however
    /// significant.
    #[arg(long, value_name = "PCT", default_value_t = 2.0)]
    pub min_effect: f64,
    /// Confidence level, percent, of Welch's t-test and of the ratios' intervals.
    #[arg(long, value_name = "PCT", default_value_t = 95.0)]
    pub confidence: f64,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Write the comparison as JUnit XML: one test case per step of each later run, failed
    /// when it breaks --fail-if-slower.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
}

/// Rebuilds a run directory's report files from its steps.jsonl.
pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let report = crate::report::Report::read(&args.dir)
        .map_err(|e| anyhow::Error::msg(e.to_string()))
        .with_context(|| format!("reading run directory {}", args.dir.display()))
        .map_err(|e| UsageError(format!("{e:#}")))?;
    crate::report::write_all(&args.dir, &report)
        .with_context(|| format!("writing reports into {}", args.dir.display()))?;
    for line in crate::report::findings::stdout_lines(&report.analysis) {
        println!("{line}");
    }
    for file in crate::report::written_files() {
        println!("wrote {}", args.dir.join(file).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Compares runs: prints the comparison (text or JSON); exit 1 when the
/// `--fail-if-slower` gate fails.
pub fn compare(args: CompareArgs) -> anyhow::Result<ExitCode> {
    let CompareArgs {
        dirs,
        metric,
        fail_if_slower: gate_pct,
        min_effect,
        confidence,
        json,
        junit,
    } = args;
    let opts = TestOptions::from_pct(confidence, min_effect)
        .map_err(|e| UsageError(format!("--confidence / --min-effect: {e}")))?;
    if let Some(pct) = gate_pct.filter(|p| !(p.is_finite() && *p >= 0.0)) {
        return Err(UsageError(format!(
            "--fail-if-slower {pct}: give a percentage of 0 or more, e.g. 5"
        ))
        .into());
    }
    let cmp = compare_dirs(&dirs, metric, gate_pct, opts)?;
    let mut stdout = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut stdout, &cmp)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", render_text(&cmp))?;
    }
    stdout.flush()?;
    if let Some(path) = &junit {
        let cases = crate::report::junit::comparison_cases(&cmp);
        super::gates::write_junit(path, "compare", &cases)?;
    }
    Ok(gate_outcome(&cmp, gate_pct))
}

/// Says whether the `--fail-if-slower` gate passed: exit 1 when it failed, else 0.
fn gate_outcome(cmp: &Comparison, gate_pct: Option<f64>) -> ExitCode {
    match (gate_message(cmp), gate_pct) {
        (Some(message), _) => {
            eprintln!("stairbench compare: FAILED: {message}");
            ExitCode::from(1)
        }
        (None, Some(pct)) => {
            eprintln!(
                "stairbench compare: passed: no step slower than {} by more than {pct}% and by a difference Welch's t-test finds at {}%",
                cmp.runs[0].label,
                cmp.confidence_pct
            );
            ExitCode::SUCCESS
        }
        (None, None) => ExitCode::SUCCESS,
    }
}
