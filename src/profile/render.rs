//! Flame graph SVGs (inferno's `flamegraph` module) and differential flame graphs.
//!
//! The differential graph follows Brendan Gregg's: widths are B's samples, A is scaled to B's
//! total so a bigger run does not paint everything red, and each frame is red where B spends a
//! larger share than A and blue where it spends less. The scaled A stays an integer (rounded).

use std::collections::BTreeMap;
use std::io::Write;

use inferno::flamegraph::color::{MultiPalette, Palette};
use inferno::flamegraph::{self, Options};

use super::folded::protect_tail;
use super::{Folded, ProfileError};

/// How a graph is titled and what its weights count.
#[derive(Debug, Clone)]
pub struct GraphLabels {
    /// The title at the top of the graph.
    pub title: String,
    /// What a weight counts: `samples`, or `ns` for cpu-clock periods.
    pub count_name: String,
    /// Colour as flamegraph.pl's java palette: JIT-compiled Java green, JVM-internal C++
    /// yellow, native red, kernel orange (the stacks keep their `_[j]` and `_[k]` marks).
    pub java_palette: bool,
}

impl GraphLabels {
    /// Labels for a graph of the given perf event (None for folded input).
    pub fn new(title: impl Into<String>, event: Option<&str>) -> GraphLabels {
        let count_name = match event {
            Some("cpu-clock") | Some("task-clock") => "ns",
            _ => "samples",
        };
        GraphLabels {
            title: title.into(),
            count_name: count_name.into(),
            java_palette: false,
        }
    }

    /// The same labels with the java palette.
    pub fn java(mut self, java: bool) -> GraphLabels {
        self.java_palette = java;
        self
    }
}

fn options(labels: &GraphLabels) -> Options<'static> {
    let mut opt = Options::default();
    opt.title = labels.title.clone();
    opt.count_name = labels.count_name.clone();
    // colour by function name, so the same function has the same colour in every graph
    opt.hash = true;
    if labels.java_palette {
        opt.colors = Palette::Multi(MultiPalette::Java);
    }
    opt
}

/// Draws a flame graph of the stacks.
pub fn write_flame_graph<W: Write>(
    folded: &Folded,
    labels: &GraphLabels,
    writer: W,
) -> Result<(), ProfileError> {
    let lines = folded.render_lines();
    flamegraph::from_lines(
        &mut options(labels),
        lines.iter().map(String::as_str),
        writer,
    )
    .map_err(|e| ProfileError::io(format!("drawing flame graph `{}`", labels.title), e))
}

/// The stacks of a differential graph: A scaled to B's total, and B.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffStacks {
    /// Stack → (A's weight scaled to B's total, B's weight).
    pub stacks: BTreeMap<String, (u64, u64)>,
}

/// Pairs A and B stack by stack, A normalised to B's total.
pub fn diff_stacks(a: &Folded, b: &Folded) -> DiffStacks {
    let (total_a, total_b) = (a.total(), b.total());
    let scale = if total_a == 0 {
        0.0
    } else {
        total_b as f64 / total_a as f64
    };
    let mut stacks: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (stack, count) in a.stacks() {
        stacks.entry(stack.clone()).or_default().0 = (*count as f64 * scale).round() as u64;
    }
    for (stack, count) in b.stacks() {
        stacks.entry(stack.clone()).or_default().1 = *count;
    }
    DiffStacks { stacks }
}

impl DiffStacks {
    /// `STACK A B` lines, the format of `inferno-diff-folded` and `difffolded.pl`.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for (stack, (a, b)) in &self.stacks {
            out.push_str(&format!("{stack} {a} {b}\n"));
        }
        out
    }
}

/// Draws the differential flame graph: B's widths, red where B grew, blue where it shrank.
pub fn write_diff_graph<W: Write>(
    diff: &DiffStacks,
    labels: &GraphLabels,
    writer: W,
) -> Result<(), ProfileError> {
    let lines: Vec<String> = diff
        .stacks
        .iter()
        .map(|(stack, (a, b))| format!("{} {a} {b}", protect_tail(stack)))
        .collect();
    let mut opt = options(labels);
    flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), writer)
        .map_err(|e| ProfileError::io(format!("drawing differential graph `{}`", labels.title), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_normalises_a_to_b_total() {
        let a = Folded::from_pairs([("t;x".to_string(), 1), ("t;y".to_string(), 1)]);
        let b = Folded::from_pairs([("t;x".to_string(), 30), ("t;z".to_string(), 10)]);
        let d = diff_stacks(&a, &b);
        assert_eq!(d.to_text(), "t;x 20 30\nt;y 20 0\nt;z 0 10\n");
    }

    #[test]
    fn draws_svgs() {
        let a = Folded::from_pairs([("t;x".to_string(), 3), ("t;y".to_string(), 1)]);
        let mut svg = Vec::new();
        write_flame_graph(&a, &GraphLabels::new("T", None), &mut svg).unwrap();
        let svg = String::from_utf8(svg).unwrap();
        assert!(svg.starts_with("<?xml"), "{svg}");
        // Each frame with its weight: x 3 of 4 samples, y 1.
        for title in ["x (3 samples, 75.00%)", "y (1 samples, 25.00%)"] {
            assert!(svg.contains(&format!("<title>{title}</title>")), "{title}");
        }
        let mut diff = Vec::new();
        write_diff_graph(
            &diff_stacks(&a, &a),
            &GraphLabels::new("D", None),
            &mut diff,
        )
        .unwrap();
        assert!(String::from_utf8(diff).unwrap().contains("<svg"));
    }
}
