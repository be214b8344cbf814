//! A gRPC call's request message from JSON: the method named by the call's path is looked up
//! in a `.proto` (compiled in-process by protox: no `protoc`), a FileDescriptorSet or the
//! types the server's reflection service gave ([`super::grpc_reflection`]), and the
//! JSON is encoded with its input type by protobuf's JSON mapping (prost-reflect). A wrong
//! field name, type or enum value is refused before any load, with its path in the JSON and
//! the type the `.proto` expects. A message with placeholders, made per call, is
//! [`crate::load::template::grpc`]'s.

use super::grpc::GrpcStream;
use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, MethodDescriptor,
};
use serde::de::DeserializeSeed;
use serde_json::Value;
use serde_path_to_error::Segment;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where the method's types come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    /// A `.proto` file, compiled with these import directories (then the file's own).
    Proto {
        /// The `.proto` file.
        file: PathBuf,
        /// `--import-path` directories, searched in order for its imports.
        import_paths: Vec<PathBuf>,
    },
    /// A FileDescriptorSet (`protoc --descriptor_set_out --include_imports`, `buf build -o`).
    Protoset(PathBuf),
    /// No file: the types the server's reflection service gave, asked before the load by
    /// [`super::grpc_reflection::pool`].
    Reflection(DescriptorPool),
}

impl Schema {
    /// Where the types come from, for the errors: the file as the user wrote it, or the
    /// server's reflection.
    pub fn source(&self) -> String {
        match self {
            Schema::Proto { file, .. } | Schema::Protoset(file) => file.display().to_string(),
            Schema::Reflection(_) => "the server's reflection service".into(),
        }
    }
}

/// Why a request message could not be made, or a reply read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// The schema file could not be read or compiled, or it lacks the url's unary method:
    /// what it offers instead.
    #[error("{0}")]
    Schema(String),
    /// The JSON is not a message of the method's input type: its path and what was expected.
    #[error("{0}")]
    Json(String),
    /// A reply's bytes are not a message of the method's output type.
    #[error("{0}")]
    Reply(String),
}

/// A method's input and output types, and whether each side streams.
#[derive(Debug, Clone)]
pub struct Method {
    method: MethodDescriptor,
}

/// Reads `schema` and finds the method of `path` (`/PACKAGE.SERVICE/METHOD`); an error names
/// what the schema offers instead.
pub fn method(schema: &Schema, path: &str) -> Result<Method, MessageError> {
    let pool = pool(schema)?;
    let file = schema.source();
    let (service, name) = path
        .trim_start_matches('/')
        .split_once('/')
        .ok_or_else(|| {
            MessageError::Schema(format!(
                "{path:?} is not a gRPC method: expected /PACKAGE.SERVICE/METHOD"
            ))
        })?;
    let Some(svc) = pool.get_service_by_name(service) else {
        let offered: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        return Err(MessageError::Schema(format!(
            "{file} has no service {service}{}: it defines {}",
            suggestion(service, offered.iter().map(String::as_str)),
            list_or_none(&offered)
        )));
    };
    let Some(method) = svc.methods().find(|m| m.name() == name) else {
        let offered: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
        return Err(MessageError::Schema(format!(
            "service {service} in {file} has no method {name}{}: its methods are {}",
            suggestion(name, offered.iter().map(String::as_str)),
            list_or_none(&offered)
        )));
    };
    Ok(Method { method })
}

/// The call's path (`/PACKAGE.SERVICE/METHOD`) of a grpc:// or grpcs:// url; none for
/// another scheme.
pub fn url_path(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("grpc://")
        .or_else(|| url.strip_prefix("grpcs://"))?;
    rest.find('/').map(|i| &rest[i..])
}

impl Method {
    /// The method's input type's full name.
    pub fn input_name(&self) -> String {
        self.method.input().full_name().to_string()
    }

    /// The method's output type's full name.
    pub fn output_name(&self) -> String {
        self.method.output().full_name().to_string()
    }

