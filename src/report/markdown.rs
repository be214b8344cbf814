//! `report.md`: the results table of a run, one section per target, for a pull request.
//! (The reports issue adds the analysis tables.)

use std::fmt::Write as _;

use super::cell::escape;
use super::doc::{Doc, Table};
use super::{findings, Exporter, Report, RunData};
use crate::analyze::run::RunAnalysis;
use crate::record::steps::{StepResult, StepStatus};
use crate::units;

/// The markdown exporter.
#[derive(Debug, Clone, Copy)]
pub struct Markdown;

impl Exporter for Markdown {
    fn file_name(&self) -> &'static str {
        "report.md"
    }

    fn render(&self, report: &Report) -> String {
        let (run, analysis) = (&report.run, &report.analysis);
        let mut out = format!("# {}\n\n", escape(&run.name));
        // The gate a CI job reads first, then why the curve stops: both before any table.
        out.push_str(&super::gates::doc(analysis).to_markdown());
        out.push_str(&super::diagnosis::doc(analysis).to_markdown());
        out.push_str(&super::conditions::doc(run).to_markdown());
        let _ = writeln!(out, "{}\n", step_counts(&run.steps));
        not_observed(&mut out, &run.steps);
        observer_cost(&mut out, &run.steps);
        for note in &run.notes {
            let _ = writeln!(out, "- {}", escape(note));
        }
        if !run.notes.is_empty() {
            out.push('\n');
        }
        out.push_str(&findings::conclusions_doc(analysis).to_markdown());
        out.push_str(&sections(run, analysis).to_markdown());
        out.push_str(&super::profiles::markdown(&run.profiles));
        out
    }
}

/// The sections after the conditions and conclusions (peaks, results, what steps carry beyond
/// the load, the analysis), as one model report.html renders too.
pub fn sections(run: &RunData, a: &RunAnalysis) -> Doc {
    let mut out = findings::peak_section(a);
    out.heading("Results");
    out.table(results_table(&run.steps));
    out.append(super::budget::doc(a));
    out.append(super::extras::sections(&run.steps));
    out.append(super::kvd::sections(&run.steps));
    out.append(super::study::sections(&run.steps));
    out.append(findings::analysis_sections(a));
    out
}

/// "12 steps: 9 ok, 1 failed, 1 skipped. 1 step ended with too many errors." (the last
/// sentence only when one did). The planned steps: a drift check is said apart.
pub fn step_counts(all: &[StepResult]) -> String {
    let steps: Vec<&StepResult> = all.iter().filter(|s| !s.figures.drift_check).collect();
    let n = |st| steps.iter().filter(|s| s.status == st).count();
    let total = steps.len();
    let mut text = format!(
        "{total} step{}: {} ok, {} failed, {} skipped.",
        if total == 1 { "" } else { "s" },
        n(StepStatus::Ok),
        n(StepStatus::Failed),
        n(StepStatus::Skipped),
    );
    match n(StepStatus::Errors) {
        0 => {}
        1 => text.push_str(" 1 step ended with too many errors."),
        e => text.push_str(&format!(" {e} steps ended with too many errors.")),
    }
    match n(StepStatus::Disturbed) {
        0 => {}
        1 => text.push_str(" 1 step was disturbed (other processes shared its CPUs): left out of the analysis."),
        d => text.push_str(&format!(" {d} steps were disturbed (other processes shared their CPUs): left out of the analysis.")),
    }
    match all.len() - total {
        0 => {}
        1 => text.push_str(" 1 series' peak was measured again after its throughput fell (a drift check: see the notes)."),
        k => text.push_str(&format!(" {k} series' peaks were measured again after their throughput fell (drift checks: see the notes).")),
    }
    text
}

/// The targets whose server-side figures were not observed, with why (once each).
fn not_observed(out: &mut String, steps: &[StepResult]) {
    let mut seen: Vec<&str> = Vec::new();
    for s in steps {
        if let (Some(why), false) = (s.server_not_observed(), seen.contains(&s.target.as_str())) {
            seen.push(&s.target);
            let _ = writeln!(
                out,
                "Target {}: server-side figures not observed ({}).\n",
                escape(&s.target),
                escape(why)
            );
        }
    }
}

/// What stairbench's own observers cost, so it can be weighed against the figures.
fn observer_cost(out: &mut String, steps: &[StepResult]) {
    let cpu_s: f64 = steps.iter().filter_map(StepResult::observer_cpu_s).sum();
    let window_s: f64 = steps
        .iter()
        .filter(|s| s.observer_cpu_s().is_some())
        .filter_map(|s| s.load.as_ref().map(|l| l.duration_s))
        .sum();
    if window_s > 0.0 {
        let _ = writeln!(
            out,
            "The observers used {cpu_s:.3} s of CPU over {window_s:.1} s of measured windows ({:.2}% of one CPU).\n",
            100.0 * cpu_s / window_s
        );
    }
}

