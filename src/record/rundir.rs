//! The run directory (DESIGN.md's contract): each step's line is appended and flushed as
//! soon as it ends, with its per-second CSV and its HdrHistogram interval log.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hdrhistogram::Histogram;

use crate::record::hlog::HlogWriter;
use crate::record::load::{IntervalLine, IntervalSink};
use crate::record::steps::{read_steps, StepResult};

/// Busy % of each CPU of the server's and of the client's cpuset over one interval, in the
/// cpusets' order; NaN for a CPU /proc/stat does not list: the last two columns of a row of
/// `intervals/<step>.csv`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CoreRow {
    /// Busy (user + system) % of each server CPU.
    pub server_busy_pct: Vec<f64>,
    /// Busy % of each client CPU.
    pub client_busy_pct: Vec<f64>,
}

impl CoreRow {
    /// The two CSV cells: the figures separated by spaces, one decimal.
    pub fn cells(&self) -> (String, String) {
        let join = |v: &[f64]| {
            v.iter()
                .map(|b| format!("{b:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        (join(&self.server_busy_pct), join(&self.client_busy_pct))
    }
}

/// A run directory being written.
#[derive(Debug)]
pub struct RunDir {
    /// Its path.
    pub path: PathBuf,
    steps: File,
}

impl RunDir {
    /// Creates `dir` (or `results/<name>-<UTC timestamp>` when `dir` is None).
    pub fn create(dir: Option<&Path>, name: &str) -> std::io::Result<RunDir> {
        let path = match dir {
            Some(d) => d.to_path_buf(),
            None => Path::new("results").join(format!("{}-{}", sanitize(name), timestamp())),
        };
        std::fs::create_dir_all(path.join("intervals"))?;
        std::fs::create_dir_all(path.join("hist"))?;
        Self::open(path)
    }

    /// Opens an existing run directory to append to it (`--resume`).
    pub fn open(path: PathBuf) -> std::io::Result<RunDir> {
        // Absolute, because `{out}` in a command template must not depend on the command's
        // own working directory (nginx's `-p` prefix would double a relative one).
        let path = std::path::absolute(&path)?;
        let steps = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.join("steps.jsonl"))?;
        Ok(RunDir { path, steps })
    }

    /// The steps already written.
    pub fn steps(&self) -> Result<Vec<StepResult>, crate::record::steps::StepsError> {
        let p = self.path.join("steps.jsonl");
        if !p.exists() {
            return Ok(Vec::new());
        }
        read_steps(&p)
    }

    /// Writes a whole file in the directory.
    pub fn write_file(&self, name: &str, contents: &str) -> std::io::Result<()> {
        std::fs::write(self.path.join(name), contents)
    }

    /// Appends one step and flushes it to the kernel.
    pub fn append(&mut self, step: &StepResult) -> std::io::Result<()> {
        let mut line = serde_json::to_string(&step.to_json())?;
        line.push('\n');
        self.steps.write_all(line.as_bytes())?;
        self.steps.flush()?;
        self.steps.sync_data()
    }

    /// The sink of one step's per-second lines.
    pub fn step_sink(&self, step_id: &str) -> std::io::Result<StepSink> {
        let csv = File::create(self.path.join("intervals").join(format!("{step_id}.csv")))?;
        let mut csv = BufWriter::new(csv);
        writeln!(
            csv,
            "elapsed_s,inflight,ops_per_s,mb_per_s,mean_latency_ms,errors,per_core_busy,server_per_core_busy,client_per_core_busy"
        )?;
        Ok(StepSink {
            csv,
            csv_path: self.path.join("intervals").join(format!("{step_id}.csv")),
            hlog_path: self.path.join("hist").join(format!("{step_id}.hlog")),
            hlog: None,
            start: SystemTime::now(),
            log_histograms: true,
        })
    }
}

/// Receives a step's intervals: CSV lines and interval-log histograms written as they come
/// (a one-hour `--hold` keeps nothing in memory).
pub struct StepSink {
    csv: BufWriter<File>,
    csv_path: PathBuf,
    hlog_path: PathBuf,
    hlog: Option<HlogWriter<BufWriter<File>>>,
    start: SystemTime,
    /// False for drivers whose lines carry no histograms (external tools).
    pub log_histograms: bool,
}

impl IntervalSink for StepSink {
    fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        self.line_with_cores(line, hist_ns, None);
    }
}

impl StepSink {
    /// Writes a driver's line with the server's and client's per-core busy % of its second.
    pub fn line_with_cores(
        &mut self,
        line: &IntervalLine,
        hist_ns: &Histogram<u64>,
        cores: Option<&CoreRow>,
    ) {
        let (server, client) = cores.map(CoreRow::cells).unwrap_or_default();
        let busy: Vec<String> = line
            .per_core_busy
            .iter()
            .map(|b| format!("{b:.1}"))
            .collect();
        let _ = writeln!(
            self.csv,
            "{:.3},{},{:.1},{:.3},{:.4},{},{},{server},{client}",
            line.elapsed_s,
            line.inflight,
            line.ops_per_s,
            line.mb_per_s,
            line.mean_latency_ms,
            line.errors,
            busy.join(" ")
        );
        let _ = self.csv.flush();
        if line.elapsed_s > 0.0 && self.log_histograms {
            let _ = self.log_histogram(line.elapsed_s, hist_ns);
        }
    }

