//! The gRPC request message a spec gives with `body_file` (on `[client]`, or on a target for
//! that target alone): read when the plan is made, relative to the spec or under
//! `{spec_dir}`, so that a missing file is refused by `run --dry-run` at its line and key
//! rather than by the first step.

use std::path::PathBuf;
use std::sync::Arc;

use super::spec_dir;
use crate::sweep::spec::{SpecError, SpecFile};

/// A message file's path: `{spec_dir}` filled, then taken relative to the spec's directory
/// (an absolute path stays as it is).
fn path(spec: &SpecFile, written: &str) -> PathBuf {
    let dir = spec_dir(spec);
    dir.join(written.replace("{spec_dir}", &dir.display().to_string()))
}

/// Reads the file `written` under `keys`; an unreadable one is an error at that key.
fn read(spec: &SpecFile, keys: &[&str], written: &str) -> Result<Arc<[u8]>, SpecError> {
    let path = path(spec, written);
    std::fs::read(&path)
        .map(Arc::from)
        .map_err(|e| spec.error_at(keys, format!("reading {}: {e}", path.display())))
}

/// `[client] body_file`'s bytes, if it is given (every gRPC target's message unless the
/// target has its own).
pub(super) fn client_message(spec: &SpecFile) -> Result<Option<Arc<[u8]>>, SpecError> {
    let c = &spec.spec.client;
    let Some(written) = &c.body_file else {
        return Ok(None);
    };
    if c.command.is_some() {
        return Err(spec.error_at(
            &["client", "body_file"],
            "body_file is an option of the built-in engine; give an external client command \
             its own message file",
        ));
    }
    read(spec, &["client", "body_file"], written).map(Some)
}

/// Target `i`'s own message (`body_file` on the target), checked against what loads it: the
/// built-in engine at a `grpc://` or `grpcs://` url. A `[client] body_file` is checked here
/// too, against each target's url, at the client's key.
pub(super) fn target_message(
    spec: &SpecFile,
    i: usize,
    url: &str,
) -> Result<Option<Arc<[u8]>>, SpecError> {
    let own = spec.spec.targets[i].body_file.as_deref();
    let index = i.to_string();
    let keys: &[&str] = match own {
        Some(_) => &["targets", &index, "body_file"],
        None if spec.spec.client.body_file.is_some() => &["client", "body_file"],
        None => return Ok(None),
    };
    if spec.spec.client.command.is_some() {
        return Err(spec.error_at(
            keys,
            "body_file is an option of the built-in engine; give an external client command \
             its own message file",
        ));
    }
    if !(url.starts_with("grpc://") || url.starts_with("grpcs://")) {
        let name = &spec.spec.targets[i].name;
        return Err(spec.error_at(
            keys,
            format!(
                "body_file is a gRPC request message, but target {name:?} is loaded at {url:?}: \
                 give it to grpc:// and grpcs:// targets only (an HTTP body is `body`)"
            ),
        ));
    }
    own.map(|written| read(spec, keys, written)).transpose()
}
