//! The output parsers on captured outputs of the real tools (tests/data/parsers/: wrk 4.1 and
//! redis-benchmark 7.0 run against nginx and redis on loopback; perf-crimson-msgr's output
//! reconstructed from seed 000's quotes). Each figure is checked against the text, read here
//! independently of the parser, and against the other figures it must agree with.

use std::path::PathBuf;

use stairbench::load::external::{
    by_name as parser_by_name, CrimsonMsgrParser, OutputParser, ParseError, ParsedLoad,
    RedisBenchmarkParser, WrkParser,
};

fn data(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/parsers")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The whitespace-separated words of the first line (split at `\n` and `\r`) containing `key`.
fn words_of<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.split(['\n', '\r'])
        .find(|l| l.contains(key))
        .unwrap_or_else(|| panic!("no line with {key:?}"))
        .split_whitespace()
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs())
}

fn assert_ordered(load: &ParsedLoad) {
    let l = &load.latency_us;
    let chain: Vec<f64> = [l.min, l.p50, l.p75, l.p90, l.p95, l.p99, l.p999, l.max]
        .into_iter()
        .flatten()
        .collect();
    assert!(
        chain.windows(2).all(|w| w[0] <= w[1]),
        "latency not ordered: {l:?}"
    );
    if let (Some(mean), Some(max)) = (l.mean, l.max) {
        assert!(mean <= max, "mean {mean} > max {max}");
    }
}

const WRK_RUNS: [&str; 9] = [
    "wrk_basic.txt",
    "wrk_latency.txt",
    "wrk_latency_ms.txt",
    "wrk_latency_s.txt",
    "wrk_non2xx.txt",
    "wrk_non2xx_latency.txt",
    "wrk_socket_errors_read.txt",
    "wrk_socket_errors_timeout.txt",
    "wrk_no_reply.txt",
];

#[test]
fn wrk_totals_match_the_text() {
    for name in WRK_RUNS {
        let text = data(name);
        let load = WrkParser
            .parse(&text)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let totals = words_of(&text, " requests in ");
        let requests: u64 = totals[0].parse().unwrap();
        assert_eq!(load.extra["replies"], requests as f64, "{name}");
        let failed: u64 = load
            .errors
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "http_non_2xx_3xx" | "timeout"))
            .map(|(_, n)| n)
            .sum();
        assert_eq!(load.requests, Some(requests - failed), "{name}");
        let rps: f64 = words_of(&text, "Requests/sec:")[1].parse().unwrap();
        let ok_share = if requests > 0 {
            (requests - failed) as f64 / requests as f64
        } else {
            1.0
        };
        assert_eq!(load.throughput_rps, Some(rps * ok_share), "{name}");
        let secs: f64 = totals[3].trim_end_matches("s,").parse().unwrap();
        assert_eq!(load.duration_s, Some(secs), "{name}");
        // The run time is printed to 10 ms: requests / time agrees with Requests/sec to that.
        if requests > 0 {
            assert!(
                close(requests as f64 / secs, rps, 0.01 / secs + 1e-4),
                "{name}"
            );
        }
        assert_ordered(&load);
    }
}

#[test]
fn wrk_bytes_per_request_agree_with_transfer_rate() {
    for name in ["wrk_basic.txt", "wrk_latency.txt", "wrk_latency_ms.txt"] {
        let load = WrkParser.parse(&data(name)).unwrap();
        // Bytes are read for every reply, failed ones too.
        let replies = load.extra["replies"];
        let per_req = load.bytes_received.unwrap() as f64 / replies;
        let rps = load.throughput_rps.unwrap() * replies / load.requests.unwrap() as f64;
        let per_req_by_rate = load.extra["transfer_bytes_per_s"] / rps;
        assert!(
            close(per_req, per_req_by_rate, 0.01),
            "{name}: {per_req} vs {per_req_by_rate}"
        );
        // nginx's reply to these requests is a couple of hundred bytes.
        assert!(
            (100.0..400.0).contains(&per_req),
            "{name}: {per_req} bytes per reply"
        );
    }
}

