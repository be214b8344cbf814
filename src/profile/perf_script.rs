//! `perf script` text → folded stacks, with inferno's `perf::Folder` doing the folding.
//!
//! Why not just call `Folder::collapse` on the whole input: inferno only logs the lines it
//! cannot read (we must count and report them), it panics when the first stack has no event
//! name, and its multi-threaded mode funnels every line through one reader thread. So the input
//! is cut at empty lines (where inferno itself cuts it for its workers) into one chunk per core;
//! each chunk is scanned for garbled lines and folded by a single-threaded `Folder` with the
//! event filter set to the first event of the whole input (what inferno picks by default); the
//! sorted chunk outputs are then merged. The result equals `inferno-collapse-perf`'s.

use std::io;

use inferno::collapse::perf::{Folder, Options};
use inferno::collapse::Collapse;

use super::folded::{clip, Folded, GARBLED_EXAMPLES};
use super::ProfileError;

/// Options that change how samples are folded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// Root frame `comm-PID` instead of `comm`, to keep processes apart.
    pub include_pid: bool,
    /// Root frame `comm-PID/TID`, to keep threads apart.
    pub include_tid: bool,
    /// Kernel frames get a `_[k]` suffix (needed to split user from kernel stacks).
    pub annotate_kernel: bool,
}

/// What reading a `perf script` text found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScriptScan {
    /// Sample headers (event lines) read.
    pub samples: u64,
    /// Samples of another event type than the folded one, left out as inferno does.
    pub other_event_samples: u64,
    /// The event that was folded: the first one in the input.
    pub event: Option<String>,
    /// Lines that are neither a sample header nor a stack frame, skipped.
    pub garbled_lines: u64,
    /// The first garbled lines: 1-based line number and the line, cut to 120 characters.
    pub garbled_examples: Vec<(u64, String)>,
    /// Lines read.
    pub lines: u64,
}

/// Inputs smaller than this are folded in one piece: threads would cost more than they save.
const MIN_PARALLEL_BYTES: usize = 1 << 20;

/// Folds `perf script` text and reports what it could not read.
pub fn fold(text: &str, opts: FoldOptions) -> Result<(Folded, ScriptScan), ProfileError> {
    let Some(event) = first_event(text) else {
        return Err(ProfileError::NoSamples {
            what: "no `perf script` sample header with an event name (`comm pid time: event:`)"
                .into(),
        });
    };
    let chunks = split_at_empty_lines(text, chunk_count(text.len()));
    let results: Vec<ChunkResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = chunks
            .iter()
            .map(|chunk| scope.spawn(|| fold_chunk_guarded(chunk, opts, &event)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(worker_lost())))
            .collect()
    });
    let mut parts = Vec::with_capacity(results.len());
    let mut scan = ScriptScan {
        event: Some(event),
        ..ScriptScan::default()
    };
    for result in results {
        let (stacks, chunk_scan) = result?;
        add_scan(&mut scan, chunk_scan);
        parts.push(stacks);
    }
    Ok((Folded::from_sorted_unique(merge_sorted(parts)), scan))
}

