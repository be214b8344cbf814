//! Reading a profile input: `perf script` text (plain or gzip), a perf.data, or folded stacks.
//!
//! The kind is found from the bytes, not the file name: perf.data starts with `PERFILE2`, gzip
//! with `1f 8b`, and folded text has `STACK COUNT` lines where perf script has sample headers
//! followed by `ADDR SYMBOL (MODULE)` frames.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use flate2::read::MultiGzDecoder;
use serde::Serialize;

use super::folded::{looks_folded, Folded};
use super::perf_script::{self, FoldOptions, ScriptScan, Source};
use super::ProfileError;

/// What an input file turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InputFormat {
    /// `perf script` text.
    PerfScript,
    /// A perf.data file, read through `perf script`.
    PerfData,
    /// Folded stacks (`frame;frame COUNT`).
    Folded,
}

/// What loading an input found besides its stacks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InputReport {
    /// Where the input came from (`-` for standard input).
    pub path: PathBuf,
    /// What the input was read as.
    pub format: InputFormat,
    /// True when the input was gzip-compressed.
    pub gzip: bool,
    /// Samples read (perf script sample headers, or folded lines).
    pub samples: u64,
    /// perf script samples of another event type than the folded one, left out.
    pub other_event_samples: u64,
    /// The perf event folded (the first in the input); None for folded input.
    pub event: Option<String>,
    /// Lines that could not be read and were skipped.
    pub garbled_lines: u64,
    /// The first garbled lines: 1-based line number and the line, cut to 120 characters.
    pub garbled_examples: Vec<(u64, String)>,
    /// True when the text did not end with a newline (a cut-off file).
    pub truncated: bool,
}

/// An input's stacks and what reading it found.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The folded stacks, before any transform.
    pub folded: Folded,
    /// What was read and what was skipped.
    pub report: InputReport,
}

impl InputReport {
    /// One line for the user when lines were skipped, None when everything was read.
    pub fn garbled_summary(&self) -> Option<String> {
        if self.garbled_lines == 0 && !self.truncated {
            return None;
        }
        let mut text = format!(
            "{}: skipped {} unreadable line(s)",
            self.path.display(),
            self.garbled_lines
        );
        if self.truncated {
            text.push_str("; the input ends in the middle of a line (cut off?)");
        }
        for (line, example) in &self.garbled_examples {
            text.push_str(&format!("\n  line {line}: {example}"));
        }
        Some(text)
    }
}

/// Reads and folds one input (a path, or `-` for standard input).
pub fn load(path: &Path, opts: FoldOptions) -> Result<Loaded, ProfileError> {
    let reading = |e| ProfileError::io(format!("reading {}", path.display()), e);
    if path == Path::new("-") {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| ProfileError::io("reading standard input", e))?;
        return load_in_memory(path, &bytes, opts);
    }
    let file = File::open(path).map_err(reading)?;
    let meta = file.metadata().map_err(reading)?;
    if !meta.is_file() {
        let bytes = std::fs::read(path).map_err(reading)?;
        return load_in_memory(path, &bytes, opts);
    }
    let len = meta.len();
    let mut head = vec![0u8; len.min(64 * 1024) as usize];
    file.read_exact_at(&mut head, 0).map_err(reading)?;
    if len == 0 {
        return Err(ProfileError::EmptyInput { path: path.into() });
    }
    if head.starts_with(b"PERFILE2") {
        let text = perf_script_of(path)?;
        return fold_text(path, &text, false, InputFormat::PerfData, opts);
    }
    if head.starts_with(&[0x1f, 0x8b]) || detect(&head) == InputFormat::Folded {
        let bytes = std::fs::read(path).map_err(reading)?;
        return load_in_memory(path, &bytes, opts);
    }
    // plain perf script text: the folding threads read the file themselves
    let mut last = [0u8; 1];
    file.read_exact_at(&mut last, len - 1).map_err(reading)?;
    let (folded, scan) = perf_script::fold_source(Source::File(&file, len), opts)?;
    let mut report = new_report(path, InputFormat::PerfScript, false, last[0] != b'\n');
    finish_script(&mut report, folded, scan)
}

/// Folds bytes that are perf script or folded text (no file involved).
pub fn load_bytes(bytes: &[u8], opts: FoldOptions) -> Result<Loaded, ProfileError> {
    load_in_memory(Path::new("-"), bytes, opts)
}

fn load_in_memory(path: &Path, bytes: &[u8], opts: FoldOptions) -> Result<Loaded, ProfileError> {
    if bytes.is_empty() {
        return Err(ProfileError::EmptyInput { path: path.into() });
    }
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let text = gunzip(path, bytes)?;
        if text.is_empty() {
            return Err(ProfileError::EmptyInput { path: path.into() });
        }
        return fold_text(path, &text, true, detect(&text), opts);
    }
    fold_text(path, bytes, false, detect(bytes), opts)
}

