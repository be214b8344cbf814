//! Units on the command line and in specs: durations such as "2s", "500ms", "1m"; and
//! durations as people read them: "57.1 µs", "303 ms", "12.4 s".

use std::time::Duration;

/// "1 CPU", "2 CPUs": a count with its noun, singular for one.
pub fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// "1 CPU is", "2 CPUs are".
pub fn count_is(n: usize, noun: &str) -> String {
    format!("{} {}", count(n, noun), if n == 1 { "is" } else { "are" })
}

/// The known word nearest to a mistyped `word` (at most 2 edits, and fewer than half its
/// letters), for "did you mean `clients`?".
pub fn closest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let limit = 2.min(word.chars().count().saturating_sub(1) / 2 + 1);
    known
        .iter()
        .map(|k| (strsim::levenshtein(word, k), *k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// " (did you mean \"separated\"?)" when a known word is near the mistyped one, else "".
pub fn did_you_mean(word: &str, known: &[&str]) -> String {
    closest(word, known).map_or(String::new(), |k| format!(" (did you mean {k:?}?)"))
}

/// A duration that does not read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// No number first.
    #[error("bad duration {0:?}: expected a number with a unit, such as 2s or 500ms")]
    Number(String),
    /// A unit that is not h, m, s, ms or us.
    #[error("bad duration {text:?}: unknown unit {unit:?} (use h, m, s, ms or us)")]
    Unit {
        /// The duration as given.
        text: String,
        /// Its unit.
        unit: String,
    },
    /// Negative or over 10^9 s.
    #[error("bad duration {0:?}: out of range")]
    Range(String),
}

/// Parses "10" (seconds), "2.5s", "500ms", "750us", "1m", "1h".
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| DurationError::Number(text.into()))?;
    let scale = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        other => {
            return Err(DurationError::Unit {
                text: text.into(),
                unit: other.into(),
            })
        }
    };
    let secs = value * scale;
    if !(0.0..=1e9).contains(&secs) {
        return Err(DurationError::Range(text.into()));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Formats a duration in the spec's notation.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}us", d.as_micros())
    } else if !ms.is_multiple_of(1000) {
        format!("{ms}ms")
    } else {
        format!("{}s", d.as_secs())
    }
}

/// A duration given in µs, in the unit that reads best: under 10 ms in µs, under 10 s in ms,
/// else in s; 3 significant figures ("7.73 µs", "57.1 µs", "9999 µs", "303 ms", "12.4 s"); "–"
/// for a value that is not a number. The unit is chosen on the rounded value, so 9999.7 µs
/// reads "10.0 ms", never "10000 µs". This is for people: CSV and JSON keep raw numbers.
pub fn duration_us(us: f64) -> String {
    if !us.is_finite() {
        return "–".into();
    }
    let sign = if us < 0.0 { "-" } else { "" };
    let a = us.abs();
    let (value, unit) = if a < UNIT_STEP {
        (a, "µs")
    } else if a < UNIT_STEP * 1e3 {
        (a / 1e3, "ms")
    } else {
        (a / 1e6, "s")
    };
    format!("{sign}{} {unit}", significant(value, 3))
}

/// A range of durations given in µs, the unit written once when both ends share it:
/// "3.60–10.6 µs", "950 µs–1.20 ms"; "–" when either end is not a number.
pub fn duration_range_us(low_us: f64, high_us: f64) -> String {
    if !(low_us.is_finite() && high_us.is_finite()) {
        return "–".into();
    }
    let (low, high) = (duration_us(low_us), duration_us(high_us));
    match (low.split_once(' '), high.split_once(' ')) {
        (Some((a, u)), Some((b, v))) if u == v => format!("{a}–{b} {u}"),
        _ => format!("{low}–{high}"),
    }
}

/// Server CPU time per request given in µs, likewise: "1.20 µs/req", "12.0 ms/req"; "–" for
/// a value that is not a number.
pub fn cpu_per_req_us(us: f64) -> String {
    if us.is_finite() {
        format!("{}/req", duration_us(us))
    } else {
        "–".into()
    }
}

/// A value (in a smaller unit) from which the next larger unit is used: 10 ms is 10,000 µs. Just
/// under 10,000 so that a value rounding to 10,000 moves up.
const UNIT_STEP: f64 = 9999.5;

/// `x` (≥ 0) to `digits` significant figures, never in exponent notation and never rounding
/// away integer digits: 3 figures of 1234.4 read "1234".
pub fn significant(x: f64, digits: usize) -> String {
    if x == 0.0 {
        return "0".into();
    }
    // The exponent of the value as rounded, so 9.996 counts as 10.0 (one decimal, not two).
    let rounded: f64 = format!("{:.*e}", digits.saturating_sub(1), x)
        .parse()
        .unwrap_or(x);
    let magnitude = rounded.abs().log10().floor() as i64;
    let decimals = (digits as i64 - 1 - magnitude).max(0) as usize;
    format!("{x:.decimals$}")
}

