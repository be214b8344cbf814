//! The analysis of series against independent references: a brute-force USL fit, the seeds'
//! own Little's law columns, histograms with known populations, and the command line.

use crate::common;

use std::path::PathBuf;

use stairbench::analyze::knee::{self, Shape, Step};
use stairbench::analyze::little::{self, LatencyUnit};
use stairbench::analyze::table::Table;
use stairbench::analyze::{analyze_table, modes, stats, usl, AnalyzeOptions};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/analyze")
        .join(name)
}

fn table(name: &str) -> Table {
    Table::parse(&std::fs::read_to_string(data(name)).unwrap()).unwrap()
}

/// Reference USL fit by brute force: a dense linear grid over (σ, κ), then the grid shrunk
/// around the best cell, with λ solved in closed form for each cell. Shares nothing with the
/// library's grid + Levenberg–Marquardt except the model formula, written out again here.
fn reference_fit(points: &[(f64, f64)], sigma_max: f64, kappa_max: f64) -> (f64, f64, f64, f64) {
    let sse_of = |s: f64, k: f64| {
        let g: Vec<f64> = points
            .iter()
            .map(|&(n, _)| n / (1.0 + s * (n - 1.0) + k * n * (n - 1.0)))
            .collect();
        let lambda = points.iter().zip(&g).map(|(p, g)| p.1 * g).sum::<f64>()
            / g.iter().map(|g| g * g).sum::<f64>();
        let sse = points
            .iter()
            .zip(&g)
            .map(|(p, g)| (p.1 - lambda * g).powi(2))
            .sum::<f64>();
        (sse, lambda)
    };
    let (mut s_lo, mut s_hi, mut k_lo, mut k_hi) = (0.0, sigma_max, 0.0, kappa_max);
    let mut best = (f64::INFINITY, 0.0, 0.0, 0.0);
    for _round in 0..8 {
        let steps = 200;
        for i in 0..=steps {
            for j in 0..=steps {
                let s = s_lo + (s_hi - s_lo) * i as f64 / steps as f64;
                let k = k_lo + (k_hi - k_lo) * j as f64 / steps as f64;
                let (sse, lambda) = sse_of(s, k);
                if sse < best.0 {
                    best = (sse, lambda, s, k);
                }
            }
        }
        let (ds, dk) = ((s_hi - s_lo) / 20.0, (k_hi - k_lo) / 20.0);
        (s_lo, s_hi) = ((best.2 - ds).max(0.0), best.2 + ds);
        (k_lo, k_hi) = ((best.3 - dk).max(0.0), best.3 + dk);
    }
    (best.1, best.2, best.3, best.0)
}

fn assert_matches_reference(points: &[(f64, f64)], sigma_max: f64, kappa_max: f64) -> usl::UslFit {
    let fit = usl::fit(points).unwrap();
    let (lambda, sigma, kappa, ref_sse) = reference_fit(points, sigma_max, kappa_max);
    let sse = usl::sse(points, fit.lambda, fit.sigma, fit.kappa);
    assert!(
        sse <= ref_sse * (1.0 + 1e-6),
        "fit {fit:?} sse {sse} > reference {ref_sse}"
    );
    assert!(
        (fit.lambda - lambda).abs() <= 1e-3 * lambda,
        "λ {} vs {lambda}",
        fit.lambda
    );
    assert!(
        (fit.sigma - sigma).abs() <= 1e-4,
        "σ {} vs {sigma}",
        fit.sigma
    );
    assert!(
        (fit.kappa - kappa).abs() <= 1e-3 * kappa.max(1e-5),
        "κ {} vs {kappa}",
        fit.kappa
    );
    fit
}

#[test]
fn usl_matches_brute_force_on_noisy_synthetic_data() {
    // Known λ = 800, σ = 0.03, κ = 0.0008, with a fixed ±3% wobble as measurement noise.
    let wobble = [1.02, 0.98, 1.01, 0.97, 1.03, 0.99, 1.0, 1.02, 0.98, 1.01];
    let points: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0, 48.0, 64.0]
        .iter()
        .zip(wobble)
        .map(|(&n, w)| {
            (
                n,
                w * 800.0 * n / (1.0 + 0.03 * (n - 1.0) + 0.0008 * n * (n - 1.0)),
            )
        })
        .collect();
    let fit = assert_matches_reference(&points, 0.2, 0.01);
    assert!(
        (fit.sigma - 0.03).abs() < 0.02 && (fit.kappa - 0.0008).abs() < 0.0004,
        "{fit:?}"
    );
    let r2_ref = {
        let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
        let sst: f64 = points.iter().map(|p| (p.1 - mean).powi(2)).sum();
        1.0 - usl::sse(&points, fit.lambda, fit.sigma, fit.kappa) / sst
    };
    assert!((fit.r2 - r2_ref).abs() < 1e-12);
    let n_star = fit.n_star.unwrap();
    assert!((n_star - ((1.0 - fit.sigma) / fit.kappa).sqrt()).abs() < 1e-9);
    assert!((fit.x_max.unwrap() - fit.throughput(n_star)).abs() < 1e-9);
}

