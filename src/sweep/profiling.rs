//! Profiles inside runs: a spec's `[profile]` section and, after each series' measured steps,
//! one extra pass per chosen load level with `perf record` on the target's processes.
//!
//! The pass is separate from the measured step so the profiler's cost does not distort the
//! figures the report plots; its own throughput is kept beside the step's so that cost is
//! visible. Every pass (and every level not profiled, with why) is a line of
//! `profiles.jsonl`; a level's files are in `profiles/<step>/`, the differential graphs
//! between the busy and the saturated level in `profiles/diff-<a>-vs-<b>/`.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::driver::StepRequest;
use super::placement::CpuPair;
use super::plan::{ClientPlan, Plan, Series, TargetPlan};
use super::runner::{step_id, Point, RunSummary, Runner};
use super::server::Server;
use super::spec::{SpecError, SpecFile};
use crate::profile::ProfileSummary;
use crate::record::load::{IntervalLine, IntervalSink};
use crate::record::profiles::{
    append_line, read_lines, DeltaRow, DiffEventRecord, DiffRecord, Event, EventRecord,
    FunctionRow, MissingRecord, PassRecord, ProfileLine, ProfileTarget,
};
use crate::record::steps::StepResult;

/// Load kept running past `seconds` so perf's start-up (it reads symbols first) is covered.
const PERF_START_ALLOWANCE: Duration = Duration::from_secs(1);

/// Functions kept per table in `profiles.jsonl` (the full tables are in the step's files).
const TOP_ROWS: usize = 10;

/// A spec's `[profile]` section as written.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileSpec {
    /// Load levels to profile: `"busy"`, `"saturated"` (found by the analysis) or client counts.
    pub at: Vec<Level>,
    /// Seconds perf records at each level.
    #[serde(default = "default_seconds")]
    pub seconds: f64,
    /// Whose processes are recorded.
    #[serde(default)]
    pub target: ProfileTarget,
    /// Events recorded: `cpu`, and where permitted `cs` and `offcpu`.
    #[serde(default = "default_events")]
    pub events: Vec<Event>,
}

fn default_seconds() -> f64 {
    10.0
}

fn default_events() -> Vec<Event> {
    vec![Event::Cpu]
}

/// A load level to profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The largest load whose server CPU stayed under 70%.
    Busy,
    /// The smallest load within 5% of the maximum throughput.
    Saturated,
    /// A client count of the series.
    Clients(usize),
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Level::Busy => f.write_str("busy"),
            Level::Saturated => f.write_str("saturated"),
            Level::Clients(n) => write!(f, "{n} clients"),
        }
    }
}

