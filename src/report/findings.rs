//! The run's analysis as the reports say it: the conclusions, each series' peak, and
//! report.md's analysis sections (knee and USL, Little's law, latency modes, noise,
//! comparisons) as markdown, with the rows report.html renders from the same source. The
//! figures are `analyze::run`'s; this module only words and lays them out.

use super::compare::show_summary;
use super::doc::{Doc, Table};
use crate::analyze::compare::{Metric, StepKey};
use crate::analyze::diagnosis::BUSY_PCT;
use crate::analyze::modes::Mode;
use crate::analyze::run::peak::{self, Peak};
use crate::analyze::run::{
    load_label, LittleRow, LoadPoint, RunAnalysis, SeriesAnalysis, StepModes,
};
use crate::analyze::stats;
use crate::analyze::usl::{UslFit, UslReading, UslTerm};
use crate::units;

/// Each series' peak in one sentence, then the comparisons and what Little's law found: the
/// answers a reader wants first, in the order report.md and report.html show them.
pub fn conclusions(a: &RunAnalysis) -> Vec<String> {
    let mut out: Vec<String> = a.series.iter().map(series_conclusion).collect();
    out.extend(verdict_sentences(a));
    let off = a
        .series
        .iter()
        .flat_map(|s| &s.little)
        .filter(|r| r.check.flag.is_some())
        .count();
    if off > 0 {
        out.push(format!(
            "Little's law is more than 10% off at {off} step(s): the latency is not what the requests in flight explain there (see its table)."
        ));
    }
    out
}

/// The comparisons' sentences as every output gives them (stdout, report.md, report.html):
/// each one's ratio with its interval and the test's reason, no winner where a side's step
/// measured a saturated load generator, then why two ratios coincide where they do.
pub fn verdict_sentences(a: &RunAnalysis) -> Vec<String> {
    let mut out: Vec<String> = a
        .comparisons
        .iter()
        .map(|c| match [&c.a, &c.b].into_iter().find(|k| saturated(a, k)) {
            Some(k) => format!(
                "{} against {} ({}): no winner: the load generator saturated during {}'s step, which measured the client, not the server ({:.2}x is the clients' ratio)",
                c.a.label(),
                c.b.label(),
                c.metric.name(),
                k.target,
                c.relation.speedup
            ),
            None => c.sentence.clone(),
        })
        .collect();
    out.extend(coinciding_ratios(a));
    out
}

/// The load level a comparison's side stands on.
fn point_of<'a>(a: &'a RunAnalysis, k: &StepKey) -> Option<&'a LoadPoint> {
    a.series
        .iter()
        .find(|s| s.target == k.target && s.placement == k.placement)?
        .points
        .iter()
        .find(|p| p.clients == k.clients && p.rate_rps.map(|r| r.round() as u64) == k.rate_rps)
}

fn saturated(a: &RunAnalysis, k: &StepKey) -> bool {
    point_of(a, k).is_some_and(|p| p.client_saturated)
}

/// Why the throughput ratio and the CPU-per-request ratio of the same two steps are the same
/// figure, where they are: CPU per request is CPU time over requests, so the two ratios agree
/// exactly when both servers spent the same share of their CPUs (both full, typically).
fn coinciding_ratios(a: &RunAnalysis) -> Vec<String> {
    let mut out = Vec::new();
    for (i, x) in a.comparisons.iter().enumerate() {
        for y in &a.comparisons[i + 1..] {
            let metrics = [x.metric, y.metric];
            let pair =
                metrics.contains(&Metric::ThroughputRps) && metrics.contains(&Metric::CpuUsPerReq);
            let shown = |c: &crate::analyze::compare::spec::ComparisonOutcome| {
                format!("{:.2}", c.relation.speedup)
            };
            if !pair || x.a != y.a || x.b != y.b || shown(x) != shown(y) {
                continue;
            }
            let cpu = |k: &StepKey| point_of(a, k).and_then(|p| p.server_cpu_pct);
            let why = match (cpu(&x.a), cpu(&x.b)) {
                (Some(pa), Some(pb)) if pa.min(pb) >= BUSY_PCT => format!(
                    "both servers fill their CPUs ({pa:.0}% and {pb:.0}% busy), so each spends the same CPU time per second and its CPU per request is that time over its throughput"
                ),
                (Some(pa), Some(pb)) => format!(
                    "both servers used about the same share of their CPUs ({pa:.0}% and {pb:.0}%), and CPU per request is CPU time over throughput"
                ),
                _ => "CPU per request is CPU time over throughput, and both servers spent about the same CPU time per second".to_string(),
            };
            out.push(format!(
                "The throughput and CPU-per-request ratios of {} against {} are the same ({}x) because {why}: the second follows from the first and is not a separate finding.",
                x.a.label(),
                x.b.label(),
                shown(x)
            ));
        }
    }
    out
}