#[test]
fn usl_matches_brute_force_across_regimes() {
    struct Case {
        lambda: f64,
        sigma: f64,
        kappa: f64,
        loads: &'static [f64],
        /// Ranges of the reference grid.
        sigma_max: f64,
        kappa_max: f64,
    }
    let cases = [
        Case {
            lambda: 5.0,
            sigma: 0.3,
            kappa: 0.0,
            loads: &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0],
            sigma_max: 1.0,
            kappa_max: 0.05,
        },
        Case {
            lambda: 1e6,
            sigma: 0.0,
            kappa: 0.01,
            loads: &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
            sigma_max: 0.2,
            kappa_max: 0.05,
        },
        Case {
            lambda: 100.0,
            sigma: 0.001,
            kappa: 0.00001,
            loads: &[1.0, 4.0, 16.0, 64.0, 128.0, 256.0],
            sigma_max: 0.05,
            kappa_max: 0.0005,
        },
        Case {
            lambda: 40.0,
            sigma: 0.05,
            kappa: 0.002,
            loads: &[2.0, 4.0, 8.0, 16.0],
            sigma_max: 0.5,
            kappa_max: 0.02,
        },
    ];
    let wobble = [1.01, 0.99, 1.02, 0.98, 1.0, 1.01];
    for c in cases {
        let points: Vec<(f64, f64)> = c
            .loads
            .iter()
            .zip(wobble)
            .map(|(&n, w)| {
                let d = 1.0 + c.sigma * (n - 1.0) + c.kappa * n * (n - 1.0);
                (n, w * c.lambda * n / d)
            })
            .collect();
        assert_matches_reference(&points, c.sigma_max, c.kappa_max);
    }
}

fn crimson_points(group: &str) -> Vec<(f64, f64)> {
    let t = table("crimson.csv");
    let (n, x, g) = (
        t.numbers("clients").unwrap(),
        t.numbers("IOPS").unwrap(),
        t.text("balance").unwrap(),
    );
    (0..n.len())
        .filter(|&i| g[i] == group)
        .map(|i| (n[i], x[i]))
        .collect()
}

#[test]
fn usl_matches_brute_force_on_seed_000_crimson() {
    for group in ["balanced", "separated"] {
        let fit = assert_matches_reference(&crimson_points(group), 0.5, 0.01);
        assert!(fit.r2 > 0.98, "{group}: {fit:?}");
        assert_eq!(fit.dominant, "coherency", "{group}: {fit:?}");
    }
}

#[test]
fn usl_says_why_with_too_few_points() {
    let err = usl::fit(&crimson_points("separated")[..3]).unwrap_err();
    assert!(err.to_string().contains("at least 4 points"), "{err}");
    assert!(err.to_string().contains("has 3"), "{err}");
}

#[test]
fn short_series_reports_why_it_has_no_fit() {
    let t = Table::parse("clients,x,p\n1,10,a\n2,19,a\n4,30,a\n1,5,b\n2,9,b\n4,16,b\n8,25,b\n")
        .unwrap();
    let options = AnalyzeOptions {
        group: Some("p".into()),
        ..AnalyzeOptions::new("clients", "x")
    };
    let analysis = analyze_table(&t, &options).unwrap();
    assert!(analysis.groups[0].usl.is_none());
    assert!(analysis.groups[0]
        .usl_error
        .as_deref()
        .unwrap()
        .contains("at least 4 points"));
    assert!(analysis.groups[1].usl.is_some());
    let json = serde_json::to_value(&analysis).unwrap();
    assert!(json["groups"][0]["usl"].is_null());
    assert!(json["groups"][1].get("usl_error").is_none());
}

