//! Exporters of a run directory, one per format behind one trait.
//!
//! A run directory is read once ([`RunData::read`]) and analysed once ([`Report::new`]); each
//! exporter turns that one [`Report`] into one file. `stairbench report DIR` and the end of
//! every run call [`write_all`].

pub mod budget;
pub mod cell;
pub mod compare;
pub mod conditions;
pub mod csv;
pub mod diagnosis;
pub mod doc;
pub mod extras;
pub mod findings;
pub mod gates;
pub mod history_html;
pub mod html;
pub mod json;
pub mod junit;
pub mod kvd;
pub mod markdown;
pub mod profiles;
pub mod study;
pub mod svg;
pub mod table_box;

use std::path::Path;

use crate::analyze::run::{analyze, RunAnalysis};
pub use crate::record::run::{ReadError, RunData};

/// What every exporter renders: a run read once and its analysis, computed once from it, so
/// report.md, report.html, analysis.json and steps.csv can never show different figures.
#[derive(Debug, Clone)]
pub struct Report {
    /// The run directory's files, typed.
    pub run: RunData,
    /// The run's analysis (`analyze(&run)`).
    pub analysis: RunAnalysis,
}

impl Report {
    /// The report of a run already read.
    pub fn new(run: RunData) -> Report {
        let analysis = analyze(&run);
        Report { run, analysis }
    }

    /// Reads a run directory once and analyses it.
    pub fn read(dir: &Path) -> Result<Report, ReadError> {
        Ok(Report::new(RunData::read(dir)?))
    }
}

/// A run directory's analysis: [`RunData::read`] then `analyze`.
pub fn analyze_run(dir: &Path) -> Result<RunAnalysis, ReadError> {
    Ok(Report::read(dir)?.analysis)
}

/// Turns a run into one file.
pub trait Exporter {
    /// File name in the run directory.
    fn file_name(&self) -> &'static str;
    /// The file's contents.
    fn render(&self, report: &Report) -> String;
}

/// Every exporter this module has, in the order [`write_all`] writes their files.
pub fn exporters() -> Vec<Box<dyn Exporter>> {
    vec![
        Box::new(csv::Csv),
        Box::new(markdown::Markdown),
        Box::new(json::Json),
        Box::new(html::Html),
    ]
}

/// The files [`write_all`] writes into a run directory, in that order.
pub fn written_files() -> Vec<&'static str> {
    exporters().iter().map(|e| e.file_name()).collect()
}

