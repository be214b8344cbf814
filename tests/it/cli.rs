//! The command line's own frictions: argument errors say what is wanted in one sentence, the
//! help says what things are without the project's private vocabulary, and `report DIR` says
//! what it wrote.

use crate::common;

use std::path::Path;
use std::process::Output;

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_negative_rate_is_refused_as_not_positive() {
    let out = common::cli(&["load", "msgr://127.0.0.1:9", "--rate", "-5"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("invalid value '-5' for '--rate <RATE>'")
            && err.contains("expected a positive number of requests per second"),
        "{err}"
    );
    assert!(
        !err.contains("-- -5"),
        "clap's advice for positionals: {err}"
    );
    let out = common::cli(&["load", "msgr://127.0.0.1:9", "--rate", "0"]);
    assert!(
        stderr(&out).contains("expected a positive number"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_missing_spec_file_is_one_sentence_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let out = common::cli(&["run", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert_eq!(
        err.trim_end(),
        format!(
            "stairbench: error: cannot read spec {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}

/// Words only the project's authors know: the requirement documents' numbers and the name of
/// a tool whose output shape was borrowed.
const PRIVATE_WORDS: [&str; 4] = ["seed 0", "seed-0", "perf-crimson-msgr", "the main job"];

#[test]
fn help_texts_say_what_things_are() {
    let commands: [&[&str]; 14] = [
        &[],
        &["load"],
        &["serve"],
        &["serve", "msgr"],
        &["serve", "shmkv"],
        &["run"],
        &["demo"],
        &["topology"],
        &["report"],
        &["compare"],
        &["analyze"],
        &["flame"],
        &["profile"],
        &["observe"],
    ];
    for command in commands {
        let mut args = command.to_vec();
        args.push("--help");
        let out = common::cli(&args);
        common::assert_success(&out);
        let help = String::from_utf8_lossy(&out.stdout).to_lowercase();
        for word in PRIVATE_WORDS {
            assert!(
                !help.contains(word),
                "{command:?} --help says {word:?}:\n{help}"
            );
        }
    }
    let demo = String::from_utf8_lossy(&common::cli(&["demo", "--help"]).stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        demo.contains("event loop per core vs a shared worker pool"),
        "{demo}"
    );
}

#[test]
fn report_prints_every_file_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report"),
        &run,
    );
    let out = common::cli(&["report", run.to_str().unwrap()]);
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The series' peaks come first, then one line per file.
    let listed: Vec<&str> = stdout.lines().filter(|l| l.starts_with("wrote ")).collect();
    assert!(stdout.contains("peak"), "{stdout}");
    let expected: Vec<String> = ["steps.csv", "report.md", "analysis.json", "report.html"]
        .iter()
        .map(|f| format!("wrote {}", run.join(f).display()))
        .collect();
    assert_eq!(listed, expected);
    for f in ["steps.csv", "report.md", "analysis.json", "report.html"] {
        assert!(run.join(f).is_file(), "{f}");
    }
}
