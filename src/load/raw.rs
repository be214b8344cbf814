//! The raw record of one load: every per-second line with its latency histogram, the measured
//! window on the host's wall clock, and the whole window's histogram, as JSON lines.
//!
//! `stairbench load --raw FILE` writes it so a run on another host can bring a client group's
//! load back and merge it exactly (histograms added, never percentiles averaged).

use std::io::Write;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::LoadOutcome;
use crate::record::load::{IntervalLine, IntervalSink};

/// One line of the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum RawLine {
    /// A per-second line (warm-up lines included, with negative `elapsed_s`).
    Interval {
        /// The line.
        line: IntervalLine,
        /// Its latencies, ns, V2-deflate serialized, base64.
        hist: String,
    },
    /// The last line: the measured window and all its latencies.
    Window {
        /// (start, end) of the measured window, ns since the Unix epoch on the host's clock.
        window_unix_ns: (i64, i64),
        /// When the load was ready to start (connections open), same clock; absent in files
        /// of earlier versions.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ready_unix_ns: Option<i64>,
        /// The window's latencies, ns, V2-deflate serialized, base64.
        hist: String,
    },
}

/// What `read` gives back.
#[derive(Debug, Clone)]
pub struct RawLoad {
    /// The per-second lines with their histograms, in order.
    pub lines: Vec<(IntervalLine, Histogram<u64>)>,
    /// The measured window on the writing host's clock, ns since the Unix epoch.
    pub window_unix_ns: (i64, i64),
    /// When the load was ready to start (connections open), same clock; None in a file that
    /// does not say.
    pub ready_unix_ns: Option<i64>,
    /// All latencies of the measured window, ns.
    pub hist_ns: Histogram<u64>,
}

/// Collects the lines while the load runs; `finish` writes the file.
#[derive(Debug, Default)]
pub struct RawSink {
    lines: Vec<String>,
}

impl IntervalSink for RawSink {
    fn interval(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>) {
        let raw = RawLine::Interval {
            line: line.clone(),
            hist: encode(hist_ns),
        };
        self.lines
            .push(serde_json::to_string(&raw).unwrap_or_default());
    }
}

impl RawSink {
    /// Writes the collected lines and the window line.
    pub fn finish(self, outcome: &LoadOutcome, out: &mut impl Write) -> std::io::Result<()> {
        for line in &self.lines {
            writeln!(out, "{line}")?;
        }
        let last = RawLine::Window {
            window_unix_ns: outcome.window_unix_ns,
            ready_unix_ns: Some(outcome.ready_unix_ns),
            hist: encode(&outcome.hist_ns),
        };
        writeln!(out, "{}", serde_json::to_string(&last).unwrap_or_default())
    }
}

/// A raw load file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RawError {
    /// A line that is not JSON of a raw line's shape.
    #[error("raw load line {line}: {source}")]
    Json {
        /// Its number, from 1.
        line: usize,
        /// What serde said.
        source: serde_json::Error,
    },
    /// A line whose histogram cannot be decoded.
    #[error("raw load line {line}: {source}")]
    Histogram {
        /// Its number, from 1.
        line: usize,
        /// What is wrong with it.
        source: crate::record::hist_b64::HistTextError,
    },
    /// No window line: the load stopped before its end.
    #[error("the raw load has no window line: the load did not finish")]
    NoWindow,
}

/// Reads a raw file's text.
pub fn read(text: &str) -> Result<RawLoad, RawError> {
    let mut lines = Vec::new();
    let mut window = None;
    for (i, row) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        let line = i + 1;
        let bad = |source| RawError::Histogram { line, source };
        match serde_json::from_str::<RawLine>(row)
            .map_err(|source| RawError::Json { line, source })?
        {
            RawLine::Interval { line, hist } => lines.push((line, decode(&hist).map_err(bad)?)),
            RawLine::Window {
                window_unix_ns,
                ready_unix_ns,
                hist,
            } => window = Some((window_unix_ns, ready_unix_ns, decode(&hist).map_err(bad)?)),
        }
    }
    let (window_unix_ns, ready_unix_ns, hist_ns) = window.ok_or(RawError::NoWindow)?;
    Ok(RawLoad {
        lines,
        window_unix_ns,
        ready_unix_ns,
        hist_ns,
    })
}

fn encode(hist: &Histogram<u64>) -> String {
    crate::record::hist_b64::encode(hist)
}

fn decode(text: &str) -> Result<Histogram<u64>, crate::record::hist_b64::HistTextError> {
    // Auto-resizing: merged with other hosts' histograms, whose range may be wider.
    crate::record::hist_b64::decode(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_window_and_histograms_come_back_exactly() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in [1_000, 2_000, 3_500_000, 42] {
            h.record(v).unwrap();
        }
        let line = IntervalLine {
            elapsed_s: -0.5,
            ops_per_s: 4.0,
            ..IntervalLine::default()
        };
        let mut sink = RawSink::default();
        sink.interval(&line, &h);
        let outcome = LoadOutcome {
            report: Default::default(),
            hist_ns: h.clone(),
            window_unix_ns: (10, 20),
            ready_unix_ns: 5,
        };
        let mut out = Vec::new();
        sink.finish(&outcome, &mut out).unwrap();
        let back = read(&String::from_utf8(out).unwrap()).unwrap();
        assert_eq!(back.window_unix_ns, (10, 20));
        assert_eq!(back.ready_unix_ns, Some(5));
        assert_eq!(back.hist_ns, h);
        assert_eq!(back.lines.len(), 1);
        assert_eq!(back.lines[0].0, line);
        assert_eq!(back.lines[0].1, h);
        assert!(read("{\"line\": 1}").is_err());
        assert!(read("").unwrap_err().to_string().contains("no window line"));
    }
}
