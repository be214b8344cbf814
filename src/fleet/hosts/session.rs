//! The hosts of a run, connected once before the first step: reachable, the stairbench binary
//! in place, their clock offset, topology and environment known.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::placement::TopologyReport;
use crate::placement::{CpuPair, CpusError, CustomTable, PlacementSource, TopologyPlacements};
use crate::record::overhead::HostSetUp;
use crate::remote::{ClockOffset, Engine, HostSpec, RemoteError, REMOTE_BIN};

/// One connected host.
#[derive(Debug)]
pub struct HostSession {
    /// How to reach it.
    pub engine: Arc<dyn Engine>,
    /// Its clock minus ours.
    pub offset: ClockOffset,
    /// Placements computed from its own topology.
    pub placements: TopologyPlacements,
    /// Its `stairbench environment --json`, its clock offset and whether the binary was copied.
    pub environment: Value,
    /// How long its first ssh login took (the common-start lead covers a few).
    pub login: std::time::Duration,
    /// What its set-up took (also in `environment`, as `set_up`).
    pub set_up: HostSetUp,
}

impl HostSession {
    /// The host's name in the spec.
    pub fn name(&self) -> &str {
        self.engine.name()
    }

    /// `./stairbench ARGS` in the host's working directory, each argument quoted.
    pub fn command(&self, args: &[String]) -> String {
        let mut line = format!("./{REMOTE_BIN}");
        for a in args {
            line.push(' ');
            line.push_str(&crate::remote::shell::shell_quote(a));
        }
        line
    }
}

/// The hosts of a run: those connected, and why the others could not be.
#[derive(Debug, Default)]
pub struct Sessions {
    /// Connected hosts by name.
    pub up: BTreeMap<String, Arc<HostSession>>,
    /// Hosts that could not be set up, with the reason (their steps fail with it).
    pub down: BTreeMap<String, String>,
}

/// Why a host has no session.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoSession {
    /// It could not be set up when the run started (why).
    #[error("{0}")]
    Down(String),
    /// No host has that name.
    #[error("host {0:?} is not in the [hosts] table")]
    Unknown(String),
}

impl Sessions {
    /// The session of `name`, or why there is none.
    pub fn get(&self, name: &str) -> Result<Arc<HostSession>, NoSession> {
        if let Some(s) = self.up.get(name) {
            return Ok(s.clone());
        }
        Err(match self.down.get(name) {
            Some(why) => NoSession::Down(why.clone()),
            None => NoSession::Unknown(name.into()),
        })
    }

    /// What environment.json keeps of the hosts: each one's environment, or why it is missing.
    pub fn environment_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for (name, s) in &self.up {
            out.insert(name.clone(), s.environment.clone());
        }
        for (name, why) in &self.down {
            out.insert(name.clone(), json!({ "unreachable": why }));
        }
        Value::Object(out)
    }
}

