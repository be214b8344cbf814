//! The experiment spec: a TOML file read with unknown keys refused, and every error located
//! (file, line, column, key path, what was expected) so a typo costs seconds, not a run.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::analyze::stats::{self, AUTO_MAX_REPETITIONS};
use crate::observe::extra::{ObserveEntry, ProcessSelector};
use crate::observe::metrics::{parse_url, MetricsError, MetricsFormat, MetricsPlan};

/// A spec file as written (before validation into a [`super::plan::Plan`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Name of the experiment; the run directory is `<name>-<timestamp>`.
    pub name: String,
    /// Free text carried into the report.
    #[serde(default)]
    pub description: Option<String>,
    /// Measured window of each step.
    #[serde(default = "default_duration")]
    pub duration: Dur,
    /// Load run before each step's measured window and discarded (the transition).
    #[serde(default = "default_warmup")]
    pub warmup: Dur,
    /// Pause after each step.
    #[serde(default)]
    pub cooldown: Dur,
    /// Runs of each step: a number, or `"auto"` (until the throughput's CV is under 3%, at
    /// most 5 runs).
    #[serde(default)]
    pub repetitions: Repetitions,
    /// The staircase: client counts.
    #[serde(default)]
    pub clients: Option<Counts>,
    /// An open-loop series: request rates (total requests/s) instead of client counts.
    #[serde(default)]
    pub rate: Option<Rates>,
    /// Search the rate range by bisection for the highest rate meeting a latency target.
    #[serde(default)]
    pub find: Option<FindSpec>,
    /// Requests in flight per connection.
    #[serde(default = "one")]
    pub depth: usize,
    /// Connections each client opens.
    #[serde(default = "one")]
    pub connections_per_client: usize,
    /// Grow the server's and client's cpusets with the client count (one CPU per client).
    #[serde(default)]
    pub cpus_follow_clients: bool,
    /// Placement policies: `shared`, `separated`, `balanced`, or a name in `custom_placements`.
    #[serde(default = "default_placements")]
    pub placements: Vec<String>,
    /// Cpuset tables in the messenger study's JSON format, by placement name.
    #[serde(default)]
    pub custom_placements: BTreeMap<String, CustomPlacementSpec>,
    /// The servers under test.
    pub targets: Vec<TargetSpec>,
    /// The load generator.
    #[serde(default)]
    pub client: ClientSpec,
    /// What a failed step does to the rest of the run.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// Largest share of failed requests (errors / (requests + errors)) a step may have and
    /// still be `ok`; above it the step's status is `errors`.
    #[serde(default = "default_max_error_ratio")]
    pub max_error_ratio: f64,
    /// A step in whose window other processes took at least this share (percent) of the
    /// server's or the load generator's CPUs is `disturbed`: run again, and left out of the
    /// analysis when still disturbed (unless `run --keep-disturbed`).
    #[serde(default = "default_disturbed_pct")]
    pub disturbed_pct: f64,
    /// Stop a series early: `saturated`.
    #[serde(default)]
    pub stop_when: Option<StopWhen>,
    /// When the server restarts: once per (target, placement) or before every step.
    #[serde(default)]
    pub restart: Restart,
    /// Comparisons for the report (kept as written; the reports read them).
    #[serde(default)]
    pub comparisons: Vec<toml::Table>,
    /// Pass/fail gates on the figures (a breached one exits 4; `abort = true` ends the run).
    #[serde(default)]
    pub thresholds: Vec<crate::analyze::thresholds::Threshold>,
    /// What the report shows (`heat_map = "TARGET/PLACEMENT@CLIENTS"`).
    #[serde(default)]
    pub report: Option<ReportSpec>,
    /// Further processes measured like the server (by pid file, command name or pids command).
    #[serde(default)]
    pub observe: Vec<ObserveSpec>,
    /// Profile passes at chosen load levels (see `sweep::profiling`).
    #[serde(default)]
    pub profile: Option<crate::profile::passes::ProfileSpec>,
    /// Other hosts reached over ssh, by name: `name = "ssh://user@address:port"` or a table
    /// with `url`, `identity_file`, `workdir`, `known_hosts_file`.
    #[serde(default)]
    pub hosts: BTreeMap<String, crate::remote::HostEntry>,
}

fn default_duration() -> Dur {
    Dur(Duration::from_secs(10))
}
fn default_warmup() -> Dur {
    Dur(Duration::from_secs(1))
}
fn default_max_error_ratio() -> f64 {
    0.01
}
fn default_disturbed_pct() -> f64 {
    10.0
}
fn one() -> usize {
    1
}
fn default_placements() -> Vec<String> {
    vec!["shared".into()]
}