    /// A row of per-core busy % alone (a second the driver printed no line for).
    pub fn cores_only(&mut self, elapsed_s: f64, cores: &CoreRow) {
        let (server, client) = cores.cells();
        let _ = writeln!(self.csv, "{elapsed_s:.3},,,,,,,{server},{client}");
        let _ = self.csv.flush();
    }

    /// Logs a whole-window histogram when the driver gave no per-second ones.
    pub fn ensure_one(&mut self, hist_ns: Histogram<u64>) -> std::io::Result<()> {
        if self.hlog.is_none() && !hist_ns.is_empty() {
            let end_s = self.start.elapsed().map_or(1.0, |d| d.as_secs_f64());
            self.log_histogram(end_s, &hist_ns)?;
        }
        Ok(())
    }

    /// Appends one interval ending `end_s` after the window's start to the log; the log's
    /// header is written with the first one.
    fn log_histogram(&mut self, end_s: f64, hist_ns: &Histogram<u64>) -> std::io::Result<()> {
        let log = match &mut self.hlog {
            Some(log) => log,
            None => {
                let out = BufWriter::new(File::create(&self.hlog_path)?);
                self.hlog.insert(HlogWriter::begin(out, self.start)?)
            }
        };
        log.write(end_s, hist_ns)
    }

    /// Flushes the files. A step that did not complete keeps them as `<step>.partial.csv` and
    /// `<step>.partial.hlog`, so nothing that looks like a result is left beside a failed line
    /// of steps.jsonl; a step that completes removes an earlier attempt's partial files.
    pub fn finish(mut self, complete: bool) -> std::io::Result<()> {
        let flushed = self.csv.flush();
        // Every interval-log line was flushed as it was written.
        drop(self.hlog.take());
        // Files that could not be written whole (a full disk) are partial too.
        let complete = complete && flushed.is_ok();
        for path in [&self.csv_path, &self.hlog_path] {
            let partial = partial_path(path);
            if complete {
                let _ = std::fs::remove_file(&partial);
            } else if path.exists() {
                std::fs::rename(path, &partial)?;
            }
        }
        flushed
    }
}

/// `dir/<step>.csv` → `dir/<step>.partial.csv`.
fn partial_path(path: &Path) -> PathBuf {
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let ext = path.extension().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!("{stem}.partial.{ext}"))
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// UTC `YYYYMMDD-HHMMSS`.
pub fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (y, m, d, hh, mm, ss) = civil_time(secs);
    format!("{y:04}{m:02}{d:02}-{hh:02}{mm:02}{ss:02}")
}

/// Seconds since the epoch as UTC (year, month, day, hour, minute, second).
fn civil_time(secs: u64) -> (i64, u32, u32, u64, u64, u64) {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

/// `unix_s` (seconds since the epoch) as UTC `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_time(unix_s: f64) -> String {
    let (y, m, d, hh, mm, ss) = civil_time(unix_s.max(0.0) as u64);
    format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02} UTC")
}

// Howard Hinnant's days-to-civil algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_log_is_written_as_it_goes_and_reads_back() {
        use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(Some(dir.path()), "t").unwrap();
        let mut sink = run.step_sink("s").unwrap();
        let mut h = Histogram::<u64>::new(3).unwrap();
        h.record(1500).unwrap();
        for i in 0..3 {
            let line = IntervalLine {
                elapsed_s: i as f64,
                ..IntervalLine::default()
            };
            sink.interval(&line, &h);
        }
        sink.finish(true).unwrap();
        let bytes = std::fs::read(dir.path().join("hist/s.hlog")).unwrap();
        let starts: Vec<f64> = IntervalLogIterator::new(&bytes)
            .filter_map(|e| match e {
                Ok(LogEntry::Interval(i)) => Some(i.start_timestamp().as_secs_f64()),
                _ => None,
            })
            .collect();
        // The warm-up's closing line (elapsed 0) is not logged; the two measured ones are.
        assert_eq!(starts, [0.0, 1.0]);
        let csv = std::fs::read_to_string(dir.path().join("intervals/s.csv")).unwrap();
        assert_eq!(csv.lines().count(), 4);
    }

    #[test]
    fn an_incomplete_step_is_partial_and_a_completed_retry_removes_it() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(Some(dir.path()), "t").unwrap();
        let h = Histogram::<u64>::new(3).unwrap();
        let line = IntervalLine {
            elapsed_s: 1.0,
            ..IntervalLine::default()
        };
        let exists = |rel: &str| dir.path().join(rel).exists();
        let mut sink = run.step_sink("s").unwrap();
        sink.interval(&line, &h);
        sink.finish(false).unwrap();
        assert!(exists("intervals/s.partial.csv") && exists("hist/s.partial.hlog"));
        assert!(!exists("intervals/s.csv") && !exists("hist/s.hlog"));
        let mut sink = run.step_sink("s").unwrap();
        sink.interval(&line, &h);
        sink.finish(true).unwrap();
        assert!(exists("intervals/s.csv") && exists("hist/s.hlog"));
        assert!(!exists("intervals/s.partial.csv") && !exists("hist/s.partial.hlog"));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(
            utc_time(20_779.0 * 86_400.0 + 3_723.5),
            "2026-11-22 01:02:03 UTC"
        );
    }
}
