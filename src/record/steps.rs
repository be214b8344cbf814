//! One step's result: the line of `steps.jsonl` (see `schema/steps.schema.json`).
//!
//! The engine's [`LoadReport`] fields sit at the top level beside the step's identity, the
//! server's observed figures and the derived per-request figures, so that one `jq` path
//! reaches any of them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::figures::{load_fields, Observed, ServerFigures, StepFigures};
use crate::record::load::LoadReport;
use crate::record::observed::{Observation, PerRequest};

/// Version of the `steps.jsonl` layout.
pub const STEPS_SCHEMA_VERSION: u32 = 1;

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    /// Measured.
    Ok,
    /// Tried and failed (see `reason`): the target did not start or crashed, the load could
    /// not run.
    Failed,
    /// Measured, but more requests failed than the spec's `max_error_ratio` allows (see
    /// `reason`): left out of the analysis.
    Errors,
    /// Not run (see `reason`): no CPUs for it, saturated series, an earlier failure.
    Skipped,
    /// Measured, but other processes took the spec's `disturbed_pct` or more of the server's
    /// or the load generator's CPUs in its window (see `reason` and `disturbed`): kept and
    /// shown, left out of the analysis.
    Disturbed,
}

impl StepStatus {
    /// Every status, for tests and schemas.
    pub const ALL: [StepStatus; 5] = [
        StepStatus::Ok,
        StepStatus::Failed,
        StepStatus::Errors,
        StepStatus::Skipped,
        StepStatus::Disturbed,
    ];

    /// The name steps.jsonl gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Ok => "ok",
            StepStatus::Failed => "failed",
            StepStatus::Errors => "errors",
            StepStatus::Skipped => "skipped",
            StepStatus::Disturbed => "disturbed",
        }
    }
}

/// What kind of error failed a step (`error_kind` in `steps.jsonl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorKind {
    /// The target did not start or crashed.
    Launch,
    /// The load could not run or connect.
    Load,
    /// An external tool's output could not be parsed.
    Parse,
    /// Another host (ssh, a host that is down, a client group there).
    Remote,
    /// Writing the run directory.
    Io,
}

/// One finished step: the typed line of `steps.jsonl` (written and read through
/// [`StepLine`], its layout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "StepLine", from = "StepLine")]
pub struct StepResult {
    /// File stem of the step's raw files (`intervals/<id>.csv`, `hist/<id>.hlog`).
    pub id: String,
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients of the step.
    pub clients: usize,
    /// Repetition index, from 0.
    pub rep: usize,
    /// Open-loop rate asked for (requests/s), absent in closed loop.
    pub rate_rps: Option<f64>,
    /// Requests configured in flight (clients × connections per client × depth).
    pub inflight: usize,
    /// Server cpuset as a CPU list.
    pub server_cpus: String,
    /// Client cpuset as a CPU list.
    pub client_cpus: String,
    /// Wall-clock start, seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// How the step ended.
    pub status: StepStatus,
    /// Why it failed or was skipped.
    pub reason: Option<String>,
    /// What kind of error failed it (absent on a step that did not fail).
    pub error_kind: Option<ErrorKind>,
    /// The load generator's figures (absent when nothing was measured).
    pub load: Option<LoadReport>,
    /// The server's observed figures over the measured window, or why there are none (None:
    /// nothing was observed).
    pub server: Option<ServerFigures>,
    /// Figures per request (CPU, context switches, ...), each None where not measured.
    pub per_request: PerRequest,
    /// The step's other figures (observers' CPU, a split load's parts, ...).
    pub figures: StepFigures,
}

