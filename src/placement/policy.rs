//! The cpusets of each placement policy, over the topology `machine::topology` reads.
//!
//! A placement gives the server and the client their cpusets. The rules reproduce the messenger study's
//! table: `separated` puts each side on its own physical cores (one thread per core), on
//! different NUMA nodes when there are two or more; `balanced` gives each side whole cores
//! (with their SMT siblings) spread round-robin over all nodes; `shared` gives both sides
//! every CPU. A custom table in the messenger study's JSON format is taken verbatim.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cpuset;
use crate::machine::topology::{Core, Cpu, Topology};

/// A placement policy: how the server's and the client's cpusets are chosen. Written as its
/// name ("separated", "balanced", "shared", or a custom table's policy name) in specs and JSON.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum Policy {
    /// Disjoint physical cores, one thread each, on different NUMA nodes when there are two.
    Separated,
    /// Whole cores with their SMT siblings, spread over all NUMA nodes.
    Balanced,
    /// Both sides on every CPU.
    Shared,
    /// A named entry of a custom cpuset table (the messenger study's JSON format).
    Custom(String),
}

/// The cpusets of the server and the client, in the order they are written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The server's CPUs.
    pub server: Vec<usize>,
    /// The client's CPUs.
    pub client: Vec<usize>,
}

/// A placement that cannot be made on this machine.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum PlacementError {
    /// The machine has too few CPUs for the requested count.
    #[error("{policy} with {count} CPUs per side needs {needed}, but this machine has {have}")]
    TooFewCpus {
        policy: String,
        count: usize,
        needed: String,
        have: String,
    },
    /// A count of zero CPUs was asked for.
    #[error("a placement needs at least 1 CPU per side, got 0")]
    ZeroCount,
    /// A custom policy is resolved from its table, not from the topology.
    #[error("placement {name:?} is a custom table: look it up with CustomPlacement::lookup")]
    CustomNeedsTable { name: String },
    /// A custom table has no entry for this count.
    #[error("custom placement {name:?} has no cpusets for {count} CPUs (it lists {listed})")]
    NoCustomEntry {
        name: String,
        count: usize,
        listed: String,
    },
    /// A cpuset names a CPU that is not online.
    #[error(
        "{side} cpuset {cpuset:?} names CPU {cpu}, which is not online here (online: {online})"
    )]
    OfflineCpu {
        side: &'static str,
        cpuset: String,
        cpu: usize,
        online: String,
    },
}

/// A custom cpuset table that could not be read.
#[derive(Debug, Error)]
pub enum CustomTableError {
    /// Not JSON of the expected shape.
    #[error("custom cpuset table is not of the form {{\"policy\": {{\"server\": {{\"2\": \"0,56\"}}, \"client\": {{...}}}}}}: {0}")]
    Json(serde_json::Error),
    /// A key was not a count or a value not a CPU list.
    #[error("custom cpuset table, {policy}.{side}.{key}: {why}")]
    Entry {
        policy: String,
        side: &'static str,
        key: String,
        why: String,
    },
    /// The server and client sides list different counts.
    #[error("custom cpuset table, {policy}: count {count} is listed for the {present} but not for the {missing}")]
    Unpaired {
        policy: String,
        count: usize,
        present: &'static str,
        missing: &'static str,
    },
}

// By hand, not `#[from]`: the message says the JSON error, so it is not also a `source`
// (a chain printer would say it twice).
impl From<serde_json::Error> for CustomTableError {
    fn from(e: serde_json::Error) -> Self {
        CustomTableError::Json(e)
    }
}

/// One policy of a custom table: the cpusets by count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomPlacement {
    /// The policy's name in the table.
    pub name: String,
    /// The placement for each count.
    pub by_count: BTreeMap<usize, Placement>,
}

