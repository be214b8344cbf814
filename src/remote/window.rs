//! Starting a step's measured windows together on several hosts, and checking afterwards that
//! they did overlap.
//!
//! The local clock is the reference. Each host gets its start time in its own clock (the
//! common start plus its offset), waits for it, measures its own window and reports it in its
//! own clock; `to_reference` brings the windows back to the local clock for `window_overlap`.

use std::time::Duration;

use super::clock::ClockOffset;
use crate::clock::now_ns;

/// A step whose windows overlap less than this fraction fails.
pub const MIN_WINDOW_OVERLAP: f64 = 0.95;

/// A measured window, `(start_ns, end_ns)`, ns since the Unix epoch.
pub type Window = (i64, i64);

/// When a step's windows start: the common instant and each host's reading of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartPlan {
    /// The common start in the local (reference) clock, ns since the Unix epoch.
    pub common_start_ns: i64,
    /// The same instant in each host's clock, in the order of the offsets given.
    pub host_start_ns: Vec<i64>,
}

/// Each host's clock reading of the local instant `common_start_ns`.
pub fn host_start_times(common_start_ns: i64, offsets: &[ClockOffset]) -> Vec<i64> {
    offsets
        .iter()
        .map(|o| common_start_ns + o.offset_ns)
        .collect()
}

/// A common start `lead` from now (long enough to launch every host's command) and each host's
/// reading of it.
pub fn plan_start(lead: Duration, offsets: &[ClockOffset]) -> StartPlan {
    let common_start_ns = now_ns() + lead.as_nanos() as i64;
    StartPlan {
        common_start_ns,
        host_start_ns: host_start_times(common_start_ns, offsets),
    }
}

/// A window a host measured in its own clock, in the local clock.
pub fn to_reference(window: Window, offset: &ClockOffset) -> Window {
    (window.0 - offset.offset_ns, window.1 - offset.offset_ns)
}

/// How much the windows overlap: the length of their common part over the length of their
/// union (1.0 when they coincide, 0.0 when some two do not meet). Fewer than two windows
/// overlap fully; an empty or inverted window overlaps nothing.
pub fn window_overlap(windows: &[Window]) -> f64 {
    if windows.iter().any(|&(start, end)| end <= start) {
        return 0.0;
    }
    if windows.len() < 2 {
        return 1.0;
    }
    let common_start = windows.iter().map(|w| w.0).max().unwrap_or(0);
    let common_end = windows.iter().map(|w| w.1).min().unwrap_or(0);
    let union_start = windows.iter().map(|w| w.0).min().unwrap_or(0);
    let union_end = windows.iter().map(|w| w.1).max().unwrap_or(0);
    let common = (common_end - common_start).max(0) as f64;
    common / (union_end - union_start) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offset(ns: i64) -> ClockOffset {
        ClockOffset {
            offset_ns: ns,
            uncertainty_ns: 0,
            rtt_ns: 0,
            rounds: 1,
        }
    }

    #[test]
    fn each_host_reads_the_common_start_in_its_own_clock() {
        let offsets = [offset(0), offset(2_000), offset(-500)];
        assert_eq!(
            host_start_times(10_000, &offsets),
            vec![10_000, 12_000, 9_500]
        );
        let plan = plan_start(Duration::from_millis(100), &offsets);
        assert_eq!(plan.host_start_ns[1] - plan.common_start_ns, 2_000);
        assert!(plan.common_start_ns > now_ns());
        assert_eq!(
            to_reference((12_000, 22_000), &offsets[1]),
            (10_000, 20_000)
        );
    }

    #[test]
    fn overlap_is_common_over_union() {
        assert_eq!(window_overlap(&[(0, 100), (0, 100)]), 1.0);
        assert_eq!(window_overlap(&[(0, 100), (10, 110)]), 90.0 / 110.0);
        assert_eq!(window_overlap(&[(0, 100), (5, 100), (0, 95)]), 0.9);
        assert_eq!(window_overlap(&[(0, 100), (200, 300)]), 0.0);
        assert_eq!(window_overlap(&[(0, 100)]), 1.0);
        assert_eq!(window_overlap(&[]), 1.0);
        assert_eq!(window_overlap(&[(0, 100), (50, 50)]), 0.0);
        // 10 s windows 0.25 s apart pass; 0.3 s apart fail.
        let s = 1_000_000_000;
        assert!(window_overlap(&[(0, 10 * s), (s / 4, 10 * s + s / 4)]) >= MIN_WINDOW_OVERLAP);
        assert!(
            window_overlap(&[(0, 10 * s), (3 * s / 10, 10 * s + 3 * s / 10)]) < MIN_WINDOW_OVERLAP
        );
    }
}
