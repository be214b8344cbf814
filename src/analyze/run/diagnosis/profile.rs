//! What a series' profile passes add to its diagnosis: the share of lock, futex and scheduler
//! frames at the lower and the higher profiled level (the built-in `sync` category, stored
//! per pass in profiles.jsonl) and the functions whose share grew most between them (the
//! differential graph's table). A growing lock share supports a contention diagnosis; alone
//! it names no limit.

use super::{ev, Evidence, Metric};
use crate::record::profiles::{DiffRecord, Event, PassRecord, ProfileLine};

/// The lock share must grow by at least this many points (and by a quarter) to count.
pub const SYNC_GROWTH_POINTS: f64 = 2.0;
/// Functions that grew listed in the evidence.
const GROWERS: usize = 3;

/// One profiled level.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfiledLevel {
    /// Clients of the level.
    pub clients: usize,
    /// Why it was profiled and where (`busy (4 clients)`).
    pub label: String,
    /// % of CPU samples with a lock, futex or scheduler frame.
    pub sync_pct: f64,
}

/// What a series' profiles show.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileEvidence {
    /// The lower profiled level.
    pub a: ProfiledLevel,
    /// The higher one.
    pub b: ProfiledLevel,
    /// The functions whose share of CPU samples grew most from A to B: name, A %, B %.
    pub growers: Vec<(String, f64, f64)>,
}

impl ProfileEvidence {
    /// The lock share grew from A to B.
    pub fn sync_grew(&self) -> bool {
        let (a, b) = (self.a.sync_pct, self.b.sync_pct);
        b >= a + SYNC_GROWTH_POINTS && b >= 1.25 * a
    }

    /// The figures, for every diagnosis of the series.
    pub fn evidence(&self) -> Vec<Evidence> {
        let mut out: Vec<Evidence> = [&self.a, &self.b]
            .iter()
            .map(|l| {
                ev(
                    Metric::SyncFramesPct,
                    l.sync_pct,
                    Some(l.clients),
                    format!(
                        "lock, futex and scheduler frames, % of CPU samples in the profile at {}",
                        l.label
                    ),
                )
            })
            .collect();
        out.extend(self.growers.iter().map(|(name, a, b)| {
            ev(
                Metric::ProfileGrowthPoints,
                b - a,
                Some(self.b.clients),
                format!(
                    "{name}: {a:.1}% of CPU samples at {} → {b:.1}% at {}",
                    self.a.label, self.b.label
                ),
            )
        }));
        out
    }
}