/// What stdout prints after a run, in the reports' words: each series' peak line, then each
/// diagnosis sentence, then the verdicts.
pub fn stdout_lines(a: &RunAnalysis) -> Vec<String> {
    let mut out = peak_lines(a);
    for d in &a.diagnosis {
        out.push(format!("diagnosis: {}", d.sentence));
        // Beside it, what kept its confidence down (neighbours, noisy levels).
        out.extend(d.notes.iter().map(|n| format!("  note: {n}")));
    }
    out.extend(
        verdict_sentences(a)
            .into_iter()
            .map(|v| format!("verdict: {v}")),
    );
    out
}

/// The load level the series peaks at.
fn peak_point(s: &SeriesAnalysis) -> Option<&LoadPoint> {
    s.points
        .iter()
        .find(|p| Some(p.clients) == s.peak.clients && p.rate_rps == s.peak.rate_rps)
}

fn series_conclusion(s: &SeriesAnalysis) -> String {
    let p99 = peak_point(s)
        .map(|p| format!(", p99 {}", p.p99_text()))
        .unwrap_or_default();
    let mut text = format!(
        "{} / {} peaks at {}{p99}",
        s.target,
        s.placement,
        s.peak.headline()
    );
    if let Some(e) = s.peak.exclusions() {
        text.push_str(&format!(" ({e})"));
    }
    if let Some(n) = s.peak.noise_text() {
        text.push_str(&format!("; {n}"));
    }
    text.push_str(&peak_disturbed(s));
    text.push('.');
    match (&s.usl, &s.usl_caveat) {
        (Some(u), None) => text.push_str(&usl_sentence(u)),
        (Some(_), Some(_)) => text.push_str(" Its USL fit is not a finding (see the caveat)."),
        _ => {}
    }
    text
}

/// What a fit without a caveat says, by [`UslFit::reading`]: the term it names, or why its
/// term is an extrapolation; nothing when it scales linearly over the levels measured.
fn usl_sentence(u: &UslFit) -> String {
    let largest = units::grouped(u.largest_n.round() as u64);
    match u.reading() {
        UslReading::Linear => String::new(),
        UslReading::Limit {
            term: UslTerm::Coherency,
            onset_n,
        } => format!(
            " The USL fit (R² {:.3}) says coherency limits it (its peak at {} clients).",
            u.r2,
            units::approx_count(onset_n)
        ),
        UslReading::Limit { term, .. } => {
            format!(" The USL fit (R² {:.3}) says {} limits it.", u.r2, term.name())
        }
        UslReading::Extrapolation {
            term: UslTerm::Coherency,
            onset_n,
            ..
        } => format!(
            " The USL fit peaks at {} clients, beyond twice the largest level measured ({largest}): an extrapolation, not a finding.",
            units::approx_count(onset_n)
        ),
        UslReading::Extrapolation { onset_n, .. } => format!(
            " The USL fit's contention bends it only from {} clients, beyond twice the largest level measured ({largest}): an extrapolation, not a finding.",
            units::approx_count(onset_n)
        ),
    }
}

/// The scalability table's "limited by": the term the fit names, and why it names none.
fn usl_limited_by(u: &UslFit, caveat: Option<&String>) -> String {
    if caveat.is_some() {
        return "– (see caveat)".into();
    }
    match u.reading() {
        UslReading::Linear => "none".into(),
        UslReading::Limit { term, .. } => term.name().into(),
        UslReading::Extrapolation { .. } => "– (extrapolation)".into(),
    }
}

/// Each series' peak as the run's last lines print it: "reactor / shared  peak 125351 req/s
/// at 8 clients (left out: ...)".
pub fn peak_lines(a: &RunAnalysis) -> Vec<String> {
    a.series
        .iter()
        .map(|s| {
            format!(
                "{:>12} / {:<10} peak {}{}",
                s.target,
                s.placement,
                s.peak.sentence(),
                peak_disturbed(s)
            )
        })
        .collect()
}

/// " — disturbed: other processes took 69% of ..." when the peak's level was kept though
/// disturbed (`run --keep-disturbed`), so that the peak is never read without it.
fn peak_disturbed(s: &SeriesAnalysis) -> String {
    peak_point(s)
        .and_then(|p| p.disturbed.as_deref())
        .map_or(String::new(), |d| format!(" — disturbed: {d}"))
}

