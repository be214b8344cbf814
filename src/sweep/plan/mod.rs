//! A spec checked and resolved into what the step loop runs: targets with their launch
//! recipes, placements, the series of step points, the client, and the policies.

pub mod arrivals;
pub mod connect;
pub mod estimate;
pub mod hosts;
mod message;
pub mod profile;
pub mod ranks;
pub mod running;
pub mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use regex::Regex;

pub use crate::fleet::target::{TargetKind, TargetPlan, STOP_GRACE};

use super::spec::{OnFailure, Repetitions, Restart, SpecError, SpecFile, StopWhen};
use crate::load::{Distribution, ProtoOptions};
use crate::observe::extra::ObserveEntry;
use crate::observe::metrics::MetricsPlan;
use crate::placement::CustomTable;

/// A point of a series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Clients.
    pub clients: usize,
    /// Open-loop rate, requests/s.
    pub rate_rps: Option<f64>,
}

/// A point as a sentence names it: `16 clients` or `4000 requests/s`.
pub fn point_label(p: Point) -> String {
    match p.rate_rps {
        Some(r) => format!("{r:.0} requests/s"),
        None => format!("{} clients", p.clients),
    }
}

/// The note of a series stopped by `stop_when = "saturated"`: the flat stretch, then exactly
/// the points left out (or that none were).
pub fn saturation_note(from: Point, at: Point, skipped: &[Point]) -> String {
    let stretch = format!(
        "stop_when = \"saturated\": from {} to {} throughput grew under 5% per step while latency grew",
        point_label(from),
        point_label(at)
    );
    if skipped.is_empty() {
        return format!("{stretch}; that was the last step of the series, none skipped");
    }
    let counts: Vec<String> = skipped
        .iter()
        .map(|p| match p.rate_rps {
            Some(r) => format!("{r:.0}"),
            None => p.clients.to_string(),
        })
        .collect();
    let unit = match skipped[0].rate_rps {
        Some(_) => "requests/s",
        None => "clients",
    };
    format!("{stretch}; skipped: {} {unit}", counts.join(", "))
}

/// The generator.
pub enum ClientPlan {
    /// The built-in engine.
    Engine {
        /// Protocol options.
        proto: ProtoOptions,
        /// How open-loop requests are spaced.
        arrivals: crate::load::arrivals::Arrivals,
        /// How connections are opened (source addresses, pacing).
        connect: crate::load::sources::ConnectOptions,
    },
    /// An external command and the name of its parser.
    Command {
        /// Template.
        template: String,
        /// Parser name.
        parser: String,
        /// Parser options.
        options: toml::Table,
    },
}

/// The points of a series.
#[derive(Debug, Clone, PartialEq)]
pub enum Series {
    /// Closed loop, by client count.
    Clients(Vec<usize>),
    /// Open loop at these rates, with a fixed client count.
    Rates {
        /// Rates, requests/s.
        rates: Vec<f64>,
        /// Clients at every rate.
        clients: usize,
    },
    /// Bisection for the highest rate whose p99 stays under `p99_ms`.
    Find {
        /// Lowest rate tried.
        lo: f64,
        /// Highest rate tried.
        hi: f64,
        /// Latency target, ms.
        p99_ms: f64,
        /// Rates tried at most.
        max_steps: usize,
        /// Clients at every rate.
        clients: usize,
    },
}

impl Series {
    /// Points tried at most per (target, placement).
    pub fn max_points(&self) -> usize {
        match self {
            Series::Clients(c) => c.len(),
            Series::Rates { rates, .. } => rates.len(),
            Series::Find { max_steps, .. } => *max_steps,
        }
    }
}

