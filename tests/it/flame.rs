//! Flame graphs: folding against inferno's own output, transforms, diffs, speedscope, bad input,
//! and a real perf capture of a small multi-threaded program (tests/data/flame/workers.c).
//!
//! Golden files live in tests/data/flame/; `STAIRBENCH_BLESS=1 cargo test --test it flame::`
//! rewrites the ones this crate produces (never `workers.inferno.folded`, which is
//! `inferno-collapse-perf`'s output for the checked-in capture).

use crate::common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stairbench::profile::render::diff_stacks;
use stairbench::profile::table::{share_deltas, top_functions};
use stairbench::profile::transform::Rename;
use stairbench::profile::{
    capture, diff_dirs, input::load_bytes, load, speedscope, FoldOptions, Folded, Side, Transforms,
};
use stairbench::record::profiles::Event;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/flame")
        .join(name)
}

fn capture_text() -> Vec<u8> {
    let gz = std::fs::read(data("workers.perf-script.gz")).unwrap();
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_end(&mut text)
        .unwrap();
    text
}

fn tool(name: &str) -> bool {
    Command::new(name)
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// inferno-collapse-perf's folding of `text`: `None` when it is not installed (a skip, a
/// failure in CI), `Some(Err(stderr))` when it failed on the input.
fn try_inferno_collapse(text: &[u8]) -> Option<Result<String, String>> {
    if !tool("inferno-collapse-perf") {
        common::skip_or_fail(
            "the inferno CLI comparison: inferno-collapse-perf is not installed (cargo install inferno)",
        );
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.perf-script");
    std::fs::write(&path, text).unwrap();
    let out = Command::new("inferno-collapse-perf")
        .arg(&path)
        .output()
        .unwrap();
    Some(if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    })
}

/// inferno-collapse-perf's folding of a well-formed capture: its failure fails the test.
fn inferno_collapse(text: &[u8]) -> Option<String> {
    try_inferno_collapse(text)
        .map(|r| r.unwrap_or_else(|e| panic!("inferno-collapse-perf failed: {e}")))
}

fn merged_coalesced() -> Transforms {
    Transforms {
        merge_threads: true,
        coalesce: true,
        ..Transforms::default()
    }
}

#[test]
fn checked_in_capture_folds_exactly_like_inferno_collapse_perf() {
    let loaded = load(&data("workers.perf-script.gz"), FoldOptions::default()).unwrap();
    let expected = std::fs::read_to_string(data("workers.inferno.folded")).unwrap();
    assert_eq!(loaded.folded.to_text(), expected);
    assert!(loaded.report.gzip);
    assert_eq!(loaded.report.garbled_lines, 0);
    assert_eq!(loaded.report.event.as_deref(), Some("cpu-clock"));
}

#[test]
fn large_input_folded_in_chunks_equals_inferno() {
    // > 1 MB, so the input is cut into one chunk per core and the outputs merged
    let text = capture_text().repeat(12);
    assert!(text.len() > 2 << 20);
    let loaded = load_bytes(&text, FoldOptions::default()).unwrap();
    let single = load_bytes(&capture_text(), FoldOptions::default()).unwrap();
    assert_eq!(loaded.folded.total(), 12 * single.folded.total());
    assert_eq!(loaded.report.samples, 12 * single.report.samples);
    if let Some(expected) = inferno_collapse(&text) {
        assert_eq!(loaded.folded.to_text(), expected);
    }
    let with_tid = FoldOptions {
        include_tid: true,
        ..FoldOptions::default()
    };
    let tids = load_bytes(&text, with_tid).unwrap();
    assert!(tids.folded.stacks()[0].0.starts_with("worker-0-"));
    assert_eq!(tids.folded.total(), loaded.folded.total());
}

#[test]
fn golden_transforms_of_the_checked_in_capture() {
    let plain = load(&data("workers.perf-script.gz"), FoldOptions::default()).unwrap();
    common::bless_or_compare(
        &data("workers.merged-coalesced.folded"),
        &merged_coalesced().apply(&plain.folded).to_text(),
    );
    let marked = FoldOptions {
        annotate_kernel: true,
        ..FoldOptions::default()
    };
    let marked = load(&data("workers.perf-script.gz"), marked).unwrap();
    for side in [Side::User, Side::Kernel] {
        let t = Transforms {
            split: Some(side),
            merge_threads: true,
            ..Transforms::default()
        };
        common::bless_or_compare(
            &data(&format!("workers.{side:?}.folded").to_lowercase()),
            &t.apply(&marked.folded).to_text(),
        );
    }
    common::bless_or_compare(
        &data("workers.top.md"),
        &top_functions(&plain.folded, 8).to_markdown(),
    );
}

#[test]
fn every_transform_keeps_the_total_weight() {
    let marked = FoldOptions {
        annotate_kernel: true,
        ..FoldOptions::default()
    };
    let loaded = load(&data("workers.perf-script.gz"), marked).unwrap();
    let total = loaded.folded.total();
    let rename: Rename = "worker-([0-9]+)=w$1".parse().unwrap();
    let variants = [
        Transforms::default(),
        merged_coalesced(),
        Transforms {
            demangle: true,
            coalesce: true,
            ..Transforms::default()
        },
        Transforms {
            rename: vec![rename],
            ..Transforms::default()
        },
    ];
    for t in &variants {
        assert_eq!(t.apply(&loaded.folded).total(), total, "{t:?}");
    }
    let side = |s| {
        Transforms {
            split: Some(s),
            ..merged_coalesced()
        }
        .apply(&loaded.folded)
        .total()
    };
    let (user, kernel) = (side(Side::User), side(Side::Kernel));
    assert!(user > 0 && kernel > 0, "user {user} kernel {kernel}");
    assert_eq!(user + kernel, total);
    let merged = merged_coalesced().apply(&loaded.folded);
    assert!(merged
        .stacks()
        .iter()
        .all(|(s, _)| s.starts_with("worker;")));
    assert!(merged
        .stacks()
        .iter()
        .any(|(s, _)| s.contains(";recurse [")));
}

#[test]
fn diff_of_a_profile_with_itself_is_all_zero() {
    let loaded = load(&data("workers.perf-script.gz"), FoldOptions::default()).unwrap();
    let folded = merged_coalesced().apply(&loaded.folded);
    let diff = diff_stacks(&folded, &folded);
    assert!(diff.stacks.values().all(|(a, b)| a == b));
    let deltas = share_deltas(&folded, &folded, 0);
    assert!(!deltas.is_empty());
    assert!(deltas
        .iter()
        .all(|d| d.delta_points == 0.0 && d.a_pct == d.b_pct));
    // the command, end to end
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("diff.svg");
    let out = stairbench(&[
        "flame",
        "--merge-threads",
        "--coalesce",
        "--diff",
        data("workers.perf-script.gz").to_str().unwrap(),
        data("workers.perf-script.gz").to_str().unwrap(),
        "-o",
        svg.to_str().unwrap(),
    ]);
    assert!(out.contains("| recurse |"), "{out}");
    assert!(
        out.lines()
            .filter(|l| l.starts_with("| ")
                && !l.starts_with("| function")
                && !l.starts_with("| ---"))
            .all(|l| l.ends_with("| +0.00 |")),
        "{out}"
    );
    assert!(std::fs::read_to_string(svg).unwrap().contains("<svg"));
}

#[test]
fn speedscope_json_has_the_expected_shape() {
    let loaded = load(&data("workers.perf-script.gz"), FoldOptions::default()).unwrap();
    let json = speedscope::to_json(&loaded.folded, "workers", Some("cpu-clock"));
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(
        v["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    let frames = v["shared"]["frames"].as_array().unwrap();
    let profiles = v["profiles"].as_array().unwrap();
    let names: Vec<&str> = profiles
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["worker-0", "worker-1", "worker-2"]);
    let mut total = 0;
    for p in profiles {
        assert_eq!(p["type"], "sampled");
        assert_eq!(p["unit"], "nanoseconds");
        let samples = p["samples"].as_array().unwrap();
        let weights = p["weights"].as_array().unwrap();
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            for i in s.as_array().unwrap() {
                assert!((i.as_u64().unwrap() as usize) < frames.len());
            }
        }
        let sum: u64 = weights.iter().map(|w| w.as_u64().unwrap()).sum();
        assert_eq!(p["endValue"].as_u64().unwrap(), sum);
        total += sum;
    }
    assert_eq!(total, loaded.folded.total());
}

#[test]
fn garbled_and_truncated_input_is_counted_not_fatal() {
    let text = String::from_utf8(capture_text()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut garbled = String::new();
    for (i, line) in lines.iter().enumerate() {
        match i % 97 {
            13 => garbled.push_str("\u{1F525} garbage \u{00e9}\n"),
            41 => garbled.push_str(&line[..line.len() / 2]),
            _ => garbled.push_str(line),
        }
        garbled.push('\n');
    }
    garbled.truncate(garbled.len() - 40);
    let loaded = load_bytes(garbled.as_bytes(), FoldOptions::default()).unwrap();
    assert!(loaded.report.garbled_lines > 0);
    assert!(loaded.report.truncated);
    let summary = loaded.report.garbled_summary().unwrap();
    assert!(summary.contains("line "), "{summary}");
    match try_inferno_collapse(garbled.as_bytes()) {
        Some(Ok(expected)) => assert_eq!(loaded.folded.to_text(), expected),
        // inferno panics on some garbled inputs (a first stack without an event name), where
        // we count the lines and go on: the panic is the only failure accepted.
        Some(Err(e)) => assert!(e.contains("panicked"), "inferno-collapse-perf: {e}"),
        None => {}
    }
}

#[test]
fn empty_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let err = load(&empty, FoldOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("empty") && err.contains("empty.txt"), "{err}");
    let out = common::cli(&["flame", empty.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("empty"));
}

/// A tiny xorshift, so the random inputs are the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut bytes = base.to_vec();
    for _ in 0..1 + rng.below(8) {
        let at = rng.below(bytes.len());
        match rng.below(6) {
            0 => bytes[at] = rng.next() as u8,
            1 => bytes.truncate(at),
            2 => {
                let end = (at + rng.below(200)).min(bytes.len());
                bytes.drain(at..end);
            }
            3 => bytes
                .splice(at..at, "é;🔥 [3] 12 :\n\n".bytes())
                .for_each(drop),
            4 => bytes
                .splice(at..at, b"x 1/2 3.0: 7 ev:  ff f (m)\n".iter().copied())
                .for_each(drop),
            _ => {
                let end = (at + rng.below(300)).min(bytes.len());
                let copy = bytes[at..end].to_vec();
                let to = rng.below(bytes.len());
                bytes.splice(to..to, copy).for_each(drop);
            }
        }
        if bytes.is_empty() {
            break;
        }
    }
    bytes
}

/// The bounded stand-in for the fuzz target (fuzz/fuzz_targets/flame.rs runs the same checks).
#[test]
fn random_garbled_inputs_never_panic_and_keep_weights() {
    let base = capture_text();
    let mut rng = Rng(0x5eed_f1a3e);
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut runs, mut folded) = (0, 0);
    while Instant::now() < deadline || runs < 50 {
        let input = mutate(&mut rng, &base[..base.len().min(20_000)]);
        folded += usize::from(check_never_panics(&input));
        runs += 1;
    }
    // Most mutations leave stacks to fold: the weight checks ran, not only the error path.
    assert!(
        folded * 2 > runs,
        "{folded} of {runs} mutated inputs folded"
    );
}

