//! The `load` command's accounting against real servers: exit statuses (3 above
//! `--max-error-ratio`, 1 when the load cannot run), redis GET hits and misses with and
//! without `--preload`, and the open-file limit checked before any connection is made.

use crate::common;

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use common::load_json as load;

fn assert_schema(doc: &Value) {
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/load.schema.json")).unwrap();
    let errors = crate::schema::validate(&schema, doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
}

#[test]
fn errors_above_the_allowed_ratio_exit_3_and_say_why() {
    let Some(nginx) = common::start_nginx() else {
        return;
    };
    for path in ["/status500", "/no-such-file"] {
        let (code, stdout, stderr, doc) = load(&nginx.url(path), &["-c", "2", "-d", "1s"]);
        assert_eq!(code, Some(3), "{path}: {stdout}{stderr}");
        let doc = doc.expect("the JSON is written before exiting 3");
        assert_eq!(doc["error_ratio"], 1.0, "{path}: {doc:#}");
        assert_schema(&doc);
        let last = stdout.lines().last().unwrap_or("");
        assert_eq!(
            last, "error ratio 1.000 above --max-error-ratio 0.01: exit 3",
            "{path}: {stdout}"
        );
    }
    // Allowed when the user says so.
    let (code, stdout, _, _) = load(
        &nginx.url("/status500"),
        &["-c", "1", "-d", "300ms", "--max-error-ratio", "1"],
    );
    assert_eq!(code, Some(0), "{stdout}");
}

#[test]
fn a_healthy_load_exits_0_with_error_ratio_0() {
    let Some(nginx) = common::start_nginx() else {
        return;
    };
    let (code, stdout, stderr, doc) = load(&nginx.url("/"), &["-c", "2", "-d", "1s"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let doc = doc.unwrap();
    assert_eq!(doc["error_ratio"], 0.0);
    assert!(doc["requests"].as_u64().unwrap() > 100, "{doc:#}");
    assert!(!stdout.contains("exit 3"), "{stdout}");
}

#[test]
fn a_load_that_cannot_connect_exits_1_naming_the_cause() {
    let port = common::free_port();
    let (code, _, stderr, doc) = load(&format!("http://127.0.0.1:{port}/"), &["-d", "1s"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(doc.is_none());
    assert!(
        stderr.contains("ECONNREFUSED") && stderr.contains("is the server running"),
        "{stderr}"
    );
    // A usage error stays 2.
    let (code, _, stderr, _) = load("gopher://127.0.0.1:1", &[]);
    assert_eq!(code, Some(2), "{stderr}");
}

#[test]
fn redis_misses_on_an_empty_database_and_preload_turns_them_into_hits() {
    let Some(redis) = common::start_redis() else {
        return;
    };
    let args = ["-c", "4", "-d", "800ms", "--keys", "500"];
    let (code, stdout, stderr, doc) = load(&redis.url(), &args);
    assert_eq!(code, Some(0), "{stderr}");
    let doc = doc.unwrap();
    assert_schema(&doc);
    assert_eq!(doc["redis_hits"], 0, "{doc:#}");
    let misses = doc["redis_misses"].as_u64().unwrap();
    assert_eq!(misses, doc["requests"].as_u64().unwrap(), "{doc:#}");
    assert!(
        stdout.contains("missed") && stdout.contains("--preload"),
        "the output says the load measured misses: {stdout}"
    );

    let before = redis.commands_processed();
    let mut preload = args.to_vec();
    preload.push("--preload");
    let (code, stdout, stderr, doc) = load(&redis.url(), &preload);
    let after = redis.commands_processed();
    assert_eq!(code, Some(0), "{stderr}");
    let doc = doc.unwrap();
    assert_eq!(doc["redis_misses"], 0, "{doc:#}");
    assert_eq!(doc["redis_hits"], doc["requests"], "{doc:#}");
    assert!(!stdout.contains("--preload"), "{stdout}");
    // The 500 SETs are counted: sent is still redis's own count.
    assert_eq!(after - before - 1, doc["sent"].as_u64().unwrap(), "{doc:#}");
    assert_eq!(redis.command(&["DBSIZE"]), ":500");
    assert_eq!(redis.command(&["GET", "key:499"]), "x".repeat(16));
}

#[test]
fn preload_is_refused_for_other_protocols() {
    let (code, _, stderr, _) = load("http://127.0.0.1:1/", &["--preload"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--preload works with redis://"), "{stderr}");
}

/// `stairbench load` with RLIMIT_NOFILE set to (soft, hard) before it starts: its output
/// and the peak RSS of the process in KiB.
fn load_with_nofile(soft: u64, hard: u64, args: &[&str]) -> (Option<i32>, String, String, i64) {
    let mut cmd = common::cli_cmd();
    cmd.arg("load")
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    #[allow(clippy::zombie_processes)] // reaped by wait4 below, which also gives its rusage
    let mut child = cmd.spawn().unwrap();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, writing into values we own.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    (code, stdout, stderr, usage.ru_maxrss)
}

#[test]
fn too_low_an_open_file_limit_fails_at_once_saying_what_to_do() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("msgr://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let started = Instant::now();
    let (code, _, stderr, max_rss_kib) =
        load_with_nofile(256, 256, &[&url, "-c", "100000", "-d", "2s"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("100000 connections need")
            && stderr.contains("at most 256")
            && stderr.contains("ulimit -n")
            && stderr.contains("use at most"),
        "{stderr}"
    );
    assert!(!stderr.contains("is the server running"), "{stderr}");
    // It fails before allocating per-connection state (64 KiB of buffer each).
    assert!(max_rss_kib < 100_000, "peak RSS {max_rss_kib} KiB");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_soft_open_file_limit_is_raised_to_the_hard_one() {
    let Some(nginx) = common::start_nginx() else {
        return;
    };
    let (code, stdout, stderr, _) =
        load_with_nofile(256, 4096, &[&nginx.url("/"), "-c", "400", "-d", "1s", "-q"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("errors: none"), "{stdout}");
}

#[test]
fn help_and_scheme_errors_list_shm() {
    let out = common::cli(&["load", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("shm://NAME"), "{help}");
    assert!(
        help.contains("--max-error-ratio") && help.contains("--preload"),
        "{help}"
    );
    let (_, _, stderr, _) = load("ftp://127.0.0.1:1", &[]);
    assert!(stderr.contains("msgr, shm or kvd"), "{stderr}");
}
