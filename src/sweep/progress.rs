//! Progress of a run: what the step loop tells its [`Progress`] (step i of N, live ops/s,
//! each step's end), and [`Quiet`], which shows nothing (tests). The terminal's bar is the
//! command's (`cli::progress`), so the runner knows no UI.

use crate::record::steps::StepResult;

/// Receives the loop's progress.
pub trait Progress {
    /// The run starts: `total` steps at most, `done` already finished (resume).
    fn begin(&mut self, total: usize, done: usize);
    /// A step starts.
    fn step(&mut self, label: &str);
    /// A per-second throughput figure of the running step.
    fn live(&mut self, ops_per_s: f64);
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
