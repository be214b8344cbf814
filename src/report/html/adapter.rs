//! Reads a run directory's files as the runner writes them (steps.jsonl, environment.json,
//! spec.toml, notes.txt, intervals/<id>.csv, hist/<id>.hlog) into [`ReportData`]: the title,
//! notes and measurement conditions, the latency histograms, the per-core heat map, and
//! series and a results table of its own.
//!
//! It reads steps.jsonl as plain JSON so it does not depend on the runner's types. The HTML
//! exporter ([`super::report_data`]) replaces the series and tables with the analysis' (the
//! same as report.md's) and attaches the fitted curves with [`add_analysis`]. The heat map
//! shows the server's cores (the runner's `server_per_core_busy` column), or the load
//! generator's threads in older run directories.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hdrhistogram::Histogram;
use serde_json::Value;

use super::{CoreHeatMap, LatencyBucket, Point, ReportData, Series, StepHistogram, Table};
use crate::record::hlog::{read_hlog, HlogError};
use crate::report::svg::format_number;

/// Histogram buckets per doubling of latency (9% wide: enough to split 4–8 µs from 11–16 µs).
const BUCKETS_PER_OCTAVE: f64 = 8.0;

/// What made a run directory unreadable.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// A file could not be read.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A line of steps.jsonl is not JSON (and is not a torn last line).
    #[error("{path}:{line}: not a JSON object ({why}); fix or delete the line")]
    Step {
        /// steps.jsonl.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parser's message.
        why: String,
    },
    /// An HdrHistogram interval log could not be decoded.
    #[error("{path}: bad HdrHistogram interval log: {why}")]
    Hlog {
        /// The log.
        path: PathBuf,
        /// What was wrong.
        why: crate::record::hlog::LogFormatError,
    },
}

/// Reads a run directory into what the page shows; the heat map shows the step the spec's
/// `[report] heat_map` selects, else the busiest step of the first series.
pub fn from_run_dir(dir: &Path) -> Result<ReportData, AdapterError> {
    from_run_dir_with(dir, None)
}

/// Reads a run directory, the heat map showing step `heat_step` (an id of steps.jsonl) when
/// given.
pub fn from_run_dir_with(dir: &Path, heat_step: Option<&str>) -> Result<ReportData, AdapterError> {
    let steps = read_steps(&dir.join("steps.jsonl"))?;
    let spec = std::fs::read_to_string(dir.join("spec.toml"))
        .ok()
        .and_then(|t| t.parse::<toml::Table>().ok());
    let env: Option<Value> = std::fs::read_to_string(dir.join("environment.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let ok: Vec<&Value> = steps.iter().filter(|s| is_ok(s)).collect();
    let mut histograms = Vec::new();
    for s in &ok {
        if let Some(h) = step_histogram(dir, s, &ok)? {
            histograms.push(h);
        }
    }
    Ok(ReportData {
        title: spec_str(spec.as_ref(), "name").unwrap_or_else(|| dir_name(dir)),
        description: spec_str(spec.as_ref(), "description"),
        notes: notes(dir, env.as_ref()),
        conditions: conditions(spec.as_ref(), env.as_ref(), &ok),
        series: series(&ok),
        histograms,
        heat_map: heat_map(dir, &ok, heat_step, spec.as_ref()),
        tables: vec![results_table(&steps)],
        ..ReportData::default()
    })
}

fn read_steps(path: &Path) -> Result<Vec<Value>, AdapterError> {
    let text = std::fs::read_to_string(path).map_err(|error| AdapterError::Read {
        path: path.into(),
        error,
    })?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut steps = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => steps.push(v),
            // A crash mid-write leaves a torn last line: the run is still reportable.
            _ if i + 1 == lines.len() => break,
            Ok(_) => {
                return Err(AdapterError::Step {
                    path: path.into(),
                    line: i + 1,
                    why: "not an object".into(),
                })
            }
            Err(e) => {
                return Err(AdapterError::Step {
                    path: path.into(),
                    line: i + 1,
                    why: e.to_string(),
                })
            }
        }
    }
    Ok(steps)
}

