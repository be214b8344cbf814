//! Experiments: the spec, its plan, the step loop, the run directory.
//!
//! A spec (TOML) is validated into a [`plan::Plan`]; [`runner::Runner`] walks it with a
//! [`crate::fleet::server::Launcher`], a [`crate::fleet::driver::Driver`], a
//! [`crate::observe::step::StepObserver`] and a [`crate::placement::PlacementSource`], each a
//! trait with a fake, writing a [`crate::record::rundir::RunDir`]. What starts the targets and
//! the load, here and on other hosts, is `crate::fleet`.

pub mod experiment;
pub mod plan;
pub mod profiling;
pub mod progress;
pub mod runner;
pub mod spec;
pub mod split;
