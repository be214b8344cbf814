//! The documentation as a contract: README stays a front door, every relative link and anchor
//! resolves, the spec reference names every key the spec takes (and no other), the commands
//! page is the help as the binary prints it, and the guide's shell blocks run as written.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use regex::Regex;

use crate::common;

const README_MAX_LINES: usize = 250;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page under docs/.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// Lines outside fenced code blocks, with their numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a page's headings make (a repeated heading gets `-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) else {
            continue;
        };
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn readme_is_a_front_door() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines: keep it a front door (at most {README_MAX_LINES}) and move reference text into docs/"
    );
    for page in ["docs/guide.md", "docs/spec.md", "docs/commands.md"] {
        assert!(
            readme.contains(&format!("({page})")),
            "README.md does not link {page}"
        );
    }
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let dir = page.parent().unwrap();
        for (n, line) in prose_lines(&text) {
            for cap in link.captures_iter(line) {
                let target = &cap[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, fragment) = target.split_once('#').unwrap_or((target, ""));
                let dest = if path.is_empty() {
                    page.clone()
                } else {
                    dir.join(path)
                };
                let at = format!(
                    "{}:{n}: {target}",
                    page.strip_prefix(root()).unwrap().display()
                );
                if !dest.exists() {
                    broken.push(format!("{at}: no such file"));
                } else if !fragment.is_empty() && dest.extension().is_some_and(|e| e == "md") {
                    let dest_text = std::fs::read_to_string(&dest).unwrap();
                    if !anchors(&dest_text).contains(fragment) {
                        broken.push(format!("{at}: no heading makes #{fragment}"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn user_facing_text_has_no_project_history_numbers() {
    // Seed documents and issue numbers mean nothing to a reader of the docs.
    let history =
        Regex::new(r"(?i)\b(seed 0\d\d|issue #?\d+|seeds? (documents?|analys[ie]s))\b").unwrap();
    let mut found = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        for (n, line) in text.lines().enumerate() {
            if let Some(m) = history.find(line) {
                let rel = page.strip_prefix(root()).unwrap().display().to_string();
                found.push(format!("{rel}:{}: {:?}", n + 1, m.as_str()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "project history in user-facing text:\n{}",
        found.join("\n")
    );
}

#[test]
fn commands_page_is_the_help_the_binary_prints() {
    let out = common::cli(&["man", "--markdown"]);
    common::assert_success(&out);
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains("## `stairbench run`") && page.contains("## `stairbench serve kvd`"));
    common::bless_or_compare(&root().join("docs/commands.md"), &page);
}

/// The spec's tables: each struct a spec section is read into, and the docs/spec.md heading
/// whose table lists its keys.
const SPEC_SECTIONS: &[(&str, &str)] = &[
    ("Spec", "Top level"),
    ("TargetSpec", "`[[targets]]`"),
    ("ReadySpec", "`ready`"),
    ("MetricsSpec", "`metrics`"),
    ("ClientSpec", "`[client]`"),
    ("ClientGroupSpec", "`[[client.groups]]`"),
    ("CountRange", "`clients` and `rate` ranges"),
    ("RateRange", "`clients` and `rate` ranges"),
    ("FindSpec", "`find`"),
    ("CustomPlacementSpec", "`custom_placements`"),
    ("ObserveSpec", "`[[observe]]`"),
    ("ComparisonSpec", "`[[comparisons]]`"),
    ("Threshold", "`[[thresholds]]`"),
    ("ReportSpec", "`[report]`"),
    ("ProfileSpec", "`[profile]`"),
    ("HostTable", "`[hosts]`"),
];

fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The keys a deserialized struct takes: its `pub` fields, renamed as serde renames them.
fn struct_keys(name: &str) -> BTreeSet<String> {
    let mut files = Vec::new();
    rust_sources(&root().join("src"), &mut files);
    let opening = format!("pub struct {name} {{");
    let field = Regex::new(r"^\s*pub (r#)?([a-z_0-9]+):").unwrap();
    let rename = Regex::new(r#"rename = "([^"]+)""#).unwrap();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let Some(start) = text.find(&opening) else {
            continue;
        };
        let body = &text[start + opening.len()..];
        let body = &body[..body.find("\n}").expect("struct body ends")];
        let mut keys = BTreeSet::new();
        let mut renamed = None;
        for line in body.lines() {
            if let Some(r) = rename.captures(line) {
                renamed = Some(r[1].to_string());
            }
            if let Some(f) = field.captures(line) {
                keys.insert(renamed.take().unwrap_or_else(|| f[2].to_string()));
            }
        }
        return keys;
    }
    panic!("no `pub struct {name}` under src/: update SPEC_SECTIONS in tests/it/docs.rs");
}

/// The keys in the first column of the tables under a docs/spec.md heading.
fn documented_keys(spec_md: &str, heading: &str) -> BTreeSet<String> {
    let row = Regex::new(r"^\| `([a-z_0-9]+)` \|").unwrap();
    let mut keys = BTreeSet::new();
    let mut inside = false;
    for (_, line) in prose_lines(spec_md) {
        if let Some(h) = line.strip_prefix('#') {
            inside = h.trim_start_matches('#').trim() == heading;
            continue;
        }
        if let Some(c) = row.captures(line).filter(|_| inside) {
            keys.insert(c[1].to_string());
        }
    }
    keys
}

#[test]
fn spec_reference_lists_every_key_and_no_other() {
    let spec_md = std::fs::read_to_string(root().join("docs/spec.md")).unwrap();
    let mut by_heading: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (name, heading) in SPEC_SECTIONS {
        by_heading
            .entry(heading)
            .or_default()
            .extend(struct_keys(name));
    }
    let mut wrong = Vec::new();
    for (heading, code) in &by_heading {
        let docs = documented_keys(&spec_md, heading);
        assert!(
            !docs.is_empty(),
            "docs/spec.md has no key table under the heading {heading}"
        );
        for key in code.difference(&docs) {
            wrong.push(format!(
                "{heading}: `{key}` is read by the code but not documented"
            ));
        }
        for key in docs.difference(code) {
            wrong.push(format!(
                "{heading}: `{key}` is documented but the code has no such key"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/spec.md and the spec disagree:\n{}",
        wrong.join("\n")
    );
}

/// The guide's blocks marked ```` ```sh runnable ````, in order.
fn runnable_blocks(guide: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in guide.lines() {
        match current.as_mut() {
            None if line.trim() == "```sh runnable" => current = Some(String::new()),
            Some(_) if line.trim() == "```" => blocks.push(current.take().unwrap()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn guide_runs_as_written_and_names_every_run_file() {
    for program in ["nginx", "timeout"] {
        if common::find_program(program).is_none() {
            common::skip_or_fail(format!("{program} missing (apt-get install nginx-light)"));
            return;
        }
    }
    let guide = std::fs::read_to_string(root().join("docs/guide.md")).unwrap();
    let blocks = runnable_blocks(&guide);
    assert!(
        blocks.len() >= 4,
        "the guide has {} runnable blocks",
        blocks.len()
    );
    let scratch = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root().join("examples"), scratch.path().join("examples")).unwrap();
    let bin_dir = common::stairbench_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = format!("set -euo pipefail\n{}", blocks.join("\n"));
    let budget = Duration::from_secs(240);
    let out = Command::new("timeout")
        .args([
            "-k",
            "5",
            &budget.as_secs().to_string(),
            "bash",
            "-c",
            &script,
        ])
        .current_dir(scratch.path())
        .env("PATH", path)
        // As every test's run: its sibling tests share the CPUs (common::cli_cmd).
        .env("STAIRBENCH_KEEP_DISTURBED", "true")
        .env_remove("STAIRBENCH_BLESS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the guide's commands failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.contains("peak"), "no peak printed:\n{stdout}");
    assert!(
        stdout.contains("two-workers"),
        "compare printed no second run:\n{stdout}"
    );

    // Followed from the top of a clone, the guide leaves nothing for `git status` to list.
    for entry in std::fs::read_dir(scratch.path()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().to_string();
        if name == "examples" {
            continue;
        }
        let probe = if entry.path().is_dir() {
            format!("{name}/any")
        } else {
            name.clone()
        };
        let ignored = Command::new("git")
            .args(["check-ignore", "--no-index", "-q", &probe])
            .current_dir(root())
            .status()
            .unwrap();
        assert!(
            ignored.success(),
            "the guide leaves {name} in the clone, and .gitignore does not ignore it"
        );
    }

    let run_dir_md = std::fs::read_to_string(root().join("docs/run-directory.md")).unwrap();
    for entry in std::fs::read_dir(scratch.path().join("runs/one-worker")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().to_string();
        if name.starts_with("nginx-") {
            continue; // examples/nginx.sh's prefix under {out}: the page's "anything else" row
        }
        assert!(
            run_dir_md.contains(&format!("`{name}`")) || run_dir_md.contains(&format!("`{name}/")),
            "docs/run-directory.md does not name `{name}`, which a run wrote"
        );
    }
}

/// An example's header says how long it takes ("about 13 s", "about 2.5 minutes"); the dry
/// run says it too, by the one time model. They must agree within a quarter (or 3 s): the
/// Tomcat example's header said 2 minutes where its dry run said 1m06s.
#[test]
fn every_example_header_time_agrees_with_its_dry_run() {
    let said = Regex::new(r"about (\d+(?:\.\d+)?) ?(s|seconds|minutes?)\b").unwrap();
    let estimated = Regex::new(r"estimated time: about (\d+)m(\d\d)s").unwrap();
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("examples")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let header: String = text
            .lines()
            .take_while(|l| l.starts_with('#'))
            .collect::<Vec<_>>()
            .join(" ");
        let Some(c) = said.captures(&header) else {
            continue;
        };
        let scale = if c[2].starts_with('m') { 60.0 } else { 1.0 };
        let header_s: f64 = c[1].parse::<f64>().unwrap() * scale;
        let out = common::cli(&[
            std::ffi::OsStr::new("run"),
            path.as_os_str(),
            std::ffi::OsStr::new("--dry-run"),
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let e = estimated
            .captures(&stdout)
            .unwrap_or_else(|| panic!("{}: no estimate in {stdout}", path.display()));
        let dry_s = e[1].parse::<f64>().unwrap() * 60.0 + e[2].parse::<f64>().unwrap();
        assert!(
            (header_s - dry_s).abs() <= (0.25 * dry_s).max(3.0),
            "{}: the header says {header_s} s, the dry run {dry_s} s",
            path.display()
        );
        checked += 1;
    }
    assert!(checked >= 10, "{checked} examples state their time");
}
