//! The run analysis (report.md sections, analysis.json) and `stairbench compare`, on run
//! directories written here with known numbers: a staircase that follows a Universal
//! Scalability Law curve exactly, latencies that obey Little's law exactly (but one step), seed
//! 004's bimodal RTT histogram, a client-saturated step and a noisy one.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use stairbench::analyze::run::RunAnalysis;
use stairbench::record::load::{LatencyUs, LoadReport};
use stairbench::record::steps::{StepResult, StepStatus};
use stairbench::report::analyze_run;

const LAMBDA: f64 = 1000.0;
const SIGMA: f64 = 0.05;
const KAPPA: f64 = 0.001;
/// Connections per client × depth.
const INFLIGHT_PER_CLIENT: usize = 8;
const ALPHA_CLIENTS: [usize; 6] = [1, 2, 4, 8, 16, 32];
/// Spread of the repetitions around the curve; clients 16 get the noisy one.
const SPREAD: f64 = 0.01;
const NOISY_SPREAD: f64 = 0.06;
/// Clients 32 measure a latency 25% above what Little's law predicts.
const LITTLE_OFF: f64 = 1.25;

/// Seed 004's RTT histogram at 16 clients (µs, count).
const SEED_004_RTT: [(u64, u64); 15] = [
    (3, 4),
    (4, 19_086),
    (5, 313_681),
    (6, 376_919),
    (7, 296_414),
    (8, 231_283),
    (9, 173_872),
    (10, 207_723),
    (11, 431_567),
    (12, 1_147_000),
    (13, 2_499_061),
    (14, 3_176_682),
    (15, 1_894_466),
    (16, 414_100),
    (17, 21_742),
];

fn usl(n: f64) -> f64 {
    LAMBDA * n / (1.0 + SIGMA * (n - 1.0) + KAPPA * n * (n - 1.0))
}

/// Server CPU % at a client count: 9% per client, at most 100.
fn cpu_pct(clients: usize) -> f64 {
    (9.0 * clients as f64).min(100.0)
}

/// An ok closed-loop step with throughput `x` and the mean latency Little's law gives, times
/// `little_factor`.
fn step(target: &str, clients: usize, rep: usize, x: f64, little_factor: f64) -> StepResult {
    let id = format!("{target}.shared.c{clients}.r{rep}");
    let mut s = StepResult::empty(id, target, "shared", clients, rep);
    s.status = StepStatus::Ok;
    s.inflight = clients * INFLIGHT_PER_CLIENT;
    s.server_cpus = "0-1".into();
    s.client_cpus = "0-1".into();
    let mean_us = s.inflight as f64 / x * 1e6 * little_factor;
    s.load = Some(LoadReport {
        schema: stairbench::record::load::SCHEMA_VERSION,
        connections: clients * 2,
        depth: 4,
        requests: x as u64,
        duration_s: 1.0,
        throughput_rps: x,
        latency_us: LatencyUs {
            mean: mean_us,
            p50: mean_us * 0.9,
            p90: mean_us * 1.5,
            p95: mean_us * 1.8,
            p99: mean_us * 2.5,
            p999: mean_us * 4.0,
            max: mean_us * 6.0,
        },
        ..LoadReport::default()
    });
    // Two CPUs for one second: the process tree's CPU seconds give the utilisation.
    let cpu_s = cpu_pct(clients) / 100.0 * 2.0;
    let server =
        json!({"window_s": 1.0, "server": {"user_s": cpu_s * 0.75, "sys_s": cpu_s * 0.25}});
    s.server = serde_json::from_value(server).unwrap();
    s
}

/// Alpha follows the USL in 3 repetitions spread symmetrically around the curve (so their
/// mean is on it), scaled by `scale(clients)`; 64 clients saturate the generator. Beta has
/// three single steps.
fn fixture_steps(scale: &dyn Fn(usize) -> f64) -> Vec<StepResult> {
    let mut steps = Vec::new();
    for &c in &ALPHA_CLIENTS {
        let spread = if c == 16 { NOISY_SPREAD } else { SPREAD };
        let little = if c == 32 { LITTLE_OFF } else { 1.0 };
        for (rep, f) in [1.0 - spread, 1.0, 1.0 + spread].iter().enumerate() {
            steps.push(step("alpha", c, rep, usl(c as f64) * f * scale(c), little));
        }
    }
    let mut saturated = step("alpha", 64, 0, 100.0, 1.0);
    if let Some(l) = saturated.load.as_mut() {
        l.client_saturated = true;
    }
    steps.push(saturated);
    for c in [1, 2, 4] {
        steps.push(step("beta", c, 0, 500.0 * c as f64, 1.0));
    }
    let mut failed = StepResult::empty("beta.shared.c8.r0".into(), "beta", "shared", 8, 0);
    failed.status = StepStatus::Failed;
    failed.reason = Some("server died".into());
    steps.push(failed);
    steps
}

