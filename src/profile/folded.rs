//! Folded stacks: `frame;frame;frame COUNT` lines, the format every flame-graph tool reads.
//!
//! Counts are integers (speedscope's parser and inferno's both need that), and the set is kept
//! sorted by stack with each stack once, which is exactly how `inferno-collapse-perf` writes it.

use std::collections::HashMap;
use std::io::{self, Write};

/// A set of folded stacks with their sample weights, sorted by stack, each stack once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Folded {
    stacks: Vec<(String, u64)>,
}

/// What parsing folded text found besides the stacks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoldedParse {
    /// The stacks read.
    pub folded: Folded,
    /// Non-empty lines without a `STACK COUNT` shape (or with a non-integer count), skipped.
    pub garbled_lines: u64,
    /// The first garbled lines: 1-based line number and the line, cut to 120 characters.
    pub garbled_examples: Vec<(u64, String)>,
}

/// How many garbled lines are kept as examples for the error message.
pub(crate) const GARBLED_EXAMPLES: usize = 5;

impl Folded {
    /// Builds a set from stacks that may repeat; repeated stacks are summed.
    pub fn from_pairs<I: IntoIterator<Item = (String, u64)>>(pairs: I) -> Folded {
        let mut sums: HashMap<String, u64> = HashMap::new();
        for (stack, count) in pairs {
            *sums.entry(stack).or_insert(0) += count;
        }
        let mut stacks: Vec<(String, u64)> = sums.into_iter().collect();
        stacks.sort_unstable();
        Folded { stacks }
    }

    /// The stacks and their weights, sorted by stack.
    pub fn stacks(&self) -> &[(String, u64)] {
        &self.stacks
    }

    /// The sum of all weights.
    pub fn total(&self) -> u64 {
        self.stacks.iter().map(|(_, count)| count).sum()
    }

    /// True when there is no stack.
    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// Rewrites every stack (None drops it) and sums the stacks that become identical.
    pub fn map_stacks<F: FnMut(&str) -> Option<String>>(&self, mut f: F) -> Folded {
        Folded::from_pairs(
            self.stacks
                .iter()
                .filter_map(|(stack, count)| f(stack).map(|s| (s, *count))),
        )
    }

    /// Writes `STACK COUNT` lines, the format `inferno-collapse-perf` writes.
    pub fn write_to<W: Write>(&self, mut writer: W) -> io::Result<()> {
        for (stack, count) in &self.stacks {
            writeln!(writer, "{stack} {count}")?;
        }
        writer.flush()
    }

    /// The folded text as one string.
    pub fn to_text(&self) -> String {
        let mut out = Vec::new();
        self.write_to(&mut out)
            .expect("writing to a Vec cannot fail");
        String::from_utf8(out).expect("stacks are UTF-8")
    }

    /// Parses folded text; lines that are not `STACK COUNT` are counted, never fatal.
    pub fn parse(text: &str) -> FoldedParse {
        let mut pairs = Vec::new();
        let mut garbled_lines = 0;
        let mut garbled_examples = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with("# ") {
                continue;
            }
            match parse_line(line) {
                Some(pair) => pairs.push(pair),
                None => {
                    garbled_lines += 1;
                    if garbled_examples.len() < GARBLED_EXAMPLES {
                        garbled_examples.push((index as u64 + 1, clip(line)));
                    }
                }
            }
        }
        FoldedParse {
            folded: Folded::from_pairs(pairs),
            garbled_lines,
            garbled_examples,
        }
    }

    /// Lines for `inferno::flamegraph::from_lines`, with leaf frames that end in a space and
    /// digits protected (flame-graph readers take that tail for a count).
    pub(crate) fn render_lines(&self) -> Vec<String> {
        self.stacks
            .iter()
            .map(|(stack, count)| format!("{} {count}", protect_tail(stack)))
            .collect()
    }
}

/// Splits `STACK COUNT`; the count must be a non-negative integer.
pub(crate) fn parse_line(line: &str) -> Option<(String, u64)> {
    let (stack, count) = line.rsplit_once(' ')?;
    let stack = stack.trim_end();
    if stack.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((stack.to_string(), count.parse().ok()?))
}

/// True when a line has the `STACK COUNT` shape.
pub(crate) fn looks_folded(line: &str) -> bool {
    parse_line(line.trim()).is_some()
}

/// Cuts a line for an error message.
pub(crate) fn clip(line: &str) -> String {
    line.chars().take(120).collect()
}

/// `foo 12` as the last frame would be read as a count: join it as `foo_12`.
pub(crate) fn protect_tail(stack: &str) -> std::borrow::Cow<'_, str> {
    let leaf_start = stack.rfind(';').map_or(0, |i| i + 1);
    let leaf = &stack[leaf_start..];
    match leaf.rsplit_once(' ') {
        Some((_, tail)) if !tail.is_empty() && tail.bytes().all(|b| b.is_ascii_digit()) => {
            let space = leaf_start + leaf.rfind(' ').expect("found above");
            let mut owned = stack.to_string();
            owned.replace_range(space..space + 1, "_");
            owned.into()
        }
        _ => stack.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_sums_repeated_stacks_and_counts_garbage() {
        let parsed = Folded::parse("a;b 3\na;c 2\n\na;b 4\nnot a count x\n1.5\na;d 2.5\n");
        assert_eq!(
            parsed.folded.stacks(),
            &[("a;b".to_string(), 7), ("a;c".to_string(), 2)]
        );
        assert_eq!(parsed.garbled_lines, 3);
        assert_eq!(parsed.garbled_examples[0].0, 5);
        assert_eq!(parsed.folded.total(), 9);
    }

    #[test]
    fn write_round_trips() {
        let folded = Folded::from_pairs([("x;y".to_string(), 5), ("x".to_string(), 1)]);
        assert_eq!(folded.to_text(), "x 1\nx;y 5\n");
        assert_eq!(Folded::parse(&folded.to_text()).folded, folded);
    }

    #[test]
    fn leaf_ending_in_digits_is_protected_for_rendering() {
        let folded = Folded::from_pairs([("t;alloc 16".to_string(), 2)]);
        assert_eq!(folded.render_lines(), vec!["t;alloc_16 2".to_string()]);
    }
}
