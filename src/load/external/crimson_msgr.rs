//! perf-crimson-msgr's client output (Ceph `src/crimson/tools/perf_crimson_msgr.cc`):
//!
//! - a header `sec depth IOPS MB/s lat(ms)`, then one row per second: the interval's length
//!   in seconds, the in-flight depth, IOPS, MiB/s, mean latency in ms, then `-- ` and each
//!   client reactor's busy % comma-separated (with a server reactor in the same process, its
//!   busy % comes first between two `--`);
//! - every 10 s and at the end `---- summary ----` and a row: measured seconds, `-`, IOPS,
//!   MiB/s, latency in ms (a wide IOPS figure is glued to the `-`: `-3.17785e+06`);
//! - at shutdown one `NAME(depth=N):` block per connection, `per client:` blocks, and the
//!   `all(depth=N):` block with `connect time`, `messages received`, `messaging time`,
//!   `latency`, `IOPS`, `out throughput`.
//!
//! The figures come from the `all` block when present, else from the last summary row.
//! Its `latency` is the tool's own: an unweighted mean of per-connection means of every
//! 256th message timed with a low-resolution (~10 ms) clock; its "MB/s" are MiB/s.

use std::collections::BTreeMap;

use super::fields::{lines, split_unit};
use super::{OutputParser, ParseError, ParsedInterval, ParsedLoad};

const TOOL: &str = "crimson-msgr";
const MIB: f64 = 1_048_576.0;

/// Parser of perf-crimson-msgr's client output.
#[derive(Debug, Clone, Copy, Default)]
pub struct CrimsonMsgrParser;

/// One `NAME(depth=N):` block of the shutdown report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobBlock {
    /// `all`, `client0`, `client0Conn1@2`, ...
    pub name: String,
    /// In-flight depth the block covers.
    pub depth: u64,
    /// The `key: value` lines, keys as printed, values without their unit.
    pub values: BTreeMap<String, f64>,
}

/// Everything the output holds, before choosing what to report.
#[derive(Debug, Default)]
struct Output {
    intervals: Vec<ParsedInterval>,
    /// The last `summary` row: seconds, IOPS, MiB/s, latency ms.
    summary: Option<[f64; 4]>,
    blocks: Vec<JobBlock>,
}

impl OutputParser for CrimsonMsgrParser {
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError> {
        let out = read_output(stdout)?;
        let mut load = match out.blocks.iter().rev().find(|b| b.name == "all") {
            Some(all) => from_all_block(all, stdout)?,
            None => from_summary(out.summary, stdout)?,
        };
        add_busy_means(&mut load, &out.intervals);
        load.intervals = out.intervals;
        Ok(load)
    }
}

impl CrimsonMsgrParser {
    /// The per-connection, per-client and `all` blocks of the shutdown report, in order.
    pub fn job_blocks(stdout: &str) -> Result<Vec<JobBlock>, ParseError> {
        Ok(read_output(stdout)?.blocks)
    }
}

fn read_output(stdout: &str) -> Result<Output, ParseError> {
    let mut out = Output::default();
    let mut in_table = false;
    let mut summary_next = false;
    for (no, line) in lines(stdout) {
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if summary_next {
            out.summary = Some(summary_row(no, text)?);
            summary_next = false;
        } else if text.contains("-- summary --") {
            summary_next = true;
        } else if is_header(text) {
            in_table = true;
        } else if let Some((name, depth)) = block_start(text) {
            out.blocks.push(JobBlock {
                name,
                depth,
                values: BTreeMap::new(),
            });
            in_table = false;
        } else if let Some(block) = out.blocks.last_mut().filter(|_| line.starts_with(' ')) {
            block_line(block, no, text)?;
        } else if in_table {
            if let Some(row) = table_row(no, text, &out.intervals)? {
                out.intervals.push(row);
            }
        }
    }
    Ok(out)
}

fn is_header(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    words == ["sec", "depth", "IOPS", "MB/s", "lat(ms)"]
}

/// `all(depth=28672):` gives `("all", 28672)`.
fn block_start(text: &str) -> Option<(String, u64)> {
    let (name, rest) = text.split_once("(depth=")?;
    let depth = rest.strip_suffix("):")?.parse().ok()?;
    (!name.is_empty() && !name.contains(' ')).then(|| (name.to_string(), depth))
}

/// `  connect time: 0.003748s` inside a block.
fn block_line(block: &mut JobBlock, no: usize, text: &str) -> Result<(), ParseError> {
    let Some((key, value)) = text.split_once(':') else {
        return Ok(());
    };
    let (number, _unit) = split_unit(value)
        .ok_or_else(|| ParseError::bad_value(TOOL, no, &format!("{} {key}", block.name), text))?;
    block.values.insert(key.trim().to_string(), number);
    Ok(())
}

