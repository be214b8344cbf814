//! One experiment end to end with the real collaborators: the run directory, the target
//! processes, the driver, the observers, the step loop, the notes (the reports are written
//! by the command, after).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use super::plan::Point;
use super::plan::{ClientPlan, Plan};
use super::progress::Progress;
use super::runner::{step_id, RunEnd, RunSummary, Runner};
use crate::fleet::driver::{CommandDriver, Driver, EngineDriver};
use crate::fleet::server::{Launcher, ProcessLauncher};
use crate::fleet::target::TargetPlan;
use crate::observe::step::FullObserver;
use crate::placement::CpuPair;
use crate::placement::{PlacementSource, TopologyPlacements};
use crate::record::rundir::RunDir;

/// Where a run goes.
#[derive(Debug, Clone, Default)]
pub struct Destination {
    /// `--out DIR` (default `results/<name>-<timestamp>`).
    pub out: Option<PathBuf>,
    /// `--resume DIR`: append to this run directory, skipping its finished steps.
    pub resume: Option<PathBuf>,
    /// Lines for the top of notes.txt (the demo's: the load the machine started under).
    pub notes: Vec<String>,
    /// How busy the run's CPUs were just before it (the demo's settle sample): the
    /// environment's busy warning comes from it rather than from the load average.
    pub busy: Option<crate::observe::environment::BusySample>,
}

