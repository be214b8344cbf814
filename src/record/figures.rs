//! What a step line records beside its identity and the load's figures: the server's
//! observation (or why there is none), the figures of a split load's parts, an external tool's
//! own figures, the processes and target metrics observed beside the server. Typed, so that a
//! field renamed on one side is a compile error and a malformed line an error where it is read.

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

use crate::record::load::LoadReport;
use crate::record::observed::{Observation, PerRequest};
use crate::record::overhead::{GroupOverhead, StepOverhead};

/// A process tree's figures over a step's window (the step's `server`, an `observed` entry),
/// or why there are none.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ServerFigures {
    /// Observed over the measured window.
    Observed(Box<HostObservation>),
    /// Not observed: its host did not answer, the process was not found.
    Unavailable(Unavailable),
}

/// An observation and the host it was made on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostObservation {
    /// The host the process ran on; absent for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The figures.
    #[serde(flatten)]
    pub observation: Observation,
}

/// Why a process's figures are missing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unavailable {
    /// The host the process ran on; absent for this machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Why (the step's `server` writes a list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Why (an `observed` entry writes one sentence).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl ServerFigures {
    /// The observation, when there is one.
    pub fn observation(&self) -> Option<&Observation> {
        match self {
            ServerFigures::Observed(o) => Some(&o.observation),
            ServerFigures::Unavailable(_) => None,
        }
    }

    /// What made the figures partial or missing.
    pub fn notes(&self) -> Vec<&str> {
        match self {
            ServerFigures::Observed(o) => o.observation.notes.iter().map(String::as_str).collect(),
            ServerFigures::Unavailable(u) => {
                let notes = u.notes.iter().map(String::as_str);
                notes.chain(u.note.as_deref()).collect()
            }
        }
    }
}

impl From<Observation> for ServerFigures {
    /// Figures observed on this machine.
    fn from(observation: Observation) -> Self {
        ServerFigures::Observed(Box::new(HostObservation {
            host: None,
            observation,
        }))
    }
}

impl<'de> Deserialize<'de> for ServerFigures {
    /// An object of only `host`, `note` and `notes` is the reason; any other is an observation,
    /// read strictly (a malformed figure is an error, never a missing observation).
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let reason_only = value.as_object().is_some_and(|m| {
            m.keys()
                .all(|k| matches!(k.as_str(), "host" | "note" | "notes"))
        });
        let figures = if reason_only {
            Unavailable::deserialize(value).map(ServerFigures::Unavailable)
        } else {
            let observed = HostObservation::deserialize(value);
            observed.map(|o| ServerFigures::Observed(Box::new(o)))
        };
        figures.map_err(|e| D::Error::custom(format!("server figures: {e}")))
    }
}

/// What the step loop's observers measured over one step's window, in the step record's
/// types: the observers build it (`observe::step::StepObserver::finish`) and
/// [`crate::record::steps::StepResult::set_observed`] files it, field by field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Observed {
    /// The server's figures over the window, or why there are none (None: nothing observed).
    pub server: Option<ServerFigures>,
    /// Figures per request, from the server's over the window's completed requests.
    pub per_request: PerRequest,
    /// CPU the observers used over the step, in seconds (None: no observer ran).
    pub observer_cpu_s: Option<f64>,
    /// Why the server's figures were not observed (a server already running, given by
    /// address), when they were not.
    pub server_not_observed: Option<String>,
    /// `[[observe]]` processes, a split target's instances and a target's further ranks, by
    /// name.
    pub observed: BTreeMap<String, ServerFigures>,
    /// What each target reported itself (metrics file or endpoint) over the window, by label:
    /// that program's JSON, kept as it wrote it.
    pub target_metrics: BTreeMap<String, ForeignJson>,
}

impl Observed {
    /// The server's observation, when there is one.
    pub fn observation_mut(&mut self) -> Option<&mut Observation> {
        match self.server.as_mut()? {
            ServerFigures::Observed(o) => Some(&mut o.observation),
            ServerFigures::Unavailable(_) => None,
        }
    }

    /// Marks the server's figures not observed: `why` becomes the step's
    /// `server_not_observed` and the first of the server's notes.
    pub fn mark_not_observed(&mut self, why: &str) {
        self.server_not_observed = Some(why.to_string());
        match &mut self.server {
            Some(ServerFigures::Observed(o)) => o.observation.notes.insert(0, why.to_string()),
            Some(ServerFigures::Unavailable(Unavailable { notes, .. })) => {
                notes.insert(0, why.to_string())
            }
            None => {}
        }
    }
}

