//! The history database: one SQLite file holding every run added to it, so change points can
//! be found across runs on a machine that keeps no run directory (docs/history.md).
//!
//! The schema is versioned with `PRAGMA user_version`; a file of another version is refused,
//! never read wrong. WAL mode and one `BEGIN IMMEDIATE` transaction per run let two processes
//! add at once without losing either (the second waits on the busy timeout).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

/// The schema version this build writes and reads (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// How long an add waits for another process's transaction before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The tables, as docs/history.md shows them (PRAGMA user_version = [`SCHEMA_VERSION`]).
const SCHEMA: &str = include_str!("../../schema/history.sql");
/// What can go wrong with a history file.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    /// SQLite said no (locked past the timeout, not a database, disk full...).
    #[error("history database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The run is in the database already.
    #[error("run {run_id} is already in the history (added as run #{row}); a run is added once")]
    Duplicate {
        /// The run's id (its directory's name).
        run_id: String,
        /// Its row in `runs`.
        row: i64,
    },
    /// The file was written by a newer stairbench, with a schema this one does not know.
    #[error(
        "the history database has schema version {found}, newer than this stairbench's \
         {SCHEMA_VERSION}: it was written by a newer stairbench; use that one (nothing was read \
         or changed)"
    )]
    NewerSchema {
        /// `PRAGMA user_version` of the file.
        found: i64,
    },
    /// The file has an older schema version that no migration leads from.
    #[error(
        "the history database has schema version {found}, older than this stairbench's \
         {SCHEMA_VERSION}, and no migration from it exists (nothing was read or changed)"
    )]
    OlderSchema {
        /// `PRAGMA user_version` of the file.
        found: i64,
    },
    /// The file has a `runs` table but no schema version: made by hand or by another tool.
    #[error(
        "{0} has a `runs` table but no schema version (PRAGMA user_version 0): not written by \
         stairbench, whose histories are version {SCHEMA_VERSION}; refused rather than read wrong"
    )]
    Unversioned(String),
    /// The file holds tables but is not a stairbench history.
    #[error("{0} is an SQLite database but not a stairbench history (it has no `runs` table)")]
    NotHistory(String),
}

/// How a run ended, as the history keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Every step ran and was measured: the run enters change-point detection.
    Ok,
    /// No step was measured.
    Failed,
    /// Interrupted, or some steps failed or were skipped: kept, but left out of detection.
    CutShort,
}

impl RunStatus {
    /// The name stored in `runs.status`.
    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Ok => "ok",
            RunStatus::Failed => "failed",
            RunStatus::CutShort => "cut_short",
        }
    }

    fn parse(s: &str) -> RunStatus {
        match s {
            "ok" => RunStatus::Ok,
            "failed" => RunStatus::Failed,
            _ => RunStatus::CutShort,
        }
    }
}

/// A figure kept per series and load level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Figure {
    /// Throughput, requests/s.
    ThroughputRps,
    /// Mean latency, µs.
    LatencyMeanUs,
    /// Median latency, µs (the repetitions' own medians).
    LatencyP50Us,
    /// 99th percentile latency, µs (the repetitions' own p99s).
    LatencyP99Us,
    /// Server CPU (user + system) per request, µs.
    ServerCpuUsPerReq,
    /// Load generator CPU (user + system) per request, µs.
    ClientCpuUsPerReq,
}

impl Figure {
    /// Every figure, in the order they are printed.
    pub const ALL: [Figure; 6] = [
        Figure::ThroughputRps,
        Figure::LatencyMeanUs,
        Figure::LatencyP50Us,
        Figure::LatencyP99Us,
        Figure::ServerCpuUsPerReq,
        Figure::ClientCpuUsPerReq,
    ];

    /// The name stored in `figures.figure`.
    pub fn name(self) -> &'static str {
        match self {
            Figure::ThroughputRps => "throughput_rps",
            Figure::LatencyMeanUs => "latency_mean_us",
            Figure::LatencyP50Us => "latency_p50_us",
            Figure::LatencyP99Us => "latency_p99_us",
            Figure::ServerCpuUsPerReq => "server_cpu_us_per_req",
            Figure::ClientCpuUsPerReq => "client_cpu_us_per_req",
        }
    }

    /// More is better (throughput); for the others (latency, CPU per request) less is.
    pub fn higher_is_better(self) -> bool {
        self == Figure::ThroughputRps
    }

    fn parse(s: &str) -> Option<Figure> {
        Figure::ALL.into_iter().find(|f| f.name() == s)
    }
}