fn is_ok(step: &Value) -> bool {
    step["status"] == "ok" && step["throughput_rps"].is_number()
}

fn f64_at(v: &Value, path: &[&str]) -> Option<f64> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_f64()
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn spec_str(spec: Option<&toml::Table>, key: &str) -> Option<String> {
    spec?.get(key)?.as_str().map(str::to_string)
}

fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stairbench run".into())
}

fn notes(dir: &Path, env: Option<&Value>) -> Vec<String> {
    let mut notes: Vec<String> = env
        .and_then(|e| e["warnings"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|w| w.as_str().map(str::to_string))
        .collect();
    if let Ok(text) = std::fs::read_to_string(dir.join("notes.txt")) {
        notes.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string),
        );
    }
    notes
}

/// Seed 004's first table: the machine, then the load's shape, then the spec's settings.
fn conditions(
    spec: Option<&toml::Table>,
    env: Option<&Value>,
    ok: &[&Value],
) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if let Some(env) = env {
        environment_rows(env, &mut rows);
    }
    load_rows(ok, &mut rows);
    if let Some(spec) = spec {
        spec_rows(spec, &mut rows);
    }
    rows
}

fn environment_rows(env: &Value, rows: &mut Vec<(String, String)>) {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let fields = [
        ("Host", &env["hostname"]),
        ("CPU", &env["cpu_model"]),
        ("CPUs", &env["cpus"]),
        ("Topology", &env["topology"]["summary"]),
        ("Kernel", &env["kernel"]),
        ("Governor", &env["governor"]),
        ("Turbo", &env["turbo"]),
        ("Swap used (kB)", &env["swap_used_kb"]),
        ("stairbench", &env["stairbench_version"]),
        ("Git revision", &env["git_revision"]),
    ];
    for (name, v) in fields {
        if let Some(t) = text(v) {
            rows.push((name.into(), t));
        }
    }
    // observe's layout gives one governor per CPU: show the distinct ones.
    if let Some(govs) = env["governors"].as_object() {
        let mut distinct: Vec<&str> = govs.values().filter_map(Value::as_str).collect();
        distinct.sort_unstable();
        distinct.dedup();
        rows.push(("Governor".into(), distinct.join(", ")));
    }
}

fn load_rows(ok: &[&Value], rows: &mut Vec<(String, String)>) {
    let distinct = |f: &dyn Fn(&Value) -> String| -> String {
        let mut seen: Vec<String> = Vec::new();
        for s in ok {
            let v = f(s);
            if !v.is_empty() && !seen.contains(&v) {
                seen.push(v);
            }
        }
        seen.join(", ")
    };
    let num = |key: &'static str| {
        move |s: &Value| s[key].as_u64().map_or(String::new(), |n| n.to_string())
    };
    let placement_cpus = |s: &Value| {
        format!(
            "{}: server {} / client {}",
            str_at(s, "placement"),
            str_at(s, "server_cpus"),
            str_at(s, "client_cpus")
        )
    };
    for (name, value) in [
        ("Clients", distinct(&num("clients"))),
        ("Connections per step", distinct(&num("connections"))),
        ("Queue depth", distinct(&num("depth"))),
        ("Generator threads", distinct(&num("threads"))),
        (
            "Measured window (s)",
            distinct(&|s: &Value| {
                // Windows under a second are common in quick runs: keep milliseconds.
                f64_at(s, &["duration_s"]).map_or(String::new(), |d| {
                    format!("{}", (d * 1000.0).round() / 1000.0)
                })
            }),
        ),
        ("Placements", distinct(&placement_cpus)),
    ] {
        if !value.is_empty() {
            rows.push((name.into(), value));
        }
    }
}

