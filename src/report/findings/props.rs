//! A property test of the conclusions: over generated series (rising, flat, retrograde, noisy,
//! short; one or three repetitions), the diagnosis and the Conclusions never say two things
//! that contradict each other. Each forbidden pair is one check below, named by the sentences
//! it keeps apart.

use super::series_conclusion;
use crate::analyze::run::peak::level_within_noise;
use crate::analyze::run::tests::ok_step;
use crate::analyze::run::{analyze_steps, SeriesAnalysis};
use crate::analyze::{diagnosis::Diagnosis, knee::FALL_FRACTION};
use crate::record::steps::StepResult;

/// A small seeded generator (xorshift64*): the same seeds give the same series on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform in [-1, 1).
    fn sym(&mut self) -> f64 {
        2.0 * self.unit() - 1.0
    }
}

#[derive(Debug, Clone, Copy)]
enum Shape {
    Rising,
    Flat,
    Retrograde,
    Noisy,
}

/// One generated series: its shape's mean curve, noise per level and per repetition.
fn series(rng: &mut Rng, seed: u64) -> (Shape, Vec<StepResult>) {
    let shape =
        [Shape::Rising, Shape::Flat, Shape::Retrograde, Shape::Noisy][(rng.next() % 4) as usize];
    let all = [1usize, 2, 4, 8, 16, 32, 64];
    // Short series (1 to 3 levels) one time in five.
    let levels = if rng.next().is_multiple_of(5) {
        1 + (rng.next() % 3) as usize
    } else {
        4 + (rng.next() % 4) as usize
    };
    let reps = if rng.next().is_multiple_of(2) { 1 } else { 3 };
    let lambda = 1000.0 + 100_000.0 * rng.unit();
    let sigma = 0.3 * rng.unit();
    let kappa = 0.002 + 0.05 * rng.unit();
    let level_noise = match shape {
        Shape::Noisy => 0.08,
        Shape::Flat => 0.005,
        _ => 0.01,
    };
    let mut steps = Vec::new();
    for &n in &all[..levels] {
        let x = n as f64;
        let mean = match shape {
            Shape::Rising => lambda * x / (1.0 + sigma * (x - 1.0)),
            Shape::Flat => lambda,
            Shape::Retrograde | Shape::Noisy => {
                lambda * x / (1.0 + sigma * (x - 1.0) + kappa * x * (x - 1.0))
            }
        } * (1.0 + level_noise * rng.sym());
        for rep in 0..reps {
            let x_rps = mean * (1.0 + 0.01 * rng.sym());
            let mut s = ok_step(n, x_rps, 1e6 * n as f64 / x_rps);
            s.rep = rep;
            s.id = format!("s{seed}.c{n}.r{rep}");
            steps.push(s);
        }
    }
    (shape, steps)
}

