//! gRPC request messages from JSON (`--proto`/`--protoset` with `--data`, a spec's `proto`
//! and `data`), metadata and deadlines, against grpcio serving examples/greeter.proto with
//! code grpcio-tools generated from it (examples/grpc_json_server.py): the server decodes every
//! request with protobuf's own Python runtime and counts the ones equal to the message it was
//! told to expect, so each call stairbench counts is one the server decoded right.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::Value;

use crate::common;

pub(crate) const PYTHON: &str = "/usr/bin/python3";

/// The message every test sends, and the server expects, in protobuf's JSON mapping.
pub(crate) const DATA: &str = r#"{"user": {"name": "Jo", "age": 41, "tier": "PRO", "tags": ["a", "b"]},
    "requestId": "12345678901", "labels": {"region": "eu"}}"#;

pub(crate) fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples")
}

pub(crate) fn proto() -> String {
    examples().join("greeter.proto").display().to_string()
}

/// examples/grpc_json_server.py on a free port (or, by [`Server::spawn`], another server that
/// prints "listening" and answers "count" as it does).
pub(crate) struct Server {
    pub(crate) port: u16,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Server {
    /// Started with `args` (`--expect JSON`, `--metadata K=V`); `None` (after
    /// `skip_or_fail`) without grpcio and grpcio-tools.
    pub(crate) fn start(args: &[&str]) -> Option<Server> {
        let has = Command::new(PYTHON)
            // Names from the packages, not the imports alone (see grpc.rs).
            .args([
                "-c",
                "from grpc import server; from grpc_tools import protoc",
            ])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !has {
            common::skip_or_fail(
                "no grpcio and grpcio-tools for /usr/bin/python3 (Debian: apt-get install \
                 python3-grpcio python3-grpc-tools)",
            );
            return None;
        }
        let port = common::free_port();
        let mut cmd = Command::new(PYTHON);
        cmd.arg(examples().join("grpc_json_server.py"))
            .arg(port.to_string())
            .args(args);
        Some(Server::spawn(port, cmd))
    }

    /// `cmd`, a server told to listen on `port`, once it says "listening".
    pub(crate) fn spawn(port: u16, mut cmd: Command) -> Server {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("listening"), "server said {line:?}");
        Server {
            port,
            child,
            stdin,
            stdout,
        }
    }

