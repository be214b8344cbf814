//! What puts load on a target for one step: the built-in engine, an external command whose
//! output a parser reads, or (in tests) a fake with scripted figures.

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::error::StepError;
use crate::load::external::{OutputParser, ToolLoad};
use crate::load::{LoadConfig, ProtoOptions};
use crate::record::figures::StepFigures;
use crate::record::load::{ClientCpu, IntervalSink, LoadReport};

/// One step's load, as the step loop asks for it.
#[derive(Debug, Clone)]
pub struct StepRequest {
    /// Step id (file stem of its raw files).
    pub step_id: String,
    /// URL for the built-in engine, placeholders filled.
    pub url: String,
    /// The target's port.
    pub port: u16,
    /// Clients of the step.
    pub clients: usize,
    /// Total connections (clients × connections per client).
    pub connections: usize,
    /// Requests in flight per connection.
    pub depth: usize,
    /// The target's own gRPC request message and call shape, in place of the client's.
    pub message: Option<crate::load::protocol::grpc::GrpcMessage>,
    /// Generator threads.
    pub threads: usize,
    /// Measured window.
    pub duration: Duration,
    /// Discarded lead-in.
    pub warmup: Duration,
    /// Request timeout.
    pub timeout: Duration,
    /// Open-loop rate, requests/s.
    pub rate_rps: Option<f64>,
    /// CPUs of the generator.
    pub client_cpus: Vec<usize>,
    /// The run directory.
    pub out_dir: PathBuf,
    /// The instances of a split target (empty for a single server).
    pub instances: Vec<InstanceAddr>,
    /// Each client group's cpuset on its own host (empty without client groups).
    pub group_cpus: Vec<Vec<usize>>,
    /// What each client group loads when it differs from `url` (a kvd target over several
    /// hosts: its host's rank); empty: every group loads `url`.
    pub group_targets: Vec<GroupTarget>,
}

/// What one client group loads instead of the step's url.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupTarget {
    /// The engine's URL for this group.
    pub url: String,
    /// Added to the spec's seed (a kvd rank's number: client i of rank r draws with
    /// (seed + r) × 1000 + i, the benchkv study's seeding when the spec's seed is 0).
    pub seed_offset: u64,
}

/// Where one instance of a step's target listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceAddr {
    /// Its port.
    pub port: u16,
    /// The engine's URL for it.
    pub url: String,
}

/// A step's load figures.
#[derive(Debug, Clone)]
pub struct StepLoad {
    /// The figures in the engine's layout.
    pub report: LoadReport,
    /// All latencies of the window in nanoseconds, when the driver has them.
    pub hist_ns: Option<Histogram<u64>>,
    /// The step's other figures from the load (an external tool's own, a split load's parts).
    pub figures: StepFigures,
}

/// Runs the load of one step.
pub trait Driver {
    /// Runs to completion or until `stop`; an error is the step's failure, by kind.
    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError>;

    /// It reports per-second lines with latency histograms while it runs (an external tool's
    /// lines, if any, come after it ends, without histograms).
    fn live_intervals(&self) -> bool {
        true
    }

    /// It tells the sink when the measured window starts and ends (`window_started`,
    /// `window_ended`) as they happen, so the runner starts and ends its observers then.
    fn signals_window(&self, _req: &StepRequest) -> bool {
        false
    }

    /// Lines for the run's notes that came up while running steps (a host marked down); the
    /// step loop takes them after each step.
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// The built-in load engine.
#[derive(Debug, Clone, Default)]
pub struct EngineDriver {
    /// Protocol options from the spec's client section.
    pub proto: ProtoOptions,
    /// How open-loop requests are spaced (`[client] arrivals`).
    pub arrivals: crate::load::arrivals::Arrivals,
    /// How connections are opened (`[client] source_addrs`, `connect_rate`).
    pub connect: crate::load::sources::ConnectOptions,
}

impl Driver for EngineDriver {
    fn signals_window(&self, _req: &StepRequest) -> bool {
        true
    }

    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        let config = LoadConfig {
            arrivals: self.arrivals,
            connect: self.connect.clone(),
            ..engine_config(&self.proto, req)
        };
        let outcome =
            crate::load::run(&config, sink, stop).map_err(|e| StepError::Load(e.to_string()))?;
        Ok(StepLoad {
            report: outcome.report,
            hist_ns: Some(outcome.hist_ns),
            figures: StepFigures::default(),
        })
    }
}

