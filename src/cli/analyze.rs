//! `stairbench analyze FILE.csv`: the series analysis on a table from elsewhere;
//! `stairbench analyze DIR`: a run directory's diagnoses (see [`super::diagnose`]).

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use crate::exit::OrUsage as _;

use crate::analyze::little::LatencyUnit;
use crate::analyze::series::{analyze_table, Analysis, AnalyzeOptions, GroupAnalysis};
use crate::analyze::table::Table;
use crate::analyze::usl;
use crate::units;

/// Options of `stairbench analyze`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The CSV table: a header line of column names, then one row per step; or a run
    /// directory, whose diagnoses are printed (why each series stops scaling).
    pub file: PathBuf,
    /// Column of the load level (clients); required for a CSV table.
    #[arg(long, value_name = "COL")]
    pub x: Option<String>,
    /// Column of the throughput; required for a CSV table.
    #[arg(long, value_name = "COL")]
    pub throughput: Option<String>,
    /// Multiply the throughput column by K to get operations per second (1000 for kIOPS); used
    /// by Little's law only, the USL is reported in the column's own units.
    #[arg(long, value_name = "K", default_value_t = 1.0)]
    pub throughput_scale: f64,
    /// Column of the mean latency.
    #[arg(long, value_name = "COL")]
    pub latency: Option<String>,
    /// Unit of the latency column.
    #[arg(long, value_enum, default_value = "ms")]
    pub latency_unit: LatencyUnit,
    /// Columns that split the rows into series (e.g. `placement`, or `target,placement`: one
    /// series per combination, named `target=reactor,placement=shared`).
    #[arg(long, value_name = "COL[,COL...]", value_delimiter = ',')]
    pub group: Vec<String>,
    /// Requests in flight per unit of x, for Little's law (connections × depth per client).
    #[arg(
        long,
        value_name = "K",
        conflicts_with = "inflight",
        requires = "latency"
    )]
    pub inflight_per_x: Option<f64>,
    /// Column of requests in flight, for Little's law.
    #[arg(long, value_name = "COL", requires = "latency")]
    pub inflight: Option<String>,
    /// Column of server CPU utilisation in percent, for the busy point.
    #[arg(long, value_name = "COL")]
    pub server_cpu: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl AnalyzeArgs {
    fn options(&self) -> AnalyzeOptions {
        AnalyzeOptions {
            x: self.x.clone().unwrap_or_default(),
            throughput: self.throughput.clone().unwrap_or_default(),
            throughput_scale: self.throughput_scale,
            latency: self.latency.clone(),
            latency_unit: self.latency_unit,
            group: group_column(&self.group),
            inflight_per_x: self.inflight_per_x,
            inflight: self.inflight.clone(),
            server_cpu: self.server_cpu.clone(),
        }
    }
}

/// Analyses a CSV table and prints the result.
pub fn run(args: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    if args.file.is_dir() {
        return super::diagnose::run(&args.file, args.json);
    }
    if args.x.is_none() || args.throughput.is_none() {
        return Err(crate::exit::UsageError(format!(
            "analyze {}: a CSV table needs --x COL and --throughput COL (a run directory needs neither)",
            args.file.display()
        ))
        .into());
    }
    if !(args.throughput_scale.is_finite() && args.throughput_scale > 0.0) {
        return Err(crate::exit::UsageError(format!(
            "--throughput-scale must be a positive number (1000 for kIOPS), not {}",
            args.throughput_scale
        ))
        .into());
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))
        .or_usage()?;
    let mut table = Table::parse(&text)
        .with_context(|| format!("in {}", args.file.display()))
        .or_usage()?;
    let options = args.options();
    let left_out = keep_usable_rows(&mut table, &args)
        .with_context(|| format!("in {}", args.file.display()))
        .or_usage()?;
    for note in left_out.notes() {
        eprintln!("analyze: {note}");
    }
    add_group_column(&mut table, &args.group).or_usage()?;
    let analysis = analyze_table(&table, &options)
        .with_context(|| format!("in {}", args.file.display()))
        .or_usage()?;
    let out = if args.json {
        serde_json::to_string_pretty(&analysis)? + "\n"
    } else {
        render_text(&analysis, &options)
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// The column the series are named by: the one `--group` column, or for several the combined
/// column [`add_group_column`] makes (named by the columns joined with commas).
fn group_column(columns: &[String]) -> Option<String> {
    (!columns.is_empty()).then(|| columns.join(","))
}

/// With several `--group` columns, adds one column whose value names each row's combination:
/// `a=x,b=y`.
fn add_group_column(table: &mut Table, columns: &[String]) -> anyhow::Result<()> {
    if columns.len() < 2 {
        return Ok(());
    }
    let indexes = columns
        .iter()
        .map(|c| table.index(c))
        .collect::<Result<Vec<_>, _>>()?;
    for row in &mut table.rows {
        let name: Vec<String> = columns
            .iter()
            .zip(&indexes)
            .map(|(c, &i)| format!("{c}={}", row[i]))
            .collect();
        row.push(name.join(","));
    }
    table.columns.push(columns.join(","));
    Ok(())
}

/// Rows `analyze` left out, by reason.
#[derive(Debug, Default, PartialEq)]
pub struct LeftOut {
    /// Rows whose `status` column is not `ok` (a failed or skipped step), by status.
    pub by_status: std::collections::BTreeMap<String, usize>,
    /// Rows with an empty cell in a column the analysis reads (a missing figure).
    pub empty_cells: usize,
    /// The columns those empty cells were in.
    pub empty_columns: Vec<String>,
}

impl LeftOut {
    /// One sentence per reason rows were left out.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let not_ok: usize = self.by_status.values().sum();
        if not_ok > 0 {
            let kinds: Vec<String> = self
                .by_status
                .iter()
                .map(|(status, n)| format!("{n} {status}"))
                .collect();
            notes.push(format!(
                "left out {not_ok} row(s) whose status is not ok ({})",
                kinds.join(", ")
            ));
        }
        if self.empty_cells > 0 {
            notes.push(format!(
                "left out {} row(s) with an empty cell (a missing figure) in {}",
                self.empty_cells,
                self.empty_columns.join(", ")
            ));
        }
        notes
    }
}

