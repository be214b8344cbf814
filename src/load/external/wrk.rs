//! wrk's summary (with or without `--latency`): the thread-stats table, the latency
//! distribution, the `N requests in T, B read` line, socket errors, non-2xx replies,
//! `Requests/sec` and `Transfer/sec`. wrk prints times as us/ms/s/m/h, sizes 1024-based and
//! request rates 1000-based (`81.46k`); all are converted here.

use super::fields::{binary_bytes, lines, metric, time_us};
use super::{OutputParser, ParseError, ParsedLoad};

const TOOL: &str = "wrk";

/// Parser of wrk's (and wrk2's) standard output.
#[derive(Debug, Clone, Copy, Default)]
pub struct WrkParser;

impl OutputParser for WrkParser {
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError> {
        let mut load = ParsedLoad::default();
        let mut in_distribution = false;
        for (no, line) in lines(stdout) {
            let words: Vec<&str> = line.split_whitespace().collect();
            if in_distribution {
                in_distribution = read_percentile(&mut load, &words, no, line)?;
                if in_distribution {
                    continue;
                }
            }
            if words.starts_with(&["Latency", "Distribution"]) {
                in_distribution = true;
            } else {
                summary_line(&mut load, &words, no, line)?;
            }
        }
        finish(load, stdout)
    }
}

/// One line of wrk's summary, outside the latency distribution.
fn summary_line(
    load: &mut ParsedLoad,
    words: &[&str],
    no: usize,
    line: &str,
) -> Result<(), ParseError> {
    match words {
        ["Latency", avg, stdev, max, within] => {
            read_latency_stats(load, [avg, stdev, max, within], no, line)?
        }
        ["Req/Sec", avg, stdev, max, _] => read_thread_rates(load, [avg, stdev, max]),
        [threads, "threads", "and", conns, "connections"] => {
            extra_number(load, "threads", threads);
            extra_number(load, "connections", conns);
        }
        [n, "requests", "in", time, bytes, "read"] => {
            read_totals(load, [n, time, bytes], no, line)?
        }
        ["Socket", "errors:", rest @ ..] => read_socket_errors(load, rest, no, line)?,
        ["Non-2xx", "or", "3xx", "responses:", n] => {
            let n = count(n, no, "non-2xx/3xx replies", line)?;
            load.errors.insert("http_non_2xx_3xx".into(), n);
        }
        ["Requests/sec:", rate] => {
            load.throughput_rps = Some(number(rate, no, "Requests/sec", line)?)
        }
        ["Transfer/sec:", rate] => {
            let bytes = binary_bytes(rate)
                .ok_or_else(|| ParseError::bad_value(TOOL, no, "Transfer/sec", line))?;
            load.extra.insert("transfer_bytes_per_s".into(), bytes);
        }
        _ => {}
    }
    Ok(())
}

fn finish(mut load: ParsedLoad, stdout: &str) -> Result<ParsedLoad, ParseError> {
    if load.requests.is_none() {
        if let Some(reason) = failure_message(stdout) {
            return Err(ParseError::ToolFailed {
                tool: TOOL.into(),
                message: reason,
            });
        }
        return Err(ParseError::missing(
            TOOL,
            "line `N requests in T, B read`",
            stdout,
        ));
    }
    // With no reply at all wrk prints zeros for latency: that is no measurement, not 0 µs.
    if load.requests == Some(0) {
        load.latency_us = Default::default();
    }
    leave_failed_replies_out(&mut load);
    Ok(load)
}

/// wrk's `N requests` counts every reply, failed ones too: a non-2xx/3xx reply, and one that
/// came after the timeout (wrk counts it as a `timeout` socket error when it records its
/// latency). Those are errors, not requests, and the rate is the successful replies' rate.
/// Read, write and connect errors are not replies and were never in `N`.
fn leave_failed_replies_out(load: &mut ParsedLoad) {
    let Some(replies) = load.requests else { return };
    let failed: u64 = ["http_non_2xx_3xx", "timeout"]
        .iter()
        .filter_map(|kind| load.errors.get(*kind))
        .sum();
    let ok = replies.saturating_sub(failed);
    load.extra.insert("replies".into(), replies as f64);
    load.requests = Some(ok);
    if let (Some(rps), true) = (load.throughput_rps, replies > 0) {
        load.throughput_rps = Some(rps * ok as f64 / replies as f64);
    }
}

