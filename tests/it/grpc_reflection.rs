//! `load --data` with no `.proto`: the method's types from the server's reflection service.
//! The server is gRPC C++ with its stock reflection plugin (Debian's libgrpc++-dev 1.51, which
//! offers grpc.reflection.v1alpha only, so the v1 → v1alpha fallback is taken), serving
//! examples/greeter.proto from examples/grpc_reflection_server.cc: built here once into
//! target/ by protoc, grpc_cpp_plugin and g++, it decodes every request with protobuf's C++
//! runtime and counts the ones equal to the message it was told to expect. A server without
//! reflection is grpcio (examples/grpc_json_server.py).

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::Value;

use crate::common;
use crate::grpc_json::{assert_refused_at, examples, Server};

/// The message sent and expected: a nested message, an enum by name, a repeated string, an
/// int64 from a string past 2^53 and a map entry, in protobuf's JSON mapping.
const DATA: &str = r#"{"user": {"name": "Ada", "age": 36, "tier": "FREE", "tags": ["x", "y"]},
    "requestId": "9007199254740993", "labels": {"zone": "b"}}"#;

/// Why the server cannot be built here: a tool or library missing (the test skips outside CI).
struct Missing(String);

/// The reflection server's binary, built once per change of its sources (keyed by their hash)
/// under target/; `Err` names what is missing to build it. A failed build panics.
fn server_binary() -> Result<PathBuf, Missing> {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    if let Some(path) = BUILT.get() {
        return Ok(path.clone());
    }
    let tools = ["protoc", "grpc_cpp_plugin", "g++", "pkg-config"];
    if let Some(tool) = tools.iter().find(|t| common::find_program(t).is_none()) {
        return Err(Missing(format!(
            "no {tool} to build examples/grpc_reflection_server.cc (Debian: apt-get install \
             libgrpc++-dev protobuf-compiler protobuf-compiler-grpc g++ pkg-config)"
        )));
    }
    let header = Path::new("/usr/include/grpcpp/ext/proto_server_reflection_plugin.h");
    if !header.exists() {
        return Err(Missing(
            "no gRPC C++ reflection plugin (Debian: apt-get install libgrpc++-dev)".into(),
        ));
    }
    // Tests run on threads: one builds, the others wait for it here.
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    Ok(BUILT.get_or_init(build_server).clone())
}

