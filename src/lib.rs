//! stairbench: a performance lab for client/server systems.
//!
//! The binary is a thin shell over this library (see `cli`), so every command can be
//! called and tested in-process.

pub mod analyze;
pub mod cli;
pub mod clock;
pub mod cpuset;
pub mod exit;
pub mod fleet;
pub mod load;
pub mod machine;
pub mod observe;
pub mod placement;
pub mod process;
pub mod profile;
pub mod record;
pub mod remote;
pub mod report;
pub mod serve;
pub mod signals;
pub mod sweep;
pub mod units;
pub mod wire;
