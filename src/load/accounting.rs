//! The request bookkeeping a load's report carries beside its latencies: re-sends, the error
//! ratio and, for redis, the GETs that found their key.

use std::collections::BTreeMap;

use super::worker::Totals;
use super::{LoadConfig, LoadReport};

/// Adds the threads' re-sends and lookups to `report` and derives its error ratio (the
/// counts `sent`, `requests` and `errors` are already summed).
pub(super) fn fill(report: &mut LoadReport, totals: &[Totals], config: &LoadConfig) {
    report.resent = totals.iter().map(|t| t.resent).sum();
    if config.url.starts_with("redis://") {
        report.redis_hits = Some(totals.iter().map(|t| t.redis_hits).sum());
        report.redis_misses = Some(totals.iter().map(|t| t.redis_misses).sum());
    }
    report.error_ratio = error_ratio(report.requests, &report.errors);
}

/// errors / (requests + errors); 0 when nothing completed either way.
pub fn error_ratio(requests: u64, errors: &BTreeMap<String, u64>) -> f64 {
    let failed: u64 = errors.values().sum();
    let total = requests + failed;
    if total == 0 {
        0.0
    } else {
        failed as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_ratio_counts_errors_among_all_outcomes() {
        let errors = BTreeMap::from([("http_5xx".to_string(), 30), ("timeout".to_string(), 10)]);
        assert_eq!(error_ratio(160, &errors), 0.2);
        assert_eq!(error_ratio(0, &BTreeMap::new()), 0.0);
        assert_eq!(error_ratio(0, &errors), 1.0);
    }
}