/// A server under test.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// Name in the results.
    pub name: String,
    /// A built-in server: the arguments of `stairbench serve`, e.g. `msgr --arch reactor`.
    #[serde(default)]
    pub builtin: Option<String>,
    /// A command template run by `sh -c` (must stay in the foreground); placeholders
    /// `{cpuset}`, `{threads}`, `{port}`, `{clients}`, `{out}` (the run directory) and
    /// `{spec_dir}` (the spec file's directory).
    #[serde(default)]
    pub command: Option<String>,
    /// A fixed port; otherwise a free one is chosen.
    #[serde(default)]
    pub port: Option<u16>,
    /// How to know the server is ready (default: its TCP port accepts).
    #[serde(default)]
    pub ready: Option<ReadySpec>,
    /// URL template for the built-in load engine (default from the target kind).
    #[serde(default)]
    pub url: Option<String>,
    /// Requests in flight per connection for this target (overrides the top-level depth).
    #[serde(default)]
    pub depth: Option<usize>,
    /// gRPC targets: the request message's file (serialized protobuf), relative to the spec
    /// or under `{spec_dir}`; overrides `[client] body_file` for this target.
    #[serde(default)]
    pub body_file: Option<String>,
    /// gRPC targets: the `.proto` defining the url's method (`load --proto`), relative to the
    /// spec or under `{spec_dir}`; `data` is encoded with its input type.
    #[serde(default)]
    pub proto: Option<String>,
    /// gRPC targets: a FileDescriptorSet in place of `proto` (`load --protoset`).
    #[serde(default)]
    pub protoset: Option<String>,
    /// Directories `proto`'s imports are looked up in (`load --import-path`).
    #[serde(default)]
    pub import_paths: Vec<String>,
    /// gRPC targets: the request message as JSON (protobuf's JSON mapping), a string or a
    /// table (`load --data`), overriding `[client] data`; encoded once by `proto` (or
    /// `protoset`) when the plan is made: a spec needs one, as the server's reflection cannot
    /// be asked before its server is up.
    #[serde(default)]
    pub data: Option<toml::Value>,
    /// gRPC targets: messages each call sends on a client-streaming or bidirectional method
    /// (`load --stream-messages`), overriding `[client] stream_messages`.
    #[serde(default)]
    pub stream_messages: Option<u32>,
    /// Copies of the server, each on an equal share of the server cpuset with its own port
    /// (the client side is split the same way); the step sums them.
    #[serde(default)]
    pub instances: Option<usize>,
    /// Metrics the target reports itself: `{ file = "{metrics}", format = "json" | "hlog" }`
    /// or `{ url = "http://127.0.0.1:{port}/metrics" }`.
    #[serde(default)]
    pub metrics: Option<MetricsSpec>,
    /// The `[hosts]` entry the server runs on (this machine when absent).
    #[serde(default)]
    pub host: Option<String>,
    /// A built-in kvd target whose ranks run on other hosts: rank j on `rank_hosts[j]`, each
    /// started there by the runner (`--rank j`, region NAME-rj, its own metrics file).
    #[serde(default)]
    pub rank_hosts: Option<Vec<String>>,
    /// A server already running (url, no builtin or command): its process id.
    #[serde(default)]
    pub pid: Option<i32>,
    /// A server already running: a file holding its process id (relative to the spec).
    #[serde(default)]
    pub pidfile: Option<PathBuf>,
    /// A server already running: its process name, as in /proc/PID/comm.
    #[serde(default)]
    pub process: Option<String>,
    /// The signal that stops it cleanly (`TERM` by default; `INT` for PostgreSQL, whose
    /// TERM waits for its clients to leave), sent to its whole process group.
    #[serde(default)]
    pub stop_signal: Option<String>,
    /// How long it may take to exit after `stop_signal` before it is killed (default 2s).
    #[serde(default)]
    pub stop_timeout: Option<Dur>,
}

/// Readiness probe of a target.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReadySpec {
    /// Ready when the TCP port accepts a connection.
    #[serde(default)]
    pub tcp: Option<bool>,
    /// Ready when a line of stdout or stderr matches this regex.
    #[serde(default)]
    pub log: Option<String>,
    /// Give up after this long.
    #[serde(default)]
    pub timeout: Option<Dur>,
}

