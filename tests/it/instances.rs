//! Split instances, `[[observe]]` processes and target-reported metrics: a real split run of
//! the built-in server with its merged histogram checked against the instances' own logs,
//! the refused oversubscription, observed `sleep` processes, the built-in server's metrics
//! file and a metrics endpoint served by the test.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use stairbench::observe::extra::{ExtraObserver, ObserveEntry, ProcessSelector};
use stairbench::observe::metrics::{difference, MetricsFormat, MetricsSource, Snapshot};
use stairbench::observe::step::{NullObserver, ServerExtras, StepObserver};
use stairbench::placement::TopologyPlacements;
use stairbench::record::figures::ForeignJson;
use stairbench::record::hlog::read_hlog_or_empty;
use stairbench::record::steps::{read_steps, StepResult, StepStatus};
use stairbench::sweep::plan::Plan;
use stairbench::sweep::spec::SpecFile;
use stairbench::sweep::split::check_fit;

/// A `sleep` child that is killed when dropped.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(Command::new("sleep").arg("60").spawn().expect("sleep runs"))
    }
    fn pid(&self) -> i32 {
        self.0.id() as i32
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn split_instances_sum_and_merge_their_histograms_exactly() {
    let cpus = stairbench::cpuset::allowed();
    if cpus.len() < 2 {
        common::skip_or_fail(format!(
            "two instances need 2 CPUs, this process may use {cpus:?}"
        ));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sleeper = Sleeper::start();
    let pid_file = dir.path().join("sleeper.pid");
    std::fs::write(&pid_file, sleeper.pid().to_string()).unwrap();
    let spec = dir.path().join("split.toml");
    std::fs::write(
        &spec,
        format!(
            r#"
name = "split"
duration = "2s"
warmup = "1s"
clients = [2]
depth = 2
placements = ["shared"]
[[targets]]
name = "split"
builtin = "msgr --arch reactor"
instances = 2
[[targets]]
name = "one"
builtin = "msgr --arch reactor"
[[observe]]
name = "sleeper"
pid_file = "{}"
[[observe]]
name = "ghost"
pid_file = "no-such.pid"
"#,
            pid_file.display()
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    let split = steps.iter().find(|s| s["target"] == "split").unwrap();
    assert_eq!(split["status"], "ok", "{split}");
    let per = split["per_instance"].as_array().unwrap();
    assert_eq!(per.len(), 2);
    let sum = |k: &str| per.iter().map(|p| p[k].as_f64().unwrap()).sum::<f64>();
    assert_eq!(split["requests"].as_f64().unwrap(), sum("requests"));
    assert_eq!(split["sent"].as_f64().unwrap(), sum("sent"));
    assert_eq!(
        split["bytes_received"].as_f64().unwrap(),
        sum("bytes_received")
    );
    assert!((split["throughput_rps"].as_f64().unwrap() - sum("throughput_rps")).abs() < 1e-6);
    assert_ne!(per[0]["port"], per[1]["port"]);

    // The step's log is the instances' logs added, and its figures come from that sum.
    let id = split["id"].as_str().unwrap();
    let hist = |name: String| read_hlog_or_empty(&out_dir.join("hist").join(name)).unwrap();
    let mut raw = hist(format!("{id}.i0.hlog"));
    raw.add(hist(format!("{id}.i1.hlog"))).unwrap();
    let merged = hist(format!("{id}.hlog"));
    assert!(!raw.is_empty());
    assert_eq!(merged.len(), raw.len());
    for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
        assert_eq!(
            merged.value_at_quantile(q),
            raw.value_at_quantile(q),
            "q={q}"
        );
    }
    let p99_us = split["latency_us"]["p99"].as_f64().unwrap();
    assert_eq!(p99_us, raw.value_at_quantile(0.99) as f64 / 1e3);
    assert_eq!(raw.len(), split["requests"].as_u64().unwrap());

    // Each instance is observed as a process, and reports its own metrics.
    let observed = &split["observed"];
    assert!(
        observed["split.i0"]["server"]["pid"].as_i64().is_some(),
        "{observed}"
    );
    assert_eq!(observed["sleeper"]["server"]["pid"], sleeper.pid());
    // The step's server figures are the instances' process trees added.
    let user = |v: &Value| v["server"]["user_s"].as_f64().unwrap();
    let instances_user = user(&observed["split.i0"]) + user(&observed["split.i1"]);
    assert!(
        (user(&split["server"]) - instances_user).abs() < 1e-9,
        "{split}"
    );
    assert!(
        split["cpu_us_per_req"]["total"].as_f64().is_some(),
        "{split}"
    );
    assert!(observed["ghost"]["note"]
        .as_str()
        .unwrap()
        .contains("pid file"));
    let mut server_ops = 0;
    for k in 0..2 {
        let m = &split["target_metrics"][format!("split.i{k}")];
        // A file not rewritten during the window would be `unavailable` with its age, never
        // 0 ops; the built-in server's file says when it was written, so the span is known.
        assert!(m["span_s"].as_f64().is_some_and(|s| s > 0.0), "{m}");
        let m = &m["threads"]["msgr-reactor-0"];
        assert!(m["loops"].as_u64().is_some(), "{m}");
        server_ops += m["ops"].as_u64().unwrap();
    }
    let ratio = server_ops as f64 / split["requests"].as_f64().unwrap();
    assert!(
        server_ops > 0 && ratio < 1.3,
        "server ops / client requests = {ratio}"
    );
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
    for s in &steps {
        let errors = crate::schema::validate(&schema, s);
        assert!(errors.is_empty(), "{errors:?}");
    }
    let report = std::fs::read_to_string(out_dir.join("report.md")).unwrap();
    assert!(
        report.contains("2 instances × 1 core:") && report.contains("vs 1 instance × 2 cores:"),
        "{report}"
    );
    assert!(report.contains("## Observed processes"), "{report}");
    assert!(report.contains("% busy)"), "{report}");
    let back = read_steps(&out_dir.join("steps.jsonl")).unwrap();
    assert!(back.iter().all(|s| s.status == StepStatus::Ok));
}

#[test]
fn a_metrics_file_not_rewritten_during_the_window_is_unavailable_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    // The target writes its metrics file once, then serves: every window's readings are the
    // same file, last written before the window began.
    let once = dir.path().join("once.json");
    std::fs::write(&once, r#"{"ops": 7}"#).unwrap();
    let spec = dir.path().join("stale.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"stale\"\nduration = \"1s\"\nwarmup = \"0s\"\nclients = [1]\n\
             [[targets]]\nname = \"once\"\n\
             command = \"sh -c 'cp {} {{metrics}}; exec {} serve msgr --port {{port}}'\"\n\
             url = \"msgr://127.0.0.1:{{port}}\"\nready = {{ tcp = true, timeout = \"5s\" }}\n\
             metrics = {{ file = \"{{metrics}}\" }}\n",
            once.display(),
            common::stairbench_bin().display()
        ),
    )
    .unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    common::assert_success(&out);
    let steps = common::steps_json(&out_dir);
    let m = &steps[0]["target_metrics"]["once"];
    let note = m["note"].as_str().unwrap_or_else(|| panic!("{m}"));
    let prefix = "unavailable: the metrics file was not rewritten during the window (last written ";
    let ms = note
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(" ms before it began)"))
        .unwrap_or_else(|| panic!("{note}"));
    // Written before the server started listening, so before the window: at least 0 ms, and
    // not long before (the run starts the server right away).
    assert!(ms.parse::<u64>().unwrap() < 60_000, "{note}");
    assert!(m.get("ops").is_none(), "{m}");
    for report in ["report.md", "report.html"] {
        let text = std::fs::read_to_string(out_dir.join(report)).unwrap();
        assert!(
            text.contains("the metrics file was not rewritten during the window"),
            "{report}: {text}"
        );
    }
}

const OVERSUBSCRIBED: &str = r#"
name = "too-many"
duration = "1s"
clients = [64]
placements = ["shared"]
[[targets]]
name = "split"
builtin = "msgr --arch reactor"
instances = 64
"#;

#[test]
fn instances_that_do_not_fit_are_refused_before_anything_starts() {
    let spec = SpecFile::parse(Path::new("s.toml"), OVERSUBSCRIBED).unwrap();
    let plan = Plan::new(spec, common::stairbench_bin()).unwrap();
    let placements = TopologyPlacements::with_cpus(vec![0, 1], Default::default());
    let err = check_fit(&plan, &placements).unwrap_err().to_string();
    assert!(
        err.contains("instances = 64") && err.contains("gives the server 2 CPU(s)"),
        "{err}"
    );

    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("s.toml");
    std::fs::write(&spec, OVERSUBSCRIBED).unwrap();
    let out_dir = dir.path().join("run");
    let out = common::run_spec(&spec, &out_dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("each instance needs a CPU of its own"),
        "{stderr}"
    );
    assert!(
        !out_dir.exists(),
        "a refused run must not create its directory"
    );
}

/// The observers' `observed` and `target_metrics`, as a step's line writes them.
fn observe(entries: Vec<ObserveEntry>, extras: ServerExtras) -> Value {
    let mut obs = ExtraObserver::new(NullObserver, entries);
    obs.server_extras(&extras);
    obs.start(None, &[], &[]);
    std::thread::sleep(Duration::from_millis(50));
    let observed = obs.finish(0);
    serde_json::json!({
        "observed": observed.observed,
        "target_metrics": observed.target_metrics,
    })
}

#[test]
fn observe_entries_find_sleep_by_pid_file_and_by_command() {
    let sleeper = Sleeper::start();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("s.pid");
    std::fs::write(&pid_file, format!("{}\n", sleeper.pid())).unwrap();
    let entries = vec![
        ObserveEntry {
            name: "by-file".into(),
            selector: ProcessSelector::PidFile(pid_file),
        },
        ObserveEntry {
            name: "by-name".into(),
            selector: ProcessSelector::Command("sleep".into()),
        },
        ObserveEntry {
            name: "by-command".into(),
            selector: ProcessSelector::PidsCommand(format!("echo {}", sleeper.pid())),
        },
        ObserveEntry {
            name: "missing".into(),
            selector: ProcessSelector::Command("no-such-comm".into()),
        },
    ];
    let derived = observe(entries, ServerExtras::default());
    let observed = derived["observed"].as_object().unwrap();
    assert_eq!(observed["by-file"]["server"]["pid"], sleeper.pid());
    assert_eq!(observed["by-command"]["server"]["pid"], sleeper.pid());
    // Other `sleep` processes on the machine are observed too, each under its own key.
    let ours = observed
        .iter()
        .filter(|(k, _)| k.starts_with("by-name"))
        .any(|(_, v)| v["server"]["pid"] == sleeper.pid());
    assert!(ours, "{observed:?}");
    assert!(observed["missing"]["note"]
        .as_str()
        .unwrap()
        .contains("no running process"));
}

#[test]
fn the_builtin_servers_metrics_file_differences_match_its_counters() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.json");
    let server = stairbench::serve::spawn_msgr(stairbench::serve::MsgrOptions {
        threads: 2,
        metrics_file: Some(path.clone()),
        ..Default::default()
    })
    .unwrap();
    let source = MetricsSource::File {
        path,
        format: MetricsFormat::Json,
    };
    // The file is rewritten every 200 ms: readings taken while idle for longer are exact.
    let settle = || std::thread::sleep(Duration::from_millis(450));
    settle();
    let ops_before = server.stats().ops;
    let before = source.snapshot().unwrap();
    let config = stairbench::load::LoadConfig {
        url: format!("msgr://{}", server.addr()),
        connections: 2,
        threads: 1,
        duration: Duration::from_millis(300),
        warmup: Duration::ZERO,
        timeout: Duration::from_secs(5),
        depth: 1,
        rate_rps: None,
        cpuset: None,
        proto: Default::default(),
        ..Default::default()
    };
    struct Nothing;
    impl stairbench::record::load::IntervalSink for Nothing {
        fn interval(
            &mut self,
            _: &stairbench::record::load::IntervalLine,
            _: &hdrhistogram::Histogram<u64>,
        ) {
        }
    }
    stairbench::load::run(&config, &mut Nothing, &AtomicBool::new(false)).unwrap();
    settle();
    let ops = server.stats().ops - ops_before;
    let after = source.snapshot().unwrap();
    let diff = difference(&before, &after);
    let threads = diff["threads"].as_object().unwrap();
    assert_eq!(threads.len(), 2);
    let ops_sum: u64 = threads.values().map(|t| t["ops"].as_u64().unwrap()).sum();
    assert!(ops > 0);
    assert_eq!(ops_sum, ops);
    let busy_ns: u64 = threads
        .values()
        .map(|t| t["busy_ns"].as_u64().unwrap())
        .sum();
    assert!(busy_ns > 0 && busy_ns < 2_000_000_000, "{busy_ns}");
    // SO_REUSEPORT may hand both connections to one loop: the sum is what is certain.
    let loops: u64 = threads.values().map(|t| t["loops"].as_u64().unwrap()).sum();
    assert!(loops > 0);
    server.stop();
}

