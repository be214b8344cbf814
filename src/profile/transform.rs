//! Transforms on folded stacks: user/kernel split, thread renaming and merging, demangling,
//! and the coalescing of the messenger study (each stack as the multiset of its frames).
//!
//! Every transform rewrites stacks and sums those that become identical, so the total weight
//! is kept (the split partitions it: user weight + kernel weight = total).

use std::collections::HashMap;

use regex::Regex;

use super::{Folded, ProfileError};

/// inferno's mark on kernel frames when folding with `annotate_kernel`.
pub const KERNEL_MARK: &str = "_[k]";

/// Which side of the user/kernel boundary to keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Samples whose leaf frame runs in user space, with their whole stack.
    User,
    /// Samples taken in the kernel: the thread frame and the kernel frames only.
    Kernel,
}

/// A thread-frame renaming rule, `REGEX=REPLACEMENT` (`$1` refers to a group).
#[derive(Debug, Clone)]
pub struct Rename {
    /// What to look for in the thread frame.
    pub pattern: Regex,
    /// What to put instead.
    pub replacement: String,
}

impl std::str::FromStr for Rename {
    type Err = ProfileError;

    fn from_str(rule: &str) -> Result<Rename, ProfileError> {
        let (pattern, replacement) = rule.split_once('=').ok_or_else(|| ProfileError::BadOption {
            what: format!("merge rule `{rule}` has no `=`: write REGEX=REPLACEMENT, e.g. 'reactor-[0-9]+=reactor'"),
        })?;
        let pattern = Regex::new(pattern).map_err(|e| ProfileError::BadOption {
            what: format!("merge rule `{rule}`: bad regex: {e}"),
        })?;
        Ok(Rename {
            pattern,
            replacement: replacement.to_string(),
        })
    }
}

/// The transforms asked for, applied in this order: split, rename, merge threads, demangle,
/// coalesce.
#[derive(Debug, Clone, Default)]
pub struct Transforms {
    /// Keep only the user or the kernel part (stacks must be folded with kernel marks).
    pub split: Option<Side>,
    /// Thread-frame renaming rules, in order.
    pub rename: Vec<Rename>,
    /// Drop a trailing `-N`, `_N` or `#N` from the thread frame.
    pub merge_threads: bool,
    /// The thread frame carries `-PID` or `-PID/TID` (folded with `--pid`/`--tid`).
    pub pid_suffix: bool,
    /// Demangle C++ and Rust symbols.
    pub demangle: bool,
    /// Each stack becomes its distinct frames in first-occurrence order, `NAME [K]` for K > 1.
    pub coalesce: bool,
    /// Without a split, keep inferno's `_[k]` marks (a graph coloured by the java palette
    /// tells kernel frames apart by them).
    pub keep_kernel_marks: bool,
}

impl Transforms {
    /// Applies the transforms asked for; kernel marks are removed in every case.
    pub fn apply(&self, folded: &Folded) -> Folded {
        let mut out = match self.split {
            Some(side) => split(folded, side),
            None if self.keep_kernel_marks => folded.clone(),
            None => unmark_kernel(folded),
        };
        if !self.rename.is_empty() || self.merge_threads {
            out = out.map_stacks(|s| Some(self.rename_thread(s)));
        }
        if self.demangle {
            out = out.map_stacks(|s| Some(map_frames(s, demangle)));
        }
        if self.coalesce {
            out = out.map_stacks(|s| Some(coalesce_stack(s)));
        }
        out
    }

    fn rename_thread(&self, stack: &str) -> String {
        let (thread, rest) = split_thread(stack);
        let (mut name, suffix) = if self.pid_suffix {
            split_pid_suffix(thread)
        } else {
            (thread.to_string(), "")
        };
        for rule in &self.rename {
            name = rule
                .pattern
                .replace_all(&name, rule.replacement.as_str())
                .into_owned();
        }
        if self.merge_threads {
            name = merge_thread_name(&name).to_string();
        }
        let mut out = name;
        out.push_str(suffix);
        if let Some(rest) = rest {
            out.push(';');
            out.push_str(rest);
        }
        out
    }
}