/// The clients N of "stops scaling at N clients", if the sentence says it.
fn stops_at(sentence: &str) -> Option<usize> {
    let rest = sentence.split("stops scaling at ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// Every forbidden pair of sentences, checked on one series; the message names the pair.
fn contradictions(s: &SeriesAnalysis, d: &Diagnosis, conclusion: &str) -> Vec<String> {
    let mut found = Vec::new();
    let levels: Vec<(usize, f64)> = s
        .points
        .iter()
        .filter(|p| !p.client_saturated)
        .map(|p| (p.clients, p.throughput_rps.mean))
        .collect();
    let Some(peak) = s.peak.throughput_rps else {
        return found;
    };
    let peak_at = s.peak.clients.unwrap_or(0);
    let falls = levels
        .iter()
        .any(|&(n, x)| n > peak_at && x < FALL_FRACTION * peak);
    let text = &d.sentence;
    if text.contains("no knee") && falls {
        found.push("\"no knee\" with a fall past the peak".into());
    }
    if falls && d.knee_clients.is_none() {
        found.push("a fall past the peak without a knee (held at low confidence)".into());
    }
    if let (Some(k), Some(p)) = (d.knee_clients, s.peak.clients) {
        if k > p {
            found.push(format!("the knee ({k}) past the peak ({p})"));
        }
    }
    if let Some(n) = stops_at(text) {
        let at_n = levels.iter().find(|l| l.0 == n).map_or(f64::NAN, |l| l.1);
        if levels
            .iter()
            .any(|&(m, x)| m > n && x > at_n && !level_within_noise(x, at_n, peak))
        {
            found.push(format!(
                "\"stops scaling at {n}\" with a higher level beyond the noise"
            ));
        }
        let flat = levels
            .iter()
            .filter(|&&(m, x)| m >= n && level_within_noise(x, peak, peak))
            .count();
        if flat >= 2 && !text.contains("within noise") {
            found.push(format!(
                "\"stops scaling at {n}\" without its flat range of {flat} levels named"
            ));
        }
    }
    if s.peak.within_noise.len() >= 2 && !conclusion.contains("within noise") {
        found.push("\"peaks at\" without the levels within noise of it".into());
    }
    // A caveat, or a term that bites only past twice the largest level.
    let not_a_finding = conclusion.contains("USL fit is not a finding")
        || conclusion.contains("an extrapolation, not a finding");
    if not_a_finding && text.contains("USL") {
        found.push("a fit called \"not a finding\" quoted as a limit's evidence".into());
    }
    if text.contains("stops scaling at") && text.contains("bends") {
        found.push("\"stops scaling at\" and \"bends\" at once".into());
    }
    found
}

#[test]
fn no_pair_of_conclusions_contradicts_over_generated_series() {
    let mut seen = std::collections::BTreeMap::<&str, usize>::new();
    let mut failures = Vec::new();
    for seed in 1..=600u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let (shape, steps) = series(&mut rng, seed);
        let a = analyze_steps(&steps);
        let (s, d) = (&a.series[0], &a.diagnosis[0]);
        let conclusion = series_conclusion(s);
        for (key, needle) in [
            ("no knee", "no knee"),
            ("stops scaling", "stops scaling at"),
            ("flat range named", "level within noise"),
            ("bends", "bends "),
            ("falls", "throughput falls from"),
            ("USL quoted", "USL κ"),
        ] {
            if d.sentence.contains(needle) {
                *seen.entry(key).or_default() += 1;
            }
        }
        if conclusion.contains("not a finding") {
            *seen.entry("fit not a finding").or_default() += 1;
        }
        for c in contradictions(s, d, &conclusion) {
            failures.push(format!(
                "seed {seed} ({shape:?}): {c}\n  {}\n  {conclusion}",
                d.sentence
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The generator reaches every kind of sentence the checks are about.
    for key in [
        "no knee",
        "stops scaling",
        "flat range named",
        "bends",
        "falls",
        "USL quoted",
        "fit not a finding",
    ] {
        assert!(seen.get(key).copied().unwrap_or(0) > 0, "{key}: {seen:?}");
    }
}

#[test]
fn the_checks_catch_the_sentences_they_forbid() {
    // The cases as the old code worded them: each is caught.
    let steps: Vec<StepResult> = [(1, 100.0), (2, 500.0), (4, 1000.0), (8, 700.0)]
        .into_iter()
        .chain([(16, 600.0), (32, 450.0)])
        .map(|(n, x)| ok_step(n, x, 1e6 * n as f64 / x))
        .collect();
    let a = analyze_steps(&steps);
    let (s, d) = (&a.series[0], &a.diagnosis[0]);
    let mut old = d.clone();
    old.knee_clients = None;
    old.sentence = "t/p shows no knee up to 32 clients (throughput 450 req/s): throughput falls from 1000 req/s at 4 clients to 450 req/s at 32 (USL κ = 0.007, N* = 7.9): coherency/crosstalk.".into();
    let found = contradictions(
        s,
        &old,
        "t / p peaks at 1000 req/s at 4 clients. Its USL fit is not a finding (see the caveat).",
    );
    assert_eq!(found.len(), 3, "{found:?}");
    // A flat series said to stop at 2 while its peak is elsewhere, levels within noise.
    let flat: Vec<StepResult> = [
        (1, 50.0),
        (2, 1000.0),
        (4, 1002.0),
        (8, 1004.0),
        (16, 1005.0),
    ]
    .into_iter()
    .map(|(n, x)| ok_step(n, x, 1e6 * n as f64 / x))
    .collect();
    let a = analyze_steps(&flat);
    let mut old = a.diagnosis[0].clone();
    old.sentence = "t/p stops scaling at 2 clients: undetermined.".into();
    let found = contradictions(
        &a.series[0],
        &old,
        "t / p peaks at 1005 req/s at 16 clients.",
    );
    assert_eq!(found.len(), 2, "{found:?}");
    // And what the code says now passes.
    let now = series_conclusion(&a.series[0]);
    assert_eq!(
        contradictions(&a.series[0], &a.diagnosis[0], &now),
        Vec::<String>::new()
    );
    assert!(
        a.diagnosis[0].sentence.contains("2, 4, 8, 16 clients"),
        "{}",
        a.diagnosis[0].sentence
    );
}
