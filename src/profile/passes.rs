//! Profile passes planned: a spec's `[profile]` settings ([`ProfileSpec`], [`Level`]), which
//! measured load levels get a pass ([`choose`], from the series' busy and saturation points
//! given as plain data by the caller), whose processes a pass records ([`Whose`]), the
//! `profiles.jsonl` lines of a pass and of the series ([`Log`]), the differential graphs
//! between two profiled levels, and the `--dry-run` lines ([`describe`]).
//!
//! Running a pass (the load, the server, perf around it) is the runner's; this module imports
//! no runner type, so the analysis that finds the busy and saturation points reaches it only
//! as a [`SeriesLevels`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use super::capture::{parent_map, EventDiff, EventProfile};
use super::ProfileSummary;
use crate::record::load::LoadReport;
use crate::record::profiles::{
    append_line, read_lines, AppendError, DeltaRow, DiffEventRecord, DiffRecord, Event,
    EventRecord, FunctionRow, MissingRecord, PassRecord, ProfileLine, ProfileTarget,
};

/// Load kept running past `seconds` so perf's start-up (it reads symbols first) is covered.
pub const PERF_START_ALLOWANCE: Duration = Duration::from_secs(1);

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
    /// The largest load below the saturation whose server CPU stayed under 70% (the least
    /// load below it when all were busier).
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

/// The load a pass offers: a measured step's clients and, in open loop, its rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PassLoad {
    /// Clients.
    pub clients: usize,
    /// Open-loop rate, requests/s; None in closed loop.
    pub rate_rps: Option<f64>,
}

impl PassLoad {
    /// The load as the analysis orders it: the rate in open loop, else the client count.
    fn value(self) -> f64 {
        self.rate_rps.unwrap_or(self.clients as f64)
    }
}

/// One measured load level of a series, as the analysis summarised its steps.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredLevel {
    /// The level's load.
    pub load: PassLoad,
    /// Id of the level's first measured step (a pass's files go to `profiles/<step>/`).
    pub step: String,
    /// Mean throughput of the level's steps, requests/s.
    pub throughput_rps: f64,
}

/// What choosing levels needs of a series' analysis, as plain data (the caller fills it from
/// the analysis, so profile does not depend on it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SeriesLevels {
    /// The series' measured levels.
    pub points: Vec<MeasuredLevel>,
    /// Load of the busy point; None when no step stayed under 70% server CPU (or no knee).
    pub busy: Option<f64>,
    /// Load of the saturation point; None when the series had no step to analyse.
    pub saturation: Option<f64>,
}

/// A level chosen for a pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    /// The load the pass offers.
    pub point: PassLoad,
    /// Id of the level's first measured step.
    pub step: String,
    /// Why it is profiled: `busy`, `saturated`, `requested` (one per name that chose it).
    pub labels: Vec<String>,
    /// The spec's levels that chose it.
    pub asked: Vec<Level>,
    /// Mean throughput of the level's measured steps, requests/s.
    pub step_throughput_rps: f64,
}

/// The levels of `spec.at` among a series' measured levels (None: the series has no measured
/// step), merged when two name the same level, in order of load; and the levels that cannot
/// be profiled, with why.
pub fn choose(
    spec: &ProfileSpec,
    series: Option<&SeriesLevels>,
    target: &str,
    placement: &str,
) -> (Vec<Choice>, Vec<MissingRecord>) {
    let mut choices: Vec<Choice> = Vec::new();
    let mut missing = Vec::new();
    for level in &spec.at {
        let found = series.ok_or(PassError::NoSeries);
        match found.and_then(|s| level_point(*level, s)) {
            Ok(m) => add_choice(&mut choices, *level, m),
            Err(reason) => missing.push(MissingRecord {
                target: target.into(),
                placement: placement.into(),
                level: Some(level.to_string()),
                reason: reason.to_string(),
            }),
        }
    }
    choices.sort_by(|a, b| a.point.value().total_cmp(&b.point.value()));
    (choices, missing)
}