/// Folds `input` and checks the transforms keep its weight; false when it was refused.
fn check_never_panics(input: &[u8]) -> bool {
    let opts = FoldOptions {
        annotate_kernel: true,
        ..FoldOptions::default()
    };
    let Ok(loaded) = load_bytes(input, opts) else {
        return false;
    };
    let total = loaded.folded.total();
    let coalesced = merged_coalesced().apply(&loaded.folded);
    assert_eq!(coalesced.total(), total);
    let user = Transforms {
        split: Some(Side::User),
        ..Transforms::default()
    };
    let kernel = Transforms {
        split: Some(Side::Kernel),
        ..Transforms::default()
    };
    assert_eq!(
        user.apply(&loaded.folded).total() + kernel.apply(&loaded.folded).total(),
        total
    );
    let reparsed = Folded::parse(&coalesced.to_text()).folded;
    assert_eq!(reparsed.total(), total);
    let _ = top_functions(&coalesced, 5);
    true
}

fn stairbench(args: &[&str]) -> String {
    let out = common::cli(args);
    assert!(
        out.status.success(),
        "stairbench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn flame_command_writes_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let cats = p("cats.txt");
    std::fs::write(
        &cats,
        "recursion: ^recurse$\nkernel: ^(ksys_|vfs_|do_syscall)\n",
    )
    .unwrap();
    let input = data("workers.perf-script.gz");
    let out = stairbench(&[
        "flame",
        input.to_str().unwrap(),
        "--merge-threads",
        "--coalesce",
        "--split",
        "user",
        "-o",
        &p("u.svg"),
        "--folded",
        &p("u.folded"),
        "--speedscope",
        &p("u.json"),
        "--top",
        "5",
        "--categories",
        &cats,
    ]);
    assert!(out.contains("| function | inclusive % | self % |"), "{out}");
    assert!(out.contains("| recursion |"), "{out}");
    let folded = std::fs::read_to_string(p("u.folded")).unwrap();
    assert!(folded.lines().all(|l| l.starts_with("worker;")), "{folded}");
    assert!(!folded.contains("do_syscall_64"));
    assert!(std::fs::read_to_string(p("u.svg"))
        .unwrap()
        .contains("recurse [12]"));
    assert!(std::fs::read_to_string(p("u.json"))
        .unwrap()
        .contains("\"sampled\""));
    // no output option: folded stacks on stdout, equal to inferno's
    let plain = stairbench(&["flame", input.to_str().unwrap()]);
    assert_eq!(
        plain,
        std::fs::read_to_string(data("workers.inferno.folded")).unwrap()
    );
}

/// Builds tests/data/flame/workers.c into `dir`, or says why not.
fn build_workers(dir: &Path) -> Option<PathBuf> {
    let exe = dir.join("workers");
    let status = Command::new("cc")
        .args([
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",
            "-fno-optimize-sibling-calls",
            "-pthread",
            "-o",
        ])
        .arg(&exe)
        .arg(data("workers.c"))
        .status();
    match status {
        Ok(s) if s.success() => Some(exe),
        other => {
            common::skip_or_fail(format!(
                "the live capture: cannot build workers.c with cc ({other:?})"
            ));
            None
        }
    }
}

#[test]
fn live_capture_of_named_worker_threads() {
    if let Err(e) = stairbench::profile::capture::check_perf() {
        common::skip_or_fail(format!("the live capture: {e}"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(exe) = build_workers(dir.path()) else {
        return;
    };
    let mut child = Command::new(&exe).args(["3", "20"]).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let out = dir.path().join("profile");
    let events = [Event::Cpu, Event::Cs, Event::Offcpu];
    let result = capture(&[child.id() as i32], 1.5, &events, &out);
    let survived = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    let summary = match result {
        Ok(s) => s,
        Err(e @ stairbench::profile::ProfileError::PerfNotPermitted { .. }) => {
            common::skip_or_fail(format!("the live capture: {e}"));
            return;
        }
        Err(e) => panic!("capture failed: {e}"),
    };
    assert!(survived, "the profiled process did not survive the capture");
    assert_eq!(
        summary.events.len() + summary.skipped.len(),
        3,
        "{summary:?}"
    );
    let cpu = &summary.events[0];
    assert_eq!(cpu.event, Event::Cpu);
    assert!(cpu.samples > 10, "{cpu:?}");
    let folded = std::fs::read_to_string(out.join("cpu.folded")).unwrap();
    for thread in ["worker-0;", "worker-1;", "worker-2;"] {
        assert!(folded.contains(thread), "no {thread} in\n{folded}");
    }
    assert!(folded.contains(";recurse;recurse;recurse;recurse"));
    let coalesced = std::fs::read_to_string(out.join("cpu.coalesced.folded")).unwrap();
    assert!(coalesced
        .lines()
        .all(|l| l.starts_with("worker;") || !l.starts_with("worker-")));
    assert!(coalesced.contains(";recurse ["), "{coalesced}");
    let weight = |text: &str| Folded::parse(text).folded.total();
    assert_eq!(weight(&folded), weight(&coalesced));
    for file in [
        "cpu.perf-script.gz",
        "cpu.svg",
        "cpu.user.svg",
        "cpu.top.json",
        "cpu.top.md",
        "summary.json",
    ] {
        assert!(out.join(file).exists(), "{file} missing: {:?}", cpu.files);
    }
    assert!(std::fs::read_to_string(out.join("cpu.top.md"))
        .unwrap()
        .contains("| recurse |"));
    // the archived script folds to the same stacks, with inferno's CLI too
    let gz = load(&out.join("cpu.perf-script.gz"), FoldOptions::default()).unwrap();
    assert_eq!(gz.folded.to_text(), folded);
    let mut script = Vec::new();
    flate2::read::GzDecoder::new(&std::fs::read(out.join("cpu.perf-script.gz")).unwrap()[..])
        .read_to_end(&mut script)
        .unwrap();
    if let Some(expected) = inferno_collapse(&script) {
        assert_eq!(folded, expected);
    }
    let diff = dir.path().join("diff");
    let diffs = diff_dirs(&out, &out, &diff).unwrap();
    assert!(diffs[0].deltas.iter().all(|d| d.delta_points == 0.0));
}

/// Sample header lines (`comm pid/tid time: ...`) of a perf script whose pid is `pid`.
fn samples_of_pid(script: &str, pid: u32) -> usize {
    let prefix = format!("{pid}/");
    script
        .lines()
        .filter(|l| !l.starts_with(char::is_whitespace))
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|w| w.starts_with(&prefix))
        })
        .count()
}

/// nginx's master only waits for signals: its worker answers the requests. `profile --pid
/// MASTER` must record the worker, a child that was running before perf started.
#[test]
fn profile_pid_of_nginx_master_records_its_worker() {
    if let Err(e) = stairbench::profile::capture::check_perf() {
        common::skip_or_fail(format!("perf cannot record here: {e}"));
        return;
    }
    let Some(nginx) = common::start_nginx() else {
        return;
    };
    let master = nginx.process.pgid();
    // nginx listens before it forks its worker: wait for the worker, up to 5 s.
    let deadline = Instant::now() + Duration::from_secs(5);
    let worker = loop {
        let found = common::group_members(master)
            .into_iter()
            .find(|p| *p != master);
        if found.is_some() || Instant::now() >= deadline {
            break found.expect("nginx's worker") as u32;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut load = common::cli_cmd()
        .args(["load", &nginx.url("/"), "-c", "4", "-d", "4s", "-q"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("profile");
    let out = common::cli_cmd()
        .args(["profile", "--pid", &master.to_string(), "--seconds", "1"])
        .arg("-o")
        .arg(&out_dir)
        .output()
        .unwrap();
    let _ = load.kill();
    let _ = load.wait();
    common::assert_success(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!("recorded processes: {master}, {worker}")),
        "{stdout}"
    );
    let gz = std::fs::read(out_dir.join("cpu.perf-script.gz")).unwrap();
    let mut script = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut script)
        .unwrap();
    // cpu-clock at 999 Hz for 1 s of a worker kept busy: hundreds; 10 is far from chance.
    let worker_samples = samples_of_pid(&script, worker);
    assert!(
        worker_samples >= 10,
        "{worker_samples} samples of the worker"
    );
}
