//! `https://` loads against nginx with a certificate made by the test (a CA of its own and
//! a leaf for localhost, by `openssl`): exact `sent`, handshakes counted on
//! their own, resumption, a connection per request, and certificates that do not verify.

use std::path::Path;

use serde_json::Value;

use crate::certs::{make_certs, start_nginx_tls};
use crate::common;

fn load_json(args: &[&str]) -> (Value, String) {
    let mut all = vec!["load", "-q", "--json", "-"];
    all.extend_from_slice(args);
    let out = common::cli(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(0), "{all:?}: {stderr}");
    (
        serde_json::from_slice(&out.stdout).expect("JSON on stdout"),
        stderr,
    )
}

fn u(doc: &Value, key: &str) -> u64 {
    doc[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {doc:#}"))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn https_sent_equals_nginx_count_and_handshakes_are_measured_apart() {
    let Some(certs) = make_certs() else { return };
    // Closes every 50th response: reconnections, re-sends and new handshakes mid-run.
    let Some((nginx, port)) = start_nginx_tls(&certs, "", "keepalive_requests 50;") else {
        return;
    };
    let url = format!("https://localhost:{port}/");
    let before = nginx.stub_requests();
    let (doc, _) = load_json(&[
        &url,
        "--cacert",
        path(&certs.ca()),
        "-c",
        "4",
        "--depth",
        "4",
        "-d",
        "1s",
    ]);
    let after = nginx.stub_requests();
    assert_eq!(u(&doc, "sent"), after - before - 1, "{doc:#}");
    assert!(u(&doc, "requests") > 100, "{doc:#}");
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
    assert!(
        u(&doc, "resent") > 0,
        "keepalive_requests 50 at depth 4: {doc:#}"
    );
    // The 4 first connections, then one per 50 requests (without resumption: none resumed).
    let handshakes = u(&doc, "tls_handshakes");
    assert!(handshakes >= 4 + u(&doc, "requests") / 50 - 4, "{doc:#}");
    assert_eq!(u(&doc, "tls_resumed"), 0, "{doc:#}");
    let hs = &doc["tls_handshake_us"];
    assert!(hs["p50"].as_f64().unwrap() > 0.0, "{doc:#}");
    // Responses of many records (300 kB) at depth 4: reads that stop inside a record.
    let big = vec![b'x'; 300_000];
    std::fs::write(nginx.dir.path().join("root/big.bin"), &big).unwrap();
    let before = nginx.stub_requests();
    let big_url = format!("https://localhost:{port}/big.bin");
    let (big_doc, _) = load_json(&[
        &big_url,
        "--cacert",
        path(&certs.ca()),
        "-c",
        "2",
        "--depth",
        "4",
        "-d",
        "1s",
    ]);
    let after = nginx.stub_requests();
    assert_eq!(u(&big_doc, "sent"), after - before - 1, "{big_doc:#}");
    assert_eq!(big_doc["errors"], serde_json::json!({}), "{big_doc:#}");
    let requests = u(&big_doc, "requests");
    assert!(requests > 10, "{big_doc:#}");
    // Every byte of every body (and its head) was read, nothing more: the window's bytes
    // are those of the requests completed in it, give or take the 8 in flight at each edge.
    let bytes = u(&big_doc, "bytes_received");
    let low = requests.saturating_sub(8) * 300_000;
    let high = (requests + 8) * 301_000;
    assert!((low..=high).contains(&bytes), "{big_doc:#}");
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/load.schema.json")).unwrap();
    let problems = crate::schema::validate(&schema, &doc);
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn new_connection_per_request_pays_a_handshake_each_and_resumes_when_asked() {
    let Some(certs) = make_certs() else { return };
    let Some((nginx, port)) = start_nginx_tls(&certs, "", "") else {
        return;
    };
    let url = format!("https://127.0.0.1:{port}/");
    for resume in [false, true] {
        let before = nginx.stub_requests();
        let mut args = vec![
            &url[..],
            "--insecure",
            "-c",
            "2",
            "-d",
            "1s",
            "--new-connection-per-request",
        ];
        if resume {
            args.push("--tls-resume");
        }
        let (doc, stderr) = load_json(&args);
        let after = nginx.stub_requests();
        assert_eq!(u(&doc, "sent"), after - before - 1, "{doc:#}");
        assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
        let (requests, handshakes) = (u(&doc, "requests"), u(&doc, "tls_handshakes"));
        assert!(requests > 20, "{doc:#}");
        // One per request sent, plus the first connections (the last ones, opened as the
        // load ended, may have had no request).
        assert!(handshakes >= u(&doc, "sent"), "{doc:#}");
        assert!(handshakes <= u(&doc, "sent") + 4, "{doc:#}");
        let resumed = u(&doc, "tls_resumed");
        if resume {
            assert!(resumed * 10 >= handshakes * 9, "--tls-resume: {doc:#}");
        } else {
            assert_eq!(resumed, 0, "{doc:#}");
        }
        assert!(
            stderr.contains(&format!("TLS handshakes: {handshakes}")),
            "{stderr}"
        );
    }
}

#[test]
fn a_certificate_that_does_not_verify_is_refused_before_the_load() {
    let Some(certs) = make_certs() else { return };
    let Some((nginx, port)) = start_nginx_tls(&certs, "", "") else {
        return;
    };
    let url = format!("https://localhost:{port}/");
    let before = nginx.stub_requests();
    // The system's roots do not include the test's CA.
    let out = common::cli(&["load", &url, "-d", "1s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "TLS handshake with localhost (127.0.0.1:{port}) failed: invalid peer certificate"
        )),
        "{stderr}"
    );
    assert!(stderr.contains("--cacert FILE, or --insecure"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // No request was sent: the load never started.
    assert_eq!(nginx.stub_requests(), before + 1);
    // A CA that did not sign it does not verify it either.
    let other = make_certs().unwrap();
    let out = common::cli(&["load", &url, "-d", "1s", "--cacert", path(&other.ca())]);
    assert_eq!(out.status.code(), Some(2));
    // The right CA, but a name the certificate is not for.
    let wrong_name = format!("https://127.0.0.1:{port}/");
    let out = common::cli(&[
        "load",
        &wrong_name,
        "-d",
        "1s",
        "--cacert",
        path(&certs.ca()),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("not valid for name") || stderr.contains("NotValidForName"),
        "{stderr}"
    );
    // --insecure accepts it.
    let (doc, _) = load_json(&[&url, "-d", "300ms", "--insecure"]);
    assert!(u(&doc, "requests") > 0);
}

#[test]
fn tls_bad_input_is_one_sentence_and_exit_2() {
    let Some(nginx) = common::start_nginx() else {
        return;
    };
    let plain = format!("https://127.0.0.1:{}/", nginx.port);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![&plain, "--insecure"], "does it speak TLS"),
        (
            vec!["https://127.0.0.1:1/", "--cacert", "/nonexistent.pem"],
            "--cacert /nonexistent.pem: ",
        ),
        (
            vec!["http://127.0.0.1:1/", "--insecure"],
            "https:// targets only",
        ),
        (
            vec![
                "https://127.0.0.1:1/",
                "--insecure",
                "--new-connection-per-request",
                "--depth",
                "2",
            ],
            "use --depth 1",
        ),
        (
            vec!["redis://127.0.0.1:1", "--new-connection-per-request"],
            "http:// and https:// targets only",
        ),
    ];
    for (args, says) in cases {
        let mut all = vec!["load", "-d", "1s"];
        all.extend(args.iter().copied());
        let out = common::cli(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
        assert!(stderr.contains(says), "{all:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    }
}
