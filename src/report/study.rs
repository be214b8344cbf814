//! The study's table (the Tomcat/rxNetty study's benchreport columns): per load level and server, the means
//! over the level's repetitions of requests/s, latency mean and max, the server's CPU %,
//! context switches and migrations per request, user and system CPU time per request, loopback
//! packets per request, and cycles, instructions and IPC where the machine has a PMU (else
//! "unavailable", never 0). Shown when a run measures two targets or more.

use std::collections::BTreeMap;

use super::doc::{Doc, Table};
use crate::record::steps::{StepResult, StepStatus};
use crate::units;

/// One figure of a step, None where it was not measured.
type Figure = fn(&StepResult) -> Option<f64>;

/// The figures of one step, by column.
const COLUMNS: [(&str, Figure); 10] = [
    ("req/s", |s| s.load.as_ref().map(|l| l.throughput_rps)),
    ("latency mean", |s| {
        s.load.as_ref().map(|l| l.latency_us.mean)
    }),
    ("latency max", |s| s.load.as_ref().map(|l| l.latency_us.max)),
    ("cs/req", |s| s.per_request.cs_per_req),
    ("migrations/req", |s| s.per_request.migr_per_req),
    ("user CPU/req", |s| s.per_request.cpu_us_per_req.user),
    ("sys CPU/req", |s| s.per_request.cpu_us_per_req.sys),
    ("packets/req", |s| s.per_request.pkts_per_req),
    ("cycles/req", |s| {
        s.observation()?.perf.cycles.map(|c| c as f64)
    }),
    ("instructions/req", |s| {
        s.observation()?.perf.instructions.map(|c| c as f64)
    }),
];

/// The section (empty with fewer than two targets).
pub fn sections(steps: &[StepResult]) -> Doc {
    let ok: Vec<&StepResult> = steps
        .iter()
        .filter(|s| s.status == StepStatus::Ok)
        .collect();
    let mut levels: BTreeMap<(usize, String, String), Vec<&StepResult>> = BTreeMap::new();
    for s in &ok {
        levels
            .entry((s.clients, s.placement.clone(), s.target.clone()))
            .or_default()
            .push(s);
    }
    let targets: std::collections::BTreeSet<&str> = ok.iter().map(|s| s.target.as_str()).collect();
    let mut out = Doc::new();
    if targets.len() < 2 {
        return out;
    }
    out.heading("The study's table");
    out.paragraph("Per load level and server, the mean of its repetitions: CPU % is the server's process tree in % of its CPUs; user and sys CPU/req are its CPU time per request; packets are loopback packets per request; cycles, instructions and IPC need a hardware PMU (\"unavailable\" without one).");
    let header = [
        "clients",
        "placement",
        "server",
        "reps",
        "req/s",
        "latency mean",
        "latency max",
        "CPU %",
        "cs/req",
        "migrations/req",
        "user CPU/req",
        "sys CPU/req",
        "packets/req",
        "cycles/req",
        "instructions/req",
        "IPC",
    ];
    let rows: Vec<Vec<String>> = levels
        .iter()
        .map(|((clients, placement, target), reps)| {
            let mut r = vec![
                clients.to_string(),
                placement.clone(),
                target.clone(),
                reps.len().to_string(),
            ];
            r.extend(row(reps));
            r
        })
        .collect();
    out.table(Table::figures(
        header.iter().map(|h| h.to_string()).collect(),
        rows,
    ));
    out
}

fn row(reps: &[&StepResult]) -> Vec<String> {
    // The mean over the repetitions, None unless every one measured the figure.
    let mean = |f: Figure| -> Option<f64> {
        let v: Vec<f64> = reps
            .iter()
            .filter_map(|s| f(s))
            .filter(|x| x.is_finite())
            .collect();
        (v.len() == reps.len() && !v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let requests = mean(|s| s.load.as_ref().map(|l| l.requests as f64)).unwrap_or(0.0);
    let cpu: Vec<f64> = reps
        .iter()
        .filter_map(|s| crate::analyze::run::server_cpu_pct(s))
        .collect();
    let mut cells = Vec::new();
    for (name, figure) in COLUMNS {
        let v = mean(figure);
        let cell = match name {
            "req/s" => v.map(|x| format!("{x:.0}")),
            "latency mean" | "latency max" => v.map(units::duration_us),
            "user CPU/req" | "sys CPU/req" => v.map(units::duration_us),
            "cycles/req" | "instructions/req" => v
                .filter(|_| requests > 0.0)
                .map(|x| format!("{:.0}", x / requests)),
            _ => v.map(|x| format!("{x:.3}")),
        };
        cells.push(cell);
        if name == "latency max" {
            cells.push(
                (!cpu.is_empty())
                    .then(|| format!("{:.0}", cpu.iter().sum::<f64>() / cpu.len() as f64)),
            );
        }
    }
    cells.push(mean(|s| s.per_request.ipc).map(|x| format!("{x:.2}")));
    cells
        .into_iter()
        .map(|c| c.unwrap_or_else(|| "unavailable".into()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::run::tests::ok_step;

    #[test]
    fn cpu_per_request_and_latency_read_in_their_unit() {
        // Issue 44: "user ms/req 0.0012" for 1.2 µs of user CPU per request.
        let steps: Vec<StepResult> = ["a", "b"]
            .into_iter()
            .map(|target| {
                let mut s = ok_step(1, 1000.0, 302_776.3);
                s.target = target.into();
                s.per_request.cpu_us_per_req.user = Some(1.2);
                s.per_request.cpu_us_per_req.sys = Some(12_345.0);
                s
            })
            .collect();
        let md = sections(&steps).to_markdown();
        assert!(md.contains("| user CPU/req | sys CPU/req |"), "{md}");
        assert!(md.contains("| 303 ms |"), "{md}");
        assert!(md.contains("| 1.20 µs | 12.3 ms |"), "{md}");
        assert!(!md.contains("0.0012"), "{md}");
    }
}
