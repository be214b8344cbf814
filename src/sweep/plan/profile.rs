//! The spec's `[profile]` section, checked on its own and against the series it profiles
//! (the passes themselves run in `sweep::profiling`).

use super::Series;
use crate::profile::passes::{Level, ProfileSpec};
use crate::sweep::spec::{SpecError, SpecFile};

/// The `[profile]` section, checked except against the series (see [`check`]); None when the
/// spec has none.
pub fn section(spec: &SpecFile) -> Result<Option<ProfileSpec>, SpecError> {
    let Some(p) = &spec.spec.profile else {
        return Ok(None);
    };
    if p.at.is_empty() {
        return Err(spec.error_at(
            &["profile", "at"],
            "no level to profile: expected at = [\"busy\", \"saturated\"] or client counts",
        ));
    }
    if let Some(i) = p.at.iter().position(|l| *l == Level::Clients(0)) {
        return Err(spec.error_at(&["profile", "at", &i.to_string()], "a count of 0 clients"));
    }
    if !p.seconds.is_finite() || p.seconds <= 0.0 {
        return Err(spec.error_at(
            &["profile", "seconds"],
            format!("{}: expected seconds > 0, e.g. seconds = 10", p.seconds),
        ));
    }
    if p.events.is_empty() {
        return Err(spec.error_at(
            &["profile", "events"],
            "no event: expected events = [\"cpu\"] (and, where permitted, \"cs\", \"offcpu\")",
        ));
    }
    Ok(Some(p.clone()))
}

/// Checks the `[profile]` section against the series: client counts must be steps of it.
pub fn check(spec: &SpecFile, series: &Series) -> Result<(), SpecError> {
    let Some(p) = section(spec)? else {
        return Ok(());
    };
    for (i, level) in p.at.iter().enumerate() {
        let Level::Clients(n) = level else { continue };
        let key = i.to_string();
        match series {
            Series::Clients(counts) if counts.contains(n) => {}
            Series::Clients(counts) => {
                return Err(spec.error_at(
                    &["profile", "at", &key],
                    format!(
                    "{n} clients is not a step of the series {counts:?}: profile a measured level"
                ),
                ))
            }
            _ => {
                return Err(spec.error_at(
                    &["profile", "at", &key],
                    "a rate series has one client count: profile it at \"busy\" or \"saturated\"",
                ))
            }
        }
    }
    Ok(())
}