impl Serialize for Level {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Level::Clients(n) => s.serialize_u64(*n as u64),
            named => s.serialize_str(&named.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Level {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Level;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("\"busy\", \"saturated\" or a client count")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Level, E> {
                match v {
                    "busy" => Ok(Level::Busy),
                    "saturated" => Ok(Level::Saturated),
                    other => Err(E::custom(format!(
                        "unknown level {other:?}: expected \"busy\", \"saturated\" or a client count"
                    ))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Level, E> {
                Ok(Level::Clients(v as usize))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Level, E> {
                usize::try_from(v)
                    .map(Level::Clients)
                    .map_err(|_| E::custom(format!("{v} is negative; expected a client count")))
            }
        }
        d.deserialize_any(V)
    }
}

/// The `[profile]` section, checked except against the series (see [`check`]); None when the
/// spec has none.
pub fn section(spec: &SpecFile) -> Result<Option<ProfileSpec>, SpecError> {
    let Some(p) = &spec.spec.profile else {
        return Ok(None);
    };
    if p.at.is_empty() {
        return Err(spec.error_at(
            &["profile", "at"],
            "no level to profile: expected at = [\"busy\", \"saturated\"] or client counts",
        ));
    }
    if let Some(i) = p.at.iter().position(|l| *l == Level::Clients(0)) {
        return Err(spec.error_at(&["profile", "at", &i.to_string()], "a count of 0 clients"));
    }
    if !p.seconds.is_finite() || p.seconds <= 0.0 {
        return Err(spec.error_at(
            &["profile", "seconds"],
            format!("{}: expected seconds > 0, e.g. seconds = 10", p.seconds),
        ));
    }
    if p.events.is_empty() {
        return Err(spec.error_at(
            &["profile", "events"],
            "no event: expected events = [\"cpu\"] (and, where permitted, \"cs\", \"offcpu\")",
        ));
    }
    Ok(Some(p.clone()))
}

/// Checks the `[profile]` section against the series: client counts must be steps of it.
pub fn check(spec: &SpecFile, series: &Series) -> Result<(), SpecError> {
    let Some(p) = section(spec)? else {
        return Ok(());
    };
    for (i, level) in p.at.iter().enumerate() {
        let Level::Clients(n) = level else { continue };
        let key = i.to_string();
        match series {
            Series::Clients(counts) if counts.contains(n) => {}
            Series::Clients(counts) => {
                return Err(spec.error_at(
                    &["profile", "at", &key],
                    format!(
                    "{n} clients is not a step of the series {counts:?}: profile a measured level"
                ),
                ))
            }
            _ => {
                return Err(spec.error_at(
                    &["profile", "at", &key],
                    "a rate series has one client count: profile it at \"busy\" or \"saturated\"",
                ))
            }
        }
    }
    Ok(())
}

/// A level chosen for a pass.
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    point: Point,
    step: String,
    labels: Vec<String>,
    asked: Vec<Level>,
    step_throughput_rps: f64,
}

/// The levels of `spec.at` among a series' measured steps, merged when two name the same
/// level, in order of load; and the levels that cannot be profiled, with why.
fn choose(
    spec: &ProfileSpec,
    target: &str,
    placement: &str,
    steps: &[StepResult],
) -> (Vec<Choice>, Vec<MissingRecord>) {
    let analysis = crate::analyze::run::analyze(steps, None);
    let series = analysis
        .series
        .into_iter()
        .find(|s| s.target == target && s.placement == placement);
    let mut choices: Vec<Choice> = Vec::new();
    let mut missing = Vec::new();
    for level in &spec.at {
        let found = series
            .as_ref()
            .ok_or_else(|| "no measured step".to_string());
        let point = found.and_then(|s| level_point(*level, s));
        match point {
            Ok(p) => add_choice(&mut choices, *level, p, target, placement),
            Err(reason) => missing.push(MissingRecord {
                target: target.into(),
                placement: placement.into(),
                level: Some(level.to_string()),
                reason,
            }),
        }
    }
    choices.sort_by(|a, b| load(a.point).total_cmp(&load(b.point)));
    (choices, missing)
}

fn load(p: Point) -> f64 {
    p.rate_rps.unwrap_or(p.clients as f64)
}

fn level_point(
    level: Level,
    s: &crate::analyze::run::SeriesAnalysis,
) -> Result<(Point, f64), String> {
    let at = |value: f64| {
        s.points
            .iter()
            .find(|p| p.rate_rps.unwrap_or(p.clients as f64) == value)
            .map(|p| {
                let point = Point {
                    clients: p.clients,
                    rate_rps: p.rate_rps,
                };
                (point, p.throughput_rps.mean)
            })
    };
    let knee = s.knee.as_ref();
    let value = match level {
        Level::Busy => knee.and_then(|k| k.busy).ok_or(
            "no busy point: no step had server CPU figures under 70% (the first step was already busier, or the CPU was not observed)",
        )?,
        Level::Saturated => knee.map(|k| k.saturation).ok_or("no saturation point: no step to analyse")?,
        Level::Clients(n) => n as f64,
    };
    at(value).ok_or_else(|| format!("no measured step at {level}"))
}

fn add_choice(
    choices: &mut Vec<Choice>,
    level: Level,
    (point, thr): (Point, f64),
    target: &str,
    placement: &str,
) {
    let label = match level {
        Level::Clients(_) => "requested".to_string(),
        named => named.to_string(),
    };
    if let Some(c) = choices.iter_mut().find(|c| c.point == point) {
        if !c.labels.contains(&label) {
            c.labels.push(label);
        }
        c.asked.push(level);
        return;
    }
    choices.push(Choice {
        point,
        step: step_id(target, placement, point, 0),
        labels: vec![label],
        asked: vec![level],
        step_throughput_rps: thr,
    });
}

/// Receives the pass's per-second lines and keeps nothing (the pass's figures are its report).
struct Discard;

impl IntervalSink for Discard {
    fn interval(&mut self, _: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {}
}

/// `profiles.jsonl` of one series: what an earlier (resumed) run wrote is not written again.
struct Log {
    dir: PathBuf,
    done: Vec<ProfileLine>,
    target: String,
    placement: String,
}

impl Log {
    fn open(dir: &Path, target: &str, placement: &str) -> Log {
        Log {
            dir: dir.to_path_buf(),
            done: read_lines(dir),
            target: target.to_string(),
            placement: placement.to_string(),
        }
    }

    fn append(&self, line: &ProfileLine) -> Result<(), String> {
        if self.done.contains(line) {
            return Ok(());
        }
        append_line(&self.dir, line)
    }

    fn missing(&self, level: Option<String>, reason: String) -> Result<(), String> {
        self.append(&ProfileLine::Missing(MissingRecord {
            target: self.target.clone(),
            placement: self.placement.clone(),
            level,
            reason,
        }))
    }

    /// A pass of an earlier run at this step that produced a profile.
    fn earlier_pass(&self, step: &str) -> Option<PassRecord> {
        self.done.iter().find_map(|l| match l {
            ProfileLine::Pass(p) if p.step == step && p.ok => Some(p.clone()),
            _ => None,
        })
    }

    /// The differential graphs of the series' passes, or why there are none.
    fn diff(
        &self,
        spec: &ProfileSpec,
        target: &TargetPlan,
        passes: &[(Choice, PassRecord)],
    ) -> Result<(), String> {
        match diff_pair(passes) {
            Some((a, b)) => {
                let made = self.done.iter().any(|l| {
                    matches!(l, ProfileLine::Diff(d) if d.a == a.step && d.b == b.step && d.reason.is_none())
                });
                if made {
                    return Ok(());
                }
                let line = make_diff(&self.dir, target, &self.placement, a, b);
                self.append(&ProfileLine::Diff(line))
            }
            None if spec.at.contains(&Level::Busy) && spec.at.contains(&Level::Saturated) => self.missing(
                Some("busy vs saturated".into()),
                "no differential graph: busy and saturated are the same level, or one of them has no profile".into(),
            ),
            None => Ok(()),
        }
    }
}

impl Runner<'_> {
    /// After a series' measured steps: a profile pass at each level the spec's `[profile]`
    /// asks for, then the differential graphs. Never fails the run: what could not be
    /// profiled is written to `profiles.jsonl` with why.
    pub(super) fn profile_series(
        &mut self,
        target: &TargetPlan,
        placement: &str,
        server: &mut Option<Box<dyn Server>>,
        server_cpus: &mut Option<Vec<usize>>,
        summary: &mut RunSummary,
    ) -> Result<(), String> {
        let Some(spec) = section(&self.plan.spec).ok().flatten() else {
            return Ok(());
        };
        let log = Log::open(&self.dir.path, &target.name, placement);
        if let Err(e) = crate::profile::capture::check_perf() {
            let note = format!("{} / {placement}: no profile: {e}", target.name);
            self.progress.note(&note);
            summary.findings.push(note);
            return log.missing(None, e.to_string());
        }
        let steps: Vec<StepResult> = self
            .dir
            .steps()?
            .into_iter()
            .filter(|s| s.target == target.name && s.placement == placement)
            .collect();
        let (choices, absent) = choose(&spec, &target.name, placement, &steps);
        for m in absent {
            log.append(&ProfileLine::Missing(m))?;
        }
        let mut passes = Vec::new();
        for choice in &choices {
            if self.stop.load(std::sync::atomic::Ordering::Relaxed) {
                summary.interrupted = true;
                return Ok(());
            }
            let record = match log.earlier_pass(&choice.step) {
                Some(p) => p,
                None => {
                    let rec =
                        self.profile_pass(&spec, target, placement, choice, server, server_cpus);
                    log.append(&ProfileLine::Pass(rec.clone()))?;
                    rec
                }
            };
            passes.push((choice.clone(), record));
        }
        log.diff(&spec, target, &passes)
    }

    fn profile_pass(
        &mut self,
        spec: &ProfileSpec,
        target: &TargetPlan,
        placement: &str,
        choice: &Choice,
        server: &mut Option<Box<dyn Server>>,
        server_cpus: &mut Option<Vec<usize>>,
    ) -> PassRecord {
        let mut rec = new_record(spec, target, placement, choice);
        self.progress.step(&format!(
            "{} {placement} c={} profile ({})",
            target.name,
            choice.point.clients,
            choice.labels.join(", ")
        ));
        let follow = self
            .plan
            .cpus_follow_clients
            .then_some(choice.point.clients);
        let outcome = self
            .placements
            .cpus(placement, follow)
            .and_then(|cpus| {
                self.live_server(target, &cpus, choice.point.clients, server, server_cpus)?;
                Ok(cpus)
            })
            .and_then(|cpus| {
                let srv = server.as_mut().ok_or("no server")?;
                self.pass_with_capture(spec, target, choice, &cpus, srv.as_mut(), &rec.dir)
            });
        match outcome {
            Ok((load, capture)) => fill_record(&mut rec, load, capture),
            Err(why) => rec.reason = Some(why),
        }
        if let Some(why) = server.as_mut().and_then(|s| s.died()) {
            rec.ok = false;
            rec.reason = Some(format!("the server died during the profile pass: {why}"));
            *server = None;
        }
        rec
    }

    /// The series' server if it still runs on `cpus`, else a new one.
    fn live_server(
        &mut self,
        target: &TargetPlan,
        cpus: &CpuPair,
        clients: usize,
        server: &mut Option<Box<dyn Server>>,
        server_cpus: &mut Option<Vec<usize>>,
    ) -> Result<(), String> {
        let usable = server.as_mut().is_some_and(|s| s.died().is_none())
            && server_cpus.as_ref() == Some(&cpus.server);
        if usable {
            return Ok(());
        }
        if let Some(mut old) = server.take() {
            old.stop();
        }
        let s = self.launcher.launch(target, cpus, clients, self.stop)?;
        *server = Some(s);
        *server_cpus = Some(cpus.server.clone());
        Ok(())
    }

    /// Runs the load and, once its warm-up is over, perf on the target's processes.
    fn pass_with_capture(
        &mut self,
        spec: &ProfileSpec,
        target: &TargetPlan,
        choice: &Choice,
        cpus: &CpuPair,
        server: &mut dyn Server,
        rel_dir: &str,
    ) -> Result<(crate::record::load::LoadReport, CaptureResult), String> {
        let req = self.pass_request(spec, target, choice, cpus, server.port());
        let whose = Whose {
            target: spec.target,
            server_pid: server.pid(),
            external_client: matches!(self.plan.client, ClientPlan::Command { .. }),
        };
        let out_dir = self.dir.path.join(rel_dir);
        let warmup = req.warmup;
        let driver = &mut *self.driver;
        let stop = self.stop;
        let (load, capture) = std::thread::scope(|scope| {
            let recorder = scope.spawn(|| {
                std::thread::sleep(warmup);
                let pids = whose.pids()?;
                crate::profile::capture(&pids, spec.seconds, &spec.events, &out_dir)
                    .map_err(|e| e.to_string())
            });
            let load = driver.run_step(&req, &mut Discard, stop);
            let capture = recorder
                .join()
                .unwrap_or_else(|_| Err("the profiler thread panicked".into()));
            (load, capture)
        });
        Ok((load.map_err(|e| e.to_string())?.report, capture))
    }

    fn pass_request(
        &self,
        spec: &ProfileSpec,
        target: &TargetPlan,
        choice: &Choice,
        cpus: &CpuPair,
        port: u16,
    ) -> StepRequest {
        let connections = choice.point.clients * self.plan.connections_per_client;
        StepRequest {
            step_id: format!("{}.profile", choice.step),
            url: target.url.replace("{port}", &port.to_string()),
            port,
            clients: choice.point.clients,
            connections,
            depth: target.depth,
            threads: self
                .plan
                .client_threads
                .unwrap_or(cpus.client.len())
                .clamp(1, connections.max(1)),
            duration: Duration::from_secs_f64(spec.seconds) + PERF_START_ALLOWANCE,
            warmup: self.plan.warmup,
            timeout: self.plan.timeout,
            rate_rps: choice.point.rate_rps,
            client_cpus: cpus.client.clone(),
            out_dir: self.dir.path.clone(),
            // A profile pass loads one server (a split target's first instance).
            instances: Vec::new(),
            group_cpus: Vec::new(),
        }
    }
}

type CaptureResult = Result<ProfileSummary, String>;

fn new_record(
    spec: &ProfileSpec,
    target: &TargetPlan,
    placement: &str,
    choice: &Choice,
) -> PassRecord {
    PassRecord {
        step: choice.step.clone(),
        target: target.name.clone(),
        placement: placement.to_string(),
        clients: choice.point.clients,
        rate_rps: choice.point.rate_rps,
        levels: choice.labels.clone(),
        profiled: spec.target,
        seconds: spec.seconds,
        dir: format!("profiles/{}", choice.step),
        step_throughput_rps: choice.step_throughput_rps,
        throughput_rps: None,
        window_s: None,
        ok: false,
        reason: None,
        events: Vec::new(),
    }
}

fn fill_record(
    rec: &mut PassRecord,
    load: crate::record::load::LoadReport,
    capture: CaptureResult,
) {
    rec.throughput_rps = Some(load.throughput_rps);
    rec.window_s = Some(load.duration_s);
    match capture {
        Ok(summary) => {
            rec.ok = true;
            rec.events = summary.events.iter().map(event_record).collect();
            let skipped: Vec<String> = summary
                .skipped
                .iter()
                .map(|(e, why)| format!("{} not recorded: {why}", e.stem()))
                .collect();
            rec.reason = (!skipped.is_empty()).then(|| skipped.join("; "));
        }
        Err(why) => rec.reason = Some(why),
    }
}

fn event_record(e: &crate::profile::capture::EventProfile) -> EventRecord {
    EventRecord {
        event: e.event,
        perf_event: e.perf_event.clone(),
        samples: e.samples,
        garbled_lines: e.garbled_lines,
        files: e.files.clone(),
        top: e
            .top
            .by_inclusive
            .iter()
            .take(TOP_ROWS)
            .map(|f| FunctionRow {
                name: f.name.clone(),
                inclusive_pct: f.inclusive_pct,
                self_pct: f.self_pct,
            })
            .collect(),
    }
}

/// Whose processes a pass records.
#[derive(Debug, Clone, Copy)]
struct Whose {
    target: ProfileTarget,
    server_pid: Option<i32>,
    external_client: bool,
}

impl Whose {
    /// The pids to record, looked up once the load runs (an external client exists only then).
    fn pids(&self) -> Result<Vec<i32>, String> {
        let parents = parent_map();
        let server = match self.server_pid {
            Some(pid) => crate::machine::procfs::descendants(pid, &parents),
            None if self.target == ProfileTarget::Client => Vec::new(),
            None => return Err("the target has no process id to record".into()),
        };
        let client = if self.external_client {
            let me = std::process::id() as i32;
            crate::machine::procfs::descendants(me, &parents)
                .into_iter()
                .filter(|p| *p != me && !server.contains(p) && !is_perf(*p))
                .collect()
        } else {
            vec![std::process::id() as i32]
        };
        let pids = match self.target {
            ProfileTarget::Server => server,
            ProfileTarget::Client => client,
            ProfileTarget::Both => server.into_iter().chain(client).collect(),
        };
        if pids.is_empty() {
            return Err("no process of the load generator was found to record".into());
        }
        Ok(pids)
    }
}

/// pid → parent pid of every process under /proc.
fn parent_map() -> std::collections::BTreeMap<i32, i32> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        // A process may end between listing and reading: skip it.
        if let Some(stat) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|t| crate::machine::procfs::parse_pid_stat(&t))
        {
            out.insert(pid, stat.ppid);
        }
    }
    out
}

