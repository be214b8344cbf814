//! A test that cannot run says so: outside CI one `SKIPPED <test>: <reason>` line, a summary
//! of the binary's skipped tests at its exit, the line appended to `$STAIRBENCH_SKIPS_FILE`
//! (which `.ci/run` counts); in CI the same test fails with the reason. Tried on this test
//! binary itself, with redis-server out of reach.

use std::process::{Command, Output};

use crate::common;

/// A test that skips when redis-server is missing, and does nothing before it looks.
const SKIPPER: &str = "running::a_url_alone_runs_with_server_figures_not_observed";

/// This test binary running [`SKIPPER`] alone with no redis-server on its PATH, `CI` as
/// given, and its skips appended to `skips_file`.
fn run_skipper(ci: Option<&str>, skips_file: &std::path::Path) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([SKIPPER, "--exact", "--test-threads", "1"])
        .env("PATH", "/nonexistent")
        .env(common::SKIPS_FILE_VAR, skips_file)
        .env_remove("CI");
    if let Some(ci) = ci {
        cmd.env("CI", ci);
    }
    cmd.output().unwrap()
}

#[test]
fn a_skipped_test_prints_its_line_and_a_summary_and_ci_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let skips_file = dir.path().join("skips");
    let out = run_skipper(None, &skips_file);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = format!("SKIPPED {SKIPPER}: redis-server is not installed");
    assert!(stderr.contains(&line), "no skip line: {stderr}");
    assert!(stderr.contains("1 test(s) of"), "no summary: {stderr}");
    let logged = std::fs::read_to_string(&skips_file).unwrap();
    assert_eq!(logged.lines().count(), 1, "{logged}");
    assert!(logged.starts_with(&line), "{logged}");
    // .ci/run's count of that file.
    let ci_run = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run");
    let script = format!(
        "eval \"$(sed -n '/^report_skips() {{/,/^}}/p' {})\"; report_skips {}",
        ci_run.display(),
        skips_file.display()
    );
    let counted = Command::new("bash").args(["-c", &script]).output().unwrap();
    let counted = String::from_utf8_lossy(&counted.stdout);
    assert!(
        counted.starts_with("skipped tests: 1\n") && counted.contains(&line),
        "{counted}"
    );
    // In CI (`true` or `1`, as `in_ci` reads it) the same test fails, with the reason.
    for ci in ["true", "1"] {
        let out = run_skipper(Some(ci), &dir.path().join("ci-skips"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "CI={ci}: {stdout}");
        assert!(
            stdout.contains("cannot run in CI") && stdout.contains("redis-server"),
            "CI={ci}: {stdout}"
        );
    }
    // And `CI=false` is not CI.
    let out = run_skipper(Some("false"), &dir.path().join("not-ci"));
    assert!(out.status.success());
}