const SPEC: &str = r#"name = "fixture"
clients = [1, 2, 4, 8, 16, 32, 64]
repetitions = 3
connections_per_client = 2
depth = 4

[[targets]]
name = "alpha"
command = "true"

[[targets]]
name = "beta"
command = "true"

[[comparisons]]
a = "alpha/shared@8"
b = "alpha/shared@1"
name_a = "alpha at 8 clients"
name_b = "alpha at 1 client"

[[comparisons]]
name = "alpha vs beta"
candidate = "alpha"
baseline = "beta"

[[comparisons]]
a = "gamma"
b = "alpha"
"#;

fn write_run(dir: &Path, steps: &[StepResult], kernel: &str) {
    std::fs::create_dir_all(dir.join("hist")).unwrap();
    let lines: String = steps
        .iter()
        .map(|s| format!("{}\n", serde_json::to_string(&s.to_json()).unwrap()))
        .collect();
    std::fs::write(dir.join("steps.jsonl"), lines).unwrap();
    std::fs::write(dir.join("spec.toml"), SPEC).unwrap();
    let env = json!({"hostname": "lab", "kernel": kernel, "cpus": 2, "topology": {"summary": "1 socket"}});
    std::fs::write(dir.join("environment.json"), env.to_string()).unwrap();
    let mut bimodal = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    for (us, count) in SEED_004_RTT {
        bimodal.record_n(us * 1000 + 500, count).unwrap();
    }
    write_hlog(&dir.join("hist/alpha.shared.c8.r0.hlog"), &bimodal);
    let mut single = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    // One bell around 10 µs (sd 0.5 µs), every 50 ns.
    for i in 0..=80u64 {
        let ns = 8_000 + 50 * i;
        let z = (ns as f64 - 10_000.0) / 500.0;
        single
            .record_n(ns, (1000.0 * (-0.5 * z * z).exp()) as u64 + 1)
            .unwrap();
    }
    write_hlog(&dir.join("hist/alpha.shared.c1.r0.hlog"), &single);
}

fn write_hlog(path: &Path, h: &Histogram<u64>) {
    let mut out = Vec::new();
    // Two intervals, so the reader has to add them up.
    let halves = [(0.5, h.clone()), (1.0, h.clone())];
    stairbench::record::hlog::write_log(&mut out, SystemTime::now(), &halves).unwrap();
    std::fs::write(path, out).unwrap();
}

fn fixture(kernel: &str, scale: &dyn Fn(usize) -> f64) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(format!("run-{}", kernel.replace(' ', "-")));
    write_run(&dir, &fixture_steps(scale), kernel);
    (tmp, dir)
}

fn series<'a>(a: &'a RunAnalysis, target: &str) -> &'a stairbench::analyze::run::SeriesAnalysis {
    a.series.iter().find(|s| s.target == target).unwrap()
}

