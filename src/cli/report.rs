//! `stairbench report` and `stairbench compare`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

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
    pub metric: crate::report::compare::Metric,
    /// Exit 1 when a step of a later run is slower than the first run's by more than PCT
    /// percent and the difference is not within noise (a gate for CI); without repetitions
    /// the noise is unknown and the threshold alone decides.
    #[arg(long, value_name = "PCT")]
    pub fail_if_slower: Option<f64>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// Rebuilds a run directory's report files from its steps.jsonl.
pub fn report(args: ReportArgs) -> anyhow::Result<ExitCode> {
    let run = crate::report::RunData::read(&args.dir)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading run directory {}", args.dir.display()))
        .map_err(|e| crate::exit::UsageError(format!("{e:#}")))?;
    crate::report::write_all(&args.dir, &run)
        .with_context(|| format!("writing reports into {}", args.dir.display()))?;
    if let Some(analysis) = &run.analysis {
        for line in crate::report::analysis::peak_lines(analysis) {
            println!("{line}");
        }
    }
    for file in crate::report::written_files() {
        println!("wrote {}", args.dir.join(file).display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Compares runs.
pub fn compare(args: CompareArgs) -> anyhow::Result<ExitCode> {
    crate::report::compare::run(&args.dirs, args.metric, args.fail_if_slower, args.json)
}
