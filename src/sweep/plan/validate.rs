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
    let at = |e: &dyn std::fmt::Display| spec.error_at(&["report", "heat_map"], e.to_string());
    let selector: Selector = text.parse().map_err(|e| at(&e))?;
    selector_fits(spec, series, &selector).map_err(|e| at(&e))
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
                    "unknown target {target:?}{}: expected one of {}",
                    crate::units::did_you_mean(target, &names),
                    names.join(", ")
                );
                return Err(at("target", why));
            }
        }
        if let Some(p) = &t.placement {
            if !s.placements.contains(p) {
                let names: Vec<&str> = s.placements.iter().map(String::as_str).collect();
                let why = format!(
                    "unknown placement {p:?}{}: the spec's placements are {}",
                    crate::units::did_you_mean(p, &names),
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
            let selector: Selector = text
                .parse()
                .map_err(|e: crate::analyze::compare::SelectorError| at(e.to_string()))?;
            selector_fits(spec, series, &selector).map_err(|e| at(e.to_string()))?;
        }
        parse_comparison(&toml::Value::Table(item.clone())).map_err(|e| {
            let message = e.to_string();
            let key = unknown_field(&message).filter(|k| item.contains_key(k.as_str()));
            match key {
                Some(k) => spec.error_at(&["comparisons", &idx, &k], message),
                None => spec.error_at(&["comparisons", &idx], message),
            }
        })?;
    }
    Ok(())
}

/// " (did you mean ...?)" for a name among `known`.
fn near(name: &str, known: &[String]) -> String {
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    crate::units::did_you_mean(name, &known)
}

/// A selector that names what the spec does not have.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectorFitError {
    /// No such target.
    #[error("unknown target {name:?}{}: expected one of {}", near(name, known), .known.join(", "))]
    Target {
        /// The name given.
        name: String,
        /// The spec's targets.
        known: Vec<String>,
    },
    /// No such placement.
    #[error("unknown placement {name:?}{}: the spec's placements are {}", near(name, known), .known.join(", "))]
    Placement {
        /// The name given.
        name: String,
        /// The spec's placements.
        known: Vec<String>,
    },
    /// No step at that client count.
    #[error("no step has {clients} clients: the series steps through {}", .counts.iter().map(usize::to_string).collect::<Vec<_>>().join(", "))]
    Clients {
        /// The count given.
        clients: usize,
        /// The series' counts.
        counts: Vec<usize>,
    },
}

/// Checks a selector against the spec: its target and placement exist, and its client
/// count is one the series steps through.
pub fn selector_fits(
    spec: &SpecFile,
    series: &Series,
    sel: &Selector,
) -> Result<(), SelectorFitError> {
    let s = &spec.spec;
    if !s.targets.iter().any(|t| t.name == sel.target) {
        return Err(SelectorFitError::Target {
            name: sel.target.clone(),
            known: s.targets.iter().map(|t| t.name.clone()).collect(),
        });
    }
    if let Some(p) = &sel.placement {
        if !s.placements.contains(p) {
            return Err(SelectorFitError::Placement {
                name: p.clone(),
                known: s.placements.clone(),
            });
        }
    }
    if let Some(c) = sel.clients {
        let counts = series_clients(series);
        if !counts.contains(&c) {
            return Err(SelectorFitError::Clients { clients: c, counts });
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
