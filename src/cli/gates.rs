//! The command edge of thresholds and JUnit files: the verdicts printed, the exit code they
//! give (4 when one is not met), and `--junit FILE` written.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

use crate::analyze::thresholds::ThresholdVerdict;
use crate::exit::Outcome;
use crate::report::junit::{self, Case};

/// Prints one line per threshold.
pub fn print_thresholds(verdicts: &[ThresholdVerdict], out: &mut dyn Write) -> std::io::Result<()> {
    for v in verdicts {
        writeln!(out, "threshold: {}", v.sentence())?;
    }
    Ok(())
}

/// 4 (a threshold) when a threshold was breached or not measured, else 0.
pub fn threshold_outcome(verdicts: &[ThresholdVerdict]) -> Outcome {
    if verdicts.iter().all(ThresholdVerdict::passed) {
        Outcome::Ok
    } else {
        Outcome::Threshold
    }
}

/// Writes a JUnit XML file of `cases` as one suite.
pub fn write_junit(path: &Path, suite: &str, cases: &[Case]) -> anyhow::Result<()> {
    let xml = junit::render(suite, cases).context("rendering the JUnit XML")?;
    std::fs::write(path, xml).with_context(|| format!("writing {}", path.display()))
}
