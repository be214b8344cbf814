//! A gRPC method's types from the server itself, by its reflection service
//! (`grpc.reflection.v1.ServerReflection`, else the older `grpc.reflection.v1alpha` that gRPC
//! servers before 2023 offer): the file that defines the url's service, then each file it
//! imports that the server did not send along, into a [`DescriptorPool`], so `--data` needs no
//! `.proto`. The questions go through a [`Server`] (one call each, its request message sent
//! and the stream ended); the load's own HTTP/2 probe is one.

use std::collections::BTreeMap;

use prost::Message as _;
use prost_reflect::prost_types::FileDescriptorProto;
use prost_reflect::DescriptorPool;

/// The reflection service's methods, newest version first: v1alpha is asked only when the
/// server answers v1 with UNIMPLEMENTED.
const VERSIONS: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// At most this many files are taken from a server (a real service imports a few dozen), so a
/// server that names new imports for ever is stopped.
const MAX_FILES: usize = 1024;

/// `ServerReflectionRequest` of grpc/reflection/v1/reflection.proto (v1alpha's is the same on
/// the wire): its `message_request` oneof as optional fields, one of them set.
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionRequest {
    /// The file of this name (`greeter.proto`).
    #[prost(string, optional, tag = "3")]
    file_by_filename: Option<String>,
    /// The file that defines this symbol (`greeter.Greeter`), with the files it imports.
    #[prost(string, optional, tag = "4")]
    file_containing_symbol: Option<String>,
    /// The services the server offers (the value is not read by servers).
    #[prost(string, optional, tag = "7")]
    list_services: Option<String>,
}

/// `ServerReflectionResponse`: the answer to one request (the `message_response` oneof as
/// optional fields; the ones stairbench does not ask for are left out).
#[derive(Clone, PartialEq, prost::Message)]
struct ReflectionResponse {
    /// Serialized `FileDescriptorProto`s.
    #[prost(message, optional, tag = "4")]
    file_descriptor_response: Option<FileDescriptorResponse>,
    /// The services' names.
    #[prost(message, optional, tag = "6")]
    list_services_response: Option<ListServiceResponse>,
    /// Why the request was not answered (NOT_FOUND for an unknown symbol or file).
    #[prost(message, optional, tag = "7")]
    error_response: Option<ErrorResponse>,
}

/// `FileDescriptorResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct FileDescriptorResponse {
    /// Each a serialized `google.protobuf.FileDescriptorProto`.
    #[prost(bytes = "vec", repeated, tag = "1")]
    file_descriptor_proto: Vec<Vec<u8>>,
}

/// `ListServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct ListServiceResponse {
    /// One per service.
    #[prost(message, repeated, tag = "1")]
    service: Vec<ServiceResponse>,
}

/// `ServiceResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct ServiceResponse {
    /// The service's full name (`greeter.Greeter`).
    #[prost(string, tag = "1")]
    name: String,
}

/// `ErrorResponse`.
#[derive(Clone, PartialEq, prost::Message)]
struct ErrorResponse {
    /// A gRPC status code.
    #[prost(int32, tag = "1")]
    error_code: i32,
    /// The server's words.
    #[prost(string, tag = "2")]
    error_message: String,
}

/// How one call to the server went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The server has no such method: gRPC status UNIMPLEMENTED.
    Unimplemented,
    /// Anything else (not reachable, a timeout, another status): what happened.
    Failed(String),
}

/// A server to ask: one call of a method, one request message, the reply messages.
pub trait Server {
    /// The server as the user names it (`127.0.0.1:50051`), for the errors.
    fn name(&self) -> String;
    /// Calls `method` (`/PKG.SVC/METHOD`) with the one message `request` (the stream ended
    /// after it) and returns the reply messages once the call ends OK.
    fn call(&mut self, method: &str, request: Vec<u8>) -> Result<Vec<Vec<u8>>, CallError>;
}

