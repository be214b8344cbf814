//! The run's analysis as the page's series, fitted curves and tables: the page plots the
//! same load levels, peaks and merged percentiles report.md prints.

use super::{Point, Series, UslCurve};
use crate::analyze::run::{LoadPoint, RunAnalysis, SeriesAnalysis};
use crate::analyze::usl::UslReading;
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
                disturbed: disturbed(steps, &s.target, &s.placement),
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
        throughput_ci95_rps: p
            .throughput_rps
            .ci95_half_width
            .map(|_| (p.throughput_rps.ci95_low(), p.throughput_rps.ci95_high())),
        p50_us: p.p50_us().or(single_p50).unwrap_or(f64::NAN),
        p99_us: p.p99_us().unwrap_or(f64::NAN),
        p99_reps_us: p.p99_reps_us.map(|[lo, hi]| (lo, hi)),
        cpu_us_per_req_user: mean(|c| c.user),
        cpu_us_per_req_sys: mean(|c| c.sys),
        client_saturated: p.client_saturated,
    }
}

/// The series' disturbed steps with a load result, each its own point (its repetition's own
/// figures: they are not averaged with anything).
fn disturbed(steps: &[StepResult], target: &str, placement: &str) -> Vec<Point> {
    steps
        .iter()
        .filter(|x| x.status == StepStatus::Disturbed && x.target == target)
        .filter(|x| x.placement == placement)
        .filter_map(|x| {
            let load = x.load.as_ref()?;
            let cpu = &x.per_request().cpu_us_per_req;
            Some(Point {
                clients: x.clients as f64,
                rate_rps: x.rate_rps,
                throughput_rps: load.throughput_rps,
                p50_us: load.latency_us.p50,
                p99_us: load.latency_us.p99,
                cpu_us_per_req_user: cpu.user,
                cpu_us_per_req_sys: cpu.sys,
                client_saturated: load.client_saturated,
                ..Point::default()
            })
        })
        .collect()
}

/// The series' fitted USL curve, drawn dashed beside the measured points. A chart is no
/// bolder than the text: a fit that is not a finding (a caveat, or a term that bites only
/// past twice the largest level, see `UslFit::reading`) is not drawn at all.
fn usl_curve(s: &SeriesAnalysis) -> Option<UslCurve> {
    let fit = s.usl.as_ref().filter(|u| {
        s.usl_caveat.is_none() && !matches!(u.reading(), UslReading::Extrapolation { .. })
    })?;
    Some(UslCurve {
        lambda: fit.lambda,
        sigma: fit.sigma,
        kappa: fit.kappa,
    })
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
        let run = RunData {
            steps,
            ..Default::default()
        };
        let a = analyze(&run);
        let mut page = String::new();
        super::super::charts::throughput(&mut page, &series(&a, &run));
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

    /// A step of `clients` at `x` req/s, repetition `rep`, with `status`.
    fn step(clients: usize, x: f64, rep: usize, status: StepStatus) -> StepResult {
        let mut s = ok_step(clients, x, 1e6 * clients as f64 / x);
        s.id = format!("t.p.c{clients}.r{rep}");
        s.rep = rep;
        s.status = status;
        s
    }

    /// Two repetitions a level, and one disturbed step at 4 clients far below them. Catches
    /// a chart that draws no interval where there are repetitions, one drawn where a level
    /// has a single repetition, and a disturbed step dropped from the chart (or drawn on the
    /// series' line, as if it were measured clean).
    #[test]
    fn repeated_levels_get_intervals_and_disturbed_steps_crosses_off_the_line() {
        let mut steps = vec![
            step(1, 1000.0, 0, StepStatus::Ok),
            step(1, 1040.0, 1, StepStatus::Ok),
            step(2, 1900.0, 0, StepStatus::Ok),
            step(2, 1980.0, 1, StepStatus::Ok),
            step(4, 3500.0, 0, StepStatus::Ok),
            step(4, 900.0, 1, StepStatus::Disturbed),
        ];
        let run = RunData {
            steps: steps.clone(),
            ..Default::default()
        };
        let a = analyze(&run);
        let s = &series(&a, &run)[0];
        let (lo, hi) = s.points[0].throughput_ci95_rps.unwrap();
        // Mean 1020, stdev 28.3, t(1) = 12.71: ± 254.
        assert!(
            (lo - 765.9).abs() < 1.0 && (hi - 1274.1).abs() < 1.0,
            "{lo} {hi}"
        );
        assert_eq!(s.points[2].throughput_ci95_rps, None);
        assert_eq!(s.disturbed.len(), 1);
        assert_eq!(s.disturbed[0].throughput_rps, 900.0);
        let mut page = String::new();
        super::super::charts::throughput(&mut page, std::slice::from_ref(s));
        // Each chart is drawn twice, wide and narrow.
        assert_eq!(page.matches("class=\"interval\"").count(), 2 * 2, "{page}");
        assert_eq!(page.matches("class=\"cross\"").count(), 2, "{page}");
        assert!(page.contains("p disturbed (left out): 4, 900"), "{page}");
        // The line joins the three clean levels only.
        let line = page.split("points=\"").nth(1).unwrap();
        assert_eq!(line.split('"').next().unwrap().split(' ').count(), 3);
        // Without the disturbed step the chart has no cross.
        steps.pop();
        let run = RunData {
            steps,
            ..Default::default()
        };
        let mut page = String::new();
        super::super::charts::throughput(&mut page, &series(&analyze(&run), &run));
        assert!(!page.contains("class=\"cross\""), "{page}");
    }
}