/// The conclusions as one section, rendered by report.md and report.html alike (empty when
/// there are none).
pub fn conclusions_doc(a: &RunAnalysis) -> Doc {
    let mut out = Doc::new();
    let lines = conclusions(a);
    if lines.is_empty() {
        return out;
    }
    out.heading("Conclusions");
    out.styled_list(
        "conclusions",
        lines.into_iter().map(|l| (String::new(), l)).collect(),
    );
    out
}

/// The peak of each series as a header and rows of unescaped cells.
pub fn peak_rows(a: &RunAnalysis) -> (Vec<String>, Vec<Vec<String>>) {
    let header = [
        "target",
        "placement",
        "peak (req/s)",
        "at",
        "p99 there",
        "ok steps",
        "left out",
    ]
    .map(String::from)
    .to_vec();
    let rows = a
        .series
        .iter()
        .map(|s| {
            let at = s
                .points
                .iter()
                .find(|p| Some(p.clients) == s.peak.clients && p.rate_rps == s.peak.rate_rps);
            vec![
                s.target.clone(),
                s.placement.clone(),
                opt(s.peak.throughput_rps, 0),
                s.peak
                    .clients
                    .map_or("–".into(), |c| peak::level_text(c, s.peak.rate_rps)),
                at.map_or("–".into(), LoadPoint::p99_text),
                s.points
                    .iter()
                    .map(|p| p.repetitions)
                    .sum::<usize>()
                    .to_string(),
                s.peak.exclusions().map_or("–".into(), |e| {
                    e.trim_start_matches("left out: ").to_string()
                }),
            ]
        })
        .collect();
    (header, rows)
}

/// "Peak of each series" and its table: the one definition of a peak.
pub fn peak_section(a: &RunAnalysis) -> Doc {
    let mut out = Doc::new();
    if a.series.is_empty() {
        return out;
    }
    out.heading("Peak of each series");
    out.paragraph(PEAK_DEFINITION);
    let (header, rows) = peak_rows(a);
    out.table(Table::figures(header, rows));
    out
}

/// How the peak is defined, as the reports say it.
pub const PEAK_DEFINITION: &str = "The peak is the highest mean throughput over the load levels \
    that measured the server: levels whose load generator was saturated, or whose requests \
    failed too often, are left out and named. Its p99 comes from the repetitions' histograms \
    merged, with the single repetitions' p99 range beside it.";

/// The analysis' sections: scalability, Little's law, latency modes, noise, comparisons.
pub fn analysis_sections(a: &RunAnalysis) -> Doc {
    let mut out = Doc::new();
    if a.series.is_empty() {
        return out;
    }
    scalability(&mut out, a);
    little_section(&mut out, a);
    modes_section(&mut out, a);
    noise_section(&mut out, a);
    comparisons_section(&mut out, a);
    if !a.notes.is_empty() {
        out.heading("Analysis notes");
        out.list(a.notes.iter().cloned());
    }
    out
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_string(), |x| format!("{x:.digits$}"))
}

/// The knee/USL summary as a header and rows of unescaped cells, one row per series: the
/// markdown and the HTML report both render it.
pub fn scalability_rows(a: &RunAnalysis) -> (Vec<String>, Vec<Vec<String>>) {
    let header = [
        "target",
        "placement",
        "peak req/s (at)",
        "saturation",
        "throughput knee",
        "latency knee",
        "busy",
        "λ req/s",
        "σ",
        "κ",
        "N*",
        "X(N*) req/s",
        "R²",
        "limited by",
    ]
    .map(String::from)
    .to_vec();
    let rows = a
        .series
        .iter()
        .map(|s| {
            let k = s.knee.as_ref();
            let u = s.usl.as_ref();
            vec![
                s.target.clone(),
                s.placement.clone(),
                peak_cell(&s.peak),
                opt(k.map(|k| k.saturation), 0),
                opt(k.and_then(|k| k.throughput_knee), 0),
                opt(k.and_then(|k| k.latency_knee), 0),
                opt(k.and_then(|k| k.busy), 0),
                opt(u.map(|u| u.lambda), 0),
                opt(u.map(|u| u.sigma), 4),
                opt(u.map(|u| u.kappa), 6),
                opt(u.and_then(|u| u.n_star), 1),
                opt(u.and_then(|u| u.x_max), 0),
                opt(u.map(|u| u.r2), 3),
                u.map_or("–".into(), |u| usl_limited_by(u, s.usl_caveat.as_ref())),
            ]
        })
        .collect();
    (header, rows)
}

