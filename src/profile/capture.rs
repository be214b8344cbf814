//! `perf record` around running processes, and the files every profiled step gets.
//!
//! One `perf record -g` per event, all at once, each ending with `sleep SECONDS`; then per
//! event: the `perf script` text (gzip), the folded stacks, the merged and coalesced stacks, a
//! flame graph, user and kernel graphs (CPU event), and a top-functions table (JSON and
//! markdown). Where perf is missing or may not record, a typed error says why, so the runner can
//! note it and go on.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use serde::Serialize;

use super::chain::{fold_chains, largest_paths, paths_markdown, CHAIN_FIELDS};
use super::input::load_bytes;
use super::jvm::{JavaShare, JvmMap};
use super::perf_script::SCRIPT_FIELDS;
use super::render::{diff_stacks, write_diff_graph, write_flame_graph, GraphLabels};
use super::table::{deltas_markdown, share_deltas, top_functions, ShareDelta, TopFunctions};
use super::transform::{Side, Transforms};
use super::{FoldOptions, Folded, ProfileError};
use crate::record::profiles::Event;
pub use crate::record::profiles::{ChainPath, RecordingCost};

// The enum is `record::profiles::Event` (profiles.jsonl names it); how perf calls it is
// the capture's business, so that stays here.
impl Event {
    fn perf_event(self) -> &'static str {
        match self {
            Event::Cpu => cpu_event(),
            Event::Cs => "context-switches",
            Event::Offcpu => "sched:sched_switch,sched:sched_waking",
        }
    }
}

/// The files and figures of one recorded event.
#[derive(Debug, Clone, Serialize)]
pub struct EventProfile {
    /// The event asked for.
    pub event: Event,
    /// The perf event recorded (`cycles`, `cpu-clock`, `context-switches`, ...).
    pub perf_event: String,
    /// Samples in the recording.
    pub samples: u64,
    /// Total weight of the folded stacks (ns for cpu-clock, else samples or events).
    pub total_weight: u64,
    /// perf script lines that could not be read.
    pub garbled_lines: u64,
    /// Files written, relative to the profile directory.
    pub files: Vec<String>,
    /// The top functions of the merged stacks.
    pub top: TopFunctions,
    /// % of the weight in stacks with a lock, futex or scheduler frame (the built-in `sync`
    /// category, `categories::SYNC_PATTERN`).
    pub sync_pct: f64,
    /// How much of the weight runs Java code and how much of that has an unnamed JIT frame;
    /// None when no stack runs Java code.
    pub java: Option<JavaShare>,
    /// What the recording cost (the off-CPU chain recording: every switch and waking of the
    /// machine); None for sampled events.
    pub cost: Option<RecordingCost>,
}

/// What `capture` recorded and wrote.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileSummary {
    /// The directory the files are in.
    pub dir: PathBuf,
    /// The processes recorded.
    pub pids: Vec<i32>,
    /// How long perf recorded, in seconds.
    pub seconds: f64,
    /// One entry per event recorded.
    pub events: Vec<EventProfile>,
    /// Events asked for but not recorded, with the reason.
    pub skipped: Vec<(Event, String)>,
    /// The JVMs among the recorded processes: their perf maps and the advice for them.
    pub jvms: Vec<JvmMap>,
}

/// What `diff_dirs` wrote for one event.
#[derive(Debug, Clone, Serialize)]
pub struct EventDiff {
    /// The event compared.
    pub event: Event,
    /// Files written, relative to the output directory.
    pub files: Vec<String>,
    /// Functions whose inclusive share moved most, largest move first.
    pub deltas: Vec<ShareDelta>,
}

/// How many functions the top and delta tables list.
const TABLE_ROWS: usize = 30;