/// A value of the spec that cannot be used; [`SpecFile::error_at`] adds its file, line and key.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    /// `clients = []`.
    #[error("the list is empty")]
    NoCounts,
    /// A client count of 0 in a list.
    #[error("a count of 0 clients")]
    ZeroClients,
    /// A count range that is empty or starts at 0.
    #[error("from = {from} to = {to}: expected 1 <= from <= to")]
    CountBounds {
        /// Its `from`.
        from: usize,
        /// Its `to`.
        to: usize,
    },
    /// A count range with both `step` and `double`.
    #[error("give either step or double = true, not both")]
    StepAndDouble,
    /// A count range with neither `step` nor `double`.
    #[error("expected step = N or double = true")]
    NoStep,
    /// `step = 0`.
    #[error("step must be at least 1")]
    ZeroStep,
    /// A rate list that is empty or has a rate at or below 0.
    #[error("expected a non-empty list of positive rates")]
    Rates,
    /// A rate range with no `step` (and no `find`).
    #[error("expected step = N (or a find = {{...}} search)")]
    NoRateStep,
    /// A rate range that is empty or does not move.
    #[error("expected 0 < from <= to and step > 0")]
    RateBounds,
    /// `metrics` with both a file and a url.
    #[error(
        "give file = \"{{metrics}}\" or url = \"http://127.0.0.1:{{port}}/metrics\", not both"
    )]
    MetricsBoth,
    /// `metrics` with neither a file nor a url.
    #[error("expected file = \"{{metrics}}\" (with format = \"json\" or \"hlog\") or url = \"http://127.0.0.1:{{port}}/metrics\"")]
    MetricsNone,
    /// A metrics file format other than json or hlog.
    #[error("format {0:?}: expected \"json\" or \"hlog\"")]
    MetricsFormat(String),
    /// A format given with a metrics url.
    #[error("a metrics url answers JSON: leave format out")]
    UrlFormat,
    /// A metrics url that cannot be read from.
    #[error(transparent)]
    MetricsUrl(#[from] MetricsError),
    /// An `[[observe]]` entry with no selector or more than one.
    #[error("observe {0:?}: give exactly one of pid_file = \"...\", command = \"name\" or pids_command = \"...\"")]
    ObserveSelector(String),
}

/// `metrics = { file = "{metrics}", format = "json" }` or `metrics = { url = "..." }`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSpec {
    /// A file the target writes; `{metrics}` is a path in the run directory (also given to
    /// the target's command through the same placeholder).
    #[serde(default)]
    pub file: Option<String>,
    /// Format of the file: `json` (default) or `hlog` (an HdrHistogram interval log).
    #[serde(default)]
    pub format: Option<String>,
    /// A loopback HTTP URL answering JSON; `{port}` is the target's port.
    #[serde(default)]
    pub url: Option<String>,
}

impl MetricsSpec {
    /// Checks it into the observers' plan of where the target's metrics come from.
    pub fn plan(&self) -> Result<MetricsPlan, ValueError> {
        match (&self.file, &self.url) {
            (Some(_), Some(_)) => Err(ValueError::MetricsBoth),
            (None, None) => Err(ValueError::MetricsNone),
            (Some(file), None) => {
                let format = match self.format.as_deref() {
                    None | Some("json") => MetricsFormat::Json,
                    Some("hlog") => MetricsFormat::Hlog,
                    Some(other) => return Err(ValueError::MetricsFormat(other.to_string())),
                };
                Ok(MetricsPlan::File {
                    template: file.clone(),
                    format,
                })
            }
            (None, Some(url)) => {
                if self.format.as_deref().is_some_and(|f| f != "json") {
                    return Err(ValueError::UrlFormat);
                }
                parse_url(&url.replace("{port}", "1"))?;
                Ok(MetricsPlan::Url(url.clone()))
            }
        }
    }
}

/// An `[[observe]]` entry as written.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ObserveSpec {
    /// Name in the results.
    pub name: String,
    /// A file holding the process id (relative to the spec file).
    #[serde(default)]
    pub pid_file: Option<PathBuf>,
    /// The process's command name, as in /proc/PID/comm (every match is observed).
    #[serde(default)]
    pub command: Option<String>,
    /// A shell command that prints process ids.
    #[serde(default)]
    pub pids_command: Option<String>,
}

impl ObserveSpec {
    /// Checks it into the observers' entry; relative pid files are read from `spec_dir`.
    pub fn entry(&self, spec_dir: &Path) -> Result<ObserveEntry, ValueError> {
        let selector = match (&self.pid_file, &self.command, &self.pids_command) {
            (Some(f), None, None) => ProcessSelector::PidFile(spec_dir.join(f)),
            (None, Some(c), None) if !c.is_empty() => ProcessSelector::Command(c.clone()),
            (None, None, Some(c)) if !c.trim().is_empty() => {
                ProcessSelector::PidsCommand(c.clone())
            }
            _ => return Err(ValueError::ObserveSelector(self.name.clone())),
        };
        Ok(ObserveEntry {
            name: self.name.clone(),
            selector,
        })
    }
}

/// A cpuset table file in the messenger study's format and the policy key to read from it.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CustomPlacementSpec {
    /// Path of the JSON table, relative to the spec file.
    pub file: PathBuf,
    /// Top-level key of the table (default: the placement's name).
    #[serde(default)]
    pub key: Option<String>,
}