fn spec_rows(spec: &toml::Table, rows: &mut Vec<(String, String)>) {
    for key in ["duration", "warmup", "repetitions", "restart"] {
        if let Some(v) = spec.get(key) {
            rows.push((format!("spec: {key}"), toml_text(v)));
        }
    }
    if let Some(targets) = spec.get("targets").and_then(|t| t.as_array()) {
        let names: Vec<String> = targets
            .iter()
            .filter_map(|t| t.get("name").map(toml_text))
            .collect();
        rows.push(("spec: targets".into(), names.join(", ")));
    }
}

fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A series' steps by load level: (offered rate in mHz, clients).
type Levels<'a> = BTreeMap<(u64, u64), Vec<&'a Value>>;

/// Groups ok steps by (target, placement) in run order, averaging repetitions per client count.
fn series(ok: &[&Value]) -> Vec<Series> {
    let mut order: Vec<(String, String)> = Vec::new();
    // A load level is its offered rate (mHz steps, so it orders as a number) and clients: an
    // open-loop series has one point per rate.
    let mut groups: BTreeMap<(String, String), Levels> = BTreeMap::new();
    for s in ok {
        let key = (
            str_at(s, "target").to_string(),
            str_at(s, "placement").to_string(),
        );
        if !order.contains(&key) {
            order.push(key.clone());
        }
        let clients = s["clients"].as_u64().unwrap_or(0);
        let rate_mhz = f64_at(s, &["rate_rps"]).map_or(0, |r| (r * 1000.0) as u64);
        groups
            .entry(key)
            .or_default()
            .entry((rate_mhz, clients))
            .or_default()
            .push(s);
    }
    order
        .into_iter()
        .map(|key| {
            let points = groups[&key]
                .iter()
                .map(|((_, clients), reps)| mean_point(*clients, reps))
                .collect();
            Series {
                target: key.0,
                placement: key.1,
                points,
                usl: None,
                threads: None,
            }
        })
        .collect()
}