/// A validated experiment.
pub struct Plan {
    /// The spec as read.
    pub spec: SpecFile,
    /// Experiment name.
    pub name: String,
    /// The stairbench binary that runs built-in servers.
    pub stairbench_bin: PathBuf,
    /// Servers under test.
    pub targets: Vec<TargetPlan>,
    /// Placement names, in order.
    pub placements: Vec<String>,
    /// Custom cpuset tables by placement name.
    pub custom: BTreeMap<String, CustomTable>,
    /// The staircase.
    pub series: Series,
    /// Runs per point: fixed, or `auto` (until the throughput settles, at most 5).
    pub repetitions: Repetitions,
    /// Runs a step is expected to take under `repetitions = "auto"` before any has run (the
    /// time model's guess; the demo sets it from how busy its CPUs are).
    pub auto_runs: f64,
    /// Measured window of a step.
    pub duration: Duration,
    /// Discarded lead-in of a step.
    pub warmup: Duration,
    /// Pause after a step.
    pub cooldown: Duration,
    /// Requests in flight per connection.
    pub depth: usize,
    /// Connections per client.
    pub connections_per_client: usize,
    /// Cpusets grow with the client count.
    pub cpus_follow_clients: bool,
    /// Generator threads (None: derived per step).
    pub client_threads: Option<usize>,
    /// Request timeout.
    pub timeout: Duration,
    /// The generator.
    pub client: ClientPlan,
    /// What a failure does.
    pub on_failure: OnFailure,
    /// Largest share of failed requests of an `ok` step (errors / (requests + errors)).
    pub max_error_ratio: f64,
    /// Other processes' share (percent) of the server's or the client's CPUs from which a
    /// step is disturbed.
    pub disturbed_pct: f64,
    /// A disturbed step stays `ok` (marked) and in the analysis (`run --keep-disturbed`).
    pub keep_disturbed: bool,
    /// Early stop of a series.
    pub stop_when: Option<StopWhen>,
    /// Server restarts.
    pub restart: Restart,
    /// Further processes to observe.
    pub observe: Vec<ObserveEntry>,
    /// Other hosts and the client groups' hosts.
    pub hosts: hosts::HostPlan,
    /// The spec's `[[thresholds]]`, checked against its targets, placements and levels.
    pub thresholds: Vec<crate::analyze::thresholds::Threshold>,
}

/// The line a built-in server prints once it listens; group 1 is the port.
const LISTENING: &str = r"^listening on \S+:(\d+)";

/// Known built-in server kinds (the first word of `builtin`).
pub const BUILTIN_SERVERS: &[&str] = &["msgr", "shmkv", "kvd"];

impl Plan {
    /// Validates a spec; `stairbench_bin` is the binary for built-in servers.
    pub fn new(spec: SpecFile, stairbench_bin: PathBuf) -> Result<Plan, SpecError> {
        let s = spec.spec.clone();
        let series = series(&spec)?;
        profile::check(&spec, &series)?;
        check_sizes(&spec)?;
        let mut targets = Vec::new();
        for (i, t) in s.targets.iter().enumerate() {
            targets.push(target(&spec, i, t)?);
        }
        let custom = custom_tables(&spec)?;
        check_placements(&spec, &custom)?;
        validate::comparisons(&spec, &series)?;
        validate::report(&spec, &series)?;
        validate::thresholds(&spec, &series)?;
        let client = client(&spec)?;
        let hosts = hosts::plan_hosts(&spec, &spec_dir(&spec), &targets)?;
        let observe = observe_entries(&spec)?;
        Ok(Plan {
            name: s.name.clone(),
            stairbench_bin,
            targets,
            placements: s.placements.clone(),
            custom,
            series,
            repetitions: s.repetitions,
            auto_runs: estimate::AUTO_EXPECTED_RUNS,
            duration: s.duration.0,
            warmup: s.warmup.0,
            cooldown: s.cooldown.0,
            depth: s.depth,
            connections_per_client: s.connections_per_client,
            cpus_follow_clients: s.cpus_follow_clients,
            client_threads: s.client.threads,
            timeout: s.client.timeout.map_or(Duration::from_secs(10), |d| d.0),
            client,
            on_failure: s.on_failure,
            max_error_ratio: s.max_error_ratio,
            disturbed_pct: s.disturbed_pct,
            keep_disturbed: false,
            stop_when: s.stop_when,
            restart: s.restart,
            observe,
            hosts,
            thresholds: s.thresholds.clone(),
            spec,
        })
    }

    /// Keeps one level for long study: one client count, one repetition, a long window.
    pub fn hold(&mut self, clients: usize, duration: Duration) {
        self.series = match &self.series {
            // An open-loop series stays open loop: held at its last (highest) rate.
            Series::Rates { rates, .. } => Series::Rates {
                rates: rates.last().copied().into_iter().collect(),
                clients,
            },
            _ => Series::Clients(vec![clients]),
        };
        self.repetitions = Repetitions::Fixed(1);
        self.duration = duration;
        self.stop_when = None;
    }