/// The load generator: the built-in engine (default) or an external command plus a parser.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSpec {
    /// URL template for the built-in engine; `{port}` is the target's port.
    #[serde(default)]
    pub url: Option<String>,
    /// Generator threads (default: one per client CPU, at most one per connection).
    #[serde(default)]
    pub threads: Option<usize>,
    /// Request timeout.
    #[serde(default)]
    pub timeout: Option<Dur>,
    /// External command template; placeholders `{cpuset}`, `{threads}`, `{clients}`,
    /// `{connections}`, `{depth}`, `{port}`, `{duration_s}`, `{warmup_s}`, `{rate}`, `{out}`,
    /// `{url}`, `{spec_dir}`. The tool runs whole inside the observed window: its own warm-up, if it has
    /// one, is counted.
    #[serde(default)]
    pub command: Option<String>,
    /// Parser of the external command's output: wrk, redis-benchmark, crimson-msgr, json, regex.
    #[serde(default)]
    pub parser: Option<String>,
    /// Options of the parser (field map for json, patterns for regex).
    #[serde(default)]
    pub parser_options: Option<toml::Table>,
    /// HTTP method.
    #[serde(default)]
    pub method: Option<String>,
    /// HTTP headers, `Name: value`.
    #[serde(default)]
    pub headers: Vec<String>,
    /// HTTP body.
    #[serde(default)]
    pub body: Option<String>,
    /// gRPC targets: the request message's file (serialized protobuf, `load --body-file`),
    /// relative to the spec or under `{spec_dir}`; every gRPC target's unless it has its own.
    #[serde(default)]
    pub body_file: Option<String>,
    /// gRPC targets: the `.proto` defining their methods (`load --proto`), relative to the
    /// spec or under `{spec_dir}`; every gRPC target's unless it has its own.
    #[serde(default)]
    pub proto: Option<String>,
    /// gRPC targets: a FileDescriptorSet in place of `proto` (`load --protoset`).
    #[serde(default)]
    pub protoset: Option<String>,
    /// Directories `proto`'s imports are looked up in (`load --import-path`).
    #[serde(default)]
    pub import_paths: Vec<String>,
    /// gRPC targets: the request message as JSON (protobuf's JSON mapping), a string or a
    /// table (`load --data`); each gRPC target's, encoded by its method's input type (from
    /// `proto` or `protoset`: not by reflection, the server being down when the plan is made),
    /// unless the target has its own.
    #[serde(default)]
    pub data: Option<toml::Value>,
    /// gRPC targets: messages each call sends on a client-streaming or bidirectional method
    /// (`load --stream-messages`), unless the target gives its own.
    #[serde(default)]
    pub stream_messages: Option<u32>,
    /// Redis key space.
    #[serde(default)]
    pub keys: Option<u64>,
    /// Redis share of GETs.
    #[serde(default)]
    pub read_ratio: Option<f64>,
    /// Redis SET value size in bytes.
    #[serde(default)]
    pub value_size: Option<usize>,
    /// Zipf exponent of the key distribution (uniform when absent).
    #[serde(default)]
    pub zipf: Option<f64>,
    /// Seed of the key generator.
    #[serde(default)]
    pub seed: Option<u64>,
    /// msgr payload size in bytes.
    #[serde(default)]
    pub msg_size: Option<usize>,
    /// memcache:// targets: "text" (get/set, default) or "meta" (mg/ms) commands.
    #[serde(default)]
    pub memcache_commands: Option<String>,
    /// A request file (HTTP requests or redis commands with placeholders), relative to the
    /// spec; replaces method/headers/body and redis's GET/SET.
    #[serde(default)]
    pub requests: Option<PathBuf>,
    /// How each connection picks from `requests`: "weighted" (default) or "sequential".
    #[serde(default)]
    pub order: Option<String>,
    /// TLS (`https://`): accept any server certificate.
    #[serde(default)]
    pub insecure: Option<bool>,
    /// TLS (`https://`): verify the server against this PEM file's CA certificates
    /// (relative to the spec) instead of the system's.
    #[serde(default)]
    pub cacert: Option<PathBuf>,
    /// How open-loop requests are spaced: "uniform" (default) or "poisson" (seeded
    /// exponential gaps); open-loop `rate` series only.
    #[serde(default)]
    pub arrivals: Option<String>,
    /// Refused with its reason: a ramp inside a step would mix load levels in its figures.
    #[serde(default)]
    pub ramp: Option<String>,
    /// Local addresses the built-in engine connects from, round-robin (`load --source-addrs`
    /// syntax: `127.0.0.2-127.0.0.9`, or a comma list).
    #[serde(default)]
    pub source_addrs: Option<String>,
    /// Connections the built-in engine opens per second (`load --connect-rate`); all at once
    /// when absent.
    #[serde(default)]
    pub connect_rate: Option<f64>,
    /// Client groups, each on a host (this machine when it names none); a step's clients,
    /// connections and rate are split equally among them and their results merged exactly.
    #[serde(default)]
    pub groups: Vec<ClientGroupSpec>,
}