    /// How a call of the method is made: `messages` (`--stream-messages`) per call on a
    /// client stream (1 when not given), its reply read as a stream when the server streams;
    /// none for a unary method. `messages` for a method that takes one message is refused.
    pub fn stream(&self, messages: Option<u32>) -> Result<Option<GrpcStream>, MessageError> {
        let m = &self.method;
        if let (Some(n), false) = (messages, m.is_client_streaming()) {
            return Err(MessageError::Schema(format!(
                "{} takes one request message per call: --stream-messages {n} is for \
                 client-streaming and bidirectional methods",
                m.full_name()
            )));
        }
        Ok(
            (m.is_client_streaming() || m.is_server_streaming()).then(|| GrpcStream {
                messages_per_call: messages.unwrap_or(1),
                streamed_replies: m.is_server_streaming(),
            }),
        )
    }

    /// The method's input type.
    pub(crate) fn input(&self) -> MessageDescriptor {
        self.method.input()
    }

    /// `json` as the method's input message, encoded as it is (placeholders are
    /// [`crate::load::template::grpc`]'s); an error names the JSON path and the type the
    /// schema expects there.
    pub fn encode(&self, json: &str) -> Result<Vec<u8>, MessageError> {
        let value: Value = serde_json::from_str(json)
            .map_err(|e| MessageError::Json(format!("the message is not JSON: {e}")))?;
        self.encode_value(&value)
    }

    /// `value` as the method's input message, encoded; an error names the JSON path and the
    /// type the schema expects there.
    pub(crate) fn encode_value(&self, value: &Value) -> Result<Vec<u8>, MessageError> {
        let input = self.method.input();
        let mut track = serde_path_to_error::Track::new();
        let de = serde_path_to_error::Deserializer::new(value, &mut track);
        match input.clone().deserialize(de) {
            Ok(message) => Ok(message.encode_to_vec()),
            Err(e) => Err(MessageError::Json(explain(
                &input,
                &track.path(),
                &e.to_string(),
            ))),
        }
    }

    /// A reply message decoded as JSON (protobuf's JSON mapping), for the user to see the
    /// server understood.
    pub fn reply_json(&self, bytes: &[u8]) -> Result<String, MessageError> {
        let output = self.method.output();
        let message = DynamicMessage::decode(output.clone(), bytes).map_err(|e| {
            MessageError::Reply(format!("the reply is not a {}: {e}", output.full_name()))
        })?;
        serde_json::to_string(&message).map_err(|e| MessageError::Reply(e.to_string()))
    }
}

/// The descriptors of `schema`'s file and its imports.
fn pool(schema: &Schema) -> Result<DescriptorPool, MessageError> {
    let failed = |text: String| MessageError::Schema(text);
    match schema {
        Schema::Reflection(pool) => Ok(pool.clone()),
        Schema::Protoset(file) => {
            let bytes = std::fs::read(file)
                .map_err(|e| failed(format!("reading --protoset {}: {e}", file.display())))?;
            DescriptorPool::decode(bytes.as_slice()).map_err(|e| {
                failed(format!(
                    "{} is not a FileDescriptorSet (protoc --descriptor_set_out \
                     --include_imports): {e}",
                    file.display()
                ))
            })
        }
        Schema::Proto { file, import_paths } => {
            if let Err(e) = std::fs::metadata(file) {
                return Err(failed(format!("reading --proto {}: {e}", file.display())));
            }
            // protox resolves the file under an import directory: the user's first, then
            // the file's own (as ghz and protoc with `-I.` do).
            let own = file.parent().filter(|p| !p.as_os_str().is_empty());
            let mut dirs = import_paths.clone();
            dirs.push(own.map_or_else(|| PathBuf::from("."), Path::to_path_buf));
            let mut compiler = protox::Compiler::new(&dirs).map_err(|e| failed(e.to_string()))?;
            compiler.include_imports(true);
            compiler
                .open_file(file)
                .map_err(|e| failed(format!("compiling {}: {e}", file.display())))?;
            Ok(compiler.descriptor_pool())
        }
    }
}