fn chunk_count(len: usize) -> usize {
    if len < MIN_PARALLEL_BYTES {
        return 1;
    }
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Adds a later chunk's scan, shifting its line numbers past the lines already read.
fn add_scan(total: &mut ScriptScan, chunk: ScriptScan) {
    let offset = total.lines;
    total.samples += chunk.samples;
    total.other_event_samples += chunk.other_event_samples;
    total.garbled_lines += chunk.garbled_lines;
    for (line, text) in chunk.garbled_examples {
        if total.garbled_examples.len() < GARBLED_EXAMPLES {
            total.garbled_examples.push((line + offset, text));
        }
    }
    total.lines += chunk.lines;
}

type ChunkResult = Result<(Vec<(String, u64)>, ScriptScan), ProfileError>;

fn worker_lost() -> ProfileError {
    ProfileError::Io {
        what: "folding perf script text".into(),
        source: io::Error::other("a folding thread stopped"),
    }
}

/// Folds a chunk; where inferno panics (it slices some non-ASCII symbols inside a character),
/// folds the chunk's samples one by one and counts the ones it cannot read as garbled.
fn fold_chunk_guarded(chunk: &str, opts: FoldOptions, event: &str) -> ChunkResult {
    match std::panic::catch_unwind(|| fold_chunk(chunk, opts, event)) {
        Ok(result) => result,
        Err(_) => fold_samples_one_by_one(chunk, opts, event),
    }
}

fn fold_samples_one_by_one(chunk: &str, opts: FoldOptions, event: &str) -> ChunkResult {
    let mut scan = scan(chunk, event);
    let mut pairs = Vec::new();
    let mut line_no = 1;
    for sample in chunk.split_inclusive("\n\n") {
        match std::panic::catch_unwind(|| fold_chunk(sample, opts, event)) {
            Ok(result) => pairs.extend(result?.0),
            Err(_) => {
                scan.garbled_lines += 1;
                if scan.garbled_examples.len() < GARBLED_EXAMPLES {
                    let first = sample.lines().next().unwrap_or_default();
                    scan.garbled_examples.push((line_no, clip(first.trim())));
                }
            }
        }
        line_no += sample.matches('\n').count() as u64;
    }
    let folded = Folded::from_pairs(pairs);
    Ok((folded.stacks().to_vec(), scan))
}

fn fold_chunk(
    chunk: &str,
    opts: FoldOptions,
    event: &str,
) -> Result<(Vec<(String, u64)>, ScriptScan), ProfileError> {
    let scan = scan(chunk, event);
    let mut options = Options::default();
    options.include_pid = opts.include_pid;
    options.include_tid = opts.include_tid;
    options.annotate_kernel = opts.annotate_kernel;
    options.event_filter = Some(event.to_string());
    options.nthreads = 1;
    let mut out = Vec::new();
    Folder::from(options)
        .collapse(chunk.as_bytes(), &mut out)
        .map_err(|source| ProfileError::Io {
            what: "folding perf script text".into(),
            source,
        })?;
    let text = String::from_utf8(out).map_err(|e| ProfileError::Io {
        what: "reading inferno's folded output".into(),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })?;
    // inferno's keys verbatim (trimming them could change their order or merge two)
    let stacks = text
        .split('\n')
        .filter_map(|line| {
            let (stack, count) = line.rsplit_once(' ')?;
            Some((stack.to_string(), count.parse().ok()?))
        })
        .collect();
    Ok((stacks, scan))
}

/// Merges lists sorted by stack, summing equal stacks.
fn merge_sorted(mut parts: Vec<Vec<(String, u64)>>) -> Vec<(String, u64)> {
    while parts.len() > 1 {
        let b = parts.pop().expect("len > 1");
        let a = parts.pop().expect("len > 1");
        parts.push(merge_two(a, b));
    }
    parts.pop().unwrap_or_default()
}

fn merge_two(a: Vec<(String, u64)>, b: Vec<(String, u64)>) -> Vec<(String, u64)> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                let (stack, n) = a.next().expect("peeked");
                (stack, n + b.next().expect("peeked").1)
            }
            (Some(x), Some(y)) if x.0 < y.0 => a.next().expect("peeked"),
            (Some(_), Some(_)) | (None, Some(_)) => b.next().expect("peeked"),
            (Some(_), None) => a.next().expect("peeked"),
            (None, None) => return out,
        };
        out.push(next);
    }
}

/// Cuts the text into about `n` pieces, each ending just after an empty line.
fn split_at_empty_lines(text: &str, n: usize) -> Vec<&str> {
    let mut chunks = Vec::with_capacity(n);
    let mut start = 0;
    for i in 1..n {
        let mut target = (text.len() * i / n).max(start);
        while !text.is_char_boundary(target) {
            target += 1;
        }
        let Some(found) = text[target..].find("\n\n") else {
            break;
        };
        let end = target + found + 2;
        chunks.push(&text[start..end]);
        start = end;
    }
    chunks.push(&text[start..]);
    chunks
}

/// The event of the first sample header, as inferno's default event filter picks it.
pub(crate) fn first_event(text: &str) -> Option<String> {
    let mut in_event = false;
    for line in text.split('\n') {
        match classify(line, in_event) {
            Line::Header { event, .. } => match event {
                Some(event) => return Some(event.to_string()),
                None => in_event = true,
            },
            Line::Skip => {}
            Line::End => in_event = false,
            Line::Frame | Line::BadFrame => {}
            Line::BadHeader => in_event = false,
        }
    }
    None
}

/// Counts samples and garbled lines, following inferno's reading of event and stack lines.
pub(crate) fn scan(text: &str, event_filter: &str) -> ScriptScan {
    let mut scan = ScriptScan::default();
    let mut in_event = false;
    let body = text.strip_suffix('\n').unwrap_or(text);
    for (index, line) in body.split('\n').enumerate() {
        scan.lines += 1;
        let bad = match classify(line, in_event) {
            Line::Header { event, inline } => {
                scan.samples += 1;
                // inferno skips a filtered sample before reading its inline frame
                let filtered = event.is_some_and(|e| e != event_filter);
                scan.other_event_samples += u64::from(filtered);
                in_event = filtered || !inline;
                false
            }
            Line::End => {
                in_event = false;
                false
            }
            Line::Skip | Line::Frame => false,
            Line::BadFrame => true,
            Line::BadHeader => {
                in_event = false;
                true
            }
        };
        if bad {
            scan.garbled_lines += 1;
            if scan.garbled_examples.len() < GARBLED_EXAMPLES {
                scan.garbled_examples
                    .push((index as u64 + 1, clip(line.trim())));
            }
        }
    }
    scan
}

