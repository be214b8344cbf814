//! An external tool's run in the engine's layout: the [`ParsedLoad`] a parser read, turned
//! into the [`LoadReport`] and per-second [`IntervalLine`]s a step records.

use crate::record::figures::ToolFigures;
use crate::record::load::{IntervalLine, LatencyUs, LoadReport};

use super::{LatencyFields, ParseError, ParsedInterval, ParsedLoad};

/// An external tool's figures in the engine's layout.
#[derive(Debug, Clone, Default)]
pub struct ToolLoad {
    /// The figures (latencies the tool did not print are NaN: unavailable, not zero).
    pub report: LoadReport,
    /// The periodic lines the tool printed, if any.
    pub intervals: Vec<IntervalLine>,
    /// What the tool printed, in its own terms (the step's `tool` object; None when it is
    /// the engine's own report, whose every figure is in `report`).
    pub figures: Option<ToolFigures>,
}

impl ToolLoad {
    /// The engine's layout of what a parser read; an error when the output gives no rate.
    pub fn from_parsed(p: ParsedLoad) -> Result<Self, ParseError> {
        let report = report_of(&p)?;
        let intervals = p.intervals.iter().map(interval_line).collect();
        Ok(ToolLoad {
            report,
            intervals,
            figures: Some(tool_figures(p)),
        })
    }
}

/// What a parser read, as the step's `tool` object keeps it (the lines are recorded as the
/// step's intervals already).
fn tool_figures(p: ParsedLoad) -> ToolFigures {
    let ParsedLoad {
        requests,
        duration_s,
        throughput_rps,
        bytes_received,
        latency_us,
        errors,
        extra,
        intervals: _,
    } = p;
    let LatencyFields {
        mean,
        stdev,
        min,
        p50,
        p75,
        p90,
        p95,
        p99,
        p999,
        max,
    } = latency_us;
    let latency = [
        ("mean", mean),
        ("stdev", stdev),
        ("min", min),
        ("p50", p50),
        ("p75", p75),
        ("p90", p90),
        ("p95", p95),
        ("p99", p99),
        ("p999", p999),
        ("max", max),
    ];
    ToolFigures {
        requests,
        duration_s,
        throughput_rps,
        bytes_received,
        latency_us: latency.map(|(n, v)| (n.to_string(), v)).into(),
        errors,
        extra,
    }
}

/// The request count and throughput, the one derived from the other and the run's length
/// when the tool printed only one of them.
fn requests_and_rate(p: &ParsedLoad, duration_s: f64) -> Result<(u64, f64), ParseError> {
    match (p.requests, p.throughput_rps) {
        (Some(n), Some(t)) => Ok((n, t)),
        (Some(n), None) if duration_s > 0.0 => Ok((n, n as f64 / duration_s)),
        (None, Some(t)) if duration_s > 0.0 => Ok(((t * duration_s).round() as u64, t)),
        _ => Err(ParseError::NoRate),
    }
}

fn report_of(p: &ParsedLoad) -> Result<LoadReport, ParseError> {
    let duration_s = p.duration_s.unwrap_or(f64::NAN);
    let (requests, throughput_rps) = requests_and_rate(p, duration_s)?;
    let lat = |v: Option<f64>| v.unwrap_or(f64::NAN);
    let l = &p.latency_us;
    Ok(LoadReport {
        schema: crate::record::load::SCHEMA_VERSION,
        requests,
        // Tools do not count their writes: the completed requests stand in.
        sent: requests,
        errors: p.errors.clone(),
        error_ratio: crate::record::load::error_ratio(requests, &p.errors),
        duration_s: if duration_s.is_finite() {
            duration_s
        } else {
            0.0
        },
        throughput_rps,
        bytes_received: p.bytes_received.unwrap_or(0),
        connect_time_s: p.extra.get("connect_time_s").copied().unwrap_or(0.0),
        latency_us: LatencyUs {
            mean: lat(l.mean),
            p50: lat(l.p50),
            p90: lat(l.p90),
            p95: lat(l.p95),
            p99: lat(l.p99),
            p999: lat(l.p999),
            max: lat(l.max),
        },
        ..LoadReport::default()
    })
}

fn interval_line(i: &ParsedInterval) -> IntervalLine {
    IntervalLine {
        elapsed_s: i.elapsed_s,
        inflight: i.inflight.unwrap_or(0),
        ops_per_s: i.ops_per_s,
        // MiB (2^20) to the engine's MB (10^6).
        mb_per_s: i.mib_per_s.map_or(0.0, |m| m * 1.048_576),
        mean_latency_ms: i.mean_latency_ms.unwrap_or(f64::NAN),
        errors: 0,
        per_core_busy: i.busy_pct.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_comes_from_the_count_and_the_length_when_the_tool_gave_no_throughput() {
        let p = ParsedLoad {
            requests: Some(500),
            duration_s: Some(2.0),
            ..ParsedLoad::default()
        };
        let t = ToolLoad::from_parsed(p).unwrap();
        assert_eq!((t.report.requests, t.report.throughput_rps), (500, 250.0));
        assert!(
            t.report.latency_us.p99.is_nan(),
            "not printed: NaN, not zero"
        );
        let err = ToolLoad::from_parsed(ParsedLoad::default()).unwrap_err();
        assert!(matches!(err, ParseError::NoRate), "{err}");
    }

    /// The step's `tool` object keeps what the parser read, key for key, but its lines.
    #[test]
    fn the_tool_figures_are_the_parsed_ones_but_the_lines() {
        let p = ParsedLoad {
            requests: Some(5),
            throughput_rps: Some(2.5),
            bytes_received: Some(9),
            latency_us: LatencyFields {
                stdev: Some(3.0),
                p999: Some(7.0),
                ..LatencyFields::default()
            },
            errors: [("timeout".to_string(), 1)].into(),
            extra: [("threads".to_string(), 2.0)].into(),
            intervals: vec![ParsedInterval::default()],
            ..ParsedLoad::default()
        };
        let mut parsed = serde_json::to_value(&p).unwrap();
        parsed.as_object_mut().unwrap().remove("intervals");
        let tool = ToolLoad::from_parsed(p).unwrap().figures.unwrap();
        assert_eq!(serde_json::to_value(&tool).unwrap(), parsed);
    }
}
