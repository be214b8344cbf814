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

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_string(), |x| format!("{x:.digits$}"))
}

fn knee_table(a: &RunAnalysis) -> Table {
    let rows = a
        .series
        .iter()
        .map(|s| {
            let k = s.knee.as_ref();
            let u = s.usl.as_ref();
            vec![
                s.target.clone(),
                s.placement.clone(),
                opt(k.and_then(|k| k.throughput_knee), 0),
                opt(k.map(|k| k.saturation), 0),
                opt(k.and_then(|k| k.busy), 0),
                opt(k.map(|k| k.max_throughput), 0),
                opt(u.map(|u| u.sigma), 4),
                opt(u.map(|u| u.kappa), 6),
                opt(u.and_then(|u| u.n_star), 1),
                opt(u.map(|u| u.r2), 3),
                u.map_or_else(
                    || s.usl_note.clone().unwrap_or_default(),
                    |u| u.dominant.clone(),
                ),
            ]
        })
        .collect();
    Table {
        title: "Scalability: knee and USL".into(),
        note: "Knee by Kneedle; saturation = fewest clients within 5% of the peak; busy = most \
               clients with the server under 70% CPU; USL X(N) = λN/(1+σ(N−1)+κN(N−1))."
            .into(),
        header: [
            "target",
            "placement",
            "knee",
            "saturation",
            "busy",
            "peak req/s",
            "σ",
            "κ",
            "N*",
            "R²",
            "limited by",
        ]
        .map(String::from)
        .to_vec(),
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
