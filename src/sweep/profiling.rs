//! Profiles inside runs: a spec's `[profile]` section and, after each series' measured steps,
//! one extra pass per chosen load level with `perf record` on the target's processes.
//!
//! The pass is separate from the measured step so the profiler's cost does not distort the
//! figures the report plots; its own throughput is kept beside the step's so that cost is
//! visible. Every pass (and every level not profiled, with why) is a line of
//! `profiles.jsonl`; a level's files are in `profiles/<step>/`, the differential graphs
//! between the busy and the saturated level in `profiles/diff-<a>-vs-<b>/`.
//!
//! Here: the section read from the spec, the analysis handed to the planning as plain data,
//! and the pass run within the runner (server, load driver, perf). Which levels, whose
//! processes, the records and the diffs are planned in `profile::passes`.

use std::time::Duration;

use super::plan::profile::section;
use super::plan::Point;
use super::plan::{ClientPlan, Plan, TargetPlan};
use super::runner::{step_id, RunSummary, Runner};
use crate::fleet::driver::StepRequest;
use crate::fleet::server::Server;
use crate::placement::CpuPair;
use crate::profile::passes::{
    choose, fill_record, new_record, CaptureResult, Choice, Log, MeasuredLevel, PassError,
    PassLoad, ProfileSpec, SeriesLevels, Whose, PERF_START_ALLOWANCE,
};
use crate::record::load::{IntervalLine, IntervalSink};
use crate::record::profiles::{PassRecord, ProfileLine};
use crate::record::steps::StepResult;

/// What choosing levels needs of the series' analysis: its measured levels (named by their
/// first step) and its busy and saturation points; None when the series has no measured step.
fn series_levels(steps: &[StepResult], target: &str, placement: &str) -> Option<SeriesLevels> {
    let analysis = crate::analyze::run::analyze_steps(steps);
    let s = analysis
        .series
        .into_iter()
        .find(|s| s.target == target && s.placement == placement)?;
    let knee = s.knee.as_ref();
    let points = s.points.iter().map(|p| {
        let point = Point {
            clients: p.clients,
            rate_rps: p.rate_rps,
        };
        MeasuredLevel {
            load: PassLoad {
                clients: p.clients,
                rate_rps: p.rate_rps,
            },
            step: step_id(target, placement, point, 0),
            throughput_rps: p.throughput_rps.mean,
        }
    });
    Some(SeriesLevels {
        points: points.collect(),
        busy: knee.and_then(|k| k.busy),
        saturation: knee.map(|k| k.saturation),
    })
}

/// Receives the pass's per-second lines and keeps nothing (the pass's figures are its report).
struct Discard;

impl IntervalSink for Discard {
    fn interval(&mut self, _: &IntervalLine, _: &hdrhistogram::Histogram<u64>) {}
}

