//! The profiles section of report.md and report.html: per profiled level, the throughput
//! while profiling beside the step's, links to the flame graphs (relative to the run
//! directory, where both reports are), the top functions, the differential graph between the
//! busy and the saturated level, and why a level has no profile.

use std::fmt::Write as _;

use crate::record::profiles::{DiffRecord, EventRecord, MissingRecord, PassRecord, ProfileLine};

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
fn links(dir: &str, files: &[String]) -> Vec<(&'static str, String)> {
    files
        .iter()
        .filter_map(|f| Some((file_label(f)?, format!("{dir}/{f}"))))
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

/// The markdown section (empty when the run has no profile line).
pub fn markdown(lines: &[ProfileLine]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("## Profiles\n\nEach profiled level had an extra pass after its series' measured steps, with perf recording; the figures above come from the steps, not from these passes.\n\n");
    for p in passes(lines) {
        md_pass(&mut out, p);
    }
    for d in diffs(lines) {
        md_diff(&mut out, d);
    }
    let absent: Vec<&MissingRecord> = missing(lines).collect();
    if !absent.is_empty() {
        out.push_str("### Not profiled\n\n");
        for m in absent {
            let _ = writeln!(out, "- {}", md(&missing_sentence(m)));
        }
        out.push('\n');
    }
    out
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

fn md_pass(out: &mut String, p: &PassRecord) {
    let _ = writeln!(out, "### {}\n", md(&pass_title(p)));
    let _ = writeln!(out, "{}\n", md(&throughput_sentence(p)));
    if !p.ok {
        let why = p.reason.as_deref().unwrap_or("unknown");
        let _ = writeln!(out, "No profile: {}\n", md(why));
        return;
    }
    if let Some(why) = &p.reason {
        let _ = writeln!(out, "Note: {}\n", md(why));
    }
    for line in jvm_sentences(p) {
        let _ = writeln!(out, "{}\n", md(&line));
    }
    for e in &p.events {
        let files: Vec<String> = links(&p.dir, &e.files)
            .into_iter()
            .map(|(label, path)| format!("[{label}]({path})"))
            .collect();
        let _ = writeln!(out, "{}: {}\n", md(&event_heading(e)), files.join(" · "));
        out.push_str("| function | inclusive % | self % |\n| --- | ---: | ---: |\n");
        for f in &e.top {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.2} |",
                md(&f.name),
                f.inclusive_pct,
                f.self_pct
            );
        }
        out.push('\n');
    }
}

fn md_diff(out: &mut String, d: &DiffRecord) {
    let _ = writeln!(
        out,
        "### {} / {}: {} vs {}\n",
        md(&d.target),
        md(&d.placement),
        md(&d.a_label),
        md(&d.b_label)
    );
    if let Some(why) = &d.reason {
        let _ = writeln!(out, "No differential graph: {}\n", md(why));
    }
    for e in &d.events {
        let files: Vec<String> = links(&d.dir, &e.files)
            .into_iter()
            .map(|(label, path)| format!("[{label}]({path})"))
            .collect();
        let _ = writeln!(
            out,
            "{}: {} (B = {} against A = {}: red grew, blue shrank)\n",
            e.event.stem(),
            files.join(" · "),
            md(&d.b_label),
            md(&d.a_label)
        );
        out.push_str("| function | A % | B % | delta (points) |\n| --- | ---: | ---: | ---: |\n");
        for x in &e.deltas {
            let _ = writeln!(
                out,
                "| {} | {:.2} | {:.2} | {:+.2} |",
                md(&x.name),
                x.a_pct,
                x.b_pct,
                x.delta_points
            );
        }
        out.push('\n');
    }
}

/// Markdown-safe text: no HTML, no table breaks, one line.
fn md(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace('\n', " ")
}

