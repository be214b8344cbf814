//! One step's result: the line of `steps.jsonl` (see `schema/steps.schema.json`).
//!
//! The engine's [`LoadReport`] fields sit at the top level beside the step's identity, the
//! server's observed figures and the derived per-request figures, so that one `jq` path
//! reaches any of them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::record::load::{LatencyUs, LoadReport};
use crate::record::observed::{Observation, PerRequest};

/// Version of the `steps.jsonl` layout.
pub const STEPS_SCHEMA_VERSION: u32 = 1;

/// The key of a step whose server-side figures were not observed (a server already running
/// with no process to observe it by): the reason; those figures are null.
pub const SERVER_NOT_OBSERVED: &str = "server_not_observed";

/// The key of the observers' own CPU (seconds) among a step's top-level figures.
pub const OBSERVER_CPU_S: &str = "observer_cpu_s";

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

/// One finished step.
#[derive(Debug, Clone, PartialEq)]
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
    /// The server's observed figures over the measured window (JSON object, or null).
    pub server: Value,
    /// Derived per-request figures (`cpu_us_per_req`, `cs_per_req`, ...) and the observers'
    /// own cost (`observer_cpu_s`), written at the top level.
    pub derived: Map<String, Value>,
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
            server: Value::Null,
            derived: Map::new(),
        }
    }

    /// Why the step's server-side figures were not observed, if they were not.
    pub fn server_not_observed(&self) -> Option<&str> {
        self.derived
            .get(SERVER_NOT_OBSERVED)
            .and_then(Value::as_str)
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
        for key in ["per_host", "per_instance"] {
            let parts = self.derived.get(key).and_then(Value::as_array);
            for url in parts.into_iter().flatten().filter_map(|p| p.get("url")) {
                let url = url.as_str().unwrap_or_default().to_string();
                if !urls.contains(&url) {
                    urls.push(url);
                }
            }
        }
        if urls.is_empty() {
            urls.extend(self.load.as_ref().map(|l| l.url.clone()));
        }
        urls
    }

    /// The server's figures over the window, typed as the observer wrote them; None when
    /// the step has none (not observed, a host that did not answer, nothing measured).
    pub fn observation(&self) -> Option<Observation> {
        if !self.server.is_object() {
            return None;
        }
        Observation::deserialize(&self.server).ok()
    }

    /// The per-request figures (CPU, context switches, run-queue wait per request, ...),
    /// typed; each one None where it was not measured.
    pub fn per_request(&self) -> PerRequest {
        // Only the per-request keys: the rest of the top level is the load's and the step's.
        let keys = match serde_json::to_value(PerRequest::default()) {
            Ok(Value::Object(m)) => m.into_iter().map(|(k, _)| k).collect(),
            _ => Vec::new(),
        };
        let figures: Map<String, Value> = keys
            .into_iter()
            .filter_map(|k| Some((k.clone(), self.derived.get(&k)?.clone())))
            .collect();
        PerRequest::deserialize(&Value::Object(figures)).unwrap_or_default()
    }

    /// CPU the observers used over the step, in seconds, if recorded.
    pub fn observer_cpu_s(&self) -> Option<f64> {
        self.derived.get(OBSERVER_CPU_S).and_then(Value::as_f64)
    }

    /// The JSON object of `steps.jsonl`.
    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("schema".into(), STEPS_SCHEMA_VERSION.into());
        obj.insert("id".into(), self.id.clone().into());
        obj.insert("target".into(), self.target.clone().into());
        obj.insert("placement".into(), self.placement.clone().into());
        obj.insert("clients".into(), self.clients.into());
        obj.insert("rep".into(), self.rep.into());
        obj.insert("inflight".into(), self.inflight.into());
        obj.insert("server_cpus".into(), self.server_cpus.clone().into());
        obj.insert("client_cpus".into(), self.client_cpus.clone().into());
        obj.insert("started_unix_s".into(), self.started_unix_s.into());
        let status = serde_json::to_value(self.status).unwrap_or(Value::Null);
        obj.insert("status".into(), status);
        if let Some(reason) = &self.reason {
            obj.insert("reason".into(), reason.clone().into());
        }
        if let Some(kind) = self.error_kind {
            let kind = serde_json::to_value(kind).unwrap_or(Value::Null);
            obj.insert("error_kind".into(), kind);
        }
        if let Some(load) = &self.load {
            if let Ok(Value::Object(fields)) = serde_json::to_value(load) {
                for (k, v) in fields {
                    // The engine's own layout version would clash with ours.
                    if k != "schema" {
                        obj.insert(k, v);
                    }
                }
            }
        }
        if self.load.is_some() {
            obj.insert("error_ratio".into(), self.error_ratio().into());
            obj.insert("url".into(), self.urls().into());
        }
        // The planned rate wins over the engine's echo of it.
        if let Some(rate) = self.rate_rps {
            obj.insert("rate_rps".into(), rate.into());
        }
        obj.insert("server".into(), self.server.clone());
        for (k, v) in &self.derived {
            obj.insert(k.clone(), v.clone());
        }
        Value::Object(obj)
    }

    /// Reads one `steps.jsonl` object back.
    pub fn from_json(value: &Value) -> Result<StepResult, String> {
        let obj = value.as_object().ok_or("a step is not a JSON object")?;
        let s = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let n = |k: &str| obj.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
        let status: StepStatus =
            serde_json::from_value(obj.get("status").cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("bad status: {e}"))?;
        let load = if obj.contains_key("throughput_rps") {
            Some(load_report(obj)?)
        } else {
            None
        };
        let known = KNOWN_KEYS;
        let load_keys: Vec<String> = match serde_json::to_value(LoadReport::default()) {
            Ok(Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        };
        let derived = obj
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()) && !load_keys.contains(k))
            .filter(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "uncorrected_latency_us"
                        | "omitted"
                        | "redis_hits"
                        | "redis_misses"
                        | "late_sends"
                        | "send_lag_p99_us"
                )
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(StepResult {
            id: s("id"),
            target: s("target"),
            placement: s("placement"),
            clients: n("clients"),
            rep: n("rep"),
            rate_rps: obj.get("rate_rps").and_then(Value::as_f64),
            inflight: n("inflight"),
            server_cpus: s("server_cpus"),
            client_cpus: s("client_cpus"),
            started_unix_s: obj
                .get("started_unix_s")
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
            status,
            reason: obj
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string),
            error_kind: obj
                .get("error_kind")
                .and_then(|k| serde_json::from_value(k.clone()).ok()),
            load,
            server: obj.get("server").cloned().unwrap_or(Value::Null),
            derived,
        })
    }
}

