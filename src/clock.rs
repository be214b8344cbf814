//! The wall clock as the crate reads it: `now_ns` (ns since the Unix epoch) and
//! `sleep_until_ns` (wait for an instant of that clock).
//!
//! Both the load engine (starting a window at a planned instant) and the multi-host code
//! (clock offsets, common starts) need the same clock, so it lives below both.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The local wall clock, ns since the Unix epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Sleeps until the local wall clock reads `target_ns` (returns at once if it is past). The
/// last millisecond is spun, so the start is within microseconds of the target.
pub fn sleep_until_ns(target_ns: i64) {
    loop {
        let left_ns = target_ns - now_ns();
        if left_ns <= 0 {
            return;
        }
        if left_ns > 1_000_000 {
            std::thread::sleep(Duration::from_nanos((left_ns - 1_000_000) as u64));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_until_reaches_the_target() {
        let target = now_ns() + 20_000_000;
        sleep_until_ns(target);
        let late_ns = now_ns() - target;
        assert!((0..50_000_000).contains(&late_ns), "late by {late_ns} ns");
        sleep_until_ns(0);
    }
}
