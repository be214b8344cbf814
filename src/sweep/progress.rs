//! Progress of a run: what the step loop tells its [`Progress`] (step i of N, live ops/s,
//! each step's end), and [`Quiet`], which shows nothing (tests). The terminal's bar is the
//! command's (`cli::progress`), so the runner knows no UI.

use std::time::Duration;

use crate::record::load::IntervalLine;
use crate::record::steps::StepResult;

/// Which step a per-second line belongs to (the labels of `--json-lines` and
/// `--metrics-listen`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveStep {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients of the step.
    pub clients: usize,
    /// Repetition index, from 0.
    pub rep: usize,
    /// Open-loop rate (requests/s), absent in closed loop.
    pub rate_rps: Option<f64>,
}

/// Where the run is: the planned step (a point of a series with all its repetitions), the
/// repetition inside it, and the time left by the plan's model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Position {
    /// The planned step, from 1.
    pub step: usize,
    /// Planned steps in all.
    pub steps: usize,
    /// The repetition inside the step, from 1.
    pub repetition: usize,
    /// The step's repetitions: exactly this many, or at most this many under `auto`.
    pub repetitions: usize,
    /// `repetitions = "auto"`: the step ends when its throughput settles.
    pub auto: bool,
    /// Time left, this repetition included (the same model as the dry run's estimate).
    pub left: Duration,
    /// The series' peak measured again after its last level (a drift check).
    pub drift_check: bool,
}

impl Position {
    /// `step 7/20 (repetition 2/3)`, or `step 7/20 (repetition 2 of at most 5)` under auto;
    /// past the planned repetitions, a disturbed one run again: `step 7/20 (a disturbed
    /// repetition run again: extra run 1)`.
    pub fn label(&self) -> String {
        if self.drift_check {
            return format!(
                "step {}/{} (the series' peak measured again: a drift check)",
                self.step, self.steps
            );
        }
        if !self.auto && self.repetition > self.repetitions {
            return format!(
                "step {}/{} (a disturbed repetition run again: extra run {})",
                self.step,
                self.steps,
                self.repetition - self.repetitions
            );
        }
        let of = if self.auto { " of at most " } else { "/" };
        format!(
            "step {}/{} (repetition {}{of}{})",
            self.step, self.steps, self.repetition, self.repetitions
        )
    }
}

/// Receives the loop's progress.
pub trait Progress {
    /// The run starts: `total` planned steps (a point of a series each, its repetitions
    /// inside it), `done` already finished (resume).
    fn begin(&mut self, total: usize, done: usize);
    /// A repetition of a step is about to run (or be skipped).
    fn at(&mut self, _at: &Position) {}
    /// A step starts.
    fn step(&mut self, label: &str);
    /// A per-second throughput figure of the running step.
    fn live(&mut self, ops_per_s: f64);
    /// A per-second line of the running step, with its latency histogram (ns); ignored
    /// unless the progress shows or exports them.
    fn interval(
        &mut self,
        _step: &LiveStep,
        _line: &IntervalLine,
        _hist_ns: &hdrhistogram::Histogram<u64>,
    ) {
    }
    /// A step ended.
    fn done(&mut self, step: &StepResult);
    /// A remark for the user.
    fn note(&mut self, text: &str);
    /// The run ended.
    fn finish(&mut self);
}

/// Shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {
    fn begin(&mut self, _: usize, _: usize) {}
    fn step(&mut self, _: &str) {}
    fn live(&mut self, _: f64) {}
    fn done(&mut self, _: &StepResult) {}
    fn note(&mut self, _: &str) {}
    fn finish(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disturbed_repetition_run_again_is_not_repetition_4_of_3() {
        let at = |repetition, auto| Position {
            step: 4,
            steps: 8,
            repetition,
            repetitions: 3,
            auto,
            left: Duration::ZERO,
            drift_check: false,
        };
        assert_eq!(at(2, false).label(), "step 4/8 (repetition 2/3)");
        assert_eq!(
            at(4, false).label(),
            "step 4/8 (a disturbed repetition run again: extra run 1)"
        );
        assert_eq!(at(2, true).label(), "step 4/8 (repetition 2 of at most 3)");
        let again = Position {
            drift_check: true,
            ..at(4, false)
        };
        assert_eq!(
            again.label(),
            "step 4/8 (the series' peak measured again: a drift check)"
        );
    }
}