/// Why a series' profiles could not be recorded (the run stops: its directory is unusable).
#[derive(Debug, thiserror::Error)]
pub enum ProfilingError {
    /// `profiles.jsonl` could not be written.
    #[error(transparent)]
    Append(#[from] crate::record::profiles::AppendError),
    /// `steps.jsonl` could not be read back.
    #[error(transparent)]
    Steps(#[from] crate::record::steps::StepsError),
}

/// Why one profile pass gave no profile (its record's reason).
#[derive(Debug, thiserror::Error)]
enum PassFailure {
    /// The placement gives no cpusets at this level.
    #[error(transparent)]
    Cpus(#[from] crate::placement::source::CpusError),
    /// The server could not be started for the pass.
    #[error(transparent)]
    Launch(#[from] crate::fleet::error::LaunchError),
    /// The pass's load failed.
    #[error(transparent)]
    Load(#[from] crate::fleet::error::StepError),
    /// No server is running to profile.
    #[error("no server")]
    NoServer,
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
    ) -> Result<(), ProfilingError> {
        let Some(spec) = section(&self.plan.spec).ok().flatten() else {
            return Ok(());
        };
        let log = Log::open(&self.dir.path, &target.name, placement);
        if let Err(e) = crate::profile::capture::check_perf() {
            let note = format!("{} / {placement}: no profile: {e}", target.name);
            self.progress.note(&note);
            summary.findings.push(note);
            return Ok(log.missing(None, e.to_string())?);
        }
        let steps: Vec<StepResult> = self
            .dir
            .steps()?
            .into_iter()
            .filter(|s| s.target == target.name && s.placement == placement)
            .collect();
        let levels = series_levels(&steps, &target.name, placement);
        let (choices, absent) = choose(&spec, levels.as_ref(), &target.name, placement);
        for m in absent {
            log.append(&ProfileLine::Missing(m))?;
        }
        let mut passes = Vec::new();
        for choice in &choices {
            if self.stop.load(std::sync::atomic::Ordering::Relaxed) {
                summary.end = super::runner::RunEnd::Interrupted;
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
        Ok(log.diff(&spec, &target.name, &passes)?)
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
        let mut rec = new_record(spec, &target.name, placement, choice);
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
            .map_err(PassFailure::from)
            .and_then(|cpus| {
                self.live_server(target, &cpus, choice.point.clients, server, server_cpus)?;
                Ok(cpus)
            })
            .and_then(|cpus| {
                let srv = server.as_mut().ok_or(PassFailure::NoServer)?;
                self.pass_with_capture(spec, target, choice, &cpus, srv.as_mut(), &rec.dir)
            });
        match outcome {
            Ok((load, capture)) => fill_record(&mut rec, load, capture),
            Err(why) => rec.reason = Some(why.to_string()),
        }
        for advice in rec.jvms.iter().flat_map(|j| &j.advice) {
            self.progress
                .note(&format!("{} / {placement}: {advice}", target.name));
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
    ) -> Result<(), PassFailure> {
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
    ) -> Result<(crate::record::load::LoadReport, CaptureResult), PassFailure> {
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
                Ok(crate::profile::capture(
                    &pids,
                    spec.seconds,
                    &spec.events,
                    &out_dir,
                )?)
            });
            let load = driver.run_step(&req, &mut Discard, stop);
            let capture = recorder.join().unwrap_or(Err(PassError::Panicked));
            (load, capture)
        });
        Ok((load?.report, capture))
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
            message: target.message.clone(),
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
            group_targets: Vec::new(),
        }
    }
}

/// The `--dry-run` lines of the profile passes (empty without a `[profile]` section).
pub fn describe(plan: &Plan) -> String {
    let Some(spec) = section(&plan.spec).ok().flatten() else {
        return String::new();
    };
    let mut series = Vec::new();
    for target in &plan.targets {
        for placement in &plan.placements {
            series.push((target.name.as_str(), placement.as_str()));
        }
    }
    let first_step = |target: &str, placement: &str, clients: usize| {
        let point = Point {
            clients,
            rate_rps: None,
        };
        step_id(target, placement, point, 0)
    };
    crate::profile::passes::describe(&spec, plan.warmup, &series, &first_step)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::passes::Level;
    use crate::record::profiles::{Event, ProfileTarget};
    use crate::record::steps::StepStatus;
    use crate::sweep::plan::profile::check;
    use crate::sweep::plan::Series;
    use crate::sweep::spec::{SpecError, SpecFile};
    use std::path::Path;

    fn spec_file(profile: &str) -> Result<SpecFile, SpecError> {
        let text = format!(
            "name = \"x\"\nclients = [1, 2, 4]\n[[targets]]\nname = \"a\"\nbuiltin = \"msgr\"\n[profile]\n{profile}"
        );
        SpecFile::parse(Path::new("s.toml"), &text)
    }

    fn checked(profile: &str) -> Result<Option<ProfileSpec>, SpecError> {
        let spec = spec_file(profile)?;
        check(&spec, &Series::Clients(vec![1, 2, 4]))?;
        section(&spec)
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
        let err = checked("at = [\"busy\", \"bussy\"]\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("s.toml:7:15: profile.at[1]:"), "{err}");
        assert!(err.contains("expected \"busy\", \"saturated\""), "{err}");
        let err = checked("at = [1, 8]\n").unwrap_err().to_string();
        assert!(err.starts_with("s.toml:7:10: profile.at[1]:"), "{err}");
        assert!(err.contains("not a step of the series"), "{err}");
        let err = checked("at = [1]\nseconds = 0\n").unwrap_err().to_string();
        assert!(err.starts_with("s.toml:8:11: profile.seconds:"), "{err}");
        let err = checked("at = [1]\ntarget = \"servr\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("s.toml:8:10: profile.target:"), "{err}");
        let err = checked("at = []\n").unwrap_err().to_string();
        assert!(err.contains("profile.at: no level"), "{err}");
        let err = checked("at = [1]\nevnts = []\n").unwrap_err().to_string();
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
        let obs = crate::record::observed::Observation {
            server_cpus_busy_pct: Some(cpu_pct),
            ..Default::default()
        };
        s.server = Some(obs.into());
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
        let levels = series_levels(&steps, "a", "p");
        let (choices, missing) = choose(&spec, levels.as_ref(), "a", "p");
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
        let levels = series_levels(&steps, "a", "p");
        let (choices, missing) = choose(&spec, levels.as_ref(), "a", "p");
        assert_eq!(choices.len(), 1);
        assert_eq!(missing[0].level.as_deref(), Some("busy"));
        assert!(
            missing[0].reason.contains("saturates at its first step"),
            "{missing:?}"
        );
    }
}