fn is_perf(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "perf")
}

/// The two passes to compare, the lower load first: busy and saturated when both were
/// profiled at different levels, else the lowest and the highest profiled level.
fn diff_pair(passes: &[(Choice, PassRecord)]) -> Option<(&PassRecord, &PassRecord)> {
    let (a, b) = diff_ends(passes)?;
    let load = |p: &PassRecord| p.rate_rps.unwrap_or(p.clients as f64);
    Some(if load(b) < load(a) { (b, a) } else { (a, b) })
}

fn diff_ends(passes: &[(Choice, PassRecord)]) -> Option<(&PassRecord, &PassRecord)> {
    let ok: Vec<&(Choice, PassRecord)> = passes.iter().filter(|(_, r)| r.ok).collect();
    let with = |level: Level| ok.iter().find(|(c, _)| c.asked.contains(&level));
    if let (Some(a), Some(b)) = (with(Level::Busy), with(Level::Saturated)) {
        if a.1.step != b.1.step {
            return Some((&a.1, &b.1));
        }
    }
    let (first, last) = (ok.first()?, ok.last()?);
    (first.1.step != last.1.step).then_some((&first.1, &last.1))
}

fn make_diff(
    run_dir: &Path,
    target: &TargetPlan,
    placement: &str,
    a: &PassRecord,
    b: &PassRecord,
) -> DiffRecord {
    let rel = format!("profiles/diff-{}-vs-{}", a.step, b.step);
    let label = |p: &PassRecord| format!("{} ({} clients)", p.levels.join(", "), p.clients);
    let mut rec = DiffRecord {
        target: target.name.clone(),
        placement: placement.to_string(),
        a: a.step.clone(),
        b: b.step.clone(),
        a_label: label(a),
        b_label: label(b),
        dir: rel.clone(),
        reason: None,
        events: Vec::new(),
    };
    let path = |r: &str| -> PathBuf { run_dir.join(r) };
    match crate::profile::diff_dirs(&path(&a.dir), &path(&b.dir), &path(&rel)) {
        Ok(diffs) => rec.events = diffs.iter().map(diff_event).collect(),
        Err(e) => rec.reason = Some(e.to_string()),
    }
    rec
}

