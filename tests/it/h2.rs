//! HTTP/2 with prior knowledge (`h2c://`, `--http2`) against nginx (`listen PORT http2`):
//! exact `sent` at depth 8 across GOAWAYs, errors by kind, and what is refused.

use serde_json::Value;

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
        let after = nginx.stub_requests();
        assert_eq!(u(&doc, "sent"), after - before - 1, "{doc:#}");
        assert!(u(&doc, "requests") > 300, "{doc:#}");
        assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}");
        assert!(
            u(&doc, "resent") > 0,
            "GOAWAY every 100 streams at depth 8: {doc:#}"
        );
        assert!(
            u(&doc, "bytes_received") > 0 && u(&doc, "bytes_sent") > 0,
            "{doc:#}"
        );
        let schema: Value =
            serde_json::from_str(include_str!("../../schema/load.schema.json")).unwrap();
        let problems = crate::schema::validate(&schema, &doc);
        assert!(problems.is_empty(), "{problems:#?}");
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
            vec!["h2c://127.0.0.1:1/", "--rate", "100"],
            "not available with HTTP/2 yet",
        ),
        (
            vec!["https://127.0.0.1:1/", "--http2", "--insecure"],
            "not available yet",
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
