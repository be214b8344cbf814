//! How a comparison is shown: `stairbench compare`'s markdown tables and sentences, its gate
//! verdict, and a metric's `mean ± CI` cell (report.md's noise table uses it too). What is
//! compared, and how, is `analyze::compare`'s.

use std::fmt::Write as _;

use super::cell::escape;
use crate::analyze::compare::runs::Comparison;
use crate::analyze::compare::{Metric, Relation};
use crate::analyze::stats::Summary;
use crate::units;

/// `mean ± half width` (or the mean alone without repetitions): throughput in whole req/s,
/// times (given in µs) each in its readable unit ("303 ms ± 2.10 ms").
pub fn show_summary(s: &Summary, metric: Metric) -> String {
    let show = |v: f64| match metric {
        Metric::ThroughputRps => format!("{v:.0}"),
        _ => units::duration_us(v),
    };
    match s.ci95_half_width {
        Some(_) if s.n < crate::analyze::compare::MIN_REPS_FOR_INTERVAL => {
            format!("{} ({} runs: too few for an interval)", show(s.mean), s.n)
        }
        Some(h) => format!("{} ± {}", show(s.mean), show(h)),
        None => show(s.mean),
    }
}

/// The unit a table header names: req/s; none for times, whose cells carry theirs.
fn header_unit(metric: Metric) -> String {
    match metric {
        Metric::ThroughputRps => format!("{}, ", metric.unit()),
        _ => String::new(),
    }
}

/// The speedup with its interval: `0.91x [0.88, 0.94]`, or `0.91x` without repetitions.
pub fn show_speedup(rel: &Relation) -> String {
    format!("{:.2}x{}", rel.speedup, rel.interval_text())
}

/// The comparison as markdown tables and sentences (what `stairbench compare` prints).
pub fn render_text(cmp: &Comparison) -> String {
    let mut out = String::new();
    out.push_str("# Comparison\n\n");
    for (i, run) in cmp.runs.iter().enumerate() {
        let role = if i == 0 { " (reference)" } else { "" };
        let _ = writeln!(out, "- {}{role}: {}", escape(&run.label), run.dir.display());
    }
    out.push('\n');
    render_environment(&mut out, cmp);
    render_rows(&mut out, cmp);
    if !cmp.sentences.is_empty() {
        out.push_str("## Summary\n\n");
        for s in &cmp.sentences {
            let _ = writeln!(out, "- {}", escape(s));
        }
        out.push('\n');
    }
    out
}

fn render_environment(out: &mut String, cmp: &Comparison) {
    out.push_str("## Differences in environment\n\n");
    if cmp.environment_differences.is_empty() {
        out.push_str(
            "None: environment.json and spec.toml agree on every key (or are missing).\n\n",
        );
        return;
    }
    let labels: Vec<String> = cmp.runs.iter().map(|r| escape(&r.label)).collect();
    let _ = writeln!(out, "| key | {} |", labels.join(" | "));
    let _ = writeln!(out, "| --- |{}", " --- |".repeat(labels.len()));
    for d in &cmp.environment_differences {
        let cells: Vec<String> = d
            .values
            .iter()
            .map(|v| v.as_deref().map_or("–".to_string(), escape))
            .collect();
        let _ = writeln!(out, "| {} | {} |", escape(&d.key), cells.join(" | "));
    }
    out.push('\n');
}

fn render_rows(out: &mut String, cmp: &Comparison) {
    let m = cmp.metric;
    let _ = writeln!(
        out,
        "## {} ({}{} is better), mean ± 95% CI over repetitions\n",
        m.name(),
        header_unit(m),
        if m.higher_is_better() {
            "higher"
        } else {
            "lower"
        }
    );
    let mut header = String::from("| target | placement | clients |");
    let mut rule = String::from("| --- | --- | ---: |");
    for (i, run) in cmp.runs.iter().enumerate() {
        let _ = write!(header, " {} |", escape(&run.label));
        rule.push_str(" ---: |");
        if i > 0 {
            header.push_str(" speed vs first [CI] | verdict |");
            rule.push_str(" ---: | --- |");
        }
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for row in &cmp.rows {
        let clients = match row.key.rate_rps {
            Some(r) => format!("{} @ {r}/s", row.key.clients),
            None => row.key.clients.to_string(),
        };
        let _ = write!(
            out,
            "| {} | {} | {clients} |",
            escape(&row.key.target),
            escape(&row.key.placement)
        );
        for (i, value) in row.values.iter().enumerate() {
            let shown = value
                .as_ref()
                .map_or("–".to_string(), |s| show_summary(s, m));
            let _ = write!(out, " {shown} |");
            if i > 0 {
                match &row.against_first[i] {
                    Some(rel) => {
                        let _ = write!(out, " {} | {} |", show_speedup(rel), rel.verdict);
                    }
                    None => out.push_str(" – | – |"),
                }
            }
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "\nVerdicts: Welch's t-test on the repetitions' means at {}%; a difference below {}% is \"equal\"; [CI]: the speed ratio's {}% interval (delta method on its log).\n",
        cmp.confidence_pct, cmp.min_effect_pct, cmp.confidence_pct
    );
}

/// The gate's verdict as one message: None when it passes.
pub fn gate_message(cmp: &Comparison) -> Option<String> {
    let pct = cmp.gate_pct?;
    if cmp.gate_failures.is_empty() {
        return None;
    }
    let mut text = format!(
        "{} step(s) slower than {} by more than {pct}% on {}, beyond noise or untested:",
        cmp.gate_failures.len(),
        cmp.runs[0].label,
        cmp.metric.name()
    );
    for f in &cmp.gate_failures {
        // Untested, the threshold alone fails the step: its words name no winner.
        let how = if f.verdict == "slower" {
            "slower"
        } else {
            "behind, the threshold alone deciding"
        };
        let _ = write!(
            text,
            "\n  {} at {}: {:.1}% {how} ({})",
            f.run,
            f.key.label(),
            f.slower_pct,
            f.reason
        );
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(mean: f64, half: Option<f64>) -> Summary {
        Summary {
            n: 3,
            mean,
            stdev: 0.0,
            cv: 0.0,
            ci95_half_width: half,
        }
    }

    #[test]
    fn times_read_in_their_unit_and_throughput_in_whole_requests() {
        let p99 = summary(302_776.3, Some(2_104.0));
        assert_eq!(show_summary(&p99, Metric::P99), "303 ms ± 2104 µs");
        assert_eq!(
            show_summary(&summary(1.2, None), Metric::CpuUsPerReq),
            "1.20 µs"
        );
        assert_eq!(
            show_summary(&summary(999.6, Some(25.2)), Metric::ThroughputRps),
            "1000 ± 25"
        );
        assert_eq!(header_unit(Metric::P99), "");
        // Issue 44: "9344 ± 78199" from 2 runs, a half width of 12.7 standard errors.
        let two = Summary {
            n: 2,
            ..summary(9344.0, Some(78_199.0))
        };
        assert_eq!(
            show_summary(&two, Metric::ThroughputRps),
            "9344 (2 runs: too few for an interval)"
        );
        assert_eq!(header_unit(Metric::ThroughputRps), "req/s, ");
    }
}
