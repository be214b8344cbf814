//! `--work-ns`: CPU work done for every message before its reply, standing in for what a real
//! server does with a request (decode it, look something up, check a CRC). Without it the
//! reactor costs exactly what the load generator costs per request (measured: 0.52 µs each at
//! 512-byte messages, depth 16), so on 2 CPUs the generator saturates as soon as the server.
//!
//! The work is a compute loop calibrated against this thread's CPU clock, not the wall clock:
//! a thread preempted by other processes still does the full amount.

/// A number of rounds of the compute loop worth the asked nanoseconds of CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Work {
    rounds: u64,
}

/// Rounds timed per calibration probe (about 0.1 ms).
const PROBE_ROUNDS: u64 = 1 << 16;

impl Work {
    /// Calibrates `ns` of CPU per message (none for 0): the fastest of 5 probes, since a probe
    /// can only be slowed down (cache misses after a preemption), never sped up.
    pub fn calibrate(ns: u64) -> Work {
        if ns == 0 {
            return Work::default();
        }
        let best_ns_per_round = (0..5)
            .map(|_| {
                let start = thread_cpu_ns();
                spin(PROBE_ROUNDS);
                (thread_cpu_ns() - start).max(1) as f64 / PROBE_ROUNDS as f64
            })
            .fold(f64::MAX, f64::min);
        Work {
            rounds: (ns as f64 / best_ns_per_round).round().max(1.0) as u64,
        }
    }

    /// Does one message's work.
    pub fn run(self) {
        if self.rounds > 0 {
            spin(self.rounds);
        }
    }
}

/// A dependent multiply-rotate chain the compiler cannot shorten.
fn spin(rounds: u64) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..std::hint::black_box(rounds) {
        x = (x ^ i).wrapping_mul(0xff51_afd7_ed55_8ccd).rotate_left(31);
    }
    std::hint::black_box(x);
}

fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_work_takes_about_the_asked_cpu_time() {
        let work = Work::calibrate(20_000);
        // Best of several: another process can slow a run down, never speed it up.
        let best_ns = (0..20)
            .map(|_| {
                let start = thread_cpu_ns();
                work.run();
                thread_cpu_ns() - start
            })
            .min()
            .unwrap();
        assert!((10_000..40_000).contains(&best_ns), "{best_ns} ns");
        assert_eq!(Work::calibrate(0), Work::default());
    }
}