/// wrk's messages when it cannot run (`unable to connect to ...`, a usage text).
fn failure_message(stdout: &str) -> Option<String> {
    let first = stdout.lines().find(|l| !l.trim().is_empty())?.trim();
    let failed =
        first.starts_with("unable to") || first.starts_with("Usage:") || first.contains("invalid");
    failed.then(|| first.to_string())
}

fn read_latency_stats(
    load: &mut ParsedLoad,
    [avg, stdev, max, within]: [&&str; 4],
    no: usize,
    line: &str,
) -> Result<(), ParseError> {
    let t =
        |s: &str, what: &str| time_us(s).ok_or_else(|| ParseError::bad_value(TOOL, no, what, line));
    load.latency_us.mean = Some(t(avg, "mean latency")?);
    load.latency_us.stdev = Some(t(stdev, "latency stdev")?);
    load.latency_us.max = Some(t(max, "max latency")?);
    if let Some(pct) = within.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) {
        if pct.is_finite() {
            load.extra.insert("latency_within_stdev_pct".into(), pct);
        }
    }
    Ok(())
}

fn read_thread_rates(load: &mut ParsedLoad, [avg, stdev, max]: [&&str; 3]) {
    for (name, text) in [
        ("thread_rps_mean", avg),
        ("thread_rps_stdev", stdev),
        ("thread_rps_max", max),
    ] {
        if let Some(v) = metric(text) {
            load.extra.insert(name.into(), v);
        }
    }
}

/// One `  99%  314.00us` line of the distribution; false at the first line that is not one.
fn read_percentile(
    load: &mut ParsedLoad,
    words: &[&str],
    no: usize,
    line: &str,
) -> Result<bool, ParseError> {
    let [pct, value] = words else {
        return Ok(false);
    };
    let Some(pct) = pct.strip_suffix('%').and_then(|p| p.parse::<f64>().ok()) else {
        return Ok(false);
    };
    let us = time_us(value).ok_or_else(|| ParseError::bad_value(TOOL, no, "percentile", line))?;
    let named = [
        (50.0, "p50"),
        (75.0, "p75"),
        (90.0, "p90"),
        (95.0, "p95"),
        (99.0, "p99"),
        (99.9, "p999"),
    ];
    let Some(slot) = named
        .iter()
        .find(|(p, _)| *p == pct)
        .and_then(|(_, name)| load.latency_us.get_mut(name))
    else {
        // wrk2 prints more percentiles (99.99%, 100%): keep them as extra figures.
        load.extra.insert(format!("latency_p{pct}_us"), us);
        return Ok(true);
    };
    *slot = Some(us);
    Ok(true)
}

fn read_totals(
    load: &mut ParsedLoad,
    [n, time, bytes]: [&&str; 3],
    no: usize,
    line: &str,
) -> Result<(), ParseError> {
    load.requests = Some(count(n, no, "request count", line)?);
    let duration_us = time_us(time.trim_end_matches(','))
        .ok_or_else(|| ParseError::bad_value(TOOL, no, "run time", line))?;
    load.duration_s = Some(duration_us / 1e6);
    let bytes =
        binary_bytes(bytes).ok_or_else(|| ParseError::bad_value(TOOL, no, "bytes read", line))?;
    load.bytes_received = Some(bytes.round() as u64);
    Ok(())
}

/// `connect 0, read 21918, write 0, timeout 0`: the non-zero kinds go to `errors`.
fn read_socket_errors(
    load: &mut ParsedLoad,
    rest: &[&str],
    no: usize,
    line: &str,
) -> Result<(), ParseError> {
    for pair in rest.chunks(2) {
        let [kind, n] = pair else {
            return Err(ParseError::bad_value(TOOL, no, "socket errors", line));
        };
        let n = count(n.trim_end_matches(','), no, "socket errors", line)?;
        if n > 0 {
            load.errors.insert((*kind).to_string(), n);
        }
    }
    Ok(())
}

