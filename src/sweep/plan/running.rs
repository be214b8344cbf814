//! Servers already running: a target with `url` and neither `builtin` nor `command`.
//! stairbench starts nothing; placements apply to the client only. Before the first step the
//! server must answer at its address; it is observed when the spec says how (`pid`,
//! `pidfile` or `process`, resolved again at each step), and otherwise its server-side
//! figures are recorded as not observed (null, with the reason in `server_not_observed`).

pub use crate::fleet::target::{alive, answers, Running, Watch, NOT_OBSERVED};

use super::{Plan, TargetKind};
use crate::sweep::spec::{SpecError, SpecFile, TargetSpec};

/// Plans target `i` of the spec as a server already running (its url and no command).
pub fn plan_running(spec: &SpecFile, i: usize, t: &TargetSpec) -> Result<Running, SpecError> {
    let at = |key: &str, msg: String| spec.error_at(&["targets", &i.to_string(), key], msg);
    let Some(url) = &t.url else {
        return Err(at(
            "name",
            format!(
                "target {:?} has neither builtin = \"...\", command = \"...\" nor url = \"...\" (a server already running)",
                t.name
            ),
        ));
    };
    let refused = [
        ("port", t.port.is_some(), "the url names the port"),
        ("ready", t.ready.is_some(), "it is checked to answer at its url before the first step"),
        ("instances", t.instances.is_some_and(|n| n != 1), "it cannot be split into instances"),
        ("host", t.host.is_some(), "observing a server already running on another host is not supported yet: leave host out, the url names its address (its server-side figures are then not observed)"),
    ];
    if let Some((key, _, why)) = refused.iter().find(|(_, given, _)| *given) {
        return Err(at(
            key,
            format!(
                "a server already running (url with no builtin or command) takes no {key}: {why}"
            ),
        ));
    }
    if t.metrics.as_ref().is_some_and(|m| m.file.is_some()) {
        return Err(at("metrics", "a server already running cannot be given a {metrics} file: use metrics = { url = \"...\" }".into()));
    }
    if url.contains('{') {
        return Err(at("url", format!("{url:?}: a server already running has a fixed address, the url takes no placeholders ({{port}}, {{host}})")));
    }
    let target = crate::load::target::Target::parse(url, &crate::load::ProtoOptions::default())
        .map_err(|e| at("url", format!("{e} (a server already running is reached over TCP: http, https, h2c, redis or msgr)")))?;
    let watch = watch(spec, i, t)?;
    if watch.is_none() && spec.spec.profile.is_some() {
        return Err(spec.error_at(&["profile"], format!("profile passes record the server's process: target {:?} (a server already running) needs pid, pidfile or process to say which", t.name)));
    }
    Ok(Running {
        address: target.addr,
        watch,
    })
}

/// The observation key of target `i`: at most one of `pid`, `pidfile`, `process`.
fn watch(spec: &SpecFile, i: usize, t: &TargetSpec) -> Result<Option<Watch>, SpecError> {
    let dir = super::spec_dir(spec);
    let mut given = Vec::new();
    if let Some(pid) = t.pid {
        given.push(Watch::Pid(pid));
    }
    if let Some(p) = &t.pidfile {
        given.push(Watch::PidFile(dir.join(p)));
    }
    if let Some(name) = &t.process {
        given.push(Watch::Process(name.clone()));
    }
    match given.len() {
        0 | 1 => Ok(given.pop()),
        _ => Err(spec.error_at(
            &["targets", &i.to_string(), given[1].key()],
            "give one of pid, pidfile or process, not several",
        )),
    }
}

/// Refuses `pid`, `pidfile` and `process` on a target that stairbench starts itself (it
/// observes the process it started).
pub fn refuse_watch(spec: &SpecFile, i: usize, t: &TargetSpec) -> Result<(), SpecError> {
    let keys = [
        ("pid", t.pid.is_some()),
        ("pidfile", t.pidfile.is_some()),
        ("process", t.process.is_some()),
    ];
    match keys.iter().find(|(_, given)| *given) {
        Some((key, _)) => Err(spec.error_at(
            &["targets", &i.to_string(), key],
            format!("{key} observes a server already running (url with no builtin or command); a target stairbench starts is observed as started"),
        )),
        None => Ok(()),
    }
}

/// Before any load: every server already running answers at its address and the process
/// that observes it exists; each error names the target, the address or key, and its place
/// in the spec.
pub fn preflight(plan: &Plan) -> Result<(), SpecError> {
    for (i, t) in plan.targets.iter().enumerate() {
        let TargetKind::Running(r) = &t.kind else {
            continue;
        };
        let at =
            |key: &str, msg: String| plan.spec.error_at(&["targets", &i.to_string(), key], msg);
        if !answers(&r.address) {
            return Err(at("url", format!("nothing answers at {} (target {:?}, a server already running): start it, or correct the url", r.address, t.name)));
        }
        if let Some(w) = &r.watch {
            w.resolve()
                .map_err(|why| at(w.key(), format!("target {:?}: {why}", t.name)))?;
        }
    }
    Ok(())
}
