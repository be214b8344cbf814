//! A run directory read once into one typed value, [`RunData`]: the steps, the spec, the
//! environment, the notes, the profiles, each step's latency histogram (decoded once) and
//! each step's per-core busy figures. The analysis is a pure function of it and every
//! exporter renders from it; nothing downstream opens a file of the run directory again.

use std::collections::BTreeMap;
use std::path::Path;

use hdrhistogram::Histogram;

use crate::record::environment::Environment;
use crate::record::hlog::read_hlog_or_empty;
use crate::record::profiles::{read_lines, ProfileLine};
use crate::record::steps::{read_steps, StepResult, StepStatus, StepsError};

/// Everything a report reads from a run directory, read once.
#[derive(Debug, Clone, Default)]
pub struct RunData {
    /// Experiment name: the spec's `name`, else the directory's name.
    pub name: String,
    /// The steps, in the order they ran.
    pub steps: Vec<StepResult>,
    /// spec.toml, when present and parsed.
    pub spec: Option<RunSpec>,
    /// environment.json, when present and parsed.
    pub environment: Option<Environment>,
    /// notes.txt's non-empty lines: remarks of the run (rate searches, early stops,
    /// interruption).
    pub notes: Vec<String>,
    /// Files that exist but could not be read or parsed, one sentence each (the analysis
    /// carries them into its notes).
    pub unreadable: Vec<String>,
    /// profiles.jsonl: the profile passes, differential graphs and levels not profiled.
    pub profiles: Vec<ProfileLine>,
    /// hist/<step>.hlog of each ok step that has one, by step id.
    pub histograms: Histograms,
    /// The per-core busy figures of intervals/<step>.csv of each ok step that has some, by
    /// step id.
    pub core_busy: BTreeMap<String, CoreBusy>,
}

/// Each step's hist/<step>.hlog by step id: the log's histograms added (nanoseconds; an empty
/// log is an empty histogram), or why it could not be decoded.
pub type Histograms = BTreeMap<String, Result<Histogram<u64>, String>>;

/// spec.toml as the reports read it: the few keys the analysis and the pages use, typed,
/// and the whole table as written.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    /// `name`.
    pub name: Option<String>,
    /// `description`: free text shown under the title.
    pub description: Option<String>,
    /// `repetitions = "auto"`.
    pub repetitions_auto: bool,
    /// `depth`: requests in flight per connection, when set.
    pub depth: Option<i64>,
    /// `connections_per_client`, when set.
    pub connections_per_client: Option<i64>,
    /// `[[targets]]`, in the spec's order.
    pub targets: Vec<SpecTarget>,
    /// `[report] heat_map`: the selector of the step whose cores the page shows.
    pub heat_map: Option<String>,
    /// `duration`, `warmup`, `repetitions`, `restart` as written, for the conditions table.
    pub settings: Vec<(String, String)>,
    /// The whole spec, untyped on purpose: `[[comparisons]]` and `[[thresholds]]` are parsed
    /// from it by `analyze`'s own typed readers (the spec's full type lives in `sweep`, a layer
    /// above this one).
    pub raw: toml::Table,
}

/// One `[[targets]]` entry, the keys the reports read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpecTarget {
    /// `name`.
    pub name: String,
    /// `depth`, when the target sets its own.
    pub depth: Option<i64>,
    /// `builtin`: the built-in server's command line, when the target is one.
    pub builtin: Option<String>,
    /// `command` as TOML text, when the target has one.
    pub command: Option<String>,
}

impl SpecTarget {
    /// Whether the server's threads follow its cpuset: a built-in server given no
    /// `--threads`, or a command using `{threads}`.
    pub fn threads_follow_cpuset(&self) -> bool {
        if let Some(b) = &self.builtin {
            return !b.split_whitespace().any(|w| w == "--threads");
        }
        self.command
            .as_deref()
            .is_some_and(|c| c.contains("{threads}"))
    }
}

impl RunSpec {
    /// The spec's typed keys read from its table.
    pub fn from_table(raw: toml::Table) -> RunSpec {
        let text = |t: &toml::Table, k: &str| t.get(k).and_then(|v| v.as_str()).map(String::from);
        let int = |t: &toml::Table, k: &str| t.get(k).and_then(|v| v.as_integer());
        let targets = raw
            .get("targets")
            .and_then(|t| t.as_array())
            .into_iter()
            .flatten()
            .filter_map(|t| t.as_table())
            .map(|t| SpecTarget {
                name: t.get("name").map(toml_text).unwrap_or_default(),
                depth: int(t, "depth"),
                builtin: text(t, "builtin"),
                command: t.get("command").map(|c| c.to_string()),
            })
            .collect();
        let settings = ["duration", "warmup", "repetitions", "restart"]
            .into_iter()
            .filter_map(|k| Some((k.to_string(), toml_text(raw.get(k)?))))
            .collect();
        RunSpec {
            name: text(&raw, "name"),
            description: text(&raw, "description"),
            repetitions_auto: text(&raw, "repetitions").as_deref() == Some("auto"),
            depth: int(&raw, "depth"),
            connections_per_client: int(&raw, "connections_per_client"),
            targets,
            heat_map: raw
                .get("report")
                .and_then(|r| r.get("heat_map"))
                .and_then(|h| h.as_str())
                .map(String::from),
            settings,
            raw,
        }
    }