/// One figure of one series at one load level of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct FigureRow {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients of the level.
    pub clients: usize,
    /// Which figure.
    pub figure: Figure,
    /// Mean over the level's repetitions.
    pub mean: f64,
    /// Sample standard deviation over the repetitions (0 with one).
    pub stdev: f64,
    /// Repetitions it was measured over.
    pub n: usize,
}

/// The diagnosis of one series of a run: the limit it ran into.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitRow {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// The limit's name (`server_cpu`, `client`, ...).
    pub limit: String,
}

/// Where a run ran.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RunHost {
    /// Host name.
    pub host: String,
    /// Online CPUs.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// stairbench's version.
    pub stairbench_version: String,
}

/// One run as the history stores it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run's id: its directory's name (`nginx-20261128-210455`), unique in a history.
    pub run_id: String,
    /// Experiment name.
    pub name: String,
    /// When its first step started, seconds since the Unix epoch: the history's order.
    pub started_unix_s: f64,
    /// How it ended.
    pub status: RunStatus,
    /// Why it is not `ok`.
    pub status_reason: Option<String>,
    /// Where it ran.
    pub host: RunHost,
    /// `--label key=value` given when it was added.
    pub labels: BTreeMap<String, String>,
    /// Its figures, per series and level.
    pub figures: Vec<FigureRow>,
    /// Its diagnoses, per series.
    pub limits: Vec<LimitRow>,
}

/// A run read back from the history (its figures apart).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StoredRun {
    /// Row in `runs`.
    pub row: i64,
    /// The run's id.
    pub run_id: String,
    /// When its first step started, seconds since the Unix epoch.
    pub started_unix_s: f64,
    /// How it ended.
    pub status: RunStatus,
    /// Why it is not `ok`.
    pub status_reason: Option<String>,
    /// Where it ran.
    pub host: RunHost,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
}

/// Identifies one series of one figure across runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    /// Target name.
    pub target: String,
    /// Placement name.
    pub placement: String,
    /// Clients of the level.
    pub clients: usize,
    /// Which figure.
    pub figure: Figure,
}

/// One run's value of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SeriesPoint {
    /// Position of the run in [`History::runs`] (time order).
    pub run: usize,
    /// Mean over the run's repetitions.
    pub mean: f64,
    /// Standard deviation over the repetitions.
    pub stdev: f64,
    /// Repetitions.
    pub n: usize,
}

/// An open history database.
pub struct History {
    conn: Connection,
}

impl History {
    /// Opens `path`, creating it with the current schema when it is new or empty; refuses a
    /// file of another schema version.
    pub fn open(path: &Path) -> Result<History, HistoryError> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // A file to refuse is refused before WAL mode (a change of the file) is set; read in
        // one transaction, so a history another process is creating is seen whole or not.
        check_version(&*conn.transaction()?, path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        init_schema(&mut conn, path)?;
        Ok(History { conn })
    }

