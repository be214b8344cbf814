//! The crate's layers (the docs' "Architecture" page): a module imports only modules of lower
//! layers. `cargo test layering` reads every file under `src/` and names each import that goes
//! up or sideways. Layer 4, `fleet`, runs a step's processes here and on other hosts (through
//! `remote`'s engines) and knows nothing of specs; `sweep` above it plans and loops.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Top-level module → layer. Keep in step with the docs' "Architecture" table.
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
    ("placement", 3),
    ("analyze", 3),
    ("fleet", 4),
    ("sweep", 5),
    ("report", 5),
    ("cli", 6),
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

/// A file's module as a graph node: its top-level module and the one below it
/// (`src/sweep/plan/hosts.rs` → `sweep::plan`, `src/load/mod.rs` → `load`).
fn node_of(src: &Path, file: &Path) -> String {
    let mut parts = module_path(src, file);
    parts.truncate(2);
    parts.join("::")
}

/// The full module path of a file (`src/sweep/plan/hosts.rs` → `[sweep, plan, hosts]`).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

fn ident(text: &str) -> String {
    text.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The paths after `prefix` in `code`, up to two segments, braces expanded one level:
/// `crate::load::{engine, shm::run}` → `[load, engine]`, `[load, shm]`.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let mut heads = vec![Vec::new()];
        let mut tail = rest;
        for _ in 0..2 {
            if let Some(inner) = tail.strip_prefix('{') {
                let end = inner.find('}').unwrap_or(inner.len());
                let items = inner[..end].split(',').map(ident).filter(|s| !s.is_empty());
                let head = heads.pop().unwrap_or_default();
                heads = items
                    .map(|i| head.iter().cloned().chain([i]).collect())
                    .collect();
                break;
            }
            let name = ident(tail);
            if name.is_empty() {
                break;
            }
            tail = &tail[name.len()..];
            for h in &mut heads {
                h.push(name.clone());
            }
            match tail.strip_prefix("::") {
                Some(t) => tail = t,
                None => break,
            }
        }
        found.extend(heads.into_iter().filter(|h| !h.is_empty()));
    }
    found
}

/// The code of a file, comments left out, as one string (so a `use` over several lines reads
/// as one).
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The module graph: node → the nodes it names. A module's use of its parent (`super::Item`
/// in a child, the items its `mod.rs` declares) is not an edge: the parent is its namespace.
fn module_graph(src: &Path) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.retain(|f| !matches!(node_of(src, f).as_str(), "main" | "lib"));
    let nodes: std::collections::BTreeSet<String> = files.iter().map(|f| node_of(src, f)).collect();
    let mut graph: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let own = node_of(src, file);
        let path = module_path(src, file);
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let mut named = paths_after(&code, "crate::");
        let parent = &path[..path.len().saturating_sub(1)];
        for p in paths_after(&code, "super::") {
            named.push(parent.iter().cloned().chain(p).collect());
        }
        let edges = graph.entry(own.clone()).or_default();
        for p in named {
            let two = p.iter().take(2).cloned().collect::<Vec<_>>().join("::");
            let target = if nodes.contains(&two) {
                two
            } else {
                p[0].clone()
            };
            let is_ancestor = own == target || own.starts_with(&format!("{target}::"));
            if nodes.contains(&target) && !is_ancestor {
                edges.insert(target);
            }
        }
    }
    graph
}

/// Groups of nodes that reach each other (each group listed once, sorted).
fn cycles(graph: &BTreeMap<String, std::collections::BTreeSet<String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, _> = graph.keys().map(|n| (n, reach(n))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    for (n, from_n) in &reached {
        if !from_n.contains(*n) || groups.iter().any(|g| g.contains(n)) {
            continue;
        }
        let group: Vec<String> = reached
            .iter()
            .filter(|(m, from_m)| from_n.contains(**m) && from_m.contains(*n))
            .map(|(m, _)| (*m).clone())
            .collect();
        groups.push(group);
    }
    groups
}

#[test]
fn no_import_cycles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = module_graph(&src);
    assert!(
        graph.contains_key("sweep::runner") && graph["sweep::runner"].contains("sweep::plan"),
        "the graph reader lost the runner's import of the plan: {graph:?}"
    );
    let found = cycles(&graph);
    let report: Vec<String> = found
        .iter()
        .map(|g| {
            let edges: Vec<String> = g
                .iter()
                .map(|n| {
                    let to: Vec<&String> = graph[n].iter().filter(|t| g.contains(t)).collect();
                    format!("  {n} -> {to:?}")
                })
                .collect();
            format!("{g:?}\n{}", edges.join("\n"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "modules that import each other:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_cycle_reader_finds_a_cycle_through_braces_and_super() {
    let named = paths_after(
        "use crate::load::{engine, shm::run}; use super::{a, b}; x::crate::no",
        "crate::",
    );
    assert_eq!(named, [vec!["load", "engine"], vec!["load", "shm"]]);
    assert_eq!(
        paths_after("use super::{a, b};", "super::"),
        [vec!["a"], vec!["b"]]
    );
    let mut graph: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for (a, b) in [
        ("x::a", "x::b"),
        ("x::b", "x::c"),
        ("x::c", "x::a"),
        ("x::c", "y"),
    ] {
        graph.entry(a.into()).or_default().insert(b.into());
    }
    graph.entry("y".into()).or_default();
    assert_eq!(cycles(&graph), [vec!["x::a", "x::b", "x::c"]]);
}
