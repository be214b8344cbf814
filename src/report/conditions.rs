//! The measurement conditions, the benchkv study's first table, built once for report.md and
//! report.html: the machine (environment.json), the load's shape (the ok steps), the spec's
//! settings, then the environment's warnings.

use super::doc::{Doc, Table};
use crate::record::environment::Environment;
use crate::record::run::{RunData, RunSpec};
use crate::record::steps::{StepResult, StepStatus};

/// The conditions as one table, for both reports (empty when nothing is known).
pub fn doc(run: &RunData) -> Doc {
    let mut d = Doc::new();
    let rows = rows(run);
    if !rows.is_empty() {
        let mut t = Table::new(&["condition", "value"], "ll");
        for (label, value) in rows {
            t.row(vec![label, value]);
        }
        d.table(t);
    }
    d
}

/// The conditions as (parameter, value) rows, in display order; a value not known is left
/// out.
fn rows(run: &RunData) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if let Some(env) = &run.environment {
        environment_rows(env, &mut rows);
    }
    let ok: Vec<&StepResult> = run
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Ok && s.load.is_some())
        .collect();
    load_rows(&ok, &mut rows);
    if let Some(window) = observed_window(&run.steps) {
        rows.push(("observed window".into(), window));
    }
    if let Some(spec) = &run.spec {
        spec_rows(spec, &run.steps, &mut rows);
    }
    for w in run.environment.iter().flat_map(|e| &e.warnings) {
        rows.push(("warning".into(), w.clone()));
    }
    rows
}

fn environment_rows(env: &Environment, rows: &mut Vec<(String, String)>) {
    let known = |s: &str| (!s.is_empty()).then(|| s.to_string());
    let fields = [
        ("host", known(&env.hostname)),
        ("CPU", known(&env.cpu_model)),
        ("CPUs", (env.cpus > 0).then(|| env.cpus.to_string())),
        ("topology", env.topology.as_ref().map(|t| t.summary.clone())),
        ("kernel", known(&env.kernel)),
        ("governor", env.governors_text()),
        ("turbo", known(&env.turbo)),
        ("swap used (kB)", Some(env.swap_used_kb.to_string())),
        (
            "perf software / hardware",
            env.perf
                .as_ref()
                .map(|p| format!("{} / {}", p.software, p.hardware)),
        ),
        (
            "stairbench",
            known(&env.stairbench_version).map(|v| match known(&env.git_revision) {
                Some(g) => format!("{v} ({g})"),
                None => v,
            }),
        ),
    ];
    for (name, value) in fields {
        if let Some(v) = value {
            rows.push((name.into(), v));
        }
    }
}

/// The distinct values of a figure over the ok steps, in the order they first appear.
fn distinct(ok: &[&StepResult], f: impl Fn(&StepResult) -> Option<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for v in ok.iter().filter_map(|s| f(s)) {
        if !seen.contains(&v) {
            seen.push(v);
        }
    }
    seen.join(", ")
}

fn load_rows(ok: &[&StepResult], rows: &mut Vec<(String, String)>) {
    let load = |f: fn(&crate::record::load::LoadReport) -> usize| {
        move |s: &StepResult| s.load.as_ref().map(|l| f(l).to_string())
    };
    for (name, value) in [
        ("clients", distinct(ok, |s| Some(s.clients.to_string()))),
        (
            "connections per step",
            distinct(ok, load(|l| l.connections)),
        ),
        ("queue depth", distinct(ok, load(|l| l.depth))),
        ("generator threads", distinct(ok, load(|l| l.threads))),
        (
            "measured window (s)",
            // Windows under a second are common in quick runs: keep milliseconds.
            distinct(ok, |s| {
                let d = s.load.as_ref()?.duration_s;
                Some(format!("{}", (d * 1000.0).round() / 1000.0))
            }),
        ),
        (
            "placements",
            distinct(ok, |s| {
                Some(format!(
                    "{}: server {} / client {}",
                    s.placement, s.server_cpus, s.client_cpus
                ))
            }),
        ),
    ] {
        if !value.is_empty() {
            rows.push((name.into(), value));
        }
    }
}

/// The span the observers and the per-request figures covered when it is not the measured
/// window (an external tool's whole run), with how many steps it applies to.
fn observed_window(steps: &[StepResult]) -> Option<String> {
    let spans: Vec<&str> = steps
        .iter()
        .filter_map(|s| s.figures.window.as_deref())
        .collect();
    let first = spans.first()?;
    Some(format!("{first}: {} of {} steps", spans.len(), steps.len()))
}

fn spec_rows(spec: &RunSpec, steps: &[StepResult], rows: &mut Vec<(String, String)>) {
    for (key, value) in &spec.settings {
        rows.push((format!("spec: {key}"), value.clone()));
    }
    if !spec.targets.is_empty() {
        let names: Vec<&str> = spec.targets.iter().map(|t| t.name.as_str()).collect();
        rows.push(("spec: targets".into(), names.join(", ")));
    }
    if let Some(threads) = threads_row(spec, steps) {
        rows.push((
            "server --threads (follows the server cpuset)".into(),
            threads,
        ));
    }
}

/// How many server threads each series ran, for the targets whose threads follow the cpuset
/// (otherwise the spec's fixed count is in the target's arguments).
fn threads_row(spec: &RunSpec, steps: &[StepResult]) -> Option<String> {
    let mut series: Vec<(&str, &str)> = Vec::new();
    for s in steps {
        if !series.contains(&(&s.target, &s.placement)) {
            series.push((&s.target, &s.placement));
        }
    }
    let known: Vec<String> = series
        .into_iter()
        .filter_map(|(target, placement)| {
            let t = threads_text(spec, steps, target, placement)?;
            Some(format!("{target} / {placement}: {t}"))
        })
        .collect();
    (!known.is_empty()).then(|| known.join(", "))
}

/// The server threads of a series' steps ("2", "1–4"), when they follow the cpuset.
pub fn threads_text(
    spec: &RunSpec,
    steps: &[StepResult],
    target: &str,
    placement: &str,
) -> Option<String> {
    if !spec.target(target)?.threads_follow_cpuset() {
        return None;
    }
    let counts: Vec<usize> = steps
        .iter()
        .filter(|x| x.target == target && x.placement == placement)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn governors_are_sorted_and_deduplicated_and_warnings_come_last() {
        let env: Environment = serde_json::from_str(
            r#"{"hostname": "h", "cpus": 3, "governors": {"0": "powersave", "1": "performance", "2": "powersave"}, "warnings": ["w"]}"#,
        )
        .unwrap();
        let run = RunData {
            environment: Some(env),
            ..RunData::default()
        };
        let rows = rows(&run);
        let get = |k: &str| rows.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        // In CPU order they are powersave, performance, powersave: a dedup without sorting
        // keeps all three.
        assert_eq!(get("governor"), Some("performance, powersave"));
        assert_eq!(get("CPUs"), Some("3"));
        assert_eq!(
            rows.last().unwrap(),
            &("warning".to_string(), "w".to_string())
        );
    }

    /// environment.json as observe writes it reads back and writes out the same, key for
    /// key. Catches a field of `Environment` that is written but skipped or renamed on the
    /// way back (the report would silently drop it).
    #[test]
    fn environment_json_reads_back_key_for_key() {
        let busy = crate::observe::environment::BusySample {
            cpus: "0".into(),
            busy_pct: 12.5,
            window_s: 0.5,
        };
        let written = crate::observe::environment::environment_with(Some(busy));
        let json = serde_json::to_value(&written).unwrap();
        let read: Environment = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&read).unwrap(), json);
    }
}
