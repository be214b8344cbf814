//! `steps.csv`: one wide row per step (benchreport-style columns), for spreadsheets and awk.

use super::{Exporter, RunData};
use crate::record::steps::StepResult;

/// The CSV exporter.
#[derive(Debug, Clone, Copy)]
pub struct Csv;

const COLUMNS: &[&str] = &[
    "id",
    "target",
    "placement",
    "clients",
    "rep",
    "rate_rps",
    "inflight",
    "status",
    "throughput_rps",
    "requests",
    "errors",
    "mean_us",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "cpu_us_per_req_user",
    "cpu_us_per_req_sys",
    "cpu_us_per_req_total",
    "cs_per_req",
    "client_saturated",
    "server_cpus",
    "client_cpus",
    "reason",
];

impl Exporter for Csv {
    fn file_name(&self) -> &'static str {
        "steps.csv"
    }

    fn render(&self, _dir: &std::path::Path, run: &RunData) -> Result<String, super::ExportError> {
        let mut out = COLUMNS.join(",");
        out.push('\n');
        for step in &run.steps {
            out.push_str(
                &row(step)
                    .iter()
                    .map(|f| quote(f))
                    .collect::<Vec<_>>()
                    .join(","),
            );
            out.push('\n');
        }
        Ok(out)
    }
}

fn row(s: &StepResult) -> Vec<String> {
    let num = |v: Option<f64>| {
        v.filter(|x| x.is_finite())
            .map_or(String::new(), |x| format!("{x:.3}"))
    };
    let l = s.load.as_ref();
    let per = s.per_request();
    let lat = |f: fn(&crate::record::load::LatencyUs) -> f64| num(l.map(|l| f(&l.latency_us)));
    vec![
        s.id.clone(),
        s.target.clone(),
        s.placement.clone(),
        s.clients.to_string(),
        s.rep.to_string(),
        num(s.rate_rps),
        s.inflight.to_string(),
        format!("{:?}", s.status).to_lowercase(),
        num(l.map(|l| l.throughput_rps)),
        l.map_or(String::new(), |l| l.requests.to_string()),
        l.map_or(String::new(), |l| {
            l.errors.values().sum::<u64>().to_string()
        }),
        lat(|x| x.mean),
        lat(|x| x.p50),
        lat(|x| x.p90),
        lat(|x| x.p99),
        lat(|x| x.p999),
        lat(|x| x.max),
        num(per.cpu_us_per_req.user),
        num(per.cpu_us_per_req.sys),
        num(per.cpu_us_per_req.total),
        num(per.cs_per_req),
        l.map_or(String::new(), |l| l.client_saturated.to_string()),
        s.server_cpus.clone(),
        s.client_cpus.clone(),
        s.reason
            .clone()
            .unwrap_or_default()
            .lines()
            .next()
            .unwrap_or("")
            .to_string(),
    ]
}

fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_when_needed() {
        assert_eq!(quote("a"), "a");
        assert_eq!(quote("a,b"), "\"a,b\"");
        assert_eq!(quote("say \"x\""), "\"say \"\"x\"\"\"");
    }
}
