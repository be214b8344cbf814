//! The thresholds' verdicts at the top of report.md and report.html: the gate a CI job reads
//! first, one line per threshold with the worst value measured.

use std::fmt::Write as _;

use super::cell::escape;
use crate::analyze::run::RunAnalysis;

/// report.md's "Thresholds" section (empty when the spec has none).
pub fn markdown(a: &RunAnalysis) -> String {
    if a.thresholds.is_empty() {
        return String::new();
    }
    let failed = a.thresholds.iter().filter(|v| !v.passed()).count();
    let mut out = format!(
        "## Thresholds\n\n{}\n\n",
        summary(failed, a.thresholds.len())
    );
    for v in &a.thresholds {
        let _ = writeln!(out, "- {}", escape(&v.sentence()));
    }
    out.push('\n');
    out
}

/// "All 3 thresholds met." or "1 of 3 thresholds not met: exit code 4."
pub fn summary(failed: usize, total: usize) -> String {
    let plural = if total == 1 { "" } else { "s" };
    match failed {
        0 => format!("All {total} threshold{plural} met."),
        f => format!("{f} of {total} threshold{plural} not met: exit code 4."),
    }
}

/// The lines report.html shows: (passed, sentence).
pub fn lines(a: &RunAnalysis) -> Vec<(bool, String)> {
    a.thresholds
        .iter()
        .map(|v| (v.passed(), v.sentence()))
        .collect()
}