/// Says what went wrong at `path` of the JSON (`serde`'s `error` there), with the type the
/// schema expects at that path.
fn explain(input: &MessageDescriptor, path: &serde_path_to_error::Path, error: &str) -> String {
    let (at, expected) = walk(input, path);
    let at_text = match at.is_empty() {
        true => ".".to_string(),
        false => at.clone(),
    };
    if let Some(name) = quoted(error, "unrecognized field name '") {
        let Expected::Message(m) = expected else {
            return format!("{at_text}: {error}");
        };
        let fields: Vec<String> = m.fields().map(|f| f.json_name().to_string()).collect();
        return format!(
            "{at}.{name}: {} has no field {name:?}{}; its fields are {}",
            m.full_name(),
            suggestion(name, fields.iter().map(String::as_str)),
            list_or_none(&fields)
        );
    }
    if let Some(value) = quoted(error, "unrecognized enum value '") {
        if let Expected::Field(f) = &expected {
            if let Kind::Enum(e) = f.kind() {
                let names: Vec<String> = e.values().map(|v| v.name().to_string()).collect();
                return format!(
                    "{at_text}: {value:?} is not a value of enum {}{}; its values are {}",
                    e.full_name(),
                    suggestion(value, names.iter().map(String::as_str)),
                    names.join(", ")
                );
            }
        }
    }
    format!(
        "{at_text}: {error}; the .proto expects {}",
        expected.describe()
    )
}

/// The text between `prefix` and the next `'` in `error`.
fn quoted<'a>(error: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = &error[error.find(prefix)? + prefix.len()..];
    rest.split_once('\'').map(|(name, _)| name)
}

/// What the schema expects at a point of the JSON.
enum Expected {
    /// A whole message (the top, or a field of message type once inside it).
    Message(MessageDescriptor),
    /// One field's value (or, for a repeated field, the whole list).
    Field(FieldDescriptor),
    /// One element of a repeated field or one value of a map field.
    Element(FieldDescriptor),
    /// A point the walk could not follow (a map key, a well-known type's inside).
    Unknown,
}

impl Expected {
    fn describe(&self) -> String {
        match self {
            Expected::Message(m) => format!("a message {} (a JSON object)", m.full_name()),
            Expected::Field(f) if f.is_map() => {
                let Kind::Message(entry) = f.kind() else {
                    return kind_name(&f.kind());
                };
                format!(
                    "map<{}, {}> (a JSON object)",
                    kind_name(&entry.map_entry_key_field().kind()),
                    kind_name(&entry.map_entry_value_field().kind())
                )
            }
            Expected::Field(f) if f.is_list() => {
                format!("repeated {} (a JSON array)", kind_name(&f.kind()))
            }
            Expected::Field(f) | Expected::Element(f) => kind_name(&f.kind()),
            Expected::Unknown => "a value of another type".into(),
        }
    }
}

