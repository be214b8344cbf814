//! The run's analysis as the page's fitted curves and tables.

use super::{Table, UslCurve};
use crate::report::analysis::RunAnalysis;

/// Fitted USL curves by (target, placement), and the knee/USL and Little's-law tables.
pub fn curves_and_tables(a: &RunAnalysis) -> (Vec<(String, String, UslCurve)>, Vec<Table>) {
    let curves = a
        .series
        .iter()
        .filter_map(|s| {
            let fit = s.usl.as_ref()?;
            let curve = UslCurve {
                lambda: fit.lambda,
                sigma: fit.sigma,
                kappa: fit.kappa,
            };
            Some((s.target.clone(), s.placement.clone(), curve))
        })
        .collect();
    (curves, vec![knee_table(a), little_table(a)])
}

fn knee_table(a: &RunAnalysis) -> Table {
    let (header, rows) = crate::report::analysis::scalability_rows(a);
    Table {
        title: "Scalability: knee and USL".into(),
        note: "Knee by Kneedle; saturation = fewest clients within 5% of the peak; busy = most \
               clients with the server under 70% CPU; USL X(N) = λN/(1+σ(N−1)+κN(N−1))."
            .into(),
        header,
        rows,
    }
}

fn little_table(a: &RunAnalysis) -> Table {
    let rows = a
        .series
        .iter()
        .flat_map(|s| {
            s.little.iter().map(move |r| {
                vec![
                    s.target.clone(),
                    s.placement.clone(),
                    r.clients.to_string(),
                    format!("{:.1}", r.check.inflight),
                    format!("{:.0}", r.throughput_rps),
                    format!("{:.1}", r.check.predicted_latency),
                    format!("{:.1}", r.check.measured_latency),
                    format!("{:.2}", r.check.ratio),
                    r.check.flag.clone().unwrap_or_default(),
                ]
            })
        })
        .collect();
    Table {
        title: "Little's law".into(),
        note: "L = in flight; predicted R = L / X; the ratio X·R/L is 1.0 when the law holds."
            .into(),
        header: [
            "target",
            "placement",
            "clients",
            "L",
            "X req/s",
            "predicted µs",
            "measured µs",
            "X·R/L",
            "flag",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}