    /// A quick trial: the measured window set to `duration`, the warm-up scaled by the same
    /// factor (never lengthened).
    pub fn shorten(&mut self, duration: Duration) {
        let scale = (duration.as_secs_f64() / self.duration.as_secs_f64()).min(1.0);
        self.warmup = self.warmup.mul_f64(scale);
        self.duration = duration;
    }

    /// A quick trial at other client counts: the staircase's steps, or the one client count
    /// of a rate series.
    pub fn with_clients(&mut self, clients: &[usize]) -> Result<(), ClientsError> {
        if clients.is_empty() || clients.contains(&0) {
            return Err(ClientsError::Zero);
        }
        match (&mut self.series, clients) {
            (Series::Clients(c), _) => *c = clients.to_vec(),
            (Series::Rates { clients: c, .. } | Series::Find { clients: c, .. }, [one]) => {
                *c = *one
            }
            _ => return Err(ClientsError::RateSeries),
        }
        Ok(())
    }

    /// Both `balanced` and `separated` are run (their coinciding on a machine matters).
    pub fn compares_balanced_and_separated(&self) -> bool {
        let has = |name: &str| self.placements.iter().any(|p| p == name);
        has("balanced") && has("separated")
    }

    /// Runs at most, over all targets and placements (`auto` repetitions counted at their
    /// maximum). The time model is in [`estimate`].
    pub fn max_steps(&self) -> usize {
        self.planned_steps() * self.repetitions.max_runs()
    }
}

fn series(spec: &SpecFile) -> Result<Series, SpecError> {
    let s = &spec.spec;
    let counts = match &s.clients {
        Some(c) => c
            .expand()
            .map_err(|e| spec.error_at(&["clients"], e.to_string()))?,
        None => vec![1],
    };
    match (&s.rate, &s.find) {
        (None, None) => {
            if s.clients.is_none() {
                return Err(spec.error_at(
                    &[],
                    "no staircase: expected clients = [...] or rate = {...}",
                ));
            }
            Ok(Series::Clients(counts))
        }
        (rate, find) => {
            if counts.len() != 1 {
                return Err(spec.error_at(
                    &["clients"],
                    "a rate series takes one client count (clients = N)",
                ));
            }
            let Some(rate) = rate else {
                return Err(spec.error_at(
                    &["find"],
                    "find needs rate = { from = .., to = .. } as its bounds",
                ));
            };
            match find {
                Some(f) => {
                    let (lo, hi) = rate.bounds();
                    if !(lo > 0.0 && hi > lo) || f.p99_ms <= 0.0 {
                        return Err(spec.error_at(
                            &["find"],
                            "expected 0 < rate.from < rate.to and p99_ms > 0",
                        ));
                    }
                    Ok(Series::Find {
                        lo,
                        hi,
                        p99_ms: f.p99_ms,
                        max_steps: f.max_steps.unwrap_or(7).max(2),
                        clients: counts[0],
                    })
                }
                None => Ok(Series::Rates {
                    rates: rate
                        .expand()
                        .map_err(|e| spec.error_at(&["rate"], e.to_string()))?,
                    clients: counts[0],
                }),
            }
        }
    }
}

/// Refuses counts of 0 (depth, connections per client), an empty measured window, an error
/// ratio that is not a share, and a spec without targets.
fn check_sizes(spec: &SpecFile) -> Result<(), SpecError> {
    let s = &spec.spec;
    if s.depth == 0 || s.connections_per_client == 0 || s.targets.iter().any(|t| t.depth == Some(0))
    {
        let key = if s.depth == 0 {
            "depth"
        } else {
            "connections_per_client"
        };
        return Err(spec.error_at(&[key], "expected at least 1"));
    }
    if s.duration.0.is_zero() {
        return Err(spec.error_at(&["duration"], "expected a measured window longer than 0s"));
    }
    if !(0.0..=1.0).contains(&s.max_error_ratio) {
        return Err(spec.error_at(
            &["max_error_ratio"],
            "expected a share of requests between 0 and 1, e.g. 0.01",
        ));
    }
    if !(s.disturbed_pct > 0.0 && s.disturbed_pct <= 100.0) {
        return Err(spec.error_at(
            &["disturbed_pct"],
            "expected a share of the CPUs in percent, over 0 and at most 100, e.g. 10",
        ));
    }
    if s.targets.is_empty() {
        return Err(spec.error_at(&[], "no [[targets]]: expected at least one target"));
    }
    Ok(())
}