/// One client group: where its share of the load generator runs.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientGroupSpec {
    /// The `[hosts]` entry it runs on (this machine when absent or "local").
    #[serde(default)]
    pub host: Option<String>,
}

/// A latency target for the rate search.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FindSpec {
    /// Highest acceptable p99 latency, milliseconds.
    pub p99_ms: f64,
    /// Bisection steps (default 7).
    #[serde(default)]
    pub max_steps: Option<usize>,
}

/// What a failed step does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Record it and go on.
    #[default]
    Continue,
    /// Record it and end the run.
    Stop,
}

/// When to stop stepping a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopWhen {
    /// Two steps in a row add under 5% throughput while latency grows.
    Saturated,
}

/// When the server is restarted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Restart {
    /// Once per (target, placement).
    #[default]
    Series,
    /// Before every step.
    Step,
}

/// A duration written as "2s", "500ms", "1m", "1h", "250us" or "1.5s".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dur(pub Duration);

pub use crate::units::{format_duration, parse_duration};

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d).map_err(|_| {
            de::Error::custom("expected a duration string such as \"2s\", \"500ms\" or \"1m\"")
        })?;
        parse_duration(&text).map(Dur).map_err(de::Error::custom)
    }
}

impl Serialize for Dur {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

/// Client counts: a list, one number, `{from, to, step}` or `{from, to, double = true}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Counts {
    /// Explicit counts.
    List(Vec<usize>),
    /// An arithmetic or doubling range.
    Range(CountRange),
}

/// `{from, to, step}` or `{from, to, double = true}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CountRange {
    /// First count.
    pub from: usize,
    /// Last count (included when reached).
    pub to: usize,
    /// Increment.
    #[serde(default)]
    pub step: Option<usize>,
    /// Double at each step instead.
    #[serde(default)]
    pub double: bool,
}

impl Counts {
    /// The counts in order.
    pub fn expand(&self) -> Result<Vec<usize>, ValueError> {
        match self {
            Counts::List(v) if v.is_empty() => Err(ValueError::NoCounts),
            Counts::List(v) if v.contains(&0) => Err(ValueError::ZeroClients),
            Counts::List(v) => Ok(v.clone()),
            Counts::Range(r) => r.expand(),
        }
    }
}

impl CountRange {
    fn expand(&self) -> Result<Vec<usize>, ValueError> {
        if self.from == 0 || self.to < self.from {
            return Err(ValueError::CountBounds {
                from: self.from,
                to: self.to,
            });
        }
        let mut out = Vec::new();
        let mut n = self.from;
        match (self.step, self.double) {
            (Some(_), true) => return Err(ValueError::StepAndDouble),
            (None, false) => return Err(ValueError::NoStep),
            (Some(0), _) => return Err(ValueError::ZeroStep),
            (Some(step), false) => {
                while n <= self.to {
                    out.push(n);
                    n += step;
                }
            }
            (None, true) => {
                while n <= self.to {
                    out.push(n);
                    n *= 2;
                }
            }
        }
        Ok(out)
    }
}