/// Records `pids` for `seconds` with perf and writes each event's files into `out_dir`.
pub fn capture(
    pids: &[i32],
    seconds: f64,
    events: &[Event],
    out_dir: &Path,
) -> Result<ProfileSummary, ProfileError> {
    check_perf()?;
    if pids.is_empty() || !seconds.is_finite() || seconds <= 0.0 {
        return Err(ProfileError::BadOption {
            what: format!(
                "capture needs at least one pid and seconds > 0 (got {pids:?}, {seconds})"
            ),
        });
    }
    std::fs::create_dir_all(out_dir)
        .map_err(|e| ProfileError::io(format!("creating {}", out_dir.display()), e))?;
    let events = dedup(if events.is_empty() {
        &[Event::Cpu]
    } else {
        events
    });
    let first_maps = super::jvm::first_maps(pids);
    let recordings = record_all(pids, seconds, &events, out_dir);
    // before `perf script` resolves the recordings: JIT code compiled while recording is
    // then in the maps
    let first_maps = first_maps.join().unwrap_or_default();
    let jvms = super::jvm::write_perf_maps(pids, &first_maps, out_dir);
    let mut summary = ProfileSummary {
        dir: out_dir.to_path_buf(),
        pids: pids.to_vec(),
        seconds,
        events: Vec::new(),
        skipped: Vec::new(),
        jvms,
    };
    let mut first_error = None;
    for (event, result) in events.iter().zip(recordings) {
        let processed = result.and_then(|data| match event {
            Event::Offcpu => process_chains(&data, pids, out_dir),
            _ => process_event(*event, &data, out_dir),
        });
        match processed {
            Ok(profile) => summary.events.push(profile),
            Err(e) => {
                summary.skipped.push((*event, e.to_string()));
                first_error.get_or_insert(e);
            }
        }
    }
    if summary.events.is_empty() {
        return Err(first_error.expect("every event failed, so one error exists"));
    }
    write_json(&out_dir.join("summary.json"), &summary)?;
    Ok(summary)
}

/// Every live process in the trees rooted at `roots`: the roots, their children, theirs, ...
/// (from /proc), roots first, each once.
///
/// `perf record -p PID` records every thread of PID and whatever PID forks once perf is
/// attached, but not children already running: nginx's workers under its master would be
/// missed. The runner's profile passes find the server's tree the same way.
pub fn process_tree(roots: &[i32]) -> Vec<i32> {
    let parents = parent_map();
    let mut out: Vec<i32> = Vec::new();
    for &root in roots {
        for pid in crate::machine::procfs::descendants(root, &parents) {
            if !out.contains(&pid) {
                out.push(pid);
            }
        }
    }
    out
}

/// pid → parent pid of every process under /proc.
pub(super) fn parent_map() -> std::collections::BTreeMap<i32, i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse().ok()?;
            // A process may end between listing and reading: leave it out.
            let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
            Some((pid, crate::machine::procfs::parse_pid_stat(&stat)?.ppid))
        })
        .collect()
}

fn dedup(events: &[Event]) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for e in events {
        if !out.contains(e) {
            out.push(*e);
        }
    }
    out
}

/// How long perf may take to start recording (it reads symbols first; slow on a busy machine).
const PERF_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A `perf record` started disabled, with its control FIFOs.
struct Recorder {
    child: std::io::Result<Child>,
    described: String,
    data: PathBuf,
    fifos: [PathBuf; 2],
}

/// Starts one `perf record` per event, enables them all once each is ready, and stops them
/// with SIGINT after `seconds`, so every recording covers the same `seconds`.
///
/// Not `perf record -p PID -- sleep N`: when the sleep ends, perf 6.1 sends SIGTERM to the
/// recorded process too, which would kill the server under test. And perf takes up to a
/// second to start on a busy machine, so the events start disabled (`-D -1`) and are enabled
/// through `--control` when perf is ready, which it acknowledges.
fn record_all(
    pids: &[i32],
    seconds: f64,
    events: &[Event],
    out_dir: &Path,
) -> Vec<Result<PathBuf, ProfileError>> {
    let pid_list = pids
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let mut recorders: Vec<Recorder> = events
        .iter()
        .map(|event| start_recorder(*event, &pid_list, out_dir))
        .collect();
    let controls: Vec<Option<(File, File)>> = recorders.iter_mut().map(enable).collect();
    wait_then_interrupt(&mut recorders, seconds);
    drop(controls);
    recorders
        .into_iter()
        .map(|r| {
            let output = r.child.and_then(|c| c.wait_with_output());
            for fifo in &r.fifos {
                let _ = std::fs::remove_file(fifo);
            }
            check_output(output, &r.described).map(|_| r.data)
        })
        .collect()
}

