//! Targets on other hosts: started through the host's engine with the placement's cpuset of that host, probed
//! until ready, watched for an early death, ended as a remote process group.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::server_health::ServerHosts;
use super::session::{HostSession, Sessions};
use crate::fleet::error::LaunchError;
use crate::fleet::ranks;
use crate::fleet::server::{Launcher, ProcessLauncher, Server};
use crate::fleet::target::{TargetKind, TargetPlan};
use crate::observe::metrics::MetricsPlan;
use crate::observe::step::ServerExtras;
use crate::placement::CpuPair;
use crate::remote::{slurm_step, Engine, RemoteError, RemoteProcess, RemoteStatus, REMOTE_BIN};

/// A server on another host, as the observers see it.
#[derive(Debug, Clone)]
pub struct RemoteTarget {
    /// Its host.
    pub session: Arc<HostSession>,
    /// The pid of its process tree's root there.
    pub pid: i32,
    /// Its name in the results (the target's; `NAME.rJ` for a further rank).
    pub label: String,
    /// Its metrics file there, relative to the host's working directory, if it writes one.
    pub metrics: Option<String>,
    /// A kvd target over several hosts: its further ranks, each observed on its own host.
    pub ranks: Vec<RemoteTarget>,
}

/// Starts targets that name a host through its engine, the others with `local`.
pub struct HostLauncher<'a, L: Launcher> {
    /// The launcher of this machine's targets.
    pub local: L,
    /// The connected hosts.
    pub sessions: &'a Sessions,
    /// Target hosts lost in a step, and those marked down.
    pub health: ServerHosts,
}

/// Why a target on other hosts did not start or become ready.
#[derive(Debug, thiserror::Error)]
pub enum RemoteStartError {
    /// A process could not be started on its host.
    #[error("cannot start target {target:?}: {source}")]
    Spawn {
        /// The target (or rank) name.
        target: String,
        /// What the engine said.
        source: RemoteError,
    },
    /// The ranks' job step could not be started.
    #[error("cannot start the ranks of target {target:?}: {source}")]
    Ranks {
        /// The target's name.
        target: String,
        /// What the engine said.
        source: RemoteError,
    },
    /// A process ended before it was ready.
    #[error("{who} {status} before it was ready{tail}")]
    Exited {
        /// Which process, on which host.
        who: String,
        /// How it ended.
        status: String,
        /// The end of its output.
        tail: String,
    },
    /// Stopped (Ctrl-C) while waiting.
    #[error("interrupted")]
    Interrupted,
    /// A process did not become ready in time.
    #[error("{who} was not ready within {timeout:?}{tail}")]
    NotReady {
        /// Which process, on which host.
        who: String,
        /// Its `ready_timeout`.
        timeout: Duration,
        /// The end of its output.
        tail: String,
    },
}

impl<L: Launcher> HostLauncher<'_, L> {
    /// Starts each process of `target` on its host over its own channel.
    fn start_each(
        &mut self,
        target: &TargetPlan,
        plans: Vec<(String, TargetPlan)>,
        sessions: Vec<Arc<HostSession>>,
        cpus: &CpuPair,
        clients: usize,
    ) -> Result<Vec<RemoteProc>, RemoteStartError> {
        let mut procs = Vec::new();
        for (rank, ((host, plan), session)) in plans.into_iter().zip(sessions).enumerate() {
            let line = remote_line(&plan, cpus, clients);
            let signal = crate::process::signal_name(target.stop_signal);
            let engine = session.engine.clone();
            match RemoteProcess::spawn(engine, &line, signal, target.stop_grace) {
                Ok(process) => procs.push(RemoteProc {
                    label: rank_label(target, rank),
                    metrics: plan.metrics.as_ref().map(|_| remote_metrics_file(&plan)),
                    session,
                    process,
                }),
                Err(source) => {
                    let unreachable = matches!(source, RemoteError::Unreachable { .. });
                    let why = RemoteStartError::Spawn {
                        target: plan.name.clone(),
                        source,
                    };
                    if unreachable {
                        self.health.failed(&host, &why.to_string());
                    }
                    for p in &mut procs {
                        p.process.stop();
                    }
                    return Err(why);
                }
            }
        }
        Ok(procs)
    }

    /// Starts a kvd target's ranks, on distinct nodes of the Slurm allocation, as one job
    /// step (see [`one_step`]).
    fn start_one_step(
        &mut self,
        target: &TargetPlan,
        plans: &[(String, TargetPlan)],
        sessions: &[Arc<HostSession>],
        cpus: &CpuPair,
        clients: usize,
    ) -> Result<Vec<RemoteProc>, RemoteStartError> {
        let engines: Vec<_> = sessions.iter().map(|s| s.engine.clone()).collect();
        let lines: Vec<String> = (plans.iter())
            .map(|(_, plan)| remote_line(plan, cpus, clients))
            .collect();
        let signal = crate::process::signal_name(target.stop_signal);
        let processes = slurm_step::spawn_step(&engines, &lines, signal, target.stop_grace)
            .map_err(|source| {
                let unreachable = matches!(source, RemoteError::Unreachable { .. });
                let why = RemoteStartError::Ranks {
                    target: target.name.clone(),
                    source,
                };
                if unreachable {
                    self.health.failed(&plans[0].0, &why.to_string());
                }
                why
            })?;
        Ok((processes.into_iter().zip(plans).zip(sessions).enumerate())
            .map(|(rank, ((process, (_, plan)), session))| RemoteProc {
                label: rank_label(target, rank),
                metrics: plan.metrics.as_ref().map(|_| remote_metrics_file(plan)),
                session: session.clone(),
                process,
            })
            .collect())
    }
}

