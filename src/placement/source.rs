//! Where the server and the client run: a placement policy gives each side a cpuset,
//! either fixed for a whole series or growing with the client count.
//!
//! The step loop asks a [`PlacementSource`]; the machine's topology answers through
//! [`TopologyPlacements`], and a fake answers in tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::policy::{load_custom_table, CustomPlacement, Policy};
use crate::machine::topology::Topology;

/// The cpusets of one step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuPair {
    /// CPUs the server runs on.
    pub server: Vec<usize>,
    /// CPUs the load generator runs on.
    pub client: Vec<usize>,
}

/// Why a placement cannot give a step's cpusets (the step is then skipped).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpusError {
    /// The topology cannot make it: too few CPUs, an offline CPU, a custom table's gap.
    #[error(transparent)]
    Placement(#[from] super::policy::PlacementError),
    /// Too few CPUs for the plain split (no topology was read).
    #[error("{0}")]
    TooFewCpus(String),
    /// No placement by that name.
    #[error(
        "unknown placement {0:?}{near} (expected shared, separated, balanced or a custom_placements name)",
        near = crate::units::did_you_mean(.0, &["shared", "separated", "balanced"])
    )]
    Unknown(String),
    /// A custom cpuset table with no entry at all.
    #[error("the cpuset table is empty")]
    EmptyTable,
    /// The host whose topology it needs could not be reached.
    #[error("{0}")]
    Host(String),
}

/// Gives the cpusets of a placement; `count` is `Some(clients)` when the cpusets follow
/// the client count, `None` for a placement fixed over the whole series.
pub trait PlacementSource {
    /// The cpusets, or why this placement cannot give them (the step is then skipped).
    fn cpus(&self, placement: &str, count: Option<usize>) -> Result<CpuPair, CpusError>;
    /// Remarks worth printing once (e.g. two policies that coincide on this machine).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
    /// Why another host cannot be used (unreachable when the run started), if it cannot.
    fn host_down(&self, host: &str) -> Option<String> {
        let _ = host;
        None
    }
    /// The cpusets when the server runs on `server_host` and the client on `client_host`
    /// (None: this machine): each side by the placement's rule on its own host's topology.
    fn cpus_on(
        &self,
        server_host: Option<&str>,
        client_host: Option<&str>,
        placement: &str,
        count: Option<usize>,
    ) -> Result<CpuPair, CpusError> {
        let _ = (server_host, client_host);
        self.cpus(placement, count)
    }
}

/// A custom placement: one policy of a cpuset table in the messenger study's JSON format
/// (`{"balanced": {"server": {"2": "0,56"}, "client": {...}}}`), read by `sweep::topology`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomTable(CustomPlacement);

/// A custom cpuset table file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TableFileError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// Its content is not a table.
    #[error("{}: {source}", path.display())]
    Table {
        /// The file.
        path: PathBuf,
        /// What is wrong in it.
        source: super::policy::CustomTableError,
    },
    /// It has no policy of that key.
    #[error("{} has no policy {key:?} (it lists {})", path.display(), .listed.join(", "))]
    NoPolicy {
        /// The file.
        path: PathBuf,
        /// The key asked for.
        key: String,
        /// The keys it has.
        listed: Vec<String>,
    },
}

impl CustomTable {
    /// Reads the policy stored under `key` of a JSON file in the messenger study's format.
    pub fn read(path: &Path, key: &str) -> Result<CustomTable, TableFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TableFileError::Read {
            path: path.into(),
            source,
        })?;
        let mut tables = load_custom_table(&text).map_err(|source| TableFileError::Table {
            path: path.into(),
            source,
        })?;
        let listed = tables.keys().cloned().collect::<Vec<_>>();
        tables
            .remove(key)
            .map(CustomTable)
            .ok_or_else(|| TableFileError::NoPolicy {
                path: path.into(),
                key: key.into(),
                listed,
            })
    }

    /// The cpusets for `count` clients; a fixed placement takes the table's largest entry.
    fn cpus(&self, count: Option<usize>) -> Result<CpuPair, CpusError> {
        let count = match count {
            Some(n) => n,
            None => *self.0.by_count.keys().max().ok_or(CpusError::EmptyTable)?,
        };
        let p = self.0.lookup(count)?;
        Ok(CpuPair {
            server: p.server,
            client: p.client,
        })
    }
}