#[test]
fn usl_knee_and_busy_points_match_the_curve_they_were_made_from() {
    let (_tmp, dir) = fixture("Linux 6.1", &|_| 1.0);
    let a = analyze_run(&dir).unwrap();
    let alpha = series(&a, "alpha");
    // 6 client counts × 3 repetitions; the saturated 64-client step is out.
    assert_eq!(alpha.fitted_steps, 18);
    assert!(alpha.points.last().unwrap().client_saturated);
    let fit = alpha.usl.as_ref().expect("a USL fit");
    assert!((fit.lambda / LAMBDA - 1.0).abs() < 1e-4, "{fit:?}");
    assert!((fit.sigma - SIGMA).abs() < 1e-5, "{fit:?}");
    assert!((fit.kappa - KAPPA).abs() < 1e-6, "{fit:?}");
    let n_star = ((1.0 - SIGMA) / KAPPA).sqrt();
    assert!((fit.n_star.unwrap() - n_star).abs() < 0.05, "{fit:?}");
    assert!((fit.x_max.unwrap() - usl(n_star)).abs() / usl(n_star) < 1e-4);
    assert!(fit.r2 > 0.99);

    let knee = alpha.knee.as_ref().unwrap();
    let means: Vec<(usize, f64)> = ALPHA_CLIENTS.iter().map(|&c| (c, usl(c as f64))).collect();
    let max = means.iter().map(|m| m.1).fold(0.0, f64::max);
    let saturation = means.iter().find(|m| m.1 >= 0.95 * max).unwrap().0;
    assert!((knee.max_throughput - max).abs() < 1e-6 * max);
    assert_eq!(knee.saturation, saturation as f64);
    let busy = ALPHA_CLIENTS
        .iter()
        .take_while(|&&c| cpu_pct(c) < 70.0)
        .last()
        .unwrap();
    assert_eq!(knee.busy, Some(*busy as f64));
    let point = &alpha.points[0];
    assert!((point.server_cpu_pct.unwrap() - cpu_pct(1)).abs() < 1e-9);

    let beta = series(&a, "beta");
    assert!(beta.usl.is_none());
    assert!(beta
        .usl_note
        .as_ref()
        .unwrap()
        .contains("fewer than 4 points"));
}

#[test]
fn littles_law_modes_noise_and_comparisons() {
    let (_tmp, dir) = fixture("Linux 6.1", &|_| 1.0);
    let a = analyze_run(&dir).unwrap();
    let alpha = series(&a, "alpha");
    // Every step holds the law but the 32-client ones, 25% above.
    assert_eq!(alpha.little.len(), 19);
    for row in &alpha.little {
        let want = if row.clients == 32 { LITTLE_OFF } else { 1.0 };
        assert!((row.check.ratio - want).abs() < 1e-9, "{row:?}");
        assert_eq!(
            row.check.inflight,
            (row.clients * INFLIGHT_PER_CLIENT) as f64
        );
        assert_eq!(row.check.flag.is_some(), row.clients == 32, "{row:?}");
    }

    let bimodal = alpha.modes.iter().find(|m| m.clients == 8).unwrap();
    assert_eq!(bimodal.modes.len(), 2, "{bimodal:?}");
    let total: u64 = SEED_004_RTT.iter().map(|b| b.1).sum();
    let fast: u64 = SEED_004_RTT.iter().filter(|b| b.0 <= 9).map(|b| b.1).sum();
    let fast_share = fast as f64 / total as f64;
    assert!(
        (bimodal.modes[0].share - fast_share).abs() < 0.05,
        "{bimodal:?} vs {fast_share}"
    );
    assert!((5.0..8.0).contains(&bimodal.modes[0].centre), "{bimodal:?}");
    assert!(
        (13.0..16.0).contains(&bimodal.modes[1].centre),
        "{bimodal:?}"
    );
    let single = alpha.modes.iter().find(|m| m.clients == 1).unwrap();
    assert_eq!(single.modes.len(), 1);
    assert!((single.modes[0].centre - 10.0).abs() < 0.5, "{single:?}");

    let noisy: Vec<usize> = alpha
        .points
        .iter()
        .filter(|p| p.noisy)
        .map(|p| p.clients)
        .collect();
    assert_eq!(noisy, [16]);
    let p16 = alpha.points.iter().find(|p| p.clients == 16).unwrap();
    // Values x(1−d), x, x(1+d): sample stdev d·x, so CV = d.
    assert!((p16.throughput_rps.cv - NOISY_SPREAD).abs() < 1e-9);

    let first = &a.comparisons[0];
    let ratio = usl(8.0) / usl(1.0);
    // Both sides spread ±1% around the curve: the interval of the ratio is ratio·exp(±t·se).
    let [lo, hi] = first.relation.speedup_interval.unwrap();
    let se = (2.0 * 0.01f64.powi(2) / 3.0).sqrt();
    let t = stairbench::analyze::stats::t_quantile(0.975, 4.0);
    assert!((lo - ratio * (-t * se).exp()).abs() < 1e-9, "{lo}");
    assert!((hi - ratio * (t * se).exp()).abs() < 1e-9, "{hi}");
    assert_eq!(
        first.sentence,
        format!(
            "alpha at 8 clients is faster than alpha at 1 client: {ratio:.2}x [{lo:.2}, {hi:.2}] (a difference at 95%: Welch's t-test {})",
            stairbench::analyze::compare::show_p(first.relation.p_value.unwrap())
        )
    );
    let titled: Vec<&str> = a.comparisons[1..]
        .iter()
        .map(|c| c.sentence.as_str())
        .collect();
    assert_eq!(titled.len(), 3, "{titled:?}");
    let want = usl(2.0) / 1000.0;
    assert!(
        titled.contains(
            &format!(
                "alpha vs beta: alpha/shared at 2 clients: alpha against beta: {want:.2}x, untested: 3 and 1 repetitions, no spread to test, so no winner"
            )
            .as_str()
        ),
        "{titled:?}"
    );
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("comparisons[2]") && n.contains("gamma")),
        "{:?}",
        a.notes
    );
}