/// A one-route HTTP server: every GET answers a counter that grows by 1 (and by 10 deeper).
fn metrics_endpoint() -> (u16, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicU64::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            let body = format!(
                "{{\"requests\": {n}, \"nested\": {{\"bytes\": {}}}, \"ratio\": 0.5, \"name\": \"t\"}}",
                10 * n
            );
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, hits)
}

#[test]
fn a_metrics_endpoint_is_read_at_both_edges_of_the_window() {
    let (port, hits) = metrics_endpoint();
    let extras = ServerExtras {
        instances: Vec::new(),
        metrics: vec![(
            "t".into(),
            MetricsSource::Url(format!("http://127.0.0.1:{port}/metrics")),
        )],
        ..ServerExtras::default()
    };
    let derived = observe(Vec::new(), extras);
    let m = &derived["target_metrics"]["t"];
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    assert_eq!(m["requests"], 1, "{m}");
    assert_eq!(m["nested"]["bytes"], 10, "{m}");
    assert_eq!(m["ratio"], 0.0, "{m}");
    assert_eq!(m["name"], "t");

    // A source that does not answer is a note in the step, not a failure.
    let gone = ServerExtras {
        instances: Vec::new(),
        metrics: vec![(
            "gone".into(),
            MetricsSource::Url("http://127.0.0.1:1/".into()),
        )],
        ..ServerExtras::default()
    };
    let derived = observe(Vec::new(), gone);
    let note = derived["target_metrics"]["gone"]["note"].as_str().unwrap();
    assert!(note.contains("cannot connect"), "{note}");
}

