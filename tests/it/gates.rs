//! Thresholds and JUnit files: a met and a breached threshold in a real run against the
//! built-in msgr server (exit codes 0 and 4, the verdict in steps.jsonl, analysis.json, both
//! reports, stdout and the JUnit file), `abort = true` ending the run early, thresholds
//! checked with the spec, `load --threshold`, and `compare --junit`.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common;

const TARGET: &str = r#"duration = "500ms"
warmup = "100ms"
placements = ["shared"]
[[targets]]
name = "reactor"
builtin = "msgr --arch reactor --threads 1"
"#;

/// A spec of the msgr reactor at `clients`, with `extra` (its thresholds) at the end.
fn write_spec(dir: &Path, clients: &str, extra: &str) -> std::path::PathBuf {
    let spec = dir.join("spec.toml");
    let text = format!("name = \"gates\"\nclients = {clients}\n{TARGET}{extra}");
    std::fs::write(&spec, text).unwrap();
    spec
}

fn run(spec: &Path, out: &Path, junit: &Path) -> Output {
    common::cli_cmd()
        .arg("run")
        .arg(spec)
        .arg("--out")
        .arg(out)
        .arg("--junit")
        .arg(junit)
        .output()
        .unwrap()
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn schema(name: &str) -> Value {
    json_file(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("schema")
            .join(name),
    )
}

/// The JUnit file parsed: (test cases as (name, failure message), the suite's `failures`).
pub fn junit_cases(path: &Path) -> (Vec<(String, Option<String>)>, usize) {
    use quick_xml::events::Event;
    let xml = std::fs::read_to_string(path).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let mut cases: Vec<(String, Option<String>)> = Vec::new();
    let mut failures = None;
    let attr = |e: &quick_xml::events::BytesStart, key: &[u8]| -> Option<String> {
        e.attributes()
            .flatten()
            .find(|a| a.key.as_ref() == key)
            .map(|a| {
                a.normalized_value(quick_xml::XmlVersion::Explicit1_0)
                    .unwrap()
                    .into_owned()
            })
    };
    loop {
        match reader.read_event().expect("well-formed JUnit XML") {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuite" => failures = attr(&e, b"failures").map(|f| f.parse().unwrap()),
                b"testcase" => cases.push((attr(&e, b"name").unwrap(), None)),
                b"failure" => cases.last_mut().unwrap().1 = attr(&e, b"message"),
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    (cases, failures.expect("a testsuite element"))
}

#[test]
fn a_met_threshold_exits_0_and_says_so_everywhere() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "[1, 2]",
        r#"[[thresholds]]
metric = "error_ratio"
op = "<="
value = 0.01
[[thresholds]]
metric = "p99_ms"
op = "<"
value = 10000
at = 2
target = "reactor"
"#,
    );
    let (out_dir, junit) = (tmp.path().join("run"), tmp.path().join("junit.xml"));
    let out = run(&spec, &out_dir, &junit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("threshold: PASS error_ratio <= 0.01"),
        "{stdout}"
    );
    assert!(
        stdout.contains("threshold: PASS p99_ms < 10000 at 2 on reactor"),
        "{stdout}"
    );

    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 2);
    // Each step carries the thresholds that select it: the p99 one only at 2 clients.
    let checks = |s: &Value| s["thresholds"].as_array().unwrap().len();
    assert_eq!((checks(&steps[0]), checks(&steps[1])), (1, 2));
    assert_eq!(steps[1]["thresholds"][1]["met"], true);
    let p99_ms = steps[1]["latency_us"]["p99"].as_f64().unwrap() / 1e3;
    let close = |v: &Value| (v.as_f64().unwrap() - p99_ms).abs() < 1e-9;
    assert!(close(&steps[1]["thresholds"][1]["measured"]), "{p99_ms}");

    let analysis = json_file(&out_dir.join("analysis.json"));
    assert!(crate::schema::validate(&schema("analysis.schema.json"), &analysis).is_empty());
    let verdicts = analysis["thresholds"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2);
    assert!(
        verdicts.iter().all(|v| v["verdict"] == "met"),
        "{verdicts:?}"
    );
    assert!(close(&verdicts[1]["measured"]), "{p99_ms}");
    assert_eq!(verdicts[1]["steps_checked"], 1);
    for s in &steps {
        assert!(crate::schema::validate(&schema("steps.schema.json"), s).is_empty());
    }

    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    let first_section = md.find("\n## ").unwrap();
    assert_eq!(&md[first_section..first_section + 14], "\n## Thresholds");
    assert!(
        md.contains("All 2 thresholds met.") && md.contains("- PASS p99_ms"),
        "{md}"
    );
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(
        html.contains("<li class=\"pass\">PASS error_ratio &lt;= 0.01"),
        "html"
    );

    let (cases, failures) = junit_cases(&junit);
    assert_eq!(failures, 0);
    let names: Vec<&str> = cases.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        names,
        ["error_ratio <= 0.01", "p99_ms < 10000 at 2 on reactor"]
    );
    assert!(cases.iter().all(|c| c.1.is_none()));
}

