//! `memcache://` against Debian's memcached: what stairbench sent equals memcached's own
//! `cmd_get + cmd_set` difference, pipelined at depths 1, 8 and 16, in both dialects (text
//! get/set, meta mg/ms); `--preload` turns misses into hits.

use crate::common;

use serde_json::Value;

use common::load_json as load;

fn u(doc: &Value, key: &str) -> u64 {
    doc[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key}: {doc:#}"))
}

/// One load of `args` against `mc`: its report, checked for exact accounting against the
/// server's own counters taken just before and just after.
fn exact_load(mc: &common::Memcached, args: &[&str]) -> Value {
    let before = mc.gets_and_sets();
    let (code, stdout, stderr, doc) = load(&mc.url(), args);
    let after = mc.gets_and_sets();
    assert_eq!(code, Some(0), "{args:?}: {stdout}{stderr}");
    let doc = doc.expect("the JSON report");
    assert_eq!(
        u(&doc, "sent"),
        after - before,
        "{args:?}: sent against memcached's cmd_get + cmd_set difference: {doc:#}"
    );
    assert_eq!(doc["errors"], serde_json::json!({}), "{args:?}: {doc:#}");
    assert!(u(&doc, "requests") > 100, "{args:?}: {doc:#}");
    doc
}

#[test]
fn memcache_sent_equals_cmd_get_plus_cmd_set_at_depth_1_8_16() {
    let Some(mc) = common::start_memcached(2) else {
        return;
    };
    for depth in ["1", "8", "16"] {
        let args = [
            "-c",
            "4",
            "-d",
            "1s",
            "--depth",
            depth,
            "--read-ratio",
            "0.8",
            "--value-size",
            "100",
        ];
        let doc = exact_load(&mc, &args);
        let lookups = u(&doc, "redis_hits") + u(&doc, "redis_misses");
        assert!(
            lookups > 0 && lookups < u(&doc, "requests"),
            "GETs and SETs both ran: {doc:#}"
        );
        eprintln!(
            "depth {depth}: sent {} = memcached cmd_get + cmd_set",
            u(&doc, "sent")
        );
    }
    let meta = ["-c", "2", "-d", "1s", "--depth", "8"];
    let doc = exact_load(&mc, &[&meta[..], &["--memcache-commands", "meta"]].concat());
    assert!(u(&doc, "redis_hits") > 0, "SETs above stored keys: {doc:#}");
}

#[test]
fn memcache_preload_turns_misses_into_hits() {
    let Some(mc) = common::start_memcached(1) else {
        return;
    };
    let args = ["-c", "2", "-d", "500ms", "--keys", "300"];
    let doc = exact_load(&mc, &args);
    assert_eq!(u(&doc, "redis_hits"), 0, "an empty memcached: {doc:#}");
    for dialect in ["text", "meta"] {
        let more = ["--preload", "--memcache-commands", dialect];
        let doc = exact_load(&mc, &[&args[..], &more].concat());
        assert_eq!(u(&doc, "redis_misses"), 0, "{dialect}: {doc:#}");
        assert_eq!(doc["redis_hits"], doc["requests"], "{dialect}: {doc:#}");
    }
    assert_eq!(mc.stat("curr_items"), 300);
}