// The placement policies over a topology; the reader (`machine::topology`) knows nothing of
// them, so they live here with the policies.
impl Topology {
    /// The cpusets `policy` gives with `count` CPUs per side (one CPU per client, as in the messenger study).
    pub fn placement_for(
        &self,
        policy: &Policy,
        count: usize,
    ) -> Result<Placement, PlacementError> {
        if count == 0 {
            return Err(PlacementError::ZeroCount);
        }
        match policy {
            Policy::Separated => self.separated(count),
            Policy::Balanced => self.balanced(count),
            Policy::Shared => Ok(self.shared()),
            Policy::Custom(name) => Err(PlacementError::CustomNeedsTable { name: name.clone() }),
        }
    }

    /// The placement for a whole series whose cpusets do not follow the client count:
    /// each side gets half the machine (`shared`: both get all of it).
    pub fn fixed_placement(&self, policy: &Policy) -> Result<Placement, PlacementError> {
        match policy {
            Policy::Separated => {
                let (server_cores, client_cores) = self.separated_groups();
                let per_side = if client_cores.is_empty() {
                    server_cores.len() / 2
                } else {
                    server_cores.len().min(client_cores.len())
                };
                self.separated(per_side.max(1))
            }
            Policy::Balanced => self.balanced((self.cpus.len() / 2).max(1)),
            Policy::Shared => Ok(self.shared()),
            Policy::Custom(name) => Err(PlacementError::CustomNeedsTable { name: name.clone() }),
        }
    }

    /// On one NUMA node without SMT, `balanced` and `separated` give the same cpusets: says so.
    pub fn coincide_note(&self) -> Option<String> {
        if self.nodes().len() > 1 || self.smt() {
            return None;
        }
        Some(format!(
            "this machine has one NUMA node and no SMT ({} cores), so `balanced` and `separated` \
             give the same cpusets: comparing them measures nothing but noise",
            self.cores().len()
        ))
    }

    /// Checks that every CPU of a placement is online here.
    pub fn check(&self, placement: &Placement) -> Result<(), PlacementError> {
        let online: BTreeSet<usize> = self.cpus.iter().map(|c| c.id).collect();
        for (side, cpus) in [("server", &placement.server), ("client", &placement.client)] {
            if let Some(&cpu) = cpus.iter().find(|c| !online.contains(c)) {
                return Err(PlacementError::OfflineCpu {
                    side,
                    cpuset: cpuset::format(cpus),
                    cpu,
                    online: cpuset::format(&self.cpu_ids()),
                });
            }
        }
        Ok(())
    }

    fn shared(&self) -> Placement {
        Placement {
            server: self.cpu_ids(),
            client: self.cpu_ids(),
        }
    }

    /// The cores the server and the client draw from under `separated`: the first half of
    /// the NUMA nodes and the rest; with one node, both draw from the same cores (client empty).
    fn separated_groups(&self) -> (Vec<Core>, Vec<Core>) {
        let nodes = self.nodes();
        let cores = self.cores();
        if nodes.len() < 2 {
            return (cores, Vec::new());
        }
        let server_nodes: BTreeSet<usize> =
            nodes[..nodes.len().div_ceil(2)].iter().copied().collect();
        cores
            .into_iter()
            .partition(|c| server_nodes.contains(&c.node))
    }

    fn separated(&self, count: usize) -> Result<Placement, PlacementError> {
        let (server_cores, client_cores) = self.separated_groups();
        let first_threads = |cores: &[Core]| cores.iter().map(|c| c.threads[0]).collect::<Vec<_>>();
        if client_cores.is_empty() {
            let all = first_threads(&server_cores);
            if all.len() < 2 * count {
                return Err(self.too_few("separated", count, 2 * count, "physical cores"));
            }
            return Ok(Placement {
                server: all[..count].to_vec(),
                client: all[count..2 * count].to_vec(),
            });
        }
        let (server, client) = (first_threads(&server_cores), first_threads(&client_cores));
        if server.len() < count || client.len() < count {
            return Err(PlacementError::TooFewCpus {
                policy: "separated".into(),
                count,
                needed: format!(
                    "{count} physical cores on the server's NUMA nodes and {count} on the client's"
                ),
                have: format!("{} and {}", server.len(), client.len()),
            });
        }
        Ok(Placement {
            server: server[..count].to_vec(),
            client: client[..count].to_vec(),
        })
    }

