//! `stairbench history`: keep runs in an SQLite history, print the change points of every
//! series across them, gate CI on the newest ones (docs/history.md).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::analyze::changes::ChangeOptions;
use crate::analyze::history::{self, GateOptions, HistoryChange};
use crate::exit::Outcome;
use crate::record::history::{History, HistoryError, RunRecord, RunStatus};
use crate::record::run::RunData;

/// Options of `stairbench history`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct HistoryArgs {
    /// `add`: record run directories.
    #[command(subcommand)]
    pub command: Option<HistoryCommand>,
    /// The history database (SQLite), as `history add` or `run --history` wrote it.
    #[arg(required = true)]
    pub file: Option<PathBuf>,
    /// Print the change points as a JSON list instead of text.
    #[arg(long)]
    pub json: bool,
    /// Exit 4 and name it when a regression begins among the newest --window runs of a series
    /// with a change of --min-change % or more; else exit 0.
    #[arg(long)]
    pub check: bool,
    /// With --check: how many newest runs a regression must begin in.
    #[arg(long, value_name = "K", default_value_t = 5)]
    pub window: usize,
    /// With --check: the smallest change, in %, that fails the gate.
    #[arg(long, value_name = "PCT", default_value_t = 2.0)]
    pub min_change: f64,
    /// A change point is kept when its t-test p-value is below this.
    #[arg(long, value_name = "P", default_value_t = ChangeOptions::default().max_p)]
    pub max_p: f64,
    /// Also write one offline HTML page: each series' figures over the runs, change points
    /// marked.
    #[arg(long, value_name = "OUT")]
    pub html: Option<PathBuf>,
    /// Fewest runs on either side of a change point.
    #[arg(long, value_name = "N", default_value_t = ChangeOptions::default().min_segment)]
    pub min_segment: usize,
}

/// `stairbench history`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum HistoryCommand {
    /// Record run directories in a history database (created if missing), oldest run first.
    Add(AddArgs),
}

/// Options of `stairbench history add`.
#[derive(Debug, clap::Args)]
pub struct AddArgs {
    /// The history database (SQLite); created when missing.
    pub file: PathBuf,
    /// Run directories to add; added in the order their runs started.
    #[arg(required = true)]
    pub dirs: Vec<PathBuf>,
    /// A label kept with each run added (repeatable): --label commit=abc123 --label branch=main.
    #[command(flatten)]
    pub labels: LabelArgs,
}

/// `--label KEY=VALUE`, shared by `history add` and `run --history`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LabelArgs {
    /// A label kept with the run in the history (repeatable), e.g. --label commit=abc123.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    pub label: Vec<(String, String)>,
}

impl LabelArgs {
    fn map(&self) -> BTreeMap<String, String> {
        self.label.iter().cloned().collect()
    }
}

/// A `--label` without `=`.
#[derive(Debug, thiserror::Error)]
#[error("a label is KEY=VALUE (e.g. commit=abc123), not {0:?}")]
pub struct LabelError(String);

fn parse_label(s: &str) -> Result<(String, String), LabelError> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
        _ => Err(LabelError(s.to_string())),
    }
}

/// Runs `stairbench history`.
pub fn run(args: HistoryArgs) -> anyhow::Result<ExitCode> {
    if let Some(HistoryCommand::Add(add_args)) = args.command {
        return add(add_args);
    }
    let file = args.file.clone().context("give the history database")?;
    show(&file, &args)
}

fn add(args: AddArgs) -> anyhow::Result<ExitCode> {
    let mut records = Vec::new();
    for dir in &args.dirs {
        records.push(read_record(dir, args.labels.map())?);
    }
    records.sort_by(|a, b| a.started_unix_s.total_cmp(&b.started_unix_s));
    let mut db = open(&args.file)?;
    let mut refused = 0;
    for r in &records {
        match db.add(r) {
            Ok(_) => println!("added {} ({})", r.run_id, r.status.name()),
            Err(e @ HistoryError::Duplicate { .. }) => {
                eprintln!("stairbench: {e}");
                refused += 1;
            }
            Err(e) => return Err(e).context(format!("adding {}", r.run_id)),
        }
    }
    Ok(if refused > 0 {
        Outcome::Failure.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// Adds a finished run directory to the history (`run --history`).
pub fn add_run(file: &Path, dir: &Path, labels: &LabelArgs) -> anyhow::Result<()> {
    let record = read_record(dir, labels.map())?;
    open(file)?
        .add(&record)
        .with_context(|| format!("adding {} to {}", dir.display(), file.display()))?;
    eprintln!("added {} to the history {}", record.run_id, file.display());
    Ok(())
}

fn open(file: &Path) -> anyhow::Result<History> {
    History::open(file).with_context(|| format!("opening {}", file.display()))
}

fn read_record(dir: &Path, labels: BTreeMap<String, String>) -> anyhow::Result<RunRecord> {
    let data = RunData::read(dir)
        .map_err(|e| anyhow::Error::msg(e.to_string()))
        .with_context(|| format!("reading {}", dir.display()))?;
    let analysis = crate::analyze::run::analyze(&data);
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let run_id = canonical
        .file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into());
    Ok(history::record(&run_id, &data, &analysis, labels))
}

fn show(file: &Path, args: &HistoryArgs) -> anyhow::Result<ExitCode> {
    if !file.exists() {
        anyhow::bail!("{}: no such history database", file.display());
    }
    let db = open(file)?;
    let runs = db.runs()?;
    let series = db.series(&runs)?;
    let opts = ChangeOptions {
        max_p: args.max_p,
        min_segment: args.min_segment,
    };
    let changes = history::change_points(&runs, &series, opts);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&changes)?);
    } else {
        print!("{}", text(&changes, &runs, series.len()));
    }
    if let Some(out) = &args.html {
        let page = crate::report::history_html::page(&runs, &series, &changes);
        std::fs::write(out, page).with_context(|| format!("writing {}", out.display()))?;
    }
    if !args.check {
        return Ok(ExitCode::SUCCESS);
    }
    let gate = GateOptions {
        window: args.window,
        min_change_pct: args.min_change,
    };
    let failing = history::gate(&changes, gate);
    for c in &failing {
        eprintln!(
            "stairbench: regression in the newest {} runs: {} {} {:+.1}% from run {} ({})",
            gate.window,
            c.series,
            c.figure.name(),
            c.change_pct,
            c.index,
            c.run_id
        );
    }
    Ok(if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        Outcome::Threshold.into()
    })
}

/// The console listing: a header, then one line per change point.
fn text(
    changes: &[HistoryChange],
    runs: &[crate::record::history::StoredRun],
    series: usize,
) -> String {
    let ok = runs.iter().filter(|r| r.status == RunStatus::Ok).count();
    let mut out = format!(
        "{} runs ({ok} ok, the others left out), {series} series × figure, {} change points\n",
        runs.len(),
        changes.len()
    );
    for c in changes {
        let ci = c
            .ci95
            .map_or(String::new(), |[lo, hi]| format!(" [{lo:+.1}, {hi:+.1}]"));
        out += &format!(
            "{} {}: from run {} ({}): {} -> {} ({:+.1}%{ci}, p={:.1e}){}\n",
            c.series,
            c.figure.name(),
            c.index,
            c.run_id,
            fmt_value(c.before),
            fmt_value(c.after),
            c.change_pct,
            c.p,
            if c.regression { " REGRESSION" } else { "" }
        );
    }
    out
}

fn fmt_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}
