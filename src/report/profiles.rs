//! The profiles section of report.md and report.html: per profiled level, the throughput
//! while profiling beside the step's, links to the flame graphs (relative to the run
//! directory, where both reports are), the top functions, the differential graph between the
//! busy and the saturated level, and why a level has no profile.

use super::doc::{Doc, Table};
use crate::record::profiles::{
    DiffRecord, EventRecord, MissingRecord, PassRecord, ProfileLine, RecordingCost,
};

/// What a file of a profile directory is, for its link (None: not linked).
fn file_label(name: &str) -> Option<&'static str> {
    let (_, rest) = name.split_once('.')?;
    Some(match rest {
        "svg" => "flame graph",
        "user.svg" => "user",
        "kernel.svg" => "kernel",
        "diff.svg" => "differential flame graph",
        "merged.folded" => "folded stacks",
        "perf-script.gz" => "perf script",
        "top.md" => "top functions",
        "paths.md" => "largest blocked-time paths",
        "diff.md" => "share deltas",
        _ => return None,
    })
}

fn passes(lines: &[ProfileLine]) -> impl Iterator<Item = &PassRecord> {
    lines.iter().filter_map(|l| match l {
        ProfileLine::Pass(p) => Some(p),
        _ => None,
    })
}

fn diffs(lines: &[ProfileLine]) -> impl Iterator<Item = &DiffRecord> {
    lines.iter().filter_map(|l| match l {
        ProfileLine::Diff(d) => Some(d),
        _ => None,
    })
}

fn missing(lines: &[ProfileLine]) -> impl Iterator<Item = &MissingRecord> {
    lines.iter().filter_map(|l| match l {
        ProfileLine::Missing(m) => Some(m),
        _ => None,
    })
}

/// "reactor / shared: 4 clients (busy)".
fn pass_title(p: &PassRecord) -> String {
    let load = match p.rate_rps {
        Some(r) => format!("{} clients @ {r:.0}/s", p.clients),
        None => format!("{} clients", p.clients),
    };
    format!(
        "{} / {}: {load} ({})",
        p.target,
        p.placement,
        p.levels.join(", ")
    )
}

/// "Throughput while profiling: 41230 requests/s, 3.2% below the step's (42590 requests/s)".
pub fn throughput_sentence(p: &PassRecord) -> String {
    let Some(during) = p.throughput_rps else {
        return format!(
            "The pass measured no throughput (the step's: {:.0} requests/s).",
            p.step_throughput_rps
        );
    };
    let change = match p.change_pct() {
        Some(c) if c < 0.0 => format!("{:.1}% below the step's", -c),
        Some(c) => format!("{c:.1}% above the step's"),
        None => "the step's".to_string(),
    };
    let window = p.window_s.map_or(String::new(), |w| {
        format!(" over the pass's {w:.1} s window")
    });
    format!(
        "Throughput while profiling: {during:.0} requests/s, {change} ({:.0} requests/s){window}; perf recorded the {} for {} s.",
        p.step_throughput_rps,
        profiled_name(p),
        p.seconds
    )
}

fn profiled_name(p: &PassRecord) -> &'static str {
    match p.profiled {
        crate::record::profiles::ProfileTarget::Server => "server",
        crate::record::profiles::ProfileTarget::Client => "client",
        crate::record::profiles::ProfileTarget::Both => "server and client",
    }
}

/// Linked files of one event: (label, path relative to the run directory).
fn links(dir: &str, files: &[String]) -> Vec<(String, String)> {
    files
        .iter()
        .filter_map(|f| Some((file_label(f)?.to_string(), format!("{dir}/{f}"))))
        .collect()
}

fn event_heading(e: &EventRecord) -> String {
    let java = e.java.as_ref().map_or(String::new(), |j| {
        format!(
            "; Java code in {:.1}% of the weight, {:.1}% of that with an unnamed JIT frame",
            j.java_pct, j.unnamed_jit_pct
        )
    });
    format!(
        "{} ({}, {} samples{java})",
        e.event.stem(),
        e.perf_event,
        e.samples
    )
}

/// What an off-CPU chain recording cost, and how many of its intervals had a waker.
fn cost_sentence(c: &RecordingCost) -> String {
    let bound = if c.hit_max_size {
        " (perf stopped at its size bound)"
    } else {
        ""
    };
    format!(
        "The chain graph recorded every switch and waking of the machine: {} events in {:.1} s ({:.0}/s), {:.1} MB of perf.data ({:.1} MB/s){bound}; {} off-CPU intervals of the server's threads, {} of them with their waker.",
        c.events, c.recorded_s, c.events_per_s, c.perf_data_mb, c.perf_data_mb_per_s, c.intervals, c.woken
    )
}