    /// The target named `name`.
    pub fn target(&self, name: &str) -> Option<&SpecTarget> {
        self.targets.iter().find(|t| t.name == name)
    }
}

/// A TOML value as a reader writes it: a string without its quotes.
fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Whose cores an intervals CSV's busy figures describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    /// The `server_per_core_busy` column: the server's cpuset.
    Server,
    /// The engine's `per_core_busy` column: the load generator's threads (older run
    /// directories have no server column).
    Generator,
}

/// Busy % per core over a step's measured seconds (warm-up lines left out).
#[derive(Debug, Clone, PartialEq)]
pub struct CoreBusy {
    /// Whose cores the figures are.
    pub whose: Whose,
    /// End of each interval, seconds into the measured window.
    pub seconds: Vec<f64>,
    /// busy_pct[interval][core], percent.
    pub busy_pct: Vec<Vec<f64>>,
}

/// Why a run directory could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// steps.jsonl is missing or does not parse (the error names the file).
    #[error(transparent)]
    Steps(#[from] StepsError),
}

impl RunData {
    /// Reads a run directory: steps.jsonl must be there; every other file is optional, and
    /// one that exists but does not parse is named in `unreadable`.
    pub fn read(dir: &Path) -> Result<RunData, ReadError> {
        let steps = read_steps(&dir.join("steps.jsonl"))?;
        let mut unreadable = Vec::new();
        let spec = read_spec(dir, &mut unreadable);
        let environment = read_environment(dir, &mut unreadable);
        let ok: Vec<&StepResult> = steps
            .iter()
            .filter(|s| s.status == StepStatus::Ok && s.load.is_some())
            .collect();
        let histograms = ok
            .iter()
            .filter_map(|s| {
                let path = dir.join("hist").join(format!("{}.hlog", s.id));
                path.exists().then(|| {
                    let h = read_hlog_or_empty(&path).map_err(|e| e.to_string());
                    (s.id.clone(), h)
                })
            })
            .collect();
        let core_busy = ok
            .iter()
            .filter_map(|s| {
                let path = dir.join("intervals").join(format!("{}.csv", s.id));
                let text = std::fs::read_to_string(path).ok()?;
                Some((s.id.clone(), read_busy_csv(&text)?))
            })
            .collect();
        let name = spec
            .as_ref()
            .and_then(|s| s.name.clone())
            .unwrap_or_else(|| dir_name(dir));
        Ok(RunData {
            name,
            steps,
            spec,
            environment,
            notes: read_notes(dir),
            unreadable,
            profiles: read_lines(dir),
            histograms,
            core_busy,
        })
    }

    /// A run of these steps alone (no spec, environment or raw files): what a test or a
    /// planner analysing steps in memory has.
    pub fn from_steps(steps: Vec<StepResult>) -> RunData {
        RunData {
            steps,
            ..RunData::default()
        }
    }
}

fn dir_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "stairbench run".into())
}

fn read_spec(dir: &Path, unreadable: &mut Vec<String>) -> Option<RunSpec> {
    read_spec_file(dir)
        .map_err(|e| {
            unreadable.push(format!(
                "spec.toml does not parse, comparisons skipped: {e}"
            ))
        })
        .ok()?
}

fn read_environment(dir: &Path, unreadable: &mut Vec<String>) -> Option<Environment> {
    read_environment_file(dir)
        .map_err(|e| unreadable.push(format!("environment.json does not parse: {e}")))
        .ok()?
}

/// A run directory's spec.toml: None when it cannot be read (absent), Err when it does not
/// parse as TOML.
pub fn read_spec_file(dir: &Path) -> Result<Option<RunSpec>, toml::de::Error> {
    let Ok(text) = std::fs::read_to_string(dir.join("spec.toml")) else {
        return Ok(None);
    };
    Ok(Some(RunSpec::from_table(text.parse::<toml::Table>()?)))
}

/// A run directory's environment.json: None when it cannot be read (absent), Err when it
/// does not parse as an [`Environment`].
pub fn read_environment_file(dir: &Path) -> Result<Option<Environment>, serde_json::Error> {
    let Ok(text) = std::fs::read_to_string(dir.join("environment.json")) else {
        return Ok(None);
    };
    serde_json::from_str(&text).map(Some)
}