    fn balanced(&self, count: usize) -> Result<Placement, PlacementError> {
        if 2 * count > self.cpus.len() {
            return Err(self.too_few("balanced", count, 2 * count, "CPUs"));
        }
        let per_node = self.cores_by_node();
        let mut taken: Vec<Vec<bool>> = per_node.iter().map(|cs| vec![false; cs.len()]).collect();
        let server = take_round_robin(&per_node, &mut taken, &vec![0; per_node.len()], count)
            .expect("2×count ≤ CPUs, so the server's share fits");
        // The client starts at the same core index on every node, past the largest server
        // share (the messenger study's table); when that runs off a node, it takes whatever is free.
        let start = vec![server.iter().map(Vec::len).max().unwrap_or(0); per_node.len()];
        let mut trial = taken.clone();
        let client = match take_round_robin(&per_node, &mut trial, &start, count) {
            Some(client) => client,
            None => take_round_robin(&per_node, &mut taken, &vec![0; per_node.len()], count)
                .ok_or_else(|| self.too_few("balanced", count, 2 * count, "CPUs"))?,
        };
        Ok(Placement {
            server: order_by_thread(&server, count),
            client: order_by_thread(&client, count),
        })
    }

    fn cores_by_node(&self) -> Vec<Vec<Core>> {
        let mut by_node: BTreeMap<usize, Vec<Core>> = BTreeMap::new();
        for core in self.cores() {
            by_node.entry(core.node).or_default().push(core);
        }
        by_node.into_values().collect()
    }

    fn too_few(&self, policy: &str, count: usize, needed: usize, what: &str) -> PlacementError {
        let have = match what {
            "physical cores" => self.cores().len(),
            _ => self.cpus.len(),
        };
        PlacementError::TooFewCpus {
            policy: policy.into(),
            count,
            needed: format!("{needed} {what}"),
            have: format!("{have} {what}"),
        }
    }
}

/// Takes free cores round-robin over the nodes (node 0's next core, node 1's next, ...),
/// starting on each node at `start[node]`, until `count` threads are held; marks them taken.
/// Returns the chosen cores per node, or None when the free cores run out.
fn take_round_robin(
    per_node: &[Vec<Core>],
    taken: &mut [Vec<bool>],
    start: &[usize],
    count: usize,
) -> Option<Vec<Vec<Core>>> {
    let mut chosen: Vec<Vec<Core>> = vec![Vec::new(); per_node.len()];
    let mut next = start.to_vec();
    let mut threads = 0;
    while threads < count {
        let mut progressed = false;
        for (node, cores) in per_node.iter().enumerate() {
            if threads >= count {
                break;
            }
            while next[node] < cores.len() && taken[node][next[node]] {
                next[node] += 1;
            }
            if next[node] < cores.len() {
                taken[node][next[node]] = true;
                chosen[node].push(cores[next[node]].clone());
                threads += cores[next[node]].threads.len();
                next[node] += 1;
                progressed = true;
            }
        }
        if !progressed {
            return None;
        }
    }
    Some(chosen)
}

/// Writes each node's cores as the messenger study does: first threads, then second threads, ...
/// ("0-1,56-57,28-29,84-85"), keeping `count` CPUs (the last core chosen may be split).
fn order_by_thread(chosen: &[Vec<Core>], count: usize) -> Vec<usize> {
    let mut keep: BTreeSet<usize> = chosen
        .iter()
        .flatten()
        .flat_map(|c| c.threads.clone())
        .collect();
    let mut extra = keep.len().saturating_sub(count);
    // The last core taken is the one round-robin took last: drop its highest threads.
    let last = last_taken(chosen);
    if let Some(core) = last {
        for t in core.threads.iter().rev() {
            if extra == 0 {
                break;
            }
            keep.remove(t);
            extra -= 1;
        }
    }
    let mut out = Vec::with_capacity(count);
    for cores in chosen {
        let width = cores.iter().map(|c| c.threads.len()).max().unwrap_or(0);
        for slot in 0..width {
            out.extend(
                cores
                    .iter()
                    .filter_map(|c| c.threads.get(slot))
                    .filter(|t| keep.contains(t)),
            );
        }
    }
    out
}