/// Keeps the rows the analysis can use: in a table with a `status` column (stairbench's own
/// steps.csv) only `ok` steps, and only rows with a figure in every column the analysis reads
/// (an empty cell is a missing figure, as a skipped step leaves).
pub fn keep_usable_rows(table: &mut Table, args: &AnalyzeArgs) -> anyhow::Result<LeftOut> {
    let mut left_out = LeftOut::default();
    if let Ok(status) = table.index("status") {
        table.rows.retain(|row| {
            let ok = row[status] == "ok";
            if !ok {
                *left_out.by_status.entry(row[status].clone()).or_default() += 1;
            }
            ok
        });
    }
    let used = used_columns(table, args)?;
    table.rows.retain(|row| {
        let empty: Vec<&(usize, String)> =
            used.iter().filter(|(i, _)| row[*i].is_empty()).collect();
        for (_, name) in &empty {
            if !left_out.empty_columns.contains(name) {
                left_out.empty_columns.push(name.clone());
            }
        }
        left_out.empty_cells += usize::from(!empty.is_empty());
        empty.is_empty()
    });
    Ok(left_out)
}

/// The index and name of every column the options read.
fn used_columns(table: &Table, args: &AnalyzeArgs) -> anyhow::Result<Vec<(usize, String)>> {
    let named = [&args.latency, &args.inflight, &args.server_cpu];
    [&args.x, &args.throughput]
        .into_iter()
        .flatten()
        .chain(named.into_iter().flatten())
        .chain(&args.group)
        .map(|c| Ok((table.index(c)?, c.clone())))
        .collect()
}

/// The analysis as readable tables: USL and knees per series, then Little's law.
pub fn render_text(analysis: &Analysis, options: &AnalyzeOptions) -> String {
    let mut out = String::new();
    for group in &analysis.groups {
        let title = group.group.as_deref().unwrap_or("all rows");
        let _ = writeln!(out, "== {title} ({} points) ==", group.points);
        render_usl(&mut out, group);
        render_knee(&mut out, group, &options.x);
        render_little(&mut out, group, options.latency_unit);
        out.push('\n');
    }
    out
}

fn render_usl(out: &mut String, group: &GroupAnalysis) {
    let Some(usl) = &group.usl else {
        let reason = group.usl_error.as_deref().unwrap_or("not fitted");
        let _ = writeln!(out, "USL: not fitted: {reason}");
        return;
    };
    let _ = writeln!(
        out,
        "USL: λ = {:.4}  σ = {:.5}  κ = {:.6}  N* = {}  X(N*) = {}  R² = {:.4}  dominant: {}",
        usl.lambda,
        usl.sigma,
        usl.kappa,
        optional(usl.n_star, 1),
        optional(usl.x_max, 1),
        usl.r2,
        usl_term(usl)
    );
}

/// The fit's dominant term, said to be an extrapolation when it bites only past twice the
/// largest load measured ([`usl::UslFit::reading`]).
fn usl_term(fit: &usl::UslFit) -> String {
    match fit.reading() {
        usl::UslReading::Extrapolation {
            onset_n, largest_n, ..
        } => format!(
            "{} (from {}, past twice the largest measured, {largest_n}: an extrapolation, not a finding)",
            fit.dominant,
            units::approx_count(onset_n)
        ),
        _ => fit.dominant.clone(),
    }
}

fn render_knee(out: &mut String, group: &GroupAnalysis, x_name: &str) {
    let k = &group.knee;
    let _ = writeln!(
        out,
        "max throughput {:.4} at {x_name} = {}; within 5% of it from {x_name} = {}; \
         throughput knee at {}; latency knee at {}; busy point {}",
        k.max_throughput,
        k.max_throughput_at,
        k.saturation,
        optional(k.throughput_knee, 0),
        optional(k.latency_knee, 0),
        optional(k.busy, 0),
    );
}

fn render_little(out: &mut String, group: &GroupAnalysis, unit: LatencyUnit) {
    if group.little.is_empty() {
        return;
    }
    let u = unit.symbol();
    let _ = writeln!(out, "Little's law: X·R / L");
    let _ = writeln!(
        out,
        "{:>8} {:>10} {:>14} {:>14} {:>7}  note",
        "x",
        "in-flight",
        format!("predicted {u}"),
        format!("measured {u}"),
        "ratio"
    );
    for s in &group.little {
        let line = format!(
            "{:>8} {:>10} {:>14.4} {:>14.4} {:>7.3}  {}",
            s.x,
            s.inflight,
            s.predicted_latency,
            s.measured_latency,
            s.ratio,
            s.flag.as_deref().unwrap_or("")
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

fn optional(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(kappa: f64) -> usl::UslFit {
        let points: Vec<(f64, f64)> = (0..=10)
            .map(|i| {
                let n = f64::from(1u32 << i);
                (n, usl::model(1000.0, 1e-5, kappa, n))
            })
            .collect();
        usl::fit(&points).unwrap()
    }

    #[test]
    fn the_dominant_term_is_said_an_extrapolation_past_twice_the_largest_load() {
        assert_eq!(
            usl_term(&fit(5e-8)),
            "coherency (from 4,500, past twice the largest measured, 1024: an extrapolation, not a finding)"
        );
        assert_eq!(usl_term(&fit(5e-7)), "coherency");
    }
}