/// `1.00516  27043 3.17101e+06  12386.7  8.41057 -- 89,95,...,` (a server's busy % may sit
/// between two `--`). Lines of other shapes (log lines between rows) are skipped.
fn table_row(
    no: usize,
    text: &str,
    before: &[ParsedInterval],
) -> Result<Option<ParsedInterval>, ParseError> {
    let mut parts = text.split(" -- ");
    let figures: Vec<&str> = parts
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let [interval, depth, iops, mib, lat] = figures.as_slice() else {
        return Ok(None);
    };
    let Ok(interval_s) = interval.parse::<f64>() else {
        return Ok(None);
    };
    let num = |t: &str, what: &str| -> Result<f64, ParseError> {
        t.parse()
            .map_err(|_| ParseError::bad_value(TOOL, no, what, text))
    };
    let busy: Vec<&str> = parts.collect();
    let (server, clients) = match busy.as_slice() {
        [server, clients] => (Some(num(server, "server busy %")?), *clients),
        [clients] => (None, *clients),
        _ => (None, ""),
    };
    let busy_pct = clients
        .split(',')
        .filter(|c| !c.trim().is_empty())
        .map(|c| num(c.trim(), "reactor busy %"))
        .collect::<Result<_, _>>()?;
    Ok(Some(ParsedInterval {
        elapsed_s: before.last().map_or(0.0, |p| p.elapsed_s) + interval_s,
        interval_s,
        inflight: Some(num(depth, "depth")? as u64),
        ops_per_s: num(iops, "IOPS")?,
        mib_per_s: Some(num(mib, "MB/s")?),
        mean_latency_ms: finite(num(lat, "latency")?),
        busy_pct,
        server_busy_pct: server,
    }))
}