fn gunzip(path: &Path, bytes: &[u8]) -> Result<Vec<u8>, ProfileError> {
    let mut text = Vec::with_capacity(bytes.len() * 8);
    MultiGzDecoder::new(bytes)
        .read_to_end(&mut text)
        .map_err(|e| ProfileError::io(format!("decompressing {} (gzip)", path.display()), e))?;
    Ok(text)
}

/// Runs `perf script` on a perf.data, with the PID beside the TID so `--pid` works.
fn perf_script_of(path: &Path) -> Result<Vec<u8>, ProfileError> {
    // the fields inferno reads (no tracepoint payload); older recordings may lack one of them
    perf_script_with(path, perf_script::SCRIPT_FIELDS).or_else(|_| perf_script_with(path, "+pid"))
}

fn perf_script_with(path: &Path, fields: &str) -> Result<Vec<u8>, ProfileError> {
    let mut command = Command::new("perf");
    command.args(["script", "-F", fields, "-i"]).arg(path);
    let output = command.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ProfileError::PerfMissing {
            program: "perf".into(),
        },
        _ => ProfileError::io(format!("running perf script -i {}", path.display()), e),
    })?;
    if !output.status.success() {
        return Err(ProfileError::PerfFailed {
            command: format!("perf script -F {fields} -i {}", path.display()),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(output.stdout)
}

/// Folded text when the first meaningful lines all have the `STACK COUNT` shape.
fn detect(bytes: &[u8]) -> InputFormat {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(64 * 1024)]);
    let mut meaningful = head
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .take(3)
        .peekable();
    if meaningful.peek().is_none() {
        return InputFormat::PerfScript;
    }
    if meaningful.all(looks_folded) {
        InputFormat::Folded
    } else {
        InputFormat::PerfScript
    }
}

fn new_report(path: &Path, format: InputFormat, gzip: bool, truncated: bool) -> InputReport {
    InputReport {
        path: path.into(),
        format,
        gzip,
        samples: 0,
        other_event_samples: 0,
        event: None,
        garbled_lines: 0,
        garbled_examples: Vec::new(),
        truncated,
    }
}

fn fold_text(
    path: &Path,
    bytes: &[u8],
    gzip: bool,
    format: InputFormat,
    opts: FoldOptions,
) -> Result<Loaded, ProfileError> {
    let mut report = new_report(path, format, gzip, !bytes.ends_with(b"\n"));
    if format != InputFormat::Folded {
        let (folded, scan) = perf_script::fold(bytes, opts)?;
        return finish_script(&mut report, folded, scan);
    }
    let parsed = Folded::parse(&String::from_utf8_lossy(bytes));
    report.samples = parsed.folded.stacks().len() as u64;
    report.garbled_lines = parsed.garbled_lines;
    report.garbled_examples = parsed.garbled_examples;
    finish(report, parsed.folded)
}

fn finish_script(
    report: &mut InputReport,
    folded: Folded,
    scan: ScriptScan,
) -> Result<Loaded, ProfileError> {
    report.samples = scan.samples;
    report.other_event_samples = scan.other_event_samples;
    report.event = scan.event;
    report.garbled_lines = scan.garbled_lines;
    report.garbled_examples = scan.garbled_examples;
    finish(report.clone(), folded)
}

fn finish(report: InputReport, folded: Folded) -> Result<Loaded, ProfileError> {
    if folded.is_empty() {
        return Err(ProfileError::NoSamples {
            what: format!(
                "{}: {} sample(s), {} unreadable line(s), no stack left",
                report.path.display(),
                report.samples,
                report.garbled_lines
            ),
        });
    }
    Ok(Loaded { folded, report })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_folded_and_script() {
        assert_eq!(detect(b"a;b 1\na;c 2\n"), InputFormat::Folded);
        assert_eq!(
            detect(b"p 1 1.0: 1 cpu-clock:\n\t1 f (/x)\n\n"),
            InputFormat::PerfScript
        );
        assert_eq!(detect(b"sleep 8947\n\t1 f (/x)\n"), InputFormat::PerfScript);
    }

    #[test]
    fn empty_input_is_a_clear_error() {
        let err = load_bytes(b"", FoldOptions::default()).unwrap_err();
        assert!(err.to_string().contains("empty"), "{err}");
        let err = load_bytes(b"\n\n\n", FoldOptions::default()).unwrap_err();
        assert!(matches!(err, ProfileError::NoSamples { .. }), "{err}");
    }

    #[test]
    fn gzip_is_read() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"p 1 1.0: 1 cpu-clock:\n\t1 f (/x)\n\n")
            .unwrap();
        std::fs::write(&path, gz.finish().unwrap()).unwrap();
        let loaded = load(&path, FoldOptions::default()).unwrap();
        assert!(loaded.report.gzip);
        assert_eq!(loaded.folded.to_text(), "p;f 1\n");
    }
}
