//! Checks of the spec sections the reports read (`[[comparisons]]`, `[report]`), made before
//! the run starts: a typo in a target's name would otherwise surface only after an hour of
//! measuring, as a note in the report.

use super::Series;
use crate::analyze::compare::spec::parse_comparison;
use crate::analyze::compare::Selector;
use crate::sweep::spec::{SpecError, SpecFile};

/// Checks `[report] heat_map` like a comparison's selector.
pub fn report(spec: &SpecFile, series: &Series) -> Result<(), SpecError> {
    let Some(text) = spec.spec.report.as_ref().and_then(|r| r.heat_map.as_ref()) else {
        return Ok(());
    };
    let at = |message: String| spec.error_at(&["report", "heat_map"], message);
    let selector: Selector = text.parse().map_err(at)?;
    selector_fits(spec, series, &selector).map_err(at)
}

/// Checks every `[[thresholds]]` entry's selectors: its target and placement exist, and its
/// `at` is a client count (or a rate, in an open-loop series) the series steps through.
pub fn thresholds(spec: &SpecFile, series: &Series) -> Result<(), SpecError> {
    use crate::analyze::thresholds::At;
    let s = &spec.spec;
    for (i, t) in s.thresholds.iter().enumerate() {
        let idx = i.to_string();
        let at = |key: &str, message: String| spec.error_at(&["thresholds", &idx, key], message);
        if let Some(target) = &t.target {
            if !s.targets.iter().any(|x| x.name == *target) {
                let names: Vec<&str> = s.targets.iter().map(|x| x.name.as_str()).collect();
                let why = format!(
                    "unknown target {target:?}: expected one of {}",
                    names.join(", ")
                );
                return Err(at("target", why));
            }
        }
        if let Some(p) = &t.placement {
            if !s.placements.contains(p) {
                let why = format!(
                    "unknown placement {p:?}: the spec's placements are {}",
                    s.placements.join(", ")
                );
                return Err(at("placement", why));
            }
        }
        if !t.value.is_finite() {
            return Err(at("value", "expected a finite number".into()));
        }
        if let (At::Level(level), Some(levels)) = (t.at, series_levels(series)) {
            if !levels
                .iter()
                .any(|l| (l - level).abs() <= 1e-9 * level.max(1.0))
            {
                let list: Vec<String> = levels.iter().map(|l| l.to_string()).collect();
                let why = format!(
                    "no step runs at {level}: the series steps through {}",
                    list.join(", ")
                );
                return Err(at("at", why));
            }
        }
    }
    Ok(())
}

/// The load levels a series steps through (client counts, or rates), when known before it
/// runs (a rate search's are not).
fn series_levels(series: &Series) -> Option<Vec<f64>> {
    match series {
        Series::Clients(c) => Some(c.iter().map(|&n| n as f64).collect()),
        Series::Rates { rates, .. } => Some(rates.clone()),
        Series::Find { .. } => None,
    }
}

/// Checks every `[[comparisons]]` entry: its keys (the report's parser), and that its
/// selectors name targets and placements of the spec and client counts of its series.
pub fn comparisons(spec: &SpecFile, series: &Series) -> Result<(), SpecError> {
    for (i, item) in spec.spec.comparisons.iter().enumerate() {
        let idx = i.to_string();
        for side in [["a", "candidate"], ["b", "baseline"]] {
            let Some((key, value)) = side.iter().find_map(|k| item.get(*k).map(|v| (*k, v))) else {
                continue;
            };
            let at = |message: String| spec.error_at(&["comparisons", &idx, key], message);
            let text = value
                .as_str()
                .ok_or_else(|| at("expected a string \"TARGET[/PLACEMENT][@CLIENTS]\"".into()))?;
            let selector: Selector = text.parse().map_err(at)?;
            selector_fits(spec, series, &selector).map_err(at)?;
        }
        parse_comparison(&toml::Value::Table(item.clone())).map_err(|message| {
            let key = unknown_field(&message).filter(|k| item.contains_key(k.as_str()));
            match key {
                Some(k) => spec.error_at(&["comparisons", &idx, &k], message),
                None => spec.error_at(&["comparisons", &idx], message),
            }
        })?;
    }
    Ok(())
}

/// Checks a selector against the spec: its target and placement exist, and its client
/// count is one the series steps through.
pub fn selector_fits(spec: &SpecFile, series: &Series, sel: &Selector) -> Result<(), String> {
    let s = &spec.spec;
    if !s.targets.iter().any(|t| t.name == sel.target) {
        let names: Vec<&str> = s.targets.iter().map(|t| t.name.as_str()).collect();
        return Err(format!(
            "unknown target {:?}: expected one of {}",
            sel.target,
            names.join(", ")
        ));
    }
    if let Some(p) = &sel.placement {
        if !s.placements.contains(p) {
            return Err(format!(
                "unknown placement {p:?}: the spec's placements are {}",
                s.placements.join(", ")
            ));
        }
    }
    if let Some(c) = sel.clients {
        let counts = series_clients(series);
        if !counts.contains(&c) {
            let list: Vec<String> = counts.iter().map(usize::to_string).collect();
            return Err(format!(
                "no step has {c} clients: the series steps through {}",
                list.join(", ")
            ));
        }
    }
    Ok(())
}

fn series_clients(series: &Series) -> Vec<usize> {
    match series {
        Series::Clients(c) => c.clone(),
        Series::Rates { clients, .. } | Series::Find { clients, .. } => vec![*clients],
    }
}

/// The key of serde's "unknown field `x`, expected ..." message.
fn unknown_field(message: &str) -> Option<String> {
    let rest = message.split("unknown field `").nth(1)?;
    Some(rest.split('`').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_field_is_read_from_the_message() {
        assert_eq!(
            unknown_field("unknown field `metrc`, expected one of `a`, `b`").as_deref(),
            Some("metrc")
        );
        assert_eq!(unknown_field("missing field `a`"), None);
    }
}
