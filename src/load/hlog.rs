//! HdrHistogram interval logs (the format HdrHistogram's own tools read), one histogram per
//! second of the measured window, values in nanoseconds.

use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use hdrhistogram::serialization::V2Serializer;
use hdrhistogram::Histogram;

use super::IntervalLine;

/// Collects the measured intervals and writes them as one log when finished.
pub struct HlogSink {
    file: BufWriter<File>,
    start: SystemTime,
    hists: Vec<(f64, Histogram<u64>)>,
}

impl HlogSink {
    /// Creates the log file now, so a bad path fails before the load starts.
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(HlogSink {
            file: BufWriter::new(file),
            start: SystemTime::now(),
            hists: Vec::new(),
        })
    }

    /// Keeps one interval's histogram.
    pub fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        self.hists.push((line.elapsed_s, hist_ns.clone()));
    }

    /// Writes the log.
    pub fn finish(mut self) -> anyhow::Result<()> {
        write_log(&mut self.file, self.start, &self.hists)?;
        Ok(())
    }
}

/// Writes `(end of interval in s, histogram)` pairs as an interval log.
pub fn write_log<W: std::io::Write>(
    out: &mut W,
    start: SystemTime,
    hists: &[(f64, Histogram<u64>)],
) -> anyhow::Result<()> {
    let mut serializer = V2Serializer::new();
    let mut log = IntervalLogWriterBuilder::new()
        .add_comment("stairbench latency, nanoseconds")
        .with_start_time(start)
        .with_base_time(start)
        .with_max_value_divisor(1e6)
        .begin_log_with(out, &mut serializer)
        .map_err(|e| anyhow::anyhow!("writing interval log: {e:?}"))?;
    let mut prev_end: f64 = 0.0;
    for (end_s, h) in hists {
        let start_s = prev_end;
        log.write_histogram(
            h,
            Duration::from_secs_f64(start_s.max(0.0)),
            Duration::from_secs_f64((end_s - start_s).max(0.0)),
            Tag::new("latency"),
        )
        .map_err(|e| anyhow::anyhow!("writing interval log: {e:?}"))?;
        prev_end = *end_s;
    }
    Ok(())
}
