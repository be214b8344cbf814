//! `stairbench flame` and `stairbench profile`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use crate::profile::categories;
use crate::profile::render::{diff_stacks, write_diff_graph, write_flame_graph, GraphLabels};
use crate::profile::speedscope;
use crate::profile::table::{deltas_markdown, share_deltas, top_functions};
use crate::profile::transform::{Rename, Side, Transforms};
use crate::profile::{capture, load, FoldOptions, Folded};
use crate::record::profiles::Event;

/// Options of `stairbench flame`.
#[derive(Debug, clap::Args)]
#[command(after_help = "With no output option the folded stacks go to standard output.")]
pub struct FlameArgs {
    /// perf script text (plain or gzip), a perf.data, or folded stacks; several are summed; `-` is stdin.
    #[arg(required_unless_present = "diff", value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
    /// Differential graph of B against A (B's widths, A scaled to B's total) and share deltas.
    #[arg(long, num_args = 2, value_names = ["A", "B"], conflicts_with = "inputs")]
    pub diff: Option<Vec<PathBuf>>,
    /// Merge threads: the thread frame loses a trailing -N, _N or #N.
    #[arg(long)]
    pub merge_threads: bool,
    /// Rename thread frames, REGEX=REPLACEMENT (repeatable, applied in order, before --merge-threads).
    #[arg(long = "merge", value_name = "REGEX=REPLACEMENT")]
    pub merge: Vec<String>,
    /// Each stack becomes its distinct frames in first-occurrence order, `NAME [K]` for K > 1.
    #[arg(long)]
    pub coalesce: bool,
    /// Keep only the user or the kernel part of the samples.
    #[arg(long, value_enum)]
    pub split: Option<Side>,
    /// Demangle C++ and Rust symbols.
    #[arg(long)]
    pub demangle: bool,
    /// Keep processes apart: thread frame `comm-PID`.
    #[arg(long)]
    pub pid: bool,
    /// Keep threads apart: thread frame `comm-PID/TID`.
    #[arg(long)]
    pub tid: bool,
    /// Write the flame graph SVG here.
    #[arg(short = 'o', long = "output", value_name = "FILE.svg")]
    pub output: Option<PathBuf>,
    /// Write the folded stacks (after the transforms) here (with --diff: `STACK A B` lines).
    #[arg(long, value_name = "FILE")]
    pub folded: Option<PathBuf>,
    /// Write speedscope JSON here (opens in speedscope and the Firefox Profiler).
    #[arg(long, value_name = "FILE")]
    pub speedscope: Option<PathBuf>,
    /// Print the N functions with the largest inclusive and self shares (with --diff: the N largest moves).
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// Print the share of named function groups, from `NAME: REGEX` lines.
    #[arg(long, value_name = "FILE")]
    pub categories: Option<PathBuf>,
    /// Title of the graph.
    #[arg(long)]
    pub title: Option<String>,
}

/// Options of `stairbench profile`.
#[derive(Debug, clap::Args)]
pub struct ProfileArgs {
    /// Process to record with its children and threads (repeatable, or comma-separated).
    #[arg(long, required = true, value_delimiter = ',')]
    pub pid: Vec<i32>,
    /// How long to record.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Directory for the files (default: profile-PID-UNIXTIME).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// What to record: cpu, cs (context switches), offcpu (scheduler switches).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "cpu")]
    pub events: Vec<Event>,
}

/// inferno panics on a few malformed symbols; the folder catches that and counts the sample
/// as unreadable, so its panic message would only alarm the user.
fn quiet_inferno_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info
                .location()
                .is_some_and(|l| l.file().contains("/inferno-"))
            {
                previous(info);
            }
        }));
    });
}

/// Draws flame graphs.
pub fn flame(args: FlameArgs) -> anyhow::Result<ExitCode> {
    quiet_inferno_panics();
    let transforms = transforms(&args)?;
    let opts = FoldOptions {
        include_pid: args.pid,
        include_tid: args.tid,
        annotate_kernel: args.split.is_some(),
        ..FoldOptions::default()
    };
    if let Some(pair) = &args.diff {
        return flame_diff(&args, &pair[0], &pair[1], opts, &transforms);
    }
    let (folded, event) = load_all(&args.inputs, opts)?;
    // tables need the real leaf frames, which coalescing can move
    let before_coalesce = Transforms {
        coalesce: false,
        ..transforms.clone()
    }
    .apply(&folded);
    if before_coalesce.is_empty() {
        anyhow::bail!(
            "no stack is left after the transforms (--split {:?}?)",
            args.split
        );
    }
    let folded = Transforms {
        coalesce: transforms.coalesce,
        ..Transforms::default()
    }
    .apply(&before_coalesce);
    write_outputs(&args, &folded, &before_coalesce, event.as_deref())?;
    Ok(ExitCode::SUCCESS)
}

fn transforms(args: &FlameArgs) -> anyhow::Result<Transforms> {
    let rename = args
        .merge
        .iter()
        .map(|rule| rule.parse::<Rename>())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Transforms {
        split: args.split,
        rename,
        merge_threads: args.merge_threads,
        pid_suffix: args.pid || args.tid,
        demangle: args.demangle,
        coalesce: args.coalesce,
        ..Transforms::default()
    })
}