fn mean_point(clients: u64, reps: &[&Value]) -> Point {
    let mean = |path: &[&str]| -> Option<f64> {
        let v: Vec<f64> = reps.iter().filter_map(|s| f64_at(s, path)).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    Point {
        clients: clients as f64,
        rate_rps: reps.first().and_then(|s| f64_at(s, &["rate_rps"])),
        throughput_rps: mean(&["throughput_rps"]).unwrap_or(0.0),
        p50_us: mean(&["latency_us", "p50"]).unwrap_or(f64::NAN),
        p99_us: mean(&["latency_us", "p99"]).unwrap_or(f64::NAN),
        cpu_us_per_req_user: mean(&["cpu_us_per_req", "user"]),
        cpu_us_per_req_sys: mean(&["cpu_us_per_req", "sys"]),
        client_saturated: reps.iter().any(|s| s["client_saturated"] == true),
    }
}

/// "web · shared · 8 clients", with "(rep 0)" when its level has other repetitions in `ok`
/// (the first one too, so that it is not read as the level's merged figure).
fn step_label(s: &Value, ok: &[&Value]) -> String {
    let rep = s["rep"].as_u64().unwrap_or(0);
    let level = |x: &Value| {
        (
            x["target"].clone(),
            x["placement"].clone(),
            x["clients"].clone(),
            x["rate_rps"].clone(),
        )
    };
    let repeated = ok
        .iter()
        .any(|o| level(o) == level(s) && o["rep"].as_u64().unwrap_or(0) != rep);
    let clients = s["clients"].as_u64().unwrap_or(0) as usize;
    let mut label = format!(
        "{} · {} · {}",
        str_at(s, "target"),
        str_at(s, "placement"),
        crate::analyze::run::peak::clients_text(clients)
    );
    if let Some(rate) = f64_at(s, &["rate_rps"]) {
        label.push_str(&format!(" at {rate:.0} req/s offered"));
    }
    if repeated || rep > 0 {
        let rep = crate::record::steps::rep_label(rep as usize);
        label.push_str(&format!(" ({rep})"));
    }
    label
}

fn step_histogram(
    dir: &Path,
    s: &Value,
    ok: &[&Value],
) -> Result<Option<StepHistogram>, AdapterError> {
    let id = str_at(s, "id");
    let path = dir.join("hist").join(format!("{id}.hlog"));
    if id.is_empty() || !path.exists() {
        return Ok(None);
    }
    let Some(hist_ns) = read_hlog(&path)? else {
        return Ok(None);
    };
    Ok(Some(StepHistogram {
        step_id: id.into(),
        label: step_label(s, ok),
        buckets: log_buckets(&hist_ns),
    }))
}

impl From<HlogError> for AdapterError {
    fn from(e: HlogError) -> Self {
        match e {
            HlogError::Read { path, error } => AdapterError::Read { path, error },
            HlogError::Bad { path, why } => AdapterError::Hlog { path, why },
        }
    }
}

/// Log-spaced buckets in microseconds, [2^(k/8), 2^((k+1)/8)), only the non-empty ones.
pub fn log_buckets(hist_ns: &Histogram<u64>) -> Vec<LatencyBucket> {
    let mut counts: BTreeMap<i64, u64> = BTreeMap::new();
    for v in hist_ns.iter_recorded() {
        let us = (hist_ns.median_equivalent(v.value_iterated_to()) as f64 / 1000.0).max(1e-3);
        let k = (us.log2() * BUCKETS_PER_OCTAVE).floor() as i64;
        *counts.entry(k).or_default() += v.count_at_value();
    }
    counts
        .into_iter()
        .map(|(k, count)| LatencyBucket {
            lo_us: 2f64.powf(k as f64 / BUCKETS_PER_OCTAVE),
            hi_us: 2f64.powf((k + 1) as f64 / BUCKETS_PER_OCTAVE),
            count,
        })
        .collect()
}

/// The heat map of the chosen step (an id), or of the step [`heat_step`] picks.
fn heat_map(
    dir: &Path,
    ok: &[&Value],
    chosen: Option<&str>,
    spec: Option<&toml::Table>,
) -> Option<CoreHeatMap> {
    let step = match chosen {
        Some(id) => ok.iter().find(|s| str_at(s, "id") == id)?,
        None => heat_step(ok, spec)?,
    };
    let id = str_at(step, "id");
    let text = std::fs::read_to_string(dir.join("intervals").join(format!("{id}.csv"))).ok()?;
    let (seconds, per_interval, whose) = read_busy_csv(&text)?;
    let cores = per_interval.iter().map(Vec::len).max().unwrap_or(0);
    if cores == 0 {
        return None;
    }
    let busy_pct = (0..cores)
        .map(|c| {
            per_interval
                .iter()
                .map(|row| row.get(c).copied().unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    Some(CoreHeatMap {
        step_id: id.into(),
        label: format!("{}, {}", whose.title(), step_label(step, ok)),
        cores: core_labels(str_at(step, whose.cpus_key()), cores),
        seconds,
        busy_pct,
    })
}

/// The busiest of the steps `[report] heat_map = "TARGET[/PLACEMENT][@CLIENTS]"` selects, or
/// of the first series (its target and placement) when the spec has none. Busiest: the
/// highest mean busy % of the server's CPUs, then the highest throughput.
pub fn heat_step<'a>(ok: &[&'a Value], spec: Option<&toml::Table>) -> Option<&'a Value> {
    let selector = spec
        .and_then(|s| s.get("report"))
        .and_then(|r| r.get("heat_map"))
        .and_then(|h| h.as_str())
        .and_then(|h| h.parse::<crate::analyze::compare::Selector>().ok());
    let first = ok.first()?;
    let wanted = |s: &&&Value| match &selector {
        Some(sel) => {
            str_at(s, "target") == sel.target
                && sel
                    .placement
                    .as_deref()
                    .is_none_or(|p| str_at(s, "placement") == p)
                && sel
                    .clients
                    .is_none_or(|c| s["clients"].as_u64() == Some(c as u64))
        }
        None => {
            str_at(s, "target") == str_at(first, "target")
                && str_at(s, "placement") == str_at(first, "placement")
        }
    };
    let busy = |s: &Value| {
        (
            f64_at(s, &["server", "server_cpus_busy_pct"]).unwrap_or(-1.0),
            s["throughput_rps"].as_f64().unwrap_or(0.0),
        )
    };
    ok.iter()
        .filter(wanted)
        .max_by(|a, b| {
            let (x, y) = (busy(a), busy(b));
            x.0.total_cmp(&y.0).then(x.1.total_cmp(&y.1))
        })
        .copied()
}

/// Whose cores an intervals CSV describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// A `server_per_core_busy` column.
    Server,
    /// The engine's `per_core_busy` column: the load generator's threads.
    Generator,
}