fn path_rows(c: &RecordingCost) -> Vec<[String; 6]> {
    c.paths
        .iter()
        .take(10)
        .map(|p| {
            [
                p.blocked_thread.clone(),
                p.blocked_in.clone(),
                p.waker_thread.clone(),
                p.woken_from.clone(),
                format!("{:.1}", p.blocked_ms),
                format!("{:.1}", p.share_pct),
            ]
        })
        .collect()
}

const PATH_HEADER: [&str; 6] = [
    "blocked thread",
    "blocked in",
    "woken by",
    "waker in",
    "blocked ms",
    "share %",
];

/// One sentence per recorded JVM: its perf map, then any advice.
fn jvm_sentences(p: &PassRecord) -> Vec<String> {
    let mut out = Vec::new();
    for j in &p.jvms {
        let map = match &j.map_file {
            Some(f) => format!(
                "JVM {}: JIT frames named from its perf map ({} symbols, {}/{f}).",
                j.pid, j.symbols, p.dir
            ),
            None => format!("JVM {}: no perf map, JIT frames unnamed.", j.pid),
        };
        out.push(map);
        out.extend(j.advice.iter().cloned());
    }
    out
}

/// The section's body; its heading is the caller's (report.md lists it, the page does not).
/// Empty when the run has no profile line.
pub fn doc(lines: &[ProfileLine]) -> Doc {
    let mut d = Doc::new();
    if lines.is_empty() {
        return d;
    }
    d.note("Each profiled level had an extra pass after its series' measured steps, with perf recording; the figures and charts above come from the steps, not from these passes.");
    for p in passes(lines) {
        pass_doc(&mut d, p);
    }
    for x in diffs(lines) {
        diff_doc(&mut d, x);
    }
    let absent: Vec<String> = missing(lines).map(missing_sentence).collect();
    if !absent.is_empty() {
        d.subheading("Not profiled");
        d.list(absent);
    }
    d
}

/// report.md's profiles section (empty when the run has no profile line).
pub fn markdown(lines: &[ProfileLine]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    format!("## Profiles\n\n{}", doc(lines).to_markdown())
}

/// report.html's profiles section body, under its heading.
pub fn html(lines: &[ProfileLine]) -> String {
    doc(lines).to_html().html
}

/// "reactor / shared, busy: no busy point: ..." or "reactor / shared: no profile: ...".
pub fn missing_sentence(m: &MissingRecord) -> String {
    match &m.level {
        Some(level) => format!(
            "{} / {}, {level}: no profile: {}",
            m.target, m.placement, m.reason
        ),
        None => format!("{} / {}: no profile: {}", m.target, m.placement, m.reason),
    }
}

fn pass_doc(d: &mut Doc, p: &PassRecord) {
    d.subheading(pass_title(p));
    d.paragraph(throughput_sentence(p));
    if !p.ok {
        let why = p.reason.as_deref().unwrap_or("unknown");
        d.paragraph(format!("No profile: {why}"));
        return;
    }
    if let Some(why) = &p.reason {
        d.note(format!("Note: {why}"));
    }
    for line in jvm_sentences(p) {
        d.note(line);
    }
    for e in &p.events {
        d.links(event_heading(e), links(&p.dir, &e.files), "");
        let graph = format!("{}.svg", e.event.stem());
        if e.files.contains(&graph) {
            d.image(format!("{}/{graph}", p.dir), "flame graph");
        }
        let mut top = Table::new(&["function", "inclusive %", "self %"], "lrr");
        for f in &e.top {
            let pct = |x: f64| format!("{x:.2}");
            top.row(vec![f.name.clone(), pct(f.inclusive_pct), pct(f.self_pct)]);
        }
        d.table(top);
        if let Some(c) = &e.cost {
            d.paragraph(cost_sentence(c));
            let mut paths = Table::new(&PATH_HEADER, "llllrr");
            for row in path_rows(c) {
                paths.row(row.to_vec());
            }
            d.table(paths);
        }
    }
}

