//! The thresholds' verdicts at the top of report.md and report.html: the gate a CI job reads
//! first, one line per threshold with the worst value measured.

use super::doc::Doc;
use crate::analyze::run::RunAnalysis;

/// The "Thresholds" section of report.md and report.html, each verdict marked passed or
/// failed (empty when the spec has none).
pub fn doc(a: &RunAnalysis) -> Doc {
    let mut out = Doc::new();
    if a.thresholds.is_empty() {
        return out;
    }
    let failed = a.thresholds.iter().filter(|v| !v.passed()).count();
    out.heading("Thresholds");
    out.paragraph(summary(failed, a.thresholds.len()));
    let items = lines(a)
        .into_iter()
        .map(|(ok, l)| (if ok { "pass" } else { "fail" }.to_string(), l))
        .collect();
    out.styled_list("thresholds", items);
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