/// Why a level, or a pass at it, has no profile (recorded in `profiles.jsonl`).
#[derive(Debug, thiserror::Error)]
pub enum PassError {
    /// The series has no measured step at all.
    #[error("no measured step")]
    NoSeries,
    /// `busy` asked, and no step qualifies.
    #[error("no busy point: no step below the saturation has server CPU figures (the series saturates at its first step, or the CPU was not observed)")]
    NoBusy,
    /// `saturated` asked, and the series was not analysed.
    #[error("no saturation point: no step to analyse")]
    NoSaturation,
    /// A level with no measured step.
    #[error("no measured step at {0}")]
    NoStepAt(Level),
    /// A server target with no pid.
    #[error("the target has no process id to record")]
    NoServerPid,
    /// A client target whose processes were not found.
    #[error("no process of the load generator was found to record")]
    NoClientProcess,
    /// perf could not record or its output could not be read.
    #[error(transparent)]
    Capture(#[from] crate::profile::ProfileError),
    /// The recording thread panicked.
    #[error("the profiler thread panicked")]
    Panicked,
}

fn level_point(level: Level, s: &SeriesLevels) -> Result<&MeasuredLevel, PassError> {
    let value = match level {
        Level::Busy => s.busy.ok_or(PassError::NoBusy)?,
        Level::Saturated => s.saturation.ok_or(PassError::NoSaturation)?,
        Level::Clients(n) => n as f64,
    };
    s.points
        .iter()
        .find(|p| p.load.value() == value)
        .ok_or(PassError::NoStepAt(level))
}

fn add_choice(choices: &mut Vec<Choice>, level: Level, m: &MeasuredLevel) {
    let label = match level {
        Level::Clients(_) => "requested".to_string(),
        named => named.to_string(),
    };
    if let Some(c) = choices.iter_mut().find(|c| c.point == m.load) {
        if !c.labels.contains(&label) {
            c.labels.push(label);
        }
        c.asked.push(level);
        return;
    }
    choices.push(Choice {
        point: m.load,
        step: m.step.clone(),
        labels: vec![label],
        asked: vec![level],
        step_throughput_rps: m.throughput_rps,
    });
}

/// `profiles.jsonl` of one series: what an earlier (resumed) run wrote is not written again.
pub struct Log {
    dir: PathBuf,
    done: Vec<ProfileLine>,
    target: String,
    placement: String,
}

impl Log {
    /// The log of the series `target` / `placement` in the run directory `dir`.
    pub fn open(dir: &Path, target: &str, placement: &str) -> Log {
        Log {
            dir: dir.to_path_buf(),
            done: read_lines(dir),
            target: target.to_string(),
            placement: placement.to_string(),
        }
    }

    /// Appends `line` unless an earlier run wrote it.
    pub fn append(&self, line: &ProfileLine) -> Result<(), AppendError> {
        if self.done.contains(line) {
            return Ok(());
        }
        append_line(&self.dir, line)
    }

    /// Says that `level` (None: the whole series) has no profile, and why.
    pub fn missing(&self, level: Option<String>, reason: String) -> Result<(), AppendError> {
        self.append(&ProfileLine::Missing(MissingRecord {
            target: self.target.clone(),
            placement: self.placement.clone(),
            level,
            reason,
        }))
    }

    /// A pass of an earlier run at this step that produced a profile.
    pub fn earlier_pass(&self, step: &str) -> Option<PassRecord> {
        self.done.iter().find_map(|l| match l {
            ProfileLine::Pass(p) if p.step == step && p.ok => Some(p.clone()),
            _ => None,
        })
    }

