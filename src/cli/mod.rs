//! The commands (the top layer): clap definitions, one module per command, the exit-code
//! classification and the progress bars. Every module below this one returns its own typed
//! errors; `anyhow` is used here, at the command edge only.

pub mod analyze;
pub mod demo;
pub mod diagnose;
pub mod exit;
pub mod gates;
pub mod history;
pub mod live;
pub mod load;
pub mod metrics;
pub mod observe;
pub mod profile;
pub mod progress;
pub mod report;
pub mod run;
pub mod serve;
pub mod shell;
pub mod topology;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// A performance lab for client/server systems: staircase load, observation, analysis, profiles.
#[derive(Debug, Parser)]
#[command(name = "stairbench", version = env!("STAIRBENCH_VERSION"), about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `load`'s one-line help, its schemes from the list the URL parser takes.
fn load_about() -> String {
    let schemes: Vec<String> = crate::load::target::SCHEMES
        .iter()
        .map(|s| format!("{s}://"))
        .collect();
    format!(
        "Drive load against one URL ({}) and print its figures",
        schemes.join(", ")
    )
}

/// `run --help`: what a spec and a placement are, and where to start.
const RUN_LONG_ABOUT: &str = "Run the experiment a spec file describes: a staircase of load \
per target and placement.

A spec is a TOML file naming the servers to measure ([[targets]]: a built-in server, a command \
that starts yours, or the url of one already running), the staircase (clients = [1, 2, 4] or a \
rate series), the client (the built-in engine or an external tool such as wrk) and how the CPUs \
are split between server and load generator: a placement (shared: both on every CPU; \
separated: server and client on physical cores of their own, one thread per core; balanced: \
whole cores with their SMT siblings for each side; or a custom table; `stairbench topology` \
prints what each gives on this machine). Every step's results are appended to the run directory's steps.jsonl as it ends, and \
the reports (report.html, report.md) are written at the end.

Start from a file in examples/ (e.g. examples/nginx-wrk.toml), and check it with --dry-run, \
which prints every step, its cpusets and commands, and the estimated time.";

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once; boxing would only add noise
pub enum Command {
    /// Drive load against one URL and print its figures.
    #[command(about = load_about())]
    Load(load::LoadArgs),
    /// Run a built-in reference server.
    #[command(subcommand)]
    Serve(crate::serve::ServeCommand),
    /// Run the experiment a spec file describes: a staircase of load per target and placement.
    #[command(long_about = RUN_LONG_ABOUT)]
    Run(run::RunArgs),
    /// Run a built-in experiment with no setup.
    #[command(about = demo::about())]
    Demo(run::DemoArgs),
    /// Print the machine's CPU topology and the cpusets each placement policy gives.
    Topology(topology::TopologyArgs),
    /// Rebuild a run directory's reports from its steps.jsonl and raw files.
    Report(report::ReportArgs),
    /// Compare run directories side by side, with ratios and noise verdicts.
    Compare(report::CompareArgs),
    /// Keep runs in an SQLite history and print the change points across them; --check gates CI.
    History(history::HistoryArgs),
    /// Analyse a CSV table from elsewhere (scalability fit, knee, Little's law), or print a run
    /// directory's diagnoses (why each series stops scaling).
    Analyze(analyze::AnalyzeArgs),
    /// Fold perf samples and draw flame graphs (merged threads, coalesced towers, diffs).
    Flame(profile::FlameArgs),
    /// Profile a running process with perf and write its flame graphs.
    Profile(profile::ProfileArgs),
    /// Print this machine's environment (CPU, topology, governors, perf, load) as a run keeps it.
    Environment(observe::EnvironmentArgs),
    /// Measure a process tree and CPUs over a window started and ended on standard input.
    Observe(observe::ObserveArgs),
    /// Print a shell completion script (bash, zsh, fish) on standard output.
    Completions(shell::CompletionsArgs),
    /// Print the man page (roff) on standard output, or write one per command with --dir.
    Man(shell::ManArgs),
}

/// Runs one parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Load(args) => load::run(args),
        Command::Serve(cmd) => serve::run(cmd),
        Command::Run(args) => run::run(args),
        Command::Demo(args) => run::demo(args),
        Command::Topology(args) => topology::run(args),
        Command::Report(args) => report::report(args),
        Command::Compare(args) => report::compare(args),
        Command::Analyze(args) => analyze::run(args),
        Command::History(args) => history::run(args),
        Command::Flame(args) => profile::flame(args),
        Command::Profile(args) => profile::profile(args),
        Command::Environment(args) => observe::environment(args),
        Command::Observe(args) => observe::observe(args),
        Command::Completions(args) => shell::completions(args),
        Command::Man(args) => shell::man(args),
    }
}