impl Whose {
    fn title(self) -> &'static str {
        match self {
            Whose::Server => "server cores",
            Whose::Generator => "load generator threads",
        }
    }

    fn cpus_key(self) -> &'static str {
        match self {
            Whose::Server => "server_cpus",
            Whose::Generator => "client_cpus",
        }
    }
}

/// Seconds and busy % per core of each measured interval (warm-up lines left out).
fn read_busy_csv(text: &str) -> Option<(Vec<f64>, Vec<Vec<f64>>, Whose)> {
    let header: Vec<&str> = text.lines().next()?.split(',').collect();
    let find = |name: &str| header.iter().position(|h| *h == name);
    // The server's cores when the runner sampled them, else the generator's threads.
    [
        ("server_per_core_busy", Whose::Server),
        ("per_core_busy", Whose::Generator),
    ]
    .into_iter()
    .filter_map(|(name, whose)| {
        let (seconds, rows) = busy_column(text, find(name)?);
        (!rows.is_empty()).then_some((seconds, rows, whose))
    })
    .next()
}

/// Seconds and the figures of column `col` of each measured row that has some.
fn busy_column(text: &str, col: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut seconds = Vec::new();
    let mut per_interval = Vec::new();
    for line in text.lines().skip(1) {
        let cells: Vec<&str> = line.split(',').collect();
        let Some(t) = cells.first().and_then(|c| c.parse::<f64>().ok()) else {
            continue;
        };
        let busy: Vec<f64> = cells
            .get(col)
            .copied()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|b| b.parse().ok())
            .collect();
        // Warm-up lines, and rows without figures in the column, are not shown.
        if t <= 0.0 || busy.is_empty() {
            continue;
        }
        seconds.push(t);
        per_interval.push(busy);
    }
    (seconds, per_interval)
}

/// "cpu3" labels from a CPU list ("2-3,6") when it has one CPU per row, else "#0", "#1"...
fn core_labels(cpu_list: &str, count: usize) -> Vec<String> {
    let mut cpus = Vec::new();
    for part in cpu_list.split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.trim().parse::<usize>(), b.trim().parse::<usize>()) {
            cpus.extend(a..=b);
        }
    }
    if cpus.len() == count {
        cpus.iter().map(|c| format!("cpu{c}")).collect()
    } else {
        (0..count).map(|i| format!("#{i}")).collect()
    }
}

fn result_row(s: &Value) -> Vec<String> {
    let fmt = |path: &[&str]| f64_at(s, path).map_or(String::new(), format_number);
    let time = |path: &[&str]| f64_at(s, path).map_or(String::new(), crate::units::duration_us);
    let mut status = str_at(s, "status").to_string();
    if s["client_saturated"] == true {
        status.push_str(" (client saturated)");
    }
    if let Some(r) = s["reason"].as_str() {
        status = format!("{status}: {r}");
    }
    let int = |key: &str| s[key].as_u64().map_or(String::new(), |n| n.to_string());
    vec![
        str_at(s, "target").to_string(),
        str_at(s, "placement").to_string(),
        int("clients"),
        int("rep"),
        fmt(&["throughput_rps"]),
        time(&["latency_us", "p50"]),
        time(&["latency_us", "p99"]),
        match s["server_not_observed"].as_str() {
            Some(_) => "not observed".to_string(),
            None => time(&["cpu_us_per_req", "total"]),
        },
        status,
    ]
}

