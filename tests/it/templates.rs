//! `--requests FILE` against real servers: the template's paths, methods and bodies reach
//! nginx (its access log), its keys reach redis (DBSIZE, a hash counter) with `sent` still
//! redis's own count, the spec's `[client] requests`, and bad files refused before any load.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::common;

/// `stairbench load URL -q ARGS --json FILE`: (exit status, stderr, JSON).
fn load(url: &str, args: &[&str]) -> (Option<i32>, String, Option<Value>) {
    let (code, _, stderr, doc) = common::load_json(url, args);
    (code, stderr, doc)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn count(doc: &Value, key: &str) -> u64 {
    doc[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key}: {doc:#}"))
}

#[test]
fn http_template_paths_methods_and_bodies_reach_nginx() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let extra = format!(
        "access_log {};\n location /k/ {{ return 200 \"k\\n\"; }}\n location /p/ {{ return 201 \"p\\n\"; }}",
        log.display()
    );
    let Some(nginx) = common::start_nginx_with(&extra) else {
        return;
    };
    std::fs::write(dir.path().join("blob.bin"), "0123456789").unwrap();
    let file = write(
        dir.path(),
        "req.txt",
        "# test\nweight=3 GET /k/{uniform:1000}\nPOST /p/{seq}\n    Content-Type: text/plain\n    body x={rand:100}\nPUT /p/blob\n    body @blob.bin\n",
    );
    let url = nginx.url("/");
    let (code, stderr, doc) = load(&url, &["-c", "4", "-d", "1s", "--requests", &file]);
    assert_eq!(code, Some(0), "{stderr}");
    let doc = doc.unwrap();
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    // Every request the load sent is in the log (and nothing else reached /k/ or /p/).
    assert_eq!(lines.len() as u64, count(&doc, "sent"), "{doc:#}");
    let request = |l: &str| l.split('"').nth(1).unwrap_or("").to_string();
    let gets: Vec<String> = lines
        .iter()
        .map(|l| request(l))
        .filter(|r| r.starts_with("GET /k/"))
        .collect();
    let posts: Vec<String> = lines
        .iter()
        .map(|l| request(l))
        .filter(|r| r.starts_with("POST /p/"))
        .collect();
    let puts = lines
        .iter()
        .filter(|l| request(l).starts_with("PUT /p/blob "))
        .count();
    assert_eq!(gets.len() + posts.len() + puts, lines.len());
    // Weights 3:1:1.
    let share = gets.len() as f64 / lines.len() as f64;
    assert!((0.5..0.7).contains(&share), "GET share {share}");
    assert!(puts > 0 && !posts.is_empty());
    // Keys zero-padded to three digits, drawn uniformly: hundreds of distinct paths.
    let keys: BTreeSet<&String> = gets.iter().collect();
    assert!(keys.len() > 300, "{} distinct GET paths", keys.len());
    assert!(
        gets.iter().all(|g| g.len() == "GET /k/123 HTTP/1.1".len()),
        "{gets:?}"
    );
    // {seq} is unique over the connections: every POST path differs.
    let distinct: BTreeSet<&String> = posts.iter().collect();
    assert_eq!(distinct.len(), posts.len());
    // The bodies were framed right: nginx answered each with its status, none with 400.
    assert!(
        lines
            .iter()
            .all(|l| l.contains("\" 200 ") || l.contains("\" 201 ")),
        "{lines:?}"
    );
}

#[test]
fn redis_template_keys_reach_redis_and_sent_is_its_count() {
    let Some(redis) = common::start_redis() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = write(
        dir.path(),
        "redis.txt",
        "SET key:{seq} {rand:64}\nHINCRBY counts c 1\n",
    );
    let before = redis.commands_processed();
    let (code, stderr, doc) = load(
        &redis.url(),
        &[
            "-c",
            "4",
            "--depth",
            "8",
            "-d",
            "1s",
            "--requests",
            &file,
            "--order",
            "sequential",
        ],
    );
    let after = redis.commands_processed();
    assert_eq!(code, Some(0), "{stderr}");
    let doc = doc.unwrap();
    let sent = count(&doc, "sent");
    assert!(sent > 100, "{doc:#}");
    assert_eq!(after - before - 1, sent, "{doc:#}");
    // Every SET wrote a key of its own, every HINCRBY added 1: together, every command.
    let dbsize: u64 = redis.command(&["DBSIZE"])[1..].parse().unwrap();
    let incrs: u64 = redis.command(&["HGET", "counts", "c"]).parse().unwrap();
    assert_eq!(dbsize - 1 + incrs, sent);
    // In order, each connection alternates: half the commands each, give or take one per
    // connection.
    assert!(incrs.abs_diff(sent / 2) <= 4, "{incrs} of {sent}");
    assert_eq!(redis.command(&["STRLEN", "key:0"]), ":64");
}

#[test]
fn a_spec_takes_a_request_file_relative_to_itself() {
    let Some(program) = common::find_program("redis-server") else {
        common::skip_or_fail(common::not_installed("redis-server"));
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    write(
        dir.path(),
        "cmds.txt",
        "weight=1 SET k:{conn}:{seq} v\nweight=3 GET k:{uniform:100}\n",
    );
    let spec = write(
        dir.path(),
        "spec.toml",
        &format!(
            "name = \"t\"\nduration = \"500ms\"\nwarmup = \"0s\"\nclients = [2]\nplacements = [\"separated\"]\n\
             [[targets]]\nname = \"redis\"\ncommand = \"{} --port {{port}} --bind 127.0.0.1 --save '' --appendonly no\"\n\
             url = \"redis://127.0.0.1:{{port}}\"\n[client]\nrequests = \"cmds.txt\"\n",
            program.display()
        ),
    );
    let out = common::run_spec(Path::new(&spec), &dir.path().join("out"));
    common::assert_success(&out);
    let steps = common::steps_json(&dir.path().join("out"));
    assert_eq!(steps.len(), 1);
    let load = &steps[0];
    assert!(load["requests"].as_u64().unwrap() > 0, "{load:#}");
    assert_eq!(load["errors"], serde_json::json!({}), "{load:#}");
    // GETs of keys nobody SET under that name: all misses, and counted as such.
    assert_eq!(load["redis_hits"], 0, "{load:#}");

    write(dir.path(), "cmds.txt", "GET k:{nope}\n");
    let out = common::run_spec(Path::new(&spec), &dir.path().join("out2"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cmds.txt:1: unknown placeholder {nope}"),
        "{stderr}"
    );
}

#[test]
fn bad_request_files_name_file_and_line_before_any_load() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 1: a load that started would exit 1 (cannot connect).
    for (text, says) in [
        (
            "GET /\nGET /{sequence}\n",
            "req.txt:2: unknown placeholder {sequence}",
        ),
        ("weight=0 GET /\n", "req.txt:1: bad weight \"0\""),
        ("weight=2.5 GET /\n", "req.txt:1: bad weight \"2.5\""),
        (
            "GET /\nPOST /\n  body @missing.bin\n",
            "req.txt:3: cannot read body file",
        ),
        (
            "GET / HTTP/1.1\n",
            "req.txt:1: an HTTP request line is METHOD PATH",
        ),
        ("# only a comment\n", "holds no request"),
    ] {
        let file = write(dir.path(), "req.txt", text);
        let (code, stderr, _) = load("http://127.0.0.1:1/", &["--requests", &file]);
        assert_eq!(code, Some(2), "{text:?}: {stderr}");
        assert!(stderr.contains(says), "{text:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
    let (code, stderr, _) = load("http://127.0.0.1:1/", &["--requests", "/no/such/file"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("cannot read request file /no/such/file"),
        "{stderr}"
    );
    let file = write(dir.path(), "req.txt", "GET /\n  X-A: 1\n");
    let (code, stderr, _) = load("redis://127.0.0.1:1", &["--requests", &file]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("req.txt:2: a redis command takes no headers"),
        "{stderr}"
    );
}
