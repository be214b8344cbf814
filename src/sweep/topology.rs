//! CPU topology from /sys and the cpusets of each placement policy.

use std::process::ExitCode;

/// Options of `stairbench topology`.
#[derive(Debug, clap::Args)]
pub struct TopologyArgs {}

/// Prints the topology.
pub fn run(_args: TopologyArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("topology is not built yet")
}