/// The profile evidence of a series from its run's profiles.jsonl lines: the differential
/// pair's two passes; None without two profiled levels that both have CPU samples and their
/// share.
pub fn from_lines(lines: &[ProfileLine], target: &str, placement: &str) -> Option<ProfileEvidence> {
    let ours = |t: &str, p: &str| t == target && p == placement;
    let diff: &DiffRecord = lines.iter().rev().find_map(|l| match l {
        ProfileLine::Diff(d) if ours(&d.target, &d.placement) => Some(d),
        _ => None,
    })?;
    let pass = |step: &str| -> Option<&PassRecord> {
        lines.iter().rev().find_map(|l| match l {
            ProfileLine::Pass(p) if ours(&p.target, &p.placement) && p.step == step && p.ok => {
                Some(p)
            }
            _ => None,
        })
    };
    let level = |p: &PassRecord, label: &str| -> Option<ProfiledLevel> {
        let cpu = p.events.iter().find(|e| e.event == Event::Cpu)?;
        Some(ProfiledLevel {
            clients: p.clients,
            label: label.to_string(),
            sync_pct: cpu.sync_pct.filter(|x| x.is_finite())?,
        })
    };
    let a = level(pass(&diff.a)?, &diff.a_label)?;
    let b = level(pass(&diff.b)?, &diff.b_label)?;
    let growers = diff
        .events
        .iter()
        .find(|e| e.event == Event::Cpu)
        .map(|e| {
            e.deltas
                .iter()
                .filter(|d| d.delta_points > 0.0)
                .take(GROWERS)
                .map(|d| (d.name.clone(), d.a_pct, d.b_pct))
                .collect()
        })
        .unwrap_or_default();
    Some(ProfileEvidence { a, b, growers })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::profiles::{
        append_line, read_lines, DeltaRow, DiffEventRecord, EventRecord, ProfileTarget,
    };
    use std::path::Path;

    /// The evidence of a series from a directory's profiles.jsonl, as a run's reader gives it.
    fn read(dir: &Path, target: &str, placement: &str) -> Option<ProfileEvidence> {
        from_lines(&read_lines(dir), target, placement)
    }

    fn pass(step: &str, clients: usize, sync_pct: Option<f64>) -> ProfileLine {
        ProfileLine::Pass(PassRecord {
            step: step.into(),
            target: "web".into(),
            placement: "shared".into(),
            clients,
            rate_rps: None,
            levels: vec!["busy".into()],
            profiled: ProfileTarget::Server,
            seconds: 5.0,
            dir: format!("profiles/{step}"),
            step_throughput_rps: 1e4,
            throughput_rps: Some(9e3),
            window_s: Some(6.0),
            ok: true,
            reason: None,
            events: vec![EventRecord {
                event: Event::Cpu,
                perf_event: "cpu-clock".into(),
                samples: 1000,
                garbled_lines: 0,
                files: vec![],
                top: vec![],
                sync_pct,
                java: None,
                cost: None,
            }],
            jvms: vec![],
        })
    }

    fn diff(deltas: &[(&str, f64, f64)]) -> ProfileLine {
        ProfileLine::Diff(DiffRecord {
            target: "web".into(),
            placement: "shared".into(),
            a: "w4".into(),
            b: "w32".into(),
            a_label: "busy (4 clients)".into(),
            b_label: "saturated (32 clients)".into(),
            dir: "profiles/diff-w4-vs-w32".into(),
            reason: None,
            events: vec![DiffEventRecord {
                event: Event::Cpu,
                files: vec![],
                deltas: deltas
                    .iter()
                    .map(|&(n, a, b)| DeltaRow {
                        name: n.into(),
                        a_pct: a,
                        b_pct: b,
                        delta_points: b - a,
                    })
                    .collect(),
            }],
        })
    }

    fn written(lines: &[ProfileLine]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for l in lines {
            append_line(dir.path(), l).unwrap();
        }
        dir
    }

    #[test]
    fn the_diff_pairs_levels_share_and_growers_are_read_back() {
        let dir = written(&[
            pass("w4", 4, Some(3.0)),
            pass("w32", 32, Some(11.5)),
            diff(&[
                ("futex_wait", 1.0, 8.0),
                ("parse", 20.0, 12.0),
                ("schedule", 2.0, 5.0),
                ("memcpy", 4.0, 5.0),
                ("hash", 1.0, 1.5),
            ]),
        ]);
        let p = read(dir.path(), "web", "shared").unwrap();
        assert_eq!((p.a.clients, p.a.sync_pct), (4, 3.0));
        assert_eq!((p.b.clients, p.b.sync_pct), (32, 11.5));
        assert!(p.sync_grew());
        let names: Vec<&str> = p.growers.iter().map(|g| g.0.as_str()).collect();
        assert_eq!(names, ["futex_wait", "schedule", "memcpy"]);
        let ev = p.evidence();
        assert_eq!(ev[0].metric, Metric::SyncFramesPct);
        assert_eq!((ev[1].value, ev[1].at_clients), (11.5, Some(32)));
        assert_eq!(ev[2].value, 7.0);
        assert!(ev[2].note.starts_with("futex_wait: 1.0% of CPU samples at busy (4 clients) → 8.0% at saturated (32 clients)"), "{}", ev[2].note);
        assert!(read(dir.path(), "web", "separated").is_none());
    }

    #[test]
    fn no_share_recorded_or_no_second_level_is_no_evidence() {
        let old = written(&[pass("w4", 4, None), pass("w32", 32, None), diff(&[])]);
        assert!(read(old.path(), "web", "shared").is_none());
        let one = written(&[pass("w4", 4, Some(3.0))]);
        assert!(read(one.path(), "web", "shared").is_none());
        assert!(read(Path::new("/nonexistent"), "web", "shared").is_none());
        // Within the noise: 3% → 4.5% is not growth (under 2 points).
        let small = written(&[
            pass("w4", 4, Some(3.0)),
            pass("w32", 32, Some(4.5)),
            diff(&[]),
        ]);
        assert!(!read(small.path(), "web", "shared").unwrap().sync_grew());
    }
}
