//! What other hosts cost a run, as the run records it (`set_up` per host in environment.json,
//! `groups_overhead` and each group's part in steps.jsonl): the check every run over hosts
//! makes of those figures, and the comparison of Slurm hosts with ssh hosts on the same
//! namespace cluster (ignored: `bench/slurm_vs_ssh.sh` runs it).

use crate::common;
use crate::slurm_lab::{with_slurm, SlurmLab};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde_json::Value;

/// Checks a finished run's overhead figures against what else it wrote: each host in `hosts`
/// set up once (`environment.json`), and in each ok step with client groups the step figures
/// are their groups' (margin the smallest, fetch the largest, spread from the windows), a
/// remote group's fetch ends when its files are on disk (their mtime) and lies within the
/// step, a group here has no fetch. Returns the ok steps' `groups_overhead`.
pub(crate) fn assert_overhead_consistent(dir: &Path, hosts: &[&str]) -> Vec<Value> {
    let env: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("environment.json")).unwrap())
            .unwrap();
    for h in hosts {
        let set_up = &env["hosts"][h]["set_up"];
        let f = |k: &str| {
            set_up[k]
                .as_f64()
                .unwrap_or_else(|| panic!("{h}: {k}: {set_up}"))
        };
        assert!(f("check_ms") > 0.0 && f("binary_ms") > 0.0, "{h}: {set_up}");
        assert!(
            f("total_ms") >= f("check_ms") + f("binary_ms"),
            "{h}: {set_up}"
        );
        eprintln!("figures: {h} set_up {set_up}");
    }
    let mut overheads = Vec::new();
    for step in common::steps_json(dir)
        .iter()
        .filter(|s| s["status"] == "ok")
    {
        let over = &step["groups_overhead"];
        let groups = step["per_host"].as_array().expect("per_host");
        // An ok step's groups measured the span its observers did; one more window (the
        // observers') can only shrink the groups' overlap.
        let observed = step["observed_window_overlap"]
            .as_f64()
            .expect("observed overlap");
        let among = step["window_overlap"].as_f64().expect("window_overlap");
        assert!((0.95..=among + 1e-9).contains(&observed), "{step}");
        let lead_us = over["start_lead_ms"].as_f64().unwrap() * 1e3;
        let ready: Vec<f64> = groups
            .iter()
            .map(|g| g["ready_before_start_us"].as_f64().unwrap())
            .collect();
        // Nothing is ready before the start was planned.
        assert!(ready.iter().all(|&r| r < lead_us), "{step}");
        let margin = ready.iter().copied().fold(f64::INFINITY, f64::min);
        assert_eq!(over["start_margin_us"].as_f64(), Some(margin), "{step}");
        let starts: Vec<i64> = groups
            .iter()
            .map(|g| g["window_unix_ns"][0].as_i64().unwrap())
            .collect();
        let spread_ns = starts.iter().max().unwrap() - starts.iter().min().unwrap();
        let spread_us = over["start_spread_us"].as_f64().unwrap();
        assert_eq!(spread_us, spread_ns as f64 / 1e3, "{step}");
        let late: Vec<f64> = groups
            .iter()
            .map(|g| g["start_late_us"].as_f64().unwrap())
            .collect();
        let late_spread = late.iter().copied().fold(f64::MIN, f64::max)
            - late.iter().copied().fold(f64::MAX, f64::min);
        assert!((late_spread - spread_us).abs() < 0.01, "{step}");
        let mut slowest: Option<f64> = None;
        for (k, g) in groups.iter().enumerate() {
            if g["host"] == "local" {
                assert!(g.get("fetch_ms").is_none(), "{g}");
                continue;
            }
            let fetch_ms = g["fetch_ms"].as_f64().expect("a remote group's fetch_ms");
            let raw = dir
                .join("hosts")
                .join(format!("{}.g{k}.raw.jsonl", step["id"].as_str().unwrap()));
            let mtime_ns = std::fs::metadata(&raw)
                .unwrap()
                .modified()
                .unwrap()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as f64;
            let window_end_ns = g["window_unix_ns"][1].as_i64().unwrap() as f64;
            let on_disk_ms = (mtime_ns - window_end_ns) / 1e6;
            // Written just before the instant taken: within a few ms (the clock offset's
            // error and the file system's timestamp granularity).
            assert!(
                fetch_ms > 0.0 && (fetch_ms - on_disk_ms).abs() < 20.0,
                "group {k}: fetch {fetch_ms} ms, its file written {on_disk_ms} ms after its window"
            );
            let step_so_far_ms = mtime_ns / 1e6 - step["started_unix_s"].as_f64().unwrap() * 1e3;
            assert!(fetch_ms < step_so_far_ms, "{fetch_ms} ms: {step}");
            slowest = Some(slowest.map_or(fetch_ms, |s| s.max(fetch_ms)));
        }
        assert_eq!(over["fetch_ms"].as_f64(), slowest, "{step}");
        eprintln!("figures: {} groups_overhead {over}", step["id"]);
        overheads.push(over.clone());
    }
    overheads
}