/// Whether the processes on `sessions` start as one Slurm job step: several, each on its own
/// node of the allocation (a kvd target's ranks, as a cluster starts ranks); else each starts
/// on its own.
fn one_step(sessions: &[Arc<HostSession>]) -> bool {
    let engines: Vec<&dyn Engine> = sessions.iter().map(|s| &*s.engine).collect();
    slurm_step::step_nodes(&engines).is_some()
}

impl<L: Launcher> Launcher for HostLauncher<'_, L> {
    fn launch(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        stop: &AtomicBool,
    ) -> Result<Box<dyn Server>, LaunchError> {
        let Some(host) = &target.host else {
            return self.local.launch(target, cpus, clients, stop);
        };
        if let Some(why) = self.health.down_reason(host) {
            return Err(LaunchError::Host(why));
        }
        // Every rank first, then their readiness: a kvd rank is ready once its peers are up.
        let sessions = (rank_plans(target, &[]).iter())
            .map(|(host, _)| {
                (self.sessions.get(host))
                    .map_err(|why| LaunchError::Host(format!("host {host:?}: {why}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let plans = rank_plans(target, &addresses(&sessions));
        let procs = match one_step(&sessions) {
            true => self.start_one_step(target, &plans, &sessions, cpus, clients),
            false => self.start_each(target, plans, sessions, cpus, clients),
        }
        .map_err(|e| LaunchError::Start(e.to_string()))?;
        let mut server = RemoteServer {
            port: target.port.unwrap_or(0),
            procs,
        };
        match server.wait_ready(target, stop) {
            Ok(()) => {
                self.health.ok(host);
                Ok(Box::new(server))
            }
            Err(why) => {
                let why = why.to_string();
                if server.host_lost() || self.health.on_probation(host) {
                    self.health.failed(host, first_line(&why));
                }
                Err(LaunchError::Start(why))
            }
        }
    }

    fn host_lost(&mut self, target: &TargetPlan, why: &str) {
        if let Some(host) = &target.host {
            self.health.failed(host, why);
        }
    }

    fn host_down(&self, target: &TargetPlan) -> Option<String> {
        target
            .host
            .as_deref()
            .and_then(|h| self.health.down_reason(h))
    }

    fn take_notes(&mut self) -> Vec<String> {
        self.health.take_notes()
    }

    fn describe(&self, target: &TargetPlan, cpus: &CpuPair, clients: usize) -> String {
        if target.host.is_none() {
            return self.local.describe(target, cpus, clients);
        }
        // Hosts are not contacted by a dry run: `{host}` in --ranks stays as written.
        (rank_plans(target, &[]).iter())
            .map(|(host, plan)| format!("on host {host}: {}", remote_line(plan, cpus, clients)))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The launcher of a target's command line on a host: the binary and the run directory are
/// the host's working directory.
fn remote_launcher() -> ProcessLauncher {
    ProcessLauncher {
        stairbench_bin: PathBuf::from(format!("./{}", REMOTE_BIN)),
        out_dir: PathBuf::from("."),
    }
}

/// Where a target started on a host writes its metrics, relative to the working directory.
fn remote_metrics_file(target: &TargetPlan) -> String {
    let ext = target.metrics.as_ref().map_or("json", |m| m.extension());
    let file = crate::observe::metrics::metrics_path(Path::new("."), &target.name, None, ext);
    match &target.metrics {
        Some(MetricsPlan::File { template, .. }) => {
            template.replace("{metrics}", &file.display().to_string())
        }
        _ => file.display().to_string(),
    }
}

/// The addresses others reach `sessions`' hosts at (`{host}` in a kvd target's `--ranks`).
fn addresses(sessions: &[Arc<HostSession>]) -> Vec<String> {
    (sessions.iter())
        .map(|s| s.engine.spec().address.clone())
        .collect()
}

/// Each process of `target` with its host: the target itself, or a kvd target's ranks (rank
/// j on `rank_hosts[j]` with its own rank, region and metrics file `FILE.rj`; `{host}` in
/// the j-th address of `--ranks` is `addresses[j]`, when given).
fn rank_plans(target: &TargetPlan, addresses: &[String]) -> Vec<(String, TargetPlan)> {
    let (TargetKind::Builtin(args), false) = (&target.kind, target.rank_hosts.is_empty()) else {
        return target
            .host
            .iter()
            .map(|h| (h.clone(), target.clone()))
            .collect();
    };
    (target.rank_hosts.iter().enumerate())
        .map(|(j, host)| {
            let mut plan = target.clone();
            let args = ranks::fill_rank_addresses(args, addresses);
            plan.kind = TargetKind::Builtin(ranks::rank_args(&args, j));
            if let (Some(MetricsPlan::File { template, format }), true) = (&target.metrics, j > 0) {
                plan.metrics = Some(MetricsPlan::File {
                    template: format!("{template}.r{j}"),
                    format: *format,
                });
            }
            if j > 0 {
                // The target's ready line may name rank 0; every rank prints its own.
                plan.ready_log = regex::Regex::new(ranks::RANK_READY).ok();
            }
            (host.clone(), plan)
        })
        .collect()
}

/// Rank `rank`'s name in the results: the target's, `NAME.rJ` for a further rank.
fn rank_label(target: &TargetPlan, rank: usize) -> String {
    match rank {
        0 => target.name.clone(),
        j => format!("{}.r{j}", target.name),
    }
}

/// The shell line that starts `target` in the host's working directory.
fn remote_line(target: &TargetPlan, cpus: &CpuPair, clients: usize) -> String {
    let port = target.port.map_or("0".to_string(), |p| p.to_string());
    let mut argv = remote_launcher().argv(target, cpus, clients, &port);
    if let TargetKind::Builtin(args) = &target.kind {
        // Reached from other hosts: listen on every address, not on loopback only (a kvd
        // rank listens on its own --ranks address).
        if !args.iter().any(|a| a == "--bind") && args[0] != "kvd" {
            argv.extend(["--bind".into(), "0.0.0.0".into()]);
        }
    }
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| crate::remote::shell::shell_quote(a))
        .collect();
    // A metrics file left by an earlier launch would be read as this one's.
    let prepare = match &target.metrics {
        Some(_) => format!(
            "mkdir -p metrics && rm -f {} && exec ",
            crate::remote::shell::shell_quote(&remote_metrics_file(target))
        ),
        None => String::new(),
    };
    match &target.kind {
        TargetKind::Builtin(_) => format!("{prepare}{}", quoted.join(" ")),
        TargetKind::Running(_) => quoted.join(" "),
        TargetKind::Command(_) => format!(
            "taskset -c {} {}",
            crate::cpuset::format(&cpus.server),
            quoted.join(" ")
        ),
    }
}

/// One process of a remote target on its host (a kvd target over several hosts has one per
/// rank).
struct RemoteProc {
    /// Its name in the results and in messages (`NAME`, `NAME.rJ`).
    label: String,
    session: Arc<HostSession>,
    process: RemoteProcess,
    /// Its metrics file there, relative to the working directory.
    metrics: Option<String>,
}

impl RemoteProc {
    fn tail(&self) -> String {
        self.process.last_output(20).join("\n")
    }

    /// Its ready line's captures, once a line of its output matches.
    fn matched(&self, re: &regex::Regex) -> Option<Option<u16>> {
        let lines = self.process.output_tail();
        let caps = lines.iter().find_map(|l| re.captures(l))?;
        Some(caps.get(1).and_then(|m| m.as_str().parse().ok()))
    }

    fn describe(&self, target: &TargetPlan) -> String {
        match self.label == target.name {
            true => format!("target {:?} on host {}", target.name, self.session.name()),
            false => format!(
                "{} of target {:?} on host {}",
                self.rank(),
                target.name,
                self.session.name()
            ),
        }
    }

    /// `rank J` from the label `NAME.rJ`.
    fn rank(&self) -> String {
        let j = self.label.rsplit_once(".r").map_or("0", |(_, j)| j);
        format!("rank {j}")
    }

    fn observed(&self) -> RemoteTarget {
        RemoteTarget {
            session: self.session.clone(),
            pid: self.process.pgid(),
            label: self.label.clone(),
            metrics: self.metrics.clone(),
            ranks: Vec::new(),
        }
    }
}

/// A target running on another host (a kvd target over several hosts: its ranks, rank 0
/// first).
pub struct RemoteServer {
    procs: Vec<RemoteProc>,
    port: u16,
}

impl RemoteServer {
    fn wait_ready(
        &mut self,
        target: &TargetPlan,
        stop: &AtomicBool,
    ) -> Result<(), RemoteStartError> {
        let plans: Vec<TargetPlan> = rank_plans(target, &[])
            .into_iter()
            .map(|(_, p)| p)
            .collect();
        let start = Instant::now();
        let mut ready = vec![false; self.procs.len()];
        loop {
            for k in 0..self.procs.len() {
                let p = &mut self.procs[k];
                let status = p.process.try_status();
                if status != RemoteStatus::Running {
                    return Err(RemoteStartError::Exited {
                        who: p.describe(target),
                        status: status.to_string(),
                        tail: crate::fleet::server::output_ends(&p.tail()),
                    });
                }
                let take_port = k == 0 && target.port_from_log;
                let log_ok = match (&plans[k].ready_log, take_port) {
                    (None, _) => true,
                    (Some(re), false) => p.matched(re).is_some(),
                    (Some(re), true) => match p.matched(re).flatten() {
                        Some(port) => {
                            self.port = port;
                            true
                        }
                        None => false,
                    },
                };
                ready[k] = log_ok && (k > 0 || !target.ready_tcp || self.port_accepts());
            }
            if ready.iter().all(|&r| r) {
                return Ok(());
            }
            if stop.load(Ordering::Relaxed) {
                return Err(RemoteStartError::Interrupted);
            }
            if start.elapsed() > target.ready_timeout {
                let k = ready.iter().position(|r| !r).unwrap_or(0);
                let p = &self.procs[k];
                return Err(RemoteStartError::NotReady {
                    who: p.describe(target),
                    timeout: target.ready_timeout,
                    tail: crate::fleet::server::output_ends(&p.tail()),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn port_accepts(&self) -> bool {
        let address = &self.procs[0].session.engine.spec().address;
        let addrs: Vec<SocketAddr> = (address.as_str(), self.port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default();
        addrs
            .iter()
            .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok())
    }
}

impl Server for RemoteServer {
    fn pid(&self) -> Option<i32> {
        None
    }
    fn port(&self) -> u16 {
        self.port
    }
    fn died(&mut self) -> Option<String> {
        let several = self.procs.len() > 1;
        self.procs.iter_mut().find_map(|p| {
            let status = p.process.try_status();
            let rank = match several {
                true => format!("{} ", p.rank()),
                false => String::new(),
            };
            match status {
                RemoteStatus::Running => None,
                // A lost session's status quotes ssh's last words: they are said once.
                status @ RemoteStatus::ConnectionLost(_) => {
                    Some(format!("{rank}on host {}: {status}", p.session.name()))
                }
                status => Some(format!(
                    "{rank}on host {}: {status}{}",
                    p.session.name(),
                    crate::fleet::server::output_ends(&p.tail())
                )),
            }
        })
    }
    fn stop(&mut self) -> Option<String> {
        for p in &mut self.procs {
            p.process.stop();
        }
        None
    }
    fn host_lost(&mut self) -> bool {
        (self.procs.iter_mut())
            .any(|p| matches!(p.process.try_status(), RemoteStatus::ConnectionLost(_)))
    }
    fn extras(&self) -> ServerExtras {
        let mut main = self.procs[0].observed();
        main.ranks = self.procs[1..].iter().map(RemoteProc::observed).collect();
        ServerExtras {
            remote: Some(Arc::new(main)),
            ..ServerExtras::default()
        }
    }
}
