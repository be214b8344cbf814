//! What reaching other hosts costs a run, as the run measured it: each host's set-up once per
//! run (`environment.json`, `hosts.NAME.set_up`), and for each step with client groups what
//! starting them together and bringing their results back took (`steps.jsonl`: the step's
//! `groups_overhead`, each group's part in its `per_host` entry).
//!
//! Every instant is on this machine's clock; a host's instants are brought to it with the
//! host's measured clock offset. A group is told the agreed start as its host's clock reads it
//! (the same offset added), so the start figures say how well each group kept to the instant
//! it was given; an error in a measured offset moves that group's real start by as much
//! without showing here (the offset's `uncertainty_ns` in `environment.json` bounds it).

use serde::{Deserialize, Serialize};

/// A host's set-up, once per run before the first step.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct HostSetUp {
    /// From the start of the host's set-up to its session being ready: the check, the
    /// binary, its topology and environment read, its clock offset measured; ms.
    pub total_ms: f64,
    /// The check, the first command there (`true`, the working directory created): one ssh
    /// login, one Slurm job step; ms.
    pub check_ms: f64,
    /// Putting the binary: its `--version` and checksum there compared with ours, and the
    /// binary copied when they differ; ms.
    pub binary_ms: f64,
    /// Size of the binary put there (stripped of its debug sections unless
    /// `binary_not_stripped` says why not); bytes.
    #[serde(default)]
    pub binary_bytes: u64,
}

/// A client group's part of a step's overhead (in its `per_host` entry).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GroupOverhead {
    /// How long before the step's agreed start the group was ready (every connection open,
    /// waiting for the start), µs; negative when it was ready only after it (it then started
    /// that much late). Absent when its load did not say when it was ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_before_start_us: Option<f64>,
    /// How long after the step's agreed start the group started its load (its warm-up), µs:
    /// its wake-up's lateness, or how late it was ready when `ready_before_start_us` is
    /// negative.
    pub start_late_us: f64,
    /// A group on another host: from the end of its measured window to its results (its load
    /// JSON and raw record) written in the run directory's `hosts/`, ms. It holds the load's
    /// drain and exit, the engine noticing the exit, and the fetch itself. Absent for a group
    /// on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_ms: Option<f64>,
}

/// What running a step's client groups together cost (steps.jsonl's `groups_overhead`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct StepOverhead {
    /// The common-start lead: from planning the step's start to the agreed start, ms (the
    /// groups are started on their hosts and connect within it).
    pub start_lead_ms: f64,
    /// How long before the agreed start the last group was ready: the smallest of the groups'
    /// `ready_before_start_us`, µs; negative when a group was ready only after it. Absent when
    /// a group's load did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_margin_us: Option<f64>,
    /// How far apart the groups actually started: the largest of the groups' `start_late_us`
    /// minus the smallest, µs.
    pub start_spread_us: f64,
    /// The slowest fetch: the largest of the groups' `fetch_ms`, ms. Absent when every group
    /// runs on this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetch_ms: Option<f64>,
}

/// A group's timing on this machine's clock, ns since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupTimes {
    /// When its load started (its warm-up began).
    pub started_ns: i64,
    /// Its measured window.
    pub window_ns: (i64, i64),
    /// When it was ready to start, if its load said.
    pub ready_ns: Option<i64>,
    /// When its results were on disk here (a group on another host).
    pub on_disk_ns: Option<i64>,
}

impl GroupOverhead {
    /// A group's figures against the step's agreed start (`start_ns`, this machine's clock).
    pub fn of(times: &GroupTimes, start_ns: i64) -> GroupOverhead {
        GroupOverhead {
            ready_before_start_us: times.ready_ns.map(|r| (start_ns - r) as f64 / 1e3),
            start_late_us: (times.started_ns - start_ns) as f64 / 1e3,
            fetch_ms: times
                .on_disk_ns
                .map(|d| (d - times.window_ns.1) as f64 / 1e6),
        }
    }
}

impl StepOverhead {
    /// The step's figures from its groups' (at least one) and its lead.
    pub fn of(groups: &[GroupTimes], start_ns: i64, lead_ms: f64) -> StepOverhead {
        let parts: Vec<GroupOverhead> = groups
            .iter()
            .map(|g| GroupOverhead::of(g, start_ns))
            .collect();
        let starts = groups.iter().map(|g| g.started_ns);
        let spread_ns = starts.clone().max().unwrap_or(0) - starts.min().unwrap_or(0);
        let margins: Option<Vec<f64>> = parts.iter().map(|p| p.ready_before_start_us).collect();
        StepOverhead {
            start_lead_ms: lead_ms,
            start_margin_us: margins.and_then(|m| m.into_iter().reduce(f64::min)),
            start_spread_us: spread_ns as f64 / 1e3,
            fetch_ms: parts.iter().filter_map(|p| p.fetch_ms).reduce(f64::max),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn keys(v: &Value) -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    }

    #[test]
    fn the_step_overhead_is_its_last_ready_group_s_and_its_slowest_fetch() {
        let ms = 1_000_000;
        let start = 100 * ms;
        let here = GroupTimes {
            started_ns: start + 15_000,
            window_ns: (start + 1_000 * ms, start + 3_000 * ms),
            ready_ns: Some(start - 40 * ms),
            on_disk_ns: None,
        };
        let there = GroupTimes {
            // Ready only 2 ms after the agreed start, started 0.25 ms after the first.
            started_ns: start + 265_000,
            window_ns: (start + 1_000 * ms + 250_000, start + 3_000 * ms + 250_000),
            ready_ns: Some(start + 2 * ms),
            on_disk_ns: Some(start + 3_120 * ms + 250_000),
        };
        let group = GroupOverhead::of(&there, start);
        assert_eq!(group.ready_before_start_us, Some(-2_000.0));
        assert_eq!(group.fetch_ms, Some(120.0));
        assert_eq!(group.start_late_us, 265.0);
        assert_eq!(GroupOverhead::of(&here, start).fetch_ms, None);
        let step = StepOverhead::of(&[here, there], start, 3_000.0);
        assert_eq!(step.start_margin_us, Some(-2_000.0));
        assert_eq!(step.start_spread_us, 250.0);
        assert_eq!(step.fetch_ms, Some(120.0));
        assert_eq!(step.start_lead_ms, 3_000.0);
        // Every group here: no fetch; one group that did not say when it was ready: no margin.
        let quiet = GroupTimes {
            ready_ns: None,
            ..here
        };
        let step = StepOverhead::of(&[here, quiet], start, 3_000.0);
        assert_eq!((step.fetch_ms, step.start_margin_us), (None, None));
        assert_eq!(step.start_spread_us, 0.0);
    }

    /// steps.schema.json declares the fields the types write, under their names.
    #[test]
    fn the_step_schema_declares_the_overhead_fields() {
        let schema: Value =
            serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
        let full = StepOverhead {
            start_margin_us: Some(1.0),
            fetch_ms: Some(1.0),
            ..StepOverhead::default()
        };
        let declared = &schema["properties"]["groups_overhead"]["properties"];
        assert_eq!(keys(declared), keys(&serde_json::to_value(full).unwrap()));
        let group = GroupOverhead {
            ready_before_start_us: Some(1.0),
            start_late_us: 1.0,
            fetch_ms: Some(1.0),
        };
        let per_host = keys(&schema["properties"]["per_host"]["items"]["properties"]);
        for k in keys(&serde_json::to_value(group).unwrap()) {
            assert!(per_host.contains(&k), "{k}: per_host lacks it");
        }
    }
}