fn start_recorder(event: Event, pid_list: &str, out_dir: &Path) -> Recorder {
    let stem = event.stem();
    let data = out_dir.join(format!("{stem}.perf.data"));
    let fifos = [
        out_dir.join(format!(".{stem}.ctl.fifo")),
        out_dir.join(format!(".{stem}.ack.fifo")),
    ];
    let control = format!("fifo:{},{}", fifos[0].display(), fifos[1].display());
    let args = record_args(event, pid_list);
    let described = format!(
        "perf record {} -o {} -D -1 --control {control}",
        args.join(" "),
        data.display()
    );
    let made = fifos.iter().try_for_each(|f| {
        let _ = std::fs::remove_file(f);
        nix::unistd::mkfifo(
            f,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .map_err(std::io::Error::from)
    });
    let child = made.and_then(|_| {
        Command::new("perf")
            .arg("record")
            .args(&args)
            .arg("-o")
            .arg(&data)
            .args(["-D", "-1", "--control", &control])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
    });
    Recorder {
        child,
        described,
        data,
        fifos,
    }
}

/// The bound on an off-CPU recording's perf.data: perf stops there, so a server switching
/// millions of times a second cannot fill the disk or the memory `perf script` needs (about
/// 8 bytes of text per byte of perf.data).
pub const OFFCPU_MAX_MB: u64 = 32;

/// `perf record` arguments of one event: CPU and context-switch samples of the processes;
/// for off-CPU chains every `sched_switch` and `sched_waking` of the machine (`-c 1`, no
/// sampling), since a server's threads are woken by others (its client, over loopback).
fn record_args(event: Event, pid_list: &str) -> Vec<String> {
    let words: Vec<&str> = match event {
        Event::Offcpu => vec![
            "-g",
            "-a",
            "-c",
            "1",
            "-e",
            "sched:sched_switch",
            "-e",
            "sched:sched_waking",
        ],
        _ => vec!["-g", "-F", "999", "-e", event.perf_event(), "-p", pid_list],
    };
    let mut args: Vec<String> = words.into_iter().map(String::from).collect();
    if event == Event::Offcpu {
        args.push(format!("--max-size={OFFCPU_MAX_MB}M"));
    }
    args
}

/// Sends `enable` and waits for perf's `ack`; None when perf exited or never answered (the
/// recorder's exit status then says why).
fn enable(recorder: &mut Recorder) -> Option<(File, File)> {
    let child = recorder.child.as_mut().ok()?;
    let deadline = Instant::now() + PERF_START_TIMEOUT;
    let nonblocking = |write: bool, path: &Path| {
        OpenOptions::new()
            .read(!write)
            .write(write)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
    };
    let mut ack = nonblocking(false, &recorder.fifos[1]).ok()?;
    let mut ctl = loop {
        // a FIFO opens for writing only once perf has it open for reading
        if let Ok(f) = nonblocking(true, &recorder.fifos[0]) {
            break f;
        }
        if Instant::now() > deadline || !matches!(child.try_wait(), Ok(None)) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    ctl.write_all(b"enable\n").ok()?;
    let mut buf = [0u8; 16];
    while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
        match ack.read(&mut buf) {
            Ok(n) if n > 0 => return Some((ctl, ack)),
            _ => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    None
}

/// Sleeps until `seconds` have passed (or every recorder has exited), then SIGINTs the rest.
fn wait_then_interrupt(recorders: &mut [Recorder], seconds: f64) {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < deadline {
        let running = recorders
            .iter_mut()
            .filter_map(|r| r.child.as_mut().ok())
            .any(|c| matches!(c.try_wait(), Ok(None)));
        if !running {
            return;
        }
        std::thread::sleep(Duration::from_millis(50).min(deadline - Instant::now()));
    }
    for child in recorders.iter_mut().filter_map(|r| r.child.as_mut().ok()) {
        if matches!(child.try_wait(), Ok(None)) {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT);
        }
    }
}

/// perf record stopped by our SIGINT exits with 130 (or by the signal): that is success.
fn stopped_by_interrupt(status: std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.code() == Some(130) || status.signal() == Some(libc::SIGINT)
}

fn check_output(output: std::io::Result<Output>, described: &str) -> Result<Output, ProfileError> {
    let output = output.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ProfileError::PerfMissing {
            program: "perf".into(),
        },
        _ => ProfileError::io(format!("starting `{described}`"), e),
    })?;
    if output.status.success() || stopped_by_interrupt(output.status) {
        return Ok(output);
    }
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    let lower = stderr.to_lowercase();
    if lower.contains("paranoid") || lower.contains("permission") || lower.contains("not permitted")
    {
        return Err(ProfileError::PerfNotPermitted {
            reason: format!(
                "`{described}` was refused ({}); run as root or lower kernel.perf_event_paranoid",
                first_line(&stderr)
            ),
        });
    }
    Err(ProfileError::PerfFailed {
        command: described.to_string(),
        stderr,
    })
}