/// The built-in engine's configuration for a step.
pub fn engine_config(proto: &ProtoOptions, req: &StepRequest) -> LoadConfig {
    let mut proto = proto.clone();
    if let Some(message) = &req.message {
        proto.body_file = Some(message.bytes.clone());
        proto.grpc_stream = message.stream;
    }
    LoadConfig {
        url: req.url.clone(),
        connections: req.connections,
        threads: req.threads,
        duration: req.duration,
        warmup: req.warmup,
        timeout: req.timeout,
        depth: req.depth,
        rate_rps: req.rate_rps,
        cpuset: Some(req.client_cpus.clone()),
        proto,
        ..LoadConfig::default()
    }
}

/// An external load command, its placeholders filled per step, pinned to the client CPUs.
pub struct CommandDriver {
    /// The template.
    pub template: String,
    /// The parser of its stdout (`load::external::by_name`).
    pub parser: Box<dyn OutputParser>,
}

impl CommandDriver {
    /// The command line of one step.
    pub fn command_line(&self, req: &StepRequest) -> String {
        client_line(&self.template, req, &req.port.to_string())
    }
}

/// A client command template filled with a step's values; the port as text, so that the dry
/// run can show the one not yet picked.
pub fn client_line(template: &str, req: &StepRequest, port: &str) -> String {
    fill(
        template,
        &[
            ("cpuset", crate::cpuset::format(&req.client_cpus)),
            ("threads", req.threads.to_string()),
            ("clients", req.clients.to_string()),
            ("connections", req.connections.to_string()),
            ("depth", req.depth.to_string()),
            ("port", port.to_string()),
            ("duration_s", format!("{}", req.duration.as_secs_f64())),
            ("warmup_s", format!("{}", req.warmup.as_secs_f64())),
            (
                "rate",
                req.rate_rps.map_or(String::new(), |r| format!("{r:.0}")),
            ),
            ("out", req.out_dir.display().to_string()),
            ("url", req.url.clone()),
        ],
    )
}

impl Driver for CommandDriver {
    fn live_intervals(&self) -> bool {
        false
    }

    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        let line = self.command_line(req);
        let (mut tool, client_cpu, orphans_cpu_s, saturated) = self.run_tool(&line, req, stop)?;
        let empty = Histogram::<u64>::new(3).map_err(|e| StepError::Load(e.to_string()))?;
        for interval in &tool.intervals {
            sink.interval(interval, &empty);
        }
        let r = &mut tool.report;
        r.schema = crate::record::load::SCHEMA_VERSION;
        r.url = line;
        r.connections = req.connections;
        r.threads = req.threads;
        r.depth = req.depth;
        r.rate_rps = req.rate_rps;
        r.client_saturated = saturated;
        r.client_cpu = client_cpu;
        let figures = StepFigures {
            tool: tool.figures,
            // The observers ran from the tool's start to its end, and its counts cover its
            // whole run too: per-request figures are over that span, and the step says so.
            window: Some(WHOLE_RUN_WINDOW.into()),
            client_cpu_orphans_s: (orphans_cpu_s > 0.0).then_some(orphans_cpu_s),
            ..StepFigures::default()
        };
        Ok(StepLoad {
            report: tool.report,
            hist_ns: None,
            figures,
        })
    }
}

