//! What the page shows of a run beyond the analysis, from the run read once ([`RunData`]):
//! the title, the notes, the measurement conditions, the latency histograms and the per-core
//! heat map. The heat map shows the server's cores (the runner's `server_per_core_busy`
//! column), or the load generator's threads in older run directories.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

use super::{CoreHeatMap, LatencyBucket, ReportData, StepHistogram};
use crate::record::run::{CoreBusy, RunData, Whose};
use crate::record::steps::{StepResult, StepStatus};

/// Histogram buckets per doubling of latency (9% wide: enough to split 4–8 µs from 11–16 µs).
const BUCKETS_PER_OCTAVE: f64 = 8.0;

/// The page's data of a run besides the analysis; the heat map shows step `heat_step` (an id
/// of steps.jsonl) when given, else the step the spec's `[report] heat_map` selects, else the
/// busiest step of the first series.
pub fn page_data(run: &RunData, heat_step: Option<&str>) -> ReportData {
    let ok: Vec<&StepResult> = run
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Ok && s.load.is_some())
        .collect();
    let spec = run.spec.as_ref();
    ReportData {
        title: run.name.clone(),
        description: spec.and_then(|s| s.description.clone()),
        // The environment's warnings first, as the page's notes: they qualify every figure.
        notes: run
            .environment
            .iter()
            .flat_map(|e| e.warnings.iter().cloned())
            .chain(run.notes.iter().cloned())
            .collect(),
        conditions: crate::report::conditions::doc(run),
        histograms: ok
            .iter()
            .filter_map(|s| step_histogram(run, s, &ok))
            .collect(),
        heat_map: heat_map(run, &ok, heat_step),
        ..ReportData::default()
    }
}

/// "web · shared · 8 clients", with "(rep 0)" when its level has other repetitions in `ok`
/// (the first one too, so that it is not read as the level's merged figure).
fn step_label(s: &StepResult, ok: &[&StepResult]) -> String {
    let same_level = |x: &StepResult| {
        x.target == s.target
            && x.placement == s.placement
            && x.clients == s.clients
            && x.rate_rps == s.rate_rps
    };
    let repeated = ok.iter().any(|o| same_level(o) && o.rep != s.rep);
    let mut label = format!(
        "{} · {} · {}",
        s.target,
        s.placement,
        crate::analyze::run::peak::clients_text(s.clients)
    );
    if let Some(rate) = s.rate_rps {
        label.push_str(&format!(" at {rate:.0} req/s offered"));
    }
    if repeated || s.rep > 0 {
        let rep = crate::record::steps::rep_label(s.rep);
        label.push_str(&format!(" ({rep})"));
    }
    label
}

/// The step's histogram as the page draws it; None without a log, with an empty one, or with
/// one that could not be decoded (the analysis' notes say which).
fn step_histogram(run: &RunData, s: &StepResult, ok: &[&StepResult]) -> Option<StepHistogram> {
    let hist_ns = run.histograms.get(&s.id)?.as_ref().ok()?;
    (!hist_ns.is_empty()).then(|| StepHistogram {
        step_id: s.id.clone(),
        label: step_label(s, ok),
        buckets: log_buckets(hist_ns),
    })
}

/// Log-spaced buckets in microseconds, [2^(k/8), 2^((k+1)/8)), only the non-empty ones.
pub fn log_buckets(hist_ns: &Histogram<u64>) -> Vec<LatencyBucket> {
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    for v in hist_ns.iter_recorded() {
        let us = (hist_ns.median_equivalent(v.value_iterated_to()) as f64 / 1000.0).max(1e-3);
        let k = (us.log2() * BUCKETS_PER_OCTAVE).floor() as i64;
        *counts.entry(k).or_default() += v.count_at_value();
    }
    counts
        .into_iter()
        .map(|(k, count)| LatencyBucket {
            lo_us: 2f64.powf(k as f64 / BUCKETS_PER_OCTAVE),
            hi_us: 2f64.powf((k + 1) as f64 / BUCKETS_PER_OCTAVE),
            count,
        })
        .collect()
}