fn first_line(text: &str) -> &str {
    text.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(text)
        .trim()
}

fn process_event(event: Event, data: &Path, out_dir: &Path) -> Result<EventProfile, ProfileError> {
    let described = format!("perf script -F {SCRIPT_FIELDS} -i {}", data.display());
    let output = Command::new("perf")
        .args(["script", "-F", SCRIPT_FIELDS, "-i"])
        .arg(data)
        .output();
    let script = check_output(output, &described)?.stdout;
    let stem = event.stem();
    let mut files = Vec::new();
    write_gz(&out_dir.join(format!("{stem}.perf-script.gz")), &script)?;
    files.push(format!("{stem}.perf-script.gz"));
    // The recording is archived as text; the binary perf.data is large and host-bound.
    let _ = std::fs::remove_file(data);
    let opts = FoldOptions {
        annotate_kernel: true,
        annotate_jit: true,
        ..FoldOptions::default()
    };
    let loaded = load_bytes(&script, opts).map_err(|e| match e {
        ProfileError::EmptyInput { .. } => ProfileError::NoSamples {
            what: format!(
                "perf recorded no {} sample for these processes",
                event.perf_event()
            ),
        },
        other => other,
    })?;
    let java = super::jvm::java_share(&loaded.folded);
    let labels = |what: &str| {
        GraphLabels::new(format!("{stem} {what}"), loaded.report.event.as_deref())
            .java(java.is_some())
    };
    let plain = Transforms::default().apply(&loaded.folded);
    let merged = Transforms {
        merge_threads: true,
        ..Transforms::default()
    }
    .apply(&loaded.folded);
    let coalesced = coalesce(&merged);
    write_folded(out_dir, &format!("{stem}.folded"), &plain, &mut files)?;
    write_folded(
        out_dir,
        &format!("{stem}.merged.folded"),
        &merged,
        &mut files,
    )?;
    write_folded(
        out_dir,
        &format!("{stem}.coalesced.folded"),
        &coalesced,
        &mut files,
    )?;
    // the java palette tells kernel frames apart by their marks
    let drawn = if java.is_some() {
        Transforms {
            merge_threads: true,
            coalesce: true,
            keep_kernel_marks: true,
            ..Transforms::default()
        }
        .apply(&loaded.folded)
    } else {
        coalesced.clone()
    };
    write_svg(
        out_dir,
        &format!("{stem}.svg"),
        &drawn,
        &labels("(threads merged, coalesced)"),
        &mut files,
    )?;
    if event == Event::Cpu {
        for side in [Side::User, Side::Kernel] {
            let part = Transforms {
                split: Some(side),
                merge_threads: true,
                coalesce: true,
                ..Transforms::default()
            }
            .apply(&loaded.folded);
            let name = format!("{stem}.{}.svg", side_name(side));
            if !part.is_empty() {
                write_svg(out_dir, &name, &part, &labels(side_name(side)), &mut files)?;
            }
        }
    }
    let top = top_functions(&merged, TABLE_ROWS);
    write_json(&out_dir.join(format!("{stem}.top.json")), &top)?;
    write_text(&out_dir.join(format!("{stem}.top.md")), &top.to_markdown())?;
    files.extend([format!("{stem}.top.json"), format!("{stem}.top.md")]);
    Ok(EventProfile {
        event,
        perf_event: event.perf_event().to_string(),
        samples: loaded.report.samples,
        total_weight: plain.total(),
        garbled_lines: loaded.report.garbled_lines,
        files,
        top,
        sync_pct: super::categories::sync_pct(&merged),
        java,
        cost: None,
    })
}