/// A field type as the `.proto` writes it, with how JSON gives it where that is not plain.
pub(crate) fn kind_name(kind: &Kind) -> String {
    match kind {
        Kind::Message(m) => format!("message {}", m.full_name()),
        Kind::Enum(e) => {
            let names: Vec<String> = e.values().map(|v| v.name().to_string()).take(8).collect();
            format!(
                "enum {} ({}{})",
                e.full_name(),
                names.join(", "),
                if e.values().len() > 8 { ", …" } else { "" }
            )
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            "int64 (a number or a decimal string)".into()
        }
        Kind::Uint64 | Kind::Fixed64 => "uint64 (a number or a decimal string)".into(),
        Kind::Bytes => "bytes (a base64 string)".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// Follows `path` from the input message: the path as `.a.b[2]` (fields by the name the JSON
/// used) and what the schema expects there.
fn walk(input: &MessageDescriptor, path: &serde_path_to_error::Path) -> (String, Expected) {
    let mut at = String::new();
    let mut expected = Expected::Message(input.clone());
    for segment in path.iter() {
        expected = match (segment, expected) {
            (Segment::Map { key }, Expected::Message(m)) => {
                let _ = write!(at, ".{key}");
                m.get_field_by_json_name(key)
                    .or_else(|| m.get_field_by_name(key))
                    .map_or(Expected::Unknown, Expected::Field)
            }
            (Segment::Seq { index }, Expected::Field(f)) if f.is_list() => {
                let _ = write!(at, "[{index}]");
                Expected::Element(f)
            }
            (Segment::Map { key }, Expected::Field(f)) if f.is_map() => {
                let _ = write!(at, "[{key:?}]");
                match f.kind() {
                    Kind::Message(entry) => Expected::Element(entry.map_entry_value_field()),
                    _ => Expected::Unknown,
                }
            }
            (Segment::Map { key }, Expected::Field(f) | Expected::Element(f)) => {
                let _ = write!(at, ".{key}");
                match f.kind() {
                    Kind::Message(m) => m
                        .get_field_by_json_name(key)
                        .or_else(|| m.get_field_by_name(key))
                        .map_or(Expected::Unknown, Expected::Field),
                    _ => Expected::Unknown,
                }
            }
            (Segment::Seq { index }, _) => {
                let _ = write!(at, "[{index}]");
                Expected::Unknown
            }
            (Segment::Map { key }, _) | (Segment::Enum { variant: key }, _) => {
                let _ = write!(at, ".{key}");
                Expected::Unknown
            }
            (Segment::Unknown, e) => e,
        };
    }
    // A field of message type whose own content failed: the message is what was expected.
    let single = match &expected {
        Expected::Field(f) if !f.is_list() && !f.is_map() => Some(f.kind()),
        Expected::Element(f) => Some(f.kind()),
        _ => None,
    };
    if let Some(Kind::Message(m)) = single {
        if !m.full_name().starts_with("google.protobuf.") {
            return (at, Expected::Message(m));
        }
    }
    (at, expected)
}

/// ` (did you mean "X"?)` for the closest of `names` to `wrong`, when one is close.
pub(super) fn suggestion<'a>(wrong: &str, names: impl Iterator<Item = &'a str>) -> String {
    names
        .map(|n| (strsim::jaro_winkler(wrong, n), n))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(String::new(), |(_, n)| format!(" (did you mean {n:?}?)"))
}

/// `names` comma-separated, or "none".
pub(super) fn list_or_none<S: AsRef<str>>(names: &[S]) -> String {
    match names.is_empty() {
        true => "none".into(),
        false => names
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(", "),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const PROTO: &str = r#"
syntax = "proto3";
package demo;
import "google/protobuf/timestamp.proto";
enum Kind { KIND_UNSPECIFIED = 0; FAST = 1; SLOW = 2; }
message User { string name = 1; int32 age = 2; int64 id = 3; }
message Req {
  User user = 1;
  Kind kind = 2;
  repeated string tags = 3;
  repeated User friends = 4;
  map<string, int32> scores = 5;
  bytes blob = 6;
  google.protobuf.Timestamp at = 7;
  int32 user_count = 8;
  bool on = 9;
  sint32 delta = 10;
  fixed64 big = 11;
  double ratio = 12;
  map<string, User> people = 13;
}
message Rep { string msg = 1; }
service Svc {
  rpc Call(Req) returns (Rep);
  rpc Watch(Req) returns (stream Rep);
}
"#;

    /// A temporary directory holding the test `.proto`, and its schema.
    pub(crate) fn schema() -> (tempfile::TempDir, Schema) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("demo.proto");
        std::fs::write(&file, PROTO).unwrap();
        (
            dir,
            Schema::Proto {
                file,
                import_paths: Vec::new(),
            },
        )
    }

    fn call(json: &str) -> Result<Vec<u8>, MessageError> {
        let (_dir, s) = schema();
        method(&s, "/demo.Svc/Call")?.encode(json)
    }

    #[test]
    fn json_is_encoded_by_protobufs_mapping() {
        // user {name "Jo" age 7}: field 1, length 6: (1: "Jo") (2: 7).
        let bytes = call(r#"{"user": {"name": "Jo", "age": 7}, "kind": "FAST"}"#).unwrap();
        assert_eq!(bytes, b"\x0a\x06\x0a\x02Jo\x10\x07\x10\x01");
        // The field's JSON name and its .proto name both work; int64 from a string.
        let a = call(r#"{"userCount": 3, "user": {"id": "5"}}"#).unwrap();
        let b = call(r#"{"user_count": 3, "user": {"id": 5}}"#).unwrap();
        assert_eq!(a, b);
        assert_eq!(call("{}").unwrap(), b"");
        let (_dir, s) = schema();
        let m = method(&s, "/demo.Svc/Call").unwrap();
        assert_eq!(m.input_name(), "demo.Req");
        assert_eq!(m.reply_json(b"\x0a\x02hi").unwrap(), r#"{"msg":"hi"}"#);
    }

    #[test]
    fn a_misspelt_field_names_its_path_the_message_and_the_closest_field() {
        let e = call(r#"{"user": {"nmae": "Jo"}}"#).unwrap_err().to_string();
        assert!(
            e.starts_with(".user.nmae: demo.User has no field \"nmae\" (did you mean \"name\"?); its fields are name, age, id"),
            "{e}"
        );
        let e = call(r#"{"tagz": []}"#).unwrap_err().to_string();
        assert!(e.starts_with(".tagz: demo.Req has no field"), "{e}");
        let e = call(r#"{"friends": [{}, {"agee": 1}]}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(".friends[1].agee: demo.User has no field"),
            "{e}"
        );
    }

    #[test]
    fn a_wrong_type_names_its_path_and_the_type_expected() {
        let e = call(r#"{"user": {"age": "old"}}"#).unwrap_err().to_string();
        assert!(e.starts_with(".user.age: "), "{e}");
        assert!(e.ends_with("the .proto expects int32"), "{e}");
        let e = call(r#"{"user": 3}"#).unwrap_err().to_string();
        assert!(e.starts_with(".user: "), "{e}");
        assert!(
            e.ends_with("expects a message demo.User (a JSON object)"),
            "{e}"
        );
        let e = call(r#"{"tags": "a"}"#).unwrap_err().to_string();
        assert!(e.ends_with("expects repeated string (a JSON array)"), "{e}");
        let e = call(r#"{"tags": ["a", 2]}"#).unwrap_err().to_string();
        assert!(e.starts_with(".tags[1]: "), "{e}");
        assert!(e.ends_with("expects string"), "{e}");
        let e = call(r#"{"scores": {"a": "x"}}"#).unwrap_err().to_string();
        assert!(e.starts_with(".scores[\"a\"]: "), "{e}");
        assert!(e.ends_with("expects int32"), "{e}");
        let e = call(r#"{"blob": "%%"}"#).unwrap_err().to_string();
        assert!(e.ends_with("expects bytes (a base64 string)"), "{e}");
        let e = call(r#"[1]"#).unwrap_err().to_string();
        assert!(e.starts_with(".: "), "{e}");
        assert!(call("{")
            .unwrap_err()
            .to_string()
            .starts_with("the message is not JSON"));
    }

    #[test]
    fn a_bad_enum_value_names_the_enums_values() {
        let e = call(r#"{"kind": "FASTT"}"#).unwrap_err().to_string();
        assert_eq!(
            e,
            ".kind: \"FASTT\" is not a value of enum demo.Kind (did you mean \"FAST\"?); its values are KIND_UNSPECIFIED, FAST, SLOW"
        );
        let e = call(r#"{"kind": true}"#).unwrap_err().to_string();
        assert!(
            e.ends_with("expects enum demo.Kind (KIND_UNSPECIFIED, FAST, SLOW)"),
            "{e}"
        );
    }

    /// An import is found under `--import-path`, then the error points into the imported
    /// type; without the directory, the compile error names the import.
    #[test]
    fn imports_are_found_under_the_import_paths() {
        let dir = tempfile::tempdir().unwrap();
        let (inc, main) = (dir.path().join("inc"), dir.path().join("main"));
        std::fs::create_dir_all(&inc).unwrap();
        std::fs::create_dir_all(&main).unwrap();
        std::fs::write(
            inc.join("common.proto"),
            "syntax = \"proto3\";\npackage common;\nmessage Name { string first = 1; }\n",
        )
        .unwrap();
        let file = main.join("svc.proto");
        std::fs::write(
            &file,
            "syntax = \"proto3\";\npackage svc;\nimport \"common.proto\";\n\
             message Req { common.Name name = 1; }\nservice S { rpc M(Req) returns (Req); }\n",
        )
        .unwrap();
        let schema = |import_paths| Schema::Proto {
            file: file.clone(),
            import_paths,
        };
        let e = method(&schema(vec![]), "/svc.S/M").unwrap_err().to_string();
        assert!(e.contains("import 'common.proto' not found"), "{e}");
        let m = method(&schema(vec![inc.clone()]), "/svc.S/M").unwrap();
        assert_eq!(
            m.encode(r#"{"name": {"first": "a"}}"#).unwrap(),
            b"\x0a\x03\x0a\x01a"
        );
        let e = m
            .encode(r#"{"name": {"frist": "a"}}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(".name.frist: common.Name has no field"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_service_or_method_names_what_the_proto_offers() {
        let (_dir, s) = schema();
        let e = method(&s, "/demo.Svx/Call").unwrap_err().to_string();
        assert!(
            e.contains("has no service demo.Svx (did you mean \"demo.Svc\"?): it defines demo.Svc"),
            "{e}"
        );
        let e = method(&s, "/demo.Svc/Cal").unwrap_err().to_string();
        assert!(e.contains("service demo.Svc in"), "{e}");
        assert!(
            e.ends_with("has no method Cal (did you mean \"Call\"?): its methods are Call, Watch"),
            "{e}"
        );
    }

    /// A streaming method's calls take their shape from the .proto: a unary one has none,
    /// `--stream-messages` is refused where the client sends one message.
    #[test]
    fn a_methods_streams_come_from_the_proto() {
        let (_dir, s) = schema();
        let watch = method(&s, "/demo.Svc/Watch").unwrap();
        let shape = |m: &Method, n| m.stream(n).map_err(|e| e.to_string());
        assert_eq!(
            shape(&watch, None),
            Ok(Some(GrpcStream {
                messages_per_call: 1,
                streamed_replies: true
            }))
        );
        let e = shape(&watch, Some(3)).unwrap_err();
        assert!(
            e.contains("demo.Svc.Watch takes one request message"),
            "{e}"
        );
        let call = method(&s, "/demo.Svc/Call").unwrap();
        assert_eq!(shape(&call, None), Ok(None));
    }

    #[test]
    fn a_protoset_gives_the_same_bytes_and_a_bad_file_is_named() {
        let (dir, s) = schema();
        let Schema::Proto { file, .. } = &s else {
            unreachable!()
        };
        let set = protox::compile([file], [dir.path()]).unwrap();
        let set_file = dir.path().join("demo.protoset");
        std::fs::write(&set_file, set.encode_to_vec()).unwrap();
        let json = r#"{"user": {"name": "Jo"}, "tags": ["x"]}"#;
        assert_eq!(
            method(&Schema::Protoset(set_file), "/demo.Svc/Call")
                .unwrap()
                .encode(json)
                .unwrap(),
            call(json).unwrap()
        );
        let bad = dir.path().join("bad.proto");
        std::fs::write(&bad, "syntax = \"proto3\";\nmessage A { strin x = 1; }\n").unwrap();
        let e = method(
            &Schema::Proto {
                file: bad,
                import_paths: vec![],
            },
            "/A/B",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("compiling "), "{e}");
        assert!(e.contains("strin"), "{e}");
        let e = method(&Schema::Protoset(dir.path().join("demo.proto")), "/a.B/C")
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not a FileDescriptorSet"), "{e}");
        let e = method(&Schema::Protoset(dir.path().join("none")), "/a.B/C")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("reading --protoset"), "{e}");
    }
}