/// The peak as the scalability table shows it: "125351 (8)".
fn peak_cell(p: &Peak) -> String {
    match (p.throughput_rps, p.clients) {
        (Some(x), Some(c)) => format!("{x:.0} ({})", load_label(c, p.rate_rps)),
        _ => "–".into(),
    }
}

fn scalability(out: &mut Doc, a: &RunAnalysis) {
    out.heading("Scalability: knee and USL");
    out.paragraph(
        "Throughput knee: where adding clients stops paying (Kneedle); saturation: the fewest \
         clients within 5% of the maximum; busy: the most clients with the server's CPUs still \
         under 70% (the fewest, when every level before saturation was busier). USL: X(N) = λN / (1 + σ(N−1) + κN(N−1)), fitted on every repetition; \
         client-saturated steps are left out.",
    );
    let (header, rows) = scalability_rows(a);
    out.table(Table::figures(header, rows));
    out.list(a.series.iter().flat_map(|s| {
        let name = format!("{} / {}", s.target, s.placement);
        series_remarks(s)
            .into_iter()
            .map(move |line| format!("{name}: {line}"))
    }));
}

/// What the scalability table cannot hold, per series: why there is no USL fit or why it is
/// not a finding, and the load levels left out of the peak and the fits.
pub fn series_remarks(s: &SeriesAnalysis) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(note) = &s.usl_note {
        lines.push(note.clone());
    }
    if let Some(caveat) = &s.usl_caveat {
        lines.push(format!("USL caveat: {caveat}"));
    }
    if let Some(excluded) = s.peak.exclusions() {
        lines.push(format!("{excluded} (from the peak and the fits)"));
    }
    lines
}

/// The Little's-law checks as a header and rows of unescaped cells, one row per closed-loop
/// step in load order: the markdown and the HTML report both render it.
pub fn little_rows(a: &RunAnalysis) -> (Vec<String>, Vec<Vec<String>>) {
    let header = [
        "target",
        "placement",
        "clients",
        "rep",
        "L",
        "X (req/s)",
        "predicted R",
        "measured R",
        "X·R / L",
        "flag",
    ]
    .map(String::from)
    .to_vec();
    let rows = a
        .series
        .iter()
        .flat_map(|s| {
            s.little.iter().map(move |r| {
                let c = &r.check;
                vec![
                    s.target.clone(),
                    s.placement.clone(),
                    r.clients.to_string(),
                    r.rep.to_string(),
                    format!("{:.0}", c.inflight),
                    format!("{:.0}", r.throughput_rps),
                    units::duration_us(c.predicted_latency),
                    units::duration_us(c.measured_latency),
                    format!("{:.2}", c.ratio),
                    little_flag(r),
                ]
            })
        })
        .collect();
    (header, rows)
}

/// Whether the Little's-law table tells something: a row is off, or its figures come from an
/// external tool. A closed loop of our own engine holds by construction (X·R/L = 1.00 at every
/// step), so then one line says so.
pub fn little_informative(a: &RunAnalysis) -> bool {
    a.series
        .iter()
        .flat_map(|s| &s.little)
        .any(|r| r.external_client || r.check.flag.is_some() || (r.check.ratio - 1.0).abs() > 0.1)
}

/// The one line shown instead of a table of 1.00s.
pub fn little_holds_line(a: &RunAnalysis) -> String {
    let steps = a.series.iter().map(|s| s.little.len()).sum::<usize>();
    format!(
        "Little's law holds: X·R/L is within 10% of 1 at every one of the {steps} closed-loop \
         steps (L = clients × connections × depth requests in flight, X the throughput, R the \
         mean latency), so the latency is what the requests in flight explain."
    )
}

fn little_section(out: &mut Doc, a: &RunAnalysis) {
    out.heading("Little's law");
    let (header, rows) = little_rows(a);
    if rows.is_empty() {
        out.paragraph("No closed-loop step with an in-flight count: nothing to check.");
        return;
    }
    if !little_informative(a) {
        out.paragraph(little_holds_line(a));
        return;
    }
    out.paragraph(
        "L = clients × connections × depth; the law predicts a mean latency of L / X. \
         X·R / L is 1.00 when it holds; a flag marks more than 10% off.",
    );
    out.table(Table::figures(header, rows));
}