#[test]
fn report_writes_analysis_json_and_the_golden_markdown_sections() {
    let (_tmp, dir) = fixture("Linux 6.1", &|_| 1.0);
    let out = common::cli_cmd().arg("report").arg(&dir).output().unwrap();
    common::assert_success(&out);
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("analysis.json")).unwrap()).unwrap();
    assert_eq!(json["schema"], 1);
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/analysis.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let errors = crate::schema::validate(&schema, &json);
    assert!(
        errors.is_empty(),
        "analysis.json against its schema: {errors:#?}"
    );
    let mut broken = json.clone();
    broken["series"][0]["usl"]["sigma"] = json!(-1.0);
    broken["series"][0]["points"][0]["extra"] = json!(1);
    assert_eq!(crate::schema::validate(&schema, &broken).len(), 2);
    assert_eq!(json["series"][0]["target"], "alpha");
    assert!(json["series"][0]["usl"]["kappa"].as_f64().unwrap() > 0.0);
    assert_eq!(
        json["series"][0]["little"][0]["ratio"]
            .as_f64()
            .unwrap()
            .round(),
        1.0
    );

    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let start = report
        .find("## Scalability")
        .expect("the analysis sections");
    let sections = &report[start..];
    for heading in [
        "## Little's law",
        "## Latency modes",
        "## Noisy steps",
        "## Comparisons",
    ] {
        assert!(sections.contains(heading), "{heading} missing:\n{sections}");
    }
    let golden =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/compare/report_analysis.md");
    common::bless_or_compare(&golden, sections);
}

/// B is 10% slower than A at 4 clients (beyond noise), 7% slower at 16 clients (within the
/// noise of that step), identical elsewhere.
fn a_and_b() -> (tempfile::TempDir, tempfile::TempDir, PathBuf, PathBuf) {
    let (ta, a) = fixture("Linux 6.1", &|_| 1.0);
    let (tb, b) = fixture("Linux 6.8", &|c| match c {
        4 => 0.9,
        16 => 0.93,
        _ => 1.0,
    });
    // B also ran longer steps: a spec difference.
    let spec = SPEC.replacen("clients", "duration = \"2s\"\nclients", 1);
    std::fs::write(b.join("spec.toml"), spec).unwrap();
    (ta, tb, a, b)
}