/// The heat map of the chosen step (an id), or of the step [`heat_step`] picks.
fn heat_map(run: &RunData, ok: &[&StepResult], chosen: Option<&str>) -> Option<CoreHeatMap> {
    let step = match chosen {
        Some(id) => *ok.iter().find(|s| s.id == id)?,
        None => heat_step(ok, run.spec.as_ref().and_then(|s| s.heat_map.as_deref()))?,
    };
    let CoreBusy {
        whose,
        seconds,
        busy_pct: per_interval,
    } = run.core_busy.get(&step.id)?;
    let cores = per_interval.iter().map(Vec::len).max().unwrap_or(0);
    if cores == 0 {
        return None;
    }
    let busy_pct = (0..cores)
        .map(|c| {
            per_interval
                .iter()
                .map(|row| row.get(c).copied().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let (title, cpus) = match whose {
        Whose::Server => ("server cores", &step.server_cpus),
        Whose::Generator => ("load generator threads", &step.client_cpus),
    };
    Some(CoreHeatMap {
        step_id: step.id.clone(),
        label: format!("{title}, {}", step_label(step, ok)),
        cores: core_labels(cpus, cores),
        seconds: seconds.clone(),
        busy_pct,
    })
}

/// The busiest of the steps `selector` ("TARGET[/PLACEMENT][@CLIENTS]", the spec's
/// `[report] heat_map`) selects, or of the first series (its target and placement) without
/// one. Busiest: the highest mean busy % of the server's CPUs, then the highest throughput.
pub fn heat_step<'a>(ok: &[&'a StepResult], selector: Option<&str>) -> Option<&'a StepResult> {
    let selector = selector.and_then(|h| h.parse::<crate::analyze::compare::Selector>().ok());
    let first = ok.first()?;
    let wanted = |s: &&&StepResult| match &selector {
        Some(sel) => {
            s.target == sel.target
                && sel.placement.as_deref().is_none_or(|p| s.placement == p)
                && sel.clients.is_none_or(|c| s.clients == c)
        }
        None => s.target == first.target && s.placement == first.placement,
    };
    let busy = |s: &StepResult| {
        (
            s.observation()
                .and_then(|o| o.server_cpus_busy_pct)
                .unwrap_or(-1.0),
            s.throughput_rps().unwrap_or(0.0),
        )
    };
    ok.iter()
        .filter(wanted)
        .max_by(|a, b| {
            let (x, y) = (busy(a), busy(b));
            x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1))
        })
        .copied()
}

/// "cpu3" labels from a CPU list ("2-3,6") when it has one CPU per row, else "#0", "#1"...
fn core_labels(cpu_list: &str, count: usize) -> Vec<String> {
    let mut cpus = Vec::new();
    for part in cpu_list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
            cpus.extend(a..=b);
        }
    }
    if cpus.len() == count {
        cpus.iter().map(|c| format!("cpu{c}")).collect()
    } else {
        (0..count).map(|i| format!("#{i}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_repetition_is_labelled_when_its_level_has_others() {
        let step = |rep: usize, clients: usize| {
            StepResult::empty(format!("x{rep}{clients}"), "web", "shared", clients, rep)
        };
        let (a, b, c) = (step(0, 8), step(1, 8), step(0, 16));
        let ok = [&a, &b, &c];
        assert_eq!(step_label(&a, &ok), "web · shared · 8 clients (rep 0)");
        assert_eq!(step_label(&b, &ok), "web · shared · 8 clients (rep 1)");
        assert_eq!(step_label(&c, &ok), "web · shared · 16 clients");
    }

    #[test]
    fn buckets_split_a_bimodal_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record_n(6_000, 300).unwrap();
        h.record_n(14_000, 900).unwrap();
        let b = log_buckets(&h);
        assert_eq!(b.len(), 2, "{b:?}");
        assert!(b[0].lo_us <= 6.0 && 6.0 < b[0].hi_us);
        assert!(b[1].lo_us <= 14.0 && 14.0 < b[1].hi_us);
        assert_eq!(b.iter().map(|x| x.count).sum::<u64>(), 1200);
    }

    #[test]
    fn core_labels_follow_the_cpu_list() {
        assert_eq!(core_labels("2-3,6", 3), ["cpu2", "cpu3", "cpu6"]);
        assert_eq!(core_labels("0-7", 2), ["#0", "#1"]);
    }
}