/// A large approximate count for a sentence: 2 significant figures with thousands separators
/// ("4,500", "1,400", "20", "7.9").
pub fn approx_count(x: f64) -> String {
    if !x.is_finite() {
        "–".into()
    } else if x.abs() >= 100.0 {
        grouped(round_to(x.abs().round() as u64, 2))
    } else {
        significant(x.abs(), 2)
    }
}

/// `v` with all but its `digits` leading digits set to 0: round_to(4472, 2) = 4500.
fn round_to(v: u64, digits: u32) -> u64 {
    let len = v.checked_ilog10().map_or(1, |l| l + 1);
    if len <= digits {
        return v;
    }
    let unit = 10u64.pow(len - digits);
    (v + unit / 2) / unit * unit
}

/// An integer with thousands separators: "1,024".
pub fn grouped(v: u64) -> String {
    let digits = v.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("5 parsecs")
            .unwrap_err()
            .to_string()
            .contains("unknown unit"));
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1, "CPU"), "1 CPU");
        assert_eq!(count(2, "target"), "2 targets");
        assert_eq!(count_is(1, "CPU"), "1 CPU is");
        assert_eq!(count_is(4, "CPU"), "4 CPUs are");
    }

    #[test]
    fn closest_words() {
        let keys = ["clients", "cooldown", "connections_per_client", "duration"];
        assert_eq!(closest("clints", &keys), Some("clients"));
        assert_eq!(closest("cliens", &keys), Some("clients"));
        assert_eq!(closest("durration", &keys), Some("duration"));
        assert_eq!(closest("placements", &keys), None);
        assert_eq!(closest("htp", &["http", "https", "h2c"]), Some("http"));
        assert_eq!(closest("xy", &["h2c"]), None);
    }

    #[test]
    fn durations_read_in_their_unit_at_the_boundaries() {
        for (us, want) in [
            (0.0, "0 µs"),
            (0.523, "0.523 µs"),
            (1.2, "1.20 µs"),
            (7.734, "7.73 µs"),
            (9.996, "10.0 µs"),
            (57.14, "57.1 µs"),
            (302.4, "302 µs"),
            (1234.4, "1234 µs"),
            (9_999.0, "9999 µs"),
            (9_999.7, "10.0 ms"),
            (10_000.0, "10.0 ms"),
            (302_776.3, "303 ms"),
            (9_990_000.0, "9990 ms"),
            (9_999_900.0, "10.0 s"),
            (10_000_000.0, "10.0 s"),
            (123_456_789.0, "123 s"),
            (-57.14, "-57.1 µs"),
            (f64::NAN, "–"),
            (f64::INFINITY, "–"),
        ] {
            assert_eq!(duration_us(us), want, "{us} µs");
        }
    }

    #[test]
    fn every_duration_keeps_three_figures_and_a_value_under_ten_thousand() {
        // Walk the scale in small ratio steps: the number shown is always in [1, 10000) (or
        // 0.x under 1 µs), it reads back within 0.5% of the value, and its unit only grows.
        let mut us = 0.5;
        let mut last_unit = 0;
        while us < 1e9 {
            let text = duration_us(us);
            let (number, unit) = text.split_once(' ').unwrap();
            let n: f64 = number.parse().unwrap();
            let (scale, rank) = match unit {
                "µs" => (1.0, 0),
                "ms" => (1e3, 1),
                "s" => (1e6, 2),
                other => panic!("unit {other}"),
            };
            assert!(rank >= last_unit, "{us}: {text}");
            last_unit = rank;
            assert!(n < 9999.5 && (us < 1.0 || n >= 1.0), "{us}: {text}");
            assert!((n * scale - us).abs() <= 0.0051 * us, "{us}: {text}");
            us *= 1.0137;
        }
    }

    #[test]
    fn ranges_write_a_shared_unit_once() {
        assert_eq!(duration_range_us(3.6, 10.6), "3.60–10.6 µs");
        assert_eq!(duration_range_us(950.0, 12_000.0), "950 µs–12.0 ms");
        assert_eq!(duration_range_us(f64::NAN, 5.0), "–");
    }

    #[test]
    fn cpu_per_request_reads_like_a_duration() {
        assert_eq!(cpu_per_req_us(1.2), "1.20 µs/req");
        assert_eq!(cpu_per_req_us(12_345.0), "12.3 ms/req");
        assert_eq!(cpu_per_req_us(f64::NAN), "–");
    }

    #[test]
    fn approximate_counts() {
        assert_eq!(approx_count(4472.1), "4,500");
        assert_eq!(approx_count(1414.2), "1,400");
        assert_eq!(approx_count(123_456.0), "120,000");
        assert_eq!(approx_count(20.0), "20");
        assert_eq!(approx_count(123.0), "120");
        assert_eq!(approx_count(7.91), "7.9");
        assert_eq!(grouped(1024), "1,024");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000_000), "1,000,000");
    }
}
