//! The gRPC request message a spec gives with `body_file` (serialized protobuf) or with
//! `data` (JSON) and `proto` or `protoset` (on `[client]`, or on a target for that target
//! alone): read and encoded when the plan is made, files relative to the spec or under
//! `{spec_dir}`, so that a missing file, a method the `.proto` lacks or a field it does not
//! define is refused by `run --dry-run` at its line and key rather than by the first step.

use std::path::PathBuf;
use std::sync::Arc;

use super::spec_dir;
use crate::load::protocol::grpc::{GrpcMessage, GrpcStream};
use crate::load::protocol::grpc_message::{self, Method, Schema};
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
) -> Result<Option<GrpcMessage>, SpecError> {
    if let Some(message) = json_message(spec, i, url)? {
        return Ok(Some(message));
    }
    let stream = stream_messages(spec, i);
    let own = spec.spec.targets[i].body_file.as_deref();
    let keys: Vec<String> = match (own, &stream) {
        (Some(_), _) => vec!["targets".into(), i.to_string(), "body_file".into()],
        (None, _) if spec.spec.client.body_file.is_some() => {
            vec!["client".into(), "body_file".into()]
        }
        (None, Some((_, k))) => k.clone(),
        (None, None) => return Ok(None),
    };
    let key = keys.last().cloned().unwrap_or_default();
    if spec.spec.client.command.is_some() {
        return Err(error_at(
            spec,
            &keys,
            format!("{key} is an option of the built-in engine; give an external client command its own message and calls"),
        ));
    }
    let what = match key.as_str() {
        "body_file" => "body_file is a gRPC request message",
        _ => "stream_messages is for gRPC calls",
    };
    if grpc_message::url_path(url).is_none() {
        let name = &spec.spec.targets[i].name;
        return Err(error_at(spec, &keys, format!("{what}, but target {name:?} is loaded at {url:?}: give it to grpc:// and grpcs:// targets only (an HTTP body is `body`)")));
    }
    let stream = stream.map(|(n, _)| GrpcStream {
        messages_per_call: n,
        streamed_replies: true,
    });
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let bytes = match (own, stream) {
        (Some(written), _) => read(spec, &keys, written)?,
        // The client's message, sent as a stream.
        (None, Some(_)) => client_message(spec)?.unwrap_or_else(|| Arc::from(Vec::new())),
        (None, None) => return Ok(None),
    };
    Ok(Some(GrpcMessage { bytes, stream }))
}

/// Target `i`'s `stream_messages` (its own, else `[client]`'s) and its key.
fn stream_messages(spec: &SpecFile, i: usize) -> Option<(u32, Vec<String>)> {
    let own = spec.spec.targets[i].stream_messages;
    let keys = |level: &[&str]| -> Vec<String> {
        level
            .iter()
            .map(|k| k.to_string())
            .chain(["stream_messages".to_string()])
            .collect()
    };
    match (own, spec.spec.client.stream_messages) {
        (Some(n), _) => Some((n, keys(&["targets", &i.to_string()]))),
        (None, Some(n)) => Some((n, keys(&["client"]))),
        (None, None) => None,
    }
}

/// The call's shape of target `i` by its method and `stream_messages`; refused at that key
/// where the method takes one message.
fn method_stream(
    spec: &SpecFile,
    i: usize,
    method: &Method,
) -> Result<Option<GrpcStream>, SpecError> {
    let given = stream_messages(spec, i);
    method.stream(given.as_ref().map(|(n, _)| *n)).map_err(|e| {
        let keys = given.map(|(_, k)| k).unwrap_or_default();
        error_at(spec, &keys, e.to_string())
    })
}

/// The spec's message keys of one level (`[client]` or a target): where each is written.
struct Level<'a> {
    keys: Vec<String>,
    body_file: Option<&'a str>,
    data: Option<&'a toml::Value>,
    proto: Option<&'a str>,
    protoset: Option<&'a str>,
    import_paths: &'a [String],
}

impl Level<'_> {
    fn key(&self, name: &str) -> Vec<String> {
        let mut k = self.keys.clone();
        k.push(name.into());
        k
    }

    fn has_schema(&self) -> bool {
        self.proto.is_some() || self.protoset.is_some()
    }

    /// The schema these keys give (paths taken relative to the spec), and its key.
    fn schema(&self, spec: &SpecFile) -> Option<(Schema, Vec<String>)> {
        if let Some(file) = self.proto {
            let import_paths = self.import_paths.iter().map(|d| path(spec, d)).collect();
            let schema = Schema::Proto {
                file: path(spec, file),
                import_paths,
            };
            return Some((schema, self.key("proto")));
        }
        self.protoset
            .map(|file| (Schema::Protoset(path(spec, file)), self.key("protoset")))
    }
}