/// Builds the server into target/tmp/grpc_reflection_server-HASH/ unless it is there.
fn build_server() -> PathBuf {
    let sources = [
        examples().join("grpc_reflection_server.cc"),
        examples().join("greeter.proto"),
    ];
    let mut hasher = DefaultHasher::new();
    for s in &sources {
        std::fs::read(s).unwrap().hash(&mut hasher);
    }
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(format!("grpc_reflection_server-{:016x}", hasher.finish()));
    let binary = dir.join("grpc_reflection_server");
    if binary.exists() {
        return binary;
    }
    let started = Instant::now();
    let work = tempfile::tempdir_in(tmp).unwrap();
    let out = work.path();
    run(Command::new("protoc")
        .arg("-I")
        .arg(examples())
        .arg(format!("--cpp_out={}", out.display()))
        .arg(format!("--grpc_out={}", out.display()))
        .arg("--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin")
        .arg("greeter.proto"));
    let flags = Command::new("pkg-config")
        .args(["--cflags", "--libs", "grpc++", "protobuf"])
        .output()
        .unwrap();
    assert!(flags.status.success(), "pkg-config grpc++ protobuf failed");
    let flags = String::from_utf8(flags.stdout).unwrap();
    run(Command::new("g++")
        .args(["-O1", "-o"])
        .arg(out.join("grpc_reflection_server"))
        .arg("-I")
        .arg(out)
        .arg(&sources[0])
        .arg(out.join("greeter.pb.cc"))
        .arg(out.join("greeter.grpc.pb.cc"))
        .args(flags.split_whitespace())
        .arg("-lgrpc++_reflection"));
    eprintln!(
        "built examples/grpc_reflection_server.cc in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Into place whole: another test process building at once leaves one of the two.
    let _ = std::fs::rename(work.keep(), &dir);
    assert!(binary.exists(), "no {}", binary.display());
    binary
}

/// Runs a build step; panics with its output if it fails.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The gRPC C++ server with reflection, told to expect DATA; `None` (after `skip_or_fail`)
/// where it cannot be built.
fn reflecting() -> Option<Server> {
    reflecting_with(&[])
}

/// [`reflecting`] with more of the server's arguments (`--tls CERT KEY`).
fn reflecting_with(args: &[&str]) -> Option<Server> {
    let binary = match server_binary() {
        Ok(binary) => binary,
        Err(Missing(reason)) => {
            common::skip_or_fail(reason);
            return None;
        }
    };
    let expected: Value = serde_json::from_str(DATA).unwrap();
    let port = common::free_port();
    let mut cmd = Command::new(binary);
    cmd.arg(port.to_string())
        .args(["--expect", &expected.to_string()])
        .args(args);
    Some(Server::spawn(port, cmd))
}

fn url(server: &Server, path: &str) -> String {
    format!("grpc://127.0.0.1:{}/{path}", server.port)
}

/// `load` with `args` on `path` is refused before any call, saying each of `says`.
#[track_caller]
fn assert_refused(server: &mut Server, path: &str, args: &[&str], says: &[&str]) {
    let url = url(server, path);
    assert_refused_at(server, &url, args, says);
}

/// With no .proto, every call stairbench counts in `sent` is one gRPC C++ decoded as exactly
/// the expected HelloRequest: types taken wrong from the reflection answer (a field number, an
/// enum's values, the map entry, an import not followed) make `matched` fall short of the calls
/// or refuse the message. `--reflect --verbose` with no data decodes the first reply.
#[test]
fn every_call_sent_by_reflection_is_one_grpc_cpp_decoded_field_for_field() {
    let Some(mut server) = reflecting() else {
        return;
    };
    let url = url(&server, "greeter.Greeter/SayHello");
    let args = ["-c", "2", "-d", "1s", "--depth", "4", "--data", DATA];
    let (code, _, stderr, doc) = common::load_json(&url, &args);
    assert_eq!(code, Some(0), "{stderr}");
    let doc = doc.unwrap_or_else(|| panic!("no JSON: {stderr}"));
    let counts = server.counts();
    let (calls, matched) = (&counts["calls"]["SayHello"], &counts["matched"]);
    eprintln!(
        "sent {}, gRPC C++ decoded {calls}, matched {matched}",
        doc["sent"]
    );
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    assert!(doc["requests"].as_u64().unwrap() > 50, "{doc:#}");
    assert_eq!(&doc["sent"], calls, "{doc:#}");
    assert_eq!(matched, calls, "gRPC C++ decoded other values");

    let out = common::cli(&["load", &url, "--reflect", "-v", "-c", "1", "-d", "200ms"]);
    common::assert_success(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"first reply (greeter.HelloReply): {"message":"hello "}"#),
        "{stderr}"
    );
}

/// Over grpcs://, the reflection questions, the first reply and the load all speak TLS with
/// the user's `--cacert`: every call sent is one gRPC C++ decoded right (the first reply's
/// call beside them). Without `--cacert` the server's certificate is refused before any call.
#[test]
fn reflection_and_the_first_reply_work_over_tls() {
    let Some(certs) = crate::certs::make_certs() else {
        return;
    };
    let (cert, key, ca) = (certs.cert(), certs.key(), certs.ca());
    let tls = ["--tls", cert.to_str().unwrap(), key.to_str().unwrap()];
    let Some(mut server) = reflecting_with(&tls) else {
        return;
    };
    let url = format!("grpcs://localhost:{}/greeter.Greeter/SayHello", server.port);
    let ca = ca.to_str().unwrap();
    let args = ["load", &url, "-c", "2", "-d", "1s", "--depth", "4"];
    let out = common::cli(&[&args[..], &["--cacert", ca, "--data", DATA, "-v"]].concat());
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(r#"first reply (greeter.HelloReply): {"message":"hello Ada"}"#),
        "{stderr}"
    );
    let sent: u64 = stdout
        .split("  sent ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no sent in {stdout}"));
    let counts = server.counts();
    eprintln!("grpcs: sent {sent} + the first reply's call, gRPC C++ {counts}");
    assert!(sent > 50, "{stdout}");
    assert_eq!(counts["calls"]["SayHello"], sent + 1, "{counts}");
    assert_eq!(counts["matched"], sent + 1, "{counts}");
    let out = common::cli(&[&args[..], &["--data", DATA]].concat());
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("certificate"), "{stderr}");
    assert_eq!(server.counts()["calls"]["SayHello"], sent + 1);
}