fn diff_event(d: &crate::profile::capture::EventDiff) -> DiffEventRecord {
    DiffEventRecord {
        event: d.event,
        files: d.files.clone(),
        deltas: d
            .deltas
            .iter()
            .take(TOP_ROWS)
            .map(|x| DeltaRow {
                name: x.name.clone(),
                a_pct: x.a_pct,
                b_pct: x.b_pct,
                delta_points: x.delta_points,
            })
            .collect(),
    }
}

/// The `--dry-run` lines of the profile passes (empty without a `[profile]` section).
pub fn describe(plan: &Plan) -> String {
    let Some(spec) = section(&plan.spec).ok().flatten() else {
        return String::new();
    };
    let events: Vec<&str> = spec.events.iter().map(|e| e.stem()).collect();
    let levels: Vec<String> = spec.at.iter().map(Level::to_string).collect();
    let pass_s = plan.warmup.as_secs_f64() + spec.seconds + PERF_START_ALLOWANCE.as_secs_f64();
    let mut out = format!(
        "\nprofile passes after each series' measured steps: at {}; perf records the {} for {} s (events {}); each pass about {:.0} s plus processing\n",
        levels.join(", "),
        spec.target.name(),
        spec.seconds,
        events.join(", "),
        pass_s
    );
    for target in &plan.targets {
        for placement in &plan.placements {
            let steps: Vec<String> = spec
                .at
                .iter()
                .map(|l| match l {
                    Level::Clients(n) => {
                        let p = Point {
                            clients: *n,
                            rate_rps: None,
                        };
                        format!("profiles/{}/", step_id(&target.name, placement, p, 0))
                    }
                    named => format!("{named} (decided when the series' steps are done)"),
                })
                .collect();
            out.push_str(&format!(
                "  {} / {placement}: {}\n",
                target.name,
                steps.join(", ")
            ));
        }
    }
    match crate::profile::capture::check_perf() {
        Ok(()) => out.push_str("  perf: ready\n"),
        Err(e) => out.push_str(&format!("  perf: {e}; the run goes on without profiles\n")),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::profiles::PROFILES_FILE;
    use crate::record::steps::StepStatus;
    use std::io::Write as _;

    fn spec_file(profile: &str) -> Result<SpecFile, SpecError> {
        let text = format!(
            "name = \"x\"\nclients = [1, 2, 4]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n[profile]\n{profile}"
        );
        SpecFile::parse(Path::new("s.toml"), &text)
    }

    fn checked(profile: &str) -> Result<Option<ProfileSpec>, String> {
        let spec = spec_file(profile).map_err(|e| e.to_string())?;
        check(&spec, &Series::Clients(vec![1, 2, 4])).map_err(|e| e.to_string())?;
        section(&spec).map_err(|e| e.to_string())
    }

    #[test]
    fn a_section_reads_with_its_defaults() {
        let p = checked("at = [\"busy\", \"saturated\", 4]\n")
            .unwrap()
            .unwrap();
        assert_eq!(p.at, [Level::Busy, Level::Saturated, Level::Clients(4)]);
        assert_eq!(p.seconds, 10.0);
        assert_eq!(p.target, ProfileTarget::Server);
        assert_eq!(p.events, [Event::Cpu]);
        let p = checked("at = [2]\nseconds = 1.5\ntarget = \"both\"\nevents = [\"cpu\", \"cs\"]\n")
            .unwrap()
            .unwrap();
        assert_eq!((p.seconds, p.target), (1.5, ProfileTarget::Both));
    }

    #[test]
    fn errors_are_located() {
        let err = checked("at = [\"busy\", \"bussy\"]\n").unwrap_err();
        assert!(err.starts_with("s.toml:7:15: profile.at[1]:"), "{err}");
        assert!(err.contains("expected \"busy\", \"saturated\""), "{err}");
        let err = checked("at = [1, 8]\n").unwrap_err();
        assert!(err.starts_with("s.toml:7:10: profile.at[1]:"), "{err}");
        assert!(err.contains("not a step of the series"), "{err}");
        let err = checked("at = [1]\nseconds = 0\n").unwrap_err();
        assert!(err.starts_with("s.toml:8:11: profile.seconds:"), "{err}");
        let err = checked("at = [1]\ntarget = \"servr\"\n").unwrap_err();
        assert!(err.starts_with("s.toml:8:10: profile.target:"), "{err}");
        let err = checked("at = []\n").unwrap_err();
        assert!(err.contains("profile.at: no level"), "{err}");
        let err = checked("at = [1]\nevnts = []\n").unwrap_err();
        assert!(err.contains("unknown field"), "{err}");
    }

    fn step(clients: usize, thr: f64, cpu_pct: f64) -> StepResult {
        let mut s = StepResult::empty(format!("a.p.c{clients}.r0"), "a", "p", clients, 0);
        s.status = StepStatus::Ok;
        s.load = Some(crate::record::load::LoadReport {
            throughput_rps: thr,
            duration_s: 1.0,
            ..crate::record::load::LoadReport::default()
        });
        s.server_cpus = "0".into();
        s.server = serde_json::json!({ "server_cpus_busy_pct": cpu_pct });
        s
    }

    #[test]
    fn busy_and_saturated_levels_come_from_the_analysis() {
        let steps = [
            step(1, 100.0, 20.0),
            step(2, 190.0, 50.0),
            step(4, 300.0, 80.0),
            step(8, 305.0, 95.0),
        ];
        let spec = checked("at = [\"saturated\", \"busy\", 4]\n")
            .unwrap()
            .unwrap();
        let (choices, missing) = choose(&spec, "a", "p", &steps);
        assert!(missing.is_empty(), "{missing:?}");
        let got: Vec<(usize, Vec<String>)> = choices
            .iter()
            .map(|c| (c.point.clients, c.labels.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (2, vec!["busy".to_string()]),
                (4, vec!["saturated".to_string(), "requested".to_string()])
            ]
        );
        assert_eq!(choices[0].step, "a.p.c2.r0");
        assert_eq!(choices[1].step_throughput_rps, 300.0);
    }

    #[test]
    fn a_level_without_a_point_says_why() {
        let steps = [step(1, 100.0, 90.0), step(2, 100.0, 95.0)];
        let spec = checked("at = [\"busy\", \"saturated\"]\n")
            .unwrap()
            .unwrap();
        let (choices, missing) = choose(&spec, "a", "p", &steps);
        assert_eq!(choices.len(), 1);
        assert_eq!(missing[0].level.as_deref(), Some("busy"));
        assert!(missing[0].reason.contains("under 70%"), "{missing:?}");
    }

    #[test]
    fn the_diff_pairs_busy_with_saturated_else_the_ends() {
        let pass = |step: &str, ok: bool| PassRecord {
            step: step.into(),
            target: "a".into(),
            placement: "p".into(),
            clients: step[1..].parse().unwrap(),
            rate_rps: None,
            levels: vec![],
            profiled: ProfileTarget::Server,
            seconds: 1.0,
            dir: String::new(),
            step_throughput_rps: 100.0,
            throughput_rps: Some(96.8),
            window_s: None,
            ok,
            reason: None,
            events: vec![],
        };
        let choice = |level: Level| Choice {
            point: Point {
                clients: 1,
                rate_rps: None,
            },
            step: String::new(),
            labels: vec![],
            asked: vec![level],
            step_throughput_rps: 0.0,
        };
        let passes = vec![
            (choice(Level::Clients(1)), pass("c1", true)),
            (choice(Level::Busy), pass("c2", true)),
            (choice(Level::Saturated), pass("c4", true)),
            (choice(Level::Clients(8)), pass("c8", false)),
        ];
        let (a, b) = diff_pair(&passes).unwrap();
        assert_eq!((a.step.as_str(), b.step.as_str()), ("c2", "c4"));
        let (a, b) = diff_pair(&[passes[0].clone(), passes[3].clone()][..])
            .map_or((String::new(), String::new()), |(a, b)| {
                (a.step.clone(), b.step.clone())
            });
        assert_eq!((a, b), (String::new(), String::new()));
        let (a, b) = diff_pair(&passes[..2]).unwrap();
        assert_eq!((a.step.as_str(), b.step.as_str()), ("c1", "c2"));
        assert!((passes[0].1.change_pct().unwrap() + 3.2).abs() < 1e-9);
        // busy above saturated (a server that never reaches 70% CPU): the lower load is A
        let swapped = vec![
            (choice(Level::Saturated), pass("c2", true)),
            (choice(Level::Busy), pass("c8", true)),
        ];
        let (a, b) = diff_pair(&swapped).unwrap();
        assert_eq!((a.step.as_str(), b.step.as_str()), ("c2", "c8"));
    }

    #[test]
    fn profile_lines_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let line = ProfileLine::Missing(MissingRecord {
            target: "a".into(),
            placement: "p".into(),
            level: None,
            reason: "perf is not installed".into(),
        });
        append_line(dir.path(), &line).unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join(PROFILES_FILE))
            .unwrap()
            .write_all(b"{garbled\n")
            .unwrap();
        assert_eq!(read_lines(dir.path()), [line]);
        // a resumed run does not write what the first one wrote
        let log = Log::open(dir.path(), "a", "p");
        log.missing(None, "perf is not installed".into()).unwrap();
        log.missing(Some("busy".into()), "no busy point".into())
            .unwrap();
        assert_eq!(read_lines(dir.path()).len(), 2);
    }
}