fn diff_doc(d: &mut Doc, x: &DiffRecord) {
    d.subheading(format!(
        "{} / {}: {} vs {}",
        x.target, x.placement, x.a_label, x.b_label
    ));
    if let Some(why) = &x.reason {
        d.paragraph(format!("No differential graph: {why}"));
    }
    for e in &x.events {
        let tail = format!(
            " (B = {} against A = {}: red grew, blue shrank)",
            x.b_label, x.a_label
        );
        d.links(e.event.stem(), links(&x.dir, &e.files), &tail);
        let mut deltas = Table::new(&["function", "A %", "B %", "delta (points)"], "lrrr");
        for r in &e.deltas {
            deltas.row(vec![
                r.name.clone(),
                format!("{:.2}", r.a_pct),
                format!("{:.2}", r.b_pct),
                format!("{:+.2}", r.delta_points),
            ]);
        }
        d.table(deltas);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::profiles::{DeltaRow, DiffEventRecord, Event, FunctionRow, ProfileTarget};

    fn pass(ok: bool) -> PassRecord {
        PassRecord {
            step: "a.p.c4.r0".into(),
            target: "a<b>".into(),
            placement: "p".into(),
            clients: 4,
            rate_rps: None,
            levels: vec!["busy".into()],
            profiled: ProfileTarget::Server,
            seconds: 10.0,
            dir: "profiles/a.p.c4.r0".into(),
            step_throughput_rps: 1000.0,
            throughput_rps: Some(968.0),
            window_s: Some(11.0),
            ok,
            reason: (!ok).then(|| "perf failed".to_string()),
            events: vec![EventRecord {
                event: Event::Cpu,
                perf_event: "cpu-clock".into(),
                samples: 9990,
                garbled_lines: 0,
                files: vec!["cpu.svg".into(), "cpu.user.svg".into(), "cpu.folded".into()],
                top: vec![FunctionRow {
                    name: "do|work".into(),
                    inclusive_pct: 50.0,
                    self_pct: 12.5,
                }],
                sync_pct: Some(3.0),
                java: None,
                cost: None,
            }],
            jvms: vec![],
        }
    }

    fn lines() -> Vec<ProfileLine> {
        vec![
            ProfileLine::Pass(pass(true)),
            ProfileLine::Diff(DiffRecord {
                target: "a".into(),
                placement: "p".into(),
                a: "x".into(),
                b: "y".into(),
                a_label: "busy (2 clients)".into(),
                b_label: "saturated (4 clients)".into(),
                dir: "profiles/diff-x-vs-y".into(),
                reason: None,
                events: vec![DiffEventRecord {
                    event: Event::Cpu,
                    files: vec!["cpu.diff.svg".into(), "cpu.diff.md".into()],
                    deltas: vec![DeltaRow {
                        name: "f".into(),
                        a_pct: 10.0,
                        b_pct: 15.0,
                        delta_points: 5.0,
                    }],
                }],
            }),
            ProfileLine::Missing(MissingRecord {
                target: "a".into(),
                placement: "q".into(),
                level: None,
                reason: "perf is not installed".into(),
            }),
        ]
    }

    #[test]
    fn markdown_links_tables_and_reasons() {
        let md = markdown(&lines());
        assert!(md.contains("### a&lt;b&gt; / p: 4 clients (busy)"), "{md}");
        assert!(
            md.contains("Throughput while profiling: 968 requests/s, 3.2% below the step's (1000 requests/s)"),
            "{md}"
        );
        assert!(md.contains("[flame graph](profiles/a.p.c4.r0/cpu.svg) · [user](profiles/a.p.c4.r0/cpu.user.svg)"), "{md}");
        assert!(md.contains("| do\\|work | 50.00 | 12.50 |"), "{md}");
        assert!(
            md.contains("[differential flame graph](profiles/diff-x-vs-y/cpu.diff.svg)"),
            "{md}"
        );
        assert!(md.contains("| f | 10.00 | 15.00 | +5.00 |"), "{md}");
        assert!(
            md.contains("- a / q: no profile: perf is not installed"),
            "{md}"
        );
        assert_eq!(markdown(&[]), "");
    }

    #[test]
    fn a_failed_pass_says_why() {
        let md = markdown(&[ProfileLine::Pass(pass(false))]);
        assert!(md.contains("No profile: perf failed"), "{md}");
        assert!(!md.contains("flame graph"), "{md}");
    }

    #[test]
    fn html_section_links_the_graphs_and_says_why_a_level_is_missing() {
        let section = html(&lines());
        assert!(section.contains("<a href=\"profiles/a.p.c4.r0/cpu.svg\">flame graph</a>"));
        assert!(section.contains("<img src=\"profiles/a.p.c4.r0/cpu.svg\""));
        assert!(section.contains("a&lt;b&gt;"));
        assert!(section.contains("<li>a / q: no profile: perf is not installed</li>"));
        // One model for both: the page says which side is which, as report.md does.
        let tail =
            "(B = saturated (4 clients) against A = busy (2 clients): red grew, blue shrank)";
        assert!(section.contains(tail), "{section}");
        assert!(markdown(&lines()).contains(tail));
        assert!(
            section.contains("<td class=\"num\">+5.00</td>"),
            "{section}"
        );
        assert_eq!(html(&[]), "");
    }
}