/// A misspelt field or a wrong type is refused before any call, with its path in the JSON and
/// what the server's types expect there, as with --proto.
#[test]
fn a_message_the_servers_types_refuse_names_its_path_and_sends_nothing() {
    let Some(mut server) = reflecting() else {
        return;
    };
    let cases: [(&str, &[&str]); 2] = [
        (
            r#"{"user": {"nmae": "Ada"}}"#,
            &[".user.nmae: greeter.User has no field \"nmae\" (did you mean \"name\"?); its fields are name, age, tier, tags"],
        ),
        (
            r#"{"user": {"tier": "GOLD"}}"#,
            &[".user.tier: \"GOLD\" is not a value of enum greeter.Tier", "TIER_UNSPECIFIED, FREE, PRO"],
        ),
    ];
    for (data, says) in cases {
        let path = "greeter.Greeter/SayHello";
        assert_refused(&mut server, path, &["--data", data], says);
    }
    // A call's shape comes from the server's types too: SayHello takes one message.
    assert_refused(
        &mut server,
        "greeter.Greeter/SayHello",
        &["--data", "{}", "--stream-messages", "2"],
        &["greeter.Greeter.SayHello takes one request message per call"],
    );
}

/// A service the server does not offer names the ones its reflection service lists; a method
/// the service lacks names its methods.
#[test]
fn an_unknown_service_names_the_services_the_server_offers() {
    let Some(mut server) = reflecting() else {
        return;
    };
    let port = server.port;
    assert_refused(
        &mut server,
        "greeter.Greter/SayHello",
        &["--data", "{}"],
        &[&format!("127.0.0.1:{port} has no service greeter.Greter (did you mean \"greeter.Greeter\"?): its reflection service lists greeter.Greeter, grpc.reflection.v1alpha.ServerReflection")],
    );
    assert_refused(
        &mut server,
        "greeter.Greeter/SayHelo",
        &["--data", "{}"],
        &["has no method SayHelo (did you mean \"SayHello\"?): its methods are SayHello"],
    );
}

/// A server with no reflection service (grpcio without the plugin) answers both versions
/// UNIMPLEMENTED: the error says so and says to give the .proto.
#[test]
fn a_server_without_reflection_is_told_to_give_the_proto() {
    let Some(mut server) = Server::start(&[]) else {
        return;
    };
    let port = server.port;
    let says = format!(
        "127.0.0.1:{port} answered UNIMPLEMENTED for grpc.reflection.v1 and v1alpha: it has no \
         server reflection service, so the types of --data must come from a file: give the \
         .proto with --proto FILE or --protoset FILE"
    );
    assert_refused(
        &mut server,
        "greeter.Greeter/SayHello",
        &["--data", "{}"],
        &[&says],
    );
}

/// A spec's `data` without `proto` or `protoset` is refused when the plan is made (its server
/// is not up yet to be asked), at the data key, saying why and what to give.
#[test]
fn a_specs_data_without_a_proto_is_refused_saying_the_server_is_not_up() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(
        &spec,
        "name = \"x\"\nclients = [1]\n[[targets]]\nname = \"g\"\ncommand = \"sleep 60\"\n\
         url = \"grpc://127.0.0.1:{port}/greeter.Greeter/SayHello\"\n\
         data = '{\"user\": {\"name\": \"Ada\"}}'\n",
    )
    .unwrap();
    let out = common::cli(&["run".as_ref(), spec.as_os_str(), "--dry-run".as_ref()]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(
        text.contains("s.toml:7:") && text.contains("targets[0].data: "),
        "{text}"
    );
    assert!(
        text.contains("the server is not up when the plan is made")
            && text.contains("give the .proto with proto = \"FILE\""),
        "{text}"
    );
}
