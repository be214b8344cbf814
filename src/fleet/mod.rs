//! What a step runs, and where: targets started as process trees and probed until ready
//! (`server`, split into instances by `instances`), the load driven by the built-in engine or
//! an external command (`driver`), and the same on other hosts (`hosts`: the hosts connected
//! once per run, targets started there, client groups run there with their windows started
//! together, remote targets observed where they run). Hosts are reached through
//! `crate::remote`'s engines (ssh, local).
//!
//! It knows nothing of specs or series: the step loop (`crate::sweep`) hands it a
//! [`target::TargetPlan`] and a [`driver::StepRequest`] per step.

pub mod driver;
pub mod error;
pub mod hosts;
pub mod instances;
pub mod ranks;
pub mod server;
pub mod target;
