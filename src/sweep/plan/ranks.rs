//! A built-in kvd target whose ranks run on several hosts (`rank_hosts`): rank j is started
//! on `rank_hosts[j]` with `--rank j` and its own region (`NAME-rj`, as `--spawn-peers` names
//! them: hosts that share /dev/shm, such as network namespaces, keep them apart), and each
//! client group loads the rank on its own host (a shared-memory client must be on its
//! daemon's machine).

pub use crate::fleet::ranks::{rank_args, rank_url, region, RANK_READY};

use super::TargetKind;
use crate::fleet::ranks::option;
use crate::sweep::spec::{SpecError, SpecFile, TargetSpec};

/// The hosts of target `i`'s ranks, checked against its builtin (empty without `rank_hosts`).
pub fn plan_rank_hosts(
    spec: &SpecFile,
    i: usize,
    t: &TargetSpec,
    kind: &TargetKind,
) -> Result<Vec<String>, SpecError> {
    let at = |key: &str, why: String| spec.error_at(&["targets", &i.to_string(), key], why);
    let Some(hosts) = &t.rank_hosts else {
        if let TargetKind::Builtin(a) = kind {
            if option(a, "--ranks").is_some_and(|l| l.contains("{host}")) {
                return Err(at("builtin", "{host} in --ranks is rank j's host's address: give the ranks' hosts with rank_hosts = [...]".into()));
            }
        }
        return Ok(Vec::new());
    };
    let args = match kind {
        TargetKind::Builtin(a) if a[0] == "kvd" => a,
        _ => return Err(at("rank_hosts", "only a built-in kvd target (builtin = \"kvd --ranks A:P,B:P --name NAME\") runs its ranks on several hosts".into())),
    };
    if t.host.is_some() {
        return Err(at(
            "host",
            "give rank_hosts or host, not both: rank 0 runs on rank_hosts[0]".into(),
        ));
    }
    if t.url.is_some() {
        return Err(at("url", "a kvd target over several hosts has no one url: each client group loads the rank on its own host (kvd://NAME-rJ); leave url out".into()));
    }
    for word in ["--spawn-peers", "--rank", "--metrics"] {
        if args.iter().any(|a| a == word) {
            return Err(at("builtin", format!("leave {word} out: with rank_hosts the runner starts every rank on its host with its own --rank, region and metrics file")));
        }
    }
    if option(args, "--name").is_none() {
        return Err(at(
            "builtin",
            "kvd needs --name NAME (rank j's region is NAME-rj)".into(),
        ));
    }
    let ranks = option(args, "--ranks").map_or(0, |l| l.split(',').count());
    if ranks != hosts.len() {
        return Err(at(
            "rank_hosts",
            format!(
                "{} host(s) for the {ranks} rank(s) of --ranks: name one host per rank, in --ranks' order",
                hosts.len()
            ),
        ));
    }
    Ok(hosts.clone())
}
