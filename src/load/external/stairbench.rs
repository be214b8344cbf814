//! stairbench's own `stairbench load --json` output, so that a spec can run the engine as an
//! external command (under another user, in a container) and keep every figure it prints.

use crate::record::load::LoadReport;

use super::{LatencyFields, OutputParser, ParseError, ParsedLoad, ToolLoad};

/// Parser of the JSON `stairbench load --json` writes (a whole [`LoadReport`]).
#[derive(Debug, Clone, Copy)]
pub struct StairbenchJson;

impl StairbenchJson {
    fn read(stdout: &str) -> Result<LoadReport, ParseError> {
        serde_json::from_str(stdout.trim()).map_err(|e| ParseError::NotLoadJson(e.to_string()))
    }
}

impl OutputParser for StairbenchJson {
    fn parse(&self, stdout: &str) -> Result<ParsedLoad, ParseError> {
        let r = Self::read(stdout)?;
        // JSON has no NaN: a figure the engine could not give is absent, never zero.
        let fig = |v: f64| Some(v).filter(|v| v.is_finite());
        let l = &r.latency_us;
        Ok(ParsedLoad {
            requests: Some(r.requests),
            duration_s: Some(r.duration_s),
            throughput_rps: Some(r.throughput_rps),
            bytes_received: Some(r.bytes_received),
            latency_us: LatencyFields {
                mean: fig(l.mean),
                p50: fig(l.p50),
                p90: fig(l.p90),
                p95: fig(l.p95),
                p99: fig(l.p99),
                p999: fig(l.p999),
                max: fig(l.max),
                ..LatencyFields::default()
            },
            errors: r.errors.into_iter().filter(|(_, n)| *n > 0).collect(),
            extra: [("connect_time_s".to_string(), r.connect_time_s)].into(),
            intervals: Vec::new(),
        })
    }

    /// The report as the engine wrote it: every figure kept (a [`ParsedLoad`] has no room for
    /// `sent`, the open-loop or the Redis figures).
    fn parse_report(&self, stdout: &str) -> Result<ToolLoad, ParseError> {
        Ok(ToolLoad {
            report: Self::read(stdout)?,
            ..ToolLoad::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HTTP: &str = include_str!("../../../tests/data/parsers/stairbench_load_http.json");

    #[test]
    fn the_report_keeps_every_figure_the_engine_wrote() {
        let whole: LoadReport = serde_json::from_str(HTTP).unwrap();
        let tool = StairbenchJson.parse_report(HTTP).unwrap();
        assert_eq!(tool.report.sent, whole.sent);
        assert_eq!(tool.report.client_cpu.user_s, whole.client_cpu.user_s);
        assert!(tool.figures.is_none() && tool.intervals.is_empty());
        let parsed = StairbenchJson.parse(HTTP).unwrap();
        assert_eq!(parsed.requests, Some(whole.requests));
        assert_eq!(parsed.latency_us.p99, Some(whole.latency_us.p99));
    }

    #[test]
    fn by_name_knows_it_and_names_it_when_refusing_another() {
        assert!(crate::load::external::by_name("stairbench", &toml::Table::new()).is_ok());
        let err = crate::load::external::by_name("ab", &toml::Table::new())
            .err()
            .unwrap();
        assert!(err.to_string().contains("stairbench load --json"), "{err}");
        let err = StairbenchJson.parse("not json").unwrap_err().to_string();
        assert!(err.starts_with("not stairbench load JSON: "), "{err}");
    }
}
