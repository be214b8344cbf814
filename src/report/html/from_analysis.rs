//! The run's analysis as the page's series, fitted curves and tables: the page plots the
//! same load levels, peaks and merged percentiles report.md prints.

use super::{Point, Series, UslCurve};
use crate::analyze::run::{LoadPoint, RunAnalysis, SeriesAnalysis};
use crate::analyze::usl::UslReading;
use crate::record::observed::CpuUsPerReq;
use crate::record::steps::{StepResult, StepStatus};

/// The page's series: one point per load level of the analysis (an open-loop series one per
/// offered rate), its latency from the repetitions' histograms merged, its CPU per request
/// the repetitions' mean; `spec` says which targets' thread counts follow their cpuset.
pub fn series(a: &RunAnalysis, steps: &[StepResult], spec: Option<&toml::Table>) -> Vec<Series> {
    a.series
        .iter()
        .map(|s| {
            let reps = |p: &LoadPoint| -> Vec<&StepResult> {
                steps
                    .iter()
                    .filter(|x| x.status == StepStatus::Ok && x.load.is_some())
                    .filter(|x| x.target == s.target && x.placement == s.placement)
                    .filter(|x| x.clients == p.clients && x.rate_rps == p.rate_rps)
                    .collect()
            };
            Series {
                target: s.target.clone(),
                placement: s.placement.clone(),
                points: s.points.iter().map(|p| point(p, &reps(p))).collect(),
                usl: None,
                threads: threads_text(s, steps, spec),
            }
        })
        .collect()
}

fn point(p: &LoadPoint, reps: &[&StepResult]) -> Point {
    let mean = |f: fn(&CpuUsPerReq) -> Option<f64>| -> Option<f64> {
        let v: Vec<f64> = reps
            .iter()
            .filter_map(|s| f(&s.per_request().cpu_us_per_req))
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    // One repetition without a histogram: its own median is the level's.
    let single_p50 = match reps {
        [one] => one.load.as_ref().map(|l| l.latency_us.p50),
        _ => None,
    };
    Point {
        clients: p.clients as f64,
        rate_rps: p.rate_rps,
        throughput_rps: p.throughput_rps.mean,
        p50_us: p.p50_us().or(single_p50).unwrap_or(f64::NAN),
        p99_us: p.p99_us().unwrap_or(f64::NAN),
        cpu_us_per_req_user: mean(|c| c.user),
        cpu_us_per_req_sys: mean(|c| c.sys),
        client_saturated: p.client_saturated,
    }
}

/// Whether a target's server threads follow its cpuset: a built-in server given no
/// `--threads`, or a command using `{threads}`.
pub fn threads_follow_cpuset(spec: &toml::Table, target: &str) -> bool {
    let Some(t) = spec
        .get("targets")
        .and_then(|t| t.as_array())
        .and_then(|ts| {
            ts.iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(target))
        })
    else {
        return false;
    };
    if let Some(b) = t.get("builtin").and_then(|b| b.as_str()) {
        return !b.split_whitespace().any(|w| w == "--threads");
    }
    t.get("command")
        .is_some_and(|c| c.to_string().contains("{threads}"))
}

/// The server threads of a series' steps ("2", "1–4"), when they follow the cpuset.
fn threads_text(
    s: &SeriesAnalysis,
    steps: &[StepResult],
    spec: Option<&toml::Table>,
) -> Option<String> {
    if !threads_follow_cpuset(spec?, &s.target) {
        return None;
    }
    let counts: Vec<usize> = steps
        .iter()
        .filter(|x| x.target == s.target && x.placement == s.placement)
        .filter_map(|x| crate::cpuset::parse(&x.server_cpus).ok().map(|c| c.len()))
        .filter(|n| *n > 0)
        .collect();
    let lo = counts.iter().min()?;
    let hi = counts.iter().max()?;
    Some(if lo == hi {
        lo.to_string()
    } else {
        format!("{lo}–{hi}")
    })
}

/// Fitted USL curves by (target, placement), drawn dashed beside the measured points (the
/// tables come from report.md's own sections). A chart is no bolder than the text: a fit that
/// is not a finding (a caveat, or a term that bites only past twice the largest level, see
/// `UslFit::reading`) is not drawn at all.
pub fn usl_curves(a: &RunAnalysis) -> Vec<(String, String, UslCurve)> {
    a.series
        .iter()
        .filter_map(|s| {
            let fit = s.usl.as_ref().filter(|u| {
                s.usl_caveat.is_none() && !matches!(u.reading(), UslReading::Extrapolation { .. })
            })?;
            let curve = UslCurve {
                lambda: fit.lambda,
                sigma: fit.sigma,
                kappa: fit.kappa,
            };
            Some((s.target.clone(), s.placement.clone(), curve))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::run::analyze;
    use crate::analyze::run::tests::ok_step;
    use crate::analyze::usl::model;

    /// The throughput chart of a series measured exactly on a USL curve, doubling from 1 to
    /// `largest` clients.
    fn chart_of(sigma: f64, kappa: f64, largest: usize) -> String {
        let steps: Vec<StepResult> = std::iter::successors(Some(1usize), |n| Some(n * 2))
            .take_while(|&n| n <= largest)
            .map(|n| {
                let x = model(1000.0, sigma, kappa, n as f64);
                ok_step(n, x, 1e6 * n as f64 / x)
            })
            .collect();
        let a = analyze(&steps, None);
        let mut data = super::super::ReportData {
            series: series(&a, &steps, None),
            ..Default::default()
        };
        super::super::adapter::add_analysis(&mut data, &usl_curves(&a));
        let mut page = String::new();
        super::super::charts::throughput(&mut page, &data.series);
        page
    }

    #[test]
    fn the_usl_curve_is_drawn_only_where_the_fit_is_a_finding() {
        // κ = 5e-8 measured up to 1024 clients: R² 1.000, but its peak (~4,470) lies past
        // twice 1024. The curve would claim what the text calls an extrapolation.
        let far = chart_of(1e-5, 5e-8, 1024);
        assert!(far.contains("<svg"), "{far}");
        assert!(!far.contains("(USL fit)"), "{far}");
        assert!(!far.contains("stroke-dasharray"), "{far}");
        // κ = 5e-7: the peak (~1,414) lies within twice 1024, a finding, drawn dashed.
        let near = chart_of(1e-5, 5e-7, 1024);
        assert!(near.contains("p (USL fit)"), "{near}");
        assert!(near.contains("stroke-dasharray"), "{near}");
    }
}
