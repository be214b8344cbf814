//! Units on the command line and in specs: durations such as "2s", "500ms", "1m".

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
}
