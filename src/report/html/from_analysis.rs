//! The run's analysis as the page's fitted curves and tables.

use super::{Table, UslCurve};
use crate::report::analysis::RunAnalysis;

/// Fitted USL curves by (target, placement), and the knee/USL and Little's-law tables.
pub fn curves_and_tables(a: &RunAnalysis) -> (Vec<(String, String, UslCurve)>, Vec<Table>) {
    let curves = a
        .series
        .iter()
        .filter_map(|s| {
            let fit = s.usl.as_ref()?;
            let curve = UslCurve {
                lambda: fit.lambda,
                sigma: fit.sigma,
                kappa: fit.kappa,
            };
            Some((s.target.clone(), s.placement.clone(), curve))
        })
        .collect();
    (curves, vec![knee_table(a), little_table(a)])
}

fn knee_table(a: &RunAnalysis) -> Table {
    let (header, rows) = crate::report::analysis::scalability_rows(a);
    Table {
        title: "Scalability: knee and USL".into(),
        note: "Knee by Kneedle; saturation = fewest clients within 5% of the peak; busy = most \
               clients with the server under 70% CPU; USL X(N) = λN/(1+σ(N−1)+κN(N−1))."
            .into(),
        header,
        rows,
    }
}

fn little_table(a: &RunAnalysis) -> Table {
    let (header, rows) = crate::report::analysis::little_rows(a);
    Table {
        title: "Little's law".into(),
        note: "L = clients × connections × depth; predicted R = L / X; the ratio X·R/L is 1.00 \
               when the law holds; a flag marks more than 10% off."
            .into(),
        header,
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::analysis::tests::ok_step;
    use crate::report::analysis::{analyze, render_markdown};
    use crate::report::RunData;

    #[test]
    fn littles_law_rows_are_the_same_in_both_reports() {
        let mut saturated = ok_step(2, 100.0, 30_000.0);
        saturated.load.as_mut().unwrap().client_saturated = true;
        let run = RunData {
            steps: vec![ok_step(1, 100.0, 10_000.0), saturated],
            ..RunData::default()
        };
        let a = analyze(&run, None);
        let (_, tables) = curves_and_tables(&a);
        let html = tables.iter().find(|t| t.title == "Little's law").unwrap();
        assert_eq!(html.rows.len(), 2);
        assert_eq!(html.rows[1][..4], ["t", "p", "2", "0"]);
        assert!(html.rows[1][9].starts_with("client saturated; X·R is 50% above L"));
        let md = render_markdown(&a);
        for row in &html.rows {
            let line = format!("| {} |", row.join(" | "));
            assert!(md.contains(&line), "{line} not in\n{md}");
        }
    }
}