#[test]
fn compare_lines_runs_up_with_ratios_and_noise_verdicts() {
    let (_ta, _tb, a, b) = a_and_b();
    let out = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .arg("--json")
        .output()
        .unwrap();
    common::assert_success(&out);
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    let env = cmp["environment_differences"].as_array().unwrap();
    assert_eq!(env.len(), 2, "{env:?}");
    assert_eq!(env[0]["key"], "kernel");
    assert_eq!(env[0]["values"], json!(["Linux 6.1", "Linux 6.8"]));
    assert_eq!(env[1]["key"], "spec.duration");
    assert_eq!(env[1]["values"], json!([null, "2s"]));
    let rel = |target: &str, clients: u64| {
        cmp["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["target"] == target && r["clients"] == clients)
            .unwrap()["against_first"][1]
            .clone()
    };
    let r4 = rel("alpha", 4);
    assert!((r4["speedup"].as_f64().unwrap() - 0.9).abs() < 1e-9);
    assert_eq!(r4["verdict"], "slower");
    let r16 = rel("alpha", 16);
    assert!((r16["speedup"].as_f64().unwrap() - 0.93).abs() < 1e-9);
    assert_eq!(r16["verdict"], "within noise");
    assert_eq!(rel("alpha", 8)["verdict"], "within noise");
    assert_eq!(rel("beta", 2)["verdict"], "no repetitions");

    let text = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.find("## Differences in environment").unwrap()
            < text.find("## throughput_rps").unwrap()
    );
    assert!(
        text.contains("| kernel | Linux 6.1 | Linux 6.8 |"),
        "{text}"
    );
    assert!(text.contains("| spec.duration | – | 2s |"), "{text}");
    // 10% slower in ±1% spread: t ≈ 12.9 on ~4 df, p ≈ 2e-4.
    let p4 = r4["p_value"].as_f64().unwrap();
    assert!((1e-4..1e-3).contains(&p4), "{p4}");
    assert!(
        text.contains(&format!("- alpha/shared at 4 clients: run-Linux-6.8 is slower than run-Linux-6.1: 0.90x [0.88, 0.92] (a difference at 95%: Welch's t-test p = {p4:.1e})")),
        "{text}"
    );
    // 7% slower in ±6% spread: t = 0.07 / √((0.06² + 0.0558²)/3) = 1.48 on ~4 df, p ≈ 0.21.
    let p16 = r16["p_value"].as_f64().unwrap();
    assert!((0.15..0.3).contains(&p16), "{p16}");
    // Within noise no winner is named: the sentence says "level" and gives the ratio.
    assert!(
        text.contains(
            "alpha/shared at 16 clients: run-Linux-6.8 and run-Linux-6.1 are level within noise: 0.93x ["
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "(no difference found at 95%: Welch's t-test p = {p16:.3})"
        )),
        "{text}"
    );
    assert!(
        !text.contains("16 clients: run-Linux-6.8 is slower"),
        "{text}"
    );
    // The table shows the same ratio and interval as the sentence.
    assert!(text.contains("| 0.90x [0.88, 0.92] | slower |"), "{text}");
    assert!(
        text.contains(
            "Welch's t-test on the repetitions' means at 95%; a difference below 2% is \"equal\""
        ),
        "{text}"
    );

    // 10% slower is a difference at any minimum effect below it, "equal" above it.
    let coarse = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--min-effect", "12", "--json"])
        .output()
        .unwrap();
    common::assert_success(&coarse);
    let coarse: Value = serde_json::from_slice(&coarse.stdout).unwrap();
    let r4 = coarse["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["target"] == "alpha" && r["clients"] == 4)
        .unwrap()["against_first"][1]
        .clone();
    assert_eq!(r4["verdict"], "equal");
    assert_eq!(r4["min_effect_pct"], 12.0);
    let bad = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--confidence", "100"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--confidence"));

    // On p99 the 10% lower throughput is a latency 1/0.9 higher: 0.90x as fast again.
    let p99 = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--metric", "p99", "--json"])
        .output()
        .unwrap();
    common::assert_success(&p99);
    let p99: Value = serde_json::from_slice(&p99.stdout).unwrap();
    let row = p99["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["target"] == "alpha" && r["clients"] == 4)
        .unwrap();
    assert!((row["against_first"][1]["speedup"].as_f64().unwrap() - 0.9).abs() < 1e-9);
}

#[test]
fn the_gate_fails_only_beyond_its_threshold_and_the_noise() {
    let (_ta, _tb, a, b) = a_and_b();
    let gate = |pct: &str| {
        common::cli_cmd()
            .arg("compare")
            .arg(&a)
            .arg(&b)
            .args(["--fail-if-slower", pct])
            .output()
            .unwrap()
    };
    let fail = gate("5");
    assert_eq!(fail.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&fail.stderr);
    assert!(
        stderr.contains("1 step(s) slower than run-Linux-6.1 by more than 5%"),
        "{stderr}"
    );
    assert!(
        stderr.contains("alpha/shared at 4 clients: 10.0% slower"),
        "{stderr}"
    );
    // 7% slower at 16 clients is within that step's noise: not a failure.
    assert!(!stderr.contains("16 clients"), "{stderr}");
    let pass = gate("12");
    assert_eq!(
        pass.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&pass.stderr)
    );
    assert!(String::from_utf8_lossy(&pass.stderr).contains("passed"));
    // A run against itself passes at 0%.
    let same = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&a)
        .args(["--fail-if-slower", "0"])
        .output()
        .unwrap();
    assert_eq!(same.status.code(), Some(0));
}

