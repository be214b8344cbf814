//! A host's clock offset, measured the way NTP does over one ssh session: read the local clock,
//! ask the host for its clock, read the local clock again; the round trip with the smallest
//! delay gives the offset, with an uncertainty of half that delay.
//!
//! One session serves every round, so the rounds measure the channel, not ssh's handshake.

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

use super::ssh::{sh_c, truncate, Remote};
use super::RemoteError;
use crate::clock::now_ns;

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

impl Remote {
    /// Measures the host's clock offset with `CLOCK_ROUNDS` round trips of `date +%s%N`.
    pub fn clock_offset(&self) -> Result<ClockOffset, RemoteError> {
        let script = "while read -r _; do date +%s%N; done";
        let mut child = self.spawn_piped(&sh_c(script, &[]), Stdio::piped())?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
        let samples = (0..=CLOCK_ROUNDS)
            .map(|_| self.clock_round(&mut stdin, &mut stdout))
            .collect::<Result<Vec<_>, _>>();
        drop(stdin);
        let output = child.wait_with_output();
        let samples = match samples {
            Ok(samples) => samples,
            Err(None) => {
                let stderr = output.map(|o| o.stderr).unwrap_or_default();
                return Err(self.unreachable(&String::from_utf8_lossy(&stderr)));
            }
            Err(Some(e)) => return Err(e),
        };
        Ok(best_offset(&samples[1..]).expect("CLOCK_ROUNDS > 0"))
    }

    /// One round trip; `Err(None)` when the session ended (the caller reads ssh's reason).
    fn clock_round(
        &self,
        stdin: &mut impl Write,
        stdout: &mut impl BufRead,
    ) -> Result<ClockSample, Option<RemoteError>> {
        let mut line = String::new();
        let local_before_ns = now_ns();
        stdin.write_all(b"t\n").map_err(|_| None)?;
        stdin.flush().map_err(|_| None)?;
        if stdout.read_line(&mut line).map_err(|_| None)? == 0 {
            return Err(None);
        }
        let local_after_ns = now_ns();
        let remote_ns = parse_date_ns(line.trim()).ok_or_else(|| {
            Some(RemoteError::Protocol {
                host: self.spec.name.clone(),
                what: "date +%s%N".into(),
                detail: format!(
                    "expected nanoseconds since the epoch, got {:?} (the host needs GNU date)",
                    truncate(line.trim(), 80)
                ),
            })
        })?;
        Ok(ClockSample {
            local_before_ns,
            remote_ns,
            local_after_ns,
        })
    }
}

/// `date +%s%N` output: at least 19 digits (seconds and nanoseconds), nothing else.
fn parse_date_ns(text: &str) -> Option<i64> {
    if text.len() < 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
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

    #[test]
    fn date_output_is_checked() {
        assert_eq!(
            parse_date_ns("1763790000123456789"),
            Some(1_763_790_000_123_456_789)
        );
        assert_eq!(parse_date_ns("1763790000N"), None);
        assert_eq!(parse_date_ns("1763790000"), None);
    }
}
