//! Experiments: the spec, CPU placements, target processes, the step loop, the run directory.

pub mod cli;
pub mod spec;
pub mod topology;
