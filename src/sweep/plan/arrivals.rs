//! `[client] arrivals` and `ramp` in a spec: Poisson arrivals for an open-loop `rate` series;
//! a ramp refused with its reason.

use crate::load::arrivals::{Arrivals, ArrivalsError};
use crate::sweep::spec::{SpecError, SpecFile};

/// Why a spec takes no `ramp`: each step of a staircase holds one load level, and its figures
/// (throughput, latency percentiles, CPU per request) are that level's; a ramp inside the step
/// would mix levels in them.
pub const RAMP_REFUSED: &str = "a spec's steps each hold one load level, and a ramp inside a \
    step would mix levels in its figures: give the levels as a staircase (clients = [...] or \
    rate = { from, to, step }), or ramp one load with `stairbench load --ramp FROM:TO:DURATION`";

/// The spec's `[client] arrivals` (uniform by default); refuses `ramp`, an unknown value, and
/// Poisson arrivals without an open-loop series or with client groups.
pub fn arrivals(spec: &SpecFile) -> Result<Arrivals, SpecError> {
    let c = &spec.spec.client;
    if c.ramp.is_some() {
        return Err(spec.error_at(&["client", "ramp"], RAMP_REFUSED));
    }
    let Some(text) = &c.arrivals else {
        return Ok(Arrivals::Uniform);
    };
    let at = |why: &str| spec.error_at(&["client", "arrivals"], why);
    let arrivals: Arrivals = text
        .parse()
        .map_err(|e: ArrivalsError| at(&e.to_string()))?;
    if arrivals == Arrivals::Poisson {
        if spec.spec.rate.is_none() {
            return Err(at("arrivals = \"poisson\" spaces open-loop requests: it needs a rate series (rate = [...] or { from, to, step }); a clients staircase is closed loop"));
        }
        if !c.groups.is_empty() {
            return Err(at("arrivals = \"poisson\" with client groups is not supported yet: each group would draw the same seeded gaps; leave arrivals out, or run one group"));
        }
    }
    Ok(arrivals)
}