/// `40.1393     -3.17785e+06 12413.5 8.37097`: seconds, `-` (depth), IOPS, MiB/s, ms.
fn summary_row(no: usize, text: &str) -> Result<[f64; 4], ParseError> {
    let bad = || ParseError::bad_value(TOOL, no, "summary row", text);
    let (secs, rest) = text.split_once(char::is_whitespace).ok_or_else(bad)?;
    let rest = rest.trim_start().strip_prefix('-').ok_or_else(bad)?;
    let figures: Vec<f64> = std::iter::once(secs)
        .chain(rest.split_whitespace())
        .map(|t| t.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    figures.try_into().map_err(|_| bad())
}

fn from_all_block(all: &JobBlock, stdout: &str) -> Result<ParsedLoad, ParseError> {
    let get = |key: &str| {
        all.values.get(key).copied().ok_or_else(|| {
            ParseError::missing(
                TOOL,
                &format!("`{key}` line in the all(depth=N) block"),
                stdout,
            )
        })
    };
    let mut load = ParsedLoad {
        requests: Some(get("messages received")? as u64),
        duration_s: Some(get("messaging time")?),
        throughput_rps: Some(get("IOPS")?),
        ..Default::default()
    };
    load.latency_us.mean = finite(get("latency")? * 1000.0);
    load.extra.insert("depth".into(), all.depth as f64);
    load.extra
        .insert("connect_time_s".into(), get("connect time")?);
    let out_mib = get("out throughput")?;
    load.extra
        .insert("out_throughput_mib_per_s".into(), out_mib);
    load.extra.insert("out_bytes_per_s".into(), out_mib * MIB);
    Ok(load)
}

fn from_summary(summary: Option<[f64; 4]>, stdout: &str) -> Result<ParsedLoad, ParseError> {
    let [secs, iops, mib, lat_ms] = summary
        .ok_or_else(|| ParseError::missing(TOOL, "all(depth=N) block nor `summary` row", stdout))?;
    let mut load = ParsedLoad {
        duration_s: Some(secs),
        throughput_rps: Some(iops),
        ..Default::default()
    };
    load.latency_us.mean = finite(lat_ms * 1000.0);
    load.extra.insert("out_throughput_mib_per_s".into(), mib);
    load.extra.insert("out_bytes_per_s".into(), mib * MIB);
    Ok(load)
}

/// Mean busy % of the client reactors (and of the server's) over all rows.
fn add_busy_means(load: &mut ParsedLoad, intervals: &[ParsedInterval]) {
    let client: Vec<f64> = intervals.iter().flat_map(|i| i.busy_pct.clone()).collect();
    if !client.is_empty() {
        let mean = client.iter().sum::<f64>() / client.len() as f64;
        load.extra.insert("client_busy_pct_mean".into(), mean);
    }
    let server: Vec<f64> = intervals.iter().filter_map(|i| i.server_busy_pct).collect();
    if !server.is_empty() {
        let mean = server.iter().sum::<f64>() / server.len() as f64;
        load.extra.insert("server_busy_pct_mean".into(), mean);
    }
}

/// The tool prints `nan` latency when no message was sampled: no figure, not zero.
fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small run shaped as the tool prints it: 1 client, 2 connections, depth 4 each.
    const SMALL_RUN: &str = "\
   sec  depth      IOPS     MB/s  lat(ms)
 1.002      8   10000.5  39.0645      0.8 -- 61 -- 45,
INFO  2024-05-01 12:00:01,000 [shard 1] ms - a log line in between
 1.001      8    9990.0  39.0234      0.9 -- 62 -- 47,
-------------- summary --------------
  2.003     -  9995.25  39.0439     0.85

client0Conn0@1(depth=4):
  connect time: 0.000400s
  messages received: 10000
  messaging time: 2.003000s
  latency: 0.800000ms
  IOPS: 4992.511233
  out throughput: 19.502005MB/s
client0Conn1@1(depth=4):
  connect time: 0.000600s
  messages received: 10020
  messaging time: 2.003000s
  latency: 0.900000ms
  IOPS: 5002.496256
  out throughput: 19.541001MB/s

per client:
client0(depth=8):
  connect time: 0.000500s
  messages received: 20020
  messaging time: 2.003000s
  latency: 0.850000ms
  IOPS: 9995.007489
  out throughput: 39.043006MB/s

all(depth=8):
  connect time: 0.000500s
  messages received: 20020
  messaging time: 2.003000s
  latency: 0.850000ms
  IOPS: 9995.007489
  out throughput: 39.043006MB/s
";

    #[test]
    fn takes_the_all_block_not_a_connection() {
        let load = CrimsonMsgrParser.parse(SMALL_RUN).unwrap();
        assert_eq!(load.requests, Some(20020));
        assert_eq!(load.duration_s, Some(2.003));
        assert_eq!(load.throughput_rps, Some(9995.007489));
        assert_eq!(load.latency_us.mean, Some(850.0));
        assert_eq!(load.extra["depth"], 8.0);
        assert_eq!(load.extra["connect_time_s"], 0.0005);
        assert_eq!(load.extra["server_busy_pct_mean"], 61.5);
        assert_eq!(load.extra["client_busy_pct_mean"], 46.0);
    }

    #[test]
    fn rows_with_a_server_column_and_log_lines_between() {
        let load = CrimsonMsgrParser.parse(SMALL_RUN).unwrap();
        assert_eq!(load.intervals.len(), 2);
        let second = &load.intervals[1];
        assert_eq!(second.interval_s, 1.001);
        assert!((second.elapsed_s - 2.003).abs() < 1e-9);
        assert_eq!(second.inflight, Some(8));
        assert_eq!(second.ops_per_s, 9990.0);
        assert_eq!(second.mean_latency_ms, Some(0.9));
        assert_eq!(second.server_busy_pct, Some(62.0));
        assert_eq!(second.busy_pct, vec![47.0]);
    }

    #[test]
    fn blocks_add_up_as_the_tool_sums_them() {
        let blocks = CrimsonMsgrParser::job_blocks(SMALL_RUN).unwrap();
        let names: Vec<&str> = blocks.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(
            names,
            ["client0Conn0@1", "client0Conn1@1", "client0", "all"]
        );
        let conns = &blocks[..2];
        let all = &blocks[3];
        let sum = |key: &str| conns.iter().map(|b| b.values[key]).sum::<f64>();
        assert_eq!(sum("messages received"), all.values["messages received"]);
        assert_eq!(conns.iter().map(|b| b.depth).sum::<u64>(), all.depth);
        assert!((sum("IOPS") - all.values["IOPS"]).abs() < 1e-5);
    }

    #[test]
    fn without_shutdown_report_the_last_summary_row_is_used() {
        let cut = SMALL_RUN.split("client0Conn0").next().unwrap();
        let load = CrimsonMsgrParser.parse(cut).unwrap();
        assert_eq!(load.requests, None);
        assert_eq!(load.duration_s, Some(2.003));
        assert_eq!(load.throughput_rps, Some(9995.25));
        assert_eq!(load.latency_us.mean, Some(850.0));
    }

    #[test]
    fn glued_summary_figures_are_split() {
        let row = summary_row(1, "40.1393     -3.17785e+06 12413.5 8.37097").unwrap();
        assert_eq!(row, [40.1393, 3.17785e6, 12413.5, 8.37097]);
        assert!(summary_row(1, "40.1 3.1 12.0 8.3").is_err());
    }

    #[test]
    fn nothing_recognisable_is_an_error() {
        let err = CrimsonMsgrParser.parse("hello\n").unwrap_err().to_string();
        assert!(err.contains("all(depth=N)"), "{err}");
    }
}