fn crimson_options() -> AnalyzeOptions {
    AnalyzeOptions {
        throughput_scale: 1000.0,
        latency: Some("latency".into()),
        latency_unit: LatencyUnit::Ms,
        group: Some("balance".into()),
        inflight_per_x: Some(1024.0),
        ..AnalyzeOptions::new("clients", "IOPS")
    }
}

#[test]
fn crimson_table_per_placement() {
    let t = table("crimson.csv");
    let analysis = analyze_table(&t, &crimson_options()).unwrap();
    let names: Vec<_> = analysis
        .groups
        .iter()
        .map(|g| g.group.clone().unwrap())
        .collect();
    assert_eq!(names, ["balanced", "separated"]);
    let separated = &analysis.groups[1];
    assert_eq!(separated.points, 8);
    // Seed 000: "the maximum in linear progression for Crimson is reached at 20 clients".
    assert_eq!(separated.knee.saturation, 20.0);
    assert_eq!(separated.knee.max_throughput_at, 28.0);
    // Seed 000 calls 16 clients the sweet spot of the separated placement.
    assert_eq!(separated.knee.throughput_knee, Some(16.0));
    for group in &analysis.groups {
        let fit = group.usl.as_ref().unwrap();
        let (lambda, ..) =
            reference_fit(&crimson_points(group.group.as_deref().unwrap()), 0.5, 0.01);
        assert!((fit.lambda - lambda).abs() < 1e-3 * lambda);
    }
}

#[test]
fn crimson_little_ratios_from_the_rows() {
    let t = table("crimson.csv");
    let analysis = analyze_table(&t, &crimson_options()).unwrap();
    let (clients, kiops, latency_ms, groups) = (
        t.numbers("clients").unwrap(),
        t.numbers("IOPS").unwrap(),
        t.numbers("latency").unwrap(),
        t.text("balance").unwrap(),
    );
    for group in &analysis.groups {
        let name = group.group.as_deref().unwrap();
        assert_eq!(group.little.len(), group.points);
        for step in &group.little {
            let i = (0..clients.len())
                .find(|&i| groups[i] == name && clients[i] == step.x)
                .unwrap();
            // In flight: clients × 2 connections × depth 512; X in messages/s, R in seconds.
            let inflight = clients[i] * 2.0 * 512.0;
            let ratio = kiops[i] * 1000.0 * (latency_ms[i] / 1000.0) / inflight;
            assert_eq!(step.inflight, inflight);
            assert!(
                (step.ratio - ratio).abs() < 1e-9,
                "{name} {}: {} vs {ratio}",
                step.x,
                step.ratio
            );
            assert!((step.measured_latency - latency_ms[i]).abs() < 1e-12);
            assert_eq!(step.flag.is_some(), (ratio - 1.0).abs() > 0.1);
        }
    }
    // Every balanced step holds within 10%; the separated low-load steps do not.
    assert!(analysis.groups[0].little.iter().all(|s| s.flag.is_none()));
    assert!(analysis.groups[1].little[0].flag.is_some());
}

#[test]
fn little_on_seed_004_tables() {
    for file in ["seed004_little.csv", "seed004_little_numa.csv"] {
        let t = table(file);
        let clients = t.numbers("clients").unwrap();
        let inflight = t.numbers("inflight").unwrap();
        let lambda = t.numbers("lambda_remote_m_per_s").unwrap();
        let predicted = t.numbers("rtt_predicted_us").unwrap();
        let measured = t.numbers("rtt_measured_us").unwrap();
        for i in 0..clients.len() {
            let step = little::check(
                clients[i],
                inflight[i],
                lambda[i] * 1e6,
                measured[i],
                LatencyUnit::Us,
            );
            // The seed's own prediction, printed to 2 decimals.
            assert!(
                (step.predicted_latency - predicted[i]).abs() < 0.006,
                "{file} row {i}: {step:?}"
            );
            let seed_ratio = measured[i] / predicted[i];
            assert!((step.ratio - seed_ratio).abs() < 0.002, "{file} row {i}");
            if (seed_ratio - 1.0).abs() > 0.105 {
                assert!(step.flag.is_some(), "{file} row {i}");
            }
            if (seed_ratio - 1.0).abs() < 0.095 {
                assert!(step.flag.is_none(), "{file} row {i}");
            }
        }
    }
    // Through the table entry point, with the in-flight count as a column.
    let options = AnalyzeOptions {
        throughput_scale: 1e6,
        latency: Some("rtt_measured_us".into()),
        latency_unit: LatencyUnit::Us,
        inflight: Some("inflight".into()),
        ..AnalyzeOptions::new("clients", "lambda_remote_m_per_s")
    };
    let analysis = analyze_table(&table("seed004_little.csv"), &options).unwrap();
    let little = &analysis.groups[0].little;
    assert_eq!(
        little.iter().map(|s| s.inflight).collect::<Vec<_>>(),
        [0.9, 3.8, 7.6, 15.6]
    );
    assert!(little[0].flag.is_some() && little[1..].iter().all(|s| s.flag.is_none()));
}

