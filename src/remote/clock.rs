//! A host's clock offset, measured the way NTP does over one channel to it (an ssh session,
//! an srun step; `engine::clock_offset_over`): read the local clock,
//! ask the host for its clock, read the local clock again; the round trip with the smallest
//! delay gives the offset, with an uncertainty of half that delay.
//!
//! One channel serves every round, so the rounds measure the channel, not its set-up.

use serde::{Deserialize, Serialize};

/// Round trips `clock_offset` makes (after one warm-up).
pub const CLOCK_ROUNDS: usize = 8;

/// One round trip: local clock before, the host's clock, local clock after (ns since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Local wall clock just before the request, ns since the Unix epoch.
    pub local_before_ns: i64,
    /// The host's wall clock as it answered, ns since the Unix epoch.
    pub remote_ns: i64,
    /// Local wall clock just after the answer, ns since the Unix epoch.
    pub local_after_ns: i64,
}

/// How far a host's clock is from the local one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockOffset {
    /// Host clock minus local clock, ns: a local instant `t` reads `t + offset_ns` there.
    pub offset_ns: i64,
    /// Half the round trip of the best sample, ns: the true offset is within ± this.
    pub uncertainty_ns: i64,
    /// The best sample's round trip, ns.
    pub rtt_ns: i64,
    /// Round trips made (the warm-up excluded).
    pub rounds: usize,
}

/// The offset from the sample with the smallest round trip; `None` when there are no samples.
pub fn best_offset(samples: &[ClockSample]) -> Option<ClockOffset> {
    let best = samples
        .iter()
        .min_by_key(|s| s.local_after_ns - s.local_before_ns)?;
    let rtt_ns = best.local_after_ns - best.local_before_ns;
    let midpoint = best.local_before_ns + rtt_ns / 2;
    Some(ClockOffset {
        offset_ns: best.remote_ns - midpoint,
        uncertainty_ns: (rtt_ns + 1) / 2,
        rtt_ns,
        rounds: samples.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(before: i64, remote: i64, after: i64) -> ClockSample {
        ClockSample {
            local_before_ns: before,
            remote_ns: remote,
            local_after_ns: after,
        }
    }

    #[test]
    fn smallest_round_trip_wins() {
        let samples = [
            sample(1_000, 50_000, 9_000),   // rtt 8000
            sample(20_000, 70_600, 21_000), // rtt 1000, midpoint 20500 -> +50100
            sample(30_000, 10, 40_000),     // rtt 10000, wild
        ];
        let best = best_offset(&samples).unwrap();
        assert_eq!(best.offset_ns, 50_100);
        assert_eq!(best.uncertainty_ns, 500);
        assert_eq!(best.rtt_ns, 1_000);
        assert_eq!(best.rounds, 3);
        assert_eq!(best_offset(&[]), None);
    }

    #[test]
    fn negative_offsets_and_odd_round_trips() {
        let best = best_offset(&[sample(1_000, 900, 1_003)]).unwrap();
        assert_eq!(best.offset_ns, 900 - 1_001);
        assert_eq!(best.uncertainty_ns, 2);
    }
}
