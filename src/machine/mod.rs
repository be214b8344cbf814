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