#[test]
fn wrk_latency_units_and_distribution() {
    let us = WrkParser.parse(&data("wrk_latency.txt")).unwrap();
    assert_eq!(us.latency_us.mean, Some(202.64));
    assert_eq!(us.latency_us.max, Some(2880.0));
    assert_eq!(us.latency_us.p99, Some(314.0));
    let ms = WrkParser.parse(&data("wrk_latency_ms.txt")).unwrap();
    assert_eq!(ms.latency_us.mean, Some(7400.0));
    assert_eq!(ms.latency_us.p99, Some(82710.0));
    assert_eq!(ms.extra["connections"], 400.0);
    let s = WrkParser.parse(&data("wrk_latency_s.txt")).unwrap();
    assert_eq!(s.latency_us.p50, Some(1.1e6));
    assert_eq!(s.latency_us.stdev, Some(293.51));
    assert_eq!(s.bytes_received, Some(264));
    let plain = WrkParser.parse(&data("wrk_basic.txt")).unwrap();
    assert_eq!(plain.latency_us.p50, None, "no --latency, no percentiles");
}

#[test]
fn wrk_errors_by_kind() {
    let non2xx = WrkParser.parse(&data("wrk_non2xx.txt")).unwrap();
    let printed: u64 = words_of(&data("wrk_non2xx.txt"), "Non-2xx")[4]
        .parse()
        .unwrap();
    assert_eq!(non2xx.errors.get("http_non_2xx_3xx"), Some(&printed));
    assert_eq!(
        non2xx.requests,
        Some(0),
        "every reply was a 500 here: none is a request"
    );
    assert_eq!(non2xx.throughput_rps, Some(0.0));

    let read = WrkParser
        .parse(&data("wrk_socket_errors_read.txt"))
        .unwrap();
    assert_eq!(read.errors.get("read"), Some(&21918));
    assert_eq!(
        read.errors.len(),
        1,
        "zero kinds are left out: {:?}",
        read.errors
    );
    assert_eq!(read.requests, Some(0));
    assert!(read.latency_us.is_empty(), "no reply: no latency, not 0 µs");

    let timeout = WrkParser
        .parse(&data("wrk_socket_errors_timeout.txt"))
        .unwrap();
    assert_eq!(timeout.errors.get("timeout"), Some(&6));
    assert_eq!(
        timeout.requests,
        Some(0),
        "the 6 replies all came after the timeout"
    );

    let none = WrkParser.parse(&data("wrk_no_reply.txt")).unwrap();
    assert_eq!(none.requests, Some(0));
    assert!(none.latency_us.is_empty());
}

#[test]
fn wrk_that_could_not_run_is_a_tool_failure() {
    let err = WrkParser
        .parse(&data("wrk_connect_refused.txt"))
        .unwrap_err();
    assert!(matches!(err, ParseError::ToolFailed { .. }), "{err}");
    assert!(err.to_string().contains("Connection refused"));
}

#[test]
fn regex_parser_reads_what_wrk_parser_reads() {
    let opts = toml::from_str(
        r#"patterns = ['^Requests/sec:\s+(?P<throughput_rps>[0-9.]+)', '^\s+(?P<requests>\d+) requests in']"#,
    )
    .unwrap();
    let by_regex = parser_by_name("regex", &opts).unwrap();
    // Runs without failed replies: with them the wrk parser leaves the failures out.
    for name in WRK_RUNS
        .iter()
        .filter(|n| !n.contains("non2xx") && !n.contains("timeout"))
    {
        let text = data(name);
        let a = by_regex.parse(&text).unwrap();
        let b = WrkParser.parse(&text).unwrap();
        assert_eq!(
            (a.requests, a.throughput_rps),
            (b.requests, b.throughput_rps),
            "{name}"
        );
    }
}

