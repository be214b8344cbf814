//! `perf script` text → folded stacks, with inferno's `perf::Folder` doing the folding.
//!
//! Why not just call `Folder::collapse` on the whole input: inferno only logs the lines it
//! cannot read (we must count and report them), it panics when the first stack has no event
//! name, and its multi-threaded mode funnels every line through one reader thread. So the input
//! is cut at empty lines (where inferno itself cuts it for its workers) into pieces of a few MB
//! that one thread per core takes in turn, reads, scans for garbled lines and folds with a
//! single-threaded `Folder` whose event filter is the first event of the whole input (what
//! inferno picks by default); the threads' sums are then added. The result equals
//! `inferno-collapse-perf`'s.

use std::collections::HashMap;
use std::io;

use inferno::collapse::perf::{Folder, Options};
use inferno::collapse::Collapse;

use super::folded::{clip, Folded, GARBLED_EXAMPLES};
use super::ProfileError;

/// The fields inferno reads, the PID for `--pid`, and no tracepoint payload (which inferno
/// would take for a frame).
pub(super) const SCRIPT_FIELDS: &str = "comm,pid,tid,time,period,event,ip,sym,dso";

/// Options that change how samples are folded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldOptions {
    /// Root frame `comm-PID` instead of `comm`, to keep processes apart.
    pub include_pid: bool,
    /// Root frame `comm-PID/TID`, to keep threads apart.
    pub include_tid: bool,
    /// Kernel frames get a `_[k]` suffix (needed to split user from kernel stacks).
    pub annotate_kernel: bool,
    /// Frames whose code is in a perf map (a JVM's JIT-compiled code) get a `_[j]` suffix.
    pub annotate_jit: bool,
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

/// The size of one piece of work: big enough that a piece costs far more than handing it out,
/// small enough that a thread descheduled on a busy machine does not hold up the others.
const PIECE_BYTES: u64 = 2 << 20;

/// Where the text comes from: memory, or a file read piece by piece by the folding threads
/// (so reading is spread over the cores and a 100 MB file is never held whole).
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// Text already in memory (decompressed, or the output of `perf script`).
    Bytes(&'a [u8]),
    /// A file of this many bytes.
    File(&'a std::fs::File, u64),
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            Source::Bytes(b) => b.len() as u64,
            Source::File(_, len) => *len,
        }
    }

    /// Bytes `start..end` (clamped to the length); `buf` holds them for a file.
    fn range<'b>(&'b self, start: u64, end: u64, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
        let end = end.min(self.len());
        let start = start.min(end);
        match self {
            Source::Bytes(b) => Ok(&b[start as usize..end as usize]),
            Source::File(file, _) => {
                use std::os::unix::fs::FileExt;
                buf.resize((end - start) as usize, 0);
                file.read_exact_at(buf, start)?;
                Ok(buf)
            }
        }
    }
}

/// Folds `perf script` text in memory and reports what it could not read.
pub fn fold(bytes: &[u8], opts: FoldOptions) -> Result<(Folded, ScriptScan), ProfileError> {
    fold_source(Source::Bytes(bytes), opts)
}

/// Folds `perf script` text from memory or a file: pieces of about [`PIECE_BYTES`], each from
/// the first empty line at or after its start to the first one after its end, are handed out
/// to one thread per core, which read, scan and fold them.
pub fn fold_source(
    source: Source<'_>,
    opts: FoldOptions,
) -> Result<(Folded, ScriptScan), ProfileError> {
    fold_in_pieces(source, opts, PIECE_BYTES)
}

fn fold_in_pieces(
    source: Source<'_>,
    opts: FoldOptions,
    piece_size: u64,
) -> Result<(Folded, ScriptScan), ProfileError> {
    let mut head = Vec::new();
    let head = source
        .range(0, 1 << 20, &mut head)
        .map_err(|e| ProfileError::io("reading perf script text", e))?;
    let Some(event) = first_event(head).or_else(|| whole_first_event(source)) else {
        return Err(ProfileError::NoSamples {
            what: "no `perf script` sample header with an event name (`comm pid time: event:`)"
                .into(),
        });
    };
    let pieces = source.len().div_ceil(piece_size).max(1);
    // one more thread than cores, as inferno has N workers and a reader: a thread waiting on
    // a read (or preempted on a busy machine) then leaves no core idle
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) + 1;
    let next = std::sync::atomic::AtomicU64::new(0);
    let outcomes: Vec<WorkerOutcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(pieces as usize))
            .map(|_| scope.spawn(|| fold_pieces(source, piece_size, pieces, &next, opts, &event)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(worker_lost())))
            .collect()
    });
    let mut sums: HashMap<String, u64> = HashMap::new();
    let mut scans = Vec::new();
    for outcome in outcomes {
        let (worker_sums, worker_scans) = outcome?;
        for (stack, count) in worker_sums {
            *sums.entry(stack).or_insert(0) += count;
        }
        scans.extend(worker_scans);
    }
    scans.sort_by_key(|(piece, _)| *piece);
    let mut scan = ScriptScan {
        event: Some(event),
        ..ScriptScan::default()
    };
    for (_, piece_scan) in scans {
        add_scan(&mut scan, piece_scan);
    }
    Ok((Folded::from_pairs(sums), scan))
}