fn error_at(spec: &SpecFile, keys: &[String], message: impl Into<String>) -> SpecError {
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    spec.error_at(&keys, message.into())
}

/// Target `i`'s message from JSON (`data`, its own or `[client]`'s, with the nearest
/// `proto` or `protoset`), encoded by the input type of the url's method; none when neither
/// level gives `data` or a schema, or when the target's own `body_file` is its message.
fn json_message(spec: &SpecFile, i: usize, url: &str) -> Result<Option<GrpcMessage>, SpecError> {
    let t = &spec.spec.targets[i];
    let c = &spec.spec.client;
    let target = Level {
        keys: vec!["targets".into(), i.to_string()],
        body_file: t.body_file.as_deref(),
        data: t.data.as_ref(),
        proto: t.proto.as_deref(),
        protoset: t.protoset.as_deref(),
        import_paths: &t.import_paths,
    };
    let client = Level {
        keys: vec!["client".into()],
        body_file: c.body_file.as_deref(),
        data: c.data.as_ref(),
        proto: c.proto.as_deref(),
        protoset: c.protoset.as_deref(),
        import_paths: &c.import_paths,
    };
    for level in [&target, &client] {
        if let (Some(_), Some(_)) = (level.body_file, level.data) {
            return Err(error_at(
                spec,
                &level.key("data"),
                "give the message once: body_file (serialized protobuf) or data (JSON with proto)",
            ));
        }
        if level.proto.is_some() && level.protoset.is_some() {
            return Err(error_at(
                spec,
                &level.key("protoset"),
                "give the types once: proto (a .proto file) or protoset (a FileDescriptorSet)",
            ));
        }
    }
    // The target's own message beats the client's; a body_file is a whole message.
    let (data, data_keys) = match (target.data, target.body_file, client.data) {
        (Some(d), _, _) => (Some(d), target.key("data")),
        (None, Some(_), _) => return Ok(None),
        (None, None, Some(d)) => (Some(d), client.key("data")),
        (None, None, None) => (None, Vec::new()),
    };
    let schema_level = if target.has_schema() {
        &target
    } else {
        &client
    };
    let schema = schema_level.schema(spec);
    let Some(keys) = schema
        .as_ref()
        .map(|(_, k)| k.clone())
        .or_else(|| data.map(|_| data_keys.clone()))
    else {
        return Ok(None);
    };
    if data.is_none() && client.body_file.is_some() {
        // `[client] body_file` is the message; a schema alone adds nothing to it.
        return Ok(None);
    }
    if spec.spec.client.command.is_some() {
        return Err(error_at(spec, &keys, "data, proto and protoset are options of the built-in engine; give an external client command its own message"));
    }
    let Some(path) = grpc_message::url_path(url) else {
        let name = &t.name;
        return Err(error_at(spec, &keys, format!("data and proto make a gRPC request message, but target {name:?} is loaded at {url:?}: give them to grpc:// and grpcs:// targets only (an HTTP body is `body`)")));
    };
    let Some((schema, schema_keys)) = schema else {
        // `load --data` asks the server's reflection service; a plan is made before the
        // step's server is up, so a spec's types must come from a file.
        return Err(error_at(spec, &data_keys, "data is JSON encoded by the method's input type, which a spec takes from a file: the server is not up when the plan is made, so its reflection service cannot be asked (as `load --data` does); give the .proto with proto = \"FILE\" (or a FileDescriptorSet with protoset)"));
    };
    let method = grpc_message::method(&schema, path)
        .map_err(|e| error_at(spec, &schema_keys, e.to_string()))?;
    let stream = method_stream(spec, i, &method)?;
    let json = match data {
        Some(toml::Value::String(text)) => text.clone(),
        Some(other) => serde_json::to_string(other)
            .map_err(|e| error_at(spec, &data_keys, format!("not JSON: {e}")))?,
        None => "{}".into(),
    };
    let bytes = crate::load::template::grpc::fixed_message(&method, &json).map_err(|e| {
        let keys = if data.is_some() {
            &data_keys
        } else {
            &schema_keys
        };
        error_at(spec, keys, e.to_string())
    })?;
    Ok(Some(GrpcMessage {
        bytes: bytes.into(),
        stream,
    }))
}
