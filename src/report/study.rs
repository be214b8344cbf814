//! The study's table (seed 003's benchreport columns): per load level and server, the means
//! over the level's repetitions of requests/s, latency mean and max, the server's CPU %,
//! context switches and migrations per request, user and system CPU ms per request, loopback
//! packets per request, and cycles, instructions and IPC where the machine has a PMU (else
//! "unavailable", never 0). Shown when a run measures two targets or more.

use std::collections::BTreeMap;

use super::doc::{Doc, Table};
use crate::record::steps::{StepResult, StepStatus};

/// One figure of a step, None where it was not measured.
type Figure = fn(&StepResult) -> Option<f64>;

/// The figures of one step, by column.
const COLUMNS: [(&str, Figure); 10] = [
    ("req/s", |s| s.load.as_ref().map(|l| l.throughput_rps)),
    ("latency mean ms", |s| {
        s.load.as_ref().map(|l| l.latency_us.mean)
    }),
    ("latency max ms", |s| {
        s.load.as_ref().map(|l| l.latency_us.max)
    }),
    ("cs/req", |s| s.per_request.cs_per_req),
    ("migrations/req", |s| s.per_request.migr_per_req),
    ("user ms/req", |s| s.per_request.cpu_us_per_req.user),
    ("sys ms/req", |s| s.per_request.cpu_us_per_req.sys),
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
    out.paragraph("Per load level and server, the mean of its repetitions: CPU % is the server's process tree in % of its CPUs; user and sys ms are its CPU time per request; packets are loopback packets per request; cycles, instructions and IPC need a hardware PMU (\"unavailable\" without one).");
    let header = [
        "clients",
        "placement",
        "server",
        "reps",
        "req/s",
        "latency mean ms",
        "latency max ms",
        "CPU %",
        "cs/req",
        "migrations/req",
        "user ms/req",
        "sys ms/req",
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
            "latency mean ms" | "latency max ms" => v.map(|x| format!("{:.2}", x / 1e3)),
            "user ms/req" | "sys ms/req" => v.map(|x| format!("{:.4}", x / 1e3)),
            "cycles/req" | "instructions/req" => v
                .filter(|_| requests > 0.0)
                .map(|x| format!("{:.0}", x / requests)),
            _ => v.map(|x| format!("{x:.3}")),
        };
        cells.push(cell);
        if name == "latency max ms" {
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
