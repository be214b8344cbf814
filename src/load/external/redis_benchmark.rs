//! redis-benchmark's three output forms: the default report per test (`====== GET ======`,
//! `N requests completed in T seconds`, the percentile distribution and the `Summary:`
//! block), `--csv` (a header row, then one row per test) and `-q` (one
//! `GET: R requests per second, p50=L msec` line per test). Progress redraws separated by
//! `\r` are skipped. Latencies are printed in milliseconds and converted to µs.
//!
//! One run can hold several tests (`-t get,set`): [`RedisBenchmarkParser::parse_tests`]
//! returns all of them, `parse` the one the `test` option names (or the only one).

use super::fields::{bad_option, expect_keys, lines};
use super::{OutputParser, ParseError, ParsedLoad, ParserConfigError};

const TOOL: &str = "redis-benchmark";

/// Parser of redis-benchmark's standard output.
#[derive(Debug, Clone, Default)]
pub struct RedisBenchmarkParser {
    /// The test to report (`GET`, `SET`, or a custom command line), case-insensitive.
    pub test: Option<String>,
}

/// One test of a redis-benchmark run.
#[derive(Debug, Clone, PartialEq)]
pub struct RedisBenchmarkTest {
    /// The test's name as printed (`GET`, `PING_INLINE`, `INCR counter:__rand_int__`).
    pub name: String,
    /// Its figures.
    pub load: ParsedLoad,
}

impl RedisBenchmarkParser {
    /// Reads the options `test = "NAME"` (optional).
    pub fn from_options(opts: &toml::Table) -> Result<Self, ParserConfigError> {
        expect_keys(TOOL, opts, &["test"])?;
        let test = match opts.get("test") {
            None => None,
            Some(toml::Value::String(s)) => Some(s.clone()),
            Some(_) => {
                return Err(bad_option(
                    TOOL,
                    "`test` must be a string such as \"GET\"".into(),
                ))
            }
        };
        Ok(RedisBenchmarkParser { test })
    }

    /// Every test of the run, in the order printed.
    pub fn parse_tests(stdout: &str) -> Result<Vec<RedisBenchmarkTest>, ParseError> {
        if let Some(message) = failure_message(stdout) {
            return Err(ParseError::ToolFailed {
                tool: TOOL.into(),
                message,
            });
        }
        let mut reader = Reader::default();
        for (no, line) in lines(stdout) {
            reader.line(no, line)?;
        }
        if reader.tests.is_empty() {
            return Err(ParseError::missing(
                TOOL,
                "test result (a `====== NAME ======` report, a CSV row or a `NAME: R requests per second` line)",
                stdout,
            ));
        }
        Ok(reader.tests)
    }

    fn pick(&self, tests: Vec<RedisBenchmarkTest>) -> Result<ParsedLoad, ParseError> {
        let names = || {
            tests
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let chosen = match &self.test {
            Some(want) => tests.iter().position(|t| t.name.eq_ignore_ascii_case(want)),
            None if tests.len() == 1 => Some(0),
            None => {
                return Err(ParseError::Ambiguous {
                    tool: TOOL.into(),
                    found: names(),
                })
            }
        };
        match chosen {
            Some(i) => Ok(tests.into_iter().nth(i).expect("index found above").load),
            None => Err(ParseError::Missing {
                tool: TOOL.into(),
                what: format!("test {:?}", self.test.as_deref().unwrap_or_default()),
                head: format!("the tests found are {}", names()),
            }),
        }
    }
}

impl OutputParser for RedisBenchmarkParser {
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError> {
        if let Some(load) = error_reply(stdout) {
            return Ok(load);
        }
        self.pick(Self::parse_tests(stdout)?)
    }
}

/// redis-benchmark 7 stops at the first error reply and prints no results: the server
/// answered, wrongly, so the run is one failed request (`resp_error`) and none completed,
/// not a tool that could not run.
fn error_reply(stdout: &str) -> Option<ParsedLoad> {
    stdout
        .lines()
        .any(|l| l.trim().starts_with("Error from server:"))
        .then(|| ParsedLoad {
            requests: Some(0),
            throughput_rps: Some(0.0),
            errors: [("resp_error".to_string(), 1)].into(),
            ..ParsedLoad::default()
        })
}

/// redis-benchmark 7 stops at the first error reply; it also stops when it cannot connect.
fn failure_message(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("Error from server:") || l.starts_with("Could not connect"))
        .map(str::to_string)
}

/// Which part of a default-mode report the previous lines opened.
#[derive(Debug, Default, PartialEq)]
enum Section {
    #[default]
    Header,
    Percentiles,
    Cumulative,
    LatencySummary(Vec<String>),
}

