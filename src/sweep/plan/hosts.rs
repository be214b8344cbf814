//! The spec's hosts checked before anything starts: the `[hosts]` table, the `host` of each
//! target and client group, and what a host does not support yet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::TargetPlan;
use crate::remote::host::{validate_hosts, HostEntry, HostSpec, HostTable};
use crate::sweep::spec::{SpecError, SpecFile};

/// The name a client group may give for this machine.
pub const LOCAL: &str = "local";

/// The hosts of a plan.
#[derive(Debug, Clone, Default)]
pub struct HostPlan {
    /// The `[hosts]` table, checked (paths resolved against the spec's directory).
    pub hosts: BTreeMap<String, HostSpec>,
    /// The client groups' hosts, in order (`None`: this machine). Empty: one local group.
    pub client_groups: Vec<Option<String>>,
}

impl HostPlan {
    /// True when some client group runs on another host.
    pub fn remote_clients(&self) -> bool {
        self.client_groups.iter().any(Option::is_some)
    }
}

/// Reads and checks the hosts of a spec whose targets are already planned.
pub fn plan_hosts(
    spec: &SpecFile,
    spec_dir: &Path,
    targets: &[TargetPlan],
) -> Result<HostPlan, SpecError> {
    let s = &spec.spec;
    let mut hosts = BTreeMap::new();
    for (name, entry) in &s.hosts {
        let entry = resolve_paths(entry, spec_dir);
        let host = HostSpec::from_entry(name, &entry)
            .map_err(|e| spec.error_at(&["hosts", name], e.to_string()))?;
        hosts.insert(name.clone(), host);
    }
    for (i, t) in s.targets.iter().enumerate() {
        if let Some(h) = &t.host {
            let who = format!("target {:?}", t.name);
            validate_hosts(&hosts, [(h.as_str(), who.as_str())])
                .map_err(|e| spec.error_at(&["targets", &i.to_string(), "host"], e.to_string()))?;
        }
    }
    let mut client_groups = Vec::new();
    for (i, g) in s.client.groups.iter().enumerate() {
        let host = g.host.clone().filter(|h| h != LOCAL);
        if let Some(h) = &host {
            let who = format!("client group {i}");
            validate_hosts(&hosts, [(h.as_str(), who.as_str())]).map_err(|e| {
                spec.error_at(&["client", "groups", &i.to_string(), "host"], e.to_string())
            })?;
        }
        client_groups.push(host);
    }
    let plan = HostPlan {
        hosts,
        client_groups,
    };
    check_supported(spec, &plan, targets)?;
    Ok(plan)
}

/// What a run on other hosts cannot do (yet), refused with the reason before anything starts.
fn check_supported(
    spec: &SpecFile,
    plan: &HostPlan,
    targets: &[TargetPlan],
) -> Result<(), SpecError> {
    let s = &spec.spec;
    let uses_hosts = !plan.client_groups.is_empty() || targets.iter().any(|t| t.host.is_some());
    if uses_hosts && s.profile.is_some() {
        return Err(spec.error_at(
            &["profile"],
            "profile passes run on this machine with one local client; they cannot be combined \
             with targets or client groups on other hosts yet",
        ));
    }
    if !plan.client_groups.is_empty() && s.client.command.is_some() {
        return Err(spec.error_at(
            &["client", "command"],
            "client groups run the built-in engine (stairbench load); an external client \
             command cannot be split into groups",
        ));
    }
    if plan.remote_clients() && s.client.requests.is_some() {
        return Err(spec.error_at(
            &["client", "requests"],
            "a request file is read on this machine; client groups on other hosts cannot use \
             it yet",
        ));
    }
    if plan.remote_clients() && s.client.cacert.is_some() {
        return Err(spec.error_at(
            &["client", "cacert"],
            "a CA certificate file is read on this machine; client groups on other hosts cannot \
             use it yet (insecure = true works there)",
        ));
    }
    for (i, t) in targets.iter().enumerate() {
        let at = |key: &str, why: String| spec.error_at(&["targets", &i.to_string(), key], why);
        let url = t.url.as_str();
        if url.starts_with("shm://") && (t.host.is_some() || plan.remote_clients()) {
            return Err(at(
                "host",
                "a shared-memory target (shm://) and its clients must be on one machine".into(),
            ));
        }
        if t.host.is_some() {
            if t.instances > 1 {
                return Err(at("instances", "split instances run on this machine only; give the remote target instances = 1".into()));
            }
            if s.targets[i].metrics.is_some() {
                return Err(at("metrics", "target-reported metrics are read on this machine only; a target on another host cannot give them yet".into()));
            }
            if t.port.is_none() && !t.port_from_log {
                return Err(at("port", "a target on another host needs port = N, or to be a built-in server that prints its port (a free port there cannot be chosen from here)".into()));
            }
        } else if plan.remote_clients() && names_loopback(url) {
            return Err(at(
                "url",
                format!("{url:?} is this machine's loopback, which client groups on other hosts cannot reach: give url with an address they reach (and have the server listen on it)"),
            ));
        }
    }
    Ok(())
}

fn names_loopback(url: &str) -> bool {
    ["127.0.0.1", "localhost", "[::1]", "{host}"]
        .iter()
        .any(|l| url.contains(l))
}

/// Relative identity and known_hosts files are read from the spec's directory; `~/` is the
/// user's home.
fn resolve_paths(entry: &HostEntry, spec_dir: &Path) -> HostEntry {
    let HostEntry::Table(t) = entry else {
        return entry.clone();
    };
    let fix = |p: &Option<PathBuf>| p.as_deref().map(|p| resolve(p, spec_dir));
    HostEntry::Table(HostTable {
        identity_file: fix(&t.identity_file),
        known_hosts_file: fix(&t.known_hosts_file),
        ..t.clone()
    })
}

fn resolve(path: &Path, spec_dir: &Path) -> PathBuf {
    if let (Ok(rest), Some(home)) = (path.strip_prefix("~"), std::env::var_os("HOME")) {
        return PathBuf::from(home).join(rest);
    }
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        spec_dir.join(path)
    }
}

/// `{host}` in a URL template: the target host's address (IPv6 in brackets), or this
/// machine's loopback for a local target.
pub fn fill_host(url: &str, host: Option<&HostSpec>) -> String {
    let address = match host {
        Some(h) if h.address.contains(':') => format!("[{}]", h.address),
        Some(h) => h.address.clone(),
        None => "127.0.0.1".into(),
    };
    url.replace("{host}", &address)
}
