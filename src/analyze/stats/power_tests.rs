//! The comparison's power and false-positive rate on synthetic repetitions whose truth is
//! known: normal noise (xorshift64* and Box–Muller, seeded) around a baseline of 100 and a
//! candidate 10% slower, so each trial's right answer is known. The figures are in README.md
//! ("Comparisons: the test and its power"); `cargo test --release --lib power -- --nocapture`
//! prints them.

use super::{verdict, TestOptions, Verdict};

/// xorshift64*: small, seeded, good enough for normal deviates through Box–Muller.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in (0, 1].
    fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box–Muller, one of the pair).
    fn normal(&mut self) -> f64 {
        let (u1, u2) = (self.uniform(), self.uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// Trials of the pass/fail tests (a standard error of about 0.9 points at 80%).
const TRIALS: usize = 2000;
/// Trials of the README's table (a standard error of about 0.13 points at 80%).
const TABLE_TRIALS: usize = 100_000;
const BASELINE: f64 = 100.0;
/// Noise: each repetition's standard deviation, relative to its side's mean.
const NOISE: f64 = 0.03;

/// `n` repetitions around `mean` with relative noise `NOISE`.
fn sample(rng: &mut Rng, n: usize, mean: f64) -> Vec<f64> {
    (0..n)
        .map(|_| mean * (1.0 + NOISE * rng.normal()))
        .collect()
}

/// Share of `TRIALS` seeded trials (n repetitions a side, candidate at `factor` × baseline
/// throughput) that `rule` calls the candidate lower (slower, for throughput); with
/// `factor` 1, the share called different at all.
fn rate(n: usize, factor: f64, seed: u64, rule: &dyn Fn(&[f64], &[f64]) -> Verdict) -> f64 {
    rate_over(TRIALS, n, factor, seed, rule)
}

fn rate_over(
    trials: usize,
    n: usize,
    factor: f64,
    seed: u64,
    rule: &dyn Fn(&[f64], &[f64]) -> Verdict,
) -> f64 {
    let mut rng = Rng::new(seed);
    let hits = (0..trials)
        .filter(|_| {
            let base = sample(&mut rng, n, BASELINE);
            let cand = sample(&mut rng, n, BASELINE * factor);
            let v = rule(&cand, &base);
            if factor == 1.0 {
                matches!(v, Verdict::Lower | Verdict::Higher)
            } else {
                v == Verdict::Lower
            }
        })
        .count();
    hits as f64 / trials as f64
}

fn welch_rule(a: &[f64], b: &[f64]) -> Verdict {
    verdict(a, b, TestOptions::default())
}

/// The rule of main before issue 26: a difference only when the 95% intervals do not overlap.
fn overlap_rule(a: &[f64], b: &[f64]) -> Verdict {
    let (sa, sb) = (super::summarize(a).unwrap(), super::summarize(b).unwrap());
    if sa.ci95_low() > sb.ci95_high() {
        Verdict::Higher
    } else if sa.ci95_high() < sb.ci95_low() {
        Verdict::Lower
    } else {
        Verdict::WithinNoise
    }
}

#[test]
fn a_ten_percent_slowdown_in_three_percent_noise_is_caught_at_three_repetitions() {
    // Welch's power here is 79.8% (100,000 trials, README's table): its Satterthwaite degrees
    // of freedom are conservative at 3 a side (A/A 3.4%, not 5%). The bound leaves 2 standard
    // errors of 2,000 trials below it; the old rule (33%) is far outside.
    let power = rate(3, 0.9, 26, &welch_rule);
    assert!(power >= 0.78, "power at 3 repetitions: {power}");
    let old = rate(3, 0.9, 26, &overlap_rule);
    assert!(old < 0.5, "the old rule's power at 3 repetitions: {old}");
    // At 4 a side Welch passes the 80% bar with room to spare; the old rule still does not.
    assert!(rate(4, 0.9, 27, &welch_rule) >= 0.9);
    assert!(rate(4, 0.9, 27, &overlap_rule) < 0.8);
    assert!(rate(2, 0.9, 26, &overlap_rule) < 0.1);
}

#[test]
fn an_a_a_comparison_is_called_different_at_most_at_the_level() {
    for (n, seed) in [(2, 1), (3, 2), (5, 3)] {
        let false_positive = rate(n, 1.0, seed, &welch_rule);
        // 5% nominal; 2000 trials give a standard error of 0.5%, so 6% is a real bound.
        assert!(
            false_positive <= 0.06,
            "A/A called different in {false_positive} at {n} repetitions"
        );
    }
}

/// README's table: `cargo test --release --lib power_table -- --nocapture`.
#[test]
fn power_table() {
    let reps = [2, 3, 4, 5];
    let table = |factor: f64, seed: u64, rule: &dyn Fn(&[f64], &[f64]) -> Verdict| {
        reps.iter()
            .map(|&n| rate_over(TABLE_TRIALS, n, factor, seed, rule))
            .collect::<Vec<f64>>()
    };
    let powers = table(0.9, 26, &welch_rule);
    let false_positives = table(1.0, 126, &welch_rule);
    let old = table(0.9, 26, &overlap_rule);
    let old_false = table(1.0, 126, &overlap_rule);
    println!("repetitions a side: {reps:?} ({TABLE_TRIALS} trials, 10% slower, 3% noise)");
    println!("Welch 95%, min effect 2%: power {powers:?}, A/A different {false_positives:?}");
    println!("old non-overlap rule: power {old:?}, A/A different {old_false:?}");
    assert!(powers.windows(2).all(|w| w[0] < w[1]), "{powers:?}");
    assert!(powers[3] > 0.99, "{powers:?}");
    assert!(
        false_positives.iter().all(|&f| f <= 0.055),
        "{false_positives:?}"
    );
    assert!(old.iter().zip(&powers).all(|(o, w)| o < w), "{old:?}");
}