#[test]
fn redis_benchmark_default_report() {
    let text = data("redis_benchmark_default.txt");
    let tests = RedisBenchmarkParser::parse_tests(&text).unwrap();
    let names: Vec<&str> = tests.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["SET", "GET"]);
    // Each test's report, cut out here by its banner.
    let reports: Vec<&str> = text.split("====== ").skip(1).collect();
    for (test, report) in tests.iter().zip(reports) {
        let load = &test.load;
        let done = words_of(report, "requests completed in");
        assert_eq!(load.requests, Some(done[0].parse().unwrap()));
        let secs: f64 = done[4].parse().unwrap();
        assert_eq!(load.duration_s, Some(secs));
        let rps: f64 = words_of(report, "throughput summary:")[2].parse().unwrap();
        assert_eq!(load.throughput_rps, Some(rps));
        assert!(close(
            load.requests.unwrap() as f64 / secs,
            rps,
            0.005 / secs + 1e-3
        ));
        // The summary's p50 and max are the distribution's 50% and 100% lines.
        let p50_line: f64 = words_of(report, "50.000% <=")[2].parse().unwrap();
        assert!(close(load.latency_us.p50.unwrap(), p50_line * 1000.0, 1e-9));
        let max_line: f64 = words_of(report, "100.000% <=")[2].parse().unwrap();
        assert!(close(load.latency_us.max.unwrap(), max_line * 1000.0, 1e-9));
        assert!(load.latency_us.mean.is_some() && load.latency_us.p95.is_some());
        assert_eq!(load.extra["clients"], 50.0);
        assert_ordered(load);
    }
}

#[test]
fn redis_benchmark_csv_rows() {
    let text = data("redis_benchmark_csv.txt");
    let tests = RedisBenchmarkParser::parse_tests(&text).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split(',').map(|c| c.trim_matches('"')).collect())
        .collect();
    assert_eq!(tests.len(), rows.len());
    for (test, row) in tests.iter().zip(&rows) {
        let ms = |i: usize| row[i].parse::<f64>().unwrap() * 1000.0;
        assert_eq!(test.name, row[0]);
        assert_eq!(test.load.throughput_rps, Some(row[1].parse().unwrap()));
        let l = &test.load.latency_us;
        let got = [l.mean, l.min, l.p50, l.p95, l.p99, l.max].map(Option::unwrap);
        let want = [ms(2), ms(3), ms(4), ms(5), ms(6), ms(7)];
        assert!(
            got.iter().zip(want).all(|(g, w)| close(*g, w, 1e-12)),
            "{got:?} {want:?}"
        );
        assert_ordered(&test.load);
    }
}

#[test]
fn redis_benchmark_quiet_lines() {
    for name in [
        "redis_benchmark_quiet.txt",
        "redis_benchmark_quiet_pipelined.txt",
        "redis_benchmark_quiet_custom_command.txt",
    ] {
        let text = data(name);
        let finals: Vec<&str> = text
            .split(['\n', '\r'])
            .filter(|l| l.contains(" requests per second"))
            .collect();
        let tests = RedisBenchmarkParser::parse_tests(&text).unwrap();
        assert_eq!(tests.len(), finals.len(), "{name}");
        for (test, line) in tests.iter().zip(finals) {
            let (head, tail) = line.split_once(" requests per second, p50=").unwrap();
            let rps: f64 = head.rsplit(' ').next().unwrap().parse().unwrap();
            let p50: f64 = tail.trim_end_matches(" msec").trim().parse().unwrap();
            assert_eq!(test.load.throughput_rps, Some(rps), "{name}");
            assert!(close(
                test.load.latency_us.p50.unwrap(),
                p50 * 1000.0,
                1e-12
            ));
        }
    }
    let custom = data("redis_benchmark_quiet_custom_command.txt");
    let tests = RedisBenchmarkParser::parse_tests(&custom).unwrap();
    assert_eq!(tests[0].name, "INCR counter:__rand_int__");
}

