//! The test helpers of `common` (tests/it/common.rs) themselves: nginx and redis start on a free loopback
//! port, their counters move by exactly what was sent, and dropping them leaves no process.

use crate::common;

use std::path::Path;

use crate::common::{group_members, http_get, parse_stub_requests, start_nginx, start_redis};

fn is_gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn nginx_serves_counts_requests_and_leaves_nothing_behind() {
    let Some(nginx) = start_nginx() else { return };
    assert_eq!(http_get(nginx.port, "/"), (200, "hello\n".to_string()));
    assert_eq!(http_get(nginx.port, "/status500").0, 500);

    let before = nginx.stub_requests();
    for _ in 0..5 {
        assert_eq!(http_get(nginx.port, "/").0, 200);
    }
    let after = nginx.stub_requests();
    assert_eq!(
        after - before,
        5 + 1,
        "5 GETs and the second status request"
    );

    let pgid = nginx.process.pgid();
    let members = group_members(pgid);
    assert!(
        members.len() >= 2,
        "master and worker in one group: {members:?}"
    );
    drop(nginx);
    assert!(
        group_members(pgid).is_empty(),
        "nginx processes left: {:?}",
        group_members(pgid)
    );
    assert!(
        members.iter().all(|&pid| is_gone(pid)),
        "{members:?} still in /proc"
    );
}

#[test]
fn redis_counts_commands_and_leaves_nothing_behind() {
    let Some(redis) = start_redis() else { return };
    assert!(redis.url().starts_with("redis://127.0.0.1:"));
    let before = redis.commands_processed();
    assert_eq!(redis.command(&["SET", "k", "v"]), "+OK");
    assert_eq!(redis.command(&["GET", "k"]), "v");
    assert!(redis.command(&["NOSUCH"]).starts_with("-ERR"));
    let after = redis.commands_processed();
    // SET, GET and the first INFO; redis does not count an unknown command.
    assert_eq!(after - before, 3, "before {before}, after {after}");

    let pid = redis.process.pgid();
    drop(redis);
    assert!(group_members(pid).is_empty());
    assert!(is_gone(pid), "redis-server {pid} still in /proc");
}

#[test]
fn two_servers_get_their_own_ports() {
    let (Some(a), Some(b)) = (start_redis(), start_redis()) else {
        return;
    };
    assert_ne!(a.port, b.port);
    a.command(&["SET", "only-in-a", "1"]);
    assert_eq!(b.command(&["EXISTS", "only-in-a"]), ":0");
}

#[test]
fn stub_status_body_is_read() {
    let body = "Active connections: 1 \nserver accepts handled requests\n 2 2 7 \nReading: 0 Writing: 1 Waiting: 0 \n";
    assert_eq!(parse_stub_requests(body), Some(7));
    assert_eq!(parse_stub_requests("nothing"), None);
}

#[test]
fn the_binary_under_test_exists() {
    let bin = common::stairbench_bin();
    assert!(bin.is_file(), "{} missing", bin.display());
}