fn little_flag(r: &LittleRow) -> String {
    let flag = r.check.flag.clone().unwrap_or_default();
    match (r.client_saturated, flag.is_empty()) {
        (false, _) => flag,
        (true, true) => "client saturated".to_string(),
        (true, false) => format!("client saturated; {flag}"),
    }
}

fn show_mode(m: &Mode) -> String {
    format!(
        "{:.0}% at {} ({})",
        m.share * 100.0,
        units::duration_us(m.centre),
        units::duration_range_us(m.low, m.high)
    )
}

fn modes_section(out: &mut Doc, a: &RunAnalysis) {
    let rows: Vec<(&SeriesAnalysis, &StepModes)> = a
        .series
        .iter()
        .flat_map(|s| s.modes.iter().map(move |m| (s, m)))
        .filter(|(_, m)| !m.modes.is_empty())
        .collect();
    out.heading("Latency modes");
    if rows.is_empty() {
        out.paragraph("No step histogram (hist/*.hlog) to read.");
        return;
    }
    let bimodal = rows.iter().filter(|(_, m)| m.modes.len() > 1).count();
    out.paragraph(format!(
        "Populations in each step's latency histogram: {bimodal} of {} steps have two \
         (a fast and a slow population, as a round-trip histogram split by a cache miss).",
        rows.len()
    ));
    let mut t = Table::new(
        &[
            "target",
            "placement",
            "clients",
            "rep",
            "populations",
            "fast (share at peak, range)",
            "slow (share at peak, range)",
        ],
        "llrrrll",
    );
    for (s, m) in rows {
        t.row(vec![
            s.target.clone(),
            s.placement.clone(),
            load_label(m.clients, m.rate_rps),
            m.rep.to_string(),
            m.modes.len().to_string(),
            show_mode(&m.modes[0]),
            m.modes.get(1).map_or("–".to_string(), show_mode),
        ]);
    }
    out.table(t);
}

fn noise_section(out: &mut Doc, a: &RunAnalysis) {
    out.heading("Noisy steps");
    let repeated = a
        .series
        .iter()
        .flat_map(|s| &s.points)
        .any(|p| p.repetitions >= 2);
    if !repeated {
        out.paragraph(
            "No repetitions: the spread of a step is unknown (set `repetitions` to 2 or more).",
        );
        return;
    }
    if a.auto_repetitions {
        auto_repetitions_table(out, a);
    }
    let repeated: Vec<(&SeriesAnalysis, &LoadPoint)> = a
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(move |p| (s, p)))
        .filter(|(_, p)| p.repetitions >= 2)
        .collect();
    let noisy = repeated.iter().filter(|(_, p)| p.noisy).count();
    if noisy == 0 {
        out.paragraph("Every repeated step's throughput varied by less than 3% (CV).");
    } else {
        out.paragraph(format!(
            "{noisy} load level(s) varied by 3% or more (CV) over their repetitions: do not read a knee into them."
        ));
    }
    out.paragraph(
        "Each repeated level: its p99 from the repetitions' histograms merged, the single \
         repetitions' p99 range beside it.",
    );
    let mut t = Table::new(
        &[
            "target",
            "placement",
            "clients",
            "repetitions",
            "throughput (req/s, mean ± 95% CI)",
            "CV",
            "p99 (reps)",
            "noisy",
        ],
        "llrrrrrl",
    );
    for (s, p) in repeated {
        t.row(vec![
            s.target.clone(),
            s.placement.clone(),
            load_label(p.clients, p.rate_rps),
            p.repetitions.to_string(),
            show_summary(&p.throughput_rps, Metric::ThroughputRps),
            format!("{:.1}%", p.throughput_rps.cv * 100.0),
            p.p99_text(),
            if p.noisy { "yes" } else { "no" }.to_string(),
        ]);
    }
    out.table(t);
}

/// Under `repetitions = "auto"`: the steps that needed more than the 2 runs a spread needs,
/// and whether they settled under the CV target or stopped at the cap still noisy.
fn auto_repetitions_table(out: &mut Doc, a: &RunAnalysis) {
    let rule = format!(
        "`repetitions = \"auto\"`: each step ran until its throughput's CV fell under {:.0}% (2 to {} runs).",
        stats::AUTO_CV_TARGET * 100.0,
        stats::AUTO_MAX_REPETITIONS
    );
    let more: Vec<(&SeriesAnalysis, &LoadPoint)> = a
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(move |p| (s, p)))
        .filter(|(_, p)| p.repetitions > 2)
        .collect();
    if more.is_empty() {
        out.paragraph(format!("{rule} Every step settled after 2 runs."));
        return;
    }
    out.paragraph(format!("{rule} Steps that needed more runs:"));
    let mut t = Table::new(
        &["target", "placement", "clients", "runs", "CV", "outcome"],
        "llrrrl",
    );
    for (s, p) in more {
        let outcome = if p.noisy {
            format!("still noisy after {} runs", p.repetitions)
        } else {
            "settled".to_string()
        };
        t.row(vec![
            s.target.clone(),
            s.placement.clone(),
            load_label(p.clients, p.rate_rps),
            p.repetitions.to_string(),
            format!("{:.1}%", p.throughput_rps.cv * 100.0),
            outcome,
        ]);
    }
    out.table(t);
}