#[test]
fn a_breached_abort_threshold_stops_the_run_and_exits_4() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = write_spec(
        tmp.path(),
        "[1, 2, 3]",
        r#"[[thresholds]]
metric = "throughput_rps"
op = "<"
value = 1
abort = true
[[thresholds]]
metric = "error_ratio"
op = "<="
value = 0.01
"#,
    );
    let (out_dir, junit) = (tmp.path().join("run"), tmp.path().join("junit.xml"));
    let out = run(&spec, &out_dir, &junit);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stdout}{stderr}");
    assert!(
        stdout.contains("threshold: FAIL throughput_rps < 1: measured"),
        "{stdout}"
    );
    assert!(
        stdout.contains("threshold: PASS error_ratio <= 0.01"),
        "{stdout}"
    );
    assert!(
        stderr.contains("the run was aborted (abort = true)"),
        "{stderr}"
    );

    // Aborted after its first step: 1 of the 3 planned.
    let steps = common::steps_json(&out_dir);
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert_eq!(steps[0]["thresholds"][0]["met"], false);
    let rps = steps[0]["throughput_rps"].as_f64().unwrap();
    assert!(rps > 1.0);

    let analysis = json_file(&out_dir.join("analysis.json"));
    let v = &analysis["thresholds"][0];
    assert_eq!(
        (v["verdict"].as_str(), v["measured"].as_f64()),
        (Some("breached"), Some(rps))
    );
    assert_eq!(v["step"], steps[0]["id"]);
    let md = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        md.contains("1 of 2 thresholds not met: exit code 4."),
        "{md}"
    );
    assert!(
        md.contains("- FAIL throughput_rps &lt; 1") || md.contains("- FAIL throughput_rps < 1"),
        "{md}"
    );
    assert!(md.contains("the run was aborted"), "the note: {md}");
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(
        html.contains("<li class=\"fail\">FAIL throughput_rps &lt; 1"),
        "html"
    );

    let (cases, failures) = junit_cases(&junit);
    assert_eq!((cases.len(), failures), (2, 1));
    let message = cases[0].1.as_deref().unwrap();
    assert!(
        message.starts_with("FAIL throughput_rps < 1: measured"),
        "{message}"
    );
    assert!(cases[1].1.is_none());
}

#[test]
fn thresholds_are_checked_with_the_spec() {
    let tmp = tempfile::tempdir().unwrap();
    for (extra, located) in [
        (
            "metric = \"p95_ms\"\nop = \"<\"\nvalue = 5\n",
            "spec.toml:10:10: thresholds[0].metric: unknown variant `p95_ms`",
        ),
        (
            "metric = \"p99_ms\"\nop = \"=<\"\nvalue = 5\n",
            "spec.toml:11:6: thresholds[0].op: unknown variant `=<`",
        ),
        (
            "metric = \"p99_ms\"\nop = \"<\"\nvalue = 5\ntarget = \"nginx\"\n",
            "thresholds[0].target: unknown target \"nginx\": expected one of reactor",
        ),
        (
            "metric = \"p99_ms\"\nop = \"<\"\nvalue = 5\nat = 3\n",
            "thresholds[0].at: no step runs at 3: the series steps through 1, 2",
        ),
        (
            "metric = \"p99_ms\"\nop = \"<\"\nvalue = 5\nevery = 3\n",
            "unknown field `every`",
        ),
    ] {
        let spec = write_spec(tmp.path(), "[1, 2]", &format!("[[thresholds]]\n{extra}"));
        let out = common::cli(&["run", spec.to_str().unwrap(), "--dry-run"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra}: {stderr}");
        assert!(stderr.contains(located), "{extra}: {stderr}");
    }
}

#[test]
fn load_thresholds_exit_4_when_breached_and_0_when_met() {
    let server = stairbench::serve::msgr::spawn_msgr(Default::default()).unwrap();
    let url = format!("msgr://{}", server.addr());
    let tmp = tempfile::tempdir().unwrap();
    let json = tmp.path().join("load.json");
    let load = |thresholds: &[&str]| {
        let mut cmd = common::cli_cmd();
        cmd.args([
            "load",
            &url,
            "-c",
            "1",
            "-d",
            "500ms",
            "-q",
            "--msg-size",
            "64",
        ]);
        cmd.arg("--json").arg(&json);
        for t in thresholds {
            cmd.args(["--threshold", t]);
        }
        cmd.output().unwrap()
    };
    let out = load(&["error_ratio<=0.01", "p99_ms < 10000"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        stdout.contains("threshold: PASS p99_ms < 10000: measured"),
        "{stdout}"
    );
    let report = json_file(&json);
    assert_eq!(report["thresholds"][1]["verdict"], "met");
    let p99_ms = report["latency_us"]["p99"].as_f64().unwrap() / 1e3;
    let measured = report["thresholds"][1]["measured"].as_f64().unwrap();
    assert!((measured - p99_ms).abs() < 1e-9, "{measured} vs {p99_ms}");
    assert!(crate::schema::validate(&schema("load.schema.json"), &report).is_empty());

    let out = load(&["throughput_rps<1", "error_ratio<=0.01"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{stdout}");
    assert!(
        stdout.contains("threshold: FAIL throughput_rps < 1: measured"),
        "{stdout}"
    );
    assert_eq!(json_file(&json)["thresholds"][0]["verdict"], "breached");

    for (bad, why) in [
        ("cpu_us_per_req<5", "load does not observe the server"),
        ("p99<5", "unknown metric \"p99\""),
        ("p99_ms~5", "expected METRIC OP VALUE"),
    ] {
        let out = common::cli(&["load", &url, "--threshold", bad]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains(why), "{bad}: {stderr}");
    }
}
