//! HdrHistogram interval logs (the format HdrHistogram's own tools read), one histogram per
//! second of the measured window, values in nanoseconds: their writer and their one reader.
//!
//! Each interval is written as it closes, so memory does not grow with the run and a killed
//! run keeps its log. Payloads are compressed V2 histograms (cookie 0x1c849304), the only form
//! HdrHistogram's log readers (Java, Python) accept; stairbench's one reader ([`read_hlog`])
//! also takes the uncompressed V2 payloads (0x1c849303) that older run directories hold.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use hdrhistogram::serialization::interval_log::{
    IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag,
};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use crate::record::load::IntervalLine;

/// The max column is in milliseconds, as HdrHistogram's tools expect of nanosecond values.
const MAX_VALUE_DIVISOR: f64 = 1e6;

/// An interval log being written: the header once, then one line per interval, flushed.
/// Each line has its own serializer: one kept across lines keeps its buffers at the largest
/// histogram it has seen, growing mid-run the first time a latency lands in a higher range.
pub struct HlogWriter<W: Write> {
    out: W,
    last_end_s: f64,
}

impl<W: Write> HlogWriter<W> {
    /// Writes the header (comment, start and base time) to `out`.
    pub fn begin(mut out: W, start: SystemTime) -> io::Result<Self> {
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment("stairbench latency, nanoseconds")
            .with_start_time(start)
            .with_base_time(start)
            .with_max_value_divisor(MAX_VALUE_DIVISOR)
            .begin_log_with(&mut out, &mut serializer)?;
        out.flush()?;
        Ok(HlogWriter {
            out,
            last_end_s: 0.0,
        })
    }

    /// Appends the interval from the previous one's end to `end_s` (seconds after the start)
    /// and flushes it.
    pub fn write(&mut self, end_s: f64, hist_ns: &Histogram<u64>) -> io::Result<()> {
        let start_s = self.last_end_s.max(0.0);
        let line = self.interval_line(start_s, end_s, hist_ns)?;
        self.last_end_s = end_s;
        self.out.write_all(line.as_bytes())?;
        self.out.flush()
    }

    /// One interval's line, formatted by the crate's writer (whose header lines, repeated
    /// by every writer it builds, are dropped).
    fn interval_line(
        &self,
        start_s: f64,
        end_s: f64,
        hist_ns: &Histogram<u64>,
    ) -> io::Result<String> {
        let mut buf = Vec::new();
        let mut serializer = V2DeflateSerializer::new();
        let mut log = IntervalLogWriterBuilder::new()
            .with_max_value_divisor(MAX_VALUE_DIVISOR)
            .begin_log_with(&mut buf, &mut serializer)?;
        log.write_histogram(
            hist_ns,
            Duration::from_secs_f64(start_s),
            Duration::from_secs_f64((end_s - start_s).max(0.0)),
            Tag::new("latency"),
        )
        .map_err(|e| io::Error::other(format!("interval log: {e:?}")))?;
        let text = String::from_utf8_lossy(&buf);
        Ok(text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| format!("{l}\n"))
            .collect())
    }
}

/// `stairbench load --hist-log`: writes each measured interval as it closes.
pub struct HlogSink {
    writer: HlogWriter<BufWriter<File>>,
    /// The first write error, reported by `finish` (a sink cannot fail mid-run).
    error: Option<io::Error>,
}

impl HlogSink {
    /// Creates the log file now, so a bad path fails before the load starts.
    pub fn create(path: &Path) -> io::Result<Self> {
        let file = File::create(path).map_err(|e| context(e, "creating", path))?;
        let writer = HlogWriter::begin(BufWriter::new(file), SystemTime::now())
            .map_err(|e| context(e, "writing", path))?;
        Ok(HlogSink {
            writer,
            error: None,
        })
    }