/// Top-level figures of a step line beyond its identity, the load's, the server's and the
/// per-request ones; each absent where it does not apply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StepFigures {
    /// CPU the observers used over the step, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observer_cpu_s: Option<f64>,
    /// Why the server-side figures were not observed (a server already running, given by
    /// address): the reason; those figures are null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_not_observed: Option<String>,
    /// The span the observers and the per-request figures covered when it is not the load's
    /// measured window (an external tool's whole run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
    /// CPU seconds of an external tool's descendants orphaned during its run (reparented to
    /// stairbench), part of the client CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_cpu_orphans_s: Option<f64>,
    /// What an external tool printed, in its own terms (absent for the built-in engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolFigures>,
    /// The spec's `[[thresholds]]` that select this step, each with the step's value.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub thresholds: Vec<ThresholdCheck>,
    /// A split target's instances (`instances = N`), each its own load.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_instance: Vec<LoadPart>,
    /// Client groups (`[[client.groups]]`), each its own load on its host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub per_host: Vec<LoadPart>,
    /// With client groups: the common part of the groups' measured windows over their union.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_overlap: Option<f64>,
    /// With client groups: the common part of the groups' measured windows and the window the
    /// server's observers measured (the planned one), over their union. Under 0.95 the groups
    /// started late, the observers measured another span than the load, and the step is run
    /// again with a longer lead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_window_overlap: Option<f64>,
    /// With client groups: what starting them together and bringing their results back cost.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups_overhead: Option<StepOverhead>,
    /// `[[observe]]` processes and a split target's instances, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub observed: BTreeMap<String, ServerFigures>,
    /// What each target reported itself (metrics file or endpoint) over the window, by label.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub target_metrics: BTreeMap<String, ForeignJson>,
    /// Other processes took the spec's `disturbed_pct` or more of the step's CPUs: how much,
    /// and who (absent on an undisturbed step).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disturbed: Option<Disturbance>,
    /// The series' peak measured once more after its last level, because throughput fell
    /// past it: a check that the machine did not drift, kept out of its level's figures.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub drift_check: bool,
}

/// How much of a step's CPUs other processes took, when it was at least `disturbed_pct`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Disturbance {
    /// Other processes' share of the server's CPUs, % of its cpuset (None: not observed).
    pub server_cpus_others_pct: Option<f64>,
    /// Other processes' share of the load generator's CPUs, % of its cpuset.
    pub client_cpus_others_pct: Option<f64>,
    /// The busiest other process in the same window, if one could be named.
    pub busiest: Option<crate::record::use_cpu::Neighbour>,
    /// The threshold in force (`disturbed_pct`), %.
    pub threshold_pct: f64,
    /// `run --keep-disturbed`: the step stayed `ok` and in the analysis, marked.
    pub kept: bool,
}

impl Disturbance {
    /// The disturbance of a window whose neighbours are `n`: None when other processes took
    /// less than `threshold_pct` of both sides' CPUs. The busiest is named from the same
    /// window, on the side disturbed most.
    pub fn of(
        n: &crate::record::use_cpu::Neighbours,
        threshold_pct: f64,
        kept: bool,
    ) -> Option<Disturbance> {
        let d = Disturbance {
            server_cpus_others_pct: n.server_cpus_others_pct,
            client_cpus_others_pct: n.client_cpus_others_pct,
            busiest: None,
            threshold_pct,
            kept,
        };
        let (side, pct) = d.worst();
        if pct < threshold_pct {
            return None;
        }
        let share = |x: &crate::record::use_cpu::Neighbour| {
            if side == "server" {
                x.server_cpus_pct
            } else {
                x.client_cpus_pct
            }
        };
        let busiest = n
            .busiest
            .iter()
            .filter(|x| share(x) > 0.0)
            .max_by(|a, b| share(a).total_cmp(&share(b)))
            .cloned();
        Some(Disturbance { busiest, ..d })
    }

    /// The larger of the two sides' shares, and which side: ("server", 55.0).
    pub fn worst(&self) -> (&'static str, f64) {
        let server = self.server_cpus_others_pct.unwrap_or(0.0);
        let client = self.client_cpus_others_pct.unwrap_or(0.0);
        if server >= client {
            ("server", server)
        } else {
            ("load generator", client)
        }
    }

    /// "other processes took 55% of the server's CPUs (busiest: rustc, pid 812, 41%)".
    pub fn describe(&self) -> String {
        let (side, pct) = self.worst();
        let who = self
            .busiest
            .as_ref()
            .map_or("; none of them could be named".to_string(), |n| {
                let share = if side == "server" {
                    n.server_cpus_pct
                } else {
                    n.client_cpus_pct
                };
                format!(" (busiest: {}, pid {}, {share:.0}%)", n.name, n.pid)
            });
        format!("other processes took {pct:.0}% of the {side}'s CPUs{who}")
    }
}

