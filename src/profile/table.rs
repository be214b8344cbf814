//! Function-share tables: "function: share of CPU", and "+delta" between two profiles, as
//! the messenger study lists them.
//!
//! A function's inclusive share is the weight of the stacks it appears in (once per stack,
//! however deep the recursion), its self share the weight of the stacks it is the leaf of. The
//! thread frame is not a function and is left out; coalescing (`NAME [K]`) and kernel marks are
//! removed from names, so coalesced and plain stacks give the same inclusive shares. Self shares
//! need the real leaf, which coalescing can move: compute tables before coalescing.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::transform::{frames, KERNEL_MARK};
use super::Folded;

/// One function's share of the profile.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionShare {
    /// The function (frame name without coalescing count or kernel mark).
    pub name: String,
    /// Weight of the stacks the function appears in, as a % of the total weight.
    pub inclusive_pct: f64,
    /// Weight of the stacks the function is the leaf of, as a % of the total weight.
    pub self_pct: f64,
    /// Weight of the stacks the function appears in (samples, or ns for cpu-clock).
    pub inclusive_weight: u64,
    /// Weight of the stacks the function is the leaf of.
    pub self_weight: u64,
}

/// The functions with the largest shares.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TopFunctions {
    /// The profile's total weight.
    pub total_weight: u64,
    /// The N functions with the largest inclusive share, largest first.
    pub by_inclusive: Vec<FunctionShare>,
    /// The N functions with the largest self share, largest first.
    pub by_self: Vec<FunctionShare>,
}

/// A function's inclusive share in two profiles.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShareDelta {
    /// The function.
    pub name: String,
    /// Inclusive share in A, % of A's total.
    pub a_pct: f64,
    /// Inclusive share in B, % of B's total.
    pub b_pct: f64,
    /// B's share minus A's, in percentage points.
    pub delta_points: f64,
}

/// A frame's function name: no `[K]` coalescing count, no kernel mark.
pub fn function_name(frame: &str) -> &str {
    let name = match frame.rsplit_once(" [") {
        Some((name, count))
            if count.ends_with(']')
                && count.len() > 1
                && count[..count.len() - 1].bytes().all(|b| b.is_ascii_digit()) =>
        {
            name
        }
        _ => frame,
    };
    name.strip_suffix(KERNEL_MARK).unwrap_or(name)
}

/// Inclusive and self weight of every function.
pub fn function_weights(folded: &Folded) -> HashMap<String, (u64, u64)> {
    let mut weights: HashMap<String, (u64, u64)> = HashMap::new();
    let mut seen = HashSet::new();
    for (stack, count) in folded.stacks() {
        seen.clear();
        let names: Vec<&str> = frames(stack).skip(1).map(function_name).collect();
        for name in &names {
            if seen.insert(*name) {
                weights.entry(name.to_string()).or_default().0 += count;
            }
        }
        if let Some(leaf) = names.last() {
            weights.entry(leaf.to_string()).or_default().1 += count;
        }
    }
    weights
}

fn pct(weight: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        100.0 * weight as f64 / total as f64
    }
}

/// The `n` functions with the largest inclusive and the largest self shares.
pub fn top_functions(folded: &Folded, n: usize) -> TopFunctions {
    let total = folded.total();
    let mut all: Vec<FunctionShare> = function_weights(folded)
        .into_iter()
        .map(|(name, (inclusive, own))| FunctionShare {
            name,
            inclusive_pct: pct(inclusive, total),
            self_pct: pct(own, total),
            inclusive_weight: inclusive,
            self_weight: own,
        })
        .collect();
    all.sort_by(|a, b| {
        b.inclusive_weight
            .cmp(&a.inclusive_weight)
            .then(a.name.cmp(&b.name))
    });
    let by_inclusive = all.iter().take(n).cloned().collect();
    all.sort_by(|a, b| b.self_weight.cmp(&a.self_weight).then(a.name.cmp(&b.name)));
    let by_self = all
        .into_iter()
        .filter(|f| f.self_weight > 0)
        .take(n)
        .collect();
    TopFunctions {
        total_weight: total,
        by_inclusive,
        by_self,
    }
}