/// The HTML section's body, under its heading (empty when the run has no profile line).
pub fn html(lines: &[ProfileLine]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut out = String::from("<p class=\"note\">Each profiled level had an extra pass after its series' measured steps, with perf recording; the charts above come from the steps, not from these passes.</p>");
    for p in passes(lines) {
        html_pass(&mut out, p);
    }
    for d in diffs(lines) {
        html_diff(&mut out, d);
    }
    let absent: Vec<&MissingRecord> = missing(lines).collect();
    if !absent.is_empty() {
        out.push_str("<h3>Not profiled</h3><ul>");
        for m in absent {
            let _ = write!(out, "<li>{}</li>", esc(&missing_sentence(m)));
        }
        out.push_str("</ul>");
    }
    out
}

fn html_links(out: &mut String, dir: &str, files: &[String]) {
    let anchors: Vec<String> = links(dir, files)
        .into_iter()
        .map(|(label, path)| format!("<a href=\"{}\">{label}</a>", esc(&path)))
        .collect();
    out.push_str(&anchors.join(" · "));
}

fn html_pass(out: &mut String, p: &PassRecord) {
    let _ = write!(
        out,
        "<h3>{}</h3><p>{}</p>",
        esc(&pass_title(p)),
        esc(&throughput_sentence(p))
    );
    if !p.ok {
        let why = p.reason.as_deref().unwrap_or("unknown");
        let _ = write!(out, "<p>No profile: {}</p>", esc(why));
        return;
    }
    if let Some(why) = &p.reason {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(why));
    }
    for line in jvm_sentences(p) {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(&line));
    }
    for e in &p.events {
        let _ = write!(out, "<p>{}: ", esc(&event_heading(e)));
        html_links(out, &p.dir, &e.files);
        out.push_str("</p>");
        let graph = format!("{}/{}.svg", p.dir, e.event.stem());
        if e.files
            .iter()
            .any(|f| *f == format!("{}.svg", e.event.stem()))
        {
            let _ = write!(
                out,
                "<figure><a href=\"{0}\"><img src=\"{0}\" alt=\"flame graph\" style=\"max-width:100%\" loading=\"lazy\"></a></figure>",
                esc(&graph)
            );
        }
        let rows: Vec<[String; 3]> = e
            .top
            .iter()
            .map(|f| {
                [
                    f.name.clone(),
                    format!("{:.2}", f.inclusive_pct),
                    format!("{:.2}", f.self_pct),
                ]
            })
            .collect();
        html_table(out, &["function", "inclusive %", "self %"], &rows);
    }
}

fn html_diff(out: &mut String, d: &DiffRecord) {
    let _ = write!(
        out,
        "<h3>{} / {}: {} vs {}</h3>",
        esc(&d.target),
        esc(&d.placement),
        esc(&d.a_label),
        esc(&d.b_label)
    );
    if let Some(why) = &d.reason {
        let _ = write!(out, "<p>No differential graph: {}</p>", esc(why));
    }
    for e in &d.events {
        let _ = write!(out, "<p>{}: ", e.event.stem());
        html_links(out, &d.dir, &e.files);
        out.push_str(" (red grew, blue shrank)</p>");
        let rows: Vec<[String; 4]> = e
            .deltas
            .iter()
            .map(|x| {
                [
                    x.name.clone(),
                    format!("{:.2}", x.a_pct),
                    format!("{:.2}", x.b_pct),
                    format!("{:+.2}", x.delta_points),
                ]
            })
            .collect();
        html_table(out, &["function", "A %", "B %", "delta (points)"], &rows);
    }
}

fn html_table<const N: usize>(out: &mut String, header: &[&str; N], rows: &[[String; N]]) {
    let cells = header.iter().enumerate().map(|(i, h)| (i, *h)).chain(
        rows.iter()
            .flat_map(|r| r.iter().enumerate().map(|(i, c)| (i, c.as_str()))),
    );
    out.push_str(&super::table_box::table_open(cells));
    out.push_str("<thead><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for (i, cell) in row.iter().enumerate() {
            let class = if i > 0 { " class=\"num\"" } else { "" };
            let _ = write!(out, "<td{class}>{}</td>", esc(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody>");
    out.push_str(super::table_box::TABLE_CLOSE);
}

fn esc(text: &str) -> String {
    super::svg::escape(text)
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
        assert_eq!(html(&[]), "");
    }
}