/// Loads and sums the inputs; reports skipped lines on stderr.
fn load_all(inputs: &[PathBuf], opts: FoldOptions) -> anyhow::Result<(Folded, Option<String>)> {
    let mut pairs = Vec::new();
    let mut event = None;
    for path in inputs {
        let loaded = load(path, opts).with_context(|| format!("reading {}", path.display()))?;
        if let Some(summary) = loaded.report.garbled_summary() {
            eprintln!("stairbench: warning: {summary}");
        }
        event = event.or(loaded.report.event.clone());
        if inputs.len() == 1 {
            return Ok((loaded.folded, event));
        }
        pairs.extend(loaded.folded.stacks().iter().cloned());
    }
    Ok((Folded::from_pairs(pairs), event))
}

fn write_outputs(
    args: &FlameArgs,
    folded: &Folded,
    for_tables: &Folded,
    event: Option<&str>,
) -> anyhow::Result<()> {
    let title = args
        .title
        .clone()
        .unwrap_or_else(|| default_title(&args.inputs));
    let mut wrote = false;
    if let Some(path) = &args.output {
        let labels = GraphLabels::new(title.clone(), event);
        write_file(path, |w| Ok(write_flame_graph(folded, &labels, w)?))?;
        wrote = true;
    }
    if let Some(path) = &args.folded {
        write_file(path, |w| Ok(folded.write_to(w)?))?;
        wrote = true;
    }
    if let Some(path) = &args.speedscope {
        let json = speedscope::to_json(folded, &title, event);
        write_file(path, |w| Ok(w.write_all(json.as_bytes())?))?;
        wrote = true;
    }
    let mut stdout = std::io::stdout().lock();
    if let Some(n) = args.top {
        writeln!(stdout, "{}", top_functions(for_tables, n).to_markdown())?;
        wrote = true;
    }
    if let Some(path) = &args.categories {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading categories {}", path.display()))?;
        let groups = categories::parse(&text).with_context(|| format!("in {}", path.display()))?;
        writeln!(
            stdout,
            "{}",
            categories::to_markdown(&categories::shares(for_tables, &groups))
        )?;
        wrote = true;
    }
    if !wrote {
        folded.write_to(BufWriter::new(stdout))?;
    }
    Ok(())
}

fn flame_diff(
    args: &FlameArgs,
    a: &Path,
    b: &Path,
    opts: FoldOptions,
    transforms: &Transforms,
) -> anyhow::Result<ExitCode> {
    let (fa, _) = load_all(&[a.to_path_buf()], opts)?;
    let (fb, event) = load_all(&[b.to_path_buf()], opts)?;
    let (fa, fb) = (transforms.apply(&fa), transforms.apply(&fb));
    let stacks = diff_stacks(&fa, &fb);
    if let Some(path) = &args.output {
        let title = args
            .title
            .clone()
            .unwrap_or_else(|| format!("{} vs {}", b.display(), a.display()));
        let labels = GraphLabels::new(title, event.as_deref());
        write_file(path, |w| Ok(write_diff_graph(&stacks, &labels, w)?))?;
    }
    if let Some(path) = &args.folded {
        write_file(path, |w| Ok(w.write_all(stacks.to_text().as_bytes())?))?;
    }
    let deltas = share_deltas(&fa, &fb, args.top.unwrap_or(20));
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "A = {}\nB = {}\n", a.display(), b.display())?;
    writeln!(stdout, "{}", deltas_markdown(&deltas))?;
    Ok(ExitCode::SUCCESS)
}

fn default_title(inputs: &[PathBuf]) -> String {
    let names: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
    names.join(" + ")
}

fn write_file(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut writer = BufWriter::new(file);
    write(&mut writer).with_context(|| format!("writing {}", path.display()))?;
    writer
        .flush()
        .with_context(|| format!("writing {}", path.display()))
}

fn join_pids(pids: &[i32]) -> String {
    pids.iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Profiles a running process and its descendants (children and threads).
pub fn profile(args: ProfileArgs) -> anyhow::Result<ExitCode> {
    quiet_inferno_panics();
    let dir = args.output.clone().unwrap_or_else(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from(format!("profile-{}-{now}", args.pid[0]))
    });
    let pids = crate::profile::capture::process_tree(&args.pid);
    let summary = capture(&pids, args.seconds, &args.events, &dir)
        .with_context(|| format!("profiling pid {:?} for {} s", args.pid, args.seconds))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "recorded processes: {}", join_pids(&summary.pids))?;
    for (event, reason) in &summary.skipped {
        writeln!(stdout, "{}: not recorded: {reason}", event.stem())?;
    }
    for event in &summary.events {
        writeln!(
            stdout,
            "## {} ({}, {} samples) in {}\n",
            event.event.stem(),
            event.perf_event,
            event.samples,
            dir.display()
        )?;
        writeln!(stdout, "files: {}\n", event.files.join(", "))?;
        writeln!(stdout, "{}", event.top.to_markdown())?;
    }
    Ok(ExitCode::SUCCESS)
}