/// Writes every exporter's file into `dir`.
pub fn write_all(dir: &Path, report: &Report) -> std::io::Result<()> {
    for e in exporters() {
        std::fs::write(dir.join(e.file_name()), e.render(report))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::run::peak::level_text;

    /// report/ reads the run typed: `serde_json::Value` only where a foreign program's own JSON
    /// (a target's metrics) is read, at most 10 lines naming `Value` outside tests and
    /// comments, in modules whose import sits under a `// Value:` comment saying why. Catches
    /// an exporter that goes back to reading steps.jsonl, the environment or the kvd daemon's
    /// metrics as untyped JSON (73 such lines before the run was read typed, 24 before the
    /// CSV and kvd sections were).
    #[test]
    fn report_code_reads_json_untyped_only_where_it_says_why() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/report");
        let word = regex::Regex::new(r"\bValue\b").unwrap();
        let (mut lines, mut uncommented) = (Vec::new(), Vec::new());
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let code = text.split("#[cfg(test)]").next().unwrap_or("");
                let mut previous = "";
                for line in code.lines() {
                    let comment = line.trim_start().starts_with("//");
                    if !comment && word.is_match(line) {
                        lines.push(format!("{}: {}", path.display(), line.trim()));
                    }
                    if line.trim_start().starts_with("use serde_json::Value")
                        && !previous.trim_start().starts_with("// Value:")
                    {
                        uncommented.push(path.display().to_string());
                    }
                    previous = line;
                }
            }
        }
        assert!(
            lines.len() <= 10,
            "{} lines name Value: {lines:#?}",
            lines.len()
        );
        assert!(
            uncommented.is_empty(),
            "no `// Value:` reason: {uncommented:?}"
        );
    }

    /// The text of a page with its markup's escapes undone.
    fn html_text(page: &str) -> String {
        page.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&#39;", "'")
            .replace("&amp;", "&")
    }

    /// A copy of `from` (one level of subdirectories) in a new temporary directory.
    fn copy_run(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().unwrap();
        for entry in std::fs::read_dir(from).unwrap() {
            let path = entry.unwrap().path();
            let dest = to.path().join(path.file_name().unwrap());
            if path.is_dir() {
                std::fs::create_dir(&dest).unwrap();
                for f in std::fs::read_dir(&path).unwrap() {
                    let f = f.unwrap().path();
                    std::fs::copy(&f, dest.join(f.file_name().unwrap())).unwrap();
                }
            } else {
                std::fs::copy(&path, &dest).unwrap();
            }
        }
        to
    }

    /// The mean of a steps.csv column over the rows of one load level of a series.
    fn csv_level_mean(
        csv: &str,
        column: &str,
        target: &str,
        placement: &str,
        clients: usize,
    ) -> f64 {
        let mut lines = csv.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let values: Vec<f64> = lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|r| {
                r[col("target")] == target
                    && r[col("placement")] == placement
                    && r[col("clients")] == clients.to_string()
                    && r[col("status")] == "ok"
            })
            .map(|r| r[col(column)].parse::<f64>().unwrap())
            .collect();
        values.iter().sum::<f64>() / values.len() as f64
    }

    /// report.md, report.html, analysis.json and steps.csv of one real run (the quick demo's,
    /// with a threshold met and one not added to its spec) agree on every conclusion, diagnosis
    /// sentence, threshold verdict and peak they share. Catches an exporter that analyses on its
    /// own (without the histograms: another p99; without the spec: no comparison verdict, no
    /// thresholds) or that formats a shared finding its own way.
    #[test]
    fn every_format_says_the_same_of_one_run() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report_demo");
        let dir = copy_run(&fixture);
        let spec = dir.path().join("spec.toml");
        let mut text = std::fs::read_to_string(&spec).unwrap();
        text.push_str("\n[[thresholds]]\nmetric = \"error_ratio\"\nop = \"<=\"\nvalue = 0.01\n\n[[thresholds]]\nmetric = \"throughput_rps\"\nop = \">=\"\nvalue = 1e12\n");
        std::fs::write(&spec, text).unwrap();
        let report = Report::read(dir.path()).unwrap();
        let a = &report.analysis;
        assert_eq!((a.series.len(), a.diagnosis.len()), (2, 2));
        assert_eq!(a.comparisons.len(), 2, "{:?}", a.notes);
        let passed: Vec<bool> = a.thresholds.iter().map(|t| t.passed()).collect();
        assert_eq!(passed, [true, false]);

        let md = markdown::Markdown.render(&report);
        let page = html_text(&html::Html.render(&report));
        let json: serde_json::Value = serde_json::from_str(&json::Json.render(&report)).unwrap();
        let csv = csv::Csv.render(&report);

        // analysis.json is the analysis the pages were made from, whole (both parsed from
        // text, so that floats round the same way).
        let whole: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(a).unwrap()).unwrap();
        assert!(json == whole, "analysis.json is not the pages' analysis");
        // Every conclusion (each peak, the comparison's verdict), diagnosis sentence and
        // threshold verdict, word for word in both pages.
        let mut shared = findings::conclusions(a);
        shared.extend(a.diagnosis.iter().map(|d| d.sentence.clone()));
        shared.extend(gates::lines(a).into_iter().map(|(_, s)| s));
        assert!(shared.len() >= 2 + 1 + 2 + 2, "{shared:?}");
        for line in &shared {
            assert!(md.contains(&cell::escape(line)), "report.md lacks {line:?}");
            assert!(page.contains(line.as_str()), "report.html lacks {line:?}");
        }
        // Each diagnosis' resource table, the same in both pages (one model, two renderings),
        // in place of the evidence paragraph (which stays in analysis.json).
        for (i, d) in a.diagnosis.iter().enumerate() {
            assert!(d.resources.len() >= 5, "{:?}", d.resources);
            let table = diagnosis::resource_table(&d.resources);
            let mut one = doc::Doc::new();
            one.table(table.clone());
            assert!(md.contains(&one.to_markdown()), "report.md lacks {table:?}");
            assert!(
                page.contains(&html_text(&one.to_html().html)),
                "report.html lacks {table:?}"
            );
            let rows = json["diagnosis"][i]["resources"].as_array().unwrap();
            assert_eq!(rows.len(), d.resources.len());
            for e in &d.evidence {
                let quoted = format!("{} = ", e.metric);
                assert!(!md.contains(&quoted), "report.md still lists {quoted}");
                assert!(json["diagnosis"][i]["evidence"]
                    .to_string()
                    .contains(e.metric.as_str()));
            }
        }
        // Each peak: its level and merged p99 in both pages, its throughput the mean of
        // steps.csv's repetitions at that level.
        for s in &a.series {
            let (clients, rps) = (s.peak.clients.unwrap(), s.peak.throughput_rps.unwrap());
            let at = s.points.iter().find(|p| p.clients == clients).unwrap();
            assert!(at.merged_latency_us.is_some(), "the histograms were read");
            let row = format!(
                "| {} | {} | {rps:.0} | {} | {} |",
                s.target,
                s.placement,
                level_text(clients, None),
                cell::escape(&at.p99_text())
            );
            assert!(md.contains(&row), "report.md lacks {row}");
            for cell in [format!("{rps:.0}"), at.p99_text()] {
                assert!(
                    page.contains(&format!(">{cell}<")),
                    "report.html lacks {cell}"
                );
            }
            let from_csv = csv_level_mean(&csv, "throughput_rps", &s.target, &s.placement, clients);
            assert!((from_csv - rps).abs() < 0.01, "{from_csv} vs {rps}");
        }
    }
}