impl<'de> Deserialize<'de> for Counts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Counts;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a count, a list of counts, {from, to, step} or {from, to, double = true}",
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Counts, E> {
                Ok(Counts::List(vec![v as usize]))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Counts, E> {
                usize::try_from(v)
                    .map(|n| Counts::List(vec![n]))
                    .map_err(|_| E::custom(format!("{v} is negative; expected a count of clients")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Counts, A::Error> {
                let mut v = Vec::new();
                while let Some(n) = seq.next_element::<usize>()? {
                    v.push(n);
                }
                Ok(Counts::List(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Counts, A::Error> {
                CountRange::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(Counts::Range)
            }
        }
        d.deserialize_any(V)
    }
}

/// Request rates: a list or `{from, to, step}` (requests/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Rates {
    /// Explicit rates.
    List(Vec<f64>),
    /// A range; with `find` only `from` and `to` are used (the bisection bounds).
    Range(RateRange),
}

/// `{from, to, step}` of request rates.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RateRange {
    /// Lowest rate.
    pub from: f64,
    /// Highest rate.
    pub to: f64,
    /// Increment (not needed with `find`).
    #[serde(default)]
    pub step: Option<f64>,
}

impl Rates {
    /// The (lowest, highest) rate.
    pub fn bounds(&self) -> (f64, f64) {
        match self {
            Rates::List(v) => (
                v.iter().copied().fold(f64::INFINITY, f64::min),
                v.iter().copied().fold(0.0, f64::max),
            ),
            Rates::Range(r) => (r.from, r.to),
        }
    }

    /// The rates in order.
    pub fn expand(&self) -> Result<Vec<f64>, ValueError> {
        match self {
            Rates::List(v) if v.is_empty() || v.iter().any(|r| *r <= 0.0) => Err(ValueError::Rates),
            Rates::List(v) => Ok(v.clone()),
            Rates::Range(r) => {
                let step = r.step.ok_or(ValueError::NoRateStep)?;
                if r.from <= 0.0 || r.to < r.from || step <= 0.0 {
                    return Err(ValueError::RateBounds);
                }
                let n = ((r.to - r.from) / step).floor() as usize;
                Ok((0..=n).map(|i| r.from + step * i as f64).collect())
            }
        }
    }
}

impl<'de> Deserialize<'de> for Rates {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Rates;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of rates or {from, to, step}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Rates, A::Error> {
                let mut v = Vec::new();
                while let Some(n) = seq.next_element::<f64>()? {
                    v.push(n);
                }
                Ok(Rates::List(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Rates, A::Error> {
                RateRange::deserialize(de::value::MapAccessDeserializer::new(map)).map(Rates::Range)
            }
        }
        d.deserialize_any(V)
    }
}

/// A spec that could not be read, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// The file could not be read.
    // The OS error is in the message and not a `source`, so an error chain prints it once.
    #[error("cannot read spec {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        reason: std::io::Error,
    },
    /// Bad content, located.
    #[error("{}:{line}:{column}: {key}: {message}", file.display())]
    Invalid {
        /// The file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// Dotted key path, e.g. `targets[1].ready.timeout` (`(top)` for the document).
        key: String,
        /// What was wrong and what was expected.
        message: String,
    },
}

/// The run directory's record of the spec's directory (one absolute path), which
/// `run --resume DIR` needs to fill `{spec_dir}` and find the spec's relative files.
pub const SPEC_DIR_FILE: &str = "spec_dir.txt";

/// serde's "unknown field `clints`, expected one of `name`, ..." (or "unknown variant
/// `seperated`, expected ...") with the nearest known word named first: "unknown field
/// `clints` (did you mean `clients`?); expected one of ...".
fn with_suggestion(message: &str) -> String {
    let Some((what, rest)) = ["unknown field `", "unknown variant `"]
        .iter()
        .find_map(|p| {
            message
                .strip_prefix(p)
                .map(|rest| (&p[..p.len() - 2], rest))
        })
    else {
        return message.to_string();
    };
    let Some((word, expected)) = rest.split_once("`, expected ") else {
        return message.to_string();
    };
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match crate::units::closest(word, &known) {
        Some(near) => format!("{what} `{word}` (did you mean `{near}`?); expected {expected}"),
        None => message.to_string(),
    }
}

/// A spec file's directory, absolute where it exists ("." for a bare file name).
fn dir_of(path: &Path) -> PathBuf {
    let dir = path.parent().map(PathBuf::from).unwrap_or_default();
    let dir = if dir.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        dir
    };
    std::fs::canonicalize(&dir).unwrap_or(dir)
}

/// A spec with its source text (kept to locate later errors and to copy into the run).
#[derive(Debug, Clone)]
pub struct SpecFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The text as read.
    pub text: String,
    /// The parsed spec.
    pub spec: Spec,
    /// The directory `{spec_dir}` and the spec's relative files are taken from: the spec
    /// file's own, or, resuming a run from its copy, the one the run recorded
    /// (`spec_dir.txt`).
    pub dir: PathBuf,
}

impl SpecFile {
    /// Reads and parses a spec file.
    pub fn read(path: &Path) -> Result<SpecFile, SpecError> {
        let text = std::fs::read_to_string(path).map_err(|reason| SpecError::Read {
            path: path.to_path_buf(),
            reason,
        })?;
        Self::parse(path, &text)
    }

    /// Parses spec text; `path` is used in messages and to resolve relative files.
    pub fn parse(path: &Path, text: &str) -> Result<SpecFile, SpecError> {
        let located_by = |e: toml::de::Error, key: Option<String>| {
            let span = e.span().unwrap_or(0..0);
            let key = key.unwrap_or_else(|| "(top)".into());
            located(path, text, span, with_suggestion(e.message().trim()), key)
        };
        // The text is parsed once: a syntax error has no key path, and a type error finds its
        // key in the same tree (a second parse per error was half of a failed load's time).
        let doc = DeTable::parse(text).map_err(|e| located_by(e, None))?;
        let spec = Spec::deserialize(toml::de::Deserializer::from(doc.clone())).map_err(|e| {
            let key = key_path_in(doc.get_ref(), e.span().unwrap_or(0..0).start);
            located_by(e, key)
        })?;
        Ok(SpecFile {
            path: path.to_path_buf(),
            text: text.to_string(),
            spec,
            dir: dir_of(path),
        })
    }