    /// Writes one interval's histogram.
    pub fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        if self.error.is_none() {
            self.error = self.writer.write(line.elapsed_s, hist_ns).err();
        }
    }

    /// Reports the first write error, if any.
    pub fn finish(self) -> io::Result<()> {
        match self.error {
            Some(e) => Err(io::Error::new(
                e.kind(),
                format!("writing the interval log: {e}"),
            )),
            None => Ok(()),
        }
    }
}

/// `e` with what was being done to which file, as anyhow's context would print it.
fn context(e: io::Error, doing: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{doing} {}: {e}", path.display()))
}

/// Writes `(end of interval in s, histogram)` pairs as an interval log.
pub fn write_log<W: Write>(
    out: &mut W,
    start: SystemTime,
    hists: &[(f64, Histogram<u64>)],
) -> io::Result<()> {
    let mut log = HlogWriter::begin(out, start)?;
    for (end_s, h) in hists {
        log.write(*end_s, h)?;
    }
    Ok(())
}

/// Why an interval log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HlogError {
    /// The file could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The log.
        path: PathBuf,
        /// The OS error.
        error: io::Error,
    },
    /// The file is not an interval log, or a histogram in it does not decode.
    #[error("{} is not a readable interval log: {why}", path.display())]
    Bad {
        /// The log.
        path: PathBuf,
        /// What was wrong.
        why: LogFormatError,
    },
}

/// What is wrong with an interval log's bytes.
#[derive(Debug, thiserror::Error)]
pub enum LogFormatError {
    /// hdrhistogram's log reader or decoder refused it (its error, as it prints it).
    #[error("{0}")]
    Decode(String),
    /// A histogram that is not base64.
    #[error("bad base64")]
    Base64,
    /// A payload shorter than its 8-byte header words.
    #[error("a histogram payload of {0} bytes is cut short")]
    CutShort(usize),
    /// A compressed payload that does not inflate.
    #[error("a histogram payload does not inflate: {0}")]
    Inflate(io::Error),
    /// A payload whose stated length is more than it holds (it would make the decoder
    /// allocate what it is told).
    #[error("a histogram payload says it holds {stated} bytes but holds {held}")]
    StatedMore {
        /// The length its header states.
        stated: usize,
        /// The bytes after its header.
        held: usize,
    },
    /// A run of zeros the decoder would overflow on.
    #[error("a histogram payload holds a run of zeros no histogram can have")]
    ZeroRun,
}

impl LogFormatError {
    fn decode(e: &dyn std::fmt::Debug) -> Self {
        LogFormatError::Decode(format!("{e:?}"))
    }
}

/// Every interval of an interval log added into one histogram (values as logged: nanoseconds
/// for stairbench's logs); None when the log holds no interval. Payloads may be compressed
/// or uncompressed V2 histograms (the deserializer reads both cookies).
pub fn read_hlog(path: &Path) -> Result<Option<Histogram<u64>>, HlogError> {
    let bytes = std::fs::read(path).map_err(|error| HlogError::Read {
        path: path.into(),
        error,
    })?;
    parse_hlog(&bytes).map_err(|why| HlogError::Bad {
        path: path.into(),
        why,
    })
}

/// [`read_hlog`] on a log's bytes: Err is what was wrong (without the file's name).
pub fn parse_hlog(bytes: &[u8]) -> Result<Option<Histogram<u64>>, LogFormatError> {
    let bad = |e: &dyn std::fmt::Debug| LogFormatError::decode(e);
    // Auto-resizing, 3 digits like every histogram stairbench logs, so adding is exact.
    let mut total = Histogram::<u64>::new(3).map_err(|e| bad(&e))?;
    let mut intervals = 0usize;
    let mut deserializer = Deserializer::new();
    for entry in IntervalLogIterator::new(bytes) {
        let LogEntry::Interval(h) = entry.map_err(|e| bad(&e))? else {
            continue;
        };
        let raw = base64_decode(h.encoded_histogram()).ok_or(LogFormatError::Base64)?;
        let payload = bounded_v2(&raw)?;
        let hist: Histogram<u64> = deserializer
            .deserialize(&mut payload.as_slice())
            .map_err(|e| bad(&e))?;
        total.add(&hist).map_err(|e| bad(&e))?;
        intervals += 1;
    }
    Ok((intervals > 0).then_some(total))
}