/// Steps of the comparison's spec (their client counts).
const STEPS: [usize; 3] = [2, 4, 6];

/// Rounds of the comparison, each running Slurm and ssh (alternating which goes first):
/// `STAIRBENCH_ROUNDS`, else 5.
fn rounds() -> usize {
    std::env::var("STAIRBENCH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
}

/// The spec: a server on the first host, a client group on each of the two others.
fn spec(hosts: &str) -> String {
    let clients: Vec<String> = STEPS.iter().map(ToString::to_string).collect();
    format!(
        "name = \"overhead\"\nduration = \"1s\"\nwarmup = \"500ms\"\nclients = [{}]\n\
         placements = [\"shared\"]\n[hosts]\n{hosts}\
         [[targets]]\nname = \"reactor\"\nbuiltin = \"msgr --arch reactor\"\nhost = \"srv\"\n\
         [[client.groups]]\nhost = \"c1\"\n[[client.groups]]\nhost = \"c2\"\n",
        clients.join(", ")
    )
}

const NAMES: [&str; 3] = ["srv", "c1", "c2"];

/// `[hosts]` over ssh to the cluster's nodes, each in a working directory of its own.
fn ssh_hosts(cluster: &SlurmLab, work: &Path) -> String {
    let mut out = String::new();
    for (name, host) in NAMES.iter().zip(&cluster.lab.hosts) {
        let spec = &host.spec;
        out.push_str(&format!(
            "{name} = {{ url = \"{}\", identity_file = \"{}\", workdir = \"{}\", known_hosts_file = \"{}\" }}\n",
            spec.url(),
            spec.identity_file.as_ref().unwrap().display(),
            work.join(name).display(),
            spec.known_hosts_file.as_ref().unwrap().display()
        ));
    }
    out
}

/// `[hosts]` over the allocation's nodes, each in a working directory of its own.
fn slurm_hosts(work: &Path) -> String {
    let mut out = String::new();
    for (i, name) in NAMES.iter().enumerate() {
        out.push_str(&format!(
            "{name} = {{ url = \"slurm://+{i}\", workdir = \"{}\" }}\n",
            work.join(name).display()
        ));
    }
    out
}

/// One run's figures.
#[derive(Default)]
struct Figures {
    set_up_ms: Vec<f64>,
    check_ms: Vec<f64>,
    binary_ms: Vec<f64>,
    fetch_ms: Vec<f64>,
    margin_us: Vec<f64>,
    spread_us: Vec<f64>,
    true_spread_us: Vec<f64>,
    lead_ms: Vec<f64>,
    run_s: Vec<f64>,
}

impl Figures {
    fn add(&mut self, dir: &Path, run_s: f64) {
        let env: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("environment.json")).unwrap())
                .unwrap();
        for h in NAMES {
            let s = &env["hosts"][h]["set_up"];
            self.set_up_ms.push(s["total_ms"].as_f64().unwrap());
            self.check_ms.push(s["check_ms"].as_f64().unwrap());
            self.binary_ms.push(s["binary_ms"].as_f64().unwrap());
            assert_eq!(env["hosts"][h]["binary"], "copied", "{h}");
        }
        let overheads = assert_overhead_consistent(dir, &NAMES);
        assert_eq!(overheads.len(), STEPS.len(), "every step ok");
        // The lab's hosts read this machine's clock: a group's real start is its recorded one
        // plus its host's measured offset (the offset's error).
        for step in common::steps_json(dir) {
            let real: Vec<f64> = (step["per_host"].as_array().unwrap().iter())
                .map(|g| {
                    let offset_ns =
                        &env["hosts"][g["host"].as_str().unwrap()]["clock_offset"]["offset_ns"];
                    g["start_late_us"].as_f64().unwrap() + offset_ns.as_f64().unwrap() / 1e3
                })
                .collect();
            let hi = real.iter().copied().fold(f64::MIN, f64::max);
            let lo = real.iter().copied().fold(f64::MAX, f64::min);
            self.true_spread_us.push(hi - lo);
        }
        for o in overheads {
            let f = |k: &str| o[k].as_f64().unwrap();
            self.fetch_ms.push(f("fetch_ms"));
            self.margin_us.push(f("start_margin_us"));
            self.spread_us.push(f("start_spread_us"));
            self.lead_ms.push(f("start_lead_ms"));
        }
        self.run_s.push(run_s);
    }
}