    /// Reads the copy a run directory keeps (`DIR/spec.toml`), its relative files and
    /// `{spec_dir}` taken from the spec's own directory as the run recorded it, so a resumed
    /// run finds the scripts beside the original spec.
    pub fn read_from_run(run_dir: &Path) -> Result<SpecFile, SpecError> {
        let mut spec = Self::read(&run_dir.join("spec.toml"))?;
        let recorded = run_dir.join(SPEC_DIR_FILE);
        if let Ok(text) = std::fs::read_to_string(&recorded) {
            let dir = PathBuf::from(text.trim_end_matches('\n'));
            if !dir.is_dir() {
                return Err(SpecError::Read {
                    path: dir,
                    reason: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        format!(
                            "the spec's directory, recorded in {}, is gone: give the spec again (stairbench run SPEC --resume {})",
                            recorded.display(),
                            run_dir.display()
                        ),
                    ),
                });
            }
            spec.dir = dir;
        }
        Ok(spec)
    }

    /// An error about the value at a key path (e.g. `["targets", "0", "builtin"]`).
    pub fn error_at(&self, keys: &[&str], message: impl Into<String>) -> SpecError {
        let span = span_of(&self.text, keys).unwrap_or(0..0);
        located(
            &self.path,
            &self.text,
            span,
            message.into(),
            render_path(keys),
        )
    }
}