    /// The differential graphs of the series' passes, or why there are none.
    pub fn diff(
        &self,
        spec: &ProfileSpec,
        target: &str,
        passes: &[(Choice, PassRecord)],
    ) -> Result<(), AppendError> {
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

/// What a pass's perf capture gave: its summary, or why there is none.
pub type CaptureResult = Result<ProfileSummary, PassError>;

/// The `profiles.jsonl` line of a pass at `choice` before it runs (not ok, no figures yet).
pub fn new_record(
    spec: &ProfileSpec,
    target: &str,
    placement: &str,
    choice: &Choice,
) -> PassRecord {
    PassRecord {
        step: choice.step.clone(),
        target: target.to_string(),
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
        jvms: Vec::new(),
    }
}

/// Fills a pass's line with its load's figures and what perf recorded.
pub fn fill_record(rec: &mut PassRecord, load: LoadReport, capture: CaptureResult) {
    rec.throughput_rps = Some(load.throughput_rps);
    rec.window_s = Some(load.duration_s);
    match capture {
        Ok(summary) => {
            rec.ok = true;
            rec.events = summary.events.iter().map(event_record).collect();
            rec.jvms = summary.jvms.clone();
            let skipped: Vec<String> = summary
                .skipped
                .iter()
                .map(|(e, why)| format!("{} not recorded: {why}", e.stem()))
                .collect();
            rec.reason = (!skipped.is_empty()).then(|| skipped.join("; "));
        }
        Err(why) => rec.reason = Some(why.to_string()),
    }
}

fn event_record(e: &EventProfile) -> EventRecord {
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
        sync_pct: Some(e.sync_pct),
        java: e.java.clone(),
        cost: e.cost.clone(),
    }
}

/// Whose processes a pass records.
#[derive(Debug, Clone, Copy)]
pub struct Whose {
    /// The spec's choice: server, client or both.
    pub target: ProfileTarget,
    /// The server's process, if it has one.
    pub server_pid: Option<i32>,
    /// The load generator is an external command (its processes are children of this one),
    /// not this process's threads.
    pub external_client: bool,
}

impl Whose {
    /// The pids to record, looked up once the load runs (an external client exists only then).
    pub fn pids(&self) -> Result<Vec<i32>, PassError> {
        let parents = parent_map();
        let server = match self.server_pid {
            Some(pid) => crate::machine::procfs::descendants(pid, &parents),
            None if self.target == ProfileTarget::Client => Vec::new(),
            None => return Err(PassError::NoServerPid),
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
            return Err(PassError::NoClientProcess);
        }
        Ok(pids)
    }
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
    target: &str,
    placement: &str,
    a: &PassRecord,
    b: &PassRecord,
) -> DiffRecord {
    let rel = format!("profiles/diff-{}-vs-{}", a.step, b.step);
    let label = |p: &PassRecord| format!("{} ({} clients)", p.levels.join(", "), p.clients);
    let mut rec = DiffRecord {
        target: target.to_string(),
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
    match super::diff_dirs(&path(&a.dir), &path(&b.dir), &path(&rel)) {
        Ok(diffs) => rec.events = diffs.iter().map(diff_event).collect(),
        Err(e) => rec.reason = Some(e.to_string()),
    }
    rec
}

fn diff_event(d: &EventDiff) -> DiffEventRecord {
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

/// The `--dry-run` lines of the profile passes: what is recorded and for how long, then one
/// line per series (`target`, `placement`) naming each level's step (`step_id` gives the id
/// of the series' first step at a client count) or when it is decided, then whether perf is
/// ready. `warmup` is the load's warm-up before perf starts.
pub fn describe(
    spec: &ProfileSpec,
    warmup: Duration,
    series: &[(&str, &str)],
    step_id: &dyn Fn(&str, &str, usize) -> String,
) -> String {
    let events: Vec<&str> = spec.events.iter().map(|e| e.stem()).collect();
    let levels: Vec<String> = spec.at.iter().map(Level::to_string).collect();
    let pass_s = warmup.as_secs_f64() + spec.seconds + PERF_START_ALLOWANCE.as_secs_f64();
    let mut out = format!(
        "\nprofile passes after each series' measured steps: at {}; perf records the {} for {} s (events {}); each pass about {:.0} s plus processing\n",
        levels.join(", "),
        spec.target.name(),
        spec.seconds,
        events.join(", "),
        pass_s
    );
    for &(target, placement) in series {
        let steps: Vec<String> = spec
            .at
            .iter()
            .map(|l| match l {
                Level::Clients(n) => format!("profiles/{}/", step_id(target, placement, *n)),
                named => format!("{named} (decided when the series' steps are done)"),
            })
            .collect();
        out.push_str(&format!("  {target} / {placement}: {}\n", steps.join(", ")));
    }
    match super::capture::check_perf() {
        Ok(()) => out.push_str("  perf: ready\n"),
        Err(e) => out.push_str(&format!("  perf: {e}; the run goes on without profiles\n")),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::profiles::PROFILES_FILE;
    use std::io::Write as _;

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
            jvms: vec![],
        };
        let choice = |level: Level| Choice {
            point: PassLoad {
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
