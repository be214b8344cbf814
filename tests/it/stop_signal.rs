//! Targets with their own stop signal: PostgreSQL (Debian's, started by the test as a target
//! command, loaded by pgbench through the `regex` parser) stops cleanly with
//! `stop_signal = "INT"` (a fast shutdown) instead of being killed after its TERM ("smart"
//! shutdown) waits.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest PostgreSQL server binaries Debian installed (`/usr/lib/postgresql/N/bin`).
fn postgres_bin_dir() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path().join("bin")))
        .filter(|d| d.join("postgres").is_file() && d.join("initdb").is_file())
        .collect();
    dirs.sort();
    dirs.pop()
}

/// `argv` as the command line that runs it as user postgres when we are root (PostgreSQL
/// refuses to run as root), or as ourselves otherwise.
fn as_postgres(argv: &str) -> String {
    if unsafe { libc::geteuid() } == 0 {
        format!("setpriv --reuid=postgres --regid=postgres --init-groups {argv}")
    } else {
        argv.to_string()
    }
}

/// A fresh database cluster in `dir` (trust authentication, user postgres).
fn initdb(bin: &Path, dir: &Path) -> PathBuf {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let data = dir.join("data");
    let line = as_postgres(&format!(
        "{} -D {} -U postgres --auth=trust --no-sync -E UTF8",
        bin.join("initdb").display(),
        data.display()
    ));
    let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
    assert!(
        out.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    data
}

#[test]
fn postgresql_stopped_with_int_shuts_down_fast_and_is_not_killed() {
    let Some(bin) = postgres_bin_dir() else {
        common::skip_or_fail("no PostgreSQL server (apt-get install postgresql)");
        return;
    };
    if common::find_program("pgbench").is_none() || common::find_program("setpriv").is_none() {
        common::skip_or_fail(
            "pgbench or setpriv missing (apt-get install postgresql-client util-linux)",
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = initdb(&bin, dir.path());
    std::fs::write(dir.path().join("select.sql"), "SELECT 1;\n").unwrap();
    let log = dir.path().join("postgres.log");
    let server = as_postgres(&format!(
        "{} -D {} -p {{port}} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
        bin.join("postgres").display(),
        data.display(),
        dir.path().display()
    ));
    let spec = format!(
        r#"name = "pg-stop"
duration = "1s"
warmup = "0s"
clients = [2]
placements = ["shared"]
[[targets]]
name = "pg"
command = "{server} 2>>{log}"
ready = {{ tcp = true, timeout = "30s" }}
stop_signal = "INT"
stop_timeout = "10s"
[client]
command = "pgbench -n -c {{clients}} -T 1 -h 127.0.0.1 -p {{port}} -U postgres -f {sql} postgres"
parser = "regex"
parser_options = {{ patterns = ['actually processed: (?P<requests>[0-9]+)', 'duration: (?P<duration_s>[0-9.]+) s'] }}
"#,
        log = log.display(),
        sql = dir.path().join("select.sql").display()
    );
    let spec_path = dir.path().join("pg.toml");
    std::fs::write(&spec_path, spec).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec_path, &out_dir);
    common::assert_success(&out);
    let notes = std::fs::read_to_string(out_dir.join("notes.txt")).unwrap();
    assert!(!notes.contains("was killed"), "{notes}");
    assert!(
        notes
            .contains("target \"pg\" is stopped with SIGINT and killed if still running 10s later"),
        "{notes}"
    );
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps[0]["status"], "ok", "{:?}", steps[0]);
    let server_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        server_log.contains("received fast shutdown request")
            && server_log.contains("database system is shut down"),
        "{server_log}"
    );
}