    /// Adds one run in one transaction; refuses a run id already present.
    pub fn add(&mut self, run: &RunRecord) -> Result<i64, HistoryError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let existing: Option<i64> = tx
            .query_row(
                "SELECT id FROM runs WHERE run_id = ?1",
                [&run.run_id],
                |r| r.get(0),
            )
            .optional()?;
        if let Some(row) = existing {
            return Err(HistoryError::Duplicate {
                run_id: run.run_id.clone(),
                row,
            });
        }
        let row = insert_run(&tx, run)?;
        insert_children(&tx, row, run)?;
        tx.commit()?;
        Ok(row)
    }

    /// Every run, in time order (first step's start, then order of adding).
    pub fn runs(&self) -> Result<Vec<StoredRun>, HistoryError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, run_id, started_unix_s, status, status_reason, host, cpus, kernel, \
             stairbench_version FROM runs ORDER BY started_unix_s, id",
        )?;
        let mut runs = stmt
            .query_map([], |r| {
                Ok(StoredRun {
                    row: r.get(0)?,
                    run_id: r.get(1)?,
                    started_unix_s: r.get(2)?,
                    status: RunStatus::parse(&r.get::<_, String>(3)?),
                    status_reason: r.get(4)?,
                    host: RunHost {
                        host: r.get(5)?,
                        cpus: r.get::<_, i64>(6)? as usize,
                        kernel: r.get(7)?,
                        stairbench_version: r.get(8)?,
                    },
                    labels: BTreeMap::new(),
                })
            })?
            .collect::<Result<Vec<_>, _>>()?;
        let labels = self.labels()?;
        for run in &mut runs {
            run.labels = labels.get(&run.row).cloned().unwrap_or_default();
        }
        Ok(runs)
    }

    fn labels(&self) -> Result<BTreeMap<i64, BTreeMap<String, String>>, HistoryError> {
        let mut stmt = self.conn.prepare("SELECT run, key, value FROM labels")?;
        let mut out: BTreeMap<i64, BTreeMap<String, String>> = BTreeMap::new();
        let rows = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?)))?;
        for row in rows {
            let (run, k, v) = row?;
            out.entry(run).or_default().insert(k, v);
        }
        Ok(out)
    }

    /// Every series with its points, each point naming its run's position in `runs`.
    pub fn series(
        &self,
        runs: &[StoredRun],
    ) -> Result<BTreeMap<SeriesKey, Vec<SeriesPoint>>, HistoryError> {
        let position: BTreeMap<i64, usize> =
            runs.iter().enumerate().map(|(i, r)| (r.row, i)).collect();
        let mut stmt = self.conn.prepare(
            "SELECT run, target, placement, clients, figure, mean, stdev, n FROM figures",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, String>(4)?,
                SeriesPoint {
                    run: 0,
                    mean: r.get(5)?,
                    stdev: r.get(6)?,
                    n: r.get::<_, i64>(7)? as usize,
                },
            ))
        })?;
        let mut out: BTreeMap<SeriesKey, Vec<SeriesPoint>> = BTreeMap::new();
        for row in rows {
            let (run, target, placement, clients, figure, mut point) = row?;
            let (Some(&pos), Some(figure)) = (position.get(&run), Figure::parse(&figure)) else {
                continue;
            };
            point.run = pos;
            let key = SeriesKey {
                target,
                placement,
                clients: clients as usize,
                figure,
            };
            out.entry(key).or_default().push(point);
        }
        for points in out.values_mut() {
            points.sort_by_key(|p| p.run);
        }
        Ok(out)
    }
}

/// Creates the tables in an empty file, checks the version of one that has them.
fn init_schema(conn: &mut Connection, path: &Path) -> Result<(), HistoryError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if check_version(&tx, path)? {
        tx.execute_batch(SCHEMA)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    }
    tx.commit()?;
    Ok(())
}

/// Whether the file is empty (to be created: true) or a history of this version (false);
/// the reason it is refused otherwise. Version 1 is the first: an older one has no migration.
fn check_version(conn: &Connection, path: &Path) -> Result<bool, HistoryError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0));
    let tables = count("SELECT count(*) FROM sqlite_master WHERE type = 'table'")?;
    let runs = count("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'runs'")?;
    let name = || path.display().to_string();
    match (version, tables) {
        (0, 0) => Ok(true),
        (0, _) if runs > 0 => Err(HistoryError::Unversioned(name())),
        (0, _) => Err(HistoryError::NotHistory(name())),
        (SCHEMA_VERSION, _) => Ok(false),
        (found, _) if found > SCHEMA_VERSION => Err(HistoryError::NewerSchema { found }),
        (found, _) => Err(HistoryError::OlderSchema { found }),
    }
}