/// The engine's figures of a step line. Latencies an external tool did not print are null
/// in the JSON and NaN here (unavailable, never zero).
fn load_report(obj: &Map<String, Value>) -> Result<LoadReport, String> {
    let mut fields = obj.clone();
    // `url` is a list; runs before it was kept one string (several URLs joined by spaces).
    if let Some(Value::Array(urls)) = fields.get("url") {
        let urls: Vec<&str> = urls.iter().filter_map(Value::as_str).collect();
        fields.insert("url".into(), urls.join(" ").into());
    }
    fields.insert("schema".into(), crate::record::load::SCHEMA_VERSION.into());
    let lat = fields.insert(
        "latency_us".into(),
        serde_json::to_value(LatencyUs::default()).unwrap_or(Value::Null),
    );
    let uncorrected = fields.remove("uncorrected_latency_us");
    let mut report: LoadReport = serde_json::from_value(Value::Object(fields))
        .map_err(|e| format!("bad load figures: {e}"))?;
    if let Some(lat) = lat {
        report.latency_us = latency_from(&lat);
    }
    report.uncorrected_latency_us = uncorrected.as_ref().map(latency_from);
    Ok(report)
}

fn latency_from(v: &Value) -> LatencyUs {
    let f = |k: &str| v.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
    LatencyUs {
        mean: f("mean"),
        p50: f("p50"),
        p90: f("p90"),
        p95: f("p95"),
        p99: f("p99"),
        p999: f("p999"),
        max: f("max"),
    }
}

const KNOWN_KEYS: &[&str] = &[
    "schema",
    "id",
    "target",
    "placement",
    "clients",
    "rep",
    "rate_rps",
    "inflight",
    "server_cpus",
    "client_cpus",
    "started_unix_s",
    "status",
    "reason",
    "error_kind",
    "server",
    "error_ratio",
];

/// Reads every step of a `steps.jsonl` file; a torn last line (a crash mid-write) is ignored.
pub fn read_steps(path: &std::path::Path) -> Result<Vec<StepResult>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_steps(&text).map_err(|(line, e)| format!("{}:{line}: {e}", path.display()))
}

/// [`read_steps`] on a file's text: Err is the 1-based line and what is wrong with it.
pub fn parse_steps(text: &str) -> Result<Vec<StepResult>, (usize, String)> {
    let mut steps = Vec::new();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(line) {
            Ok(v) => steps.push(StepResult::from_json(&v).map_err(|e| (i + 1, e))?),
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
mod tests {
    use super::*;

    #[test]
    fn url_is_a_list_and_an_old_string_still_reads() {
        let mut step = StepResult::empty("a.shared.c4.r0".into(), "a", "shared", 4, 0);
        step.status = StepStatus::Ok;
        step.load = Some(LoadReport {
            url: "msgr://10.0.0.2:7000".into(),
            throughput_rps: 5.0,
            ..LoadReport::default()
        });
        let parts: Vec<Value> = ["msgr://10.0.0.2:7000", "msgr://10.0.0.2:7000"]
            .iter()
            .map(|u| serde_json::json!({ "url": u }))
            .collect();
        step.derived.insert("per_host".into(), Value::Array(parts));
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
        step.derived.insert("cs_per_req".into(), 0.5.into());
        step.server = serde_json::json!({"cpu_user_s": 1.0});
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
        let err = read_steps(&path).unwrap_err();
        assert!(err.starts_with(&format!("{}:1: ", path.display())), "{err}");
    }

    /// What is written reads back into the same types, and a step's typed readers see it.
    #[test]
    fn a_steps_figures_read_back_typed() {
        let (obs, per) = crate::record::observed::tests::full();
        let mut step = StepResult::empty("s".into(), "t", "p", 1, 0);
        step.server = serde_json::to_value(&obs).unwrap();
        if let serde_json::Value::Object(m) = serde_json::to_value(&per).unwrap() {
            step.derived.extend(m);
        }
        step.derived
            .insert("tool".into(), serde_json::json!({"name": "wrk"}));
        let back = StepResult::from_json(&step.to_json()).unwrap();
        assert_eq!(back.observation(), Some(obs));
        assert_eq!(back.per_request(), per);
        // A host that did not answer: no figures, not a half-read one.
        step.server = serde_json::json!({"host": "b", "notes": ["unreachable"]});
        assert_eq!(step.observation().map(|o| o.server), Some(None));
        step.server = serde_json::Value::Null;
        assert_eq!(step.observation(), None);
    }
}
