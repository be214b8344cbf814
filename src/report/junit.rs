//! JUnit XML of a run's thresholds (`run --junit FILE`) and of a comparison (`compare --junit
//! FILE`), so CI systems (GitLab, Jenkins, GitHub test reporters) show each verdict as a test
//! case. Written through quick-xml's writer, which escapes every text and attribute.

use std::io;

use quick_xml::events::{BytesDecl, BytesText, Event};
use quick_xml::Writer;

use crate::analyze::compare::runs::Comparison;
use crate::analyze::thresholds::{ThresholdVerdict, Verdict};

/// One test case.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// What was checked (the threshold, or the step compared).
    pub name: String,
    /// Its group (`thresholds`, `compare.RUN`).
    pub classname: String,
    /// Why it failed; None when it passed.
    pub failure: Option<String>,
    /// The measured figures in words.
    pub output: String,
}

/// A `<testsuites>` document holding one `<testsuite>` named `suite` with `cases`.
pub fn render(suite: &str, cases: &[Case]) -> io::Result<String> {
    let failures = cases.iter().filter(|c| c.failure.is_some()).count();
    let (tests, failures) = (cases.len().to_string(), failures.to_string());
    let mut w = Writer::new_with_indent(Vec::new(), b' ', 2);
    w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
    w.create_element("testsuites")
        .with_attribute(("name", "stairbench"))
        .with_attribute(("tests", tests.as_str()))
        .with_attribute(("failures", failures.as_str()))
        .write_inner_content(|w| {
            w.create_element("testsuite")
                .with_attribute(("name", suite))
                .with_attribute(("tests", tests.as_str()))
                .with_attribute(("failures", failures.as_str()))
                .with_attribute(("errors", "0"))
                .write_inner_content(|w| cases.iter().try_for_each(|c| case(w, c)))?;
            Ok(())
        })?;
    let mut text = String::from_utf8(w.into_inner()).map_err(io::Error::other)?;
    text.push('\n');
    Ok(text)
}

fn case(w: &mut Writer<Vec<u8>>, c: &Case) -> io::Result<()> {
    w.create_element("testcase")
        .with_attribute(("name", c.name.as_str()))
        .with_attribute(("classname", c.classname.as_str()))
        .write_inner_content(|w| {
            if let Some(message) = &c.failure {
                w.create_element("failure")
                    .with_attribute(("message", message.as_str()))
                    .write_text_content(BytesText::new(message))?;
            }
            if !c.output.is_empty() {
                w.create_element("system-out")
                    .write_text_content(BytesText::new(&c.output))?;
            }
            Ok(())
        })?;
    Ok(())
}

/// One case per threshold: failed when breached or unmeasured.
pub fn threshold_cases(verdicts: &[ThresholdVerdict]) -> Vec<Case> {
    verdicts
        .iter()
        .map(|v| Case {
            name: v.threshold.clone(),
            classname: "thresholds".into(),
            failure: (v.verdict != Verdict::Met).then(|| v.sentence()),
            output: v.sentence(),
        })
        .collect()
}

/// One case per step of each later run compared with the first: failed when it breaks the
/// `--fail-if-slower` gate.
pub fn comparison_cases(cmp: &Comparison) -> Vec<Case> {
    let mut cases = Vec::new();
    for row in &cmp.rows {
        for (i, rel) in row.against_first.iter().enumerate() {
            let Some(rel) = rel else { continue };
            let run = &cmp.runs[i].label;
            let failure = cmp
                .gate_failures
                .iter()
                .find(|f| f.run == *run && f.key == row.key)
                .map(|f| {
                    format!(
                        "{:.1}% slower than {} on {} (--fail-if-slower {}): {}",
                        f.slower_pct,
                        cmp.runs[0].label,
                        cmp.metric.name(),
                        cmp.gate_pct.unwrap_or(0.0),
                        f.reason
                    )
                });
            cases.push(Case {
                name: row.key.label(),
                classname: format!("compare.{run}"),
                failure,
                output: rel.sentence(run, &cmp.runs[0].label),
            });
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        let cases = [Case {
            name: "p99_ms < 5".into(),
            classname: "thresholds".into(),
            failure: Some("FAIL p99_ms < 5 & \"more\"".into()),
            output: "a <b>".into(),
        }];
        let xml = render("run <x>", &cases).unwrap();
        assert!(xml.contains("name=\"p99_ms &lt; 5\""), "{xml}");
        assert!(xml.contains("tests=\"1\" failures=\"1\""), "{xml}");
        assert!(xml.contains("a &lt;b&gt;"), "{xml}");
        assert!(!xml.contains("<x>"), "{xml}");
    }
}
