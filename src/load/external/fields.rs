//! Our field names, as field maps and capture groups spell them, and the small helpers the
//! parsers share (option checks, numbers with units, line splitting).

use std::collections::BTreeMap;

use super::{ParsedLoad, ParserConfigError};

/// The names a `json` field map or a `regex` capture group may set. Besides these,
/// `errors.<kind>` and `extra.<name>` set an error count or an extra figure.
pub const FIELD_NAMES: [&str; 14] = [
    "requests",
    "duration_s",
    "throughput_rps",
    "bytes_received",
    "latency_us.mean",
    "latency_us.stdev",
    "latency_us.min",
    "latency_us.p50",
    "latency_us.p75",
    "latency_us.p90",
    "latency_us.p95",
    "latency_us.p99",
    "latency_us.p999",
    "latency_us.max",
];

/// A field a parser's map cannot set.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum FieldError {
    /// Not one of [`FIELD_NAMES`] nor `errors.<kind>`/`extra.<name>`.
    #[error("unknown field {0:?}{near}; expected one of {names}, errors.<kind> or extra.<name>", near = crate::units::did_you_mean(.0, &FIELD_NAMES), names = FIELD_NAMES.join(", "))]
    Unknown(String),
    /// `latency_us.<sub>` with a percentile the load does not keep.
    #[error("unknown latency field {0:?}")]
    Latency(String),
    /// A count that is negative or not finite.
    #[error("{name} must be a non-negative count, got {value}")]
    Count {
        /// The field.
        name: String,
        /// What was read.
        value: f64,
    },
}

/// Checks that `name` is a field a map may set; the error lists the valid names.
pub(crate) fn check_field_name(name: &str) -> Result<(), FieldError> {
    let prefixed = ["errors.", "extra."]
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(|rest| !rest.is_empty()));
    if prefixed || FIELD_NAMES.contains(&name) {
        Ok(())
    } else {
        Err(FieldError::Unknown(name.to_string()))
    }
}

/// Stores `value` in the field `name` (already checked with [`check_field_name`]).
pub(crate) fn set_field(load: &mut ParsedLoad, name: &str, value: f64) -> Result<(), FieldError> {
    check_field_name(name)?;
    if let Some(kind) = name.strip_prefix("errors.") {
        load.errors.insert(kind.into(), to_count(name, value)?);
    } else if let Some(key) = name.strip_prefix("extra.") {
        load.extra.insert(key.into(), value);
    } else if let Some(sub) = name.strip_prefix("latency_us.") {
        let slot = load
            .latency_us
            .get_mut(sub)
            .ok_or_else(|| FieldError::Latency(sub.to_string()))?;
        *slot = Some(value);
    } else {
        match name {
            "requests" => load.requests = Some(to_count(name, value)?),
            "bytes_received" => load.bytes_received = Some(to_count(name, value)?),
            "duration_s" => load.duration_s = Some(value),
            "throughput_rps" => load.throughput_rps = Some(value),
            _ => unreachable!("checked by check_field_name"),
        }
    }
    Ok(())
}

/// A count read as a float: must be finite and not negative; rounded to the nearest integer.
pub(crate) fn to_count(name: &str, value: f64) -> Result<u64, FieldError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value.round() as u64)
    } else {
        Err(FieldError::Count {
            name: name.to_string(),
            value,
        })
    }
}

/// Rejects keys of `opts` other than `allowed`.
pub(crate) fn expect_keys(
    parser: &str,
    opts: &toml::Table,
    allowed: &[&str],
) -> Result<(), ParserConfigError> {
    match opts.keys().find(|k| !allowed.contains(&k.as_str())) {
        None => Ok(()),
        Some(key) => Err(bad_option(
            parser,
            format!(
                "unknown option {key:?}; it takes {}",
                if allowed.is_empty() {
                    "no options".to_string()
                } else {
                    allowed.join(", ")
                }
            ),
        )),
    }
}

pub(crate) fn bad_option(parser: &str, message: String) -> ParserConfigError {
    ParserConfigError::BadOption {
        parser: parser.into(),
        message,
    }
}

/// Flattens a (possibly nested) TOML table of field names into dotted names, so that both
/// `latency_us.p99 = ...` (a nested table in TOML) and `"latency_us.p99" = ...` work.
/// A table with a key `leaf_key` is a leaf, not a level.
pub(crate) fn flatten_table<'a>(
    table: &'a toml::Table,
    prefix: &str,
    out: &mut Vec<(String, &'a toml::Value)>,
) {
    for (key, value) in table {
        let name = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            toml::Value::Table(sub) => flatten_table(sub, &name, out),
            leaf => out.push((name, leaf)),
        }
    }
}

