//! Output parsers of external load tools: a sweep can drive wrk, redis-benchmark,
//! perf-crimson-msgr or any command whose output a JSON field map or a regex describes, and
//! still record its steps in stairbench's own terms.
//!
//! One file per tool behind the one trait [`OutputParser`]; [`by_name`] picks one from a
//! spec's client section. A parser reports only what the tool printed: a figure the tool does
//! not give stays `None`, never zero. [`ToolLoad`] is the same run in the engine's layout, the
//! form a sweep records.

mod crimson_msgr;
mod fields;
mod json;
mod pattern;
mod redis_benchmark;
mod stairbench;
mod tool_load;
mod wrk;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crimson_msgr::{CrimsonMsgrParser, JobBlock};
pub use fields::FIELD_NAMES;
pub use json::JsonParser;
pub use pattern::RegexParser;
pub use redis_benchmark::{RedisBenchmarkParser, RedisBenchmarkTest};
pub use stairbench::StairbenchJson;
pub use tool_load::ToolLoad;
pub use wrk::WrkParser;

/// Reads one run's standard output of an external tool. Parsers hold only their options, so
/// one can be shared by the threads of a sweep.
pub trait OutputParser: Send + Sync {
    /// Extracts the run's figures from the tool's whole standard output.
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError>;

    /// The run's figures in the engine's layout, as a sweep records them. A parser whose tool
    /// prints that layout itself overrides this, so that no figure is lost on the way.
    fn parse_report(&self, stdout: &str) -> Result<ToolLoad, ParseError> {
        ToolLoad::from_parsed(self.parse(stdout)?)
    }
}

/// Latency figures as a tool printed them, converted to microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyFields {
    /// Mean latency, µs.
    pub mean: Option<f64>,
    /// Standard deviation of latency, µs.
    pub stdev: Option<f64>,
    /// Smallest latency, µs.
    pub min: Option<f64>,
    /// Median latency, µs.
    pub p50: Option<f64>,
    /// 75th percentile, µs.
    pub p75: Option<f64>,
    /// 90th percentile, µs.
    pub p90: Option<f64>,
    /// 95th percentile, µs.
    pub p95: Option<f64>,
    /// 99th percentile, µs.
    pub p99: Option<f64>,
    /// 99.9th percentile, µs.
    pub p999: Option<f64>,
    /// Largest latency, µs.
    pub max: Option<f64>,
}

impl LatencyFields {
    /// Names of the fields, as used in field maps (`latency_us.<name>`).
    pub const NAMES: [&'static str; 10] = [
        "mean", "stdev", "min", "p50", "p75", "p90", "p95", "p99", "p999", "max",
    ];

    /// The field called `name` (one of [`LatencyFields::NAMES`]).
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Option<f64>> {
        Some(match name {
            "mean" => &mut self.mean,
            "stdev" => &mut self.stdev,
            "min" => &mut self.min,
            "p50" => &mut self.p50,
            "p75" => &mut self.p75,
            "p90" => &mut self.p90,
            "p95" => &mut self.p95,
            "p99" => &mut self.p99,
            "p999" => &mut self.p999,
            "max" => &mut self.max,
            _ => return None,
        })
    }

    /// True when the tool printed no latency figure at all.
    pub fn is_empty(&self) -> bool {
        *self == LatencyFields::default()
    }
}

/// One periodic line a tool printed while running (perf-crimson-msgr's per-second rows).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParsedInterval {
    /// End of the interval, seconds since the measured window began (sum of interval lengths).
    pub elapsed_s: f64,
    /// Length of the interval, seconds.
    pub interval_s: f64,
    /// Requests in flight during the interval, when printed.
    pub inflight: Option<u64>,
    /// Completed requests per second in the interval.
    pub ops_per_s: f64,
    /// Payload throughput in MiB (2^20 bytes) per second, when printed.
    pub mib_per_s: Option<f64>,
    /// Mean latency in the interval, milliseconds, when printed.
    pub mean_latency_ms: Option<f64>,
    /// Busy % of the tool's cores (its own figure, e.g. Seastar's reactor utilisation).
    pub busy_pct: Vec<f64>,
    /// Busy % of the server's core, when the tool printed it.
    pub server_busy_pct: Option<f64>,
}

/// What one run of an external tool reported, in stairbench's units.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ParsedLoad {
    /// Requests (messages, commands) completed successfully: a failed request (an error reply,
    /// a timeout) is counted in `errors`, never here.
    pub requests: Option<u64>,
    /// Length of the measured run, seconds, as the tool timed it.
    pub duration_s: Option<f64>,
    /// Successfully completed requests per second (the tool's rate, scaled to leave failed
    /// replies out when the tool counted them).
    pub throughput_rps: Option<f64>,
    /// Bytes the tool read from the server (wrk prints it rounded to 3-4 digits).
    pub bytes_received: Option<u64>,
    /// Latency figures, microseconds.
    pub latency_us: LatencyFields,
    /// Failed requests or socket errors by kind (only kinds the tool reported non-zero).
    pub errors: BTreeMap<String, u64>,
    /// Other figures the tool printed, each name ending in its unit (`connect_time_s`, ...).
    pub extra: BTreeMap<String, f64>,
    /// Periodic lines printed while running, in order (empty when the tool prints none).
    pub intervals: Vec<ParsedInterval>,
}