/// [`read_hlog`], with an empty histogram for a log that holds no interval.
pub fn read_hlog_or_empty(path: &Path) -> Result<Histogram<u64>, HlogError> {
    match read_hlog(path)? {
        Some(h) => Ok(h),
        None => Histogram::new(3).map_err(|e| HlogError::Bad {
            path: path.into(),
            why: LogFormatError::decode(&e),
        }),
    }
}

/// Bytes of a V2 histogram's header: cookie, payload length, normalizing offset, digits,
/// lowest and highest value, integer-to-double ratio.
const V2_HEADER_BYTES: usize = 40;
/// The most a compressed payload may inflate to: a 5-digit histogram of the whole u64 range
/// takes about 57 MB; more is a zip bomb.
const MAX_INFLATED_BYTES: u64 = 64 << 20;

/// A payload as an uncompressed V2 histogram (inflated, when compressed) whose stated payload
/// length it holds: the deserializer allocates the length it is told (found by fuzzing: a
/// 200-byte log asked for 4 GB).
fn bounded_v2(raw: &[u8]) -> Result<Vec<u8>, LogFormatError> {
    use std::io::Read as _;
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 4)
            .map(|w| u32::from_be_bytes(w.try_into().expect("4 bytes")))
            .ok_or(LogFormatError::CutShort(b.len()))
    };
    let inner = if word(raw, 0)? & !0xf0 == 0x1c84_9304 {
        let len = word(raw, 4)? as usize;
        let data = &raw[8..];
        let mut out = Vec::new();
        flate2::read::ZlibDecoder::new(&data[..len.min(data.len())])
            .take(MAX_INFLATED_BYTES)
            .read_to_end(&mut out)
            .map_err(LogFormatError::Inflate)?;
        out
    } else {
        raw.to_vec()
    };
    let stated = word(&inner, 4)? as usize;
    let held = inner.len().saturating_sub(V2_HEADER_BYTES);
    if stated > held {
        return Err(LogFormatError::StatedMore { stated, held });
    }
    // A payload shorter than its header is left to the decoder, which says so.
    let counts = inner.get(V2_HEADER_BYTES..V2_HEADER_BYTES + stated);
    if counts.is_some_and(has_unnegatable_zero_run) {
        return Err(LogFormatError::ZeroRun);
    }
    Ok(inner)
}