#[derive(Debug, Default)]
struct Reader {
    tests: Vec<RedisBenchmarkTest>,
    csv_columns: Option<Vec<String>>,
    section: Section,
}

impl Reader {
    fn line(&mut self, no: usize, line: &str) -> Result<(), ParseError> {
        let text = line.trim();
        if text.is_empty() || text.contains(" rps=") {
            return Ok(());
        }
        if let Some(name) = text
            .strip_prefix("====== ")
            .and_then(|t| t.strip_suffix(" ======"))
        {
            self.section = Section::Header;
            self.tests.push(RedisBenchmarkTest {
                name: name.into(),
                load: ParsedLoad::default(),
            });
            return Ok(());
        }
        if text.starts_with('"') {
            return self.csv_row(no, text);
        }
        if let Some(test) = quiet_line(no, text)? {
            self.tests.push(test);
            return Ok(());
        }
        self.report_line(no, text)
    }

    /// A line of a `====== NAME ======` report.
    fn report_line(&mut self, no: usize, text: &str) -> Result<(), ParseError> {
        let Some(test) = self.tests.last_mut() else {
            return Ok(());
        };
        let load = &mut test.load;
        let words: Vec<&str> = text.split_whitespace().collect();
        match (&self.section, words.as_slice()) {
            (_, ["Latency", "by", "percentile", ..]) => self.section = Section::Percentiles,
            (_, ["Cumulative", "distribution", ..]) => self.section = Section::Cumulative,
            (_, ["latency", "summary", "(msec):"]) => {
                self.section = Section::LatencySummary(Vec::new())
            }
            (_, ["throughput", "summary:", rps, "requests", "per", "second"]) => {
                load.throughput_rps = Some(number(rps, no, "throughput", text)?)
            }
            (_, [n, "requests", "completed", "in", t, "seconds"]) => {
                load.requests = Some(number(n, no, "request count", text)? as u64);
                load.duration_s = Some(number(t, no, "run time", text)?);
            }
            (_, [n, "parallel", "clients"]) => {
                load.extra
                    .insert("clients".into(), number(n, no, "clients", text)?);
            }
            (_, [n, "bytes", "payload"]) => {
                let n = number(n, no, "payload size", text)?;
                load.extra.insert("payload_bytes".into(), n);
            }
            (_, ["keep", "alive:", k]) => {
                load.extra
                    .insert("keep_alive".into(), number(k, no, "keep alive", text)?);
            }
            (Section::Percentiles, [pct, "<=", ms, "milliseconds", ..]) => {
                percentile_line(load, pct, ms, no, text)?
            }
            (Section::LatencySummary(columns), _) if columns.is_empty() => {
                self.section =
                    Section::LatencySummary(words.iter().map(|w| w.to_string()).collect());
            }
            (Section::LatencySummary(columns), _) => {
                for (column, value) in columns.iter().zip(&words) {
                    set_latency_ms(load, column, number(value, no, column, text)?);
                }
                self.section = Section::Header;
            }
            _ => {}
        }
        Ok(())
    }

    /// A `--csv` line: the header names the columns; rows are `"NAME","rps",...`.
    fn csv_row(&mut self, no: usize, text: &str) -> Result<(), ParseError> {
        let cells: Vec<&str> = text.split(',').map(|c| c.trim_matches('"')).collect();
        if cells.first() == Some(&"test") {
            self.csv_columns = Some(cells.iter().map(|c| c.to_string()).collect());
            return Ok(());
        }
        // Versions before 7 print no header: just "NAME","rps".
        let columns = self
            .csv_columns
            .clone()
            .unwrap_or_else(|| vec!["test".into(), "rps".into()]);
        let mut load = ParsedLoad::default();
        for (column, cell) in columns.iter().zip(&cells).skip(1) {
            let value = number(cell, no, column, text)?;
            match column.strip_suffix("_latency_ms") {
                Some(name) => set_latency_ms(&mut load, name, value),
                None if column == "rps" => load.throughput_rps = Some(value),
                None => {
                    load.extra.insert(column.clone(), value);
                }
            }
        }
        self.tests.push(RedisBenchmarkTest {
            name: cells[0].into(),
            load,
        });
        Ok(())
    }
}

