//! Servers already running (`url` with no builtin or command): stairbench starts nothing,
//! checks the server answers and its observed process exists before any load, observes it by
//! `pid`, `pidfile` or `process`, and otherwise records its server-side figures as not
//! observed. Real nginx and redis, started by the tests on loopback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use stairbench::analyze::run::diagnosis::{Limit, Metric};
use stairbench::report::json::read_analysis_json;

use crate::common;

/// A spec file in `dir` loading `url` with the given observation line (may be empty).
fn spec(dir: &Path, url: &str, observe: &str, clients: &str) -> PathBuf {
    let path = dir.join("spec.toml");
    let text = format!(
        "name = \"running\"\nduration = \"1s\"\nwarmup = \"300ms\"\nclients = {clients}\n\n[[targets]]\nname = \"srv\"\nurl = \"{url}\"\n{observe}\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn schema_errors(dir: &Path) -> Vec<String> {
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    let text = std::fs::read_to_string(dir.join("steps.jsonl")).unwrap();
    text.lines()
        .flat_map(|l| crate::schema::validate(&schema, &serde_json::from_str(l).unwrap()))
        .collect()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

#[test]
fn a_url_alone_runs_with_server_figures_not_observed() {
    let Some(redis) = common::start_redis() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = spec(dir.path(), &redis.url(), "", "[1, 2]");
    let before = redis.commands_processed();
    let out_dir = dir.path().join("out");
    let out = common::run_spec(&path, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 2);
    let mut sent = 0;
    for s in &steps {
        assert_eq!(s["status"], "ok", "{s}");
        let why = s["server_not_observed"].as_str().unwrap_or_default();
        assert!(why.contains("no pid, pidfile or process"), "{s}");
        assert_eq!(s["cpu_us_per_req"]["total"], Value::Null, "{s}");
        assert_eq!(s["cs_per_req"], Value::Null, "{s}");
        assert_eq!(s["server"]["server"], Value::Null, "{s}");
        assert_eq!(
            s["server_cpus"], "",
            "a server not observed has no cpus: {s}"
        );
        assert!(s["requests"].as_u64().unwrap() > 0, "{s}");
        sent += s["sent"].as_u64().unwrap();
    }
    // Nothing was started: the load went to the redis the test started.
    assert!(redis.commands_processed() - before >= sent, "sent {sent}");
    assert_eq!(schema_errors(&out_dir), Vec::<String>::new());
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        md.contains("Target srv: server-side figures not observed"),
        "{md}"
    );
    assert!(md.contains("| not observed | not observed |"), "{md}");
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(html.contains("not observed"));
    let analysis = read_analysis_json(&out_dir).unwrap();
    let d = &analysis.diagnosis[0];
    // A server not observed gets no server-side limit: the load generator's, when a level
    // saturated it that no later level outgrew, else none. The last level saturated is the
    // client's limit; none saturated is no limit; only the first saturated depends on
    // whether the second outgrew it beyond noise, and then the level named is the first.
    let saturated: Vec<bool> = (steps.iter())
        .map(|s| s["client_saturated"].as_bool().unwrap())
        .collect();
    match (d.limit, saturated.as_slice()) {
        (Limit::Client, [.., true]) | (Limit::Undetermined, [false, false]) => {}
        (Limit::Client | Limit::Undetermined, [true, false]) => {
            let named = d
                .evidence
                .iter()
                .find(|e| e.metric == Metric::ClientSaturated);
            assert!(
                named.is_none_or(|e| e.at_clients == Some(1)),
                "the saturated level is 1 client: {d:?}"
            );
        }
        _ => panic!(
            "{:?} with the generator saturated at {saturated:?}: {d:?}",
            d.limit
        ),
    }
    let metrics: Vec<Metric> = d.evidence.iter().map(|e| e.metric).collect();
    assert!(
        !metrics.contains(&Metric::ServerCpuPct) && !metrics.contains(&Metric::CpuUsPerReq),
        "{metrics:?}"
    );
    assert!(metrics.contains(&Metric::ServerObserved), "{metrics:?}");
}

/// Runs `spec` and returns its ok steps' server CPU per request (µs) and server cpus.
fn observed_cpu(path: &Path, out_dir: &Path) -> Vec<(f64, String)> {
    let out = common::run_spec(path, out_dir);
    common::assert_success(&out);
    assert_eq!(schema_errors(out_dir), Vec::<String>::new());
    common::steps_json(out_dir)
        .iter()
        .map(|s| {
            assert_eq!(s["status"], "ok", "{s}");
            assert!(s.get("server_not_observed").is_none(), "{s}");
            let cpu = s["cpu_us_per_req"]["total"].as_f64();
            (
                cpu.unwrap_or_else(|| panic!("no server CPU per request: {s}")),
                s["server_cpus"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_pid_and_a_pidfile_give_server_cpu_per_request() {
    let (Some(redis), Some(nginx)) = (common::start_redis(), common::start_nginx()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let by_pid = format!("pid = {}", redis.process.pgid());
    let path = spec(dir.path(), &redis.url(), &by_pid, "[2]");
    for (cpu, cpus) in observed_cpu(&path, &dir.path().join("pid")) {
        // redis spends microseconds per command; 0 would mean it was not the one observed.
        assert!(cpu > 0.5 && cpu < 1000.0, "{cpu} µs/request");
        assert!(!cpus.is_empty());
    }
    // nginx's pid file names its master; its worker, which does the work, is in its tree.
    let pidfile = format!(
        "pidfile = \"{}\"",
        nginx.dir.path().join("nginx.pid").display()
    );
    let path = spec(dir.path(), &nginx.url("/"), &pidfile, "[2]");
    for (cpu, _) in observed_cpu(&path, &dir.path().join("pidfile")) {
        assert!(cpu > 0.5 && cpu < 1000.0, "{cpu} µs/request");
    }
}

/// redis-server started under a name no other process has (a symbolic link to it), so that
/// `process = NAME` finds exactly this one; killed on drop.
struct NamedRedis {
    child: Child,
    port: u16,
    name: String,
    _dir: tempfile::TempDir,
}

impl NamedRedis {
    fn start() -> Option<NamedRedis> {
        let Some(program) = common::find_program("redis-server") else {
            common::skip_or_fail(common::not_installed("redis-server"));
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        // Its process name (a comm of at most 15 bytes), unique to this test: one test uses it.
        let name = format!("sbrun{}", std::process::id());
        let link = dir.path().join(&name);
        std::os::unix::fs::symlink(&program, &link).unwrap();
        let port = common::free_port();
        let child = Command::new(&link)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "{name} did not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(NamedRedis {
            child,
            port,
            name,
            _dir: dir,
        })
    }
}

impl Drop for NamedRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_process_name_is_found_at_each_step() {
    let Some(redis) = NamedRedis::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let by_name = format!("process = \"{}\"", redis.name);
    let path = spec(dir.path(), &url, &by_name, "[1, 2]");
    let steps = observed_cpu(&path, &dir.path().join("out"));
    assert_eq!(steps.len(), 2);
    for (cpu, _) in steps {
        assert!(cpu > 0.5 && cpu < 1000.0, "{cpu} µs/request");
    }
}

#[test]
fn an_unreachable_url_exits_2_before_any_load_naming_target_and_address() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let path = spec(dir.path(), &format!("http://127.0.0.1:{port}/"), "", "[1]");
    let out_dir = dir.path().join("out");
    let out = common::run_spec(&path, &out_dir);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("nothing answers at 127.0.0.1:{port}"))
            && err.contains("target \"srv\"")
            && err.contains("targets[0].url"),
        "{err}"
    );
    assert!(!out_dir.join("steps.jsonl").exists(), "no step may run");
}

#[test]
fn a_pid_that_does_not_exist_exits_2_naming_its_key() {
    let Some(redis) = common::start_redis() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = spec(dir.path(), &redis.url(), "pid = 2147483647", "[1]");
    let out_dir = dir.path().join("out");
    let before = redis.commands_processed();
    let out = common::run_spec(&path, &out_dir);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("spec.toml:9:") && err.contains("targets[0].pid"),
        "{err}"
    );
    assert!(err.contains("no process 2147483647 is running"), "{err}");
    assert!(!out_dir.join("steps.jsonl").exists());
    // The INFO of the first count only: no load reached the server.
    assert_eq!(redis.commands_processed() - before, 1);
}

#[test]
fn dry_run_says_the_server_is_not_started_and_how_it_is_observed() {
    let dir = tempfile::tempdir().unwrap();
    // The dry run contacts nothing: no server needs to listen.
    let path = spec(
        dir.path(),
        "redis://127.0.0.1:6390",
        "pidfile = \"redis.pid\"",
        "[1, 4]",
    );
    let out = common::cli(&[
        std::ffi::OsStr::new("run"),
        std::ffi::OsStr::new("--dry-run"),
        path.as_os_str(),
    ]);
    common::assert_success(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    let pidfile = dir.path().canonicalize().unwrap().join("redis.pid");
    assert!(
        text.contains(&format!(
            "server: already running at 127.0.0.1:6390, not started; observed by the pid in {} (found again at each step)",
            pidfile.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("srv.shared.c4.r0: server cpus (its own) client cpus"),
        "{text}"
    );
}

#[test]
fn keys_that_do_not_fit_a_server_already_running_are_refused_where_written() {
    let cases = [
        (
            "url = \"redis://127.0.0.1:{port}\"",
            "takes no placeholders",
        ),
        (
            "url = \"redis://127.0.0.1:6379\"\nport = 6379",
            "takes no port",
        ),
        (
            "url = \"redis://127.0.0.1:6379\"\nhost = \"b\"",
            "another host is not supported yet",
        ),
        ("url = \"shm://ring\"", "reached over TCP"),
        (
            "url = \"redis://127.0.0.1:6379\"\npid = 1\nprocess = \"x\"",
            "not several",
        ),
        ("builtin = \"msgr\"\npid = 1", "a target stairbench starts"),
        (
            "url = \"redis://127.0.0.1:6379\"\n[profile]\nat = [1]",
            "needs pid, pidfile or process",
        ),
        ("", "has neither builtin"),
    ];
    for (target, expected) in cases {
        let text = format!(
            "name = \"x\"\nclients = [1]\n[hosts]\nb = \"ssh://u@10.0.0.2\"\n[[targets]]\nname = \"srv\"\n{target}\n"
        );
        let spec = stairbench::sweep::spec::SpecFile::parse(Path::new("s.toml"), &text).unwrap();
        let err = match stairbench::sweep::plan::Plan::new(spec, PathBuf::from("/bin/true")) {
            Ok(_) => panic!("{target:?} was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(expected) && err.starts_with("s.toml:"),
            "{target:?}: {err}"
        );
    }
}

/// The redis-server `examples/running-redis.toml` expects, as its header starts it (in the
/// foreground here, so it ends with the test); None when redis-server is not installed.
pub fn example_server() -> Option<ExampleRedis> {
    const ARGS: &str = "--port 6390 --bind 127.0.0.1 --save '' --appendonly no --pidfile /tmp/stairbench-redis-6390.pid";
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/running-redis.toml");
    let header = std::fs::read_to_string(example).unwrap();
    assert!(
        header.contains(&format!("redis-server {ARGS} --daemonize yes")),
        "the example's header starts its server otherwise"
    );
    let program = common::find_program("redis-server")?;
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", 6390)).is_err(),
        "port 6390, which examples/running-redis.toml loads, is already taken"
    );
    let child = Command::new(program)
        .args(ARGS.split(' ').map(|a| if a == "''" { "" } else { a }))
        .args(["--daemonize", "no"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = ExampleRedis(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", 6390)).is_err()
        || !Path::new("/tmp/stairbench-redis-6390.pid").exists()
    {
        assert!(
            Instant::now() < deadline,
            "redis-server did not listen on 6390"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Some(server)
}

/// The example's redis-server, killed on drop.
pub struct ExampleRedis(Child);

impl Drop for ExampleRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `[client] cacert` and `insecure` reach the engine: an nginx with a certificate of the
/// test's own CA (already running, as a target given by url) is loaded over TLS with either;
/// a cacert file that is not one is refused where it is written.
#[test]
fn a_spec_loads_https_with_its_cacert_or_insecure() {
    let Some(certs) = crate::certs::make_certs() else {
        return;
    };
    let Some((_nginx, tls_port)) = crate::certs::start_nginx_tls(&certs, "", "") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(certs.dir.path().join("ca.pem"), dir.path().join("ca.pem")).unwrap();
    let url = format!("https://localhost:{tls_port}/");
    for (client, name) in [
        ("cacert = \"ca.pem\"", "cacert"),
        ("insecure = true", "insecure"),
    ] {
        let path = spec(dir.path(), &url, &format!("\n[client]\n{client}"), "[1]");
        let out_dir = dir.path().join(name);
        common::assert_success(&common::run_spec(&path, &out_dir));
        let steps = common::steps_json(&out_dir);
        assert_eq!(steps[0]["status"], "ok", "{name}: {}", steps[0]);
        assert!(steps[0]["requests"].as_u64().unwrap() > 0);
        assert!(
            steps[0]["tls_handshakes"].as_u64().unwrap() >= 1,
            "{}",
            steps[0]
        );
    }
    std::fs::write(dir.path().join("bad.pem"), "not a certificate\n").unwrap();
    let path = spec(dir.path(), &url, "\n[client]\ncacert = \"bad.pem\"", "[1]");
    let out = common::run_spec(&path, &dir.path().join("bad"));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("client.cacert") && err.contains("spec.toml:11:"),
        "{err}"
    );
}

#[test]
fn a_level_where_every_request_failed_stops_its_series_and_says_why() {
    let Some(nginx) = common::start_nginx_with("location /forbidden { return 403; }") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = spec(dir.path(), &nginx.url("/forbidden"), "", "[1, 2, 4, 8]");
    let out_dir = dir.path().join("out");
    let out = common::run_spec(&path, &out_dir);
    let steps = common::steps_json(&out_dir);
    let statuses: Vec<&str> = steps
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    // Without the stop, 2, 4 and 8 clients each ran a whole step of 403s.
    assert_eq!(
        statuses,
        ["errors", "skipped", "skipped", "skipped"],
        "{steps:?}"
    );
    let why = steps[1]["reason"].as_str().unwrap();
    assert!(
        why.starts_with("every request failed at 1 client (http_4xx ")
            && why.contains(" (403 ×")
            && why.ends_with("the rest of the series was not run"),
        "{why}"
    );
    let err = stderr(&out);
    assert!(err.contains("srv / "), "the note names the series: {err}");
    // The reason once (the note), then a count of the steps it skipped: not four copies.
    assert_eq!(err.matches(why).count(), 1, "{err}");
    assert!(
        err.contains("... 3 step(s) skipped for that reason"),
        "{err}"
    );
    // Each failure under its class and its status code, every one a 403.
    let load_errors = steps[0]["errors"]["http_4xx"].as_u64().unwrap();
    assert_eq!(
        steps[0]["error_statuses"],
        serde_json::json!({"403": load_errors})
    );
    // No request completed: no latency (null), not a fast 0 µs.
    assert_eq!(
        steps[0]["latency_us"]["p99"],
        serde_json::Value::Null,
        "{steps:?}"
    );
    assert_eq!(steps[0]["latency_us"]["mean"], serde_json::Value::Null);
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    let row = md.lines().find(|l| l.contains("| errors: ")).unwrap();
    assert!(
        row.contains("| 0 | – | – | – |"),
        "throughput 0, no latency: {row}"
    );
    assert!(!md.contains("NaN"), "{md}");
}