/// True when a V2 payload's counts hold the varint whose zig-zag value is i64::MIN: a run of
/// 2^63 zeros, which hdrhistogram's decoder negates (a panic with overflow checks, found by the
/// run_files fuzz target). Its varint reader is private, so the encoding is read here: 7 bits
/// a byte with a continuation bit, the ninth byte taken whole.
fn has_unnegatable_zero_run(counts: &[u8]) -> bool {
    let mut at = 0;
    while at < counts.len() {
        let (mut value, mut len) = (0u64, 0);
        for (k, &b) in counts[at..].iter().take(9).enumerate() {
            len = k + 1;
            if k == 8 {
                value |= u64::from(b) << 56;
                break;
            }
            value |= u64::from(b & 0x7f) << (7 * k);
            if b & 0x80 == 0 {
                break;
            }
        }
        if value == u64::MAX {
            return true;
        }
        at += len;
    }
    false
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};

    /// The cookie base of each payload (the word-size bits 0xf0 masked, as HdrHistogram's
    /// readers do): 0x1c849304 is a compressed V2 histogram.
    fn cookies(log: &[u8]) -> Vec<u32> {
        use base64::Engine as _;
        IntervalLogIterator::new(log)
            .filter_map(|e| match e.unwrap() {
                LogEntry::Interval(h) => Some(h.encoded_histogram().to_string()),
                _ => None,
            })
            .map(|b64| {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .unwrap();
                u32::from_be_bytes(raw[..4].try_into().unwrap()) & !0xf0
            })
            .collect()
    }

    /// A log of two one-second intervals, each one value of 1,500.
    fn two_intervals_of_1500() -> Vec<u8> {
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(1_500).unwrap();
        let mut out = Vec::new();
        {
            let mut log = HlogWriter::begin(&mut out, SystemTime::now()).unwrap();
            log.write(1.0, &h).unwrap();
            log.write(2.0, &h).unwrap();
        }
        out
    }

    #[test]
    fn each_interval_is_on_disk_when_written_and_compressed() {
        let out = two_intervals_of_1500();
        assert_eq!(cookies(&out), [0x1c84_9304, 0x1c84_9304]);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches("#[StartTime").count(), 1);
        assert!(text.contains("Tag=latency,1.000,1.000,"));
    }

    #[test]
    fn the_file_reader_and_the_bytes_reader_agree() {
        let out = two_intervals_of_1500();
        let from_bytes = parse_hlog(&out).unwrap().unwrap();
        assert_eq!(from_bytes.len(), 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.hlog");
        std::fs::write(&path, &out).unwrap();
        assert_eq!(read_hlog(&path).unwrap().unwrap(), from_bytes);
        // No interval: None; a garbled payload: the file's error names the file.
        assert!(parse_hlog(b"#[StartTime: 1.0]\n").unwrap().is_none());
        std::fs::write(&path, "Tag=latency,1.0,1.0,1.0,!!!\n").unwrap();
        let err = read_hlog(&path).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!(
                "{} is not a readable interval log:",
                path.display()
            )),
            "{err}"
        );
    }

    #[test]
    fn a_payload_stating_more_bytes_than_it_holds_is_refused_without_allocating_them() {
        // Found by the run_files fuzz target: the deserializer allocated the 4 GB it was told.
        let log = include_bytes!("../../tests/data/fuzz/hlog-payload-4gb.hlog");
        let err = parse_hlog(log).unwrap_err().to_string();
        assert!(err.contains("but holds"), "{err}");
        // Whole logs, compressed or not, still read.
        let h = parse_hlog(&two_intervals_of_1500()).unwrap().unwrap();
        assert_eq!((h.len(), h.max()), (2, h.highest_equivalent(1_500)));
    }

    #[test]
    fn a_zero_run_the_decoder_cannot_negate_is_an_error_not_a_panic() {
        // Found by the run_files fuzz target: a run of i64::MIN zeros.
        let log = include_bytes!("../../tests/data/fuzz/hlog-zero-run-overflow.hlog");
        let err = parse_hlog(log).unwrap_err().to_string();
        assert!(err.contains("no histogram can have"), "{err}");
        let log = include_bytes!("../../tests/data/fuzz/hlog-zero-run-overflow-2.hlog");
        let err = parse_hlog(log).unwrap_err().to_string();
        assert!(err.contains("no histogram can have"), "{err}");
        // Found by the fuzzer in the first version of that check: a payload shorter than the
        // header was sliced past its end.
        let log = include_bytes!("../../tests/data/fuzz/hlog-shorter-than-its-header.hlog");
        assert!(parse_hlog(log).is_err());
        // The varint of u64::MAX is eight 0xff bytes with their continuation bits, then one
        // whole; one short of it is a count, not that run.
        assert!(has_unnegatable_zero_run(&[
            1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
        ]));
        assert!(!has_unnegatable_zero_run(&[
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe
        ]));
        assert!(!has_unnegatable_zero_run(&[
            0x80, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff
        ]));
    }

    #[test]
    fn every_checked_in_log_still_reads() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/report/hist");
        let mut read = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "hlog") {
                assert!(read_hlog(&path).unwrap().is_some(), "{}", path.display());
                read += 1;
            }
        }
        assert!(read > 0);
    }
}