/// The layout of a `steps.jsonl` line: the step's identity, the load's fields, the
/// per-request figures and the others side by side at the top level, so that one `jq` path
/// reaches any of them; `server` is an object.
#[derive(Serialize, Deserialize)]
struct StepLine {
    schema: u32,
    id: String,
    target: String,
    placement: String,
    clients: usize,
    rep: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    rate_rps: Option<f64>,
    inflight: usize,
    server_cpus: String,
    client_cpus: String,
    started_unix_s: f64,
    status: StepStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error_kind: Option<ErrorKind>,
    /// Written for a step with a load: errors / (requests + errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error_ratio: Option<f64>,
    /// Written for a step with a load: the URLs it went to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<Urls>,
    /// Required, null when nothing was observed.
    #[serde(deserialize_with = "server_or_null")]
    server: Option<ServerFigures>,
    #[serde(flatten, skip_serializing_if = "unmeasured")]
    per_request: PerRequest,
    #[serde(flatten)]
    figures: StepFigures,
    /// Last: it reads the keys the others left.
    #[serde(flatten, with = "load_fields::optional")]
    load: Option<LoadReport>,
}

/// `url`: a list; runs before it was kept one string (several URLs joined by spaces).
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Urls {
    List(Vec<String>),
    One(String),
}

fn server_or_null<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<ServerFigures>, D::Error> {
    Option::deserialize(d)
}

fn unmeasured(per: &PerRequest) -> bool {
    *per == PerRequest::default()
}

impl From<StepResult> for StepLine {
    fn from(step: StepResult) -> StepLine {
        let measured = step.load.is_some();
        StepLine {
            schema: STEPS_SCHEMA_VERSION,
            error_ratio: measured.then(|| step.error_ratio()),
            url: measured.then(|| Urls::List(step.urls())),
            // The planned rate wins over the engine's echo of it.
            rate_rps: step
                .rate_rps
                .or(step.load.as_ref().and_then(|l| l.rate_rps)),
            id: step.id,
            target: step.target,
            placement: step.placement,
            clients: step.clients,
            rep: step.rep,
            inflight: step.inflight,
            server_cpus: step.server_cpus,
            client_cpus: step.client_cpus,
            started_unix_s: step.started_unix_s,
            status: step.status,
            reason: step.reason,
            error_kind: step.error_kind,
            server: step.server,
            per_request: step.per_request,
            figures: step.figures,
            load: step.load,
        }
    }
}

impl From<StepLine> for StepResult {
    fn from(line: StepLine) -> StepResult {
        let load = line.load.map(|mut load| {
            load.rate_rps = line.rate_rps;
            load.error_ratio = line.error_ratio.unwrap_or(load.error_ratio);
            load.url = match &line.url {
                Some(Urls::List(urls)) => urls.join(" "),
                Some(Urls::One(url)) => url.clone(),
                None => String::new(),
            };
            load
        });
        StepResult {
            id: line.id,
            target: line.target,
            placement: line.placement,
            clients: line.clients,
            rep: line.rep,
            rate_rps: line.rate_rps,
            inflight: line.inflight,
            server_cpus: line.server_cpus,
            client_cpus: line.client_cpus,
            started_unix_s: line.started_unix_s,
            status: line.status,
            reason: line.reason,
            error_kind: line.error_kind,
            load,
            server: line.server,
            per_request: line.per_request,
            figures: line.figures,
        }
    }
}

impl StepResult {
    /// A step that measured nothing.
    pub fn empty(id: String, target: &str, placement: &str, clients: usize, rep: usize) -> Self {
        StepResult {
            id,
            target: target.into(),
            placement: placement.into(),
            clients,
            rep,
            rate_rps: None,
            inflight: 0,
            server_cpus: String::new(),
            client_cpus: String::new(),
            started_unix_s: now_unix_s(),
            status: StepStatus::Skipped,
            reason: None,
            error_kind: None,
            load: None,
            server: None,
            per_request: PerRequest::default(),
            figures: StepFigures::default(),
        }
    }

    /// Why the step's server-side figures were not observed, if they were not.
    pub fn server_not_observed(&self) -> Option<&str> {
        self.figures.server_not_observed.as_deref()
    }

    /// Throughput of an ok step.
    pub fn throughput_rps(&self) -> Option<f64> {
        self.load.as_ref().map(|l| l.throughput_rps)
    }