/// The off-CPU chain graph of a switch and waking recording: folded chains (µs), the graph,
/// the largest blocked-time paths, and what the recording cost.
fn process_chains(data: &Path, pids: &[i32], out_dir: &Path) -> Result<EventProfile, ProfileError> {
    let event = Event::Offcpu;
    let perf_data_bytes = std::fs::metadata(data).map_or(0, |m| m.len());
    let described = format!("perf script -F {CHAIN_FIELDS} -i {}", data.display());
    let output = Command::new("perf")
        .args(["script", "-F", CHAIN_FIELDS, "-i"])
        .arg(data)
        .output();
    let script = check_output(output, &described)?.stdout;
    let _ = std::fs::remove_file(data);
    let tree: HashSet<i32> = pids.iter().copied().collect();
    let (chains, scan) = fold_chains(&String::from_utf8_lossy(&script), &tree);
    drop(script);
    if chains.is_empty() {
        return Err(ProfileError::NoSamples {
            what: format!(
                "no off-CPU interval of these processes ended while perf recorded ({} switches, {} wakings read)",
                scan.switches, scan.wakings
            ),
        });
    }
    let stem = event.stem();
    let mut files = Vec::new();
    write_folded(out_dir, &format!("{stem}.folded"), &chains, &mut files)?;
    // the name the differential graphs look for; chains are not coalesced (it would move
    // the waker's frames below the separator)
    write_folded(
        out_dir,
        &format!("{stem}.coalesced.folded"),
        &chains,
        &mut files,
    )?;
    let labels = GraphLabels {
        title: "off-CPU chain graph: blocked time by blocked stack, topped by the waker's stack and thread".into(),
        count_name: "us".into(),
        java_palette: false,
    };
    write_svg(
        out_dir,
        &format!("{stem}.svg"),
        &chains,
        &labels,
        &mut files,
    )?;
    let paths = largest_paths(&chains, TABLE_ROWS);
    write_json(&out_dir.join(format!("{stem}.paths.json")), &paths)?;
    write_text(
        &out_dir.join(format!("{stem}.paths.md")),
        &paths_markdown(&paths),
    )?;
    files.extend([format!("{stem}.paths.json"), format!("{stem}.paths.md")]);
    let top = top_functions(&chains, TABLE_ROWS);
    write_json(&out_dir.join(format!("{stem}.top.json")), &top)?;
    write_text(&out_dir.join(format!("{stem}.top.md")), &top.to_markdown())?;
    files.extend([format!("{stem}.top.json"), format!("{stem}.top.md")]);
    let events = scan.switches + scan.wakings;
    let span = scan.span_s.max(1e-3);
    Ok(EventProfile {
        event,
        perf_event: event.perf_event().to_string(),
        samples: events,
        total_weight: chains.total(),
        garbled_lines: scan.garbled,
        files,
        top,
        sync_pct: super::categories::sync_pct(&chains),
        java: None,
        cost: Some(RecordingCost {
            events,
            events_per_s: events as f64 / span,
            perf_data_mb: perf_data_bytes as f64 / 1e6,
            perf_data_mb_per_s: perf_data_bytes as f64 / 1e6 / span,
            recorded_s: scan.span_s,
            hit_max_size: perf_data_bytes >= OFFCPU_MAX_MB * 1_000_000 * 95 / 100,
            intervals: scan.intervals,
            woken: scan.woken,
            paths,
        }),
    })
}