/// Refuses a placement that is neither built in nor defined in `[custom_placements]`.
fn check_placements(
    spec: &SpecFile,
    custom: &BTreeMap<String, CustomTable>,
) -> Result<(), SpecError> {
    for (i, p) in spec.spec.placements.iter().enumerate() {
        let known = matches!(p.as_str(), "shared" | "separated" | "balanced");
        if !known && !custom.contains_key(p) {
            let names: Vec<&str> = ["shared", "separated", "balanced"]
                .into_iter()
                .chain(custom.keys().map(String::as_str))
                .collect();
            let near = crate::units::did_you_mean(p, &names);
            return Err(spec.error_at(
                &["placements", &i.to_string()],
                format!("unknown placement {p:?}{near}: expected shared, separated, balanced or a name defined in [custom_placements]"),
            ));
        }
    }
    Ok(())
}

/// The spec's `[[observe]]` entries, checked.
fn observe_entries(spec: &SpecFile) -> Result<Vec<ObserveEntry>, SpecError> {
    let mut observe = Vec::new();
    for (i, o) in spec.spec.observe.iter().enumerate() {
        let entry = o
            .entry(&spec_dir(spec))
            .map_err(|e| spec.error_at(&["observe", &i.to_string()], e.to_string()))?;
        observe.push(entry);
    }
    Ok(observe)
}

/// The error of key `key` of target `i`.
fn target_error(spec: &SpecFile, i: usize, key: &str, msg: String) -> SpecError {
    spec.error_at(&["targets", &i.to_string(), key], msg)
}

fn target(spec: &SpecFile, i: usize, t: &super::spec::TargetSpec) -> Result<TargetPlan, SpecError> {
    let at = |key: &str, msg: String| target_error(spec, i, key, msg);
    let kind = target_kind(spec, i, t)?;
    let rank_hosts = ranks::plan_rank_hosts(spec, i, t, &kind)?;
    let spread = !rank_hosts.is_empty();
    let port_from_log =
        matches!(kind, TargetKind::Builtin(_)) && t.port.is_none() && t.ready.is_none() && !spread;
    let mut ready = t.ready.clone().unwrap_or_default();
    if port_from_log {
        ready.log = Some(LISTENING.to_string());
        ready.tcp = Some(false);
    }
    if spread && ready.log.is_none() {
        // Its ranks listen on their --ranks addresses and print this once their peers are up.
        ready.log = Some(ranks::RANK_READY.to_string());
        ready.tcp = Some(false);
    }
    let ready_log = match &ready.log {
        Some(re) => Some(Regex::new(re).map_err(|e| {
            spec.error_at(
                &["targets", &i.to_string(), "ready", "log"],
                format!("bad regex: {e}"),
            )
        })?),
        None => None,
    };
    let url = match &kind {
        TargetKind::Builtin(args) if spread => ranks::rank_url(args, 0),
        _ => target_url(spec, i, t, &kind)?,
    };
    check_url(spec, i, t, &url)?;
    let message = message::target_message(spec, i, &url)?;
    if let TargetKind::Command(c) = &kind {
        crate::fleet::driver::check_placeholders(c, crate::fleet::server::TARGET_PLACEHOLDERS)
            .map_err(|e| at("command", e.to_string()))?;
    }
    let instances = t.instances.unwrap_or(1);
    if instances == 0 {
        return Err(at("instances", "expected at least 1".into()));
    }
    let stop_signal = match &t.stop_signal {
        Some(name) => crate::process::parse_stop_signal(name).map_err(|e| {
            let known: Vec<&str> = crate::process::STOP_SIGNALS
                .iter()
                .map(|(n, _)| *n)
                .collect();
            let near = crate::units::did_you_mean(name, &known);
            at(
                "stop_signal",
                e.to_string().replacen(':', &format!("{near}:"), 1),
            )
        })?,
        None => nix::sys::signal::Signal::SIGTERM,
    };
    let stop_grace = t.stop_timeout.map_or(STOP_GRACE, |d| d.0);
    if stop_grace.is_zero() {
        return Err(at(
            "stop_timeout",
            "expected a time longer than 0s, e.g. \"5s\"".into(),
        ));
    }
    Ok(TargetPlan {
        stop_signal,
        stop_grace,
        host: t.host.clone().or_else(|| rank_hosts.first().cloned()),
        rank_hosts,
        instances,
        instance: None,
        metrics: target_metrics(spec, i, t, &kind, &url)?,
        name: t.name.clone(),
        kind,
        port: t.port,
        ready_tcp: ready.tcp.unwrap_or(ready_log.is_none()),
        ready_log,
        ready_timeout: ready.timeout.map_or(Duration::from_secs(10), |d| d.0),
        port_from_log,
        url,
        depth: t.depth.unwrap_or(spec.spec.depth),
        message,
        spec_dir: spec_dir(spec),
    })
}

