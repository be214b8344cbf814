//! `stairbench analyze FILE.csv`: the series analysis on a table from elsewhere.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

use super::little::LatencyUnit;
use super::series::{analyze_table, Analysis, AnalyzeOptions, GroupAnalysis};
use super::table::Table;

/// Options of `stairbench analyze`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {
    /// The CSV table: a header line of column names, then one row per step.
    pub file: PathBuf,
    /// Column of the load level (clients).
    #[arg(long, value_name = "COL")]
    pub x: String,
    /// Column of the throughput.
    #[arg(long, value_name = "COL")]
    pub throughput: String,
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
    /// Column that splits the rows into series (e.g. a placement).
    #[arg(long, value_name = "COL")]
    pub group: Option<String>,
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
            x: self.x.clone(),
            throughput: self.throughput.clone(),
            throughput_scale: self.throughput_scale,
            latency: self.latency.clone(),
            latency_unit: self.latency_unit,
            group: self.group.clone(),
            inflight_per_x: self.inflight_per_x,
            inflight: self.inflight.clone(),
            server_cpu: self.server_cpu.clone(),
        }
    }
}

/// Analyses a CSV table and prints the result.
pub fn run(args: AnalyzeArgs) -> anyhow::Result<ExitCode> {
    if !(args.throughput_scale.is_finite() && args.throughput_scale > 0.0) {
        anyhow::bail!(
            "--throughput-scale must be a positive number (1000 for kIOPS), not {}",
            args.throughput_scale
        );
    }
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {}", args.file.display()))?;
    let table = Table::parse(&text).with_context(|| format!("in {}", args.file.display()))?;
    let options = args.options();
    let analysis =
        analyze_table(&table, &options).with_context(|| format!("in {}", args.file.display()))?;
    let out = if args.json {
        serde_json::to_string_pretty(&analysis)? + "\n"
    } else {
        render_text(&analysis, &options)
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
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
        usl.dominant
    );
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