fn spec_error(extra: &str) -> String {
    let text = format!(
        "name = \"x\"\nclients = [2]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n{extra}"
    );
    let spec = match SpecFile::parse(Path::new("bad.toml"), &text) {
        Ok(s) => s,
        Err(e) => return e.to_string(),
    };
    match Plan::new(spec, common::stairbench_bin()) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_instances_metrics_and_observe_entries_are_located() {
    let e = spec_error("instances = 0\n");
    assert!(
        e.starts_with("bad.toml:6:13: targets[0].instances: expected at least 1"),
        "{e}"
    );
    let e = spec_error("metrics = { url = \"http://192.0.2.7:{port}/m\" }\n");
    assert!(
        e.contains("targets[0].metrics") && e.contains("loopback only"),
        "{e}"
    );
    let e = spec_error("metrics = { file = \"{metrics}\", format = \"csv\" }\n");
    assert!(e.contains("expected \"json\" or \"hlog\""), "{e}");
    let e = spec_error("[[observe]]\nname = \"db\"\ncommand = \"postgres\"\npid_file = \"p\"\n");
    assert!(
        e.contains("observe[0]") && e.contains("exactly one of"),
        "{e}"
    );
    let e = spec_error("[[observe]]\nname = \"db\"\npid = 4\n");
    assert!(e.contains("unknown field `pid`"), "{e}");
}

#[test]
fn a_histogram_log_metrics_file_gives_the_windows_histogram() {
    use stairbench::record::load::{IntervalLine, IntervalSink};
    let dir = tempfile::tempdir().unwrap();
    let run = stairbench::record::rundir::RunDir::create(Some(dir.path()), "t").unwrap();
    let mut sink = run.step_sink("target").unwrap();
    let mut h = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    h.record_n(2_000, 40).unwrap();
    let line = |s: f64| IntervalLine {
        elapsed_s: s,
        ..IntervalLine::default()
    };
    sink.interval(&line(1.0), &h);
    let source = MetricsSource::File {
        path: dir.path().join("hist/target.hlog"),
        format: MetricsFormat::Hlog,
    };
    let before = source.snapshot().unwrap();
    let mut later = hdrhistogram::Histogram::<u64>::new(3).unwrap();
    later.record_n(70_000, 5).unwrap();
    sink.interval(&line(2.0), &later);
    sink.finish(true).unwrap();
    let d = difference(&before, &source.snapshot().unwrap());
    assert_eq!(d["count"], 5, "{d}");
    assert!(d["p50"].as_u64().unwrap() >= 69_000, "{d}");
}

#[test]
fn a_failed_histogram_subtraction_is_unavailable_not_the_whole_run() {
    use hdrhistogram::Histogram;
    // The start holds values the end lacks (the target restarted): no window histogram.
    let mut start = Histogram::<u64>::new(3).unwrap();
    start.record_n(1_000, 50).unwrap();
    let mut end = Histogram::<u64>::new(3).unwrap();
    end.record_n(9_000, 10).unwrap();
    let d = difference(&Snapshot::Hist(start), &Snapshot::Hist(end));
    let note = d["note"].as_str().unwrap();
    assert!(note.starts_with("unavailable: "), "{d}");
    assert!(note.contains("does not contain"), "{d}");
    assert!(d.get("count").is_none() && d.get("p99").is_none(), "{d}");
    // Rendered as the reason, never as figures.
    let mut step = StepResult::empty("s".into(), "t", "p", 1, 0);
    step.status = StepStatus::Ok;
    step.figures.target_metrics =
        [("server".to_string(), ForeignJson::from_value(d.clone()))].into();
    let md = stairbench::report::extras::sections(&[step]).to_markdown();
    assert!(
        md.contains("| s | — | server | unavailable: the histogram at the window"),
        "{md}"
    );
    assert!(!md.contains("count="), "{md}");
}

/// Split shares and the exact merge of instances' figures (were `fleet::instances`' unit tests).
mod merge_units {
    use hdrhistogram::Histogram;

    use stairbench::fleet::driver::{InstanceAddr, StepLoad, StepRequest};
    use stairbench::fleet::instances::{client_shares, merge_loads, split_cpus, sub_request};
    use stairbench::load::merge::merge_lines;
    use stairbench::record::load::{IntervalLine, LoadReport};

    #[test]
    fn cpus_split_in_equal_contiguous_shares() {
        assert_eq!(split_cpus(&[0, 1, 2, 3], 2), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(split_cpus(&[0, 1, 2], 2), vec![vec![0, 1], vec![2]]);
        assert_eq!(client_shares(&[5], 2), vec![vec![5], vec![5]]);
    }

    fn hist(values: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        for v in values {
            h.record(*v).unwrap();
        }
        h
    }

    #[test]
    fn lines_merge_with_their_histograms() {
        let a = IntervalLine {
            elapsed_s: 1.0,
            ops_per_s: 100.0,
            inflight: 2,
            ..IntervalLine::default()
        };
        let b = IntervalLine {
            elapsed_s: 1.01,
            ops_per_s: 300.0,
            inflight: 3,
            ..IntervalLine::default()
        };
        let (line, h) = merge_lines(&[(a, hist(&[1_000_000])), (b, hist(&[3_000_000; 3]))]);
        assert_eq!(line.ops_per_s, 400.0);
        assert_eq!(line.inflight, 5);
        assert_eq!(h.len(), 4);
        assert!(
            (line.mean_latency_ms - 2.5).abs() < 0.01,
            "{}",
            line.mean_latency_ms
        );
    }

    #[test]
    fn loads_sum_and_percentiles_come_from_the_merged_histogram() {
        let load = |rps: f64, n: u64, values: &[u64]| StepLoad {
            report: LoadReport {
                requests: n,
                sent: n + 3,
                resent: 2,
                errors: [("timeout".to_string(), 1)].into(),
                throughput_rps: rps,
                connections: 1,
                threads: 1,
                ..LoadReport::default()
            },
            hist_ns: Some(hist(values)),
            figures: Default::default(),
        };
        // One fast instance, one slow: the merged p99 is the slow one's, not an average.
        let fast = load(900.0, 99, &[1_000; 99]);
        let slow = load(10.0, 1, &[50_000_000]);
        let req = StepRequest {
            step_id: "s".into(),
            url: String::new(),
            port: 1,
            clients: 2,
            connections: 2,
            depth: 1,
            message: None,
            threads: 2,
            duration: std::time::Duration::from_secs(1),
            warmup: std::time::Duration::ZERO,
            timeout: std::time::Duration::from_secs(1),
            rate_rps: None,
            client_cpus: vec![0, 1],
            out_dir: std::path::PathBuf::new(),
            group_cpus: Vec::new(),
            group_targets: Vec::new(),
            instances: vec![
                InstanceAddr {
                    port: 1,
                    url: "msgr://127.0.0.1:1".into(),
                },
                InstanceAddr {
                    port: 2,
                    url: "msgr://127.0.0.1:2".into(),
                },
            ],
        };
        let subs: Vec<StepRequest> = (0..2).map(|k| sub_request(&req, k)).collect();
        assert_eq!(subs[1].port, 2);
        assert_eq!(subs[1].client_cpus, vec![1]);
        let merged = merge_loads(vec![Ok(fast), Ok(slow)], &subs).unwrap();
        assert_eq!(merged.report.throughput_rps, 910.0);
        assert_eq!(merged.report.requests, 100);
        assert_eq!((merged.report.sent, merged.report.resent), (106, 4));
        assert_eq!(merged.report.error_ratio, 2.0 / 102.0);
        assert_eq!(merged.hist_ns.as_ref().unwrap().len(), 100);
        assert!(merged.report.latency_us.max > 49_000.0);
        assert!(merged.report.latency_us.p50 < 2.0);
        let ports: Vec<Option<u16>> = merged.figures.per_instance.iter().map(|p| p.port).collect();
        assert_eq!(ports, [Some(1), Some(2)]);
        assert_eq!(merged.figures.per_instance[1].load.throughput_rps, 10.0);
    }
}

/// An endpoint that answers every connection with `answer`, then closes.
fn raw_endpoint(answer: Vec<u8>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let _ = stream.write_all(&answer);
        }
    });
    format!("http://127.0.0.1:{port}/metrics")
}