/// What target `i` runs: a built-in server (its options checked) or a command.
fn target_kind(
    spec: &SpecFile,
    i: usize,
    t: &super::spec::TargetSpec,
) -> Result<TargetKind, SpecError> {
    let at = |key: &str, msg: String| target_error(spec, i, key, msg);
    if t.builtin.is_some() || t.command.is_some() {
        running::refuse_watch(spec, i, t)?;
    }
    match (&t.builtin, &t.command) {
        (Some(b), None) => {
            let args: Vec<String> = b.split_whitespace().map(str::to_string).collect();
            match args.first() {
                Some(k) if BUILTIN_SERVERS.contains(&k.as_str()) => {
                    check_serve_args(&args).map_err(|e| at("builtin", e.to_string()))?;
                    Ok(TargetKind::Builtin(args))
                }
                _ => Err(at("builtin", format!("{b:?}: expected a built-in server ({}) and its options, e.g. \"msgr --arch reactor\"", BUILTIN_SERVERS.join(", ")))),
            }
        }
        (None, Some(c)) if !c.trim().is_empty() => Ok(TargetKind::Command(c.clone())),
        (Some(_), Some(_)) => Err(at("command", "give builtin or command, not both".into())),
        (None, None) => running::plan_running(spec, i, t).map(TargetKind::Running),
        (None, Some(_)) => Err(at(
            "command",
            "expected a command line, not an empty one".into(),
        )),
    }
}

/// The url the built-in engine loads target `i` at: its own, the client's, or a built-in
/// server's default.
fn target_url(
    spec: &SpecFile,
    i: usize,
    t: &super::spec::TargetSpec,
    kind: &TargetKind,
) -> Result<String, SpecError> {
    Ok(match (&t.url, &spec.spec.client.url, kind) {
        (Some(u), _, _) | (None, Some(u), _) => u.clone(),
        (None, None, TargetKind::Builtin(args)) if t.host.is_some() => {
            format!("{}://{{host}}:{{port}}", args[0])
        }
        (None, None, TargetKind::Builtin(args)) => format!("{}://127.0.0.1:{{port}}", args[0]),
        (None, None, TargetKind::Command(_)) if spec.spec.client.command.is_some() => String::new(),
        (None, None, TargetKind::Running(_)) => String::new(),
        (None, None, TargetKind::Command(_)) => {
            return Err(target_error(spec, i, "url", "a command target needs url = \"http://127.0.0.1:{port}/\" (or client.url) for the built-in engine".into()))
        }
    })
}

/// A url's shape, checked now, at the key the user wrote it under: the target's own `url`,
/// or `[client] url` that every target takes.
fn check_url(
    spec: &SpecFile,
    i: usize,
    t: &super::spec::TargetSpec,
    url: &str,
) -> Result<(), SpecError> {
    if url.is_empty() {
        return Ok(());
    }
    let url_error = |why: String| match (&t.url, &spec.spec.client.url) {
        (None, Some(_)) => spec.error_at(&["client", "url"], why),
        _ => target_error(spec, i, "url", why),
    };
    crate::load::target::check_shape(url).map_err(|e| url_error(e.to_string()))?;
    let started_on_port =
        t.builtin.is_some() || t.command.as_deref().is_some_and(|c| c.contains("{port}"));
    match (literal_port(url), t.port) {
        (Some(at), Some(port)) if at != port => Err(url_error(format!(
            "{url:?} points at port {at}, but the target's port is {port}: write {{port}} in the url, or make the two agree"
        ))),
        (Some(at), None) if started_on_port => Err(url_error(format!(
            "{url:?} points at port {at}, but the target is started on a free port ({{port}}): write {{port}} in the url, or set the target's port = {at}"
        ))),
        _ => Ok(()),
    }
}