fn comparisons_section(out: &mut Doc, a: &RunAnalysis) {
    if a.comparisons.is_empty() {
        return;
    }
    out.heading("Comparisons");
    out.list(a.comparisons.iter().map(|c| c.sentence.clone()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::run::tests::ok_step;
    use crate::analyze::run::{analyze_steps, USL_MIN_R2};
    use crate::record::steps::StepResult;
    use crate::report::RunData;

    #[test]
    fn a_step_without_latency_still_counts_for_throughput() {
        let steps = vec![
            ok_step(1, 100.0, 10_000.0),
            ok_step(2, 190.0, f64::NAN),
            ok_step(3, 260.0, 11_538.0),
            ok_step(4, 300.0, 13_333.0),
        ];
        let run = RunData {
            steps,
            ..RunData::default()
        };
        let a = analyze_steps(&run.steps);
        let s = &a.series[0];
        assert_eq!(s.points.len(), 4);
        assert_eq!(s.points[1].mean_latency_us, None);
        assert!(s.usl.is_some(), "{:?}", s.usl_note);
        let little: Vec<usize> = s.little.iter().map(|r| r.clients).collect();
        assert_eq!(little, [1, 3, 4]);
        assert!((s.little[0].check.ratio - 1.0).abs() < 1e-9);
        let md = analysis_sections(&a).to_markdown();
        assert!(
            md.contains("No repetitions: the spread of a step is unknown"),
            "{md}"
        );
        // Every row is 1.00: one line instead of the table.
        assert!(md.contains("Little's law holds"), "{md}");
        assert!(!md.contains("| t | p | 4 | 0 | 4 | 300 |"), "{md}");
    }

    #[test]
    fn littles_law_table_only_when_it_tells_something() {
        let steps = || vec![ok_step(1, 100.0, 10_000.0), ok_step(2, 200.0, 10_000.0)];
        let md = |steps: Vec<StepResult>| analysis_sections(&analyze_steps(&steps)).to_markdown();
        let holds = md(steps());
        assert!(holds.contains("within 10% of 1 at every one of the 2 closed-loop steps"));
        assert!(!holds.contains("| X·R / L |"), "{holds}");
        // One row 50% off: the table, with every row.
        let mut off = steps();
        off[1].load.as_mut().unwrap().latency_us.mean = 15_000.0;
        let table = md(off);
        assert!(
            table.contains("| t | p | 2 | 0 | 2 | 200 | 10.0 ms | 15.0 ms | 1.50 |"),
            "{table}"
        );
        assert!(
            table.contains("| t | p | 1 | 0 | 1 | 100 | 10.0 ms | 10.0 ms | 1.00 |"),
            "{table}"
        );
        // An external tool's figures: the table even when every row holds.
        let mut external = steps();
        external[0].figures.tool = Some(Default::default());
        assert!(md(external).contains("| X·R / L |"));
    }

    #[test]
    fn usl_on_four_levels_carries_its_caveat_and_no_limit_label() {
        // A clean contention curve: the fit is excellent, but 4 levels do not make a finding.
        let x = |n: f64| 1000.0 * n / (1.0 + 0.2 * (n - 1.0));
        let run = |levels: &[usize]| RunData {
            steps: levels
                .iter()
                .map(|&n| ok_step(n, x(n as f64), 1000.0))
                .collect(),
            ..RunData::default()
        };
        let four = analyze_steps(&run(&[1, 2, 4, 8]).steps);
        let s = &four.series[0];
        assert!(s.usl.as_ref().unwrap().r2 > 0.99);
        let caveat = s.usl_caveat.as_deref().expect("a caveat");
        assert!(
            caveat.contains("4 server-limited client counts"),
            "{caveat}"
        );
        let (_, rows) = scalability_rows(&four);
        assert_eq!(rows[0].last().unwrap(), "– (see caveat)");
        let md = analysis_sections(&four).to_markdown();
        assert!(
            md.contains("USL caveat: fitted on 4 server-limited"),
            "{md}"
        );
        // Six levels and a good fit: a finding, with its label.
        let six = analyze_steps(&run(&[1, 2, 4, 8, 16, 32]).steps);
        assert_eq!(six.series[0].usl_caveat, None);
        let (_, rows) = scalability_rows(&six);
        assert_eq!(rows[0].last().unwrap(), "contention");
        // A poor fit on many levels: R² names the caveat.
        let noisy: Vec<usize> = vec![1, 2, 3, 4, 5, 6];
        let mut bad = run(&noisy);
        for (i, s) in bad.steps.iter_mut().enumerate() {
            s.load.as_mut().unwrap().throughput_rps = if i % 2 == 0 { 1000.0 } else { 3000.0 };
        }
        let a = analyze_steps(&bad.steps);
        if let Some(u) = &a.series[0].usl {
            assert!(u.r2 < USL_MIN_R2);
            assert!(a.series[0].usl_caveat.as_deref().unwrap().contains("R²"));
        }
    }

    /// Doubling client counts from 1 to 1024, exactly on a USL curve with σ = 1e-5.
    fn usl_series(kappa: f64) -> RunAnalysis {
        let steps: Vec<StepResult> = std::iter::successors(Some(1usize), |n| Some(n * 2))
            .take_while(|&n| n <= 1024)
            .map(|n| {
                let x = crate::analyze::usl::model(1000.0, 1e-5, kappa, n as f64);
                ok_step(n, x, 1e6 * n as f64 / x)
            })
            .collect();
        analyze_steps(&steps)
    }

    #[test]
    fn a_usl_peak_past_twice_the_largest_level_is_called_an_extrapolation() {
        // Issue 40: R² 1.000 and κ = 5e-8 up to 1024 clients once read "The USL fit (R² 1.000)
        // says coherency limits it", with its peak at ~4,470 clients.
        let far = usl_series(5e-8);
        let text = series_conclusion(&far.series[0]);
        assert!(
            text.ends_with(" The USL fit peaks at 4,500 clients, beyond twice the largest level measured (1,024): an extrapolation, not a finding."),
            "{text}"
        );
        assert!(!text.contains("limits it"), "{text}");
        let (_, rows) = scalability_rows(&far);
        assert_eq!(rows[0].last().unwrap(), "– (extrapolation)");
        // κ = 5e-7: the peak at ~1,414 clients lies within twice 1024, a finding.
        let near = usl_series(5e-7);
        let text = series_conclusion(&near.series[0]);
        assert!(
            text.ends_with(
                " The USL fit (R² 1.000) says coherency limits it (its peak at 1,400 clients)."
            ),
            "{text}"
        );
        let (_, rows) = scalability_rows(&near);
        assert_eq!(rows[0].last().unwrap(), "coherency");
    }

    #[test]
    fn the_diagnosis_quotes_kappa_only_when_the_fit_names_coherency() {
        // A fall from 8 to 64 clients on a USL curve whose peak (N* ≈ 9.9) lies within twice
        // the largest level: the coherency rule quotes κ, at high confidence.
        let steps: Vec<StepResult> = std::iter::successors(Some(1usize), |n| Some(n * 2))
            .take_while(|&n| n <= 64)
            .map(|n| {
                let x = crate::analyze::usl::model(1000.0, 0.02, 0.01, n as f64);
                ok_step(n, x, 1e6 * n as f64 / x)
            })
            .collect();
        let a = analyze_steps(&steps);
        let d = &a.diagnosis[0];
        assert!(
            d.sentence.contains("(USL κ = 0.010, N* = 9.9)"),
            "{}",
            d.sentence
        );
        // The same fit said to reach only 4 clients: its peak is past twice that, the rule
        // rests on the measured fall alone.
        let mut s = a.series[0].clone();
        s.usl.as_mut().unwrap().largest_n = 4.0;
        let refs: Vec<&StepResult> = steps.iter().collect();
        let d = crate::analyze::diagnosis::diagnose(&s, &refs);
        assert!(
            d.sentence.contains("throughput falls from"),
            "{}",
            d.sentence
        );
        assert!(!d.sentence.contains("USL"), "{}", d.sentence);
    }

    /// Two servers that each fill their one CPU: the CPU-per-request ratio is the throughput
    /// ratio, and one sentence says why; a side whose generator saturated names no winner.
    #[test]
    fn coinciding_ratios_are_explained_and_a_saturated_side_names_no_winner() {
        use crate::analyze::compare::spec::{parse_comparison, resolve};
        use crate::record::observed::{Observation, TreeUsage};
        let step = |target: &str, x: f64, rep: usize| {
            let mut s = ok_step(4, x * (1.0 + 0.01 * rep as f64), 1000.0);
            s.target = target.into();
            s.rep = rep;
            s.server_cpus = "0".into();
            let obs = Observation {
                window_s: 1.0,
                server: Some(TreeUsage {
                    user_s: 1.0,
                    ..TreeUsage::default()
                }),
                ..Observation::default()
            };
            s.server = Some(obs.into());
            s.per_request.cpu_us_per_req.total = Some(1e6 / s.throughput_rps().unwrap());
            s
        };
        let steps: Vec<StepResult> = (0..3)
            .flat_map(|r| [step("a", 2000.0, r), step("b", 1000.0, r)])
            .collect();
        let mut a = analyze_steps(&steps);
        for metric in ["throughput_rps", "cpu_us_per_req"] {
            let spec: toml::Value =
                toml::from_str(&format!("a = \"a\"\nb = \"b\"\nmetric = \"{metric}\"")).unwrap();
            a.comparisons
                .extend(resolve(&parse_comparison(&spec).unwrap(), &steps).unwrap());
        }
        let v = verdict_sentences(&a);
        assert_eq!(v.len(), 3, "{v:?}");
        assert!(v[0].starts_with("a is faster than b: 2.00x ["), "{v:?}");
        assert!(
            v[2].contains(
                "ratios of a/p at 4 clients against b/p at 4 clients are the same (2.00x)"
            ) && v[2].contains("both servers fill their CPUs (100% and 100% busy)"),
            "{v:?}"
        );
        // The same sentences close the Conclusions and stdout's lines.
        let c = conclusions(&a);
        assert!(v.iter().all(|x| c.contains(x)), "{c:?}");
        let out = stdout_lines(&a);
        assert!(out.contains(&format!("verdict: {}", v[2])), "{out:?}");
        assert!(
            out.iter().any(|l| l.starts_with("diagnosis: a/p ")),
            "{out:?}"
        );
        // B's generator saturated: its step measured the client.
        a.series[1].points[0].client_saturated = true;
        let v = verdict_sentences(&a);
        assert!(
            v[0].contains("no winner: the load generator saturated during b's step"),
            "{v:?}"
        );
    }

    /// `--keep-disturbed` kept the peak's level, disturbed: its conclusion and stdout's peak
    /// line say by what; a peak on a clean level says nothing of the others. Catches a peak
    /// pasted without its caveat (the trial beside a cargo build printed "peak 1431 req/s at
    /// 8 clients" with rustc on 69% of nginx's CPU) and a caveat put on a clean peak.
    #[test]
    fn a_peak_on_a_kept_disturbed_level_says_so_in_every_line() {
        let disturbed = |mut s: StepResult| {
            s.figures.disturbed = Some(crate::record::figures::Disturbance {
                server_cpus_others_pct: Some(69.0),
                threshold_pct: 10.0,
                kept: true,
                ..Default::default()
            });
            s
        };
        let steps = vec![
            ok_step(1, 1000.0, 1000.0),
            disturbed(ok_step(2, 1900.0, 1050.0)),
            ok_step(4, 1500.0, 2600.0),
        ];
        let a = analyze_steps(&steps);
        let said = " — disturbed: other processes took 69% of the server's CPUs";
        assert!(
            series_conclusion(&a.series[0]).contains(said),
            "{}",
            series_conclusion(&a.series[0])
        );
        assert!(peak_lines(&a)[0].contains(said), "{:?}", peak_lines(&a));
        let clean = vec![
            ok_step(1, 1000.0, 1000.0),
            ok_step(2, 1900.0, 1050.0),
            disturbed(ok_step(4, 1500.0, 2600.0)),
        ];
        let a = analyze_steps(&clean);
        assert!(
            !peak_lines(&a)[0].contains("disturbed"),
            "{:?}",
            peak_lines(&a)
        );
    }

    #[test]
    fn names_are_escaped() {
        let mut step = ok_step(1, 100.0, 10_000.0);
        step.target = "<script>|x".into();
        let run = RunData {
            steps: vec![step],
            ..RunData::default()
        };
        let md = analysis_sections(&analyze_steps(&run.steps)).to_markdown();
        assert!(md.contains("| &lt;script&gt;\\|x | p |"), "{md}");
        assert!(!md.contains("<script>"));
    }
}

#[cfg(test)]
mod props;
