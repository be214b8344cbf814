//! One table of steps analysed per series: USL fit, knees, Little's law.
//!
//! A series is one target × placement across load levels; in a table it is the rows sharing a
//! value of the group column (the messenger study's `balance`: balanced or separated).

use serde::Serialize;

use super::knee::{self, KneeSummary, Step};
use super::little::{self, LatencyUnit, LittleStep};
use super::table::{Table, TableError};
use super::usl::{self, UslFit};

/// Which columns of a table mean what.
#[derive(Debug, Clone, PartialEq)]
pub struct AnalyzeOptions {
    /// Column of the load level (clients).
    pub x: String,
    /// Column of the throughput.
    pub throughput: String,
    /// Multiplier from the throughput column to operations per second (1000 for kIOPS).
    pub throughput_scale: f64,
    /// Column of the mean latency, if any.
    pub latency: Option<String>,
    /// Unit of the latency column.
    pub latency_unit: LatencyUnit,
    /// Column whose values split the rows into series, if any.
    pub group: Option<String>,
    /// Requests in flight per unit of x (connections × depth per client), for Little's law.
    pub inflight_per_x: Option<f64>,
    /// Column of requests in flight, for Little's law (instead of `inflight_per_x`).
    pub inflight: Option<String>,
    /// Column of server CPU utilisation in percent, for the busy point.
    pub server_cpu: Option<String>,
}

impl AnalyzeOptions {
    /// Options with only the two required columns set.
    pub fn new(x: &str, throughput: &str) -> AnalyzeOptions {
        AnalyzeOptions {
            x: x.to_string(),
            throughput: throughput.to_string(),
            throughput_scale: 1.0,
            latency: None,
            latency_unit: LatencyUnit::Ms,
            group: None,
            inflight_per_x: None,
            inflight: None,
            server_cpu: None,
        }
    }
}

/// What went wrong analysing a table.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnalyzeError {
    /// The table itself.
    #[error(transparent)]
    Table(#[from] TableError),
    /// A table with a header and no rows.
    #[error("the table has a header but no rows")]
    NoRows,
}

/// The analysis of every series of a table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    /// One entry per series, in order of first appearance.
    pub groups: Vec<GroupAnalysis>,
}

/// The analysis of one series.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupAnalysis {
    /// The group column's value for this series; None when the table is not grouped.
    pub group: Option<String>,
    /// Number of steps (rows) in the series.
    pub points: usize,
    /// The Universal Scalability Law fit, in the throughput column's units; None if not fitted.
    pub usl: Option<UslFit>,
    /// Why the USL was not fitted (fewer than 4 points, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usl_error: Option<String>,
    /// Knees, maximum, saturation and busy points.
    pub knee: KneeSummary,
    /// Little's law per step, in load order; empty without latency and in-flight figures.
    pub little: Vec<LittleStep>,
}

/// Analyses every series of `table`.
pub fn analyze_table(table: &Table, options: &AnalyzeOptions) -> Result<Analysis, AnalyzeError> {
    if table.rows.is_empty() {
        return Err(AnalyzeError::NoRows);
    }
    let steps = read_steps(table, options)?;
    let groups = match &options.group {
        Some(column) => table.text(column)?,
        None => vec![String::new(); table.rows.len()],
    };
    let mut order: Vec<String> = Vec::new();
    for g in &groups {
        if !order.contains(g) {
            order.push(g.clone());
        }
    }
    let analyses = order
        .iter()
        .map(|name| {
            let members: Vec<TableStep> = steps
                .iter()
                .zip(&groups)
                .filter(|(_, g)| *g == name)
                .map(|(s, _)| *s)
                .collect();
            let label = options.group.as_ref().map(|_| name.clone());
            analyze_series(label, &members, options)
        })
        .collect::<Result<_, _>>()?;
    Ok(Analysis { groups: analyses })
}

/// One row's figures.
#[derive(Debug, Clone, Copy)]
struct TableStep {
    step: Step,
    inflight: Option<f64>,
}

fn read_steps(table: &Table, options: &AnalyzeOptions) -> Result<Vec<TableStep>, AnalyzeError> {
    let xs = table.numbers(&options.x)?;
    let throughputs = table.numbers(&options.throughput)?;
    let latencies = optional_column(table, options.latency.as_deref())?;
    let cpus = optional_column(table, options.server_cpu.as_deref())?;
    let inflights = optional_column(table, options.inflight.as_deref())?;
    Ok((0..xs.len())
        .map(|i| TableStep {
            step: Step {
                load: xs[i],
                throughput: throughputs[i],
                latency: latencies.as_ref().map(|c| c[i]),
                server_cpu_pct: cpus.as_ref().map(|c| c[i]),
            },
            inflight: inflights
                .as_ref()
                .map(|c| c[i])
                .or(options.inflight_per_x.map(|k| k * xs[i])),
        })
        .collect())
}

fn optional_column(table: &Table, name: Option<&str>) -> Result<Option<Vec<f64>>, TableError> {
    name.map(|n| table.numbers(n)).transpose()
}

fn analyze_series(
    group: Option<String>,
    members: &[TableStep],
    options: &AnalyzeOptions,
) -> Result<GroupAnalysis, AnalyzeError> {
    let mut members = members.to_vec();
    members.sort_by(|a, b| a.step.load.total_cmp(&b.step.load));
    let steps: Vec<Step> = members.iter().map(|m| m.step).collect();
    let points: Vec<(f64, f64)> = steps.iter().map(|s| (s.load, s.throughput)).collect();
    let (usl, usl_error) = match usl::fit(&points) {
        Ok(fit) => (Some(fit), None),
        Err(err) => (None, Some(err.to_string())),
    };
    Ok(GroupAnalysis {
        group,
        points: members.len(),
        usl,
        usl_error,
        knee: knee::summarise(&steps).ok_or(AnalyzeError::NoRows)?,
        little: little_steps(&members, options),
    })
}

fn little_steps(members: &[TableStep], options: &AnalyzeOptions) -> Vec<LittleStep> {
    members
        .iter()
        .filter_map(|m| {
            let throughput_per_s = m.step.throughput * options.throughput_scale;
            Some(little::check(
                m.step.load,
                m.inflight?,
                throughput_per_s,
                m.step.latency?,
                options.latency_unit,
            ))
        })
        .collect()
}