/// The core round-robin took last: the last core of the last node among those holding the
/// most cores.
fn last_taken(chosen: &[Vec<Core>]) -> Option<&Core> {
    let most = chosen.iter().map(Vec::len).max()?;
    chosen
        .iter()
        .rev()
        .find(|cores| cores.len() == most)
        .and_then(|cores| cores.last())
}

impl CustomPlacement {
    /// The placement this table lists for `count`.
    pub fn lookup(&self, count: usize) -> Result<Placement, PlacementError> {
        self.by_count
            .get(&count)
            .cloned()
            .ok_or_else(|| PlacementError::NoCustomEntry {
                name: self.name.clone(),
                count,
                listed: self
                    .by_count
                    .keys()
                    .map(|k| k.to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// Reads a cpuset table in the messenger study's JSON format, verbatim (the order of CPUs is kept):
/// `{"balanced": {"server": {"2": "0,56", ...}, "client": {"2": "1,57", ...}}, ...}`.
pub fn load_custom_table(
    json: &str,
) -> Result<BTreeMap<String, CustomPlacement>, CustomTableError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Sides {
        server: BTreeMap<String, String>,
        client: BTreeMap<String, String>,
    }
    let raw: BTreeMap<String, Sides> = serde_json::from_str(json)?;
    let mut out = BTreeMap::new();
    for (name, sides) in raw {
        let server = parse_side(&name, "server", &sides.server)?;
        let client = parse_side(&name, "client", &sides.client)?;
        let mut by_count = BTreeMap::new();
        for (&count, s) in &server {
            let c = client
                .get(&count)
                .ok_or_else(|| CustomTableError::Unpaired {
                    policy: name.clone(),
                    count,
                    present: "server",
                    missing: "client",
                })?;
            by_count.insert(
                count,
                Placement {
                    server: s.clone(),
                    client: c.clone(),
                },
            );
        }
        if let Some(&count) = client.keys().find(|k| !server.contains_key(k)) {
            return Err(CustomTableError::Unpaired {
                policy: name,
                count,
                present: "client",
                missing: "server",
            });
        }
        out.insert(name.clone(), CustomPlacement { name, by_count });
    }
    Ok(out)
}

fn parse_side(
    policy: &str,
    side: &'static str,
    entries: &BTreeMap<String, String>,
) -> Result<BTreeMap<usize, Vec<usize>>, CustomTableError> {
    let err = |key: &str, why: String| CustomTableError::Entry {
        policy: policy.to_string(),
        side,
        key: key.to_string(),
        why,
    };
    let mut out = BTreeMap::new();
    for (key, list) in entries {
        let count: usize = key
            .parse()
            .map_err(|_| err(key, "the key must be a CPU count such as \"8\"".into()))?;
        out.insert(
            count,
            parse_ordered(list).map_err(|e| err(key, e.to_string()))?,
        );
    }
    Ok(out)
}

/// Parses a CPU list keeping the order written ("0,56,28,84" stays in that order).
fn parse_ordered(list: &str) -> Result<Vec<usize>, cpuset::CpuListError> {
    let mut out = Vec::new();
    // A set, not `out.contains`: "0-4095,0-4095,..." was quadratic (seconds per entry).
    let mut seen = std::collections::HashSet::new();
    for part in list.split(',') {
        for cpu in cpuset::parse(part)? {
            if seen.insert(cpu) {
                out.push(cpu);
            }
        }
    }
    Ok(out)
}

impl Policy {
    /// The policy's name as written in specs and tables.
    pub fn name(&self) -> &str {
        match self {
            Policy::Separated => "separated",
            Policy::Balanced => "balanced",
            Policy::Shared => "shared",
            Policy::Custom(name) => name,
        }
    }

    /// The three built-in policies.
    pub fn builtin() -> [Policy; 3] {
        [Policy::Separated, Policy::Balanced, Policy::Shared]
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<String> for Policy {
    fn from(s: String) -> Policy {
        match s.parse() {
            Ok(p) => p,
            Err(never) => match never {},
        }
    }
}

impl From<Policy> for String {
    fn from(p: Policy) -> String {
        p.name().to_string()
    }
}

impl FromStr for Policy {
    type Err = std::convert::Infallible;

    /// "separated", "balanced", "shared"; any other name is a custom table's policy.
    fn from_str(s: &str) -> Result<Policy, Self::Err> {
        Ok(match s {
            "separated" => Policy::Separated,
            "balanced" => Policy::Balanced,
            "shared" => Policy::Shared,
            other => Policy::Custom(other.to_string()),
        })
    }
}

// ---------------------------------------------------------------------------------------
// `stairbench topology --json`: what another host's placements are computed from

/// The JSON `stairbench topology --json` prints.
#[derive(Debug, Serialize, Deserialize)]
pub struct TopologyReport {
    /// Number of online CPUs.
    pub cpus: usize,
    /// Number of NUMA nodes.
    pub nodes: usize,
    /// True when cores run more than one hardware thread.
    pub smt: bool,
    /// Number of physical packages (sockets).
    pub packages: usize,
    /// Number of physical cores.
    pub cores: usize,
    /// Hardware threads per core (the most any core has).
    pub threads_per_core: usize,
    /// The CPU list of each NUMA node, by node number.
    pub node_cpus: BTreeMap<String, String>,
    /// Cpusets by policy, side and count, in the messenger study's table format.
    pub placements: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>>,
    /// Why a policy gives no placement for a count, by policy and count.
    pub skipped: BTreeMap<String, BTreeMap<String, String>>,
    /// Set when `balanced` and `separated` coincide on this machine.
    pub note: Option<String>,
    /// Every online CPU with its core, package, node and siblings (what another host's
    /// placements are computed from).
    #[serde(default)]
    pub cpu_list: Vec<Cpu>,
}

/// The topology and its placements for `counts`, as `stairbench topology --json` prints them.
pub fn report(topo: &Topology, counts: &[usize]) -> TopologyReport {
    let mut placements = BTreeMap::new();
    let mut skipped = BTreeMap::new();
    for policy in Policy::builtin() {
        let mut sides: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut why: BTreeMap<String, String> = BTreeMap::new();
        for &count in counts {
            match topo.placement_for(&policy, count) {
                Ok(p) => {
                    sides
                        .entry("server".into())
                        .or_default()
                        .insert(count.to_string(), cpuset::format(&p.server));
                    sides
                        .entry("client".into())
                        .or_default()
                        .insert(count.to_string(), cpuset::format(&p.client));
                }
                Err(e) => {
                    why.insert(count.to_string(), e.to_string());
                }
            }
        }
        placements.insert(policy.name().to_string(), sides);
        if !why.is_empty() {
            skipped.insert(policy.name().to_string(), why);
        }
    }
    TopologyReport {
        cpus: topo.cpus.len(),
        nodes: topo.nodes().len(),
        smt: topo.smt(),
        packages: topo.packages().len(),
        cores: topo.cores().len(),
        threads_per_core: topo.threads_per_core(),
        node_cpus: topo
            .nodes()
            .into_iter()
            .map(|n| (n.to_string(), cpuset::format(&topo.node_cpus(n))))
            .collect(),
        placements,
        skipped,
        note: topo.coincide_note(),
        cpu_list: topo.cpus.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_lists_keep_their_order() {
        assert_eq!(parse_ordered("0,56,28,84").unwrap(), vec![0, 56, 28, 84]);
        assert_eq!(
            parse_ordered("4-7,60-63").unwrap(),
            vec![4, 5, 6, 7, 60, 61, 62, 63]
        );
    }
}