fn coalesce(folded: &Folded) -> Folded {
    Transforms {
        coalesce: true,
        ..Transforms::default()
    }
    .apply(folded)
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::User => "user",
        Side::Kernel => "kernel",
    }
}

/// Writes the differential graphs and share-delta tables between two profile directories
/// (A = `a`, B = `b`), for every event both have, into `out`.
pub fn diff_dirs(a: &Path, b: &Path, out: &Path) -> Result<Vec<EventDiff>, ProfileError> {
    std::fs::create_dir_all(out)
        .map_err(|e| ProfileError::io(format!("creating {}", out.display()), e))?;
    let mut diffs = Vec::new();
    for event in [Event::Cpu, Event::Cs, Event::Offcpu] {
        let name = format!("{}.coalesced.folded", event.stem());
        let (fa, fb) = (a.join(&name), b.join(&name));
        if !fa.exists() || !fb.exists() {
            continue;
        }
        let (pa, pb) = (read_folded(&fa)?, read_folded(&fb)?);
        diffs.push(diff_event(event, &pa, &pb, out)?);
    }
    if diffs.is_empty() {
        return Err(ProfileError::NoSamples {
            what: format!(
                "no event profiled in both {} and {} (looked for *.coalesced.folded)",
                a.display(),
                b.display()
            ),
        });
    }
    Ok(diffs)
}

fn diff_event(event: Event, a: &Folded, b: &Folded, out: &Path) -> Result<EventDiff, ProfileError> {
    let stem = event.stem();
    let stacks = diff_stacks(a, b);
    let mut files = Vec::new();
    write_text(&out.join(format!("{stem}.diff.folded")), &stacks.to_text())?;
    files.push(format!("{stem}.diff.folded"));
    let labels = GraphLabels::new(format!("{stem}: B vs A (red grew, blue shrank)"), None);
    let svg = format!("{stem}.diff.svg");
    write_graph_file(&out.join(&svg), |w| write_diff_graph(&stacks, &labels, w))?;
    files.push(svg);
    let deltas = share_deltas(a, b, TABLE_ROWS);
    write_json(&out.join(format!("{stem}.diff.json")), &deltas)?;
    write_text(
        &out.join(format!("{stem}.diff.md")),
        &deltas_markdown(&deltas),
    )?;
    files.extend([format!("{stem}.diff.json"), format!("{stem}.diff.md")]);
    Ok(EventDiff {
        event,
        files,
        deltas,
    })
}

fn read_folded(path: &Path) -> Result<Folded, ProfileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ProfileError::io(format!("reading {}", path.display()), e))?;
    Ok(Folded::parse(&text).folded)
}

fn write_folded(
    dir: &Path,
    name: &str,
    folded: &Folded,
    files: &mut Vec<String>,
) -> Result<(), ProfileError> {
    write_text(&dir.join(name), &folded.to_text())?;
    files.push(name.to_string());
    Ok(())
}