#[test]
fn compare_junit_has_a_case_per_step_and_fails_the_gated_one() {
    let (_ta, _tb, a, b) = a_and_b();
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("compare.xml");
    let out = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--fail-if-slower", "5", "--json", "--junit"])
        .arg(&junit)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (cases, failures) = crate::gates::junit_cases(&junit);
    // One case per row the later run shares with the first; the one gate failure failed.
    let shared = cmp["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| !r["against_first"][1].is_null())
        .count();
    assert_eq!((cases.len(), failures), (shared, 1));
    let failed: Vec<&(String, Option<String>)> = cases.iter().filter(|c| c.1.is_some()).collect();
    assert_eq!(failed[0].0, "alpha/shared at 4 clients");
    let message = failed[0].1.as_deref().unwrap();
    assert!(
        message.starts_with("10.0% slower than run-Linux-6.1"),
        "{message}"
    );
    assert!(
        message.contains("(--fail-if-slower 5): a difference at 95%: Welch's t-test p = "),
        "{message}"
    );
}

#[test]
fn compare_refuses_runs_with_nothing_in_common() {
    let (_ta, a) = fixture("Linux 6.1", &|_| 1.0);
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other");
    let steps: Vec<StepResult> = fixture_steps(&|_| 1.0)
        .into_iter()
        .map(|mut s| {
            s.target = format!("x-{}", s.target);
            s
        })
        .collect();
    write_run(&other, &steps, "Linux 6.1");
    let out = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no ok step of other matches"), "{stderr}");
    let missing = common::cli_cmd()
        .arg("compare")
        .arg(&a)
        .arg(tmp.path().join("nope"))
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope"));
}

/// A real short sweep of the built-in messenger server, twice: each run directory analysed,
/// then the two runs compared.
#[test]
fn analysis_and_comparison_of_real_sweeps() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("spec.toml");
    std::fs::write(
        &spec,
        r#"name = "real"
duration = "400ms"
warmup = "100ms"
clients = [1, 2, 3, 4]
depth = 2
placements = ["shared"]
[[targets]]
name = "reactor"
builtin = "msgr --arch reactor"
[[comparisons]]
a = "reactor@4"
b = "reactor@1"
"#,
    )
    .unwrap();
    let dirs = [tmp.path().join("run1"), tmp.path().join("run2")];
    for dir in &dirs {
        let out = common::cli_cmd()
            .arg("run")
            .arg(&spec)
            .arg("--out")
            .arg(dir)
            .output()
            .unwrap();
        common::assert_success(&out);
    }
    let a = analyze_run(&dirs[0]).unwrap();
    let reactor = series(&a, "reactor");
    assert_eq!(reactor.points.len(), 4, "{reactor:?}");
    // Four closed-loop levels fit the USL, unless a client-saturated level left too few.
    let saturated = reactor.points.iter().filter(|p| p.client_saturated).count();
    match (&reactor.usl, &reactor.usl_note) {
        // Short steps on a busy machine fit loosely: the fit is only checked to be one.
        (Some(fit), None) => assert!(
            fit.lambda.is_finite() && fit.lambda > 0.0 && fit.r2.is_finite() && fit.r2 <= 1.0,
            "{fit:?}"
        ),
        (None, Some(note)) => assert!(
            saturated > 0 && note.contains("fewer than"),
            "{note} ({saturated} client-saturated levels)"
        ),
        other => panic!("a fit and a note together, or neither: {other:?}"),
    }
    assert!(reactor.knee.is_some());
    assert_eq!(reactor.little.len(), 4);
    for row in &reactor.little {
        // Closed loop: X·R / L is 1 up to the edges of the window and the client's own time
        // between a reply and the next request, which grows when other jobs take its core.
        assert!((0.5..1.2).contains(&row.check.ratio), "{row:?}");
        assert_eq!(row.check.inflight, (row.clients * 2) as f64);
    }
    assert_eq!(reactor.modes.len(), 4, "one histogram per step");
    assert!(reactor.modes.iter().all(|m| !m.modes.is_empty()));
    assert_eq!(a.comparisons.len(), 1, "{:?}", a.notes);
    // A winner ("reactor@4 is faster than ...") only where the test found a difference.
    let c = &a.comparisons[0];
    let named = c.sentence.starts_with("reactor@4 is ");
    let level = c.sentence.starts_with("reactor@4 and ");
    let untested = c.sentence.starts_with("reactor@4 against ");
    match c.relation.verdict.as_str() {
        "faster" | "slower" | "equal" => assert!(named, "{}", c.sentence),
        "within noise" => assert!(level, "{}", c.sentence),
        _ => assert!(untested, "{}", c.sentence),
    }
    let report = std::fs::read_to_string(dirs[0].join("report.md")).unwrap();
    assert!(report.contains("## Little's law") && report.contains("## Comparisons"));
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dirs[0].join("analysis.json")).unwrap())
            .unwrap();
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/analysis.schema.json");
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let errors = crate::schema::validate(&schema, &json);
    assert!(errors.is_empty(), "{errors:#?}");

    let out = common::cli_cmd()
        .arg("compare")
        .args(&dirs)
        .arg("--json")
        .output()
        .unwrap();
    common::assert_success(&out);
    let cmp: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(cmp["rows"].as_array().unwrap().len(), 4);
    assert_eq!(cmp["sentences"].as_array().unwrap().len(), 4);
}