impl Figures {
    /// The figures as the table prints them, by name.
    fn rows(&self) -> [(&'static str, &[f64]); 9] {
        [
            ("host set-up (ms)", &self.set_up_ms),
            ("  of which check (ms)", &self.check_ms),
            ("  of which binary (ms)", &self.binary_ms),
            ("step fetch, slowest group (ms)", &self.fetch_ms),
            ("start margin, last group (µs)", &self.margin_us),
            ("start spread, recorded (µs)", &self.spread_us),
            (
                "start spread, real (lab: one clock) (µs)",
                &self.true_spread_us,
            ),
            ("start lead (ms)", &self.lead_ms),
            ("whole run (s)", &self.run_s),
        ]
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn range(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{lo:.1}–{hi:.1}")
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs the spec over ssh to the nodes (from here) or on Slurm hosts (inside `salloc -N 3`),
/// with the binary from `bin` (which no node sees: both copy it); its run directory and wall
/// time.
fn run_once(cluster: &SlurmLab, bin: &Path, slurm: bool, tag: &str) -> (PathBuf, f64) {
    let work = cluster.dir.join(tag);
    std::fs::create_dir_all(&work).unwrap();
    let text = if slurm {
        spec(&slurm_hosts(&work))
    } else {
        spec(&ssh_hosts(cluster, &work))
    };
    let spec_path = work.join("spec.toml");
    std::fs::write(&spec_path, text).unwrap();
    let dir = work.join("run");
    let (spec_arg, dir_arg) = (spec_path.to_str().unwrap(), dir.to_str().unwrap());
    let bin_arg = bin.to_str().unwrap();
    let started = Instant::now();
    let out = if slurm {
        let args = [
            "--quiet", "-N", "3", bin_arg, "run", spec_arg, "--out", dir_arg,
        ];
        cluster.run(Duration::from_secs(300), "salloc", &args)
    } else {
        let args = [
            "-s", "KILL", "300", bin_arg, "run", spec_arg, "--out", dir_arg,
        ];
        std::process::Command::new("timeout")
            .args(args)
            .output()
            .unwrap()
    };
    let took = started.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{tag}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        cluster.logs()
    );
    (dir, took)
}

/// The same three-host spec over ssh and over Slurm on the namespace cluster, alternating
/// which runs first, [`rounds`] times each; prints the medians, ranges and Slurm/ssh ratios of
/// set-up, fetch and the common start.
#[test]
#[ignore = "a benchmark: bench/slurm_vs_ssh.sh runs it"]
fn slurm_vs_ssh_overhead() {
    with_slurm(3, |cluster| {
        let bin_dir = tempfile::tempdir().unwrap();
        let bin = bin_dir.path().join("stairbench");
        std::fs::copy(common::stairbench_bin(), &bin).unwrap();
        let load_before = load_average();
        let (mut ssh, mut slurm) = (Figures::default(), Figures::default());
        for round in 0..rounds() {
            let order = if round % 2 == 0 {
                [false, true]
            } else {
                [true, false]
            };
            for on_slurm in order {
                let tag = format!("{}-{round}", if on_slurm { "slurm" } else { "ssh" });
                let (dir, took) = run_once(cluster, &bin, on_slurm, &tag);
                let figures = if on_slurm { &mut slurm } else { &mut ssh };
                figures.add(&dir, took);
                eprintln!("{tag}: {took:.1} s");
            }
        }
        println!(
            "slurm lab up in {:.2} s; {} rounds, {} steps a run; load average before {load_before}, after {}",
            cluster.up_s,
            rounds(),
            STEPS.len(),
            load_average()
        );
        println!("| figure | ssh median (range) | Slurm median (range) | Slurm / ssh |");
        println!("| --- | ---: | ---: | ---: |");
        for ((name, a), (_, b)) in ssh.rows().into_iter().zip(slurm.rows()) {
            println!(
                "| {name} | {:.1} ({}) | {:.1} ({}) | {:.2} |",
                median(a),
                range(a),
                median(b),
                range(b),
                median(b) / median(a)
            );
        }
    });
}