fn read_url(url: &str) -> Result<serde_json::Value, String> {
    match MetricsSource::Url(url.to_string())
        .snapshot()
        .map_err(|e| e.to_string())?
    {
        Snapshot::Json(v) => Ok(v),
        Snapshot::Hist(_) => panic!("a URL gives JSON"),
    }
}

#[test]
fn a_chunked_metrics_body_is_read_as_bytes_and_its_framing_checked() {
    // A chunk boundary inside "é" (two bytes), once read as a panic of the runner.
    let json = "{\"name\": \"caf\u{e9}\", \"requests\": 7}".as_bytes();
    let cut = json.iter().position(|&b| b == 0xc3).unwrap() + 1;
    let mut answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for part in [&json[..cut], &json[cut..]] {
        answer.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        answer.extend_from_slice(part);
        answer.extend_from_slice(b"\r\n");
    }
    answer.extend_from_slice(b"0\r\n\r\n");
    let v = read_url(&raw_endpoint(answer)).unwrap();
    assert_eq!(v["name"], "caf\u{e9}");
    assert_eq!(v["requests"], 7);
    // A chunk size that is not hexadecimal: an error naming the URL, not a shorter body.
    let bad = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
        8\r\n{\"a\": 1,\r\nnine\r\n \"b\": 2}\r\n0\r\n\r\n"
        .to_vec();
    let url = raw_endpoint(bad);
    let e = read_url(&url).unwrap_err();
    assert!(e.contains(&url) && e.contains("a bad chunk"), "{e}");
}

#[test]
fn a_metrics_body_over_16_mib_is_an_error() {
    // Valid JSON of 17 MiB, delimited by the close.
    let mut answer =
        b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"pad\": \"".to_vec();
    answer.resize(answer.len() + (17 << 20), b'x');
    answer.extend_from_slice(b"\", \"requests\": 1}");
    let url = raw_endpoint(answer);
    let e = read_url(&url).unwrap_err();
    assert!(e.contains(&url) && e.contains("over 16 MiB"), "{e}");
}