    /// Failed requests over all requests tried: errors / (requests + errors); 0 when nothing
    /// was measured.
    pub fn error_ratio(&self) -> f64 {
        self.load.as_ref().map_or(0.0, |l| {
            crate::record::load::error_ratio(l.requests, &l.errors)
        })
    }

    /// The URLs the step's load went to, each once in order: the parts' (`per_host`,
    /// `per_instance`) when it was split, else the load's one.
    pub fn urls(&self) -> Vec<String> {
        let mut urls: Vec<String> = Vec::new();
        let parts = self
            .figures
            .per_host
            .iter()
            .chain(&self.figures.per_instance);
        for url in parts.map(|p| &p.load.url) {
            if !urls.contains(url) {
                urls.push(url.clone());
            }
        }
        if urls.is_empty() {
            urls.extend(self.load.as_ref().map(|l| l.url.clone()));
        }
        urls
    }

    /// The server's figures over the window; None when the step has none (not observed, a
    /// host that did not answer, nothing measured).
    pub fn observation(&self) -> Option<&Observation> {
        self.server.as_ref().and_then(ServerFigures::observation)
    }

    /// The per-request figures (CPU, context switches, run-queue wait per request, ...),
    /// each one None where it was not measured.
    pub fn per_request(&self) -> &PerRequest {
        &self.per_request
    }

    /// CPU the observers used over the step, in seconds, if recorded.
    pub fn observer_cpu_s(&self) -> Option<f64> {
        self.figures.observer_cpu_s
    }

    /// The JSON object of `steps.jsonl`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// Reads one `steps.jsonl` object back: a missing or malformed field is an error naming it.
    pub fn from_json(value: &Value) -> Result<StepResult, serde_json::Error> {
        StepResult::deserialize(value)
    }

    /// Files the observers' figures of the step: the server's, the per-request ones and
    /// the observers' own (the load's figures are left as they are).
    pub fn set_observed(&mut self, observed: Observed) {
        let Observed {
            server,
            per_request,
            observer_cpu_s,
            server_not_observed,
            observed,
            target_metrics,
        } = observed;
        self.server = server;
        self.per_request = per_request;
        self.figures.observer_cpu_s = observer_cpu_s;
        self.figures.server_not_observed = server_not_observed;
        self.figures.observed = observed;
        self.figures.target_metrics = target_metrics;
    }
}

/// A `steps.jsonl` that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StepsError {
    /// The file cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// A line (not the last) is not a step.
    #[error("{}:{line}: {why}", path.display())]
    Line {
        /// The file.
        path: std::path::PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
}

/// Reads every step of a `steps.jsonl` file; a torn last line (a crash mid-write) is ignored.
pub fn read_steps(path: &std::path::Path) -> Result<Vec<StepResult>, StepsError> {
    let text = std::fs::read_to_string(path).map_err(|source| StepsError::Read {
        path: path.into(),
        source,
    })?;
    parse_steps(&text).map_err(|(line, why)| StepsError::Line {
        path: path.into(),
        line,
        why,
    })
}

/// [`read_steps`] on a file's text: Err is the 1-based line and what is wrong with it.
pub fn parse_steps(text: &str) -> Result<Vec<StepResult>, (usize, String)> {
    let mut steps = Vec::new();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => steps.push(StepResult::from_json(&v).map_err(|e| (i + 1, e.to_string()))?),
            Err(_) if i + 1 == lines.len() => break,
            Err(e) => return Err((i + 1, e.to_string())),
        }
    }
    Ok(steps)
}

/// A repetition as every output names it: "rep 0", "rep 1", ... (numbered from 0, as the
/// step ids' `r0` and the `rep` field of steps.jsonl and analysis.json).
pub fn rep_label(rep: usize) -> String {
    format!("rep {rep}")
}