/// The built-in policies over this machine's CPUs, plus custom tables.
///
/// Uses the machine's topology (`sweep::topology`: NUMA nodes, cores, SMT siblings) when
/// /sys can be read; otherwise, and in tests, it splits a CPU list in two halves.
#[derive(Debug, Clone)]
pub struct TopologyPlacements {
    cpus: Vec<usize>,
    topology: Option<Topology>,
    custom: BTreeMap<String, CustomTable>,
}

impl TopologyPlacements {
    /// Placements from this machine's topology.
    pub fn detect(custom: BTreeMap<String, CustomTable>) -> Self {
        let topology = Topology::detect().ok();
        TopologyPlacements {
            cpus: crate::cpuset::allowed(),
            topology,
            custom,
        }
    }

    /// Placements from another host's topology (its `stairbench topology --json`).
    pub fn from_report(
        report: &super::policy::TopologyReport,
        custom: BTreeMap<String, CustomTable>,
    ) -> Self {
        let topology = Topology::from_cpus(report.cpu_list.clone());
        TopologyPlacements {
            cpus: topology.cpu_ids(),
            topology: (!report.cpu_list.is_empty()).then_some(topology),
            custom,
        }
    }

    /// Placements over a given CPU list, halves for separated and balanced (tests).
    pub fn with_cpus(cpus: Vec<usize>, custom: BTreeMap<String, CustomTable>) -> Self {
        TopologyPlacements {
            cpus,
            topology: None,
            custom,
        }
    }

    fn from_topology(
        topo: &Topology,
        policy: &str,
        count: Option<usize>,
    ) -> Result<CpuPair, CpusError> {
        let policy = Policy::from(policy.to_string());
        let placement = match count {
            Some(n) => topo.placement_for(&policy, n),
            None => topo.fixed_placement(&policy),
        }?;
        Ok(CpuPair {
            server: placement.server,
            client: placement.client,
        })
    }

    fn split(&self, count: Option<usize>, policy: &str) -> Result<CpuPair, CpusError> {
        let total = self.cpus.len();
        if total < 2 {
            return Err(CpusError::TooFewCpus(format!(
                "{policy} needs at least 2 CPUs; this machine allows {total}"
            )));
        }
        let per_side = count.unwrap_or(total / 2);
        if 2 * per_side > total {
            return Err(CpusError::TooFewCpus(format!(
                "{policy} with {per_side} CPUs per side needs {} CPUs; this machine has {total}",
                2 * per_side
            )));
        }
        Ok(CpuPair {
            server: self.cpus[..per_side].to_vec(),
            client: self.cpus[total / 2..total / 2 + per_side].to_vec(),
        })
    }
}

impl PlacementSource for TopologyPlacements {
    fn cpus(&self, placement: &str, count: Option<usize>) -> Result<CpuPair, CpusError> {
        if let (Some(topo), "shared" | "separated" | "balanced") = (&self.topology, placement) {
            return Self::from_topology(topo, placement, count);
        }
        match placement {
            "shared" => {
                let n = count.unwrap_or(self.cpus.len());
                if n > self.cpus.len() {
                    return Err(CpusError::TooFewCpus(format!(
                        "shared with {}: this machine has {}",
                        crate::units::count(n, "CPU"),
                        self.cpus.len()
                    )));
                }
                Ok(CpuPair {
                    server: self.cpus[..n].to_vec(),
                    client: self.cpus[..n].to_vec(),
                })
            }
            "separated" | "balanced" => self.split(count, placement),
            other => match self.custom.get(other) {
                Some(table) => {
                    let pair = table.cpus(count)?;
                    if let Some(topo) = &self.topology {
                        let placement = super::policy::Placement {
                            server: pair.server.clone(),
                            client: pair.client.clone(),
                        };
                        topo.check(&placement)?;
                    }
                    Ok(pair)
                }
                None => Err(CpusError::Unknown(other.to_string())),
            },
        }
    }

    fn notes(&self) -> Vec<String> {
        if let Some(topo) = &self.topology {
            return topo.coincide_note().into_iter().collect();
        }
        vec![
            "balanced and separated coincide here: both give disjoint halves of the allowed CPUs \
             (no NUMA or SMT layout used)"
                .to_string(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_table_from_seed_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(
            &path,
            r#"{"balanced": {"server": {"2": "0,56"}, "client": {"2": "28,84"}}}"#,
        )
        .unwrap();
        let table = CustomTable::read(&path, "balanced").unwrap();
        let got = table.cpus(Some(2)).unwrap();
        assert_eq!(got.server, vec![0, 56]);
        assert_eq!(got.client, vec![28, 84]);
        assert!(table.cpus(Some(4)).is_err());
        assert!(CustomTable::read(&path, "separated").is_err());
    }
}