#[test]
fn knees_on_seed_004_rtt_scaling() {
    let t = table("seed004_rtt_scaling.csv");
    let clients = t.numbers("clients").unwrap();
    let remote = t.numbers("remote_per_rank_m").unwrap();
    let mean_rtt = t.numbers("rtt_mean_us").unwrap();
    let steps: Vec<Step> = (0..clients.len())
        .map(|i| Step {
            load: clients[i],
            throughput: remote[i],
            latency: Some(mean_rtt[i]),
            server_cpu_pct: None,
        })
        .collect();
    let summary = knee::summarise(&steps).unwrap();
    // Seed 004: "remote throughput saturates at ~1.05M/s per rank (8→16: 1.04M→1.05M)", and
    // the mean RTT dips from 1 to 2 clients before it climbs.
    assert_eq!(summary.throughput_knee, Some(8.0));
    assert_eq!(summary.saturation, 8.0);
    assert_eq!(summary.latency_knee, Some(8.0));
    assert_eq!(summary.busy, None);
}

#[test]
fn kneedle_finds_known_knee_of_smooth_curve() {
    // X = 1 − e^(−n/5) has curvature concentrated near small n; its Kneedle knee (max of
    // y_n − x_n) is where the slope of the normalised curve is 1, computed here analytically.
    let points: Vec<(f64, f64)> = (0..=40)
        .map(|n| (n as f64, 1.0 - (-(n as f64) / 5.0).exp()))
        .collect();
    let i = knee::kneedle(&points, Shape::ConcaveIncreasing).unwrap();
    let y_range = 1.0 - (-8.0f64).exp();
    // d/dn of y/y_range equals 1/40 at n = 5 ln(40 / (5 y_range)).
    let expected = 5.0 * (40.0 / (5.0 * y_range)).ln();
    assert!(
        (points[i].0 - expected).abs() <= 1.0,
        "knee {} vs {expected}",
        points[i].0
    );
}

fn histogram(name: &str) -> Vec<(f64, u64)> {
    let t = table(name);
    let values = t.numbers("us").unwrap();
    let counts = t.numbers("count").unwrap();
    values
        .into_iter()
        .zip(counts)
        .map(|(v, c)| (v, c as u64))
        .collect()
}

#[test]
fn seed_004_bimodal_histogram() {
    let found = modes::detect(&histogram("seed004_rtt_histogram_16clients.csv"));
    assert_eq!(found.len(), 2, "{found:?}");
    let (fast, slow) = (&found[0], &found[1]);
    // Seed 004: "~18% fast (4–8 µs) ... ~82% slow (11–16 µs)", peaks at 6 and 14 µs.
    assert!((0.15..=0.21).contains(&fast.share), "{fast:?}");
    assert!((fast.share + slow.share - 1.0).abs() < 1e-9);
    assert_eq!(fast.centre, 6.0);
    assert_eq!(slow.centre, 14.0);
    assert!(
        fast.low <= 4.0 && (8.0..=10.0).contains(&fast.high),
        "{fast:?}"
    );
    assert!(slow.low >= 9.0 && slow.high >= 16.0, "{slow:?}");
}

#[test]
fn one_population_reports_one_mode() {
    let slow_only: Vec<(f64, u64)> = histogram("seed004_rtt_histogram_16clients.csv")
        .into_iter()
        .filter(|b| b.0 >= 11.0)
        .collect();
    let found = modes::detect(&slow_only);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].centre, 14.0);
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1_000_000, 3).unwrap();
    for (v, c) in [
        (90, 100),
        (95, 400),
        (100, 1000),
        (105, 400),
        (110, 100),
        (130, 30),
    ] {
        h.record_n(v, c).unwrap();
    }
    assert_eq!(modes::from_histogram(&h).len(), 1);
}