fn read_notes(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("notes.txt"))
        .map(|t| {
            t.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The busy figures of an intervals CSV: the server's cores when the runner sampled them,
/// else the generator's threads; None when neither column has a figure.
pub fn read_busy_csv(text: &str) -> Option<CoreBusy> {
    let header: Vec<&str> = text.lines().next()?.split(',').collect();
    let find = |name: &str| header.iter().position(|h| *h == name);
    [
        ("server_per_core_busy", Whose::Server),
        ("per_core_busy", Whose::Generator),
    ]
    .into_iter()
    .filter_map(|(name, whose)| {
        let (seconds, busy_pct) = busy_column(text, find(name)?);
        (!busy_pct.is_empty()).then_some(CoreBusy {
            whose,
            seconds,
            busy_pct,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_csv_prefers_the_server_column_and_skips_rows_without_figures() {
        let header = "elapsed_s,inflight,ops_per_s,mb_per_s,mean_latency_ms,errors,per_core_busy,server_per_core_busy,client_per_core_busy\n";
        let runner = format!("{header}0.000,1,5,0,0,0,9,,\n1.000,1,5,0,0,0,10,80.0 90.0,5.0\n1.500,,,,,,,70.0 60.0,4.0\n2.000,1,5,0,0,0,11,,\n");
        let busy = read_busy_csv(&runner).unwrap();
        assert_eq!(busy.whose, Whose::Server);
        assert_eq!(busy.seconds, [1.0, 1.5]);
        assert_eq!(busy.busy_pct, [vec![80.0, 90.0], vec![70.0, 60.0]]);
        // No server figures at all (an older run directory's layout): the generator's threads.
        let older = format!("{header}1.000,1,5,0,0,0,10 20,,\n");
        let busy = read_busy_csv(&older).unwrap();
        assert_eq!(
            (busy.whose, busy.busy_pct),
            (Whose::Generator, vec![vec![10.0, 20.0]])
        );
    }

    #[test]
    fn spec_keys_are_typed_and_threads_follow_the_cpuset_unless_fixed() {
        let raw: toml::Table = "name = \"n\"\nrepetitions = \"auto\"\ndepth = 4\nduration = \"2s\"\n[report]\nheat_map = \"a@2\"\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr --arch pool\"\ndepth = 8\n[[targets]]\nname = \"b\"\nbuiltin = \"msgr --threads 2\"\n[[targets]]\nname = \"c\"\ncommand = [\"srv\", \"-t\", \"{threads}\"]\n"
            .parse()
            .unwrap();
        let spec = RunSpec::from_table(raw);
        assert_eq!(spec.name.as_deref(), Some("n"));
        assert!(spec.repetitions_auto);
        assert_eq!(
            (spec.depth, spec.target("a").unwrap().depth),
            (Some(4), Some(8))
        );
        assert_eq!(spec.heat_map.as_deref(), Some("a@2"));
        let settings =
            [("duration", "2s"), ("repetitions", "auto")].map(|(k, v)| (k.into(), v.into()));
        assert_eq!(spec.settings, settings);
        let follows: Vec<bool> = spec
            .targets
            .iter()
            .map(|t| t.threads_follow_cpuset())
            .collect();
        assert_eq!(follows, [true, false, true]);
    }

    #[test]
    fn a_run_directory_is_read_once_with_what_does_not_parse_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = StepResult::empty("a.p.c1.r0".into(), "a", "p", 1, 0);
        s.status = StepStatus::Ok;
        s.load = Some(crate::record::load::LoadReport::default());
        let line = serde_json::to_string(&s.to_json()).unwrap();
        std::fs::write(dir.path().join("steps.jsonl"), line + "\n").unwrap();
        std::fs::write(dir.path().join("spec.toml"), "name = [").unwrap();
        std::fs::write(dir.path().join("environment.json"), "{\"cpus\": 4, \"governors\": {\"0\": \"powersave\", \"1\": \"performance\", \"2\": \"powersave\"}}").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "one\n\ntwo\n").unwrap();
        std::fs::create_dir(dir.path().join("hist")).unwrap();
        std::fs::write(dir.path().join("hist/a.p.c1.r0.hlog"), "garbage").unwrap();
        let run = RunData::read(dir.path()).unwrap();
        assert_eq!(run.steps.len(), 1);
        assert!(run.spec.is_none());
        assert!(
            run.unreadable[0].starts_with("spec.toml does not parse"),
            "{:?}",
            run.unreadable
        );
        let env = run.environment.unwrap();
        assert_eq!(env.cpus, 4);
        assert_eq!(
            env.governors_text().as_deref(),
            Some("performance, powersave")
        );
        assert_eq!(run.notes, ["one", "two"]);
        assert!(run.histograms["a.p.c1.r0"].is_err());
        // The name falls back to the directory's when the spec gives none.
        assert_eq!(run.name, dir.path().file_name().unwrap().to_string_lossy());
    }
}
