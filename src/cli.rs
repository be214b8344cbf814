//! Command-line definitions and dispatch; nothing else lives here.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A performance lab for client/server systems: staircase load, observation, analysis, profiles.
#[derive(Debug, Parser)]
#[command(name = "stairbench", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing would only add noise
pub enum Command {
    /// Drive load against one URL (http://, redis://, msgr://, shm://) and print its figures.
    Load(crate::load::cli::LoadArgs),
    /// Run a built-in reference server.
    #[command(subcommand)]
    Serve(crate::serve::ServeCommand),
    /// Run the experiment a spec file describes: a staircase of load per target and placement.
    Run(crate::sweep::cli::RunArgs),
    /// Run a built-in experiment with no setup: the bundled messenger server's two designs
    /// (one event loop per core vs a shared worker pool), each on separate and on shared CPUs,
    /// at 1 to 64 clients; prints each series' peak and writes a run directory with its report.
    Demo(crate::sweep::cli::DemoArgs),
    /// Print the machine's CPU topology and the cpusets each placement policy gives.
    Topology(crate::sweep::topology::TopologyArgs),
    /// Rebuild a run directory's reports from its steps.jsonl and raw files.
    Report(crate::report::cli::ReportArgs),
    /// Compare run directories side by side, with ratios and noise verdicts.
    Compare(crate::report::cli::CompareArgs),
    /// Analyse a CSV table from elsewhere: scalability fit, knee, Little's law.
    Analyze(crate::analyze::cli::AnalyzeArgs),
    /// Fold perf samples and draw flame graphs (merged threads, coalesced towers, diffs).
    Flame(crate::profile::cli::FlameArgs),
    /// Profile a running process with perf and write its flame graphs.
    Profile(crate::profile::cli::ProfileArgs),
    /// Print this machine's environment (CPU, topology, governors, perf, load) as a run keeps it.
    Environment(crate::observe::cli::EnvironmentArgs),
    /// Measure a process tree and CPUs over a window started and ended on standard input.
    Observe(crate::observe::cli::ObserveArgs),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Load(args) => crate::load::cli::run(args),
        Command::Serve(cmd) => crate::serve::run(cmd),
        Command::Run(args) => crate::sweep::cli::run(args),
        Command::Demo(args) => crate::sweep::cli::demo(args),
        Command::Topology(args) => crate::sweep::topology::run(args),
        Command::Report(args) => crate::report::cli::report(args),
        Command::Compare(args) => crate::report::cli::compare(args),
        Command::Analyze(args) => crate::analyze::cli::run(args),
        Command::Flame(args) => crate::profile::cli::flame(args),
        Command::Profile(args) => crate::profile::cli::profile(args),
        Command::Environment(args) => crate::observe::cli::environment(args),
        Command::Observe(args) => crate::observe::cli::observe(args),
    }
}

/// True when the error is a closed stdout (`stairbench ... | head`), which is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