enum Line<'a> {
    /// A comment line (`# ...`).
    Skip,
    /// An empty line: the end of a sample.
    End,
    /// A sample header; `inline` when the one-frame stack is on the header line itself.
    Header {
        event: Option<&'a str>,
        inline: bool,
    },
    BadHeader,
    Frame,
    BadFrame,
}

fn classify(line: &str, in_event: bool) -> Line<'_> {
    if line.starts_with('#') {
        return Line::Skip;
    }
    let line = line.trim_end();
    if line.is_empty() {
        return Line::End;
    }
    if in_event {
        return if stack_line_parts(line) {
            Line::Frame
        } else {
            Line::BadFrame
        };
    }
    let Some(end) = event_line_end(line) else {
        return Line::BadHeader;
    };
    let mut by_colons = line[end..].splitn(3, ':').skip(1);
    let event = by_colons
        .next()
        .and_then(|period_and_event| period_and_event.rsplit(' ').next());
    let inline = by_colons.next().is_some_and(|post| {
        let start = post.find([':', ' ']).map_or(0, |i| i + 1);
        !post[start..].trim().is_empty()
    });
    Line::Header { event, inline }
}

/// Where the `PID` or `PID/TID` word of a sample header ends (inferno's rule: the first
/// all-digit word followed by a space, with something before it).
fn event_line_end(line: &str) -> Option<usize> {
    let mut all_digits = false;
    let mut last_was_space = false;
    for (idx, c) in line.char_indices() {
        if c == ' ' {
            if all_digits && !last_was_space {
                return Some(idx + 1);
            }
            all_digits = true;
        } else if c != '/' && !c.is_ascii_digit() {
            all_digits = false;
        }
        last_was_space = c == ' ';
    }
    None
}

/// inferno's shape of a stack line: `ADDR SYMBOL (MODULE)`.
fn stack_line_parts(line: &str) -> bool {
    let Some((_, rest)) = line.trim_start().split_once(' ') else {
        return false;
    };
    let Some((_, module)) = rest.rsplit_once(' ') else {
        return false;
    };
    module.starts_with('(') && module.ends_with(')')
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
worker-1 100/101 [000] 1.0: 250000 cpu-clock:ppp: 
\t    1000 leaf+0x1 (/bin/p)
\t    2000 main+0x2 (/bin/p)

worker-2 100/102 [001] 1.1: 250000 cpu-clock:ppp: 
\t    3000 other+0x1 (/bin/p)
\t    2000 main+0x2 (/bin/p)

";

    #[test]
    fn folds_like_inferno() {
        let (folded, scan) = fold(SCRIPT, FoldOptions::default()).unwrap();
        assert_eq!(
            folded.to_text(),
            "worker-1;main;leaf 250000\nworker-2;main;other 250000\n"
        );
        assert_eq!(scan.samples, 2);
        assert_eq!(scan.garbled_lines, 0);
        assert_eq!(scan.event.as_deref(), Some("cpu-clock"));
    }

    #[test]
    fn chunked_fold_equals_one_piece() {
        let big: String = SCRIPT.repeat(5000);
        let (folded, scan) = fold(&big, FoldOptions::default()).unwrap();
        assert!(big.len() > MIN_PARALLEL_BYTES / 2);
        let pieces = split_at_empty_lines(&big, 4);
        assert_eq!(pieces.concat(), big);
        assert_eq!(folded.total(), 250000 * 10000);
        assert_eq!(scan.samples, 10000);
        assert_eq!(scan.lines, 8 * 5000);
    }

    #[test]
    fn garbled_lines_are_counted_with_line_numbers() {
        let text = format!("{SCRIPT}garbage line here\nw 5 1.0: 1 cpu-clock:\n\tnot a frame\n\n");
        let (folded, scan) = fold(&text, FoldOptions::default()).unwrap();
        assert_eq!(scan.garbled_lines, 2);
        assert_eq!(
            scan.garbled_examples[0],
            (9, "garbage line here".to_string())
        );
        assert_eq!(scan.garbled_examples[1], (11, "not a frame".to_string()));
        assert_eq!(folded.total(), 500000);
    }

    #[test]
    fn no_header_is_an_error_not_a_panic() {
        assert!(matches!(
            fold("\n\nhello\n", FoldOptions::default()),
            Err(ProfileError::NoSamples { .. })
        ));
    }

    #[test]
    fn other_events_are_left_out_and_counted() {
        let text = format!("{SCRIPT}w 5 1.0: 1 cs:\n\t 1 f (/x)\n\n");
        let (folded, scan) = fold(&text, FoldOptions::default()).unwrap();
        assert_eq!(scan.other_event_samples, 1);
        assert_eq!(folded.total(), 500000);
    }
}