/// Why the server's reflection gave no types for the service; each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReflectError {
    /// Both versions of the reflection service answered UNIMPLEMENTED.
    #[error("{server} answered UNIMPLEMENTED for grpc.reflection.v1 and v1alpha: it has no server reflection service, so the types of --data must come from a file: give the .proto with --proto FILE or --protoset FILE")]
    NoReflection {
        /// The server.
        server: String,
    },
    /// The server does not know the url's service: the ones it lists.
    #[error(
        "{server} has no service {service}{suggestion}: its reflection service lists {offered}"
    )]
    NoService {
        /// The server.
        server: String,
        /// The url's service.
        service: String,
        /// ` (did you mean "X"?)` when one listed is close, else empty.
        suggestion: String,
        /// The services it lists, comma-separated.
        offered: String,
    },
    /// The call failed: not reachable, no answer in time, a status other than UNIMPLEMENTED.
    #[error("asking {server}'s reflection service ({method}): {reason}; without reflection, give the .proto with --proto FILE or --protoset FILE")]
    Call {
        /// The server.
        server: String,
        /// The method called.
        method: String,
        /// What happened.
        reason: String,
    },
    /// The answer is not one reflection gives, or its files do not make a whole set.
    #[error("{server}'s reflection service answered {what}")]
    Answer {
        /// The server.
        server: String,
        /// What was wrong with the answer.
        what: String,
    },
}

/// The types of `service` (`PKG.SVC`) and every file they need, from `server`'s reflection
/// service: v1, or v1alpha where v1 is UNIMPLEMENTED.
pub fn pool(server: &mut dyn Server, service: &str) -> Result<DescriptorPool, ReflectError> {
    let (method, first) = first_answer(server, service)?;
    let mut asker = Asker { server, method };
    let files = match first.error_response {
        Some(error) => return Err(asker.no_service(service, error)),
        None => asker.files(first)?,
    };
    let files = asker.follow_imports(files)?;
    let mut pool = DescriptorPool::new();
    pool.add_file_descriptor_protos(files.into_values())
        .map_err(|e| asker.bad_answer(format!("files that do not make a whole set: {e}")))?;
    Ok(pool)
}

/// The reflection method the server answers and its answer to the file containing `service`.
fn first_answer(
    server: &mut dyn Server,
    service: &str,
) -> Result<(&'static str, ReflectionResponse), ReflectError> {
    let request = ReflectionRequest {
        file_containing_symbol: Some(service.into()),
        ..Default::default()
    };
    for method in VERSIONS {
        match server.call(method, request.encode_to_vec()) {
            // No such version here: the next (older) one.
            Err(CallError::Unimplemented) => continue,
            result => {
                let asker = Asker { server, method };
                return asker.read(result).map(|answer| (method, answer));
            }
        }
    }
    Err(ReflectError::NoReflection {
        server: server.name(),
    })
}

/// Questions to one version of the reflection service.
struct Asker<'a> {
    server: &'a mut dyn Server,
    method: &'static str,
}