type WorkerOutcome = Result<(HashMap<String, u64>, Vec<(u64, ScriptScan)>), ProfileError>;

fn whole_first_event(source: Source<'_>) -> Option<String> {
    let mut all = Vec::new();
    let bytes = source.range(0, source.len(), &mut all).ok()?;
    (bytes.len() > 1 << 20)
        .then(|| first_event(bytes))
        .flatten()
}

/// One thread's loop: take the next piece, fold it, add it to this thread's sums.
fn fold_pieces(
    source: Source<'_>,
    piece_size: u64,
    pieces: u64,
    next: &std::sync::atomic::AtomicU64,
    opts: FoldOptions,
    event: &str,
) -> WorkerOutcome {
    let mut sums: HashMap<String, u64> = HashMap::new();
    let mut scans = Vec::new();
    let mut buf = Vec::new();
    loop {
        let piece = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if piece >= pieces {
            return Ok((sums, scans));
        }
        let bytes = piece_bytes(source, piece_size, piece, &mut buf)
            .map_err(|e| ProfileError::io("reading perf script text", e))?;
        let (stacks, scan) = fold_chunk_guarded(bytes, opts, event)?;
        for (stack, count) in stacks {
            *sums.entry(stack).or_insert(0) += count;
        }
        scans.push((piece, scan));
    }
}

/// Piece `k`: from the first stack starting at or after `k * size` to the first stack
/// starting at or after `(k + 1) * size` (a stack starts after an empty line).
fn piece_bytes<'a: 'b, 'b>(
    source: Source<'a>,
    size: u64,
    k: u64,
    buf: &'b mut Vec<u8>,
) -> io::Result<&'b [u8]> {
    let len = source.len();
    let (lo, hi) = (k * size, ((k + 1) * size).min(len));
    let mut window = (size / 16).max(64);
    loop {
        // two bytes before `lo` so an empty line ending exactly at `lo` is seen
        let from = lo.saturating_sub(2);
        let to = hi.saturating_add(window).min(len);
        let bytes = source.range(from, to, buf)?;
        let start = if k == 0 {
            Some(0)
        } else {
            find_stack_start(bytes, 0).filter(|&s| from + (s as u64) < hi)
        };
        let Some(start) = start else {
            return Ok(&[]);
        };
        let end_search = (hi.saturating_sub(2) - from) as usize;
        let end = match find_stack_start(bytes, end_search) {
            Some(end) => end,
            None if to == len => bytes.len(),
            None => {
                window *= 4;
                continue;
            }
        };
        let end = end.max(start);
        return match source {
            Source::Bytes(b) => Ok(&b[(from as usize + start)..(from as usize + end)]),
            Source::File(..) => Ok(&buf[start..end]),
        };
    }
}

/// The index just after the first `\n\n` at or after `from`.
fn find_stack_start(bytes: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + 1 < bytes.len() {
        match bytes[i + 1..].iter().position(|&b| b == b'\n') {
            Some(p) => {
                let nl = i + 1 + p;
                if bytes[nl - 1] == b'\n' {
                    return Some(nl + 1);
                }
                i = nl;
            }
            None => return None,
        }
    }
    None
}

/// Adds a later piece's scan, shifting its line numbers past the lines already read.
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
fn fold_chunk_guarded(chunk: &[u8], opts: FoldOptions, event: &str) -> ChunkResult {
    match std::panic::catch_unwind(|| fold_chunk(chunk, opts, event)) {
        Ok(result) => result,
        Err(_) => fold_samples_one_by_one(chunk, opts, event),
    }
}

