//! The machine's CPU topology as /sys describes it: online CPUs, their cores, packages and
//! NUMA nodes. Only the reader lives here; what to do with a topology (placement policies,
//! the `topology` command) belongs to the layers above.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::cpuset;

/// One online logical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    /// The kernel's CPU number.
    pub id: usize,
    /// The core id within its package (`topology/core_id`).
    pub core_id: usize,
    /// The physical package (socket) (`topology/physical_package_id`).
    pub package: usize,
    /// The NUMA node holding this CPU (0 when the machine reports none).
    pub node: usize,
    /// The SMT siblings of this CPU, itself included (`topology/thread_siblings_list`).
    pub siblings: Vec<usize>,
}

/// One physical core: its hardware threads, lowest CPU number first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// The physical package (socket).
    pub package: usize,
    /// The NUMA node of the core's first thread.
    pub node: usize,
    /// The logical CPUs of this core, sorted.
    pub threads: Vec<usize>,
}

/// The machine's online CPUs, cores, packages and NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Every online CPU, by CPU number.
    pub cpus: Vec<Cpu>,
}

/// A topology that could not be read.
#[derive(Debug, Error)]
pub enum TopologyError {
    /// A sysfs file was missing or unreadable.
    #[error("cannot read {path}: {error} (is {root} a sysfs tree? pass --sysfs ROOT)")]
    Read {
        path: PathBuf,
        root: PathBuf,
        error: std::io::Error,
    },
    /// A sysfs file held something other than what the kernel writes there.
    #[error("{path} holds {content:?}, expected {expected}")]
    Parse {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },
}

impl Topology {
    /// Reads the running machine's topology from /sys.
    pub fn detect() -> Result<Topology, TopologyError> {
        Topology::from_sysfs(Path::new("/sys"))
    }

    /// Reads the topology from a sysfs tree rooted at `root` (normally "/sys").
    pub fn from_sysfs(root: &Path) -> Result<Topology, TopologyError> {
        let cpu_dir = root.join("devices/system/cpu");
        let online = read_cpu_list(root, &cpu_dir.join("online"))?;
        let node_of = read_nodes(root)?;
        let mut cpus = Vec::with_capacity(online.len());
        for id in online {
            let topo = cpu_dir.join(format!("cpu{id}/topology"));
            let siblings = read_cpu_list(root, &topo.join("thread_siblings_list"))?;
            cpus.push(Cpu {
                id,
                core_id: read_number(root, &topo.join("core_id"))?,
                package: read_number(root, &topo.join("physical_package_id"))?,
                node: node_of.get(&id).copied().unwrap_or(0),
                siblings,
            });
        }
        Ok(Topology::from_cpus(cpus))
    }

    /// Builds a topology from a list of CPUs (sorted by CPU number here).
    pub fn from_cpus(mut cpus: Vec<Cpu>) -> Topology {
        cpus.sort_by_key(|c| c.id);
        Topology { cpus }
    }

    /// The online CPU numbers.
    pub fn cpu_ids(&self) -> Vec<usize> {
        self.cpus.iter().map(|c| c.id).collect()
    }

    /// The NUMA node numbers, ascending.
    pub fn nodes(&self) -> Vec<usize> {
        let set: BTreeSet<usize> = self.cpus.iter().map(|c| c.node).collect();
        set.into_iter().collect()
    }

    /// The CPUs of one NUMA node.
    pub fn node_cpus(&self, node: usize) -> Vec<usize> {
        self.cpus
            .iter()
            .filter(|c| c.node == node)
            .map(|c| c.id)
            .collect()
    }

    /// The packages (sockets), ascending.
    pub fn packages(&self) -> Vec<usize> {
        let set: BTreeSet<usize> = self.cpus.iter().map(|c| c.package).collect();
        set.into_iter().collect()
    }

    /// The physical cores, ordered by node, then by their lowest CPU number.
    pub fn cores(&self) -> Vec<Core> {
        let mut by_key: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for c in &self.cpus {
            by_key.entry((c.package, c.core_id)).or_default().push(c.id);
        }
        let node_of: BTreeMap<usize, usize> = self.cpus.iter().map(|c| (c.id, c.node)).collect();
        let mut cores: Vec<Core> = by_key
            .into_iter()
            .map(|((package, _), mut threads)| {
                threads.sort_unstable();
                Core {
                    package,
                    node: node_of[&threads[0]],
                    threads,
                }
            })
            .collect();
        cores.sort_by_key(|c| (c.node, c.threads[0]));
        cores
    }

    /// The most hardware threads any core has (1 without SMT).
    pub fn threads_per_core(&self) -> usize {
        self.cores()
            .iter()
            .map(|c| c.threads.len())
            .max()
            .unwrap_or(1)
    }

    /// True when some core runs more than one hardware thread.
    pub fn smt(&self) -> bool {
        self.threads_per_core() > 1
    }

    /// One line: CPUs, packages, cores, threads per core, nodes.
    pub fn summary(&self) -> String {
        let nodes = self.nodes().len();
        format!(
            "{} CPU{} online ({}), {} package{}, {} physical core{}, {} thread{} per core (SMT {}), {} NUMA node{}",
            self.cpus.len(),
            plural(self.cpus.len()),
            cpuset::format(&self.cpu_ids()),
            self.packages().len(),
            plural(self.packages().len()),
            self.cores().len(),
            plural(self.cores().len()),
            self.threads_per_core(),
            plural(self.threads_per_core()),
            if self.smt() { "on" } else { "off" },
            nodes,
            plural(nodes),
        )
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn read_text(root: &Path, path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path).map_err(|error| TopologyError::Read {
        path: path.to_path_buf(),
        root: root.to_path_buf(),
        error,
    })
}

fn read_number(root: &Path, path: &Path) -> Result<usize, TopologyError> {
    let text = read_text(root, path)?;
    // Some platforms write -1 for an unknown package or core: treat it as 0.
    match text.trim() {
        "-1" => Ok(0),
        t => t.parse().map_err(|_| TopologyError::Parse {
            path: path.to_path_buf(),
            content: text.trim().to_string(),
            expected: "a number",
        }),
    }
}

fn read_cpu_list(root: &Path, path: &Path) -> Result<Vec<usize>, TopologyError> {
    let text = read_text(root, path)?;
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    cpuset::parse(text.trim()).map_err(|_| TopologyError::Parse {
        path: path.to_path_buf(),
        content: text.trim().to_string(),
        expected: "a CPU list such as 0-3,8",
    })
}

/// CPU → NUMA node, from /sys/devices/system/node/node*/cpulist (empty without NUMA support).
fn read_nodes(root: &Path) -> Result<BTreeMap<usize, usize>, TopologyError> {
    let dir = root.join("devices/system/node");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(BTreeMap::new());
    };
    let mut node_of = BTreeMap::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(node) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<usize>().ok())
        else {
            continue;
        };
        for cpu in read_cpu_list(root, &entry.path().join("cpulist"))? {
            node_of.insert(cpu, node);
        }
    }
    Ok(node_of)
}