/// Every step, failed and skipped ones included (with their reason).
fn results_table(steps: &[Value]) -> Table {
    let rows = steps.iter().map(result_row).collect();
    Table {
        title: "Results".into(),
        note: "One row per step and repetition.".into(),
        header: [
            "target",
            "placement",
            "clients",
            "rep",
            "requests/s",
            "p50",
            "p99",
            "CPU/req",
            "status",
        ]
        .map(String::from)
        .to_vec(),
        rows,
    }
}

/// Attaches the analysis' fitted USL curves to the series, by (target, placement).
pub fn add_analysis(data: &mut ReportData, usl: &[(String, String, super::UslCurve)]) {
    for s in &mut data.series {
        if let Some((_, _, curve)) = usl
            .iter()
            .find(|(t, p, _)| *t == s.target && *p == s.placement)
        {
            s.usl = Some(*curve);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_repetition_is_labelled_when_its_level_has_others() {
        let step = |rep: u64, clients: u64| serde_json::json!({"target": "web", "placement": "shared", "clients": clients, "rep": rep});
        let (a, b, c) = (step(0, 8), step(1, 8), step(0, 16));
        let ok = [&a, &b, &c];
        assert_eq!(step_label(&a, &ok), "web · shared · 8 clients (rep 0)");
        assert_eq!(step_label(&b, &ok), "web · shared · 8 clients (rep 1)");
        assert_eq!(step_label(&c, &ok), "web · shared · 16 clients");
    }

    #[test]
    fn buckets_split_a_bimodal_histogram() {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        h.record_n(6_000, 300).unwrap();
        h.record_n(14_000, 900).unwrap();
        let b = log_buckets(&h);
        assert_eq!(b.len(), 2, "{b:?}");
        assert!(b[0].lo_us <= 6.0 && 6.0 < b[0].hi_us);
        assert!(b[1].lo_us <= 14.0 && 14.0 < b[1].hi_us);
        assert_eq!(b.iter().map(|x| x.count).sum::<u64>(), 1200);
    }

    #[test]
    fn busy_csv_prefers_the_server_column_and_skips_rows_without_figures() {
        let header = "elapsed_s,inflight,ops_per_s,mb_per_s,mean_latency_ms,errors,per_core_busy,server_per_core_busy,client_per_core_busy\n";
        let runner = format!("{header}0.000,1,5,0,0,0,9,,\n1.000,1,5,0,0,0,10,80.0 90.0,5.0\n1.500,,,,,,,70.0 60.0,4.0\n2.000,1,5,0,0,0,11,,\n");
        let (seconds, rows, whose) = read_busy_csv(&runner).unwrap();
        assert_eq!(whose, Whose::Server);
        assert_eq!(seconds, [1.0, 1.5]);
        assert_eq!(rows, [vec![80.0, 90.0], vec![70.0, 60.0]]);
        // No server figures at all (an older run directory's layout): the generator's threads.
        let older = format!("{header}1.000,1,5,0,0,0,10 20,,\n");
        let (_, rows, whose) = read_busy_csv(&older).unwrap();
        assert_eq!((whose, rows), (Whose::Generator, vec![vec![10.0, 20.0]]));
    }

    #[test]
    fn core_labels_follow_the_cpu_list() {
        assert_eq!(core_labels("2-3,6", 3), ["cpu2", "cpu3", "cpu6"]);
        assert_eq!(core_labels("0-7", 2), ["#0", "#1"]);
    }
}
