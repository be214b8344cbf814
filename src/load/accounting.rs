//! The request bookkeeping a load's report carries beside its latencies: re-sends, the error
//! ratio and, for redis, memcached and kvd, the GETs that found their key.

use super::recorder::Totals;
use super::LoadConfig;
use crate::record::load::{error_ratio, LoadReport};

/// Adds the threads' re-sends and lookups to `report` and derives its error ratio (the
/// counts `sent`, `requests` and `errors` are already summed).
pub(super) fn fill(report: &mut LoadReport, totals: &[Totals], config: &LoadConfig) {
    report.resent = totals.iter().map(|t| t.resent).sum();
    let lookups = ["redis://", "memcache://", "kvd://"];
    if lookups.iter().any(|s| config.url.starts_with(s)) {
        report.redis_hits = Some(totals.iter().map(|t| t.redis_hits).sum());
        report.redis_misses = Some(totals.iter().map(|t| t.redis_misses).sum());
    }
    for t in totals {
        for (code, n) in &t.error_statuses {
            *report.error_statuses.entry(*code).or_default() += n;
        }
    }
    report.error_ratio = error_ratio(report.requests, &report.errors);
}