/// Seconds since the Unix epoch.
pub fn now_unix_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::record::figures::{Disturbance, ForeignJson, LoadPart, ThresholdCheck, ToolFigures};

    #[test]
    fn every_status_is_named_as_serde_names_it() {
        for status in StepStatus::ALL {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                status.as_str(),
                "{status:?}"
            );
        }
    }

    #[test]
    fn url_is_a_list_and_an_old_string_still_reads() {
        let mut step = StepResult::empty("a.shared.c4.r0".into(), "a", "shared", 4, 0);
        step.status = StepStatus::Ok;
        step.load = Some(LoadReport {
            url: "msgr://10.0.0.2:7000".into(),
            throughput_rps: 5.0,
            ..LoadReport::default()
        });
        let part = |url: &str| LoadPart {
            load: LoadReport {
                url: url.into(),
                ..LoadReport::default()
            },
            ..LoadPart::default()
        };
        step.figures.per_host = vec![part("msgr://10.0.0.2:7000"), part("msgr://10.0.0.2:7000")];
        let json = step.to_json();
        assert_eq!(json["url"], serde_json::json!(["msgr://10.0.0.2:7000"]));
        let back = StepResult::from_json(&json).unwrap();
        assert_eq!(back.urls(), ["msgr://10.0.0.2:7000"]);
        // A run written before: one string, read whole (an external tool's command line has
        // spaces too).
        let mut old = json.clone();
        old["url"] = "msgr://127.0.0.1:7000 msgr://127.0.0.1:7001".into();
        old.as_object_mut().unwrap().remove("per_host");
        let back = StepResult::from_json(&old).unwrap();
        assert_eq!(back.throughput_rps(), Some(5.0));
        assert_eq!(back.to_json()["url"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_figure_written_as_null_reads_back_as_nan_not_as_an_unreadable_run() {
        // JSON has no NaN: serde writes one as null. A plain f64 that would not read null
        // back would make the whole steps.jsonl unreadable (resume and the reports with it).
        let mut json = StepResult::empty("a.shared.c4.r0".into(), "a", "shared", 4, 0).to_json();
        json["server"] = serde_json::json!({
            "window_s": null, "observer_cpu_s": null,
            "server": {"pid": 1, "user_s": null, "sys_s": null},
            "neighbours": {"server_irq_pct": null, "client_irq_pct": null,
                "server_steal_pct": null, "client_steal_pct": null,
                "busiest": [{"pid": 2, "name": "sh", "cpu_pct": null,
                    "server_cpus_pct": null, "client_cpus_pct": null}]},
            "cgroup_cpu": {"groups": [{"path": "/", "version": 2, "period_us": 100000,
                "periods": 1, "throttled_periods": 1, "throttled_s": null}]}
        });
        let back = StepResult::from_json(&json).unwrap();
        let o = back.observation().unwrap();
        assert!(o.window_s.is_nan() && o.observer_cpu_s.is_nan());
        assert!(o.server.as_ref().unwrap().user_s.is_nan());
        let n = o.neighbours.as_ref().unwrap();
        assert!(n.server_irq_pct.is_nan() && n.busiest[0].cpu_pct.is_nan());
        assert!(o.cgroup_cpu.as_ref().unwrap().groups[0]
            .throttled_s
            .is_nan());
    }

    #[test]
    fn round_trips_through_json() {
        let mut step = StepResult::empty("a.shared.c4.r0".into(), "a", "shared", 4, 0);
        step.status = StepStatus::Ok;
        step.load = Some(LoadReport {
            schema: crate::record::load::SCHEMA_VERSION,
            requests: 100,
            sent: 110,
            resent: 7,
            redis_hits: Some(60),
            redis_misses: Some(40),
            throughput_rps: 50.0,
            ..LoadReport::default()
        });
        step.per_request.cs_per_req = Some(0.5);
        step.server = Some(Observation::default().into());
        let json = step.to_json();
        assert_eq!(json["schema"], STEPS_SCHEMA_VERSION);
        assert_eq!(json["requests"], 100);
        assert_eq!(
            (json["sent"].as_u64(), json["resent"].as_u64()),
            (Some(110), Some(7))
        );
        assert_eq!(json["redis_misses"], 40);
        assert_eq!(json["cs_per_req"], 0.5);
        assert_eq!(json["error_ratio"], 0.0);
        let back = StepResult::from_json(&json).unwrap();
        assert_eq!(back, step);
    }

    #[test]
    fn error_ratio_counts_errors_over_requests_tried() {
        let mut step = StepResult::empty("e".into(), "nginx", "shared", 1, 0);
        step.status = StepStatus::Errors;
        step.load = Some(LoadReport {
            schema: crate::record::load::SCHEMA_VERSION,
            requests: 75,
            errors: [("timeout".to_string(), 5), ("http_5xx".to_string(), 20)].into(),
            error_ratio: 0.25,
            ..LoadReport::default()
        });
        assert_eq!(step.error_ratio(), 0.25);
        let json = step.to_json();
        assert_eq!(json["error_ratio"], 0.25);
        assert_eq!(json["status"], "errors");
        assert_eq!(StepResult::from_json(&json).unwrap(), step);
    }

    #[test]
    fn unavailable_latency_is_null_not_zero() {
        let mut step = StepResult::empty("w".into(), "nginx", "shared", 8, 0);
        step.status = StepStatus::Ok;
        let mut load = LoadReport {
            throughput_rps: 9.0,
            ..LoadReport::default()
        };
        load.latency_us.p999 = f64::NAN;
        step.load = Some(load);
        let json = step.to_json();
        assert!(json["latency_us"]["p999"].is_null());
        let back = StepResult::from_json(&json).unwrap();
        assert!(back.load.unwrap().latency_us.p999.is_nan());
    }

    #[test]
    fn the_text_reader_locates_a_bad_line_and_skips_a_torn_last_one() {
        let mut step = StepResult::empty("a.shared.c4.r0".into(), "a", "shared", 4, 0);
        step.status = StepStatus::Ok;
        let line = step.to_json().to_string();
        let steps = parse_steps(&format!("{line}\n\n{line}\n{{\"torn")).unwrap();
        assert_eq!(steps.len(), 2);
        assert_eq!(
            parse_steps(&format!("{line}\nnot json\n{line}\n"))
                .unwrap_err()
                .0,
            2
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("steps.jsonl");
        std::fs::write(&path, format!("not json\n{line}\n")).unwrap();
        let err = read_steps(&path).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:1: ", path.display())), "{err}");
    }

    /// What is written reads back into the same types, and a step's typed readers see it.
    #[test]
    fn a_steps_figures_read_back_typed() {
        let (obs, per) = crate::record::observed::tests::full();
        let mut step = StepResult::empty("s".into(), "t", "p", 1, 0);
        step.server = Some(obs.clone().into());
        step.per_request = per.clone();
        step.figures.tool = Some(ToolFigures::default());
        let back = StepResult::from_json(&step.to_json()).unwrap();
        assert_eq!(back.observation(), Some(&obs));
        assert_eq!(back.per_request(), &per);
        assert_eq!(back, step);
        // A host that did not answer: no figures, not a half-read one, and its reason.
        let mut json = step.to_json();
        json["server"] = serde_json::json!({"host": "b", "notes": ["unreachable"]});
        let back = StepResult::from_json(&json).unwrap();
        assert_eq!(back.observation(), None);
        assert_eq!(back.server.unwrap().notes(), ["unreachable"]);
        json["server"] = Value::Null;
        assert_eq!(StepResult::from_json(&json).unwrap().observation(), None);
    }

    /// A step with every figure: each key the record can write is in its line.
    pub(crate) fn full_step() -> StepResult {
        let (obs, per) = crate::record::observed::tests::full();
        let mut step = StepResult::empty("s".into(), "t", "p", 1, 0);
        step.status = StepStatus::Errors;
        step.rate_rps = Some(10.0);
        step.reason = Some("why".into());
        step.error_kind = Some(ErrorKind::Load);
        let load = LoadReport {
            schema: crate::record::load::SCHEMA_VERSION,
            ..LoadReport::default()
        };
        step.load = Some(LoadReport {
            throughput_rps: 1.0,
            rate_rps: Some(10.0),
            errors: [("http_4xx".to_string(), 1)].into(),
            error_statuses: [(403, 1)].into(),
            error_ratio: 1.0,
            ..load.clone()
        });
        step.server = Some(obs.clone().into());
        step.per_request = per;
        let part = LoadPart {
            load,
            ..LoadPart::default()
        };
        step.figures = StepFigures {
            observer_cpu_s: Some(0.1),
            server_not_observed: Some("why".into()),
            window: Some("the tool's whole run".into()),
            client_cpu_orphans_s: Some(0.1),
            tool: Some(ToolFigures::default()),
            thresholds: vec![ThresholdCheck {
                threshold: "p99 < 1ms".into(),
                measured: 1.0,
                met: true,
            }],
            per_instance: vec![part.clone()],
            per_host: vec![part],
            window_overlap: Some(1.0),
            observed_window_overlap: Some(1.0),
            groups_overhead: Some(Default::default()),
            observed: [("x".to_string(), obs.into())].into(),
            target_metrics: [("x".to_string(), ForeignJson::Null)].into(),
            disturbed: Some(Disturbance {
                busiest: Some(Default::default()),
                ..Default::default()
            }),
            drift_check: true,
        };
        step
    }

    fn declared_keys() -> Vec<String> {
        let schema: Value =
            serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap();
        let mut keys: Vec<String> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    }

    /// The keys of a step line are the record's fields, and the schema declares exactly
    /// those: one definition, no list kept beside it.
    #[test]
    fn the_schema_declares_every_key_the_record_writes() {
        let step = full_step();
        let json = step.to_json();
        let mut written: Vec<String> = json.as_object().unwrap().keys().cloned().collect();
        written.sort();
        // The load's optional figures a built-in run leaves out (absent, never null).
        let optional = [
            "uncorrected_latency_us",
            "omitted",
            "redis_hits",
            "redis_misses",
            "late_sends",
            "send_lag_p99_us",
            "tls_handshakes",
            "tls_resumed",
            "tls_handshake_us",
        ];
        let declared: Vec<String> = declared_keys()
            .into_iter()
            .filter(|k| !optional.contains(&k.as_str()))
            .collect();
        assert_eq!(written, declared, "steps.schema.json against StepResult");
        assert_eq!(StepResult::from_json(&json).unwrap(), step);
    }

    /// A line written before that lacks a required field is an error naming it, never a 0.
    #[test]
    fn a_step_without_clients_is_an_error_naming_it() {
        let mut json = full_step().to_json();
        json.as_object_mut().unwrap().remove("clients");
        let err = StepResult::from_json(&json).unwrap_err().to_string();
        assert!(err.contains("clients"), "{err}");
    }

    /// A malformed server object is an error where it is read, not a step without figures.
    #[test]
    fn a_malformed_server_object_is_an_error() {
        let mut json = full_step().to_json();
        json["server"]["server_cpus_busy_pct"] = "high".into();
        let err = StepResult::from_json(&json).unwrap_err().to_string();
        assert!(err.contains("server"), "{err}");
        let mut json = full_step().to_json();
        json["server"]["server"] = serde_json::json!({"user_s": "a lot"});
        assert!(StepResult::from_json(&json).is_err());
    }

    /// The observers' figures go in as they are typed, and leave the load's own alone.
    #[test]
    fn observed_figures_are_filed_beside_the_loads() {
        let mut step = full_step();
        let load_figures = step.figures.clone();
        let (obs, per) = crate::record::observed::tests::full();
        let mut observed = Observed {
            server: Some(obs.into()),
            per_request: per.clone(),
            observer_cpu_s: Some(0.5),
            ..Observed::default()
        };
        observed.mark_not_observed("given by address");
        step.set_observed(observed);
        assert_eq!(step.per_request(), &per);
        assert_eq!(step.observer_cpu_s(), Some(0.5));
        assert_eq!(step.server_not_observed(), Some("given by address"));
        assert_eq!(step.server.as_ref().unwrap().notes()[0], "given by address");
        assert_eq!(step.figures.per_host, load_figures.per_host);
        assert_eq!(step.figures.tool, load_figures.tool);
        assert!(step.figures.observed.is_empty());
    }
}
