//! The wall clock as the crate reads it: `now_ns` (ns since the Unix epoch) and
//! `sleep_until_ns` (wait for an instant of that clock).
//!
//! Both the load engine (starting a window at a planned instant) and the multi-host code
//! (clock offsets, common starts) need the same clock, so it lives below both.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest sleep between two looks at a stop flag.
const STOP_POLL: Duration = Duration::from_millis(20);

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

/// [`sleep_until_ns`], but returns as soon as `stop` is set (looked at every 20 ms): true when
/// the target was reached, false when stopped first.
pub fn sleep_until_ns_unless(target_ns: i64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left_ns = target_ns - now_ns();
        if left_ns <= 1_000_000 {
            sleep_until_ns(target_ns);
            return !stop.load(Ordering::Relaxed);
        }
        std::thread::sleep(STOP_POLL.min(Duration::from_nanos((left_ns - 1_000_000) as u64)));
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

    #[test]
    fn a_stopped_wait_ends_at_once() {
        let stop = AtomicBool::new(false);
        let target = now_ns() + 20_000_000;
        assert!(sleep_until_ns_unless(target, &stop));
        assert!(now_ns() >= target);
        // Stopped 50 ms into a 10 s wait: it ends within a poll.
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let setter = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            setter.store(true, Ordering::Relaxed);
        });
        let started = std::time::Instant::now();
        assert!(!sleep_until_ns_unless(now_ns() + 10_000_000_000, &stop));
        let waited = started.elapsed();
        t.join().unwrap();
        assert!(
            waited >= Duration::from_millis(50) && waited < Duration::from_secs(2),
            "{waited:?}"
        );
    }
}