/// The thread-name merging rule, shared with the per-thread CPU figures of `observe`.
pub use crate::machine::threads::merge_thread_name;

/// `comm-PID` or `comm-PID/TID` → (`comm`, `-PID/TID`).
fn split_pid_suffix(thread: &str) -> (String, &str) {
    let Some(dash) = thread.rfind('-') else {
        return (thread.to_string(), "");
    };
    let suffix = &thread[dash + 1..];
    let is_ids = !suffix.is_empty()
        && suffix.split('/').count() <= 2
        && suffix
            .split('/')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if is_ids {
        (thread[..dash].to_string(), &thread[dash..])
    } else {
        (thread.to_string(), "")
    }
}

/// The frames of a stack. A `;` followed by a space is part of a frame (Rust's `[u8; 8]`).
pub fn frames(stack: &str) -> impl Iterator<Item = &str> {
    let bytes = stack.as_bytes();
    let mut start = 0;
    let mut pos = 0;
    std::iter::from_fn(move || {
        if start > bytes.len() {
            return None;
        }
        while pos < bytes.len() {
            if bytes[pos] == b';' && bytes.get(pos + 1) != Some(&b' ') {
                let frame = &stack[start..pos];
                pos += 1;
                start = pos;
                return Some(frame);
            }
            pos += 1;
        }
        let frame = &stack[start..];
        start = bytes.len() + 1;
        Some(frame)
    })
}

/// The thread frame and the rest of the stack.
fn split_thread(stack: &str) -> (&str, Option<&str>) {
    let first = frames(stack).next().unwrap_or(stack);
    if first.len() == stack.len() {
        (stack, None)
    } else {
        (first, Some(&stack[first.len() + 1..]))
    }
}

fn map_frames(stack: &str, mut f: impl FnMut(&str) -> String) -> String {
    let mapped: Vec<String> = frames(stack).map(&mut f).collect();
    mapped.join(";")
}

/// Removes inferno's `_[k]` marks.
pub fn unmark_kernel(folded: &Folded) -> Folded {
    if !folded.stacks().iter().any(|(s, _)| s.contains(KERNEL_MARK)) {
        return folded.clone();
    }
    folded.map_stacks(|s| Some(map_frames(s, |f| strip_kernel_mark(f).to_string())))
}

fn strip_kernel_mark(frame: &str) -> &str {
    frame.strip_suffix(KERNEL_MARK).unwrap_or(frame)
}

/// Keeps the user or the kernel samples (see [`Side`]); marks are removed.
pub fn split(folded: &Folded, side: Side) -> Folded {
    folded.map_stacks(|stack| {
        let all: Vec<&str> = frames(stack).collect();
        let leaf_in_kernel = all.len() > 1 && all[all.len() - 1].ends_with(KERNEL_MARK);
        match (side, leaf_in_kernel) {
            (Side::User, false) => Some(all.join(";")),
            (Side::Kernel, true) => {
                let kernel = all[1..]
                    .iter()
                    .skip_while(|f| !f.ends_with(KERNEL_MARK))
                    .map(|f| strip_kernel_mark(f));
                Some(
                    std::iter::once(all[0])
                        .chain(kernel)
                        .collect::<Vec<_>>()
                        .join(";"),
                )
            }
            _ => None,
        }
    })
}

/// One stack as a multiset: the thread frame, then each distinct frame in order of first
/// occurrence, written `NAME [K]` when it occurs K > 1 times.
pub fn coalesce_stack(stack: &str) -> String {
    let (thread, rest) = split_thread(stack);
    let Some(rest) = rest else {
        return stack.to_string();
    };
    let mut order: Vec<(&str, u32)> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    for frame in frames(rest) {
        match index.get(frame) {
            Some(&i) => order[i].1 += 1,
            None => {
                index.insert(frame, order.len());
                order.push((frame, 1));
            }
        }
    }
    let mut out = String::with_capacity(stack.len());
    out.push_str(thread);
    for (frame, count) in order {
        out.push(';');
        out.push_str(frame);
        if count > 1 {
            out.push_str(&format!(" [{count}]"));
        }
    }
    out
}

