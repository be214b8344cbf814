//! The spec's hosts checked before anything starts: the `[hosts]` table, the `host` of each
//! target and client group, and what a host does not support yet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::TargetPlan;
use crate::remote::host::{validate_hosts, HostEntry, HostSpec, HostTable};
use crate::sweep::spec::{SpecError, SpecFile};

pub use crate::fleet::hosts::groups::LOCAL;

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
        for (j, h) in t.rank_hosts.iter().flatten().enumerate() {
            let key = ["targets", &i.to_string(), "rank_hosts", &j.to_string()];
            if h == LOCAL {
                return Err(spec.error_at(&key, format!("rank {j} of target {:?}: a rank on this machine is not supported with rank_hosts; name a [hosts] entry (or run every rank here with host left out and --spawn-peers)", t.name)));
            }
            let who = format!("rank {j} of target {:?}", t.name);
            validate_hosts(&hosts, [(h.as_str(), who.as_str())])
                .map_err(|e| spec.error_at(&key, e.to_string()))?;
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
    if plan.remote_clients() {
        refuse_message_file(spec)?;
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
        check_shared_memory(spec, plan, t, i)?;
        if t.host.is_some() {
            if t.instances > 1 {
                return Err(at("instances", "split instances run on this machine only; give the remote target instances = 1".into()));
            }
            if s.targets[i].metrics.is_some() {
                return Err(at("metrics", "target-reported metrics are read on this machine only; a target on another host cannot give them yet".into()));
            }
            // A kvd daemon's ranks listen on their --ranks addresses: it has no port to find.
            let kvd = url.starts_with("kvd://");
            if t.port.is_none() && !t.port_from_log && !kvd {
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

/// A shared-memory target (shm://, kvd://) and its clients must be on one machine: every
/// client group (this machine's, without groups) on the target's host, or, for a kvd target
/// over several hosts, on one of its ranks' hosts.
fn check_shared_memory(
    spec: &SpecFile,
    plan: &HostPlan,
    t: &TargetPlan,
    i: usize,
) -> Result<(), SpecError> {
    let scheme = t.url.split("://").next().unwrap_or("");
    if !t.url.contains("://") || !matches!(scheme, "shm" | "kvd") {
        return Ok(());
    }
    let daemons: Vec<Option<&str>> = match t.rank_hosts.is_empty() {
        true => vec![t.host.as_deref()],
        false => t.rank_hosts.iter().map(|h| Some(h.as_str())).collect(),
    };
    let groups: Vec<Option<&str>> = match plan.client_groups.is_empty() {
        true => vec![None],
        false => plan.client_groups.iter().map(Option::as_deref).collect(),
    };
    let place = |h: Option<&str>| h.unwrap_or(LOCAL).to_string();
    let Some((k, h)) = groups
        .iter()
        .enumerate()
        .find(|(_, h)| !daemons.contains(h))
    else {
        return Ok(());
    };
    let daemon_hosts: Vec<String> = daemons.iter().map(|&h| place(h)).collect();
    let clients = match plan.client_groups.is_empty() {
        true => "its clients run on this machine (no [[client.groups]])".to_string(),
        false => format!("client group {k} runs on {}", place(*h)),
    };
    let key = match t.rank_hosts.is_empty() {
        true => ["targets", &i.to_string(), "host"],
        false => ["targets", &i.to_string(), "rank_hosts"],
    };
    Err(spec.error_at(
        &key,
        format!(
            "a shared-memory target ({scheme}://) and its clients must be on one machine: target {:?} runs on {}, but {clients}; put every client group on {}",
            t.name,
            daemon_hosts.join(", "),
            match daemon_hosts.len() {
                1 => "that host".to_string(),
                _ => "one of those hosts".to_string(),
            }
        ),
    ))
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

/// A gRPC message (`body_file`, or `data` encoded by `proto` or `protoset`) is made on this
/// machine: client groups on other hosts would load without it.
fn refuse_message_file(spec: &SpecFile) -> Result<(), SpecError> {
    let s = &spec.spec;
    // The message's keys in the order they are looked for; the first written is named.
    let key = |body_file: bool, data: bool, proto: bool, protoset: bool, stream: bool| {
        [
            (body_file, "body_file"),
            (data, "data"),
            (proto, "proto"),
            (protoset, "protoset"),
            (stream, "stream_messages"),
        ]
        .into_iter()
        .find_map(|(given, name)| given.then_some(name))
    };
    let c = &s.client;
    let client = key(
        c.body_file.is_some(),
        c.data.is_some(),
        c.proto.is_some(),
        c.protoset.is_some(),
        c.stream_messages.is_some(),
    );
    let target = s.targets.iter().enumerate().find_map(|(i, t)| {
        key(
            t.body_file.is_some(),
            t.data.is_some(),
            t.proto.is_some(),
            t.protoset.is_some(),
            t.stream_messages.is_some(),
        )
        .map(|k| (i, k))
    });
    let keys: Vec<String> = match (target, client) {
        (_, Some(k)) => vec!["client".into(), k.into()],
        (Some((i, k)), None) => vec!["targets".into(), i.to_string(), k.into()],
        (None, None) => return Ok(()),
    };
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    Err(spec.error_at(
        &keys,
        "a gRPC message (body_file, or data with its proto) is made on this machine; client \
         groups on other hosts cannot use it yet",
    ))
}