/// `NAME: 99502.49 requests per second, p50=0.255 msec` (`-q`; p50 since version 7).
fn quiet_line(no: usize, text: &str) -> Result<Option<RedisBenchmarkTest>, ParseError> {
    let Some((head, tail)) = text.split_once(" requests per second") else {
        return Ok(None);
    };
    let Some((name, rps)) = head.rsplit_once(": ") else {
        return Ok(None);
    };
    // The default report's `throughput summary: R requests per second` has the same shape.
    if name == "throughput summary" {
        return Ok(None);
    }
    let mut load = ParsedLoad {
        throughput_rps: Some(number(rps, no, "requests per second", text)?),
        ..Default::default()
    };
    if let Some(p50) = tail
        .trim_start_matches(',')
        .trim()
        .strip_prefix("p50=")
        .and_then(|t| t.strip_suffix(" msec"))
    {
        set_latency_ms(&mut load, "p50", number(p50, no, "p50", text)?);
    }
    Ok(Some(RedisBenchmarkTest {
        name: name.trim().into(),
        load,
    }))
}

/// `75.000% <= 0.279 milliseconds (cumulative count 47840)`: the exact percentiles we name.
fn percentile_line(
    load: &mut ParsedLoad,
    pct: &str,
    ms: &str,
    no: usize,
    text: &str,
) -> Result<(), ParseError> {
    let pct = number(pct.trim_end_matches('%'), no, "percentile", text)?;
    let us = number(ms, no, "percentile latency", text)? * 1000.0;
    let slot = if pct == 75.0 {
        &mut load.latency_us.p75
    } else if pct == 100.0 {
        &mut load.latency_us.max
    } else {
        return Ok(());
    };
    *slot = Some(us);
    Ok(())
}

/// A latency column (`avg`, `min`, `p50`, ...) given in milliseconds.
fn set_latency_ms(load: &mut ParsedLoad, column: &str, ms: f64) {
    let name = if column == "avg" { "mean" } else { column };
    match load.latency_us.get_mut(name) {
        Some(slot) => *slot = Some(ms * 1000.0),
        None => {
            load.extra.insert(format!("latency_{column}_ms"), ms);
        }
    }
}

fn number(text: &str, no: usize, what: &str, line: &str) -> Result<f64, ParseError> {
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .ok_or_else(|| ParseError::bad_value(TOOL, no, what, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quiet_lines_keep_names_with_colons() {
        let text =
            " \rINCR counter:__rand_int__: rps=0.0 (overall: -nan) avg_msec=-nan (overall: -nan)\r\
                    INCR counter:__rand_int__: 49140.05 requests per second, p50=0.127 msec\n";
        let tests = RedisBenchmarkParser::parse_tests(text).unwrap();
        assert_eq!(tests.len(), 1);
        assert_eq!(tests[0].name, "INCR counter:__rand_int__");
        assert_eq!(tests[0].load.throughput_rps, Some(49140.05));
        assert_eq!(tests[0].load.latency_us.p50, Some(127.0));
    }

    #[test]
    fn csv_without_header_is_name_and_rate() {
        let tests = RedisBenchmarkParser::parse_tests("\"GET\",\"81234.50\"\n").unwrap();
        assert_eq!(tests[0].name, "GET");
        assert_eq!(tests[0].load.throughput_rps, Some(81234.5));
    }

    #[test]
    fn several_tests_need_the_test_option() {
        let text = "SET: 10.00 requests per second\nGET: 20.00 requests per second\n";
        let err = RedisBenchmarkParser::default().parse(text).unwrap_err();
        assert!(err.to_string().contains("SET, GET"), "{err}");
        let get = RedisBenchmarkParser {
            test: Some("get".into()),
        };
        assert_eq!(get.parse(text).unwrap().throughput_rps, Some(20.0));
        let lpop = RedisBenchmarkParser {
            test: Some("LPOP".into()),
        };
        let err = lpop.parse(text).unwrap_err().to_string();
        assert!(
            err.contains("\"LPOP\"") && err.contains("SET, GET"),
            "{err}"
        );
    }

    #[test]
    fn server_error_is_a_failed_request_not_a_completed_one() {
        let text = "WARNING: -e option has no effect.\nError from server: ERR value is not an integer or out of range\n";
        let err = RedisBenchmarkParser::parse_tests(text).unwrap_err();
        assert!(err.to_string().contains("not an integer"));
        let load = RedisBenchmarkParser::default().parse(text).unwrap();
        assert_eq!(load.requests, Some(0));
        assert_eq!(load.errors["resp_error"], 1);
    }

    #[test]
    fn options_are_checked() {
        let opts: toml::Table = toml::from_str("test = 3").unwrap();
        assert!(RedisBenchmarkParser::from_options(&opts).is_err());
        let opts: toml::Table = toml::from_str("tset = \"GET\"").unwrap();
        let err = RedisBenchmarkParser::from_options(&opts).unwrap_err();
        assert!(err.to_string().contains("tset"), "{err}");
    }
}