#[test]
fn redis_benchmark_custom_command_report() {
    let opts = toml::from_str(r#"test = "incr counter:__rand_int__""#).unwrap();
    let parser = parser_by_name("redis-benchmark", &opts).unwrap();
    let load = parser
        .parse(&data("redis_benchmark_custom_command.txt"))
        .unwrap();
    assert_eq!(load.requests, Some(40000));
    assert_eq!(load.extra["clients"], 20.0);
    assert_eq!(load.extra["payload_bytes"], 41.0);
}

#[test]
fn redis_benchmark_picks_a_test_or_says_which_exist() {
    let text = data("redis_benchmark_quiet.txt");
    let none = parser_by_name("redis-benchmark", &toml::Table::new()).unwrap();
    let err = none.parse(&text).unwrap_err().to_string();
    assert!(err.contains("PING_INLINE, PING_MBULK, SET, GET"), "{err}");
    let get = parser_by_name(
        "redis-benchmark",
        &toml::from_str("test = \"GET\"").unwrap(),
    )
    .unwrap();
    let get_line = text
        .split(['\n', '\r'])
        .find(|l| l.starts_with("GET: ") && l.contains(" requests per second"))
        .unwrap();
    let want: f64 = get_line.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(get.parse(&text).unwrap().throughput_rps, Some(want));
    let failed = none
        .parse(&data("redis_benchmark_server_error.txt"))
        .unwrap();
    assert_eq!(failed.requests, Some(0), "an error reply is not a request");
    assert_eq!(failed.errors["resp_error"], 1);
}

/// Seed 000's data table, entry 8 (separated, 28 clients): the same run as the quoted block,
/// reported separately (IOPS in thousands).
const SEED_TABLE_ROW_8: [f64; 6] = [
    3175.492177,
    0.003748,
    8.430074,
    191154296.0,
    60.196743,
    12404.266318,
];

#[test]
fn crimson_msgr_summary_matches_the_seed() {
    let text = data("crimson_msgr_seed000_separated_28.txt");
    let load = CrimsonMsgrParser.parse(&text).unwrap();
    let [kiops, connect_s, lat_ms, msgs, secs, out_mib] = SEED_TABLE_ROW_8;
    assert!(close(load.throughput_rps.unwrap(), kiops * 1000.0, 1e-9));
    assert!(close(load.extra["connect_time_s"], connect_s, 1e-12));
    assert!(close(load.latency_us.mean.unwrap(), lat_ms * 1000.0, 1e-12));
    assert_eq!(load.requests, Some(msgs as u64));
    assert_eq!(load.duration_s, Some(secs));
    assert!(close(
        load.extra["out_throughput_mib_per_s"],
        out_mib,
        1e-12
    ));
    assert_eq!(
        load.extra["depth"], 28672.0,
        "28 clients × 2 connections × depth 512"
    );
    // The tool's own identities: IOPS = messages / time; MiB/s = IOPS × 4096 B / 2^20.
    let iops = load.throughput_rps.unwrap();
    assert!(close(msgs / secs, iops, 1e-6));
    assert!(close(iops * 4096.0 / 1048576.0, out_mib, 1e-6));
}

#[test]
fn crimson_msgr_rows() {
    let text = data("crimson_msgr_seed000_separated_28.txt");
    let load = CrimsonMsgrParser.parse(&text).unwrap();
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(" -- ")).collect();
    assert_eq!(load.intervals.len(), rows.len());
    assert_eq!(rows.len(), 10);
    for (row, line) in load.intervals.iter().zip(&rows) {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(row.interval_s, w[0].parse::<f64>().unwrap());
        assert_eq!(row.inflight, Some(w[1].parse().unwrap()));
        assert_eq!(row.ops_per_s, w[2].parse::<f64>().unwrap());
        assert_eq!(row.busy_pct.len(), 28, "one busy % per client reactor");
        // The per-second MB/s column is IOPS × 4096 / 2^20 too (6 significant digits).
        assert!(close(
            row.ops_per_s * 4096.0 / 1048576.0,
            row.mib_per_s.unwrap(),
            1e-5
        ));
    }
    let first = &load.intervals[0].busy_pct;
    assert_eq!((first[0], first[6], first[27]), (89.0, 83.0, 96.0));
    assert!((load.intervals[9].elapsed_s - 10.03269).abs() < 1e-9);
    let busy = load.extra["client_busy_pct_mean"];
    assert!((80.0..100.0).contains(&busy), "{busy}");
}