fn insert_run(tx: &rusqlite::Transaction, run: &RunRecord) -> Result<i64, HistoryError> {
    let added = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    tx.execute(
        "INSERT INTO runs (run_id, name, started_unix_s, status, status_reason, host, cpus, \
         kernel, stairbench_version, added_unix_s) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            run.run_id,
            run.name,
            run.started_unix_s,
            run.status.name(),
            run.status_reason,
            run.host.host,
            run.host.cpus as i64,
            run.host.kernel,
            run.host.stairbench_version,
            added,
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

fn insert_children(
    tx: &rusqlite::Transaction,
    row: i64,
    run: &RunRecord,
) -> Result<(), HistoryError> {
    let mut label = tx.prepare("INSERT INTO labels (run, key, value) VALUES (?1, ?2, ?3)")?;
    for (k, v) in &run.labels {
        label.execute(params![row, k, v])?;
    }
    let mut figure = tx.prepare(
        "INSERT INTO figures (run, target, placement, clients, figure, mean, stdev, n) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    for f in &run.figures {
        figure.execute(params![
            row,
            f.target,
            f.placement,
            f.clients as i64,
            f.figure.name(),
            f.mean,
            f.stdev,
            f.n as i64
        ])?;
    }
    let mut limit = tx.prepare(
        "INSERT INTO limits (run, target, placement, limit_name) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for l in &run.limits {
        limit.execute(params![row, l.target, l.placement, l.limit])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn record(run_id: &str, t: f64, throughput: f64) -> RunRecord {
        RunRecord {
            run_id: run_id.into(),
            name: "x".into(),
            started_unix_s: t,
            status: RunStatus::Ok,
            status_reason: None,
            host: RunHost::default(),
            labels: BTreeMap::from([("commit".into(), format!("c{t}"))]),
            figures: vec![FigureRow {
                target: "nginx".into(),
                placement: "shared".into(),
                clients: 4,
                figure: Figure::ThroughputRps,
                mean: throughput,
                stdev: 1.0,
                n: 3,
            }],
            limits: vec![],
        }
    }

    #[test]
    fn runs_come_back_in_time_order_with_their_labels_and_figures() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("h.db")).unwrap();
        h.add(&record("b", 20.0, 200.0)).unwrap();
        h.add(&record("a", 10.0, 100.0)).unwrap();
        let runs = h.runs().unwrap();
        assert_eq!(runs[0].run_id, "a");
        assert_eq!(runs[1].labels["commit"], "c20");
        let series = h.series(&runs).unwrap();
        let points = series.values().next().unwrap();
        assert_eq!(points[0].mean, 100.0);
        assert_eq!(points[1].run, 1);
    }

    #[test]
    fn the_same_run_twice_is_refused_and_nothing_is_added() {
        let dir = tempfile::tempdir().unwrap();
        let mut h = History::open(&dir.path().join("h.db")).unwrap();
        h.add(&record("a", 10.0, 100.0)).unwrap();
        let err = h.add(&record("a", 10.0, 100.0)).unwrap_err();
        assert!(err.to_string().contains("already in the history"), "{err}");
        assert_eq!(h.runs().unwrap().len(), 1);
    }

    #[test]
    fn a_file_of_a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        drop(History::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 7).unwrap();
        drop(conn);
        let err = History::open(&path).err().unwrap();
        assert!(
            err.to_string()
                .contains("schema version 7, newer than this stairbench's 1"),
            "{err}"
        );
    }

    /// Wrong answers caught: an older version read as if current, or refused in the words
    /// meant for a newer one ("use the stairbench that wrote it").
    #[test]
    fn a_file_of_an_older_schema_is_refused_as_older() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        drop(History::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", -1).unwrap();
        drop(conn);
        let err = History::open(&path).err().unwrap();
        assert!(
            err.to_string()
                .contains("schema version -1, older than this stairbench's 1"),
            "{err}"
        );
    }

    /// A `runs` table without a version (a hand-made file, or one of a tool before versions):
    /// refused as unversioned, not told it has no `runs` table, and left unchanged.
    #[test]
    fn a_history_like_file_without_a_version_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE runs (id INTEGER PRIMARY KEY, run_id TEXT)")
            .unwrap();
        drop(conn);
        let err = History::open(&path).err().unwrap();
        assert!(
            err.to_string()
                .contains("has a `runs` table but no schema version"),
            "{err}"
        );
        let conn = Connection::open(&path).unwrap();
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 1, "tables were added to a file that was refused");
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "delete", "a refused file was switched to WAL");
    }

    #[test]
    fn another_sqlite_file_is_not_taken_for_a_history() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("other.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE t (x)").unwrap();
        drop(conn);
        let err = History::open(&path).err().unwrap();
        assert!(
            err.to_string().contains("not a stairbench history"),
            "{err}"
        );
    }

    #[test]
    fn concurrent_adds_on_separate_connections_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        drop(History::open(&path).unwrap());
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let path = path.clone();
                std::thread::spawn(move || {
                    let mut h = History::open(&path).unwrap();
                    for i in 0..25 {
                        let t = (w * 100 + i) as f64;
                        h.add(&record(&format!("w{w}-{i}"), t, t)).unwrap();
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let h = History::open(&path).unwrap();
        let runs = h.runs().unwrap();
        assert_eq!(runs.len(), 100);
        assert_eq!(h.series(&runs).unwrap().values().next().unwrap().len(), 100);
    }
}