/// Why an experiment could not run or record its end (its finished steps stay in its
/// directory).
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A split target does not fit the plan.
    #[error(transparent)]
    Fit(#[from] super::split::FitError),
    /// `--resume` names a directory with no steps.jsonl.
    #[error("{} is not a run directory (no steps.jsonl)", .0.display())]
    NotARun(PathBuf),
    /// `--out` already holds a run.
    #[error("{} already holds a run: continue it with --resume {}, or choose another --out", .0.display(), .0.display())]
    AlreadyARun(PathBuf),
    /// The run directory could not be opened, created or written.
    #[error("{doing}: {source}")]
    Dir {
        /// What failed, naming the directory or file.
        doing: String,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The spec names something the run cannot use (its file, line and key).
    #[error(transparent)]
    Spec(#[from] super::spec::SpecError),
    /// The step loop stopped with an error.
    #[error(transparent)]
    Run(#[from] super::runner::RunError),
}

fn dir_error(doing: String) -> impl FnOnce(std::io::Error) -> ExperimentError {
    move |source| ExperimentError::Dir { doing, source }
}

/// A finished (or interrupted) experiment.
#[derive(Debug)]
pub struct Finished {
    /// The run directory.
    pub dir: PathBuf,
    /// The loop's summary.
    pub summary: RunSummary,
}

/// Runs a plan with the real launcher, driver and observers.
pub fn run_plan(
    plan: &Plan,
    dest: &Destination,
    progress: &mut dyn Progress,
    stop: &AtomicBool,
) -> Result<Finished, ExperimentError> {
    crate::process::become_subreaper();
    let local = TopologyPlacements::detect(plan.custom.clone());
    let sessions = connect_hosts(plan, progress);
    let placements = crate::fleet::hosts::session::HostPlacements {
        local: &local,
        sessions: &sessions,
    };
    super::split::check_fit(plan, &placements)?;
    let mut dir = open_dir(plan, dest, &sessions)?;
    let mut driver = run_driver(plan, &sessions)?;
    let mut launcher = host_launcher(plan, dir.path.clone(), &sessions);
    let mut observer = crate::fleet::hosts::observer::HostObserver::new(
        crate::observe::extra::ExtraObserver::new(FullObserver::default(), plan.observe.clone()),
    );
    observer.remote_clients = plan.hosts.remote_clients();
    let mut runner = Runner {
        plan,
        dir: &mut dir,
        launcher: &mut launcher,
        driver: &mut driver,
        observer: &mut observer,
        placements: &placements,
        progress,
        stop,
    };
    let result = runner.run();
    crate::process::reap_orphans();
    let mut summary = result?;
    // A host that could not be set up is in the notes as well as on the console.
    let down =
        (sessions.down.iter()).map(|(name, why)| format!("host {name}: {why}; its steps fail"));
    let notes = dest
        .notes
        .iter()
        .cloned()
        .chain(stop_notes(plan))
        .chain(down);
    summary.findings.splice(0..0, notes);
    finish_dir(&dir, &summary)?;
    Ok(Finished {
        dir: dir.path.clone(),
        summary,
    })
}

/// How targets with their own `stop_signal` or `stop_timeout` are stopped, one line each.
fn stop_notes(plan: &Plan) -> Vec<String> {
    let default = nix::sys::signal::Signal::SIGTERM;
    (plan.targets.iter())
        .filter(|t| t.stop_signal != default || t.stop_grace != super::plan::STOP_GRACE)
        .map(|t| {
            format!(
                "target {:?} is stopped with SIG{} and killed if still running {} later",
                t.name,
                crate::process::signal_name(t.stop_signal),
                super::spec::format_duration(t.stop_grace)
            )
        })
        .collect()
}

/// Connects to the plan's other hosts; what it learns on the way goes to the console.
fn connect_hosts(
    plan: &Plan,
    progress: &mut dyn Progress,
) -> crate::fleet::hosts::session::Sessions {
    let mut notes = Vec::new();
    let sessions = crate::fleet::hosts::session::connect_all(
        &plan.hosts.hosts,
        &plan.stairbench_bin,
        &plan.custom,
        &mut |n| notes.push(n),
    );
    for n in &notes {
        progress.note(n);
    }
    sessions
}

/// The run's driver: the plan's client, split across instances, and across client groups
/// when the plan has them.
fn run_driver(
    plan: &Plan,
    sessions: &crate::fleet::hosts::session::Sessions,
) -> Result<crate::fleet::hosts::groups::GroupDriver, ExperimentError> {
    Ok(crate::fleet::hosts::groups::GroupDriver::new(
        Box::new(crate::fleet::instances::SplitDriver {
            single: make_driver(plan)?,
            make: super::split::driver_factory(&plan.client),
        }),
        group_hosts(plan, sessions),
        match &plan.client {
            ClientPlan::Engine { proto, .. } => proto.clone(),
            ClientPlan::Command { .. } => crate::load::ProtoOptions::default(),
        },
    ))
}

/// The run's launcher: targets here as split processes, the others over ssh.
fn host_launcher<'s>(
    plan: &Plan,
    out_dir: PathBuf,
    sessions: &'s crate::fleet::hosts::session::Sessions,
) -> crate::fleet::hosts::server::HostLauncher<
    's,
    crate::fleet::instances::SplitLauncher<ProcessLauncher>,
> {
    crate::fleet::hosts::server::HostLauncher {
        local: crate::fleet::instances::SplitLauncher {
            inner: ProcessLauncher {
                stairbench_bin: plan.stairbench_bin.clone(),
                out_dir,
            },
        },
        sessions,
        health: Default::default(),
    }
}

/// Where each client group runs.
fn group_hosts(
    plan: &Plan,
    sessions: &crate::fleet::hosts::session::Sessions,
) -> Vec<crate::fleet::hosts::groups::GroupHost> {
    use crate::fleet::hosts::groups::GroupHost;
    plan.hosts
        .client_groups
        .iter()
        .map(|g| match g {
            None => GroupHost::Local,
            Some(h) => match sessions.get(h) {
                Ok(s) => GroupHost::Remote(s),
                Err(why) => GroupHost::Down(h.clone(), why.to_string()),
            },
        })
        .collect()
}

/// This machine's environment, and each host's under `hosts`.
fn environment_json(
    sessions: &crate::fleet::hosts::session::Sessions,
    busy: Option<crate::observe::environment::BusySample>,
) -> String {
    let mut env = crate::observe::environment::environment_with(busy);
    if let serde_json::Value::Object(hosts) = sessions.environment_json() {
        env.hosts = hosts.into_iter().collect();
    }
    // Through a JSON value, whose keys are sorted: environment.json's order.
    serde_json::to_value(env)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_default()
}

fn open_dir(
    plan: &Plan,
    dest: &Destination,
    sessions: &crate::fleet::hosts::session::Sessions,
) -> Result<RunDir, ExperimentError> {
    if let Some(path) = &dest.resume {
        if !path.join("steps.jsonl").exists() {
            return Err(ExperimentError::NotARun(path.clone()));
        }
        return RunDir::open(path.clone())
            .map_err(dir_error(format!("opening {}", path.display())));
    }
    check_out(dest)?;
    let dir =
        RunDir::create(dest.out.as_deref(), &plan.name).map_err(dir_error(match &dest.out {
            Some(out) => format!("cannot create the run directory {}", out.display()),
            None => "cannot create the run directory".to_string(),
        }))?;
    let spec_dir = format!("{}\n", plan.spec.dir.display());
    dir.write_file("spec.toml", &plan.spec.text)
        .and_then(|_| dir.write_file(crate::sweep::spec::SPEC_DIR_FILE, &spec_dir))
        .and_then(|_| {
            dir.write_file(
                "environment.json",
                &environment_json(sessions, dest.busy.clone()),
            )
        })
        .map_err(dir_error(format!("writing into {}", dir.path.display())))?;
    Ok(dir)
}

/// Refuses an `--out` that already holds a run (before anything is started or waited for).
pub fn check_out(dest: &Destination) -> Result<(), ExperimentError> {
    match &dest.out {
        Some(out) if out.join("steps.jsonl").exists() => {
            Err(ExperimentError::AlreadyARun(out.clone()))
        }
        _ => Ok(()),
    }
}

fn make_driver(plan: &Plan) -> Result<Box<dyn Driver>, ExperimentError> {
    Ok(match &plan.client {
        ClientPlan::Engine {
            proto,
            arrivals,
            connect,
        } => Box::new(EngineDriver {
            proto: proto.clone(),
            arrivals: *arrivals,
            connect: connect.clone(),
        }),
        ClientPlan::Command {
            template,
            parser,
            options,
        } => Box::new(CommandDriver {
            template: template.clone(),
            parser: crate::load::external::by_name(parser, options)
                .map_err(|e| plan.spec.error_at(&["client", "parser"], e.to_string()))?,
        }),
    })
}

/// Writes notes.txt (also after an interruption). The reports are the command's to write
/// (`cli::run::write_reports`), so the sweep never imports the report module.
pub fn finish_dir(dir: &RunDir, summary: &RunSummary) -> Result<(), ExperimentError> {
    let mut notes = summary.findings.clone();
    match summary.end {
        RunEnd::Interrupted => {
            notes.push("The run was interrupted; the steps above are those that finished.".into())
        }
        RunEnd::StoppedOnFailure => {
            notes.push("The run stopped at a failed step (on_failure = \"stop\").".into())
        }
        _ => {}
    }
    let write = |name: &str, text: String| {
        dir.write_file(name, &text)
            .map_err(dir_error(format!("writing {name}")))
    };
    write(
        "notes.txt",
        notes.iter().map(|n| format!("{n}\n")).collect(),
    )
}

/// The `--dry-run` text: every step with its cpusets and command, and the estimated time.
pub fn describe(plan: &Plan, placements: &dyn PlacementSource) -> String {
    let mut out = describe_header(plan, placements);
    let skipped = describe_steps(plan, placements, &mut out);
    out.push_str(&super::profiling::describe(plan));
    out.push_str(&describe_estimate(plan, skipped));
    out
}

/// The dry run's first lines: the hosts, a refusal, the size of the experiment, the
/// placements' notes.
fn describe_header(plan: &Plan, placements: &dyn PlacementSource) -> String {
    let mut out = String::new();
    if !plan.hosts.hosts.is_empty() {
        let _ = writeln!(
            out,
            "hosts (not contacted by --dry-run; cpusets below are this machine's): {}",
            plan.hosts
                .hosts
                .values()
                .map(|h| format!("{} = {}", h.name, h.url()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if let Err(why) = super::split::check_fit(plan, placements) {
        let _ = writeln!(out, "refused: {why}");
    }
    let _ = writeln!(
        out,
        "experiment {:?}: {} × {}, {} of {} (at most {})",
        plan.name,
        crate::units::count(plan.targets.len(), "target"),
        crate::units::count(plan.placements.len(), "placement"),
        crate::units::count(plan.planned_steps(), "step"),
        plan.repetitions.describe(),
        crate::units::count(plan.max_steps(), "run")
    );
    if let ClientPlan::Engine {
        arrivals: crate::load::arrivals::Arrivals::Poisson,
        ..
    } = &plan.client
    {
        let _ = writeln!(
            out,
            "arrivals: poisson (seeded exponential gaps at each step's rate)"
        );
    }
    if let ClientPlan::Engine { connect, .. } = &plan.client {
        if let Some(rate) = connect.connect_rate {
            let _ = writeln!(out, "connections: opened at {rate}/s in total");
        }
        if !connect.source_addrs.is_empty() {
            let addrs: Vec<String> = connect.source_addrs.iter().map(|a| a.to_string()).collect();
            let _ = writeln!(out, "connections: from {}", addrs.join(", "));
        }
    }
    for note in stop_notes(plan) {
        let _ = writeln!(out, "{note}");
    }
    if plan.compares_balanced_and_separated() {
        for note in placements.notes() {
            let _ = writeln!(out, "note: {note}");
        }
    }
    out
}

/// Each series' steps with their cpusets and server command; the count of skipped points.
fn describe_steps(plan: &Plan, placements: &dyn PlacementSource, out: &mut String) -> usize {
    let no_sessions = crate::fleet::hosts::session::Sessions::default();
    let launcher = host_launcher(plan, Path::new("<run dir>").to_path_buf(), &no_sessions);
    let mut skipped = 0;
    for target in &plan.targets {
        for placement in &plan.placements {
            let _ = writeln!(out, "\n{} / {placement}:", target.name);
            for point in dry_points(plan) {
                let follow = plan.cpus_follow_clients.then_some(point.clients);
                let id = step_id(&target.name, placement, point, 0);
                match placements.cpus(placement, follow) {
                    Ok(cpus) => {
                        let server_cpus = match target.kind.is_running() {
                            true => "(its own)".to_string(),
                            false => crate::cpuset::format(&cpus.server),
                        };
                        let _ = writeln!(
                            out,
                            "  {id}: server cpus {server_cpus} client cpus {}, {}\n    server: {}",
                            crate::cpuset::format(&cpus.client),
                            plan.repetitions.describe(),
                            launcher.describe(target, &cpus, point.clients)
                        );
                        let _ = writeln!(
                            out,
                            "    client: {}",
                            describe_client(plan, target, point, &cpus)
                        );
                        describe_groups(plan, point, out);
                    }
                    Err(why) => {
                        skipped += 1;
                        let _ = writeln!(out, "  {id}: skipped: {why}");
                    }
                }
            }
        }
    }
    skipped
}

/// What loads the step: the external command as it will run (the port not yet picked), or
/// the built-in engine with its url, connections and threads.
fn describe_client(plan: &Plan, target: &TargetPlan, point: Point, cpus: &CpuPair) -> String {
    let connections = point.clients * plan.connections_per_client;
    let threads = plan
        .client_threads
        .unwrap_or(cpus.client.len())
        .clamp(1, connections.max(1));
    let port = match target.port {
        Some(p) => p.to_string(),
        None => "<free port>".to_string(),
    };
    let url = target.url.replace("{port}", &port);
    let rate = point
        .rate_rps
        .map_or(String::new(), |r| format!(", {r:.0} req/s"));
    match &plan.client {
        ClientPlan::Command { template, .. } => {
            let req = crate::fleet::driver::StepRequest {
                step_id: String::new(),
                url,
                port: 0,
                clients: point.clients,
                connections,
                depth: target.depth,
                message: target.message.clone(),
                threads,
                duration: plan.duration,
                warmup: plan.warmup,
                timeout: plan.timeout,
                rate_rps: point.rate_rps,
                client_cpus: cpus.client.clone(),
                out_dir: Path::new("<run dir>").to_path_buf(),
                instances: Vec::new(),
                group_cpus: Vec::new(),
                group_targets: Vec::new(),
            };
            crate::fleet::driver::client_line(template, &req, &port)
        }
        ClientPlan::Engine { proto, .. } => format!(
            "built-in engine at {url}: {connections} connection(s), {threads} thread(s), depth {}{rate}{}",
            target.depth,
            message_words(
                target
                    .message
                    .as_ref()
                    .map(|m| &m.bytes)
                    .or(proto.body_file.as_ref()),
                target.message.as_ref().and_then(|m| m.stream)
            ),
        ),
    }
}

/// The gRPC message a dry run's step line names: its size, so a wrong file shows, and how
/// many a streaming call sends.
fn message_words(
    message: Option<&std::sync::Arc<[u8]>>,
    stream: Option<crate::load::protocol::grpc::GrpcStream>,
) -> String {
    let size = message.map_or(String::new(), |m| {
        format!(", a {}-byte gRPC message", m.len())
    });
    match stream {
        Some(s) if s.streamed_replies => format!(
            "{size}, {} per call, the reply a stream",
            s.messages_per_call
        ),
        Some(s) => format!("{size}, {} per call", s.messages_per_call),
        None => size,
    }
}

/// A step's client groups and their shares, when the plan has groups.
fn describe_groups(plan: &Plan, point: Point, out: &mut String) {
    let groups = &plan.hosts.client_groups;
    if !groups.is_empty() {
        let connections = point.clients * plan.connections_per_client;
        let step = (point.clients, connections, point.rate_rps);
        let line = crate::fleet::hosts::groups::describe_shares(step, groups);
        let _ = writeln!(out, "    {line}");
    }
}

/// The estimated time over the steps this machine can run (the dry run's, and the run's
/// first line): a skipped point skips all its runs; a rate search's points are counted at
/// their maximum.
fn estimated_total(plan: &Plan, skipped: usize) -> std::time::Duration {
    let runnable = plan.planned_steps().saturating_sub(skipped);
    let series = plan.targets.len() * plan.placements.len();
    plan.time_for(plan.work_for(runnable, series)) + plan.set_up_time()
}

/// The run's first line: the dry run's estimate and what it assumes.
pub fn estimate_line(plan: &Plan, placements: &dyn PlacementSource) -> String {
    let skipped = dry_points(plan).len() * plan.targets.len() * plan.placements.len()
        - runnable_points(plan, placements);
    format!(
        "estimated time: about {}{} (assuming {})",
        show_minutes(estimated_total(plan, skipped)),
        runs_assumed(plan),
        plan.assumptions()
    )
}

/// The points this machine can place (the others are skipped).
fn runnable_points(plan: &Plan, placements: &dyn PlacementSource) -> usize {
    let mut n = 0;
    for _ in &plan.targets {
        for placement in &plan.placements {
            for point in dry_points(plan) {
                let follow = plan.cpus_follow_clients.then_some(point.clients);
                n += usize::from(placements.cpus(placement, follow).is_ok());
            }
        }
    }
    n
}

/// The dry run's estimated time, over the steps this machine can run.
fn describe_estimate(plan: &Plan, skipped: usize) -> String {
    let mut out = String::new();
    let planned = plan.planned_steps();
    let runnable = planned.saturating_sub(skipped);
    let set_up = plan.set_up_time();
    let total = estimated_total(plan, skipped);
    let hosts = if set_up.is_zero() {
        String::new()
    } else {
        format!(" (with about {} s of host set-up)", set_up.as_secs())
    };
    let _ = writeln!(
        out,
        "\nestimated time: about {}{hosts}{}",
        show_minutes(total),
        runs_assumed(plan)
    );
    let _ = writeln!(
        out,
        "  assuming {}; the run's first line and its progress ETA use the same model",
        plan.assumptions()
    );
    if skipped > 0 {
        let _ = writeln!(
            out,
            "{skipped} step(s) are skipped on this machine; {runnable} of {planned} can run"
        );
    }
    out
}

/// The estimate's total as `1m08s` (always with minutes, as the dry run has always said).
fn show_minutes(total: std::time::Duration) -> String {
    let secs = total.as_secs_f64().round() as u64;
    format!("{}m{:02}s", secs / 60, secs % 60)
}

/// What the estimate assumed of `auto` repetitions (they stop when the throughput settles).
fn runs_assumed(plan: &Plan) -> String {
    match plan.repetitions {
        crate::sweep::spec::Repetitions::Auto => format!(
            " ({} runs a step assumed; at most {} each: up to {})",
            plan.expected_runs(),
            plan.repetitions.max_runs(),
            show_minutes(
                plan.time_for(super::plan::estimate::Work {
                    runs: plan.max_steps() as f64,
                    server_starts: plan.targets.len() * plan.placements.len(),
                    profile_passes: plan.targets.len()
                        * plan.placements.len()
                        * plan.profile_passes().0,
                }) + plan.set_up_time()
            )
        ),
        _ => String::new(),
    }
}

fn dry_points(plan: &Plan) -> Vec<Point> {
    use super::plan::Series;
    match &plan.series {
        Series::Clients(c) => c
            .iter()
            .map(|&clients| Point {
                clients,
                rate_rps: None,
            })
            .collect(),
        Series::Rates { rates, clients } => rates
            .iter()
            .map(|&r| Point {
                clients: *clients,
                rate_rps: Some(r),
            })
            .collect(),
        Series::Find {
            lo, hi, clients, ..
        } => vec![
            Point {
                clients: *clients,
                rate_rps: Some(*lo),
            },
            Point {
                clients: *clients,
                rate_rps: Some(*hi),
            },
        ],
    }
}