#[test]
fn crimson_msgr_without_all_block_uses_the_summary_row() {
    let text = data("crimson_msgr_seed000_separated_28.txt");
    let cut = text.split("\nall(depth=").next().unwrap();
    let load = CrimsonMsgrParser.parse(cut).unwrap();
    assert_eq!(load.duration_s, Some(40.1393));
    assert_eq!(load.throughput_rps, Some(3.17785e6));
    assert_eq!(load.latency_us.mean, Some(8370.97));
    assert_eq!(load.requests, None, "the summary row has no message count");
}

#[test]
fn parser_by_name_knows_every_parser_and_refuses_others() {
    let empty = toml::Table::new();
    for name in ["wrk", "redis-benchmark", "crimson-msgr"] {
        assert!(parser_by_name(name, &empty).is_ok(), "{name}");
    }
    let json = toml::from_str(r#"fields = { throughput_rps = "/throughput_rps" }"#).unwrap();
    let parsed = parser_by_name("json", &json)
        .unwrap()
        .parse(r#"{"throughput_rps": 5.5}"#);
    assert_eq!(parsed.unwrap().throughput_rps, Some(5.5));
    let err = parser_by_name("ab", &empty).err().unwrap().to_string();
    assert!(
        err.contains("\"ab\"") && err.contains("crimson-msgr"),
        "{err}"
    );
    let stray = toml::from_str("test = \"GET\"").unwrap();
    assert!(
        parser_by_name("wrk", &stray).is_err(),
        "wrk takes no options"
    );
    assert!(
        parser_by_name("json", &empty).is_err(),
        "json needs a field map"
    );
    assert!(
        parser_by_name("regex", &empty).is_err(),
        "regex needs a pattern"
    );
}

/// stairbench's own `load --json` output (captured from runs against nginx and redis) read
/// through the `json` parser, as a sweep reads any JSON-printing tool, and compared with the
/// same file read as the engine's `LoadReport`.
#[test]
fn json_parser_reads_stairbench_load_output() {
    let opts: toml::Table = toml::from_str(
        r#"
        [fields]
        requests = "/requests"
        duration_s = "/duration_s"
        throughput_rps = "/throughput_rps"
        bytes_received = "/bytes_received"
        latency_us = { mean = "/latency_us/mean", p50 = "/latency_us/p50", p99 = "/latency_us/p99", max = "/latency_us/max" }
        extra = { sent = "/sent", client_user_s = "/client_cpu/user_s", busy_pct = "/client_cpu/per_core_busy/0" }
        "#,
    )
    .unwrap();
    let parser = parser_by_name("json", &opts).unwrap();
    for name in [
        "stairbench_load_http.json",
        "stairbench_load_redis.json",
        "stairbench_load_http_500.json",
    ] {
        let text = data(name);
        let load = parser
            .parse(&text)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let report: stairbench::record::load::LoadReport = serde_json::from_str(&text).unwrap();
        assert_eq!(load.requests, Some(report.requests), "{name}");
        assert_eq!(load.duration_s, Some(report.duration_s));
        assert_eq!(load.throughput_rps, Some(report.throughput_rps));
        assert_eq!(load.bytes_received, Some(report.bytes_received));
        assert_eq!(load.latency_us.p99, Some(report.latency_us.p99));
        assert_eq!(load.latency_us.max, Some(report.latency_us.max));
        assert_eq!(load.extra["sent"], report.sent as f64);
        assert_eq!(load.extra["client_user_s"], report.client_cpu.user_s);
        assert_eq!(load.extra["busy_pct"], report.client_cpu.per_core_busy[0]);
    }
    let errors = toml::from_str(r#"fields = { "errors.http_5xx" = "/errors/http_5xx" }"#).unwrap();
    let load = parser_by_name("json", &errors)
        .unwrap()
        .parse(&data("stairbench_load_http_500.json"))
        .unwrap();
    assert_eq!(load.errors.get("http_5xx"), Some(&21665));
}
