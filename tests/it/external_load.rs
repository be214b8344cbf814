//! The load engine against real nginx and redis on loopback: what it says it sent is what
//! the server counted, with keep-alive connections closed by nginx and pipelined RESP.

use crate::common;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use stairbench::load::{self, LoadConfig};
use stairbench::record::load::{IntervalLine, IntervalSink, LoadReport};

struct NoLines;
impl IntervalSink for NoLines {
    fn interval(&mut self, _: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {}
}

fn run(config: LoadConfig) -> LoadReport {
    load::run(&config, &mut NoLines, &AtomicBool::new(false))
        .expect("load runs")
        .report
}

#[test]
fn nginx_counts_exactly_what_was_sent_across_connection_closes() {
    // nginx closes each keep-alive connection after 50 requests (default 1000); with
    // pipelining, the requests written behind the closing reply are never read by nginx.
    let Some(nginx) = common::start_nginx_with("keepalive_requests 50;") else {
        return;
    };
    for depth in [1, 8, 16] {
        let before = nginx.stub_requests();
        let r = run(LoadConfig {
            url: nginx.url("/"),
            connections: 8,
            threads: 2,
            depth,
            duration: Duration::from_millis(1500),
            warmup: Duration::from_millis(200),
            ..LoadConfig::default()
        });
        let after = nginx.stub_requests();
        assert!(r.requests > 500, "depth {depth}: {r:?}");
        assert!(r.errors.is_empty(), "depth {depth}: {:?}", r.errors);
        // stub_status counts the status request itself too.
        assert_eq!(
            after - before - 1,
            r.sent,
            "depth {depth}: nginx's request count vs sent (resent {})",
            r.resent
        );
        if depth == 1 {
            assert_eq!(r.resent, 0, "nothing is written behind a reply at depth 1");
        } else {
            // Every 50th reply closes with up to depth-1 requests behind it.
            assert!(r.resent > 0, "depth {depth}: {r:?}");
            assert!(r.resent < r.sent / 2, "depth {depth}: {r:?}");
        }
    }
}

#[test]
fn nginx_error_statuses_are_counted_by_kind() {
    let Some(nginx) = common::start_nginx() else {
        return;
    };
    let r = run(LoadConfig {
        url: nginx.url("/status500"),
        connections: 2,
        duration: Duration::from_millis(500),
        ..LoadConfig::default()
    });
    assert_eq!(r.requests, 0);
    assert!(
        r.errors.get("http_5xx").copied().unwrap_or(0) > 10,
        "{:?}",
        r.errors
    );
}

#[test]
fn redis_counts_exactly_what_was_sent_with_pipelining() {
    let Some(redis) = common::start_redis() else {
        return;
    };
    for depth in [1, 8, 16] {
        let before = redis.commands_processed();
        let mut config = LoadConfig {
            url: redis.url(),
            connections: 10,
            depth,
            duration: Duration::from_millis(800),
            ..LoadConfig::default()
        };
        config.proto.read_ratio = 0.5;
        config.proto.keys = 100;
        let r = run(config);
        let after = redis.commands_processed();
        assert!(r.requests > 500, "depth {depth}: {r:?}");
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.resent, 0, "redis never closes a connection");
        // The first INFO is counted once it has run, so it shows in `after`.
        assert_eq!(
            after - before - 1,
            r.sent,
            "depth {depth}: redis's command count vs sent"
        );
    }
    // SETs with the chosen value size really landed (half the requests were SETs).
    let key = redis.command(&["RANDOMKEY"]);
    assert!(key.starts_with("key:"), "RANDOMKEY: {key:?}");
    assert_eq!(redis.command(&["GET", &key]), "x".repeat(16), "{key}");
}

#[test]
fn redis_error_replies_are_errors() {
    let Some(redis) = common::start_redis() else {
        return;
    };
    // A string value under every key makes nothing fail; a list does (WRONGTYPE).
    redis.command(&["RPUSH", "key:0", "a"]);
    let mut config = LoadConfig {
        url: redis.url(),
        connections: 1,
        duration: Duration::from_millis(300),
        ..LoadConfig::default()
    };
    config.proto.keys = 1;
    let r = run(config);
    assert!(
        r.errors.get("resp_error").copied().unwrap_or(0) > 10,
        "{:?}",
        r.errors
    );
}