/// Connects every host (in parallel, each within ssh's connect timeout); `note` is told of
/// each host as it comes up or fails.
pub fn connect_all(
    hosts: &BTreeMap<String, HostSpec>,
    stairbench_bin: &Path,
    custom: &BTreeMap<String, CustomTable>,
    note: &mut dyn FnMut(String),
) -> Sessions {
    let results: Vec<(String, Result<HostSession, RemoteError>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = hosts
            .iter()
            .map(|(name, spec)| {
                let spec = spec.clone();
                scope.spawn(move || (name.clone(), connect(spec, stairbench_bin, custom)))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut sessions = Sessions::default();
    for (name, result) in results {
        match result {
            Ok(s) => {
                note(format!(
                    "host {name}: {}, clock offset {:+.3} ms ± {:.3} ms, set up in {:.0} ms \
                     (check {:.0} ms, binary {:.0} ms)",
                    s.engine.url(),
                    s.offset.offset_ns as f64 / 1e6,
                    s.offset.uncertainty_ns as f64 / 1e6,
                    s.set_up.total_ms,
                    s.set_up.check_ms,
                    s.set_up.binary_ms,
                ));
                sessions.up.insert(name, Arc::new(s));
            }
            Err(why) => {
                note(format!("host {name}: {why}; its steps fail"));
                sessions.down.insert(name, why.to_string());
            }
        }
    }
    sessions
}

/// Checks the host, copies the binary when it differs, reads its topology, environment and
/// clock offset.
pub fn connect(
    spec: HostSpec,
    stairbench_bin: &Path,
    custom: &BTreeMap<String, CustomTable>,
) -> Result<HostSession, RemoteError> {
    let engine = crate::remote::engine(&spec);
    let t = std::time::Instant::now();
    engine.check()?;
    let login = t.elapsed();
    // Without its line tables: a tenth of the size to copy (made once per build, cached).
    let (bin, not_stripped) = crate::remote::stripped::for_hosts(stairbench_bin);
    let copied = engine.put(&bin)?;
    let binary = t.elapsed() - login;
    let topology = topology_json(&*engine)?;
    let mut environment: Value = engine.run_json(&format!("./{REMOTE_BIN} environment --json"))?;
    let offset = engine.clock_offset()?;
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let set_up = HostSetUp {
        total_ms: ms(t.elapsed()),
        check_ms: ms(login),
        binary_ms: ms(binary),
        binary_bytes: std::fs::metadata(&bin).map_or(0, |m| m.len()),
    };
    if let Value::Object(m) = &mut environment {
        // Under the engine's name: `"ssh": "ssh://..."`.
        m.insert(spec.scheme.clone(), json!(engine.url()));
        m.insert("clock_offset".into(), json!(offset));
        m.insert("binary".into(), json!(format!("{copied:?}").to_lowercase()));
        m.insert("set_up".into(), json!(set_up));
        if let Some(why) = not_stripped {
            m.insert("binary_not_stripped".into(), json!(why));
        }
    }
    Ok(HostSession {
        placements: TopologyPlacements::from_report(&topology, custom.clone()),
        engine,
        offset,
        environment,
        login,
        set_up,
    })
}

/// The host's CPU topology and placements, from `stairbench topology --json` run there
/// (copy the binary first). Here and not in `remote`, which knows nothing of placements.
pub fn topology_json(engine: &dyn Engine) -> Result<TopologyReport, RemoteError> {
    engine.run_json(&format!("./{REMOTE_BIN} topology --json"))
}

/// Placements over this machine and the connected hosts.
pub struct HostPlacements<'a> {
    /// This machine's.
    pub local: &'a TopologyPlacements,
    /// The hosts'.
    pub sessions: &'a Sessions,
}

impl HostPlacements<'_> {
    fn on(&self, host: Option<&str>) -> Result<TopologyPlacements, CpusError> {
        match host {
            None => Ok(self.local.clone()),
            Some(h) => Ok((self
                .sessions
                .get(h)
                .map_err(|e| CpusError::Host(e.to_string()))?)
            .placements
            .clone()),
        }
    }
}

impl PlacementSource for HostPlacements<'_> {
    fn cpus(&self, placement: &str, count: Option<usize>) -> Result<CpuPair, CpusError> {
        self.local.cpus(placement, count)
    }

    fn notes(&self) -> Vec<String> {
        self.local.notes()
    }

    fn host_down(&self, host: &str) -> Option<String> {
        self.sessions.get(host).err().map(|e| e.to_string())
    }

    fn cpus_on(
        &self,
        server_host: Option<&str>,
        client_host: Option<&str>,
        placement: &str,
        count: Option<usize>,
    ) -> Result<CpuPair, CpusError> {
        if server_host == client_host {
            return self.on(server_host)?.cpus(placement, count);
        }
        let server = self.on(server_host)?.cpus(placement, count)?.server;
        let client = self.on(client_host)?.cpus(placement, count)?.client;
        Ok(CpuPair { server, client })
    }
}