/// An external tool's own figures (what its parser read, in stairbench's units).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolFigures {
    /// Requests the tool completed successfully.
    pub requests: Option<u64>,
    /// Length of its measured run, seconds, as the tool timed it.
    pub duration_s: Option<f64>,
    /// Its completed requests per second.
    pub throughput_rps: Option<f64>,
    /// Bytes it read from the server.
    pub bytes_received: Option<u64>,
    /// Its latency figures by name (`p75`, `stdev`, ...), microseconds; null where not printed.
    pub latency_us: BTreeMap<String, Option<f64>>,
    /// Its failed requests by kind.
    pub errors: BTreeMap<String, u64>,
    /// Other figures it printed, each name ending in its unit.
    pub extra: BTreeMap<String, f64>,
}

/// One `[[thresholds]]` entry checked against a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThresholdCheck {
    /// The threshold as the spec states it.
    pub threshold: String,
    /// The step's value of its metric (null when not finite).
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub measured: f64,
    /// Whether the step met it.
    pub met: bool,
}

/// One part of a split load (an instance's, a client group's): its own load figures, where
/// it went and, for a group, its host, window and overhead.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadPart {
    /// The instance's index (a split target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<usize>,
    /// The port it went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Its client cpuset as a CPU list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cpus: Option<String>,
    /// The group's index (client groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<usize>,
    /// The group's host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The group's measured window, ns since the Unix epoch on this machine's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_unix_ns: Option<(i64, i64)>,
    /// The group's generator busy % per CPU of its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_busy_pct: Option<BTreeMap<String, f64>>,
    /// The group's part of the step's overhead.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<GroupOverhead>,
    /// Figures of its own beyond the load's (an external tool's, its own instances).
    #[serde(flatten)]
    pub figures: StepFigures,
    /// Its load figures.
    #[serde(flatten, with = "load_fields")]
    pub load: LoadReport,
}

/// JSON another program wrote (a target's own metrics), kept as it was: its names and nesting
/// are that program's, not ours.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ForeignJson {
    /// null.
    Null,
    /// true or false.
    Bool(bool),
    /// A whole number.
    Integer(i64),
    /// A whole number above `i64::MAX`.
    Unsigned(u64),
    /// Any other number.
    Number(f64),
    /// A string.
    Text(String),
    /// An array.
    List(Vec<ForeignJson>),
    /// An object.
    Object(BTreeMap<String, ForeignJson>),
}

impl ForeignJson {
    /// As a `serde_json` value, for readers that walk it by path.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }

    /// `{"note": why}`: a metrics entry that has no window to give, and why.
    pub fn note(why: impl Into<String>) -> Self {
        ForeignJson::Object([("note".to_string(), ForeignJson::Text(why.into()))].into())
    }

    /// The JSON value as this type holds it.
    pub fn from_value(value: serde_json::Value) -> Self {
        serde_json::from_value(value).unwrap_or(ForeignJson::Null)
    }
}

/// The load's figures flattened into a line: its own `schema` is not written (the line has
/// its own), and it is read back with it.
pub(crate) mod load_fields {
    use serde::ser::SerializeMap;
    use serde::{Deserialize, Deserializer, Serializer};
    use serde_json::{Map, Value};

    use crate::record::load::LoadReport;

    /// Keys of the load that the line writes its own way (or not at all).
    const LINE_OWNS: [&str; 4] = ["schema", "url", "rate_rps", "error_ratio"];

    /// Writes `load`'s fields, leaving out `skip`.
    pub(crate) fn write<S: Serializer>(
        load: &LoadReport,
        skip: &[&str],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let Value::Object(fields) =
            serde_json::to_value(load).map_err(serde::ser::Error::custom)?
        else {
            return Err(serde::ser::Error::custom("a load report is not an object"));
        };
        let mut map = s.serialize_map(None)?;
        for (k, v) in fields.iter().filter(|(k, _)| !skip.contains(&k.as_str())) {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }

    /// Reads the load's fields among `fields`.
    pub(crate) fn read<E: serde::de::Error>(
        mut fields: Map<String, Value>,
    ) -> Result<LoadReport, E> {
        fields.insert("schema".into(), crate::record::load::SCHEMA_VERSION.into());
        fields.entry("url").or_insert_with(|| "".into());
        serde_json::from_value(Value::Object(fields))
            .map_err(|e| E::custom(format!("load figures: {e}")))
    }

    pub(crate) fn serialize<S: Serializer>(load: &LoadReport, s: S) -> Result<S::Ok, S::Error> {
        write(load, &["schema"], s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<LoadReport, D::Error> {
        read(Map::deserialize(d)?)
    }

    /// A step line's load: present when the line has a throughput.
    pub(crate) mod optional {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(
            load: &Option<LoadReport>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match load {
                Some(load) => write(load, &LINE_OWNS, s),
                None => s.serialize_map(Some(0))?.end(),
            }
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<LoadReport>, D::Error> {
            let fields = Map::deserialize(d)?;
            if !fields.contains_key("throughput_rps") {
                return Ok(None);
            }
            read(fields).map(Some)
        }
    }
}