/// The port a url names literally (`http://127.0.0.1:8080/` → 8080); None for `{port}`, no
/// port, or an IPv6 host without one.
fn literal_port(url: &str) -> Option<u16> {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?']).next()?;
    let (_, port) = authority.rsplit_once(':')?;
    port.parse().ok()
}

/// Where target `i`'s own metrics come from, if anywhere.
fn target_metrics(
    spec: &SpecFile,
    i: usize,
    t: &super::spec::TargetSpec,
    kind: &TargetKind,
    url: &str,
) -> Result<Option<MetricsPlan>, SpecError> {
    Ok(match &t.metrics {
        Some(m) => Some(
            m.plan()
                .map_err(|e| target_error(spec, i, "metrics", e.to_string()))?,
        ),
        // The built-in msgr server and kvd daemon write their counters when asked (into a file on
        // this machine: not for a server on another host, except a kvd target's ranks, whose
        // files each rank's host reads back).
        None if t.host.is_none()
            && matches!(kind, TargetKind::Builtin(a) if a[0] == "msgr" || a[0] == "kvd") =>
        {
            Some(MetricsPlan::File {
                template: "{metrics}".into(),
                format: crate::observe::metrics::MetricsFormat::Json,
            })
        }
        // memcached answers `stats` on the port it is loaded at (read from this machine, so
        // on loopback only).
        None if t.host.is_none() && url.starts_with("memcache://") => {
            Some(MetricsPlan::Url(url.to_string()))
        }
        None => None,
    })
}

/// `stairbench serve`'s own command line, to check a `builtin` before any step runs.
#[derive(clap::Parser)]
#[command(name = "stairbench serve", no_binary_name = true)]
struct ServeLine {
    #[command(subcommand)]
    command: crate::serve::ServeCommand,
}

/// Parses `builtin`'s words with the same definitions as `stairbench serve` (an option the
/// runner adds itself, such as --port, may be missing).
fn check_serve_args(args: &[String]) -> Result<(), BuiltinArgs> {
    use clap::error::ErrorKind;
    match <ServeLine as clap::Parser>::try_parse_from(args) {
        Err(e) if e.kind() != ErrorKind::MissingRequiredArgument => Err(BuiltinArgs(e)),
        _ => Ok(()),
    }
}

/// `builtin` words that `stairbench serve` refuses: clap's first line, without `error: `.
#[derive(Debug, thiserror::Error)]
#[error("{}", .0.render().to_string().lines().next().unwrap_or("").trim_start_matches("error: "))]
struct BuiltinArgs(clap::Error);

/// A `--clients` override the plan cannot take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientsError {
    /// No count, or a count of 0.
    #[error("--clients: expected client counts of at least 1, e.g. 1,4")]
    Zero,
    /// Several counts for a rate series.
    #[error("--clients: a rate series takes one client count")]
    RateSeries,
}

/// `[client] requests` and `order`: the file is read and checked now, relative to the spec.
fn requests(spec: &SpecFile, proto: &mut ProtoOptions) -> Result<(), SpecError> {
    let c = &spec.spec.client;
    if let Some(o) = &c.order {
        proto.order = o.parse().map_err(|e: crate::load::template::BadOrder| {
            spec.error_at(&["client", "order"], e.to_string())
        })?;
    }
    if let Some(file) = &c.requests {
        let path = spec_dir(spec).join(file);
        let read = crate::load::template::RequestFile::read(&path)
            .map_err(|e| spec.error_at(&["client", "requests"], e.to_string()))?;
        proto.requests = Some(std::sync::Arc::new(read));
    }
    Ok(())
}

/// `[client] insecure` and `cacert` (read now, relative to the spec: a file that is not a PEM
/// CA certificate is refused before any step).
fn tls(spec: &SpecFile, proto: &mut ProtoOptions) -> Result<(), SpecError> {
    let c = &spec.spec.client;
    proto.tls.insecure = c.insecure.unwrap_or(false);
    if let Some(file) = &c.cacert {
        let at = |why: String| spec.error_at(&["client", "cacert"], why);
        if proto.tls.insecure {
            return Err(at("give cacert or insecure = true, not both".into()));
        }
        proto.tls.cacert = Some(spec_dir(spec).join(file));
        crate::load::tls::TlsClient::new("localhost", &[], &proto.tls)
            .map_err(|e| at(e.to_string()))?;
    }
    Ok(())
}

