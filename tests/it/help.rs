//! Help that is true: what each command's `--help` promises is what its dry run (or its
//! parser) does.

use crate::common;

fn stdout_of(args: &[&str]) -> String {
    let out = common::cli(args);
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The client counts of a dry run's step lines (`NAME.PLACEMENT.cN.rR:`) of `target`.
fn dry_run_clients(dry_run: &str, target: &str) -> Vec<usize> {
    let prefix = format!("{target}.");
    dry_run
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .filter_map(|rest| {
            rest.split('.')
                .find_map(|p| p.strip_prefix('c')?.parse().ok())
        })
        .collect()
}

#[test]
fn demo_help_gives_the_staircase_its_dry_run_runs() {
    let help = stdout_of(&["demo", "--help"]);
    let plan = stdout_of(&["demo", "--dry-run"]);
    let clients = dry_run_clients(&plan, "reactor");
    assert_eq!(clients.first(), Some(&1), "{plan}");
    let top = *clients.last().unwrap();
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains(&format!("at 1 to {top} clients")),
        "{help}\n{plan}"
    );
    let placement = if plan.contains(".separated.c1") {
        "CPUs of its own"
    } else {
        "shared CPUs"
    };
    assert!(words.contains(placement), "{help}");

    let quick = stdout_of(&["demo", "--quick", "--dry-run"]);
    let quick_clients: Vec<String> = dry_run_clients(&quick, "reactor")
        .iter()
        .map(|c| c.to_string())
        .collect();
    let runs = quick
        .lines()
        .find_map(|l| l.trim().strip_suffix(" runs")?.rsplit(' ').next());
    let promised = format!(
        "{} clients, {} runs of",
        quick_clients.join(", "),
        runs.unwrap()
    );
    assert!(words.contains(&promised), "{help}\n{quick}");
}

#[test]
fn load_help_lists_every_scheme_the_url_parser_takes_and_no_other() {
    let top = stdout_of(&["--help"]);
    let line = top.split_whitespace().collect::<Vec<_>>().join(" ");
    let listed: Vec<&str> = line
        .split("Drive load against one URL (")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap()
        .split(", ")
        .map(|s| s.trim_end_matches("://"))
        .collect();
    assert_eq!(listed, stairbench::load::target::SCHEMES);
    for scheme in &listed {
        // Every listed scheme gets past the scheme check (it fails later, on the bad host).
        let out = common::cli(&["load", &format!("{scheme}://no host:1/"), "-d", "1s"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("unknown scheme"), "{scheme}: {err}");
    }
    let out = common::cli(&["load", "gopher://127.0.0.1:1/", "-d", "1s"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown scheme \"gopher\""), "{err}");
    assert!(
        err.contains(&stairbench::load::target::schemes_phrase()),
        "{err}"
    );
}

#[test]
fn run_help_says_what_a_spec_and_a_placement_are_and_its_example_exists() {
    let help = stdout_of(&["run", "--help"]);
    for word in [
        "A spec is a TOML file",
        "shared:",
        "separated:",
        "balanced:",
        "--dry-run",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
    let example = "examples/nginx-wrk.toml";
    assert!(help.contains(example), "{help}");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(example);
    let dry = common::cli(&["run", "--dry-run", path.to_str().unwrap()]);
    assert!(dry.status.success(), "{dry:?}");
}

#[test]
fn verbose_help_speaks_of_the_command_it_is_on() {
    for cmd in ["load", "run", "demo"] {
        let help = stdout_of(&[cmd, "--help"]);
        assert!(!help.contains("`run` and `demo` also"), "{cmd}: {help}");
        assert!(help.contains("every per-second line"), "{cmd}: {help}");
    }
    // One load has no steps and no bar: its -q/-v must not describe run's.
    let load = stdout_of(&["load", "--help"]);
    for runs_word in ["every step", "progress bar", "step lines"] {
        assert!(
            !load.contains(runs_word),
            "load --help: {runs_word:?}: {load}"
        );
    }
}
