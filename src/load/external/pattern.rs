//! The `regex` parser, for tools with no parser of their own: named capture groups named
//! after our fields (`(?P<throughput_rps>[0-9.]+)`, `(?P<latency_us.p99>[0-9.]+)`) pick the
//! figures. Each pattern must match somewhere; the last match wins (tools print progress
//! before their result); `^` and `$` match at line ends; `scale` converts units.

use std::collections::BTreeMap;

use regex::Regex;

use super::fields::{bad_option, check_field_name, expect_keys, read_scale, set_field};
use super::{OutputParser, ParseError, ParsedLoad, ParserConfigError};

const TOOL: &str = "regex";

/// Parser of any text output through named capture groups.
#[derive(Debug, Clone)]
pub struct RegexParser {
    patterns: Vec<Regex>,
    scale: BTreeMap<String, f64>,
}

impl RegexParser {
    /// Reads `pattern = "..."` or `patterns = ["...", ...]`, and the optional `scale` table.
    pub fn from_options(opts: &toml::Table) -> Result<Self, ParserConfigError> {
        expect_keys(TOOL, opts, &["pattern", "patterns", "scale"])?;
        let sources = pattern_sources(opts)?;
        let patterns = sources
            .iter()
            .map(|src| compile(src))
            .collect::<Result<_, _>>()?;
        Ok(RegexParser {
            patterns,
            scale: read_scale(TOOL, opts)?,
        })
    }

    /// A parser of already-compiled patterns (their group names are checked here).
    pub fn new(patterns: Vec<Regex>) -> Result<Self, ParserConfigError> {
        for re in &patterns {
            check_groups(re)?;
        }
        Ok(RegexParser {
            patterns,
            scale: BTreeMap::new(),
        })
    }
}

fn pattern_sources(opts: &toml::Table) -> Result<Vec<String>, ParserConfigError> {
    let needs = || {
        bad_option(
            TOOL,
            "needs `pattern = \"...\"` or `patterns = [\"...\"]` with named groups such as (?P<throughput_rps>[0-9.]+)".into(),
        )
    };
    match (opts.get("pattern"), opts.get("patterns")) {
        (Some(toml::Value::String(s)), None) => Ok(vec![s.clone()]),
        (None, Some(toml::Value::Array(items))) if !items.is_empty() => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(needs))
            .collect(),
        _ => Err(needs()),
    }
}

fn compile(src: &str) -> Result<Regex, ParserConfigError> {
    let re = regex::RegexBuilder::new(src)
        .multi_line(true)
        .build()
        .map_err(|e| bad_option(TOOL, format!("pattern {src:?} does not compile: {e}")))?;
    check_groups(&re)?;
    Ok(re)
}

fn check_groups(re: &Regex) -> Result<(), ParserConfigError> {
    let names: Vec<&str> = re.capture_names().flatten().collect();
    if names.is_empty() {
        return Err(bad_option(
            TOOL,
            format!("pattern {:?} has no named group: name groups after our fields, e.g. (?P<throughput_rps>[0-9.]+)", re.as_str()),
        ));
    }
    for name in names {
        check_field_name(name)
            .map_err(|m| bad_option(TOOL, format!("pattern {:?}: group {m}", re.as_str())))?;
    }
    Ok(())
}

impl OutputParser for RegexParser {
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError> {
        let mut load = ParsedLoad::default();
        for re in &self.patterns {
            let mut matched = false;
            for caps in re.captures_iter(stdout) {
                matched = true;
                for name in re.capture_names().flatten() {
                    if let Some(m) = caps.name(name) {
                        self.store(&mut load, name, m.as_str(), stdout, m.start())?;
                    }
                }
            }
            if !matched {
                let what = format!("match for pattern {:?}", re.as_str());
                return Err(ParseError::missing(TOOL, &what, stdout));
            }
        }
        Ok(load)
    }
}

impl RegexParser {
    fn store(
        &self,
        load: &mut ParsedLoad,
        name: &str,
        text: &str,
        stdout: &str,
        at: usize,
    ) -> Result<(), ParseError> {
        let line = stdout[..at].matches('\n').count() + 1;
        let value: f64 = text
            .trim()
            .parse()
            .map_err(|_| ParseError::bad_value(TOOL, line, name, text))?;
        let scaled = value * self.scale.get(name).copied().unwrap_or(1.0);
        set_field(load, name, scaled)
            .map_err(|m| ParseError::bad_value(TOOL, line, &m.to_string(), text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser(toml_text: &str) -> RegexParser {
        RegexParser::from_options(&toml::from_str(toml_text).unwrap()).unwrap()
    }

    #[test]
    fn last_match_wins_and_dotted_groups_work() {
        let p = parser(
            r#"
            patterns = ['^rate: (?P<throughput_rps>[0-9.]+)/s$', 'p99 (?P<latency_us.p99>[0-9.]+) ms']
            scale = { "latency_us.p99" = 1000 }
            "#,
        );
        let load = p
            .parse("rate: 10/s\nrate: 12.5/s\np99 1.5 ms\nnot rate: 99/s extra\n")
            .unwrap();
        assert_eq!(load.throughput_rps, Some(12.5));
        assert_eq!(load.latency_us.p99, Some(1500.0));
    }

    #[test]
    fn a_pattern_that_never_matches_is_an_error() {
        let p = parser(r#"pattern = 'done: (?P<requests>\d+)'"#);
        let err = p.parse("nothing here\n").unwrap_err().to_string();
        assert!(err.contains("done:"), "{err}");
    }

    #[test]
    fn a_group_that_is_not_a_number_names_its_line() {
        let p = parser(r#"pattern = 'rate: (?P<throughput_rps>\S+)'"#);
        let err = p.parse("x\nrate: fast\n").unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("fast"), "{err}");
    }

    #[test]
    fn bad_patterns_are_refused() {
        for bad in [
            "",
            "pattern = '(unclosed'",
            r"pattern = 'rate: (\d+)'",
            r"pattern = 'rate: (?P<speed>\d+)'",
            r"patterns = []",
            r"patterns = ['(?P<requests>\d+)', 3]",
        ] {
            let opts: toml::Table = toml::from_str(bad).unwrap();
            let result = RegexParser::from_options(&opts);
            assert!(result.is_err(), "accepted {bad:?}");
        }
    }
}
