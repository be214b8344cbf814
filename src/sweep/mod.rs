//! Experiments: the spec, CPU placements, target processes, the step loop, the run directory.
//!
//! A spec (TOML) is validated into a [`plan::Plan`]; [`runner::Runner`] walks it with a
//! [`server::Launcher`], a [`driver::Driver`], a [`crate::observe::step::StepObserver`] and a
//! [`crate::placement::PlacementSource`], each a trait with a fake, writing a
//! [`crate::record::rundir::RunDir`].

pub mod driver;
pub mod error;
pub mod experiment;
pub mod hosts;
pub mod instances;
pub mod plan;
pub mod profiling;
pub mod progress;
pub mod runner;
pub mod server;
pub mod spec;
