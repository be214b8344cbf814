//! The load loop's system calls per request, counted by `strace -f -c` around the real
//! binary against Debian's memcached and redis: at depth 1, one `sendto` and one `recvfrom`
//! per request, no `epoll_ctl` per request, no `clock_gettime` system call (the vDSO's);
//! pipelined (depth 8), one `sendto` and one `recvfrom` per batch of replies, not per reply.
//!
//! On loopback the kernel's TCP path is about 95% of stairbench's CPU per request (docs/
//! benchmarks.md, memcached vs memcaslap), so what is left to lose is system calls: a second
//! `recvfrom` that returns EAGAIN after every reply (reading until EAGAIN instead of stopping
//! at a short read) measured +0.13 µs per request here (5.81 against 5.67 µs, 4 alternating
//! runs each, load average 7.5), an `epoll_ctl` to re-arm per request or a timer system call
//! per request would add more, and none would show in any test of the figures. strace slows
//! the load down, but these counts are the loop's structure, not its speed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::common;

/// The system calls counted: every one the loop makes per request, and the ones a
/// regression would add.
const TRACED: &str =
    "trace=recvfrom,sendto,read,write,recvmsg,sendmsg,epoll_wait,epoll_pwait,epoll_ctl,clock_gettime,timerfd_settime";

/// `stairbench load URL ARGS` under `strace -f -c`: the requests it sent and the calls of
/// each traced system call (all threads). `None` (after `skip_or_fail`) without strace.
fn traced_load(url: &str, args: &[&str]) -> Option<(u64, BTreeMap<String, u64>)> {
    let Some(strace) = common::find_program("strace") else {
        common::skip_or_fail("strace is not installed (Debian: apt-get install strace)");
        return None;
    };
    let dir = tempfile::tempdir().unwrap();
    let (summary, json) = (dir.path().join("strace.txt"), dir.path().join("r.json"));
    let out = Command::new(strace)
        .args(["-f", "-c", "-e", TRACED, "-o"])
        .arg(&summary)
        .arg(common::stairbench_bin())
        .args(["load", url, "-q"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("running strace");
    let output = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && output.contains("ptrace") {
        common::skip_or_fail(format!("strace cannot trace here: {output}"));
        return None;
    }
    assert!(out.status.success(), "{url} {args:?}: {output}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON report")).unwrap();
    assert_eq!(doc["errors"], serde_json::json!({}), "{url}: {doc:#}");
    let sent = doc["sent"].as_u64().expect("sent");
    assert!(
        sent > 200,
        "{url} {args:?}: too few requests to count: {doc:#}"
    );
    Some((sent, strace_calls(&summary)))
}

/// The calls column of `strace -c`'s table by system call name (a name absent was not called).
fn strace_calls(summary: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(summary).expect("strace's summary");
    // "% time  seconds  usecs/call  calls  [errors]  syscall": the errors column may be empty.
    text.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let name = *cols.last()?;
            let calls = cols.get(3)?.parse().ok()?;
            (name != "total").then(|| (name.to_string(), calls))
        })
        .collect()
}

fn calls(counts: &BTreeMap<String, u64>, name: &str) -> u64 {
    counts.get(name).copied().unwrap_or(0)
}

/// At one request in flight per connection: a request is one `sendto`, its reply one
/// `recvfrom` (no read to EAGAIN after it), sockets are registered once, and time is read
/// without a system call.
fn assert_one_send_one_receive(what: &str, connections: u64, sent: u64, c: &BTreeMap<String, u64>) {
    let shown = format!("{what}: {sent} requests sent, system calls {c:?}");
    // A few more than the requests: the end of the drain, a connection's first readiness.
    let slack = 2 * connections + 8;
    for (name, per) in [
        ("sendto", "one send per request"),
        ("recvfrom", "one receive per reply"),
    ] {
        let n = calls(c, name);
        assert!(n + slack >= sent && n <= sent + slack, "{per}: {shown}");
    }
    // One wait serves every ready reply: under strace each wait returned the replies of all
    // the connections (0.250-0.258 waits per request with 4 connections, 6 runs, 2026-11-28);
    // at most twice that. Catches one wait per reply (1 per request) or per two.
    assert!(
        calls(c, "epoll_wait") * connections <= 2 * sent + slack,
        "one wait serves every ready reply: {shown}"
    );
    assert!(
        calls(c, "epoll_ctl") <= 2 * connections + 4,
        "registered once: {shown}"
    );
    assert!(calls(c, "clock_gettime") <= 50, "the vDSO's clock: {shown}");
    assert!(
        calls(c, "timerfd_settime") == 0,
        "no timer in closed loop: {shown}"
    );
    for name in ["sendmsg", "recvmsg"] {
        assert_eq!(
            calls(c, name),
            0,
            "sockets use sendto/recvfrom only: {shown}"
        );
    }
}

/// Pipelined: the replies one read brings are answered by one write, so both are well under
/// one per request (memcached and redis answer a batch with one write).
fn assert_batched(what: &str, depth: u64, sent: u64, c: &BTreeMap<String, u64>) {
    let shown = format!("{what} at depth {depth}: {sent} requests sent, system calls {c:?}");
    for name in ["sendto", "recvfrom"] {
        assert!(
            calls(c, name) * 2 <= sent,
            "{name}: one per batch of replies, not per request: {shown}"
        );
    }
}

/// At depth 1, one send and one receive per request; at depth 8, one of each per batch.
fn one_per_request_then_batched(name: &str, url: &str) {
    let one = [
        "-c",
        "4",
        "-d",
        "1s",
        "--read-ratio",
        "0.9",
        "--value-size",
        "32",
    ];
    let Some((sent, counts)) = traced_load(url, &one) else {
        return;
    };
    eprintln!("{name} depth 1: {sent} sent, {counts:?}");
    assert_one_send_one_receive(&format!("{name} depth 1"), 4, sent, &counts);
    let deep = [&one[..], &["--depth", "8"]].concat();
    let (sent, counts) = traced_load(url, &deep).expect("strace ran before");
    eprintln!("{name} depth 8: {sent} sent, {counts:?}");
    assert_batched(name, 8, sent, &counts);
}

#[test]
fn memcache_one_sendto_and_one_recvfrom_per_request_none_per_reply_when_pipelined() {
    if let Some(mc) = common::start_memcached(1) {
        one_per_request_then_batched("memcache", &mc.url());
    }
}

#[test]
fn resp_one_sendto_and_one_recvfrom_per_request_none_per_reply_when_pipelined() {
    if let Some(redis) = common::start_redis() {
        one_per_request_then_batched("redis", &redis.url());
    }
}