fn fold_samples_one_by_one(chunk: &[u8], opts: FoldOptions, event: &str) -> ChunkResult {
    let mut scan = scan(chunk, event);
    let mut pairs = Vec::new();
    let mut line_no = 1;
    let mut rest = chunk;
    while !rest.is_empty() {
        let end = find_stack_start(rest, 0).unwrap_or(rest.len());
        let (sample, after) = rest.split_at(end);
        rest = after;
        match std::panic::catch_unwind(|| fold_chunk(sample, opts, event)) {
            Ok(result) => pairs.extend(result?.0),
            Err(_) => {
                scan.garbled_lines += 1;
                if scan.garbled_examples.len() < GARBLED_EXAMPLES {
                    let first = sample.split(|&b| b == b'\n').next().unwrap_or_default();
                    scan.garbled_examples.push((line_no, clip_bytes(first)));
                }
            }
        }
        line_no += sample.iter().filter(|&&b| b == b'\n').count() as u64;
    }
    let folded = Folded::from_pairs(pairs);
    Ok((folded.stacks().to_vec(), scan))
}

fn clip_bytes(line: &[u8]) -> String {
    clip(String::from_utf8_lossy(line).trim())
}

fn fold_chunk(
    chunk: &[u8],
    opts: FoldOptions,
    event: &str,
) -> Result<(Vec<(String, u64)>, ScriptScan), ProfileError> {
    let scan = scan(chunk, event);
    let mut options = Options::default();
    options.include_pid = opts.include_pid;
    options.include_tid = opts.include_tid;
    options.annotate_kernel = opts.annotate_kernel;
    options.annotate_jit = opts.annotate_jit;
    options.event_filter = Some(event.to_string());
    options.nthreads = 1;
    let mut out = Vec::new();
    Folder::from(options)
        .collapse(chunk, &mut out)
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

/// The event of the first sample header, as inferno's default event filter picks it.
pub(crate) fn first_event(bytes: &[u8]) -> Option<String> {
    let mut in_event = false;
    // a line cut at the end of a head read may look like a header without its event
    let complete = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(i) if i > 0 => &bytes[..i],
        _ => bytes,
    };
    for line in complete.split(|&b| b == b'\n') {
        match classify(line, in_event) {
            Line::Header { event, .. } => match event {
                Some(event) => return Some(String::from_utf8_lossy(event).into_owned()),
                None => in_event = true,
            },
            Line::Skip | Line::Frame | Line::BadFrame => {}
            Line::End | Line::BadHeader => in_event = false,
        }
    }
    None
}

/// Counts samples and garbled lines, following inferno's reading of event and stack lines.
///
/// Bytes, not text: inferno validates UTF-8 itself, and every delimiter it reads by is ASCII
/// (whitespace here is ASCII whitespace, which only matters for counting).
pub(crate) fn scan(text: &[u8], event_filter: &str) -> ScriptScan {
    let mut scan = ScriptScan::default();
    if text.is_empty() {
        return scan;
    }
    let mut in_event = false;
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut start = 0;
    let ends = memchr::memchr_iter(b'\n', body).chain([body.len()]);
    for (index, end) in ends.enumerate() {
        let line = &body[start..end];
        start = end + 1;
        scan.lines += 1;
        let bad = match classify(line, in_event) {
            Line::Header { event, inline } => {
                scan.samples += 1;
                // inferno skips a filtered sample before reading its inline frame
                let filtered = event.is_some_and(|e| e != event_filter.as_bytes());
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
                    .push((index as u64 + 1, clip_bytes(line)));
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
        event: Option<&'a [u8]>,
        inline: bool,
    },
    BadHeader,
    Frame,
    BadFrame,
}

fn is_space(b: u8) -> bool {
    b == b' ' || (b'\t'..=b'\r').contains(&b)
}

fn trim_end(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|&b| !is_space(b))
        .map_or(0, |i| i + 1);
    &bytes[..end]
}

fn trim_start(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|&b| !is_space(b))
        .unwrap_or(bytes.len());
    &bytes[start..]
}

fn classify(line: &[u8], in_event: bool) -> Line<'_> {
    if line.first() == Some(&b'#') {
        return Line::Skip;
    }
    let line = trim_end(line);
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
    let mut by_colons = line[end..].splitn(3, |&b| b == b':').skip(1);
    let event = by_colons
        .next()
        .and_then(|period_and_event| period_and_event.rsplit(|&b| b == b' ').next());
    let inline = by_colons.next().is_some_and(|post| {
        let start = post
            .iter()
            .position(|&b| b == b':' || b == b' ')
            .map_or(0, |i| i + 1);
        !trim_start(trim_end(&post[start..])).is_empty()
    });
    Line::Header { event, inline }
}