impl CommandDriver {
    /// Runs the command line to its end and parses its output; with the CPU it used, its
    /// orphans' share of it, and whether it was saturated.
    fn run_tool(
        &self,
        line: &str,
        req: &StepRequest,
        stop: &AtomicBool,
    ) -> Result<(ToolLoad, ClientCpu, f64, bool), StepError> {
        let launch = crate::process::Launch {
            name: format!("client command `{line}`"),
            program: "sh".into(),
            args: vec!["-c".into(), format!("exec {line}")],
            cpus: Some(req.client_cpus.clone()),
            ready_log: None,
            keep_stdout: true,
        };
        // Each CPU of the client's cpuset, over the tool's whole run (it cannot tell its
        // warm-up apart): a tool saturates when one of them is full, whatever the others do.
        let mut cores = crate::observe::cores::CoreSampler::start(&[], &req.client_cpus);
        let mut child = crate::process::ChildProc::spawn(&launch)
            .map_err(|e| StepError::Load(format!("cannot start {}: {e}", launch.name)))?;
        let limit = req.duration + req.warmup + Duration::from_secs(30);
        let started = std::time::Instant::now();
        let finished = child
            .wait(limit, stop)
            .map_err(|e| StepError::Load(e.to_string()))?;
        let ran_s = started.elapsed().as_secs_f64();
        // The tool's own tree only (wait4 on its pid, plus its orphans): this process's
        // other children (another instance's tool, perf, reaped orphans) are not its CPU.
        let client_cpu = ClientCpu {
            user_s: finished.cpu.user_s,
            sys_s: finished.cpu.sys_s,
            per_core_busy: cores.sample().client_busy_pct,
            ..ClientCpu::default()
        };
        let (exit, stdout) = (&finished.exit, &finished.stdout);
        let tool = self.parser.parse_report(stdout).map_err(|e| {
            StepError::Parse(format!(
                "{} {exit}; its output did not parse: {e}\n{}",
                launch.name,
                child.output_tail()
            ))
        })?;
        let own_cpu_s = client_cpu.user_s + client_cpu.sys_s;
        let wanted_s = own_cpu_s + finished.run_wait_s.unwrap_or(0.0);
        let saturated = tool_saturated(&client_cpu.per_core_busy, wanted_s, ran_s);
        Ok((tool, client_cpu, finished.orphans_cpu_s, saturated))
    }
}

/// The `window` of an external tool's step: the span its per-request figures cover.
pub const WHOLE_RUN_WINDOW: &str = "whole run (the tool cannot separate its warm-up)";

/// Busy % over which a client CPU is full: the engine's rule, applied to a tool's CPUs.
const SATURATED_BUSY_PCT: f64 = 90.0;

/// True when any CPU of the client's cpuset was over 90% busy. Their average would hide
/// a tool whose one event loop fills one CPU while the others idle.
pub fn any_cpu_saturated(busy_pct: &[f64]) -> bool {
    busy_pct.iter().any(|&b| b > SATURATED_BUSY_PCT)
}

/// True when the tool wanted a whole CPU: one CPU of its cpuset over 90% busy
/// ([`any_cpu_saturated`]) and the tool's threads running or runnable (its own CPU plus its
/// run-queue wait, `wanted_s`) at least 90% of its run. A CPU kept busy by other processes
/// (another job on the machine, the server in a shared placement) while the tool, never
/// kept waiting, used half of it does not make the tool the limit; a tool those processes
/// kept waiting for the CPU is.
pub fn tool_saturated(busy_pct: &[f64], wanted_s: f64, ran_s: f64) -> bool {
    any_cpu_saturated(busy_pct) && ran_s > 0.0 && 100.0 * wanted_s / ran_s >= SATURATED_BUSY_PCT
}

/// The placeholders a `[client] command` takes.
pub const CLIENT_PLACEHOLDERS: &[&str] = &[
    "cpuset",
    "threads",
    "clients",
    "connections",
    "depth",
    "port",
    "duration_s",
    "warmup_s",
    "rate",
    "out",
    "url",
    "spec_dir",
];

/// A template's `{name}` that is a near miss of a known placeholder.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown placeholder {{{name}}} (did you mean {{{near}}}?); known: {}", .known.iter().map(|k| format!("{{{k}}}")).collect::<Vec<_>>().join(", "))]
pub struct NearMiss {
    /// The name written.
    name: String,
    /// The known placeholder it is near.
    near: String,
    /// Every known placeholder.
    known: Vec<String>,
}

/// Refuses a `{name}` in a template that is a near miss of a known placeholder (`{prot}`,
/// `{duration}`): left as it is, the shell would get the braces. A word far from every
/// placeholder (awk's `{print}`) is the command's own and passes.
pub fn check_placeholders(template: &str, known: &[&str]) -> Result<(), NearMiss> {
    let re = regex::Regex::new(r"\{([a-z_][a-z0-9_]*)\}").expect("a valid pattern");
    for m in re.captures_iter(template) {
        let whole = m.get(0).expect("the match");
        let name = &m[1];
        let after_dollar = template[..whole.start()].ends_with('$');
        if after_dollar || known.contains(&name) {
            continue;
        }
        if let Some(near) = crate::units::closest(name, known) {
            return Err(NearMiss {
                name: name.into(),
                near: near.into(),
                known: known.iter().map(|k| k.to_string()).collect(),
            });
        }
    }
    Ok(())
}

