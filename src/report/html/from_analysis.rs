//! The run's analysis as the page's series, fitted curves and tables: the page plots the
//! same load levels, peaks and merged percentiles report.md prints.

use super::{Point, Series, UslCurve};
use crate::analyze::run::{LoadPoint, RunAnalysis, SeriesAnalysis};
use crate::record::observed::CpuUsPerReq;
use crate::record::run::RunData;
use crate::record::steps::{StepResult, StepStatus};

/// The page's series: one point per load level of the analysis (an open-loop series one per
/// offered rate), its latency from the repetitions' histograms merged, its CPU per request
/// the repetitions' mean, its fitted USL curve; the spec says which targets' thread counts
/// follow their cpuset.
pub fn series(a: &RunAnalysis, run: &RunData) -> Vec<Series> {
    let steps = &run.steps[..];
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
                usl: usl_curve(s),
                threads: run.spec.as_ref().and_then(|spec| {
                    crate::report::conditions::threads_text(spec, steps, &s.target, &s.placement)
                }),
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

/// The series' fitted USL curve, drawn dashed beside the measured points.
fn usl_curve(s: &SeriesAnalysis) -> Option<UslCurve> {
    let fit = s.usl.as_ref()?;
    Some(UslCurve {
        lambda: fit.lambda,
        sigma: fit.sigma,
        kappa: fit.kappa,
    })
}