impl Asker<'_> {
    /// One request, its one answer.
    fn ask(&mut self, request: &ReflectionRequest) -> Result<ReflectionResponse, ReflectError> {
        let result = self.server.call(self.method, request.encode_to_vec());
        self.read(result)
    }

    /// The answer in a call's `result`, or why there is none.
    fn read(
        &self,
        result: Result<Vec<Vec<u8>>, CallError>,
    ) -> Result<ReflectionResponse, ReflectError> {
        let failed = |reason: String| ReflectError::Call {
            server: self.server.name(),
            method: self.method.trim_start_matches('/').into(),
            reason,
        };
        let replies = match result {
            Ok(replies) => replies,
            Err(CallError::Unimplemented) => return Err(failed("UNIMPLEMENTED".into())),
            Err(CallError::Failed(reason)) => return Err(failed(reason)),
        };
        let Some(first) = replies.first() else {
            return Err(self.bad_answer("no message".into()));
        };
        ReflectionResponse::decode(first.as_slice()).map_err(|e| {
            self.bad_answer(format!(
                "a message that is not a ServerReflectionResponse: {e}"
            ))
        })
    }

    /// A [`ReflectError::Answer`] saying `what`.
    fn bad_answer(&self, what: String) -> ReflectError {
        ReflectError::Answer {
            server: self.server.name(),
            what,
        }
    }

    /// The files of a `file_descriptor_response`, by name.
    fn files(
        &self,
        answer: ReflectionResponse,
    ) -> Result<BTreeMap<String, FileDescriptorProto>, ReflectError> {
        let Some(response) = answer.file_descriptor_response else {
            return Err(self.bad_answer("neither files nor an error to a file request".into()));
        };
        let mut files = BTreeMap::new();
        for bytes in response.file_descriptor_proto {
            let file = FileDescriptorProto::decode(bytes.as_slice()).map_err(|e| {
                self.bad_answer(format!("a file that is not a FileDescriptorProto: {e}"))
            })?;
            files.insert(file.name().to_string(), file);
        }
        Ok(files)
    }

    /// `files` with every file they import, transitively, asked by name where the server did
    /// not send it along.
    fn follow_imports(
        &mut self,
        mut files: BTreeMap<String, FileDescriptorProto>,
    ) -> Result<BTreeMap<String, FileDescriptorProto>, ReflectError> {
        while let Some(name) = missing_import(&files) {
            if files.len() >= MAX_FILES {
                return Err(self.bad_answer(format!("more than {MAX_FILES} files")));
            }
            let request = ReflectionRequest {
                file_by_filename: Some(name.clone()),
                ..Default::default()
            };
            let answer = self.ask(&request)?;
            if let Some(e) = answer.error_response {
                let text = e.error_message;
                return Err(self.bad_answer(format!("no file {name:?} (imported): {text}")));
            }
            let got = self.files(answer)?;
            if !got.contains_key(&name) {
                return Err(self.bad_answer(format!("other files when asked for {name:?}")));
            }
            files.extend(got);
        }
        Ok(files)
    }

    /// The error for a service the server does not know (`error` its answer): the services it
    /// lists, asked for.
    fn no_service(&mut self, service: &str, error: ErrorResponse) -> ReflectError {
        let request = ReflectionRequest {
            list_services: Some(String::new()),
            ..Default::default()
        };
        let listed = match self.ask(&request) {
            Ok(answer) => answer.list_services_response,
            Err(e) => return e,
        };
        let names: Vec<String> = listed
            .map(|l| l.service.into_iter().map(|s| s.name).collect())
            .unwrap_or_default();
        if names.iter().any(|n| n == service) {
            // Listed, yet its file was refused: the server's own reason is the news.
            let text = error.error_message;
            return self.bad_answer(format!("no file for {service}, which it lists: {text}"));
        }
        ReflectError::NoService {
            server: self.server.name(),
            service: service.into(),
            suggestion: super::grpc_message::suggestion(service, names.iter().map(String::as_str)),
            offered: super::grpc_message::list_or_none(&names),
        }
    }
}

