//! Experiments: the spec, CPU placements, target processes, the step loop, the run directory.

pub mod cli;
pub mod parsers;
pub mod remote;
pub mod topology;
