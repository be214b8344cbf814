//! The crate's layers (README "Architecture"): a module imports only modules of lower layers.
//! `cargo test layering` reads every file under `src/` and names each import that goes up
//! or sideways.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level module → layer. Keep in step with README's "Architecture" table.
const LAYERS: &[(&str, u8)] = &[
    ("units", 1),
    ("cpuset", 1),
    ("signals", 1),
    ("exit", 1),
    ("clock", 1),
    ("machine", 1),
    ("process", 1),
    ("wire", 2),
    ("record", 2),
    ("remote", 2),
    ("load", 3),
    ("serve", 3),
    ("observe", 3),
    ("profile", 3),
    ("analyze", 3),
    ("sweep", 4),
    ("report", 4),
    ("cli", 5),
];

/// The leaves that build on another leaf: the CPU-list parser under the topology reader and
/// the process supervisor, the /proc reader under the supervisor. No other same-layer import.
const LEAF_ON_LEAF: &[(&str, &str)] = &[
    ("machine", "cpuset"),
    ("process", "cpuset"),
    ("process", "machine"),
];

fn layer_of(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`src/load/worker.rs` → `load`).
fn owner(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Every top-level module named as `crate::NAME` in the file's code (comments left out).
fn imports(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push((n + 1, name));
            }
        }
        // `use crate::{a, b}` names several modules at once.
        if let Some(at) = code.find("crate::{") {
            let inner = &code[at + "crate::{".len()..];
            for part in inner.split([',', '}']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    found.push((n + 1, name));
                }
            }
        }
    }
    found
}

#[test]
fn layering() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = BTreeMap::new();
    for file in &files {
        let own = owner(&src, file);
        if own == "main" || own == "lib" {
            continue;
        }
        let own_layer = layer_of(&own)
            .unwrap_or_else(|| panic!("src/{own} is in no layer: add it to LAYERS and README"));
        let text = std::fs::read_to_string(file).unwrap();
        for (line, module) in imports(&text) {
            if module == own {
                continue;
            }
            let Some(layer) = layer_of(&module) else {
                continue;
            };
            if layer >= own_layer && !LEAF_ON_LEAF.contains(&(own.as_str(), module.as_str())) {
                let rel = file.strip_prefix(&src).unwrap().display().to_string();
                violations
                    .entry(format!(
                        "{own} (layer {own_layer}) imports {module} (layer {layer})"
                    ))
                    .or_insert_with(Vec::new)
                    .push(format!("src/{rel}:{line}"));
            }
        }
    }
    let report: Vec<String> = violations
        .iter()
        .map(|(what, at)| format!("{what}: {}", at.join(", ")))
        .collect();
    assert!(
        report.is_empty(),
        "imports against the layers:\n{}",
        report.join("\n")
    );
}