fn results_table(steps: &[StepResult]) -> Table {
    let mut t = Table::new(
        &[
            "target",
            "placement",
            "clients",
            "rep",
            "status",
            "throughput (req/s)",
            "mean",
            "p50",
            "p99",
            "server CPU/req",
            "cs/req",
            "client saturated",
            "others on its CPUs (server / client)",
            "cpus (server / client)",
        ],
        "llrrlrrrrrrlll",
    );
    let f = |v: Option<f64>, digits: usize| {
        v.filter(|x| x.is_finite())
            .map_or("–".to_string(), |x| format!("{x:.digits$}"))
    };
    let d = |v: Option<f64>| v.map_or("–".to_string(), units::duration_us);
    for s in steps {
        let l = s.load.as_ref();
        let status = match (&s.status, &s.reason) {
            (StepStatus::Ok, _) if s.figures.drift_check => {
                "ok: drift check (the peak measured again, not in its level's figures)".to_string()
            }
            (StepStatus::Ok, _) => "ok".to_string(),
            // The status in lower case; the reason as written (an error names files, hosts
            // and programs, whose case matters).
            (st, r) => format!(
                "{}: {}",
                format!("{st:?}").to_lowercase(),
                r.as_deref()
                    .unwrap_or("")
                    .lines()
                    .collect::<Vec<_>>()
                    .join(" / ")
            ),
        };
        let clients = match s.rate_rps {
            Some(r) => format!("{} @ {r:.0}/s", s.clients),
            None => s.clients.to_string(),
        };
        t.row(vec![
            s.target.clone(),
            s.placement.clone(),
            clients,
            s.rep.to_string(),
            status,
            f(l.map(|l| l.throughput_rps), 0),
            d(l.map(|l| l.latency_us.mean)),
            d(l.map(|l| l.latency_us.p50)),
            d(l.map(|l| l.latency_us.p99)),
            server_cell(s, d(s.per_request().cpu_us_per_req.total)),
            server_cell(s, f(s.per_request().cs_per_req, 3)),
            l.map_or("–", |l| if l.client_saturated { "yes" } else { "no" })
                .to_string(),
            others_cell(s),
            format!(
                "{} / {}",
                server_cell(s, s.server_cpus.clone()),
                s.client_cpus
            ),
        ]);
    }
    t
}

/// Other processes' share of each side's CPUs in the step's window, and who was busiest when
/// the step was disturbed: "55% / 0% (rustc, pid 812, 41%)"; "–" where not observed.
fn others_cell(s: &StepResult) -> String {
    let Some(n) = s.observation().and_then(|o| o.neighbours.as_ref()) else {
        return "–".into();
    };
    let pct = |x: Option<f64>| x.map_or("–".to_string(), |p| format!("{p:.0}%"));
    let mut cell = format!(
        "{} / {}",
        pct(n.server_cpus_others_pct),
        pct(n.client_cpus_others_pct)
    );
    if let Some(who) = s
        .figures
        .disturbed
        .as_ref()
        .and_then(|d| d.busiest.as_ref())
    {
        let share = who.server_cpus_pct.max(who.client_cpus_pct);
        cell.push_str(&format!(" ({}, pid {}, {share:.0}%)", who.name, who.pid));
    }
    cell
}

/// A server-side cell: "not observed" when the step's server was not (a server already
/// running with no process to observe it by).
fn server_cell(s: &StepResult, cell: String) -> String {
    match s.server_not_observed() {
        Some(_) => "not observed".into(),
        None => cell,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_step_shows_its_reason_escaped() {
        let mut s = StepResult::empty("x".into(), "<script>", "shared", 2, 0);
        s.status = StepStatus::Failed;
        s.reason = Some("server died | badly\nssh: Connection refused".into());
        let run = RunData {
            name: "t".into(),
            steps: vec![s],
            ..RunData::default()
        };
        let md = Markdown.render(&Report::new(run));
        assert!(
            md.contains(
                "| &lt;script&gt; | shared | 2 | 0 | failed: server died \\| badly / ssh: Connection refused |"
            ),
            "{md}"
        );
        assert!(md.contains("1 step: 0 ok, 1 failed, 0 skipped.\n"));
    }

    #[test]
    fn the_results_table_says_who_else_used_a_steps_cpus() {
        let mut s = crate::record::steps::tests::full_step();
        s.status = StepStatus::Disturbed;
        s.figures.disturbed = Some(crate::record::figures::Disturbance {
            server_cpus_others_pct: Some(50.0),
            busiest: Some(crate::record::use_cpu::Neighbour {
                pid: 9,
                name: "rustc".into(),
                server_cpus_pct: 41.0,
                ..Default::default()
            }),
            threshold_pct: 10.0,
            ..Default::default()
        });
        assert_eq!(others_cell(&s), "50% / 1% (rustc, pid 9, 41%)");
        s.figures.disturbed = None;
        assert_eq!(others_cell(&s), "50% / 1%");
        s.server = None;
        assert_eq!(others_cell(&s), "–");
    }
}
