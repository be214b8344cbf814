//! A server already running, at each step: checked to answer, its process found again (or
//! its server-side figures marked not observed). Planned in `sweep::plan::running`.

use std::path::Path;

use super::Server;
use crate::fleet::target::{alive, answers, Running, TargetPlan, NOT_OBSERVED};
use crate::observe::metrics::MetricsSource;
use crate::observe::step::ServerExtras;

/// Why a server already running cannot be used for a step.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// Nothing accepts at its address.
    #[error("nothing answers at {address} (target {target:?}, a server already running)")]
    Silent {
        /// Its address.
        address: std::net::SocketAddr,
        /// The target's name.
        target: String,
    },
    /// Its process cannot be found.
    #[error("target {target:?}, observed by {watch}: {why}")]
    Watch {
        /// The target's name.
        target: String,
        /// How it is watched (`pid 12`, `the pid in FILE`, ...).
        watch: String,
        /// Why the process was not found.
        why: crate::fleet::target::WatchError,
    },
}

/// The step's view of a server already running: checked to answer, its process found.
pub fn attach(target: &TargetPlan, running: &Running) -> Result<Box<dyn Server>, AttachError> {
    if !answers(&running.address) {
        return Err(AttachError::Silent {
            address: running.address,
            target: target.name.clone(),
        });
    }
    let pid = match &running.watch {
        Some(w) => Some(w.resolve().map_err(|why| AttachError::Watch {
            target: target.name.clone(),
            watch: w.describe(),
            why,
        })?),
        None => None,
    };
    let metrics = target.metrics.as_ref().map(|m| {
        let source = m.resolve(Path::new(""), running.address.port());
        (target.name.clone(), source)
    });
    Ok(Box::new(RunningServer {
        pid,
        port: running.address.port(),
        cpus: pid.map(tree_cpus).unwrap_or_default(),
        metrics,
    }))
}

/// The dry run's line for a server already running.
pub fn describe(running: &Running) -> String {
    let how = match &running.watch {
        Some(w) => format!("observed by {} (found again at each step)", w.describe()),
        None => "not observed (no pid, pidfile or process)".into(),
    };
    format!("already running at {}, not started; {how}", running.address)
}

/// The CPUs a process tree may run on: the union of its processes' affinities.
fn tree_cpus(root: i32) -> Vec<usize> {
    let mut cpus: Vec<usize> = std::iter::once(root)
        .chain(crate::process::descendants(root))
        .filter_map(process_cpus)
        .flatten()
        .collect();
    cpus.sort_unstable();
    cpus.dedup();
    cpus
}

/// A process's affinity (`Cpus_allowed_list` of /proc/PID/status).
fn process_cpus(pid: i32) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    crate::cpuset::parse(list.trim()).ok()
}

/// A server already running, at one step.
struct RunningServer {
    pid: Option<i32>,
    port: u16,
    cpus: Vec<usize>,
    metrics: Option<(String, MetricsSource)>,
}

impl Server for RunningServer {
    fn pid(&self) -> Option<i32> {
        self.pid
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn died(&mut self) -> Option<String> {
        let pid = self.pid.filter(|p| !alive(*p))?;
        Some(format!(
            "process {pid}, which was observed as the server, has ended"
        ))
    }
    fn stop(&mut self) -> Option<String> {
        None
    }
    fn extras(&self) -> ServerExtras {
        ServerExtras {
            metrics: self.metrics.iter().cloned().collect(),
            ..ServerExtras::default()
        }
    }
    fn own_cpus(&self) -> Option<Vec<usize>> {
        Some(self.cpus.clone())
    }
    fn not_observed(&self) -> Option<String> {
        self.pid.is_none().then(|| NOT_OBSERVED.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_runs_on_the_cpus_of_its_affinity() {
        let mut allowed = crate::cpuset::allowed();
        allowed.sort_unstable();
        assert_eq!(process_cpus(std::process::id() as i32), Some(allowed));
        assert_eq!(process_cpus(i32::MAX), None);
    }
}
