//! `stairbench environment` and `stairbench observe`: what `stairbench run` asks of another
//! host over ssh (its environment for environment.json; its server's figures over a window),
//! and useful by hand too.

use std::io::{BufRead, Write};
use std::process::ExitCode;

use clap::Args;

use crate::observe::answer::ObserveAnswer;
use crate::observe::metrics::{window_difference, MetricsFormat, MetricsSource};
use crate::record::figures::ForeignJson;

/// Options of `stairbench environment`.
#[derive(Debug, Args)]
pub struct EnvironmentArgs {
    /// Print the environment as JSON (the object runs keep in environment.json).
    #[arg(long)]
    pub json: bool,
}

/// Prints this machine's environment: CPU, topology, governors, turbo, swap, perf, load.
pub fn environment(args: EnvironmentArgs) -> anyhow::Result<ExitCode> {
    let env = crate::observe::environment();
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&env)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(out, "host       {}", env.hostname)?;
    writeln!(
        out,
        "cpu        {} ({})",
        env.cpu_model,
        crate::units::count(env.cpus, "CPU")
    )?;
    if let Some(t) = &env.topology {
        writeln!(out, "topology   {}", t.summary)?;
    }
    writeln!(out, "kernel     {}", env.kernel)?;
    writeln!(out, "turbo      {}", env.turbo)?;
    if let Some(perf) = &env.perf {
        writeln!(
            out,
            "perf       software {} hardware {}",
            perf.software, perf.hardware
        )?;
    }
    writeln!(out, "load       {:?}", env.loadavg)?;
    for w in &env.warnings {
        writeln!(out, "warning    {w}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Options of `stairbench observe`.
#[derive(Debug, Args)]
pub struct ObserveArgs {
    /// The process whose tree is measured (CPU time, context switches, faults, perf counters).
    #[arg(long)]
    pub pid: Option<i32>,
    /// CPUs whose busy % is reported as the server's.
    #[arg(long)]
    pub server_cpus: Option<crate::cpuset::CpuList>,
    /// CPUs whose busy % is reported as the client's.
    #[arg(long)]
    pub client_cpus: Option<crate::cpuset::CpuList>,
    /// A JSON metrics file the server rewrites (as `serve kvd --metrics`): read at both edges
    /// of the window, its difference printed under `target_metrics` (one per file, in order).
    #[arg(long, value_name = "FILE")]
    pub metrics: Vec<std::path::PathBuf>,
}

/// Attaches (perf with its counters off) at once, starts the window at the line `start` on
/// standard input (or at once without one) and ends it at `stop` or at the end of the input,
/// then prints the window's observation as JSON.
pub fn observe(args: ObserveArgs) -> anyhow::Result<ExitCode> {
    let cpus = |l: &Option<crate::cpuset::CpuList>| l.as_ref().map_or(Vec::new(), |l| l.0.clone());
    let mut obs = crate::observe::Observer::prepare(
        args.pid,
        &cpus(&args.server_cpus),
        &cpus(&args.client_cpus),
    );
    // Tells the caller perf is attached: the window may start.
    println!("ready");
    std::io::stdout().flush()?;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    let sources: Vec<MetricsSource> = (args.metrics.iter())
        .map(|path| MetricsSource::File {
            path: path.clone(),
            format: MetricsFormat::Json,
        })
        .collect();
    let snapshots = || -> Vec<_> { sources.iter().map(MetricsSource::snapshot_fresh).collect() };
    let mut before = None;
    let mut began = std::time::SystemTime::now();
    while let Some(Ok(line)) = lines.next() {
        match line.trim() {
            "start" if before.is_none() => {
                began = std::time::SystemTime::now();
                obs.begin();
                // After the observers: waiting for a file's rewrite must not delay them.
                before = Some(snapshots());
            }
            "stop" => break,
            _ => {}
        }
    }
    let before = before.unwrap_or_else(|| {
        began = std::time::SystemTime::now();
        obs.begin();
        snapshots()
    });
    let answer = ObserveAnswer {
        observation: obs.finish(),
        target_metrics: (before.iter().zip(&sources))
            .map(|(a, s)| (a, s.snapshot_at_end(a.as_ref().ok())))
            .map(|(a, b)| window_difference(a.as_ref(), b.as_ref(), began))
            .map(ForeignJson::from_value)
            .collect(),
    };
    println!("{}", answer.to_line()?);
    Ok(ExitCode::SUCCESS)
}