pub(crate) fn spec_dir(spec: &SpecFile) -> PathBuf {
    spec.dir.clone()
}

fn custom_tables(spec: &SpecFile) -> Result<BTreeMap<String, CustomTable>, SpecError> {
    let base = spec_dir(spec);
    let mut out = BTreeMap::new();
    for (name, c) in &spec.spec.custom_placements {
        let path = if c.file.is_absolute() {
            c.file.clone()
        } else {
            base.join(&c.file)
        };
        let key = c.key.clone().unwrap_or_else(|| name.clone());
        let table = CustomTable::read(&path, &key)
            .map_err(|e| spec.error_at(&["custom_placements", name, "file"], e.to_string()))?;
        out.insert(name.clone(), table);
    }
    Ok(out)
}

fn client(spec: &SpecFile) -> Result<ClientPlan, SpecError> {
    let c = &spec.spec.client;
    let message = message::client_message(spec)?;
    let arrivals = arrivals::arrivals(spec)?;
    let connect = connect::connect(spec)?;
    if c.command.is_some() && c.arrivals.is_some() {
        return Err(spec.error_at(&["client", "arrivals"], "arrivals is an option of the built-in engine; an external client command spaces its requests itself"));
    }
    if c.command.is_some() && (c.insecure.is_some() || c.cacert.is_some()) {
        let key = if c.cacert.is_some() {
            "cacert"
        } else {
            "insecure"
        };
        return Err(spec.error_at(&["client", key], "insecure and cacert are options of the built-in engine; give an external client command its own TLS options"));
    }
    if let Some(template) = &c.command {
        let parser = c.parser.clone().ok_or_else(|| {
            spec.error_at(&["client", "command"], "an external client needs parser = \"wrk\" (or redis-benchmark, crimson-msgr, json, regex, stairbench)")
        })?;
        crate::fleet::driver::check_placeholders(
            template,
            crate::fleet::driver::CLIENT_PLACEHOLDERS,
        )
        .map_err(|e| spec.error_at(&["client", "command"], e.to_string()))?;
        let options = c.parser_options.clone().unwrap_or_default();
        crate::load::external::by_name(&parser, &options)
            .map_err(|e| spec.error_at(&["client", "parser"], e.to_string()))?;
        // `{spec_dir}` is known now, as for a target's command: a tool's own input files
        // (a pgbench script) can sit beside the spec.
        let spec_dir = spec_dir(spec).display().to_string();
        return Ok(ClientPlan::Command {
            template: crate::fleet::driver::fill(template, &[("spec_dir", spec_dir)]),
            parser,
            options,
        });
    }
    let mut proto = ProtoOptions::default();
    if let Some(m) = &c.method {
        proto.method = m.clone();
    }
    proto.headers = c.headers.clone();
    proto.body = c.body.clone();
    proto.body_file = message;
    if let Some(k) = c.keys {
        proto.keys = k;
    }
    if let Some(r) = c.read_ratio {
        if !(0.0..=1.0).contains(&r) {
            return Err(spec.error_at(
                &["client", "read_ratio"],
                "expected a share between 0 and 1",
            ));
        }
        proto.read_ratio = r;
    }
    if let Some(v) = c.value_size {
        proto.value_size = v;
    }
    if let Some(z) = c.zipf {
        proto.distribution = Distribution::Zipf(z);
    }
    if let Some(s) = c.seed {
        proto.seed = s;
    }
    if let Some(m) = c.msg_size {
        proto.msg_size = m;
    }
    if let Some(m) = &c.memcache_commands {
        proto.memcache_commands =
            m.parse()
                .map_err(|e: crate::load::protocol::memcache::BadCommands| {
                    spec.error_at(&["client", "memcache_commands"], e.to_string())
                })?;
    }
    requests(spec, &mut proto)?;
    tls(spec, &mut proto)?;
    Ok(ClientPlan::Engine {
        proto,
        arrivals,
        connect,
    })
}