fn write_svg(
    dir: &Path,
    name: &str,
    folded: &Folded,
    labels: &GraphLabels,
    files: &mut Vec<String>,
) -> Result<(), ProfileError> {
    write_graph_file(&dir.join(name), |w| write_flame_graph(folded, labels, w))?;
    files.push(name.to_string());
    Ok(())
}

fn write_graph_file(
    path: &Path,
    draw: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> Result<(), ProfileError>,
) -> Result<(), ProfileError> {
    let file = std::fs::File::create(path)
        .map_err(|e| ProfileError::io(format!("creating {}", path.display()), e))?;
    let mut writer = std::io::BufWriter::new(file);
    draw(&mut writer)?;
    writer
        .flush()
        .map_err(|e| ProfileError::io(format!("writing {}", path.display()), e))
}

fn write_text(path: &Path, text: &str) -> Result<(), ProfileError> {
    std::fs::write(path, text)
        .map_err(|e| ProfileError::io(format!("writing {}", path.display()), e))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ProfileError> {
    let text = serde_json::to_string_pretty(value).expect("profile summaries serialise");
    write_text(path, &text)
}

fn write_gz(path: &Path, bytes: &[u8]) -> Result<(), ProfileError> {
    let file = std::fs::File::create(path)
        .map_err(|e| ProfileError::io(format!("creating {}", path.display()), e))?;
    let mut gz = GzEncoder::new(std::io::BufWriter::new(file), flate2::Compression::fast());
    gz.write_all(bytes)
        .and_then(|_| gz.finish())
        .and_then(|mut w| w.flush())
        .map_err(|e| ProfileError::io(format!("writing {}", path.display()), e))
}

/// Fails with a typed error when perf is missing or may not record on this machine.
pub fn check_perf() -> Result<(), ProfileError> {
    let output = Command::new("perf").arg("--version").output();
    check_output(output, "perf --version")?;
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if let Some(level) = paranoid {
        if level > 2 && !root {
            return Err(ProfileError::PerfNotPermitted {
                reason: format!(
                    "kernel.perf_event_paranoid is {level} and this is not root: \
                     run as root or `sysctl kernel.perf_event_paranoid=1`"
                ),
            });
        }
    }
    Ok(())
}

/// `cycles` where the machine has a hardware PMU, else `cpu-clock` (asked once per process).
pub fn cpu_event() -> &'static str {
    static EVENT: OnceLock<&'static str> = OnceLock::new();
    EVENT.get_or_init(|| {
        let output = Command::new("perf")
            .args(["stat", "-x,", "-e", "cycles", "true"])
            .output();
        match output {
            Ok(out)
                if out.status.success()
                    && !String::from_utf8_lossy(&out.stderr).contains("not supported")
                    && !String::from_utf8_lossy(&out.stderr).contains("not counted") =>
            {
                "cycles"
            }
            _ => "cpu-clock",
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_dirs_of_a_profile_with_itself_is_zero() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::fs::create_dir_all(&a).unwrap();
        std::fs::write(
            a.join("cpu.coalesced.folded"),
            "t;main;x 3\nt;main;y [2] 1\n",
        )
        .unwrap();
        let out = dir.path().join("diff");
        let diffs = diff_dirs(&a, &a, &out).unwrap();
        assert_eq!(diffs.len(), 1);
        assert!(diffs[0].deltas.iter().all(|d| d.delta_points == 0.0));
        let folded = std::fs::read_to_string(out.join("cpu.diff.folded")).unwrap();
        assert_eq!(folded, "t;main;x 3 3\nt;main;y [2] 1 1\n");
        assert!(out.join("cpu.diff.svg").exists());
        assert!(diff_dirs(&a, &dir.path().join("none"), &out).is_err());
    }

    #[test]
    fn bad_arguments_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        if check_perf().is_err() {
            return;
        }
        assert!(capture(&[], 1.0, &[Event::Cpu], dir.path()).is_err());
        assert!(capture(&[1], 0.0, &[Event::Cpu], dir.path()).is_err());
    }
}
