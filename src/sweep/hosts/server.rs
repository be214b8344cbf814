//! Targets on other hosts: started over ssh with the placement's cpuset of that host, probed
//! until ready, watched for an early death, ended as a remote process group.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::server_health::ServerHosts;
use super::session::{HostSession, Sessions};
use crate::observe::step::ServerExtras;
use crate::placement::CpuPair;
use crate::remote::{RemoteError, RemoteProcess, RemoteStatus, REMOTE_BIN};
use crate::sweep::plan::{TargetKind, TargetPlan};
use crate::sweep::server::{Launcher, ProcessLauncher, Server};

/// TERM, then KILL after this long, when a remote target is stopped.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// A server on another host, as the observers see it.
#[derive(Debug, Clone)]
pub struct RemoteTarget {
    /// Its host.
    pub session: Arc<HostSession>,
    /// The pid of its process tree's root there.
    pub pid: i32,
}

/// Starts targets that name a host over ssh, the others with `local`.
pub struct HostLauncher<'a, L: Launcher> {
    /// The launcher of this machine's targets.
    pub local: L,
    /// The connected hosts.
    pub sessions: &'a Sessions,
    /// Target hosts lost in a step, and those marked down.
    pub health: ServerHosts,
}

impl<L: Launcher> Launcher for HostLauncher<'_, L> {
    fn launch(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        stop: &AtomicBool,
    ) -> Result<Box<dyn Server>, String> {
        let Some(host) = &target.host else {
            return self.local.launch(target, cpus, clients, stop);
        };
        if let Some(why) = self.health.down_reason(host) {
            return Err(why);
        }
        let session = self
            .sessions
            .get(host)
            .map_err(|why| format!("host {host:?}: {why}"))?;
        let line = remote_line(target, cpus, clients);
        let process = match session.remote.spawn(&line, STOP_GRACE) {
            Ok(p) => p,
            Err(e) => {
                let why = format!("cannot start target {:?}: {e}", target.name);
                if matches!(e, RemoteError::Unreachable { .. }) {
                    self.health.failed(host, &why);
                }
                return Err(why);
            }
        };
        let mut server = RemoteServer {
            port: target.port.unwrap_or(0),
            session,
            process,
        };
        match server.wait_ready(target, stop) {
            Ok(()) => {
                self.health.ok(host);
                Ok(Box::new(server))
            }
            Err(why) => {
                if server.host_lost() || self.health.on_probation(host) {
                    self.health.failed(host, first_line(&why));
                }
                Err(why)
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
        match &target.host {
            Some(host) => format!("on host {host}: {}", remote_line(target, cpus, clients)),
            None => self.local.describe(target, cpus, clients),
        }
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// The shell line that starts `target` in the host's working directory.
fn remote_line(target: &TargetPlan, cpus: &CpuPair, clients: usize) -> String {
    let launcher = ProcessLauncher {
        stairbench_bin: PathBuf::from(format!("./{}", REMOTE_BIN)),
        out_dir: PathBuf::from("."),
    };
    let port = target.port.map_or("0".to_string(), |p| p.to_string());
    let mut argv = launcher.argv(target, cpus, clients, &port);
    if let TargetKind::Builtin(args) = &target.kind {
        // Reached from other hosts: listen on every address, not on loopback only.
        if !args.iter().any(|a| a == "--bind") {
            argv.extend(["--bind".into(), "0.0.0.0".into()]);
        }
    }
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| crate::remote::ssh::shell_quote(a))
        .collect();
    match &target.kind {
        TargetKind::Builtin(_) | TargetKind::Running(_) => quoted.join(" "),
        TargetKind::Command(_) => format!(
            "taskset -c {} {}",
            crate::cpuset::format(&cpus.server),
            quoted.join(" ")
        ),
    }
}

/// A target running on another host.
pub struct RemoteServer {
    session: Arc<HostSession>,
    process: RemoteProcess,
    port: u16,
}

impl RemoteServer {
    fn wait_ready(&mut self, target: &TargetPlan, stop: &AtomicBool) -> Result<(), String> {
        let start = Instant::now();
        loop {
            let status = self.process.try_status();
            if status != RemoteStatus::Running {
                return Err(format!(
                    "target {:?} on host {} {status} before it was ready; its output ends with:\n{}",
                    target.name,
                    self.session.name(),
                    self.tail()
                ));
            }
            let log_ok = match &target.ready_log {
                None => true,
                Some(re) => self.match_log(re, target.port_from_log),
            };
            let tcp_ok = !target.ready_tcp || self.port_accepts();
            if log_ok && tcp_ok {
                return Ok(());
            }
            if stop.load(Ordering::Relaxed) {
                return Err("interrupted".into());
            }
            if start.elapsed() > target.ready_timeout {
                return Err(format!(
                    "target {:?} on host {} was not ready within {:?}; its output ends with:\n{}",
                    target.name,
                    self.session.name(),
                    target.ready_timeout,
                    self.tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether a line of output matches; with `take_port`, the first group is the port.
    fn match_log(&mut self, re: &regex::Regex, take_port: bool) -> bool {
        let lines = self.process.output_tail();
        let Some(caps) = lines.iter().find_map(|l| re.captures(l)) else {
            return false;
        };
        if take_port {
            match caps.get(1).and_then(|m| m.as_str().parse().ok()) {
                Some(port) => self.port = port,
                None => return false,
            }
        }
        true
    }

    fn port_accepts(&self) -> bool {
        let address = &self.session.remote.spec.address;
        let addrs: Vec<SocketAddr> = (address.as_str(), self.port)
            .to_socket_addrs()
            .map(Iterator::collect)
            .unwrap_or_default();
        addrs
            .iter()
            .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(200)).is_ok())
    }

    fn tail(&self) -> String {
        self.process.last_output(20).join("\n")
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
        match self.process.try_status() {
            RemoteStatus::Running => None,
            // A lost session's status quotes ssh's last words: they are said once.
            status @ RemoteStatus::ConnectionLost(_) => {
                Some(format!("on host {}: {status}", self.session.name()))
            }
            status => Some(format!(
                "on host {}: {status}; its output ends with:\n{}",
                self.session.name(),
                self.tail()
            )),
        }
    }
    fn stop(&mut self) -> Option<String> {
        self.process.stop();
        None
    }
    fn host_lost(&mut self) -> bool {
        matches!(self.process.try_status(), RemoteStatus::ConnectionLost(_))
    }
    fn extras(&self) -> ServerExtras {
        ServerExtras {
            remote: Some(Arc::new(RemoteTarget {
                session: self.session.clone(),
                pid: self.process.pgid(),
            })),
            ..ServerExtras::default()
        }
    }
}