/// Reads the optional `scale = { field = factor }` table.
pub(crate) fn read_scale(
    parser: &str,
    opts: &toml::Table,
) -> Result<BTreeMap<String, f64>, ParserConfigError> {
    let Some(value) = opts.get("scale") else {
        return Ok(BTreeMap::new());
    };
    let table = value
        .as_table()
        .ok_or_else(|| bad_option(parser, "`scale` must be a table of field = factor".into()))?;
    let mut flat = Vec::new();
    flatten_table(table, "", &mut flat);
    flat.into_iter()
        .map(|(name, v)| {
            check_field_name(&name).map_err(|m| bad_option(parser, format!("scale: {m}")))?;
            let factor = v
                .as_float()
                .or_else(|| v.as_integer().map(|i| i as f64))
                .ok_or_else(|| bad_option(parser, format!("scale.{name} must be a number")))?;
            Ok((name, factor))
        })
        .collect()
}

/// Splits output into lines at `\n` and `\r`: tools that redraw a progress line with `\r`
/// (redis-benchmark) leave every redraw as its own line.
pub(crate) fn lines(stdout: &str) -> impl Iterator<Item = (usize, &str)> {
    stdout
        .split('\n')
        .enumerate()
        .flat_map(|(i, line)| line.split('\r').map(move |part| (i + 1, part)))
}

/// A value with a unit suffix: the number and the suffix (`"3.28ms"` gives `(3.28, "ms")`).
pub(crate) fn split_unit(text: &str) -> Option<(f64, &str)> {
    let text = text.trim();
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E')))
        .unwrap_or(text.len());
    // An exponent letter is only part of the number when digits follow it.
    let (mut num, mut unit) = text.split_at(end);
    while num.ends_with(['e', 'E', '+', '-']) {
        let cut = num.len() - 1;
        (num, unit) = text.split_at(cut);
    }
    num.parse().ok().map(|n| (n, unit))
}

/// A duration with a unit (`us`, `ms`, `s`, `m`, `h`, or none for seconds) in microseconds.
pub(crate) fn time_us(text: &str) -> Option<f64> {
    let (n, unit) = split_unit(text)?;
    let scale = match unit {
        "ns" => 1e-3,
        "us" | "µs" => 1.0,
        "ms" => 1e3,
        "s" | "" => 1e6,
        "m" => 60e6,
        "h" => 3600e6,
        _ => return None,
    };
    Some(n * scale)
}

/// A size with a binary unit (`B`, `KB`, `MB`, `GB`, `TB`, `PB`, as wrk prints 1024-based
/// sizes) in bytes.
pub(crate) fn binary_bytes(text: &str) -> Option<f64> {
    let (n, unit) = split_unit(text)?;
    let power = ["B", "KB", "MB", "GB", "TB", "PB"]
        .iter()
        .position(|u| *u == unit)?;
    Some(n * 1024f64.powi(power as i32))
}

/// A number with an optional metric suffix (`k`, `M`, `G`, `T`), 1000-based.
pub(crate) fn metric(text: &str) -> Option<f64> {
    let (n, unit) = split_unit(text)?;
    let power = ["", "k", "M", "G", "T", "P"]
        .iter()
        .position(|u| *u == unit)?;
    Some(n * 1000f64.powi(power as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_convert() {
        assert_eq!(time_us("104.79us"), Some(104.79));
        assert_eq!(time_us("3.28ms"), Some(3280.0));
        assert_eq!(time_us("1.10s "), Some(1_100_000.0));
        assert_eq!(time_us("2.00m"), Some(120e6));
        assert_eq!(time_us("3.1xs"), None);
        assert_eq!(binary_bytes("20.34MB"), Some(20.34 * 1024.0 * 1024.0));
        assert_eq!(binary_bytes("264.00B"), Some(264.0));
        assert_eq!(metric("81.46k"), Some(81460.0));
        assert_eq!(metric("1.00"), Some(1.0));
        assert_eq!(split_unit("3.17785e+06"), Some((3.17785e6, "")));
        assert_eq!(split_unit("12e"), Some((12.0, "e")));
    }

    #[test]
    fn fields_are_set_by_dotted_name() {
        let mut load = ParsedLoad::default();
        set_field(&mut load, "latency_us.p99", 12.5).unwrap();
        set_field(&mut load, "requests", 41.6).unwrap();
        set_field(&mut load, "errors.timeout", 3.0).unwrap();
        set_field(&mut load, "extra.cpu_pct", 55.0).unwrap();
        assert_eq!(load.latency_us.p99, Some(12.5));
        assert_eq!(load.requests, Some(42));
        assert_eq!(load.errors["timeout"], 3);
        assert_eq!(load.extra["cpu_pct"], 55.0);
        assert!(set_field(&mut load, "latency_us.p42", 1.0).is_err());
        assert!(set_field(&mut load, "requests", -1.0).is_err());
        assert!(set_field(&mut load, "extra.", 1.0).is_err());
    }

    #[test]
    fn carriage_returns_split_lines() {
        let got: Vec<_> = lines("a\rb\nc").collect();
        assert_eq!(got, vec![(1, "a"), (1, "b"), (2, "c")]);
    }
}
