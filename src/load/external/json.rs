//! Any tool that prints JSON: a field map from our names to JSON pointers (RFC 6901) says
//! where each figure is, `scale` converts units. The whole output is read as one JSON
//! document; failing that, its last line that is one (tools that log before their result).

use std::collections::BTreeMap;

use serde_json::Value;

use super::fields::{
    bad_option, check_field_name, expect_keys, flatten_table, read_scale, set_field,
};
use super::{OutputParser, ParseError, ParsedLoad, ParserConfigError};

const TOOL: &str = "json";

/// Parser of JSON output through a field map.
#[derive(Debug, Clone, Default)]
pub struct JsonParser {
    /// Our field name (see [`super::FIELD_NAMES`]) to the JSON pointer of its value.
    pub fields: BTreeMap<String, String>,
    /// Factors applied to fields after reading (`latency_us.p99 = 1000` for milliseconds).
    pub scale: BTreeMap<String, f64>,
}

impl JsonParser {
    /// Reads `fields = { name = "/pointer", ... }` and the optional `scale` table.
    pub fn from_options(opts: &toml::Table) -> Result<Self, ParserConfigError> {
        expect_keys(TOOL, opts, &["fields", "scale"])?;
        let table = opts.get("fields").and_then(|v| v.as_table()).ok_or_else(|| {
            bad_option(
                TOOL,
                "needs `fields = { throughput_rps = \"/summary/rps\", ... }`, a table of our field names to JSON pointers".into(),
            )
        })?;
        let mut flat = Vec::new();
        flatten_table(table, "", &mut flat);
        let mut fields = BTreeMap::new();
        for (name, value) in flat {
            check_field_name(&name).map_err(|m| bad_option(TOOL, format!("fields: {m}")))?;
            let pointer = value
                .as_str()
                .filter(|p| p.is_empty() || p.starts_with('/'))
                .ok_or_else(|| {
                    bad_option(
                        TOOL,
                        format!("fields.{name} must be a JSON pointer string such as \"/a/b/0\""),
                    )
                })?;
            fields.insert(name, pointer.to_string());
        }
        Ok(JsonParser {
            fields,
            scale: read_scale(TOOL, opts)?,
        })
    }
}

impl OutputParser for JsonParser {
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError> {
        let doc = document(stdout)?;
        let mut load = ParsedLoad::default();
        for (name, pointer) in &self.fields {
            let value = doc.pointer(pointer).ok_or_else(|| {
                ParseError::missing(TOOL, &format!("value at {pointer} (for {name})"), stdout)
            })?;
            let number = as_number(value).ok_or_else(|| {
                ParseError::bad_value(TOOL, 0, &format!("{name} at {pointer}"), &value.to_string())
            })?;
            let scaled = number * self.scale.get(name).copied().unwrap_or(1.0);
            set_field(&mut load, name, scaled)
                .map_err(|m| ParseError::bad_value(TOOL, 0, &m.to_string(), &value.to_string()))?;
        }
        Ok(load)
    }
}

fn document(stdout: &str) -> Result<Value, ParseError> {
    if let Ok(doc) = serde_json::from_str(stdout) {
        return Ok(doc);
    }
    stdout
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| ParseError::missing(TOOL, "JSON document", stdout))
}

/// A number, or a string holding one (some tools quote their figures).
fn as_number(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser(toml_text: &str) -> JsonParser {
        JsonParser::from_options(&toml::from_str(toml_text).unwrap()).unwrap()
    }

    #[test]
    fn maps_pointers_and_scales() {
        let p = parser(
            r#"
            fields = { throughput_rps = "/summary/rps", requests = "/summary/n", latency_us.p99 = "/lat/1", "errors.timeout" = "/err/timeout" }
            scale = { latency_us = { p99 = 1000 } }
            "#,
        );
        let out =
            r#"{"summary": {"rps": 1234.5, "n": "99"}, "lat": [0.1, 2.5], "err": {"timeout": 3}}"#;
        let load = p.parse(out).unwrap();
        assert_eq!(load.throughput_rps, Some(1234.5));
        assert_eq!(load.requests, Some(99));
        assert_eq!(load.latency_us.p99, Some(2500.0));
        assert_eq!(load.errors["timeout"], 3);
    }

    #[test]
    fn json_after_log_lines_is_found() {
        let p = parser(r#"fields = { duration_s = "/d" }"#);
        let load = p.parse("starting...\n{\"d\": 2.5}\n").unwrap();
        assert_eq!(load.duration_s, Some(2.5));
    }

    #[test]
    fn a_missing_pointer_names_itself() {
        let p = parser(r#"fields = { duration_s = "/dur" }"#);
        let err = p.parse("{\"d\": 2.5}").unwrap_err().to_string();
        assert!(err.contains("/dur") && err.contains("duration_s"), "{err}");
        let err = p.parse("{\"dur\": true}").unwrap_err().to_string();
        assert!(err.contains("true"), "{err}");
    }

    #[test]
    fn bad_options_are_refused() {
        for bad in [
            "",
            "fields = 3",
            r#"fields = { latency = "/x" }"#,
            r#"fields = { requests = "x" }"#,
            r#"fields = { requests = "/x" }
               scale = { requests = "two" }"#,
            r#"fields = { requests = "/x" }
               colour = "red""#,
        ] {
            let opts: toml::Table = toml::from_str(bad).unwrap();
            assert!(JsonParser::from_options(&opts).is_err(), "accepted {bad:?}");
        }
    }
}