/// The h2 headings of a page or a markdown file, as text.
fn headings(text: &str, html: bool) -> Vec<String> {
    if !html {
        return text
            .lines()
            .filter_map(|l| l.strip_prefix("## "))
            .map(str::to_string)
            .collect();
    }
    text.split("<h2")
        .skip(1)
        .filter_map(|h| {
            h.split_once('>')
                .and_then(|(_, rest)| rest.split_once("</h2>"))
        })
        .map(|(title, _)| title.replace("&#39;", "'").replace("&amp;", "&"))
        .collect()
}

/// Alpha's USL staircase at 1–8 clients; at 16 clients the load generator saturated while
/// measuring the highest throughput of all, and at 32 clients the requests failed.
fn peak_steps() -> Vec<StepResult> {
    let mut steps: Vec<StepResult> = [1, 2, 4, 8]
        .iter()
        .map(|&c| step("alpha", c, 0, usl(c as f64), 1.0))
        .collect();
    let mut saturated = step("alpha", 16, 0, 50_000.0, 1.0);
    saturated.load.as_mut().unwrap().client_saturated = true;
    steps.push(saturated);
    let mut errors = step("alpha", 32, 0, 90_000.0, 1.0);
    errors.status = StepStatus::Errors;
    errors.reason = Some("error ratio 0.4".into());
    steps.push(errors);
    steps
}

#[test]
fn one_peak_in_the_last_lines_report_md_and_report_html() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    write_run(&dir, &peak_steps(), "Linux 6.1");
    let out = common::cli_cmd().arg("report").arg(&dir).output().unwrap();
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let headline = format!("{:.0} req/s at 8 clients", usl(8.0));
    let left_out =
        "left out: load generator saturated at 16 clients; too many errors at 32 clients";
    let line = format!("alpha / shared     peak {headline} ({left_out})");
    assert!(stdout.contains(&line), "{line}\nnot in\n{stdout}");

    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    for (name, text) in [("report.md", &md), ("report.html", &html)] {
        // The conclusions, the peak table and the scalability table agree.
        assert!(
            text.contains(&format!("alpha / shared peaks at {headline}")),
            "{name}"
        );
        assert!(text.contains(left_out), "{name}");
        assert!(
            text.contains(&format!("{:.0} (8)", usl(8.0))),
            "{name}: scalability"
        );
        assert!(
            !text.contains("50000 (16)") && !text.contains("peaks at 90000"),
            "{name}"
        );
    }
    assert!(
        md.contains("6 steps: 5 ok, 0 failed, 0 skipped. 1 step ended with too many errors."),
        "{md}"
    );
    // The error step stays in the results, shown as such.
    assert!(md.contains("| errors: error ratio 0.4 |"), "{md}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("analysis.json")).unwrap()).unwrap();
    let peak = &json["series"][0]["peak"];
    assert_eq!(peak["clients"], 8);
    assert_eq!(peak["excluded_client_saturated"], json!(["16"]));
    assert_eq!(peak["excluded_errors"], json!(["32"]));
}