/// Replaces each `{name}` in a command template with its value as one shell word: a value
/// with a space, a quote, a `$` or any character a shell reads specially (a run directory
/// named by the user) is single-quoted, so nothing in it is split or executed.
pub fn fill(template: &str, values: &[(&str, String)]) -> String {
    let mut out = template.to_string();
    for (name, value) in values {
        out = out.replace(&format!("{{{name}}}"), &shell_word(value));
    }
    out
}

/// `s` as one word of a POSIX shell: unchanged when it holds only characters no shell
/// reads specially (so `-c{clients}` stays `-c8`), single-quoted otherwise.
pub fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./:,@%+=".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A scripted driver: throughput = `rps_per_client(clients)`, latency from Little's law;
/// it can fail chosen steps. Deterministic, for testing the step loop.
pub struct FakeDriver {
    /// Throughput for a client count.
    pub rps_for: Box<dyn Fn(usize) -> f64>,
    /// Steps (ids) that fail.
    pub fail_ids: Vec<String>,
    /// Every request seen, in order.
    pub seen: Vec<StepRequest>,
    /// Steps with at least this many clients report their load generator saturated.
    pub client_saturated_from: Option<usize>,
}

impl FakeDriver {
    /// A fake with the given throughput curve.
    pub fn new(rps_for: impl Fn(usize) -> f64 + 'static) -> Self {
        FakeDriver {
            rps_for: Box::new(rps_for),
            fail_ids: Vec::new(),
            seen: Vec::new(),
            client_saturated_from: None,
        }
    }
}

impl Driver for FakeDriver {
    fn run_step(
        &mut self,
        req: &StepRequest,
        sink: &mut dyn IntervalSink,
        _stop: &AtomicBool,
    ) -> Result<StepLoad, StepError> {
        self.seen.push(req.clone());
        if self.fail_ids.contains(&req.step_id) {
            // As a load that dies inside its window: one second's line, then the error.
            let hist = Histogram::<u64>::new(3).map_err(|e| StepError::Load(e.to_string()))?;
            let line = crate::record::load::IntervalLine {
                elapsed_s: 1.0,
                ..Default::default()
            };
            sink.interval(&line, &hist);
            return Err(StepError::Load(format!(
                "scripted failure of {}",
                req.step_id
            )));
        }
        let rps = req.rate_rps.unwrap_or_else(|| (self.rps_for)(req.clients));
        let secs = req.duration.as_secs_f64();
        let inflight = (req.connections * req.depth) as f64;
        let mean_us = if rps > 0.0 { inflight / rps * 1e6 } else { 0.0 };
        let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
            .map_err(|e| StepError::Load(e.to_string()))?;
        let _ = hist.record_n((mean_us * 1000.0).max(1.0) as u64, (rps * secs) as u64);
        for i in 0..secs.ceil() as usize {
            let line = crate::record::load::IntervalLine {
                elapsed_s: (i + 1) as f64,
                inflight: inflight as u64,
                ops_per_s: rps,
                mean_latency_ms: mean_us / 1000.0,
                ..Default::default()
            };
            sink.interval(&line, &hist);
        }
        let latency = crate::record::load::LatencyUs {
            mean: mean_us,
            p50: mean_us,
            p90: mean_us,
            p95: mean_us,
            p99: mean_us * 1.5,
            p999: mean_us * 2.0,
            max: mean_us * 3.0,
        };
        Ok(StepLoad {
            report: LoadReport {
                schema: crate::record::load::SCHEMA_VERSION,
                url: req.url.clone(),
                connections: req.connections,
                threads: req.threads,
                depth: req.depth,
                rate_rps: req.rate_rps,
                requests: (rps * secs) as u64,
                sent: (rps * secs) as u64,
                duration_s: secs,
                throughput_rps: rps,
                latency_us: latency,
                client_saturated: self.client_saturated_from.is_some_and(|c| req.clients >= c),
                ..LoadReport::default()
            },
            hist_ns: Some(hist),
            figures: StepFigures::default(),
        })
    }
}
