//! HTTP/2 against nginx, with prior knowledge (`h2c://`, `--http2`; `listen PORT http2`)
//! and over TLS (`https://` with `--http2`; `listen PORT ssl http2`): exact `sent` at
//! depth 8 across GOAWAYs, errors by kind, handshakes, and what is refused.

use serde_json::Value;

use crate::certs::{make_certs, start_nginx_tls};
use crate::common;

fn load_json(args: &[&str]) -> Value {
    let mut all = vec!["load", "-q", "--json", "-"];
    all.extend_from_slice(args);
    let out = common::cli(&all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0 | 3)),
        "{all:?}: {stderr}"
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn u(doc: &Value, key: &str) -> u64 {
    doc[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {doc:#}"))
}

/// A load of 4 connections × 8 streams against nginx sending a GOAWAY every 100 streams:
/// `sent` is nginx's count between `before` and `after` (less the stub_status request),
/// the refused requests were re-sent, nothing failed, and the report fits its schema.
fn assert_exact_across_goaways(doc: &Value, before: u64, after: u64) {
    assert_eq!(u(doc, "sent"), after - before - 1, "{doc:#}");
    assert!(u(doc, "requests") > 300, "{doc:#}");
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    assert!(
        u(doc, "resent") > 0,
        "GOAWAY every 100 streams at depth 8: {doc:#}"
    );
    assert!(
        u(doc, "bytes_received") > 0 && u(doc, "bytes_sent") > 0,
        "{doc:#}"
    );
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/load.schema.json")).unwrap();
    let problems = crate::schema::validate(&schema, doc);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn h2c_sent_equals_nginx_count_at_depth_8_across_goaways() {
    let port = common::free_port();
    // A GOAWAY every 100 streams: requests refused unprocessed are re-sent.
    let extra = format!("listen 127.0.0.1:{port} http2; keepalive_requests 100;");
    let Some(nginx) = common::start_nginx_with(&extra) else {
        return;
    };
    for (url, flag) in [
        (format!("h2c://127.0.0.1:{port}/"), None),
        (format!("http://127.0.0.1:{port}/"), Some("--http2")),
    ] {
        let before = nginx.stub_requests();
        let mut args = vec![&url[..], "-c", "4", "--depth", "8", "-d", "1s"];
        args.extend(flag);
        let doc = load_json(&args);
        assert_exact_across_goaways(&doc, before, nginx.stub_requests());
    }
    // Errors by kind: every answer is a 500.
    let before = nginx.stub_requests();
    let doc = load_json(&[
        &format!("h2c://127.0.0.1:{port}/status500"),
        "-c",
        "2",
        "--depth",
        "8",
        "-d",
        "500ms",
    ]);
    let after = nginx.stub_requests();
    assert_eq!(u(&doc, "sent"), after - before - 1, "{doc:#}");
    assert_eq!(u(&doc, "requests"), 0, "{doc:#}");
    assert!(doc["errors"]["http_5xx"].as_u64().unwrap() > 0, "{doc:#}");
}

#[test]
fn http2_bad_input_is_one_sentence_and_exit_2() {
    for (args, says) in [
        (
            vec!["h2c://127.0.0.1:1/", "--ramp", "1:4:1s"],
            "not available with HTTP/2",
        ),
        (
            vec!["redis://127.0.0.1:1", "--http2"],
            "http:// and https:// targets only",
        ),
        (
            vec!["h2c://127.0.0.1:1/", "--new-connection-per-request"],
            "HTTP/1.1 only",
        ),
    ] {
        let mut all = vec!["load", "-d", "1s"];
        all.extend(args.iter().copied());
        let out = common::cli(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
        assert!(stderr.contains(says), "{all:?}: {stderr}");
    }
}

#[test]
fn h2_over_tls_sent_equals_nginx_count_at_depth_8_across_goaways() {
    let Some(certs) = make_certs() else { return };
    let Some((nginx, port)) = start_nginx_tls(&certs, "http2", "keepalive_requests 100;") else {
        return;
    };
    let url = format!("https://localhost:{port}/");
    let ca = certs.ca();
    let before = nginx.stub_requests();
    let args = [
        &url[..],
        "--http2",
        "--cacert",
        ca.to_str().unwrap(),
        "-c",
        "4",
        "--depth",
        "8",
        "-d",
        "1s",
    ];
    let doc = load_json(&args);
    assert_exact_across_goaways(&doc, before, nginx.stub_requests());
    // The 4 first connections, then one per 100 streams (the window's, give or take the
    // warm-up's and those open at its edges); none resumed without --tls-resume.
    let handshakes = u(&doc, "tls_handshakes");
    assert!(handshakes >= 4 + u(&doc, "requests") / 100 - 4, "{doc:#}");
    assert!(handshakes <= 4 + u(&doc, "sent") / 100 + 8, "{doc:#}");
    assert_eq!(u(&doc, "tls_resumed"), 0, "{doc:#}");
    assert!(
        doc["tls_handshake_us"]["p50"].as_f64().unwrap() > 0.0,
        "{doc:#}"
    );
}

#[test]
fn a_tls_server_without_h2_is_refused_before_the_load() {
    let Some(certs) = make_certs() else { return };
    let Some((nginx, port)) = start_nginx_tls(&certs, "", "") else {
        return;
    };
    let url = format!("https://localhost:{port}/");
    let ca = certs.ca();
    let before = nginx.stub_requests();
    let out = common::cli(&[
        "load",
        &url,
        "--http2",
        "--cacert",
        ca.to_str().unwrap(),
        "-d",
        "1s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "localhost does not speak HTTP/2 over TLS (the server chose http/1.1 by ALPN)"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    // No request was sent: the load never started.
    assert_eq!(nginx.stub_requests(), before + 1);
}

#[test]
fn h2c_request_templates_reach_nginx_and_sent_is_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let port = common::free_port();
    let extra = format!(
        "listen 127.0.0.1:{port} http2; access_log {};
        location /k/ {{ return 200 \"k\\n\"; }}
        location /p/ {{ return 201 \"p\\n\"; }}",
        log.display()
    );
    let Some(_nginx) = common::start_nginx_with(&extra) else {
        return;
    };
    let file = dir.path().join("req.txt");
    std::fs::write(
        &file,
        "weight=3 GET /k/{uniform:1000}\n    X-Conn: {conn}\nPOST /p/{seq}\n    Content-Type: text/plain\n    body x={rand:100}\n",
    )
    .unwrap();
    let url = format!("h2c://127.0.0.1:{port}/");
    let doc = load_json(&[
        &url,
        "-c",
        "2",
        "--depth",
        "8",
        "-d",
        "1s",
        "--requests",
        file.to_str().unwrap(),
    ]);
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    let text = std::fs::read_to_string(&log).unwrap();
    let requests: Vec<&str> = text.lines().filter_map(|l| l.split('"').nth(1)).collect();
    // Every request sent is in the log, once (refused streams were not processed).
    assert_eq!(requests.len() as u64, u(&doc, "sent"), "{doc:#}");
    assert!(requests.len() > 300, "{doc:#}");
    assert!(
        requests.iter().all(|r| r.ends_with(" HTTP/2.0")),
        "{requests:?}"
    );
    let gets: Vec<&&str> = requests
        .iter()
        .filter(|r| r.starts_with("GET /k/"))
        .collect();
    let posts: Vec<&&str> = requests
        .iter()
        .filter(|r| r.starts_with("POST /p/"))
        .collect();
    assert_eq!(gets.len() + posts.len(), requests.len(), "{requests:?}");
    let share = gets.len() as f64 / requests.len() as f64;
    assert!((0.6..0.9).contains(&share), "GET share {share}");
    // Keys zero-padded to three digits, hundreds of them; {seq} unique across connections.
    assert!(gets.iter().all(|g| g.len() == "GET /k/123 HTTP/2.0".len()));
    let keys: std::collections::BTreeSet<&&&str> = gets.iter().collect();
    assert!(keys.len() > 100, "{} distinct GET paths", keys.len());
    let distinct: std::collections::BTreeSet<&&&str> = posts.iter().collect();
    assert_eq!(distinct.len(), posts.len());
    // Bodies framed right: every answer is the location's own status, none a 400.
    assert!(
        text.lines()
            .all(|l| l.contains("\" 200 ") || l.contains("\" 201 ")),
        "{text}"
    );
}

#[test]
fn h2_open_loop_latency_counts_from_the_intended_time_through_stalls() {
    let port = common::free_port();
    let Some(nginx) = common::start_nginx_with(&format!("listen 127.0.0.1:{port} http2;")) else {
        return;
    };
    // All traffic stalls for the first 200 ms of every second.
    let proxy = crate::load_engine::stalling_proxy(port, std::time::Duration::from_millis(200));
    let before = nginx.stub_requests();
    let doc = load_json(&[
        &format!("h2c://127.0.0.1:{proxy}/"),
        "--rate",
        "500",
        "-c",
        "1",
        "--depth",
        "2",
        "-d",
        "3s",
    ]);
    let after = nginx.stub_requests();
    assert_eq!(u(&doc, "sent"), after - before - 1, "{doc:#}");
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    let corrected = doc["latency_us"]["p99"].as_f64().unwrap();
    let uncorrected = doc["uncorrected_latency_us"]["p99"].as_f64().unwrap();
    // The slowest 1% were due early in a stall and waited most of it; only the 2 streams'
    // requests sent as it began waited once sent.
    assert!(
        corrected > 100_000.0,
        "corrected p99 {corrected} us: {doc:#}"
    );
    assert!(
        uncorrected < corrected / 2.0,
        "uncorrected p99 {uncorrected} us: {doc:#}"
    );
    assert!(u(&doc, "omitted") > 0, "requests due in a stall: {doc:#}");
    let rate = doc["throughput_rps"].as_f64().unwrap();
    assert!((rate - 500.0).abs() < 75.0, "{doc:#}");
}
