//! The repetitions, each read on its own by the same rules. A limit named at high
//! confidence must be what every repetition's own figures name: each rule has its own
//! margin (90% of one CPU for a thread, 10% throttled periods for a quota, flat throughput
//! for contention ...), and steps whose noise crosses that margin do not agree. Throughput's
//! spread alone cannot tell: a busiest thread at 88% and 96% in two repetitions of an
//! even throughput straddles the one-thread rule's 90%.

use super::{level, Ctx, Level, Limit};
use crate::analyze::run::SeriesAnalysis;
use crate::record::steps::{rep_label, StepResult};

/// One repetition that, read alone, names another limit than the series.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Disagreement {
    /// The repetition's index (`rep` in steps.jsonl).
    pub rep: usize,
    /// What its own figures name (`Undetermined` when no rule fits them).
    pub limit: Limit,
}

/// The repetitions whose own figures, at the series' levels and knee, name another limit
/// than `limit`. Empty with fewer than two repetitions, or where a repetition lacks a level
/// the series has (a failed step): such a repetition cannot be read alone.
pub(super) fn disagreements(
    c: &Ctx,
    steps: &[&StepResult],
    limit: Limit,
    rules: &[super::Rule],
) -> Vec<Disagreement> {
    let reps = repetitions(steps);
    if reps.len() < 2 {
        return Vec::new();
    }
    reps.into_iter()
        .filter_map(|rep| {
            let own = alone(c, steps, rep)?;
            let levels: Vec<Level> = own
                .series
                .points
                .iter()
                .map(|p| level(p, &own.series, &own.steps))
                .collect();
            let ctx = Ctx {
                levels: &levels,
                from: c.from,
                series: &own.series,
                profile: c.profile,
            };
            let found = rules
                .iter()
                .find_map(|rule| rule(&ctx))
                .map_or(Limit::Undetermined, |f| f.limit);
            (found != limit).then_some(Disagreement { rep, limit: found })
        })
        .collect()
}

/// The repetitions' indices, in order.
pub(super) fn repetitions(steps: &[&StepResult]) -> Vec<usize> {
    let mut reps: Vec<usize> = steps.iter().map(|s| s.rep).collect();
    reps.sort_unstable();
    reps.dedup();
    reps
}

/// One repetition's steps and the series as they alone give it.
struct Alone<'a> {
    steps: Vec<&'a StepResult>,
    series: SeriesAnalysis,
}

fn alone<'a>(c: &Ctx, steps: &[&'a StepResult], rep: usize) -> Option<Alone<'a>> {
    let mut own: Vec<&StepResult> = steps.iter().copied().filter(|s| s.rep == rep).collect();
    own.sort_by(|a, b| super::super::load_of(a).total_cmp(&super::super::load_of(b)));
    let points = super::super::load_points(&own);
    let same_levels = points.len() == c.levels.len()
        && points
            .iter()
            .zip(c.levels)
            .all(|(p, l)| p.clients == l.clients);
    if !same_levels {
        return None;
    }
    let series = SeriesAnalysis {
        points,
        little: c
            .series
            .little
            .iter()
            .filter(|r| r.rep == rep)
            .cloned()
            .collect(),
        ..c.series.clone()
    };
    Some(Alone { steps: own, series })
}

/// The note beside a diagnosis whose repetitions disagree: which read what.
pub(super) fn note(limit: Limit, split: &[Disagreement], reps: usize) -> String {
    let each: Vec<String> = split
        .iter()
        .map(|d| format!("{} alone reads {}", rep_label(d.rep), d.limit))
        .collect();
    format!(
        "{} of {reps} repetitions read alone name another limit than {limit} ({}): its margin is within their noise, so it is not named at high confidence",
        split.len(),
        each.join(", ")
    )
}