/// The first file imported by one of `files` and not among them.
fn missing_import(files: &BTreeMap<String, FileDescriptorProto>) -> Option<String> {
    files
        .values()
        .flat_map(|f| f.dependency.iter())
        .find(|d| !files.contains_key(*d))
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reflection service over a pool protox compiled: it serves the `served` methods
    /// (others are UNIMPLEMENTED), sends a file without its imports (so they must be asked
    /// by name) and records each question.
    struct Fake {
        pool: DescriptorPool,
        served: Vec<&'static str>,
        asked: Vec<(String, ReflectionRequest)>,
    }

    impl Fake {
        fn new(served: &[&'static str]) -> (tempfile::TempDir, Fake) {
            let dir = tempfile::tempdir().unwrap();
            let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text);
            write(
                "dep.proto",
                "syntax = \"proto3\";\npackage dep;\nmessage Name { string first = 1; }\n",
            )
            .unwrap();
            write(
                "svc.proto",
                "syntax = \"proto3\";\npackage svc;\nimport \"dep.proto\";\n\
                 message Req { dep.Name name = 1; }\nservice S { rpc M(Req) returns (Req); }\n",
            )
            .unwrap();
            let set = protox::compile(["svc.proto"], [dir.path()]).unwrap();
            let pool = DescriptorPool::from_file_descriptor_set(set).unwrap();
            let served = served.to_vec();
            let fake = Fake {
                pool,
                served,
                asked: Vec::new(),
            };
            (dir, fake)
        }

        fn answer(&self, request: &ReflectionRequest) -> ReflectionResponse {
            let file = |f: Option<prost_reflect::FileDescriptor>| match f {
                Some(f) => ReflectionResponse {
                    file_descriptor_response: Some(FileDescriptorResponse {
                        file_descriptor_proto: vec![f.file_descriptor_proto().encode_to_vec()],
                    }),
                    ..Default::default()
                },
                None => ReflectionResponse {
                    error_response: Some(ErrorResponse {
                        error_code: 5,
                        error_message: "not found".into(),
                    }),
                    ..Default::default()
                },
            };
            if let Some(symbol) = &request.file_containing_symbol {
                return file(
                    self.pool
                        .get_service_by_name(symbol)
                        .map(|s| s.parent_file()),
                );
            }
            if let Some(name) = &request.file_by_filename {
                return file(self.pool.get_file_by_name(name));
            }
            let service = self
                .pool
                .services()
                .map(|s| ServiceResponse {
                    name: s.full_name().into(),
                })
                .collect();
            ReflectionResponse {
                list_services_response: Some(ListServiceResponse { service }),
                ..Default::default()
            }
        }

        /// The questions asked: each method's version and what was asked.
        fn questions(&self) -> Vec<String> {
            let version = |m: &str| m.split('.').nth(2).unwrap_or("").to_string();
            self.asked
                .iter()
                .map(
                    |(m, r)| match (&r.file_containing_symbol, &r.file_by_filename) {
                        (Some(s), _) => format!("{} symbol {s}", version(m)),
                        (_, Some(f)) => format!("{} file {f}", version(m)),
                        _ => format!("{} list", version(m)),
                    },
                )
                .collect()
        }
    }

    impl Server for Fake {
        fn name(&self) -> String {
            "fake:1".into()
        }

        fn call(&mut self, method: &str, request: Vec<u8>) -> Result<Vec<Vec<u8>>, CallError> {
            let request = ReflectionRequest::decode(request.as_slice()).unwrap();
            self.asked.push((method.into(), request.clone()));
            if !self.served.contains(&method) {
                return Err(CallError::Unimplemented);
            }
            Ok(vec![self.answer(&request).encode_to_vec()])
        }
    }

    fn encoded(pool: DescriptorPool) -> Vec<u8> {
        let schema = super::super::grpc_message::Schema::Reflection(pool);
        let method = super::super::grpc_message::method(&schema, "/svc.S/M").unwrap();
        method.encode(r#"{"name": {"first": "a"}}"#).unwrap()
    }

    #[test]
    fn v1_unimplemented_falls_back_to_v1alpha_and_imports_are_asked_by_name() {
        let (_dir, mut fake) = Fake::new(&[VERSIONS[1]]);
        let pool = pool(&mut fake, "svc.S").unwrap();
        assert_eq!(encoded(pool), b"\x0a\x03\x0a\x01a");
        assert_eq!(
            fake.questions(),
            [
                "v1 symbol svc.S",
                "v1alpha symbol svc.S",
                "v1alpha file dep.proto"
            ]
        );
    }

    #[test]
    fn v1_is_kept_when_the_server_answers_it() {
        let (_dir, mut fake) = Fake::new(&VERSIONS);
        pool(&mut fake, "svc.S").unwrap();
        assert_eq!(fake.questions(), ["v1 symbol svc.S", "v1 file dep.proto"]);
    }

    #[test]
    fn a_server_without_reflection_is_told_to_give_the_proto() {
        let (_dir, mut fake) = Fake::new(&[]);
        let e = pool(&mut fake, "svc.S").unwrap_err().to_string();
        assert_eq!(
            e,
            "fake:1 answered UNIMPLEMENTED for grpc.reflection.v1 and v1alpha: it has no server \
             reflection service, so the types of --data must come from a file: give the .proto \
             with --proto FILE or --protoset FILE"
        );
    }

    #[test]
    fn an_unknown_service_names_the_ones_the_server_lists() {
        let (_dir, mut fake) = Fake::new(&[VERSIONS[1]]);
        let e = pool(&mut fake, "svc.s").unwrap_err().to_string();
        assert_eq!(
            e,
            "fake:1 has no service svc.s (did you mean \"svc.S\"?): its reflection service lists svc.S"
        );
        assert_eq!(fake.questions().last().unwrap(), "v1alpha list");
    }

    /// Only UNIMPLEMENTED means "no such version": a server not reached is not asked again.
    #[test]
    fn another_failure_is_not_a_reason_to_try_v1alpha() {
        struct Down(u32);
        impl Server for Down {
            fn name(&self) -> String {
                "down:1".into()
            }
            fn call(&mut self, _: &str, _: Vec<u8>) -> Result<Vec<Vec<u8>>, CallError> {
                self.0 += 1;
                Err(CallError::Failed("connection refused".into()))
            }
        }
        let mut down = Down(0);
        let e = pool(&mut down, "svc.S").unwrap_err().to_string();
        assert!(e.starts_with("asking down:1's reflection service (grpc.reflection.v1.ServerReflection/ServerReflectionInfo): connection refused"), "{e}");
        assert_eq!(down.0, 1);
    }
}