fn located(
    path: &Path,
    text: &str,
    span: std::ops::Range<usize>,
    message: String,
    key: String,
) -> SpecError {
    let (line, column) = line_col(text, span.start);
    SpecError::Invalid {
        file: path.to_path_buf(),
        line,
        column,
        key,
        message,
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

fn render_path(keys: &[&str]) -> String {
    let mut out = String::new();
    for k in keys {
        if k.parse::<usize>().is_ok() {
            out.push_str(&format!("[{k}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(k);
        }
    }
    out
}

type DeTable<'i> = toml::de::DeTable<'i>;
type DeValue<'i> = toml::de::DeValue<'i>;

/// The dotted path of the deepest key whose key or value covers `offset`.
fn key_path_in(doc: &DeTable<'_>, offset: usize) -> Option<String> {
    let mut path = Vec::new();
    walk_table(doc, offset, &mut path);
    (!path.is_empty()).then(|| render_path(&path.iter().map(String::as_str).collect::<Vec<_>>()))
}

fn walk_table(table: &DeTable<'_>, offset: usize, path: &mut Vec<String>) {
    for (k, v) in table.iter() {
        if k.span().contains(&offset) || covers(v, offset) {
            path.push(k.get_ref().to_string());
            walk_value(v.get_ref(), offset, path);
            return;
        }
    }
}

fn walk_value(value: &DeValue<'_>, offset: usize, path: &mut Vec<String>) {
    match value {
        DeValue::Table(t) => walk_table(t, offset, path),
        DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                if covers(item, offset) {
                    path.push(i.to_string());
                    walk_value(item.get_ref(), offset, path);
                    return;
                }
            }
        }
        _ => {}
    }
}

// An array-of-tables element's own span may not cover its keys; its entries' spans do.
fn covers(value: &toml::Spanned<DeValue<'_>>, offset: usize) -> bool {
    value.span().contains(&offset)
        || match value.get_ref() {
            DeValue::Table(t) => t
                .iter()
                .any(|(k, v)| k.span().contains(&offset) || covers(v, offset)),
            DeValue::Array(a) => a.iter().any(|item| covers(item, offset)),
            _ => false,
        }
}

/// The span of the value at a key path, for errors found after parsing.
fn span_of(text: &str, keys: &[&str]) -> Option<std::ops::Range<usize>> {
    let doc = DeTable::parse(text).ok()?;
    let (first, rest) = keys.split_first()?;
    let (_, value) = doc.get_ref().iter().find(|(k, _)| k.get_ref() == first)?;
    Some(span_in(value, rest))
}

fn span_in(value: &toml::Spanned<DeValue<'_>>, keys: &[&str]) -> std::ops::Range<usize> {
    let Some((first, rest)) = keys.split_first() else {
        return value.span();
    };
    let next = match value.get_ref() {
        DeValue::Table(t) => t.iter().find(|(k, _)| k.get_ref() == first).map(|(_, v)| v),
        DeValue::Array(a) => first.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    };
    next.map_or_else(|| value.span(), |v| span_in(v, rest))
}

/// `repetitions` in a spec: a fixed count, or `"auto"` (repeat until the throughput's CV is
/// under 3%, at most 5 runs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repetitions {
    /// Exactly this many runs of each point.
    Fixed(usize),
    /// Runs until the throughput settles (see [`stats::repeat_again`]).
    Auto,
}

impl Default for Repetitions {
    fn default() -> Self {
        Repetitions::Fixed(1)
    }
}

impl Repetitions {
    /// Runs of a point at most (the dry-run estimate assumes them all).
    pub fn max_runs(self) -> usize {
        match self {
            Repetitions::Fixed(n) => n,
            Repetitions::Auto => AUTO_MAX_REPETITIONS,
        }
    }

    /// Whether another run of a point is due after `runs` runs whose ok throughputs (req/s)
    /// are `ok_rps`. Under `auto`, a run that failed or was skipped ends the point: repeating
    /// a failure does not make it settle.
    pub fn again(self, runs: usize, ok_rps: &[f64]) -> bool {
        match self {
            Repetitions::Fixed(n) => runs < n,
            Repetitions::Auto => ok_rps.len() == runs && stats::repeat_again(ok_rps),
        }
    }

    /// How the plan shows a point's runs: `1 run`, `3 runs` or `2 to 5 runs (auto: ...)`.
    pub fn describe(self) -> String {
        match self {
            Repetitions::Fixed(1) => "1 run".into(),
            Repetitions::Fixed(n) => format!("{n} runs"),
            Repetitions::Auto => format!(
                "2 to {AUTO_MAX_REPETITIONS} runs (auto: until the throughput's CV < {:.0}%)",
                stats::AUTO_CV_TARGET * 100.0
            ),
        }
    }
}

impl<'de> Deserialize<'de> for Repetitions {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Repetitions;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number of runs (1 or more) or \"auto\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Repetitions, E> {
                usize::try_from(v)
                    .ok()
                    .filter(|n| *n >= 1)
                    .map(Repetitions::Fixed)
                    .ok_or_else(|| E::custom(format!("{v}: expected at least 1, or \"auto\"")))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Repetitions, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Repetitions, E> {
                match v {
                    "auto" => Ok(Repetitions::Auto),
                    other => Err(E::custom(format!(
                        "{other:?}: expected a number of runs or \"auto\""
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Repetitions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Repetitions::Fixed(n) => s.serialize_u64(*n as u64),
            Repetitions::Auto => s.serialize_str("auto"),
        }
    }
}

/// The spec's `[report]` section.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ReportSpec {
    /// The step whose per-core busy % the heat map shows, `TARGET[/PLACEMENT][@CLIENTS]`
    /// (the busiest matching step; default: the busiest step of the first series).
    #[serde(default)]
    pub heat_map: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mistyped_key_names_the_nearest_known_one() {
        let text = "name = \"x\"\nclints = [1, 2]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n";
        let e = SpecFile::parse(Path::new("s.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("s.toml:2:1: clints: unknown field `clints` (did you mean `clients`?); expected one of `name`"),
            "{e}"
        );
        let text = "name = \"x\"\nzzzzzz = 1\n";
        let e = SpecFile::parse(Path::new("s.toml"), text)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("did you mean"), "{e}");
    }

    #[test]
    fn count_ranges() {
        let r = |from, to, step, double| CountRange {
            from,
            to,
            step,
            double,
        };
        assert_eq!(
            r(1, 64, None, true).expand().unwrap(),
            vec![1, 2, 4, 8, 16, 32, 64]
        );
        assert_eq!(
            r(50, 200, Some(50), false).expand().unwrap(),
            vec![50, 100, 150, 200]
        );
        assert!(r(1, 4, None, false).expand().is_err());
        assert!(r(4, 1, Some(1), false).expand().is_err());
    }

    #[test]
    fn an_entry_needs_one_selector() {
        let spec = ObserveSpec {
            name: "db".into(),
            pid_file: Some("db.pid".into()),
            command: Some("postgres".into()),
            pids_command: None,
        };
        let err = spec.entry(Path::new("/s")).unwrap_err().to_string();
        assert!(err.contains("exactly one"), "{err}");
    }

    #[test]
    fn spec_needs_one_source() {
        use crate::observe::metrics::MetricsSource;
        let none = MetricsSpec::default().plan().unwrap_err().to_string();
        assert!(none.contains("expected file"), "{none}");
        let spec = MetricsSpec {
            file: Some("{metrics}".into()),
            format: Some("hlog".into()),
            url: None,
        };
        let plan = spec.plan().unwrap();
        assert_eq!(plan.extension(), "hlog");
        let src = plan.resolve(Path::new("/r/metrics/a.hlog"), 80);
        assert_eq!(
            src,
            MetricsSource::File {
                path: "/r/metrics/a.hlog".into(),
                format: MetricsFormat::Hlog
            }
        );
    }
}