/// Inclusive shares in A and B for the `n` functions whose share moved most (all when n = 0).
pub fn share_deltas(a: &Folded, b: &Folded, n: usize) -> Vec<ShareDelta> {
    let (wa, wb) = (function_weights(a), function_weights(b));
    let (ta, tb) = (a.total(), b.total());
    let names: HashSet<&String> = wa.keys().chain(wb.keys()).collect();
    let mut deltas: Vec<ShareDelta> = names
        .into_iter()
        .map(|name| {
            let a_pct = pct(wa.get(name).map_or(0, |w| w.0), ta);
            let b_pct = pct(wb.get(name).map_or(0, |w| w.0), tb);
            ShareDelta {
                name: name.clone(),
                a_pct,
                b_pct,
                delta_points: b_pct - a_pct,
            }
        })
        .collect();
    deltas.sort_by(|x, y| {
        y.delta_points
            .abs()
            .total_cmp(&x.delta_points.abs())
            .then(y.b_pct.total_cmp(&x.b_pct))
            .then(x.name.cmp(&y.name))
    });
    if n > 0 {
        deltas.truncate(n);
    }
    deltas
}

/// Escapes `|` so a function name does not break a markdown table.
fn cell(name: &str) -> String {
    name.replace('|', "\\|")
}

impl TopFunctions {
    /// Markdown tables: by inclusive share, then by self share.
    pub fn to_markdown(&self) -> String {
        let mut out = String::from("| function | inclusive % | self % |\n| --- | ---: | ---: |\n");
        for f in &self.by_inclusive {
            out.push_str(&format!(
                "| {} | {:.2} | {:.2} |\n",
                cell(&f.name),
                f.inclusive_pct,
                f.self_pct
            ));
        }
        out.push_str("\n| function (by self) | self % | inclusive % |\n| --- | ---: | ---: |\n");
        for f in &self.by_self {
            out.push_str(&format!(
                "| {} | {:.2} | {:.2} |\n",
                cell(&f.name),
                f.self_pct,
                f.inclusive_pct
            ));
        }
        out
    }
}

/// A markdown table of share deltas, `+5.00` / `-13.83` points.
pub fn deltas_markdown(deltas: &[ShareDelta]) -> String {
    let mut out =
        String::from("| function | A % | B % | delta (points) |\n| --- | ---: | ---: | ---: |\n");
    for d in deltas {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:+.2} |\n",
            cell(&d.name),
            d.a_pct,
            d.b_pct,
            d.delta_points
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(pairs: &[(&str, u64)]) -> Folded {
        Folded::from_pairs(pairs.iter().map(|(s, n)| (s.to_string(), *n)))
    }

    #[test]
    fn recursion_counts_once_per_stack() {
        let f = folded(&[("t;main;rec;rec;rec", 3), ("t;main;other", 1)]);
        let top = top_functions(&f, 10);
        assert_eq!(top.by_inclusive[0].name, "main");
        assert_eq!(top.by_inclusive[0].inclusive_pct, 100.0);
        assert_eq!(top.by_inclusive[1].name, "rec");
        assert_eq!(top.by_inclusive[1].inclusive_pct, 75.0);
        assert_eq!(top.by_self[0].name, "rec");
        assert_eq!(top.by_self[0].self_pct, 75.0);
        assert!(top.to_markdown().contains("| rec | 75.00 | 75.00 |"));
    }

    #[test]
    fn coalesced_names_are_the_function() {
        assert_eq!(function_name("then [12]"), "then");
        assert_eq!(function_name("sys_read_[k]"), "sys_read");
        assert_eq!(function_name("f [x]"), "f [x]");
        // inclusive shares survive coalescing; self shares do not (the leaf `a` is not last in
        // `a [2];b`), which is why tables are computed before coalescing
        let plain = folded(&[("t;a;b;a", 2)]);
        let coalesced = folded(&[("t;a [2];b", 2)]);
        let inclusive = |f: &Folded| {
            let mut v: Vec<(String, u64)> = top_functions(f, 5)
                .by_inclusive
                .into_iter()
                .map(|x| (x.name, x.inclusive_weight))
                .collect();
            v.sort();
            v
        };
        assert_eq!(inclusive(&plain), inclusive(&coalesced));
    }

    #[test]
    fn deltas_of_a_profile_with_itself_are_zero() {
        let f = folded(&[("t;a;b", 2), ("t;c", 5)]);
        let d = share_deltas(&f, &f, 0);
        assert_eq!(d.len(), 3);
        assert!(d.iter().all(|x| x.delta_points == 0.0));
        let g = folded(&[("t;a;b", 5), ("t;c", 5)]);
        let d = share_deltas(&f, &g, 0);
        let c = d.iter().find(|x| x.name == "c").unwrap();
        assert!((c.delta_points - (50.0 - 500.0 / 7.0)).abs() < 1e-9);
        assert!(deltas_markdown(&d).contains("| c | 71.43 | 50.00 | -21.43 |"));
        assert!(deltas_markdown(&d).contains("| a | 28.57 | 50.00 | +21.43 |"));
        assert_eq!(share_deltas(&f, &g, 1).len(), 1);
    }
}
