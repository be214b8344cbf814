//! Counts the project holds itself to (docs/benchmarks.md, "Code-health counts").

use std::path::{Path, PathBuf};

/// The `Result<T, String>` in `text`, counted as `bench/count_string_results.py` counts them:
/// each `Result<` whose arguments, at the top level, are two and end in `String`, across
/// line breaks.
fn string_results(text: &str) -> usize {
    let mut n = 0;
    let mut from = 0;
    while let Some(at) = text[from..].find("Result") {
        let start = from + at;
        from = start + "Result".len();
        let before = text[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let Some(args) = text[from..].trim_start().strip_prefix('<') else {
            continue;
        };
        if top_level_args(args).is_some_and(|a| a.len() == 2 && a[1].trim() == "String") {
            n += 1;
        }
    }
    n
}

/// The top-level arguments of the angle brackets `args` starts inside of (None: unclosed).
fn top_level_args(args: &str) -> Option<Vec<String>> {
    let (mut depth, mut out, mut cur) = (1, Vec::new(), String::new());
    for c in args.chars() {
        match c {
            '<' => depth += 1,
            '>' => {
                depth -= 1;
                if depth == 0 {
                    out.push(cur);
                    return Some(out);
                }
            }
            ',' if depth == 1 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    None
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_count_follows_signatures_across_lines() {
    assert_eq!(string_results("fn f() -> Result<(), String> {}"), 1);
    assert_eq!(
        string_results("fn f()\n    -> Result<\n        Vec<u8>,\n        String\n    > {}"),
        1
    );
    assert_eq!(string_results("Result<Option<String>, String>"), 1);
    assert_eq!(
        string_results("Result<String, MetricsError> io::Result<String>"),
        0
    );
    assert_eq!(
        string_results("FooResult<(), String> Result<(), StringError>"),
        0
    );
}

/// A ratchet at today's count: typed errors inside the library, `Result<_, String>` only at
/// the edges that print (`cli/load.rs`'s five clap value parsers, `RunData::read` at the
/// report writers' top, the gRPC client's one): 7, as `bench/count_string_results.py src`
/// counted on 2026-11-28 (126 before the typed errors). A new one fails; when one goes,
/// lower the allowance with it.
const STRING_ERRORS_ALLOWED: usize = 7;

#[test]
fn no_string_error_is_added_to_src() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut per_file: Vec<(usize, String)> = files
        .iter()
        .map(|p| {
            (
                string_results(&std::fs::read_to_string(p).unwrap()),
                p.display().to_string(),
            )
        })
        .filter(|(n, _)| *n > 0)
        .collect();
    per_file.sort_by(|a, b| b.cmp(a));
    let total: usize = per_file.iter().map(|(n, _)| n).sum();
    assert!(
        total <= STRING_ERRORS_ALLOWED,
        "{total} Result<_, String> in src (at most {STRING_ERRORS_ALLOWED}, at the edges that \
         print); give the module a thiserror enum: {per_file:?}"
    );
}

/// Code names the study it follows by name (docs/README.md lists them once), not by the
/// number of its seed document, which a reader of the code cannot look up.
#[test]
fn code_names_studies_not_seed_numbers() {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let numbered: Vec<String> = files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| {
                    let l = l.to_ascii_lowercase();
                    ["seed 00", "seeds 00", "seed-00"]
                        .iter()
                        .any(|p| l.contains(p))
                })
                .map(|(i, _)| format!("{}:{}", f.display(), i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(numbered.is_empty(), "seed numbers in code: {numbered:?}");
}

/// `CI` is read in one place (`stairbench::machine::in_ci`, through `common::in_ci` in the
/// tests): a second reading of it once skipped in CI (`CI == "true"` where `CI=1` was set) and
/// bypassed the skip summary. Catches `std::env::var("CI")` anywhere else in src/ or tests/.
#[test]
fn ci_is_read_in_one_place() {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    rust_files(Path::new("tests"), &mut files);
    let readers: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("src/machine/mod.rs") && !f.ends_with("it/code_health.rs"))
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains("var(\"CI\")") || l.contains("var_os(\"CI\")"))
                .map(|(i, _)| format!("{}:{}", f.display(), i + 1))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        readers.is_empty(),
        "CI read outside machine::in_ci: {readers:?}"
    );
}

/// Modules live in folders named after them: a `#[path]` attribute hides a file from a reader
/// who follows `mod x;` to `x.rs` or `x/mod.rs`.
#[test]
fn no_module_is_loaded_by_path_attribute() {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let attrs: Vec<String> = files
        .iter()
        .filter(|f| std::fs::read_to_string(f).unwrap().contains("#[path"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(attrs.is_empty(), "#[path] modules in: {attrs:?}");
}

/// What tests name machine-wide (a shared-memory region, a kvd rank's name) comes from
/// `common::unique_name`, counted per process: a name built from the pid and a helper's tag
/// alone was given by two tests at once (`sbt-kvdk-PID` by a kvd and a Slurm test), which
/// failed one of them in a filtered run (`-- instances:: kvd`) that passed alone. Catches a
/// `format!` of the pid anywhere else in tests/ but one process name (a comm is 15 bytes,
/// too short for a counter) and the namespace helpers' own counted names.
#[test]
fn tests_name_machine_wide_things_through_unique_name() {
    let mut files = Vec::new();
    rust_files(Path::new("tests"), &mut files);
    let allowed = [
        "tests/it/common.rs",
        "tests/it/netns.rs",
        "tests/it/code_health.rs",
    ];
    let mut found = Vec::new();
    for f in files {
        let path = f.display().to_string();
        if allowed.contains(&path.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        for line in text.lines() {
            let pid_name = line.contains("format!(") && line.contains("process::id()");
            if pid_name && !line.contains("\"sbrun{}\"") {
                found.push(format!("{path}: {}", line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "names from the pid: {found:#?}");
}

/// The report builds nothing it throws away: every function report/ exports is called by the
/// library itself, not only by tests (the HTML adapter once built series and a results table
/// that only tests read). `read_analysis_json` is the one export for the library's users (it
/// reads analysis.json back typed). Catches a section, table or series made and left unread.
#[test]
fn the_report_exports_nothing_only_tests_call() {
    let mut files = Vec::new();
    rust_files(Path::new("src"), &mut files);
    let code: Vec<(PathBuf, String)> = (files.into_iter())
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("").to_string();
            (f, code)
        })
        .collect();
    let all: String = code.iter().map(|(_, c)| c.as_str()).collect();
    let export = regex::Regex::new(r"pub(?:\((?:crate|super)\))? fn (\w+)").unwrap();
    let mut unread = Vec::new();
    for (f, c) in code.iter().filter(|(f, _)| f.starts_with("src/report")) {
        for m in export.captures_iter(c) {
            let name = &m[1];
            let uses = regex::Regex::new(&format!(r"\b{name}\b")).unwrap();
            if uses.find_iter(&all).count() <= 1 && name != "read_analysis_json" {
                unread.push(format!("{}: {name}", f.display()));
            }
        }
    }
    assert!(
        unread.is_empty(),
        "exported, called by no library code: {unread:?}"
    );
}

/// The crate's lints are declared once, in Cargo.toml's `[lints]` table, so that the library,
/// the binary and every test target are held to the same ones.
#[test]
fn the_lints_are_declared_in_cargo_toml() {
    let manifest: toml::Table = std::fs::read_to_string("Cargo.toml")
        .unwrap()
        .parse()
        .unwrap();
    let lints = manifest.get("lints").and_then(|l| l.as_table());
    assert!(
        lints.is_some_and(|l| l.contains_key("rust") && l.contains_key("clippy")),
        "Cargo.toml has no [lints.rust] and [lints.clippy] tables"
    );
}

/// Every `pub fn` of the library is called somewhere (the library, a test, a benchmark or the
/// fuzz targets): a public function nobody calls is dead code the compiler cannot flag.
#[test]
fn no_public_function_is_dead() {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches", "fuzz"] {
        if Path::new(dir).is_dir() {
            rust_files(Path::new(dir), &mut files);
        }
    }
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let t = std::fs::read_to_string(&f).unwrap();
            (f, t)
        })
        .collect();
    let definition = regex::Regex::new(r"pub(?:\([a-z]+\))? fn (\w+)").unwrap();
    let words = regex::Regex::new(r"\w+").unwrap();
    let mut uses = std::collections::HashMap::<&str, usize>::new();
    for (_, text) in &texts {
        for w in words.find_iter(text) {
            *uses.entry(w.as_str()).or_default() += 1;
        }
    }
    let dead: Vec<String> = texts
        .iter()
        .filter(|(f, _)| f.starts_with("src"))
        .flat_map(|(f, text)| {
            definition
                .captures_iter(text)
                .filter(|c| uses.get(&c[1]).copied().unwrap_or(0) <= 1)
                .map(|c| format!("{}: {}", f.display(), &c[1]))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(dead.is_empty(), "public functions nobody calls: {dead:?}");
}