fn extra_number(load: &mut ParsedLoad, name: &str, text: &str) {
    if let Ok(v) = text.parse::<f64>() {
        load.extra.insert(name.into(), v);
    }
}

fn number(text: &str, no: usize, what: &str, line: &str) -> Result<f64, ParseError> {
    text.parse()
        .map_err(|_| ParseError::bad_value(TOOL, no, what, line))
}

fn count(text: &str, no: usize, what: &str, line: &str) -> Result<u64, ParseError> {
    text.parse()
        .map_err(|_| ParseError::bad_value(TOOL, no, what, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LATENCY_RUN: &str = "\
Running 2s test @ http://127.0.0.1:18080/
  2 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   202.64us   85.63us   2.88ms   94.53%
    Req/Sec    39.87k     5.80k   74.54k    97.56%
  Latency Distribution
     50%  196.00us
     75%  215.00us
     90%  238.00us
     99%  314.00us
  162477 requests in 2.10s, 37.19MB read
Requests/sec:  77437.30
Transfer/sec:     17.72MB
";

    #[test]
    fn reads_every_figure_of_a_latency_run() {
        let load = WrkParser.parse(LATENCY_RUN).unwrap();
        assert_eq!(load.requests, Some(162477));
        assert_eq!(load.duration_s, Some(2.1));
        assert_eq!(load.throughput_rps, Some(77437.30));
        assert_eq!(
            load.bytes_received,
            Some((37.19 * 1024.0 * 1024.0_f64).round() as u64)
        );
        let lat = &load.latency_us;
        assert_eq!(lat.mean, Some(202.64));
        assert_eq!(lat.stdev, Some(85.63));
        assert_eq!(lat.max, Some(2880.0));
        assert_eq!(
            (lat.p50, lat.p75, lat.p90, lat.p99),
            (Some(196.0), Some(215.0), Some(238.0), Some(314.0))
        );
        assert_eq!(load.extra["threads"], 2.0);
        assert_eq!(load.extra["connections"], 16.0);
        assert_eq!(load.extra["thread_rps_mean"], 39870.0);
        assert!(load.errors.is_empty());
    }

    #[test]
    fn socket_errors_and_non_2xx_are_counted() {
        let text = LATENCY_RUN.replace(
            "Requests/sec",
            "  Socket errors: connect 0, read 3, write 0, timeout 7\n  Non-2xx or 3xx responses: 12\nRequests/sec",
        );
        let load = WrkParser.parse(&text).unwrap();
        assert_eq!(load.errors.get("read"), Some(&3));
        assert_eq!(load.errors.get("timeout"), Some(&7));
        assert_eq!(load.errors.get("connect"), None);
        assert_eq!(load.errors.get("http_non_2xx_3xx"), Some(&12));
        assert_eq!(
            load.requests,
            Some(162477 - 12 - 7),
            "failed replies are not requests"
        );
        assert_eq!(load.extra["replies"], 162477.0);
        let rps = load.throughput_rps.unwrap();
        assert!((rps - 77437.30 * 162458.0 / 162477.0).abs() < 1e-6, "{rps}");
    }

    #[test]
    fn other_output_is_an_error_that_says_what_was_seen() {
        let err = WrkParser.parse("hello\n").unwrap_err().to_string();
        assert!(err.contains("N requests in T"), "{err}");
        assert!(err.contains("hello"), "{err}");
        let err = WrkParser
            .parse("unable to connect to 127.0.0.1:1 Connection refused\n")
            .unwrap_err();
        assert!(matches!(err, ParseError::ToolFailed { .. }), "{err}");
        let bad = LATENCY_RUN.replace("2.10s", "2.10parsecs");
        let err = WrkParser.parse(&bad).unwrap_err().to_string();
        assert!(err.contains("line 11") && err.contains("run time"), "{err}");
    }
}