#[test]
fn report_html_has_every_section_of_report_md() {
    let (_tmp, dir) = fixture("Linux 6.1", &|_| 1.0);
    let fixture_copy = tempfile::tempdir().unwrap();
    let report_fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report");
    for sub in ["hist", "intervals"] {
        std::fs::create_dir_all(fixture_copy.path().join(sub)).unwrap();
        for f in std::fs::read_dir(report_fixture.join(sub)).unwrap() {
            let f = f.unwrap().path();
            std::fs::copy(
                &f,
                fixture_copy.path().join(sub).join(f.file_name().unwrap()),
            )
            .unwrap();
        }
    }
    for f in ["steps.jsonl", "spec.toml", "environment.json", "notes.txt"] {
        std::fs::copy(report_fixture.join(f), fixture_copy.path().join(f)).unwrap();
    }
    for dir in [dir.as_path(), fixture_copy.path()] {
        common::assert_success(&common::cli_cmd().arg("report").arg(dir).output().unwrap());
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
        let md_h = headings(&md, false);
        let html_h = headings(&html, true);
        assert!(md_h.len() >= 6, "{md_h:?}");
        for h in &md_h {
            let h = h.replace("&lt;", "<").replace("&gt;", ">");
            assert!(
                html_h
                    .iter()
                    .any(|x| x.replace("&lt;", "<").replace("&gt;", ">") == h),
                "{h:?} of report.md missing from report.html's {html_h:?}"
            );
        }
        for own in [
            "Contents",
            "Conclusions",
            "Throughput",
            "Latency response curves",
        ] {
            assert!(html.contains(own), "{own}");
        }
    }
}

/// A histogram of `count` requests at `us` µs each, and a tail of 2% at `tail_us`.
fn reps_hist(us: u64, tail_us: u64) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    h.record_n(us * 1000, 9_800).unwrap();
    h.record_n(tail_us * 1000, 200).unwrap();
    h
}

#[test]
fn repetitions_merge_their_histograms_for_percentiles() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    // Three repetitions of one level whose tails differ: their p99s are 100, 400 and 1000 µs
    // apart from a common 50 µs body.
    let tails = [100u64, 400, 1_000];
    let mut steps = Vec::new();
    let mut merged = Histogram::<u64>::new_with_bounds(1, 1_000_000_000, 3).unwrap();
    for (rep, tail) in tails.iter().enumerate() {
        let mut s = step("alpha", 4, rep, 4000.0, 1.0);
        let h = reps_hist(50, *tail);
        s.load.as_mut().unwrap().latency_us.p99 = h.value_at_quantile(0.99) as f64 / 1e3;
        merged.add(&h).unwrap();
        steps.push(s);
    }
    write_run(&dir, &steps, "Linux 6.1");
    for (rep, tail) in tails.iter().enumerate() {
        write_hlog(
            &dir.join(format!("hist/alpha.shared.c4.r{rep}.hlog")),
            &reps_hist(50, *tail),
        );
    }
    common::assert_success(&common::cli_cmd().arg("report").arg(&dir).output().unwrap());
    let a = analyze_run(&dir).unwrap();
    let p = &series(&a, "alpha").points[0];
    let want_p99 = merged.value_at_quantile(0.99) as f64 / 1e3;
    let m = p.merged_latency_us.expect("merged percentiles");
    assert!((m.p99 - want_p99).abs() < 1e-9, "{m:?} vs {want_p99}");
    // The merge counts every repetition's window (the hlog holds each histogram twice).
    assert_eq!(m.count, 2 * 3 * 10_000);
    let mean_of_p99s = p.p99_latency_us.unwrap().mean;
    assert!(
        (mean_of_p99s - want_p99).abs() > 50.0,
        "the test must tell them apart"
    );
    let [lo, hi] = p.p99_reps_us.unwrap();
    assert!(
        (lo - 100.0).abs() < 1.0 && (hi - 1000.0).abs() < 2.0,
        "{lo} {hi}"
    );
    let us = stairbench::units::duration_us;
    let text = format!(
        "{} (reps {})",
        us(want_p99),
        stairbench::units::duration_range_us(lo, hi)
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains(&text), "{text} not in\n{md}");
    assert!(!md.contains(&format!("{} (reps", us(mean_of_p99s))), "{md}");
}
