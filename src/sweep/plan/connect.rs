//! `[client] source_addrs` and `connect_rate` in a spec: how the built-in engine opens its
//! connections (as `load --source-addrs` and `--connect-rate`), for staircases of thousands
//! of connections.

use crate::load::sources::{parse_source_addrs, ConnectOptions};
use crate::sweep::spec::{SpecError, SpecFile};

/// The spec's connection options; refuses them with an external client command, with client
/// groups (addresses are one host's, and the rate would be each group's) and with split
/// instances (each instance would open its connections at the whole rate).
pub fn connect(spec: &SpecFile) -> Result<ConnectOptions, SpecError> {
    let c = &spec.spec.client;
    let mut out = ConnectOptions::default();
    for (key, given) in [
        ("source_addrs", c.source_addrs.is_some()),
        ("connect_rate", c.connect_rate.is_some()),
    ] {
        if !given {
            continue;
        }
        let at = |why: &str| spec.error_at(&["client", key], why);
        if c.command.is_some() {
            return Err(at("an option of the built-in engine; an external client command opens its connections itself"));
        }
        if !c.groups.is_empty() {
            return Err(at("not supported with client groups yet (the addresses are one host's, and the rate would be each group's); leave it out, or run one group"));
        }
        if let Some((i, _)) =
            (spec.spec.targets.iter().enumerate()).find(|(_, t)| t.instances.is_some_and(|n| n > 1))
        {
            let why = "not supported with split instances yet (each instance would open its connections at the whole rate)";
            return Err(spec.error_at(&["targets", &i.to_string(), "instances"], why));
        }
    }
    if let Some(text) = &c.source_addrs {
        out.source_addrs = parse_source_addrs(text)
            .map_err(|e| spec.error_at(&["client", "source_addrs"], e.to_string()))?;
    }
    if let Some(rate) = c.connect_rate {
        if !(rate.is_finite() && rate >= 1.0) {
            return Err(spec.error_at(
                &["client", "connect_rate"],
                "expected connections per second, at least 1 (e.g. 2000)",
            ));
        }
        out.connect_rate = Some(rate);
    }
    Ok(out)
}