/// Demangles a Rust (legacy or v0) or C++ symbol; anything else is returned as it is.
pub fn demangle(frame: &str) -> String {
    let (symbol, mark) = match frame.strip_suffix(KERNEL_MARK) {
        Some(symbol) => (symbol, KERNEL_MARK),
        None => (frame, ""),
    };
    if let Ok(rust) = rustc_demangle::try_demangle(symbol) {
        return format!("{rust:#}{mark}");
    }
    if symbol.starts_with("_Z") {
        if let Ok(cpp) = cpp_demangle::Symbol::new(symbol) {
            if let Ok(text) = cpp.demangle(&cpp_demangle::DemangleOptions::default()) {
                return format!("{text}{mark}");
            }
        }
    }
    frame.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(pairs: &[(&str, u64)]) -> Folded {
        Folded::from_pairs(pairs.iter().map(|(s, n)| (s.to_string(), *n)))
    }

    #[test]
    fn coalesce_is_the_multiset_in_first_occurrence_order() {
        assert_eq!(
            coalesce_stack("reactor;run;then;fut;then;fut;then;leaf"),
            "reactor;run;then [3];fut [2];leaf"
        );
        assert_eq!(coalesce_stack("t"), "t");
        assert_eq!(coalesce_stack("t;t"), "t;t");
    }

    #[test]
    fn coalesce_sums_stacks_that_become_identical_and_keeps_weight() {
        let input = folded(&[("t;a;b;a", 3), ("t;a;b;a;b;a", 4), ("t;c", 1)]);
        let out = Transforms {
            coalesce: true,
            ..Transforms::default()
        }
        .apply(&input);
        assert_eq!(out.to_text(), "t;a [2];b 3\nt;a [3];b [2] 4\nt;c 1\n");
        assert_eq!(out.total(), input.total());
    }

    #[test]
    fn merge_threads_with_pid_keeps_the_pid() {
        let input = folded(&[("worker-1-10/11;f", 1), ("worker-2-10/12;f", 2)]);
        let t = Transforms {
            merge_threads: true,
            pid_suffix: true,
            ..Transforms::default()
        };
        assert_eq!(
            t.apply(&input).to_text(),
            "worker-10/11;f 1\nworker-10/12;f 2\n"
        );
    }

    #[test]
    fn rename_rules_apply_to_the_thread_frame() {
        let rule: Rename = "perf-crimson-ms=reactor".parse().unwrap();
        let t = Transforms {
            rename: vec![rule, "reactor-([0-9]+)=r$1".parse().unwrap()],
            ..Transforms::default()
        };
        let input = folded(&[("perf-crimson-ms;perf-crimson-ms", 1), ("reactor-7;x", 2)]);
        assert_eq!(
            t.apply(&input).to_text(),
            "r7;x 2\nreactor;perf-crimson-ms 1\n"
        );
        assert!("no-equals".parse::<Rename>().is_err());
        assert!("([=x".parse::<Rename>().is_err());
    }

    #[test]
    fn split_partitions_the_weight() {
        let input = folded(&[
            ("t;main;read;sys_read_[k];copy_[k]", 5),
            ("t;main;compute", 7),
            ("kworker;worker_thread_[k]", 2),
        ]);
        let user = split(&input, Side::User);
        let kernel = split(&input, Side::Kernel);
        assert_eq!(user.to_text(), "t;main;compute 7\n");
        assert_eq!(
            kernel.to_text(),
            "kworker;worker_thread 2\nt;sys_read;copy 5\n"
        );
        assert_eq!(user.total() + kernel.total(), input.total());
        assert_eq!(
            unmark_kernel(&input).stacks()[2].0,
            "t;main;read;sys_read;copy"
        );
    }

    #[test]
    fn frames_keep_rust_array_types_whole() {
        let all: Vec<&str> = frames("t;f<[u8; 8]>;g").collect();
        assert_eq!(all, vec!["t", "f<[u8; 8]>", "g"]);
    }

    #[test]
    fn demangles_rust_and_cpp() {
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(demangle("_ZN3foo3barEv_[k]"), "foo::bar()_[k]");
        assert_eq!(demangle("plain_c"), "plain_c");
    }
}