/// Deterministic log-normal samples (xorshift + Box–Muller), in nanoseconds.
fn log_normal_ns(seed: u64, median_ns: f64, sd: f64, count: usize) -> Vec<u64> {
    let mut state = seed;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    (0..count)
        .map(|_| {
            let z = (-2.0 * uniform().ln()).sqrt() * (2.0 * std::f64::consts::PI * uniform()).cos();
            (median_ns * (sd * z).exp()) as u64
        })
        .collect()
}

fn recorded(samples: &[u64]) -> hdrhistogram::Histogram<u64> {
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    for &v in samples {
        h.record(v.max(1)).unwrap();
    }
    h
}

#[test]
fn recorded_histograms_of_known_populations() {
    let skewed = recorded(&log_normal_ns(7, 50_000.0, 0.5, 200_000));
    assert_eq!(
        modes::from_histogram(&skewed).len(),
        1,
        "a long tail is not a second population"
    );
    let mut samples = log_normal_ns(11, 20_000.0, 0.1, 60_000);
    samples.extend(log_normal_ns(13, 60_000.0, 0.1, 140_000));
    let found = modes::from_histogram(&recorded(&samples));
    assert_eq!(found.len(), 2, "{found:?}");
    assert!((found[0].share - 0.3).abs() < 0.02, "{found:?}");
    assert!((found[0].centre - 20_000.0).abs() < 2_000.0, "{found:?}");
    assert!((found[1].centre - 60_000.0).abs() < 4_000.0, "{found:?}");
}

#[test]
fn comparison_sentences_and_noise() {
    let alone = [1010.0, 990.0, 1005.0];
    let visitor = [610.0, 611.0, 612.0];
    let ratio = stats::summarize(&alone).unwrap().mean / stats::summarize(&visitor).unwrap().mean;
    assert_eq!(
        stats::verdict(&alone, &visitor, Default::default()),
        stats::Verdict::Higher
    );
    assert_eq!(
        stats::sentence("alone at 1 thread", "one visitor at 1 thread", ratio),
        "alone at 1 thread is faster than one visitor at 1 thread: 1.64x"
    );
    assert_eq!(
        stats::verdict(&alone, &[1000.0, 1012.0, 995.0], Default::default()),
        stats::Verdict::WithinNoise
    );
}

