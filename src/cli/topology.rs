//! `stairbench topology`: prints the machine's CPU topology and the cpusets each placement
//! policy gives. The JSON it prints ([`TopologyReport`]) stays in the sweep, which reads it
//! back from other hosts.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use crate::machine::topology::Topology;
use crate::placement::{report, Policy, TopologyReport};

/// Options of `stairbench topology`.
#[derive(Debug, clap::Args)]
pub struct TopologyArgs {
    /// Print JSON: cpus, nodes, smt and each placement's cpusets by side and client count
    /// (`{"separated": {"server": {"2": "0-1"}, "client": {...}}}`, which a spec accepts back).
    #[arg(long)]
    pub json: bool,
    /// Read the topology from this sysfs tree instead of /sys.
    #[arg(long, value_name = "ROOT", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// CPU counts per side to place (default: powers of two up to the CPU count, and the CPU count).
    #[arg(long, value_delimiter = ',', value_name = "N,N,...")]
    pub counts: Vec<usize>,
}

/// Prints the topology and the cpusets each policy gives for each count.
pub fn run(args: TopologyArgs) -> anyhow::Result<ExitCode> {
    let topo = Topology::from_sysfs(&args.sysfs)
        .with_context(|| format!("reading the CPU topology under {}", args.sysfs.display()))
        .map_err(|e| crate::exit::UsageError(format!("{e:#}")))?;
    let counts = if args.counts.is_empty() {
        default_counts(topo.cpus.len())
    } else {
        args.counts.clone()
    };
    let report = report(&topo, &counts);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&topo, &report, &counts);
    }
    Ok(ExitCode::SUCCESS)
}

/// Powers of two up to `cpus`, then `cpus` itself.
pub fn default_counts(cpus: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = std::iter::successors(Some(1usize), |n| n.checked_mul(2))
        .take_while(|&n| n <= cpus)
        .collect();
    if counts.last() != Some(&cpus) && cpus > 0 {
        counts.push(cpus);
    }
    counts
}

fn print_text(topo: &Topology, report: &TopologyReport, counts: &[usize]) {
    println!("{}", topo.summary());
    for (node, cpus) in &report.node_cpus {
        println!("  NUMA node {node}: {cpus}");
    }
    if let Some(note) = &report.note {
        println!("note: {note}");
    }
    println!();
    println!("{:<10} {:>5}  {:<32} client", "policy", "count", "server");
    for policy in Policy::builtin() {
        let name = policy.name();
        for count in counts {
            let key = count.to_string();
            let cell = |side: &str| {
                report.placements[name]
                    .get(side)
                    .and_then(|m| m.get(&key))
                    .cloned()
            };
            match (cell("server"), cell("client")) {
                (Some(s), Some(c)) => println!("{name:<10} {count:>5}  {s:<32} {c}"),
                _ => {
                    let why = report.skipped.get(name).and_then(|m| m.get(&key));
                    println!(
                        "{name:<10} {count:>5}  skipped: {}",
                        why.map_or("", String::as_str)
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_counts_are_powers_of_two_then_all() {
        assert_eq!(default_counts(112), vec![1, 2, 4, 8, 16, 32, 64, 112]);
        assert_eq!(default_counts(2), vec![1, 2]);
        assert_eq!(default_counts(32), vec![1, 2, 4, 8, 16, 32]);
    }
}