/// Where the `PID` or `PID/TID` word of a sample header ends (inferno's rule: the first
/// all-digit word followed by a space, with something before it).
fn event_line_end(line: &[u8]) -> Option<usize> {
    let mut all_digits = false;
    let mut last_was_space = false;
    for (idx, &c) in line.iter().enumerate() {
        if c == b' ' {
            if all_digits && !last_was_space {
                return Some(idx + 1);
            }
            all_digits = true;
        } else if c != b'/' && !c.is_ascii_digit() {
            all_digits = false;
        }
        last_was_space = c == b' ';
    }
    None
}

/// inferno's shape of a stack line: `ADDR SYMBOL (MODULE)`.
fn stack_line_parts(line: &[u8]) -> bool {
    let line = trim_start(line);
    let Some(space) = memchr::memchr(b' ', line) else {
        return false;
    };
    let rest = &line[space + 1..];
    let Some(last) = memchr::memrchr(b' ', rest) else {
        return false;
    };
    let module = &rest[last + 1..];
    module.first() == Some(&b'(') && module.last() == Some(&b')')
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
        let (folded, scan) = fold(SCRIPT.as_bytes(), FoldOptions::default()).unwrap();
        assert_eq!(
            folded.to_text(),
            "worker-1;main;leaf 250000\nworker-2;main;other 250000\n"
        );
        assert_eq!(scan.samples, 2);
        assert_eq!(scan.garbled_lines, 0);
        assert_eq!(scan.event.as_deref(), Some("cpu-clock"));
    }

    #[test]
    fn pieces_cover_the_input_exactly_once() {
        let text = format!("{SCRIPT}\n\nstray\n{SCRIPT}x").repeat(7);
        let source = Source::Bytes(text.as_bytes());
        for size in [1, 2, 3, 50, 64, 100, 333, 1000, 100_000] {
            let pieces = source.len().div_ceil(size);
            let mut all = Vec::new();
            for k in 0..pieces {
                let mut buf = Vec::new();
                let piece = piece_bytes(source, size, k, &mut buf).unwrap();
                if k > 0 && !piece.is_empty() {
                    assert!(all.ends_with(b"\n\n"), "size {size} piece {k}");
                }
                all.extend_from_slice(piece);
            }
            assert_eq!(all, text.as_bytes(), "size {size}");
        }
    }

    #[test]
    fn folding_in_small_pieces_equals_one_piece() {
        let big = format!("{SCRIPT}bad line\n").repeat(500);
        let (whole, whole_scan) = fold_in_pieces(
            Source::Bytes(big.as_bytes()),
            FoldOptions::default(),
            1 << 30,
        )
        .unwrap();
        for size in [7, 500, 4096] {
            let (folded, scan) =
                fold_in_pieces(Source::Bytes(big.as_bytes()), FoldOptions::default(), size)
                    .unwrap();
            assert_eq!(folded, whole);
            assert_eq!(scan, whole_scan);
        }
        assert_eq!(whole.total(), 250000 * 1000);
        assert_eq!(whole_scan.samples, 1000);
        assert_eq!(whole_scan.garbled_lines, 500);
        assert_eq!(whole_scan.garbled_examples[1].0, 9 + 9);
    }

    #[test]
    fn garbled_lines_are_counted_with_line_numbers() {
        let text = format!("{SCRIPT}garbage line here\nw 5 1.0: 1 cpu-clock:\n\tnot a frame\n\n");
        let (folded, scan) = fold(text.as_bytes(), FoldOptions::default()).unwrap();
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
            fold(b"\n\nhello\n", FoldOptions::default()),
            Err(ProfileError::NoSamples { .. })
        ));
    }

    #[test]
    fn a_sample_inferno_panics_on_is_counted_and_the_rest_folded() {
        // inferno slices `xé...` 17 bytes from its end, inside the `é`
        let text = format!("w 1 1.0: 1 cpu-clock:\n\t1 x\u{e9}abcdefabcdefabcd (/m)\n\n{SCRIPT}");
        let (folded, scan) = fold(text.as_bytes(), FoldOptions::default()).unwrap();
        assert_eq!(scan.garbled_lines, 1);
        assert_eq!(scan.garbled_examples[0].0, 1);
        assert_eq!(folded.total(), 500000);
    }

    #[test]
    fn other_events_are_left_out_and_counted() {
        let text = format!("{SCRIPT}w 5 1.0: 1 cs:\n\t 1 f (/x)\n\n");
        let (folded, scan) = fold(text.as_bytes(), FoldOptions::default()).unwrap();
        assert_eq!(scan.other_event_samples, 1);
        assert_eq!(folded.total(), 500000);
    }
}
