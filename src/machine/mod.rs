//! What the running machine is: its CPU topology from /sys (`topology`) and the parsers of
//! /proc's files (`procfs`, per thread in `threads`). Readers only; nothing here decides what to do with the answers.

pub mod procfs;
pub mod threads;
pub mod topology;

/// Whether this machine runs CI: `CI` set to anything but empty, `0` or `false` (GitHub
/// Actions, GitLab and most CI systems set `CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

/// For the library's unit tests, as tests/it/common.rs's `skip_or_fail`: a test that cannot
/// run here because of `reason` fails in CI (which never skips); elsewhere it prints one
/// `SKIPPED <test>: <reason>` line past libtest's capture, appends it to
/// `$STAIRBENCH_SKIPS_FILE` (which `.ci/run` counts) and the caller returns.
#[cfg(test)]
pub(crate) fn skip_test(reason: &str) {
    use std::io::Write;
    assert!(!in_ci(), "cannot run in CI (CI=true never skips): {reason}");
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("SKIPPED {test}: {reason}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = std::env::var_os("STAIRBENCH_SKIPS_FILE") {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut file) = file {
            let _ = file.write_all(line.as_bytes());
        }
    }
}