    /// The server's process id (a spec's target `pid`).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn url(&self, method: &str) -> String {
        format!("grpc://127.0.0.1:{}/greeter.Greeter/{method}", self.port)
    }

    /// The server's counts: calls per method, matched, metadata_matched, remaining_s.
    pub(crate) fn counts(&mut self) -> Value {
        writeln!(self.stdin, "count").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    /// The requests recorded since the last call (`--record yes`), as protobuf's JSON mapping.
    pub(crate) fn requests(&mut self) -> Vec<Value> {
        writeln!(self.stdin, "requests").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }

    fn calls(&mut self, method: &str) -> u64 {
        self.counts()["calls"][method].as_u64().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn u(doc: &Value, key: &str) -> u64 {
    doc[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {doc:#}"))
}

/// A 1 s load at depth 4 on 2 connections with `args`; its JSON (exit 0 asserted).
pub(crate) fn load(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["-c", "2", "-d", "1s", "--depth", "4"];
    all.extend_from_slice(args);
    let (code, _, stderr, doc) = common::load_json(url, &all);
    assert_eq!(code, Some(0), "{stderr}");
    doc.unwrap_or_else(|| panic!("no JSON: {stderr}"))
}

/// With --proto, with --protoset (made by grpcio-tools' protoc) and with --data-file, every
/// call sent is one grpcio decoded as exactly the expected HelloRequest. A wrong encoding (a
/// field number, an int64 not taken from its string, a map entry, an enum by its number
/// wrong) makes `matched` fall short of the calls.
#[test]
fn every_json_call_sent_is_one_grpcio_decoded_field_for_field() {
    let compact: Value = serde_json::from_str(DATA).unwrap();
    let Some(mut server) = Server::start(&["--expect", &compact.to_string()]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let protoset = dir.path().join("greeter.protoset");
    let made = Command::new(PYTHON)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(examples())
        .arg(format!("--descriptor_set_out={}", protoset.display()))
        .args(["--include_imports", "greeter.proto"])
        .status()
        .unwrap();
    assert!(made.success());
    let data_file = dir.path().join("hello.json");
    std::fs::write(&data_file, DATA).unwrap();
    let proto = proto();
    let set = protoset.display().to_string();
    let file = data_file.display().to_string();
    let ways: [(&str, Vec<&str>); 3] = [
        ("--proto", vec!["--proto", &proto, "--data", DATA]),
        ("--protoset", vec!["--protoset", &set, "--data", DATA]),
        ("--data-file", vec!["--proto", &proto, "--data-file", &file]),
    ];
    for (way, args) in ways {
        let before = server.counts();
        let doc = load(&server.url("SayHello"), &args);
        let after = server.counts();
        let calls = u(&after["calls"], "SayHello") - u(&before["calls"], "SayHello");
        let matched = u(&after, "matched") - u(&before, "matched");
        eprintln!(
            "{way}: sent {}, grpcio decoded {calls}, matched {matched}",
            u(&doc, "sent")
        );
        assert_eq!(doc["errors"], serde_json::json!({}), "{way}: {doc:#}");
        assert!(u(&doc, "requests") > 50, "{way}: {doc:#}");
        assert_eq!(u(&doc, "sent"), calls, "{way}: {doc:#}");
        assert_eq!(matched, calls, "{way}: grpcio decoded other values");
    }
}

/// A spec's `[client] proto` and a target's `data` (a TOML table): every call of the
/// staircase is one grpcio decoded right; the RESOURCE_EXHAUSTED method's steps count their
/// failures by the status's name in their errors.
#[test]
fn a_specs_proto_and_data_make_the_message_and_statuses_count_by_name() {
    let compact: Value = serde_json::from_str(DATA).unwrap();
    let Some(mut server) = Server::start(&["--expect", &compact.to_string()]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(examples().join("greeter.proto"), dir.path().join("g.proto")).unwrap();
    let spec = dir.path().join("spec.toml");
    let target = |name: &str, method: &str| {
        format!(
            "[[targets]]\nname = \"{name}\"\nurl = \"{}\"\npid = {}\ndepth = 4\n\
             data = {{ user = {{ name = \"Jo\", age = 41, tier = \"PRO\", tags = [\"a\", \"b\"] }}, \
             requestId = \"12345678901\", labels = {{ region = \"eu\" }} }}\n",
            server.url(method),
            server.child.id()
        )
    };
    std::fs::write(
        &spec,
        format!(
            "name = \"grpc-json\"\nclients = [1, 2]\nduration = \"1s\"\nwarmup = \"200ms\"\n\
             max_error_ratio = 1.0\n[client]\nproto = \"g.proto\"\n{}{}",
            target("hello", "SayHello"),
            target("quota", "Exhausted")
        ),
    )
    .unwrap();
    let out = dir.path().join("run");
    common::assert_success(&common::run_spec(&spec, &out));
    let steps = common::steps_json(&out);
    let counts = server.counts();
    let of = |name: &str| -> Vec<&Value> { steps.iter().filter(|s| s["target"] == name).collect() };
    let sent: u64 = of("hello").iter().map(|s| u(s, "sent")).sum();
    eprintln!("sent {sent}, grpcio {counts}");
    assert!(sent > 100, "{steps:#?}");
    assert_eq!(sent, u(&counts["calls"], "SayHello"), "{counts}");
    // The series stops after a step whose every call failed: its second step is skipped,
    // saying why.
    let quota_sent: u64 = of("quota").iter().filter_map(|s| s["sent"].as_u64()).sum();
    assert_eq!(u(&counts, "matched"), sent + quota_sent, "{counts}");
    let quota = of("quota");
    let measured: Vec<&&Value> = quota.iter().filter(|s| s["sent"].is_u64()).collect();
    assert!(!measured.is_empty(), "{steps:#?}");
    for step in measured {
        let errors = step["errors"].as_object().unwrap();
        let kinds: Vec<&String> = errors.keys().collect();
        assert_eq!(
            kinds,
            ["grpc_status 8 RESOURCE_EXHAUSTED: over quota"],
            "{step:#}"
        );
        assert!(errors.values().next().unwrap().as_u64().unwrap() > 10);
    }
}

/// `load` refuses the message before connecting: nothing reaches the server.
#[track_caller]
fn assert_refused(server: &mut Server, method: &str, args: &[&str], says: &[&str]) {
    let url = server.url(method);
    assert_refused_at(server, &url, args, says);
}

/// `load URL ARGS` is refused before any call (exit 2, no result), saying each of `says`;
/// the server counted no call of any method.
#[track_caller]
pub(crate) fn assert_refused_at(server: &mut Server, url: &str, args: &[&str], says: &[&str]) {
    let (code, _, stderr, doc) = common::load_json(url, args);
    assert_eq!(code, Some(2), "{args:?}: {stderr}");
    assert!(doc.is_none(), "{stderr}");
    for s in says {
        assert!(stderr.contains(s), "{args:?}: no {s:?} in {stderr}");
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
    let calls = server.counts()["calls"].clone();
    let sent: u64 = calls
        .as_object()
        .unwrap()
        .values()
        .map(|n| n.as_u64().unwrap())
        .sum();
    assert_eq!(sent, 0, "{args:?}: a call was sent: {calls}");
}

/// A misspelt field, a wrong type, a bad enum value, a missing method or service: exit 2 with
/// the JSON path and what the .proto expects (or offers), and no call sent.
#[test]
fn a_message_the_proto_refuses_names_its_path_and_sends_nothing() {
    let Some(mut server) = Server::start(&[]) else {
        return;
    };
    let p = proto();
    let with = |data: &'static str| -> Vec<String> {
        vec!["--proto".into(), p.clone(), "--data".into(), data.into()]
    };
    let cases: [(&str, Vec<String>, &[&str]); 6] = [
        (
            "SayHello",
            with(r#"{"user": {"nmae": "Jo"}}"#),
            &[".user.nmae", "greeter.User has no field \"nmae\"", "did you mean \"name\"", "its fields are name, age, tier, tags"],
        ),
        (
            "SayHello",
            with(r#"{"user": {"age": "forty"}}"#),
            &[".user.age: ", "the .proto expects int32"],
        ),
        (
            "SayHello",
            with(r#"{"user": {"tier": "GOLD"}}"#),
            &[".user.tier: \"GOLD\" is not a value of enum greeter.Tier", "TIER_UNSPECIFIED, FREE, PRO"],
        ),
        (
            "SayHello",
            with(r#"{"user": {"tags": ["a", 3]}}"#),
            &[".user.tags[1]: ", "expects string"],
        ),
        (
            "SayHelo",
            with("{}"),
            &["service greeter.Greeter in", "has no method SayHelo (did you mean \"SayHello\"?): its methods are SayHello, Exhausted, Slow"],
        ),
        (
            "SayHello",
            vec!["--data".into(), "{}".into()],
            &["--proto FILE"],
        ),
    ];
    for (method, args, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_refused(&mut server, method, &args, says);
    }
    let url = format!("grpc://127.0.0.1:{}/greeter.Greter/SayHello", server.port);
    let (code, _, stderr, _) = common::load_json(&url, &["--proto", &p]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("has no service greeter.Greter (did you mean \"greeter.Greeter\"?): it defines greeter.Greeter"),
        "{stderr}"
    );
    assert_eq!(server.calls("SayHello"), 0, "a call was sent");
}

/// `run --dry-run` refuses a spec's data the .proto refuses at the data key's line (and one
/// with placeholders, which only `load --data` makes per call), and a proto whose service
/// lacks the url's method at the proto key.
#[test]
fn dry_run_refuses_a_specs_data_at_its_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(examples().join("greeter.proto"), dir.path().join("g.proto")).unwrap();
    let dry_run = |text: &str| {
        let spec = dir.path().join("s.toml");
        std::fs::write(&spec, text).unwrap();
        let out = common::cli(&["run".as_ref(), spec.as_os_str(), "--dry-run".as_ref()]);
        let all = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), all)
    };
    let head = "name = \"x\"\nclients = [1]\n[[targets]]\nname = \"g\"\ncommand = \"sleep 60\"\n\
                url = \"grpc://127.0.0.1:{port}/greeter.Greeter/SayHello\"\nproto = \"g.proto\"\n";
    let (code, out) = dry_run(&format!("{head}data = '{{\"user\": {{\"age\": true}}}}'\n"));
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("s.toml:8:"), "{out}");
    assert!(
        out.contains("targets[0].data: .user.age: ") && out.contains("expects int32"),
        "{out}"
    );
    // Placeholders make a message per call, which a spec's data does not: refused at its key.
    let (code, out) = dry_run(&format!("{head}data = {{ requestId = \"{{seq}}\" }}\n"));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("targets[0].data: .: the message holds placeholders"),
        "{out}"
    );
    let (code, out) = dry_run(&format!("{head}data = {{ user = {{ name = \"Jo\" }} }}\n"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("a 6-byte gRPC message"), "{out}");
    let other = head.replace("SayHello", "Hello");
    let (code, out) = dry_run(&other);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("s.toml:7:") && out.contains("targets[0].proto: "),
        "{out}"
    );
    assert!(out.contains("has no method Hello"), "{out}");
    // A streaming method's calls take their shape from the .proto; stream_messages is
    // refused where the method takes one message.
    let (code, out) = dry_run(&head.replace("SayHello", "SayHellos"));
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("1 per call, the reply a stream"), "{out}");
    let (code, out) = dry_run(&format!("{head}stream_messages = 2\n"));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("targets[0].stream_messages: greeter.Greeter.SayHello takes one"),
        "{out}"
    );
    let chat = format!("{}stream_messages = 4\n", head.replace("SayHello", "Chat"));
    let (code, out) = dry_run(&chat);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("4 per call, the reply a stream"), "{out}");
}

/// `--proto` beside `--body-file`: the file's bytes are the message of every call (the
/// .proto gives the method, not a message); sending the `{}` --data defaults to would leave
/// grpcio's `matched` at 0.
#[test]
fn a_body_file_stays_the_message_beside_a_proto() {
    let Some(mut server) = Server::start(&["--expect", r#"{"user": {"name": "Jo"}}"#]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("jo.bin");
    // HelloRequest { user (1): User { name (1): "Jo" } }, hand-encoded.
    std::fs::write(&file, [0x0a, 0x04, 0x0a, 0x02, b'J', b'o']).unwrap();
    let file = file.display().to_string();
    let doc = load(
        &server.url("SayHello"),
        &["--proto", &proto(), "--body-file", &file],
    );
    let counts = server.counts();
    assert!(u(&doc, "requests") > 50, "{doc:#}");
    assert_eq!(u(&doc, "sent"), u(&counts["calls"], "SayHello"));
    assert_eq!(u(&counts, "matched"), u(&doc, "sent"), "{counts}");
}

/// `-H` is gRPC metadata: grpcio finds a plain key's value as written and a `-bin` key's value
/// as the bytes given (sent base64-encoded, as the protocol requires; sent as written, grpcio
/// refuses every call: `grpc_status 2 UNKNOWN: Bad method header`). The empty message is a
/// valid HelloRequest, so no --proto is needed.
#[test]
fn headers_are_metadata_and_bin_values_go_base64() {
    let Some(mut server) = Server::start(&[
        "--metadata",
        "x-user=alice",
        "--metadata",
        "trace-bin=a\u{1}z",
    ]) else {
        return;
    };
    let doc = load(
        &server.url("SayHello"),
        &["-H", "x-user: alice", "-H", "trace-bin: a\u{1}z"],
    );
    let counts = server.counts();
    eprintln!("sent {}, server {counts}", u(&doc, "sent"));
    assert!(u(&doc, "sent") > 50, "{doc:#}");
    assert_eq!(u(&counts, "metadata_matched"), u(&doc, "sent"), "{counts}");
}

/// `--deadline 200ms` arrives as grpcio's deadline (at most 200 ms left, and not much less);
/// a method slower than it fails as DEADLINE_EXCEEDED, counted by name.
#[test]
fn a_deadline_reaches_the_server_and_a_slower_call_fails_by_name() {
    let Some(mut server) = Server::start(&[]) else {
        return;
    };
    let doc = load(&server.url("SayHello"), &["--deadline", "200ms"]);
    let counts = server.counts();
    let [lo, hi] = [0, 1].map(|i| counts["remaining_s"][i].as_f64().unwrap());
    eprintln!(
        "sent {}, deadline left on arrival {lo:.4}..{hi:.4} s",
        u(&doc, "sent")
    );
    assert!(hi <= 0.2 && lo > 0.05, "{counts}");
    let (code, _, stderr, doc) = common::load_json(
        &server.url("Slow"),
        &[
            "-c",
            "2",
            "-d",
            "1s",
            "--deadline",
            "100ms",
            "--max-error-ratio",
            "1",
        ],
    );
    assert_eq!(code, Some(0), "{stderr}");
    let doc = doc.unwrap();
    let errors = doc["errors"].as_object().unwrap();
    let kinds: Vec<&String> = errors.keys().collect();
    assert_eq!(kinds.len(), 1, "{doc:#}");
    assert!(
        kinds[0].starts_with("grpc_status 4 DEADLINE_EXCEEDED"),
        "{doc:#}"
    );
    assert!(errors[kinds[0]].as_u64().unwrap() >= 10, "{doc:#}");
    assert_eq!(u(&doc, "requests"), 0, "{doc:#}");
}

/// `--verbose` with `--proto` makes one call before the load and prints its reply decoded
/// by the `.proto`'s output type (grpcio's "hello NAME" from the name it decoded); that call
/// is the only one grpcio counts beyond the load's `sent`. A failing method shows its status.
#[test]
fn verbose_prints_the_first_reply_decoded_as_json() {
    let Some(mut server) = Server::start(&[]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let p = proto();
    let port = server.port;
    let verbose = |method: &str, json: &Path| {
        let url = format!("grpc://127.0.0.1:{port}/greeter.Greeter/{method}");
        common::cli(&[
            "load",
            &url,
            "-v",
            "-c",
            "1",
            "-d",
            "300ms",
            "--max-error-ratio",
            "1",
            "--proto",
            &p,
            "--data",
            r#"{"user": {"name": "Jo"}}"#,
            "--json",
            json.to_str().unwrap(),
        ])
    };
    let out = verbose("SayHello", &json);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(r#"first reply (greeter.HelloReply): {"message":"hello Jo"}"#),
        "{stderr}"
    );
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(server.calls("SayHello"), u(&doc, "sent") + 1, "{doc:#}");
    let out = verbose("Exhausted", &json);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("first reply: none (grpc_status 8 RESOURCE_EXHAUSTED: over quota)"),
        "{stderr}"
    );
}

/// `--data` with placeholders: each call's message is made per call, and grpcio decodes
/// what they promise. `{seq}` gives every call its own value (grpcio sees exactly `sent`
/// distinct request ids, an int64 the placeholder stands for) and the same value everywhere
/// in one call (the name is "u-" and the id); `{uniform:10}` in an int32 stays in 0..=9 and
/// draws each of them; `{zipf:0.99:1000}` in a repeated string's second element is 3 digits
/// below 1000 beside a fixed first one; `{conn}` in a map value is each connection's number.
/// A message encoded once (as before) would give grpcio one id; a wrong length or tag, a
/// refusal to decode.
#[test]
fn per_call_placeholders_reach_grpcio_distinct_and_in_range() {
    let Some(mut server) = Server::start(&["--record", "yes"]) else {
        return;
    };
    let data = r#"{"user": {"name": "u-{seq}", "age": {uniform:10},
        "tags": ["fixed", "k{zipf:0.99:1000}"]}, "requestId": {seq},
        "labels": {"conn": "{conn}", "region": "eu"}}"#;
    let doc = load(
        &server.url("SayHello"),
        &["--proto", &proto(), "--data", data],
    );
    let requests = server.requests();
    let sent = u(&doc, "sent");
    eprintln!("sent {sent}, grpcio decoded {}", requests.len());
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    assert!(sent > 200, "{doc:#}");
    assert_eq!(requests.len() as u64, sent);
    // protobuf's JSON mapping leaves out a field at its default (0).
    let number = |v: &Value| -> u64 {
        match v {
            Value::Null => 0,
            Value::String(s) => s.parse().unwrap(),
            other => other.as_u64().unwrap(),
        }
    };
    let mut ids = std::collections::HashSet::new();
    let mut ages = std::collections::BTreeSet::new();
    let mut conns = std::collections::BTreeSet::new();
    for r in &requests {
        let id = number(&r["requestId"]);
        ids.insert(id);
        let user = &r["user"];
        assert_eq!(user["name"], format!("u-{id}"), "{r}");
        let age = number(&user["age"]);
        assert!(age <= 9, "{r}");
        ages.insert(age);
        let tags = user["tags"].as_array().unwrap();
        assert_eq!(tags[0], "fixed", "{r}");
        let key = tags[1].as_str().unwrap().strip_prefix('k').unwrap();
        assert!(key.len() == 3 && key.parse::<u64>().unwrap() < 1000, "{r}");
        assert_eq!(r["labels"]["region"], "eu", "{r}");
        conns.insert(r["labels"]["conn"].as_str().unwrap().to_string());
    }
    assert_eq!(ids.len() as u64, sent, "{{seq}} values repeated");
    assert_eq!(ages, (0..10).collect(), "{{uniform:10}} drew {ages:?}");
    assert_eq!(conns, ["0", "1"].map(String::from).into(), "{conns:?}");
}

/// A placeholder the field cannot take is refused before any connection, with its JSON path:
/// in an enum, letters in an int32, a key space larger than an int32, text around a number's
/// placeholder, a placeholder in a map key.
#[test]
fn a_placeholder_the_field_cannot_take_is_refused_before_the_load() {
    let Some(mut server) = Server::start(&[]) else {
        return;
    };
    let p = proto();
    let cases: [(&str, &[&str]); 5] = [
        (
            r#"{"user": {"tier": "{seq}"}}"#,
            &[".user.tier: a placeholder cannot make a value of enum greeter.Tier"],
        ),
        (
            r#"{"user": {"age": "{rand:4}"}}"#,
            &[".user.age: {rand:4} makes letters, not a int32"],
        ),
        (
            r#"{"user": {"age": {uniform:3000000000}}}"#,
            &[".user.age: {uniform:3000000000} draws numbers up to 2999999999, more than a int32 holds"],
        ),
        (
            r#"{"requestId": "7{seq}"}"#,
            &[".requestId: a int64", "nothing around it", "not \"7{seq}\""],
        ),
        (
            r#"{"labels": {"k{seq}": "v"}}"#,
            &[".labels: a map key cannot hold a placeholder"],
        ),
    ];
    for (data, says) in cases {
        assert_refused(
            &mut server,
            "SayHello",
            &["--proto", &p, "--data", data],
            says,
        );
    }
}
