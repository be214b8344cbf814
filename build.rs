//! Puts the git revision into `stairbench --version` (`0.1.0 (abc1234)`), falling back to the
//! package version alone where there is no git (a source tarball, a crate download).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn main() {
    let pkg = env!("CARGO_PKG_VERSION");
    let version = match git(&["rev-parse", "--short", "HEAD"]) {
        Some(rev) => format!("{pkg} ({rev})"),
        None => pkg.to_string(),
    };
    println!("cargo:rustc-env=STAIRBENCH_VERSION={version}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuilt when HEAD moves: HEAD itself (a checkout), the branch it names (a commit) and
    // packed-refs (a gc), where they exist (a worktree keeps them in the main .git).
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
    }
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
}