#[test]
fn binary_prints_json_of_the_documented_shape() {
    let file = data("crimson.csv");
    let out = common::cli(&[
        "analyze",
        file.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "IOPS",
        "--throughput-scale",
        "1000",
        "--latency",
        "latency",
        "--latency-unit",
        "ms",
        "--group",
        "balance",
        "--inflight-per-x",
        "1024",
        "--json",
    ]);
    common::assert_success(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups = json["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2);
    let expected = analyze_table(&table("crimson.csv"), &crimson_options()).unwrap();
    for (g, want) in groups.iter().zip(&expected.groups) {
        assert_eq!(g["group"], want.group.as_deref().unwrap());
        for key in ["lambda", "sigma", "kappa", "n_star", "x_max", "r2"] {
            assert!(g["usl"][key].is_number(), "usl.{key} in {g}");
        }
        let lambda = want.usl.as_ref().unwrap().lambda;
        assert!((g["usl"]["lambda"].as_f64().unwrap() - lambda).abs() < 1e-9 * lambda);
        assert!(g["knee"].is_object());
        let little = g["little"].as_array().unwrap();
        assert_eq!(little.len(), want.little.len());
        for (step, want) in little.iter().zip(&want.little) {
            for key in [
                "x",
                "inflight",
                "predicted_latency",
                "measured_latency",
                "ratio",
            ] {
                assert!(step[key].is_number(), "little.{key} in {step}");
            }
            assert!((step["ratio"].as_f64().unwrap() - want.ratio).abs() < 1e-12);
        }
    }
}

#[test]
fn binary_prints_readable_tables() {
    let file = data("crimson.csv");
    let out = common::cli(&[
        "analyze",
        file.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "IOPS",
        "--group",
        "balance",
    ]);
    common::assert_success(&out);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("== balanced (10 points) ==") && text.contains("== separated (8 points) ==")
    );
    assert!(
        text.contains("USL: λ = ") && text.contains("dominant: coherency"),
        "{text}"
    );
    assert!(!text.contains("Little's law"), "no latency given: {text}");
}

#[test]
fn binary_names_unknown_column_and_exits_2() {
    let file = data("crimson.csv");
    let out = common::cli(&[
        "analyze",
        file.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "iops",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no column named \"iops\""), "{err}");
    assert!(err.contains("entry, IOPS, balance, clients"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "clients,x\n1,2\n2\n").unwrap();
    let out = common::cli(&[
        "analyze",
        bad.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 3 has 1 fields"));
}

/// A run directory's steps.csv as `stairbench report` writes it, from the checked-in run
/// (two placements of one target and a second target whose last step failed).
fn own_steps_csv(dir: &std::path::Path) -> PathBuf {
    let run = dir.join("run");
    common::copy_dir(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/report"),
        &run,
    );
    let out = common::cli(&["report", run.to_str().unwrap()]);
    common::assert_success(&out);
    run.join("steps.csv")
}

#[test]
fn binary_reads_its_own_steps_csv_grouped_by_two_columns() {
    let dir = tempfile::tempdir().unwrap();
    let csv = own_steps_csv(dir.path());
    let text = std::fs::read_to_string(&csv).unwrap();
    assert!(
        text.contains(",failed,,,"),
        "a failed step leaves empty cells: {text}"
    );
    let out = common::cli(&[
        "analyze",
        csv.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "throughput_rps",
        "--latency",
        "mean_us",
        "--latency-unit",
        "us",
        "--inflight",
        "inflight",
        "--group",
        "target,placement",
        "--json",
    ]);
    common::assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("left out 1 row(s) whose status is not ok (1 failed)"),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups: Vec<(String, u64)> = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            let name = g["group"].as_str().unwrap().to_string();
            (name, g["points"].as_u64().unwrap())
        })
        .collect();
    assert_eq!(
        groups,
        [
            ("target=msgr-reactor,placement=separated".to_string(), 6),
            ("target=msgr-reactor,placement=shared".to_string(), 5),
            (
                "target=<script>alert(\"x\")</script>,placement=shared".to_string(),
                2
            ),
        ]
    );
    // The steps' own figures reach the analysis: the separated series' peak is its c16 step's.
    let steps = std::fs::read_to_string(csv.with_file_name("steps.jsonl")).unwrap();
    let peak = steps
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()) // the last is torn
        .find(|s| s["id"] == "msgr-reactor.separated.c16.r0")
        .and_then(|s| s["throughput_rps"].as_f64())
        .unwrap();
    let knee = &json["groups"][0]["knee"];
    assert!(
        (knee["max_throughput"].as_f64().unwrap() - peak).abs() < 1e-3 * peak,
        "{knee}"
    );
}

#[test]
fn binary_leaves_out_rows_with_empty_cells_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.csv");
    std::fs::write(
        &file,
        "clients,tput,lat\n1,10,1\n2,19,\n4,35,1.2\n8,60,1.5\n16,70,2.5\n32,,\n",
    )
    .unwrap();
    let out = common::cli(&[
        "analyze",
        file.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "tput",
        "--latency",
        "lat",
        "--inflight-per-x",
        "1",
    ]);
    common::assert_success(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("left out 2 row(s) with an empty cell (a missing figure) in lat, tput"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("== all rows (4 points) =="), "{text}");
}

/// A table from elsewhere: a quoted group name spanning two lines, with doubled quotes and a
/// comma in it, read by the RFC 4180 reader into one group of four points.
#[test]
fn binary_reads_quoted_fields_with_newlines_and_doubled_quotes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quoted.csv");
    let name = "build \"fast\", run 2\r\nsecond line";
    let mut text = String::from("clients,build,rps\r\n");
    for (c, x) in [(1, 100.0), (2, 190.0), (4, 340.0), (8, 520.0)] {
        text.push_str(&format!(
            "{c},\"build \"\"fast\"\", run 2\r\nsecond line\",{x}\r\n"
        ));
        text.push_str(&format!("{c},plain,{}\r\n", x / 2.0));
    }
    std::fs::write(&file, text).unwrap();
    let out = common::cli(&[
        "analyze",
        file.to_str().unwrap(),
        "--x",
        "clients",
        "--throughput",
        "rps",
        "--group",
        "build",
        "--json",
    ]);
    common::assert_success(&out);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let groups: Vec<&str> = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["group"].as_str().unwrap())
        .collect();
    assert_eq!(groups.len(), 2, "{json}");
    assert!(
        groups.contains(&name) && groups.contains(&"plain"),
        "{groups:?}"
    );
    let quoted = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["group"] == name)
        .unwrap();
    let lambda = quoted["usl"]["lambda"].as_f64().unwrap();
    assert!((90.0..110.0).contains(&lambda), "{quoted}");
}