/// Why a tool's output could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// A line or block the parser needs is not in the output.
    #[error(
        "{tool} output has no {what}; is this really {tool}'s standard output? It begins: {head:?}"
    )]
    Missing {
        /// The parser's name.
        tool: String,
        /// What was looked for.
        what: String,
        /// The first characters of the output, to recognise it.
        head: String,
    },
    /// A value is there but unreadable.
    #[error("{tool} output, line {line}: cannot read {what} from {text:?}")]
    BadValue {
        /// The parser's name.
        tool: String,
        /// 1-based line number (0 when not line-based).
        line: usize,
        /// Which figure.
        what: String,
        /// The text found.
        text: String,
    },
    /// The tool said it failed instead of printing results.
    #[error("{tool} failed instead of printing results: {message}")]
    ToolFailed {
        /// The parser's name.
        tool: String,
        /// The tool's own message.
        message: String,
    },
    /// The output holds several results and the parser was not told which one to take.
    #[error("{tool} output holds several tests ({found}); set the parser's `test` option to one of them")]
    Ambiguous {
        /// The parser's name.
        tool: String,
        /// The candidates, comma-separated.
        found: String,
    },
    /// The output is not the JSON that `stairbench load --json` writes.
    #[error("not stairbench load JSON: {0}")]
    NotLoadJson(String),
    /// Neither a request count with the run's length nor a throughput: the run has no rate.
    #[error("the output gave neither a request count with its duration nor a throughput")]
    NoRate,
}

impl ParseError {
    fn missing(tool: &str, what: &str, stdout: &str) -> Self {
        ParseError::Missing {
            tool: tool.into(),
            what: what.into(),
            head: stdout.chars().take(120).collect(),
        }
    }

    fn bad_value(tool: &str, line: usize, what: &str, text: &str) -> Self {
        ParseError::BadValue {
            tool: tool.into(),
            line,
            what: what.into(),
            text: text.into(),
        }
    }
}

/// Why a parser could not be set up from a spec.
#[derive(Debug, thiserror::Error)]
pub enum ParserConfigError {
    /// The name is not one of the known parsers.
    #[error("unknown output parser {0:?}; the parsers are: wrk, redis-benchmark, crimson-msgr, json, regex (or stairbench, for `stairbench load --json`)")]
    UnknownParser(String),
    /// An option is missing, of the wrong type, or unknown.
    #[error("output parser {parser:?}: {message}")]
    BadOption {
        /// The parser's name.
        parser: String,
        /// What was wrong and what is expected.
        message: String,
    },
}

/// Builds the parser called `name` with its options from a spec's client section.
///
/// - `wrk`, `crimson-msgr`: no options.
/// - `stairbench`: the output of `stairbench load --json`; its options are not read.
/// - `redis-benchmark`: `test = "GET"` picks one test when the output holds several.
/// - `json`: `fields = { throughput_rps = "/summary/rps", latency_us.p99 = "/lat/p99" }`
///   maps our field names ([`FIELD_NAMES`]) to JSON pointers (RFC 6901);
///   optional `scale = { "latency_us.p99" = 1000.0 }` multiplies a value (ms to µs here).
/// - `regex`: `pattern = "..."` or `patterns = ["...", ...]` whose named capture groups are
///   our field names (`(?P<throughput_rps>[0-9.]+)`, `(?P<latency_us.p99>...)`); the last
///   match wins; `^`/`$` match at line ends; optional `scale` as for `json`.
pub fn by_name(name: &str, opts: &toml::Table) -> Result<Box<dyn OutputParser>, ParserConfigError> {
    match name {
        // Options were never checked for it: a spec that gives some still runs.
        "stairbench" => Ok(Box::new(StairbenchJson)),
        "wrk" => {
            fields::expect_keys(name, opts, &[])?;
            Ok(Box::new(WrkParser))
        }
        "crimson-msgr" => {
            fields::expect_keys(name, opts, &[])?;
            Ok(Box::new(CrimsonMsgrParser))
        }
        "redis-benchmark" => Ok(Box::new(RedisBenchmarkParser::from_options(opts)?)),
        "json" => Ok(Box::new(JsonParser::from_options(opts)?)),
        "regex" => Ok(Box::new(RegexParser::from_options(opts)?)),
        other => Err(ParserConfigError::UnknownParser(other.into())),
    }
}
