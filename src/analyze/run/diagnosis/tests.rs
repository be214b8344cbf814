//! Synthetic series, one per limit, through the whole run analysis.

use serde_json::json;

use super::*;
use crate::analyze::run::{analyze_steps, RunAnalysis};
use crate::record::steps::StepStatus;

/// One synthetic step's figures; latency follows Little's law unless set.
#[derive(Clone)]
struct S {
    clients: usize,
    x: f64,
    latency_us: Option<f64>,
    server_cpus: &'static str,
    client_cpus: &'static str,
    busy_pct: f64,
    client_busy_pct: f64,
    cpu_us: f64,
    vol_cs: f64,
    busiest: Option<(&'static str, f64)>,
    run_delay: Option<(f64, f64)>,
    saturated: bool,
}

fn base(clients: usize, x: f64) -> S {
    S {
        clients,
        x,
        latency_us: None,
        server_cpus: "0-1",
        client_cpus: "2",
        busy_pct: 50.0,
        client_busy_pct: 20.0,
        cpu_us: 40.0,
        vol_cs: 1.0,
        busiest: None,
        run_delay: None,
        saturated: false,
    }
}

fn step(s: &S) -> StepResult {
    let mut r = StepResult::empty(format!("t.p.c{}", s.clients), "web", "sep", s.clients, 0);
    r.status = StepStatus::Ok;
    r.inflight = s.clients;
    r.server_cpus = s.server_cpus.into();
    r.client_cpus = s.client_cpus.into();
    let mut load = crate::record::load::LoadReport {
        throughput_rps: s.x,
        client_saturated: s.saturated,
        duration_s: 2.0,
        ..Default::default()
    };
    // The generator's own CPU over its 2 s on its one CPU.
    load.client_cpu.user_s = 2.0 * s.client_busy_pct / 100.0;
    load.latency_us.mean = s.latency_us.unwrap_or(s.clients as f64 / s.x * 1e6);
    r.load = Some(load);
    let mut threads = json!({"groups": [], "busiest": null, "run_delay_s": null,
        "run_delay_pct": null, "cpu_source": "schedstat"});
    if let Some((name, pct)) = s.busiest {
        threads["busiest"] =
            json!({"name": name, "group": name, "pid": 1, "tid": 1, "cpu_pct": pct});
    }
    if let Some((_, pct)) = s.run_delay {
        threads["run_delay_pct"] = json!(pct);
    }
    let server = json!({"server_cpus_busy_pct": s.busy_pct,
        "client_cpus_busy_pct": s.client_busy_pct, "threads": threads});
    r.server = serde_json::from_value(server).unwrap();
    r.per_request.cpu_us_per_req.total = Some(s.cpu_us);
    r.per_request.voluntary_cs_per_req = Some(s.vol_cs);
    r.per_request.run_delay_us_per_req = s.run_delay.map(|(us, _)| us);
    r
}

fn diagnose_all(shape: &[S]) -> Diagnosis {
    let steps: Vec<StepResult> = shape.iter().map(step).collect();
    let a = analyze_steps(&steps);
    let d = a.diagnosis[0].clone();
    assert!(!d.evidence.is_empty(), "{d:?}");
    assert!(d.sentence.starts_with("web/sep "), "{}", d.sentence);
    d
}

/// 1..16 clients, throughput bending at 4 clients.
fn bending(mut each: impl FnMut(usize, &mut S)) -> Vec<S> {
    [(1, 10e3), (2, 19e3), (4, 30e3), (8, 31e3), (16, 31e3)]
        .iter()
        .enumerate()
        .map(|(i, &(c, x))| {
            let mut s = base(c, x);
            each(i, &mut s);
            s
        })
        .collect()
}

fn metric(d: &Diagnosis, name: Metric) -> &Evidence {
    d.evidence
        .iter()
        .rev()
        .find(|e| e.metric == name)
        .unwrap_or_else(|| panic!("no {name} in {:?}", d.evidence))
}

#[test]
fn one_busy_thread_with_room_in_the_cpuset() {
    let d = diagnose_all(&bending(|i, s| {
        s.busiest = Some(("reactor-0", [30.0, 55.0, 92.0, 96.0, 97.0][i]));
        s.busy_pct = [15.0, 28.0, 47.0, 49.0, 50.0][i];
        s.cpu_us = 7.7;
    }));
    assert_eq!((d.limit, d.knee_clients), (Limit::OneThread, Some(4)));
    assert_eq!(d.confidence, Confidence::High);
    assert_eq!(metric(&d, Metric::BusiestThreadCpuPct).value, 97.0);
    assert_eq!(
        d.sentence,
        "web/sep stops scaling near 4 clients (it bends there and gains 3% more up to its peak \
         at 16 clients): its busiest thread (reactor-0) is 97% of one CPU \
         while its 2 CPUs are 50% busy and CPU per request stays at 7.70 µs: a single-thread limit. \
         Next: spread that thread's work over more threads (more workers or shards) or make it \
         cheaper per request."
    );
}

#[test]
fn one_busy_thread_filling_its_one_cpu_is_told_more_cpus_not_more_threads() {
    // A 1-worker nginx on one server CPU: another worker there could only share that CPU.
    let d = diagnose_all(&bending(|i, s| {
        s.server_cpus = "0";
        s.busiest = Some(("nginx", [30.0, 55.0, 92.0, 96.0, 97.0][i]));
        s.busy_pct = [30.0, 55.0, 92.0, 96.0, 97.0][i];
        s.cpu_us = 7.7;
    }));
    assert_eq!(d.limit, Limit::OneThread, "{}", d.sentence);
    assert!(
        d.sentence
            .contains("Next: give the server more CPUs and spread that thread's work over them"),
        "{}",
        d.sentence
    );
    assert!(!d.sentence.contains("more workers"), "{}", d.sentence);
}

/// `shape` measured twice: `second` changes the second repetition's figures.
fn diagnose_two_reps(shape: &[S], second: impl Fn(usize, &mut S)) -> Diagnosis {
    let mut steps: Vec<StepResult> = shape.iter().map(step).collect();
    for (i, s) in shape.iter().enumerate() {
        let mut s = s.clone();
        second(i, &mut s);
        let mut r = step(&s);
        r.rep = 1;
        r.id.push_str(".r1");
        steps.push(r);
    }
    analyze_steps(&steps).diagnosis[0].clone()
}

#[test]
fn a_busiest_thread_straddling_its_rules_margin_is_not_high() {
    let busy_thread = |i: usize, s: &mut S| {
        s.busiest = Some(("reactor-0", [30.0, 55.0, 92.0, 96.0, 97.0][i]));
        s.busy_pct = [15.0, 28.0, 47.0, 49.0, 50.0][i];
        s.cpu_us = 7.7;
    };
    let shape = bending(busy_thread);
    // Two repetitions within 1% of each other agree: still high.
    let d = diagnose_two_reps(&shape, |_, s| s.x *= 1.01);
    assert_eq!(
        (d.limit, d.confidence),
        (Limit::OneThread, Confidence::High)
    );
    assert!(d.notes.is_empty(), "{:?}", d.notes);
    // The same throughput, but the second repetition's thread peaks at 85%: below the
    // rule's 90% read alone, so the two do not agree on a single-thread limit.
    let d = diagnose_two_reps(&shape, |i, s| {
        s.busiest = Some(("reactor-0", [28.0, 50.0, 80.0, 84.0, 85.0][i]));
    });
    assert_eq!(
        (d.limit, d.confidence),
        (Limit::OneThread, Confidence::Medium)
    );
    assert_eq!(metric(&d, Metric::RepetitionsDisagreeing).value, 1.0);
    let note = d.notes.iter().find(|n| n.contains("rep 1 alone reads"));
    assert!(
        note.is_some_and(
            |n| n.starts_with("1 of 2 repetitions read alone name another limit than one_thread")
        ),
        "{:?}",
        d.notes
    );
}

#[test]
fn busy_cpuset_at_flat_cpu_per_request() {
    let d = diagnose_all(&bending(|i, s| {
        s.busiest = Some(("worker-1", 50.0));
        s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
        s.cpu_us = [60.0, 61.0, 62.0, 61.0, 63.0][i];
    }));
    assert_eq!(d.limit, Limit::ServerCpu);
    assert_eq!(d.confidence, Confidence::High);
    assert_eq!(metric(&d, Metric::ServerCpuPct).value, 96.0);
    assert!(d
        .sentence
        .contains("its 2 CPUs are 96% busy while CPU per request stays at 63.0 µs"));
}

/// The Tomcat/rxNetty study's Tomcat shape: the one CPU saturates while each request costs less as more
/// are served per wake-up; still a CPU limit, said with both figures, never `high`.
#[test]
fn busy_cpuset_at_falling_cpu_per_request() {
    let d = diagnose_all(&bending(|i, s| {
        s.busiest = Some(("http-nio", 15.0));
        s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
        s.cpu_us = [38.9, 30.0, 20.0, 15.0, 12.2][i];
    }));
    assert_eq!(d.limit, Limit::ServerCpu, "{}", d.sentence);
    assert_eq!(d.confidence, Confidence::Medium);
    assert!(
        d.sentence.contains(
            "96% busy while CPU per request falls from 38.9 µs to 12.2 µs (more requests served per wake-up)"
        ),
        "{}",
        d.sentence
    );
}

#[test]
fn cpu_per_request_growing_at_flat_throughput() {
    let d = diagnose_all(&bending(|i, s| {
        s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
        s.cpu_us = [20.0, 22.0, 30.0, 45.0, 70.0][i];
        s.vol_cs = [1.0, 1.1, 1.5, 2.5, 4.0][i];
    }));
    assert_eq!(d.limit, Limit::Contention);
    assert!(d.confidence >= Confidence::Medium);
    // The same growth on a server with idle CPUs is not what stopped it.
    let idle = diagnose_all(&bending(|i, s| {
        s.busy_pct = 20.0;
        s.client_busy_pct = 70.0;
        s.cpu_us = [20.0, 22.0, 30.0, 45.0, 70.0][i];
    }));
    assert_eq!(idle.limit, Limit::Undetermined, "{}", idle.sentence);
    assert_eq!(metric(&d, Metric::CpuUsPerReq).value, 70.0);
    assert!(
        d.sentence
            .contains("CPU per request grows from 20.0 µs to 70.0 µs"),
        "{}",
        d.sentence
    );
}

/// 1..32 clients, throughput peaking at 8 and falling to 18k at 32.
const FALLING: [(usize, f64); 6] = [
    (1, 10e3),
    (2, 19e3),
    (4, 30e3),
    (8, 32e3),
    (16, 24e3),
    (32, 18e3),
];

#[test]
fn throughput_falling_after_its_peak() {
    let shape: Vec<S> = FALLING.iter().map(|&(c, x)| base(c, x)).collect();
    let d = diagnose_all(&shape);
    assert_eq!((d.limit, d.knee_clients), (Limit::Coherency, Some(4)));
    assert_eq!(metric(&d, Metric::ThroughputRps).value, 18e3);
    assert!(d
        .sentence
        .contains("throughput falls from 32.0k req/s at 8 clients to 18.0k req/s at 32"));
    // One low last step is not a fall.
    let one_low = diagnose_all(&shape[..5]);
    assert_ne!(one_low.limit, Limit::Coherency, "{}", one_low.sentence);
}

/// The falling series above with its peak (8 clients) measured again after its last level
/// at `again` req/s.
fn fall_with_drift_check(again: f64) -> Diagnosis {
    let mut steps: Vec<StepResult> = FALLING.iter().map(|&(c, x)| step(&base(c, x))).collect();
    let mut check = step(&base(8, again));
    (check.rep, check.figures.drift_check) = (1, true);
    steps.push(check);
    let a = analyze_steps(&steps);
    assert_eq!(
        a.series[0].points[3].throughput_rps.n, 1,
        "kept out of its level"
    );
    assert_eq!(a.series[0].points[3].again_rps, Some(again));
    a.diagnosis[0].clone()
}

#[test]
fn a_fall_whose_peak_measured_again_fell_too_is_the_machines_drift() {
    // The peak lost 22% too (a state the run grew), the last level still 10% under it.
    let held = fall_with_drift_check(25e3);
    assert_eq!(held.limit, Limit::Coherency, "{}", held.sentence);
    assert!(
        held.sentence
            .contains("and 8 clients measured again after 32 still gave 25.0k req/s"),
        "{}",
        held.sentence
    );
    let drifted = fall_with_drift_check(20e3);
    assert_ne!(drifted.limit, Limit::Coherency, "{}", drifted.sentence);
    assert!(
        drifted.notes.iter().any(|n| n.contains(
            "8 clients measured again after the last level gave 20.0k req/s against 32.0k req/s at first (-38%), and the last level 18.0k req/s: the machine slowed"
        )),
        "{:?}",
        drifted.notes
    );
}

#[test]
fn run_queue_wait_growing_with_more_threads_than_cpus() {
    let d = diagnose_all(&bending(|i, s| {
        s.server_cpus = "1";
        s.busy_pct = 98.0;
        s.busiest = Some(("pool-3", 20.0));
        s.run_delay = Some(
            [
                (1.0, 5.0),
                (2.0, 10.0),
                (10.0, 80.0),
                (30.0, 150.0),
                (60.0, 300.0),
            ][i],
        );
    }));
    assert_eq!(d.limit, Limit::Oversubscription);
    assert_eq!(d.confidence, Confidence::High);
    assert_eq!(metric(&d, Metric::RunDelayUsPerReq).value, 60.0);
    assert!(
        d.sentence
            .contains("3.0 threads waiting on average for 1 CPU"),
        "{}",
        d.sentence
    );
}

/// grpcio's Python server on its one CPU, as measured in CI: the CPU full and throughput
/// level from the first level, where four calls were already in flight.
fn grpcio(i: usize, s: &mut S) {
    s.x = [17460.0, 18435.0, 19482.0, 18832.0, 17603.0][i];
    s.server_cpus = "0";
    s.busy_pct = [95.0, 94.0, 96.0, 98.0, 95.0][i];
    s.cpu_us = [55.0, 51.5, 50.3, 52.6, 53.4][i];
    s.busiest = Some(("grpcio", 45.0));
    s.run_delay = Some(
        [
            (101.7, 177.5),
            (110.0, 202.8),
            (120.0, 233.8),
            (135.0, 254.2),
            (152.9, 270.8),
        ][i],
    );
}

#[test]
fn threads_queued_from_the_first_level_on_a_full_cpu_are_its_cpu_limit() {
    let d = diagnose_all(&bending(grpcio));
    assert_eq!(d.limit, Limit::ServerCpu, "{}", d.sentence);
    // Never 25% above its first level: not "no knee", which reads as still scaling.
    assert!(
        d.sentence.starts_with(
            "web/sep does not scale past its first level: throughput stays between 17.5k req/s \
             and 19.5k req/s from 1 client to 16 clients: its 1 CPU is"
        ),
        "{}",
        d.sentence
    );
    // The same growth from a first level with no queue is oversubscription.
    let d = diagnose_all(&bending(|i, s| {
        grpcio(i, s);
        if i == 0 {
            s.run_delay = Some((10.0, 17.5));
        }
    }));
    assert_eq!(d.limit, Limit::Oversubscription, "{}", d.sentence);
}

#[test]
fn a_full_cpu_level_from_the_start_is_its_cpu_limit_not_coherency() {
    // grpcio on its one CPU in CI (a slower day: 165 us per call): a noisy peak at 4
    // clients and 16% below it at 16 was read as coherency.
    let d = diagnose_all(&grpcio_dip([94.0, 95.0, 98.0, 99.0, 95.0]));
    assert_eq!(d.limit, Limit::ServerCpu, "{}", d.sentence);
    // The same fall from a first level with room on its CPU is coherency.
    let d = diagnose_all(&grpcio_dip(ROOM_AT_FIRST));
    assert_eq!(d.limit, Limit::Coherency, "{}", d.sentence);
}

/// grpcio on its one CPU, measured once a level: a noisy peak at 4 clients and 16% below it
/// at 16, its CPU `busy_pct` busy at each level.
fn grpcio_dip(busy_pct: [f64; 5]) -> Vec<S> {
    bending(|i, s| {
        s.x = [5564.0, 4807.0, 5888.0, 5229.0, 4941.0][i];
        s.server_cpus = "0";
        s.busy_pct = busy_pct[i];
        s.cpu_us = [167.1, 193.5, 164.7, 189.3, 190.2][i];
        s.busiest = Some(("grpcio", 45.0));
    })
}

/// A first level with room on its CPU.
const ROOM_AT_FIRST: [f64; 5] = [60.0, 80.0, 98.0, 99.0, 95.0];

#[test]
fn a_series_flat_from_its_third_level_stops_scaling_there() {
    // nginx beside a CPU hog (bench/limits.sh): Kneedle sees no knee in it.
    let shape: Vec<S> = [
        (1, 5426.0),
        (2, 7186.0),
        (4, 7752.0),
        (8, 7665.0),
        (16, 7589.0),
    ]
    .iter()
    .map(|&(c, x)| base(c, x))
    .collect();
    let d = diagnose_all(&shape);
    assert_eq!(d.knee_clients, Some(4), "{}", d.sentence);
    assert!(
        d.sentence.starts_with(
            "web/sep stops scaling at 4 clients (throughput is level within noise (3% of the \
             peak) at 4, 8, 16 clients"
        ),
        "{}",
        d.sentence
    );
}

#[test]
fn neither_side_busy_and_latency_as_littles_law_says() {
    let d = diagnose_all(&bending(|i, s| {
        s.busy_pct = [5.0, 9.0, 14.0, 15.0, 15.0][i];
        s.client_busy_pct = 10.0;
        s.busiest = Some(("srv", 12.0));
    }));
    assert_eq!(d.limit, Limit::Outside);
    assert_eq!(d.confidence, Confidence::High);
    let lat = metric(&d, Metric::MeanLatencyUs).value;
    assert!((lat - 16.0 / 31e3 * 1e6).abs() < 1e-6, "{lat}");
    assert!(d.sentence.contains("outside both processes"));
    assert!(
        d.sentence
            .contains("neither side is busy (server 15% of its CPUs, client 10% of its own)"),
        "{}",
        d.sentence
    );
}

#[test]
fn a_pipeline_still_creeping_up_past_its_knee_is_outside() {
    // Recorded (rounded) from examples/limits-outside.toml on a loaded machine: 2 places held
    // 2 ms each; throughput still creeps up 15% after the knee.
    let shape: Vec<S> = [(1, 109.0), (2, 372.0), (4, 576.0), (8, 659.0), (16, 665.0)]
        .iter()
        .map(|&(c, x)| {
            let mut s = base(c, x);
            s.busy_pct = 15.0;
            s.client_busy_pct = 7.0;
            s
        })
        .collect();
    let d = diagnose_all(&shape);
    assert_eq!((d.limit, d.knee_clients), (Limit::Outside, Some(4)));
}

#[test]
fn saturated_generator_or_too_few_in_flight() {
    let d = diagnose_all(&bending(|i, s| s.saturated = i >= 3));
    assert_eq!(d.limit, Limit::Client);
    assert_eq!(metric(&d, Metric::ClientSaturated).at_clients, Some(8));
    // Little's law: only half the configured requests were in flight.
    let d = diagnose_all(&bending(|_, s| {
        s.latency_us = Some(s.clients as f64 / s.x * 0.5e6)
    }));
    assert_eq!(d.limit, Limit::Client);
    assert!((metric(&d, Metric::LittleRatio).value - 0.5).abs() < 1e-9);
    assert!(
        d.sentence
            .contains("only 8.0 of the 16 configured requests"),
        "{}",
        d.sentence
    );
}

/// memcached with 4 threads on one CPU, as measured in CI: the CPU full from the first
/// levels, the generator saturated only at 16 clients. Named "client" before: the server's
/// limit came first.
#[test]
fn a_generator_saturating_after_the_servers_cpus_filled_does_not_hide_them() {
    let run_delay = [
        (1.0, 5.0),
        (2.0, 10.0),
        (10.0, 80.0),
        (30.0, 150.0),
        (60.0, 300.0),
    ];
    let d = diagnose_all(&bending(|i, s| {
        s.server_cpus = "1";
        s.busy_pct = if i == 0 { 60.0 } else { 99.0 };
        s.run_delay = Some(run_delay[i]);
        s.saturated = i == 4;
    }));
    assert_eq!(d.limit, Limit::Oversubscription, "{}", d.sentence);
    assert!(
        d.notes
            .iter()
            .any(|n| n.contains("saturated from 16 clients")),
        "{:?}",
        d.notes
    );
    // redis in CI: its one thread full at 1 and 2 clients, the generator saturated from 4,
    // throughput falling after. Named coherency when the fall was read.
    let d = diagnose_all(&bending(|i, s| {
        s.server_cpus = "1";
        s.x = [170e3, 165e3, 120e3, 100e3, 95e3][i];
        let busy = if i < 2 { 99.0 } else { 80.0 };
        (s.busy_pct, s.busiest) = (busy, Some(("redis-server", busy)));
        s.saturated = i >= 2;
    }));
    assert_eq!(d.limit, Limit::OneThread, "{}", d.sentence);
    // The same generator saturating while the server still had room is the client's limit.
    let d = diagnose_all(&bending(|i, s| {
        s.server_cpus = "1";
        s.busy_pct = if i < 4 { 60.0 } else { 99.0 };
        s.run_delay = Some(run_delay[i]);
        s.saturated = i == 3;
    }));
    assert_eq!(d.limit, Limit::Client, "{}", d.sentence);
    // redis in CI again: the generator saturated at 1 client only, throughput rising to the
    // knee after it and redis's one thread full there. Named "client" before: a level that
    // later levels outgrew did not hold the series back.
    let one_thread_full = |i: usize, s: &mut S| {
        s.server_cpus = "1";
        let busy = [70.0, 85.0, 99.0, 99.0, 99.0][i];
        (s.busy_pct, s.busiest) = (busy, Some(("redis-server", busy)));
    };
    let d = diagnose_all(&bending(|i, s| {
        one_thread_full(i, s);
        s.saturated = i == 0;
    }));
    assert_eq!(d.limit, Limit::OneThread, "{}", d.sentence);
    // Saturated again where the series is flat: that level held it back.
    let d = diagnose_all(&bending(|i, s| {
        one_thread_full(i, s);
        s.saturated = i == 0 || i == 4;
    }));
    assert_eq!(d.limit, Limit::OneThread, "{}", d.sentence);
    let d = diagnose_all(&bending(|i, s| {
        s.saturated = i == 0 || i == 4;
    }));
    assert_eq!(d.limit, Limit::Client, "{}", d.sentence);
    assert_eq!(metric(&d, Metric::ClientSaturated).at_clients, Some(16));
}

#[test]
fn nothing_fits_and_each_limit_says_what_ruled_it_out() {
    let d = diagnose_all(&bending(|_, s| {
        s.busy_pct = 75.0;
        s.client_busy_pct = 70.0;
    }));
    assert_eq!(
        (d.limit, d.confidence),
        (Limit::Undetermined, Confidence::Low)
    );
    for m in [
        Metric::ClientSaturated,
        Metric::ServerCpuPct,
        Metric::BusiestThreadCpuPct,
        Metric::RunDelayPct,
        Metric::CpuUsPerReq,
        Metric::ThroughputRps,
    ] {
        metric(&d, m);
    }
    assert_eq!(metric(&d, Metric::ServerCpuPct).value, 75.0);
    // The sentence says what the table shows: nothing full, what had room, what was missing.
    assert!(
        d.sentence.contains(
            "no rule fits the evidence (the load generator's CPUs, the server's CPUs with room; \
             its busiest thread, its sockets' queues, the link, the disk not observed): \
             undetermined"
        ),
        "{}",
        d.sentence
    );
}

/// PostgreSQL's hot row with 2 ms of client work before and 0.5 ms inside the lock, on one
/// server CPU (measured): flat past 4 clients, the row lock's waiters woken together at each
/// commit (voluntary switches per request 3.5 -> 15.9, run-queue wait 8% -> 265% of the
/// window) while the server's own CPU stays under half of its one CPU.
fn hot_row(each: impl Fn(usize, &mut S)) -> Vec<S> {
    [
        (1, 331.0),
        (2, 654.0),
        (4, 1302.0),
        (8, 1291.0),
        (16, 1254.0),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(c, x))| {
        let mut s = base(c, x);
        s.server_cpus = "0";
        s.busy_pct = [12.0, 18.0, 30.0, 33.0, 43.0][i];
        s.cpu_us = [362.0, 275.0, 242.0, 275.0, 367.0][i];
        s.vol_cs = [3.5, 4.0, 4.15, 8.0, 15.9][i];
        s.run_delay = Some(
            [
                (240.0, 8.0),
                (180.0, 12.0),
                (215.0, 28.0),
                (730.0, 94.0),
                (2273.0, 265.0),
            ][i],
        );
        each(i, &mut s);
        s
    })
    .collect()
}

#[test]
fn waiters_woken_together_are_contention_not_oversubscription() {
    let d = diagnose_all(&hot_row(|_, _| ()));
    assert_eq!(d.limit, Limit::Contention, "{}", d.sentence);
    assert!(
        d.sentence
            .contains("voluntary switches per request from 3.50 to 15.90"),
        "{}",
        d.sentence
    );
    // The same run-queue wait with blocking per request flat is more threads than CPUs.
    let busy = diagnose_all(&hot_row(|_, s| s.vol_cs = 3.5));
    assert_eq!(busy.limit, Limit::Oversubscription, "{}", busy.sentence);
}

/// The hot row measured in CI: its last level 13% under the peak one level before it.
fn dip(i: usize, s: &mut S) {
    s.x = [339.0, 671.0, 1332.0, 1405.0, 1219.0][i];
}

#[test]
fn one_low_last_step_after_the_peak_is_flat_not_undetermined() {
    // Measured in CI: the hot row's last level 13% under the peak one level before it.
    // Coherency needs two levels past the peak; the flat part must then take the dip.
    let d = diagnose_all(&hot_row(dip));
    assert_eq!(d.limit, Limit::Contention, "{}", d.sentence);
    // Two low steps past the peak are a fall: coherency.
    let mut longer = hot_row(dip);
    let mut last = longer[4].clone();
    last.clients = 32;
    last.x = 1100.0;
    longer.push(last);
    let fall = diagnose_all(&longer);
    assert_eq!(fall.limit, Limit::Coherency, "{}", fall.sentence);
}

#[test]
fn one_low_last_step_is_a_fall_when_its_repetitions_say_so() {
    // Measured twice within 1%: the 13% dip is beyond both levels' noise.
    let d = diagnose_two_reps(&hot_row(dip), |_, s| s.x *= 1.01);
    assert_eq!(d.limit, Limit::Coherency, "{}", d.sentence);
    assert!(
        d.sentence
            .contains("throughput falls from 1412 req/s at 8 clients to 1225 req/s at 16"),
        "{}",
        d.sentence
    );
    // The second repetition's last level as high as the peak: the dip is within the noise.
    let d = diagnose_two_reps(&hot_row(dip), |i, s| {
        if i == 4 {
            s.x = 1420.0;
        }
    });
    assert_eq!(d.limit, Limit::Contention, "{}", d.sentence);
}

#[test]
fn a_fall_two_levels_past_the_peak_is_judged_by_repetitions_where_there_are_some() {
    // grpcio's noisy single steps, its first level with room on its CPU: coherency when
    // measured once (two levels past the peak, the last 16% below it).
    // A second repetition 11% higher at the last level: its mean is still 11% under the
    // peak, but the two repetitions' spread covers the peak: the fall is noise.
    let d = diagnose_two_reps(&grpcio_dip(ROOM_AT_FIRST), |i, s| {
        if i == 4 {
            s.x = 5500.0;
        }
    });
    assert_ne!(d.limit, Limit::Coherency, "{}", d.sentence);
    // Two repetitions within 1% of each other: the same fall is beyond their noise.
    let d = diagnose_two_reps(&grpcio_dip(ROOM_AT_FIRST), |_, s| s.x *= 1.01);
    assert_eq!(d.limit, Limit::Coherency, "{}", d.sentence);
}

#[test]
fn without_a_knee_the_flat_part_starts_at_the_saturation_point() {
    // The peak is the first flat level, so Kneedle (on the rising part only) sees a line.
    let d = diagnose_all(&hot_row(|_, _| ()));
    assert_eq!(d.knee_clients, None);
    assert_eq!(d.confidence, Confidence::Low);
    assert_eq!(d.limit, Limit::Contention, "{}", d.sentence);
    // Still rising at the last level: no flat part, no contention.
    let rising = diagnose_all(&hot_row(|i, s| s.x = 330.0 * (1 << i) as f64));
    assert_ne!(rising.limit, Limit::Contention, "{}", rising.sentence);
}

#[test]
fn no_knee_is_never_more_than_low() {
    let shape: Vec<S> = [1, 2, 4, 8]
        .iter()
        .map(|&c| {
            let mut s = base(c, 10e3 * c as f64);
            s.busiest = Some(("srv", 95.0));
            s.server_cpus = "1";
            s.cpu_us = 9.0;
            s
        })
        .collect();
    let d = diagnose_all(&shape);
    assert_eq!(d.knee_clients, None);
    assert_eq!(d.confidence, Confidence::Low);
    assert!(
        d.sentence
            .starts_with("web/sep shows no knee up to 8 clients"),
        "{}",
        d.sentence
    );
}

/// A profile whose lock share went from `a` % at 4 clients to `b` % at 16.
fn profile(a: f64, b: f64) -> ProfileEvidence {
    let level = |clients, label: &str, sync_pct| profile::ProfiledLevel {
        clients,
        label: label.into(),
        sync_pct,
    };
    ProfileEvidence {
        a: level(4, "busy (4 clients)", a),
        b: level(16, "saturated (16 clients)", b),
        growers: vec![("futex_wait".into(), 1.0, 9.0)],
    }
}

#[test]
fn a_growing_lock_share_supports_contention_and_names_nothing_alone() {
    let contended: Vec<StepResult> = bending(|i, s| {
        s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
        s.cpu_us = [20.0, 22.0, 30.0, 45.0, 70.0][i];
    })
    .iter()
    .map(step)
    .collect();
    let series = analyze_steps(&contended).series.remove(0);
    let refs: Vec<&StepResult> = contended.iter().collect();
    let with = diagnose_with_profile(&series, &refs, Some(&profile(3.0, 14.0)));
    assert_eq!(
        (with.limit, with.confidence),
        (Limit::Contention, Confidence::High)
    );
    assert!(
        with.sentence.contains(
            "and lock, futex and scheduler frames from 3.0% to 14.0% of CPU samples (4 clients to 16)"
        ),
        "{}",
        with.sentence
    );
    assert_eq!(metric(&with, Metric::ProfileGrowthPoints).value, 8.0);
    let flat = diagnose_with_profile(&series, &refs, Some(&profile(3.0, 4.0)));
    assert_eq!(flat.limit, Limit::Contention);
    assert!(!flat.sentence.contains("futex"), "{}", flat.sentence);
    assert_eq!(metric(&flat, Metric::SyncFramesPct).value, 4.0);
    // A lock share growing at a busy cpuset with a flat CPU per request stays server_cpu.
    let busy: Vec<StepResult> = bending(|i, s| {
        s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
        s.cpu_us = 20.0;
    })
    .iter()
    .map(step)
    .collect();
    let series = analyze_steps(&busy).series.remove(0);
    let refs: Vec<&StepResult> = busy.iter().collect();
    let d = diagnose_with_profile(&series, &refs, Some(&profile(3.0, 14.0)));
    assert_eq!(d.limit, Limit::ServerCpu, "{}", d.sentence);
    assert_eq!(metric(&d, Metric::SyncFramesPct).value, 14.0);
}

#[test]
fn the_built_in_generators_own_threads_are_evidence_where_it_gave_them() {
    let with_threads = |i: usize, s: &S| {
        let mut r = step(s);
        let cpu = &mut r.load.as_mut().unwrap().client_cpu;
        cpu.busiest_thread_pct = Some(60.0 + 10.0 * i as f64);
        cpu.run_delay_pct = Some(5.0 * i as f64);
        r
    };
    let diagnose_threads = |shape: &[S]| {
        let steps: Vec<StepResult> = shape
            .iter()
            .enumerate()
            .map(|(i, s)| with_threads(i, s))
            .collect();
        analyze_steps(&steps).diagnosis[0].clone()
    };
    // A saturated generator: its busiest thread and its wait at the level it saturated.
    let d = diagnose_threads(&bending(|i, s| s.saturated = i >= 3));
    assert_eq!(d.limit, Limit::Client);
    let busiest = metric(&d, Metric::ClientBusiestThreadPct);
    assert_eq!((busiest.value, busiest.at_clients), (90.0, Some(8)));
    assert_eq!(metric(&d, Metric::ClientRunDelayPct).value, 15.0);
    // Nothing fits: they are among what ruled the client out, at the last level.
    let d = diagnose_threads(&bending(|_, s| {
        s.busy_pct = 75.0;
        s.client_busy_pct = 70.0;
    }));
    assert_eq!(d.limit, Limit::Undetermined);
    assert_eq!(metric(&d, Metric::ClientBusiestThreadPct).value, 100.0);
    assert_eq!(metric(&d, Metric::ClientRunDelayPct).at_clients, Some(16));
    // An external tool gives neither: no such evidence.
    let d = diagnose_all(&bending(|i, s| s.saturated = i >= 3));
    assert!(!d
        .evidence
        .iter()
        .any(|e| e.metric == Metric::ClientBusiestThreadPct));
}

/// Issue 33's resources outside the CPU: `io(i)` gives level i's `server.sockets`, `link` and
/// `disk` (merged into the step's server figures).
fn diagnose_io(shape: &[S], io: impl Fn(usize) -> serde_json::Value) -> Diagnosis {
    let steps: Vec<StepResult> = shape
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut r = step(s);
            let mut server = serde_json::to_value(&r.server).unwrap();
            if let (Some(figures), serde_json::Value::Object(extra)) =
                (server.as_object_mut(), io(i))
            {
                figures.extend(extra);
            }
            r.server = serde_json::from_value(server).unwrap();
            r
        })
        .collect();
    let a = analyze_steps(&steps);
    a.diagnosis[0].clone()
}

fn quiet(_: usize, s: &mut S) {
    s.busy_pct = 10.0;
    s.client_busy_pct = 10.0;
    s.busiest = Some(("worker", 8.0));
}

#[test]
fn requests_waiting_unread_in_an_idle_server_are_a_concurrency_limit() {
    // 2 workers at 5 ms: 400 req/s; the rest of the clients wait in the accept queue.
    let shape: Vec<S> = [(1, 190.0), (2, 380.0), (4, 400.0), (8, 400.0), (16, 400.0)]
        .iter()
        .map(|&(c, x)| {
            let mut s = base(c, x);
            quiet(0, &mut s);
            s.latency_us = Some(if c == 1 { 5_000.0 } else { c as f64 / x * 1e6 });
            s
        })
        .collect();
    let waiting = [0.0, 0.1, 2.0, 6.0, 14.0];
    let d = diagnose_io(&shape, |i| {
        json!({"sockets": {"waiting_mean": waiting[i], "unread_connections_mean": 1.0,
            "accept_queue_mean": waiting[i] - 1.0, "samples": 20}})
    });
    assert_eq!(d.limit, Limit::Concurrency, "{}", d.sentence);
    assert_eq!(d.confidence, Confidence::High, "{}", d.sentence);
    assert_eq!(metric(&d, Metric::WaitingRequests).value, 14.0);
    assert!((metric(&d, Metric::ServedAtOnce).value - 2.0).abs() < 1e-9);
    assert!(
        d.sentence
            .contains("14.0 of the 16 requests waited unread inside it")
            && d.sentence.contains("served about 2.0 at once")
            && d.sentence.ends_with("Next: more workers or threads."),
        "{}",
        d.sentence
    );
    // Empty sockets: the same curve is outside, and the evidence says the sockets were empty.
    let d = diagnose_io(&shape, |_| json!({"sockets": {"waiting_mean": 0.2}}));
    assert_eq!(d.limit, Limit::Outside, "{}", d.sentence);
    assert_eq!(metric(&d, Metric::WaitingRequests).value, 0.2);
    assert!(metric(&d, Metric::LinkUtilisationPct).value.is_nan());
}

fn link(util: f64) -> serde_json::Value {
    json!({"link": {"interface": "veth", "tx_bytes_per_s": util / 100.0 * 25e6,
        "qdisc": "tbf", "qdisc_rate_bits_per_s": 200e6, "capacity_bits_per_s": 200e6,
        "utilisation_pct": util, "qdisc_overlimits": 900, "qdisc_drops": 12,
        "tcp_retrans_segs": 30}})
}

#[test]
fn a_full_link_wins_over_littles_law_but_not_over_a_saturated_client() {
    // Fewer requests in flight than configured (X·R/L = 0.5), as behind a full link.
    let shape = bending(|i, s| {
        quiet(i, s);
        s.latency_us = Some(s.clients as f64 / s.x * 0.5e6);
    });
    let util = [30.0, 60.0, 95.0, 97.0, 97.0];
    let d = diagnose_io(&shape, |i| link(util[i]));
    assert_eq!(d.limit, Limit::Network, "{}", d.sentence);
    assert_eq!(d.confidence, Confidence::High, "{}", d.sentence);
    assert!(
        d.sentence
            .contains("the link veth (tbf at 200.0 Mbit/s) carried 194.0 Mbit/s, 97% of it")
            && d.sentence.contains("900 overlimits, 12 drops")
            && d.sentence
                .ends_with("Next: a faster link or smaller replies."),
        "{}",
        d.sentence
    );
    // Without the link's figures the same curve is the client's (Little's law).
    let d = diagnose_io(&shape, |_| json!({}));
    assert_eq!(d.limit, Limit::Client, "{}", d.sentence);
    // A saturated generator still hides everything.
    let saturated = bending(|i, s| {
        quiet(i, s);
        s.saturated = i >= 3;
    });
    let d = diagnose_io(&saturated, |i| link(util[i]));
    assert_eq!(d.limit, Limit::Client, "{}", d.sentence);
}

#[test]
fn an_idle_server_waiting_on_a_full_io_throttle_is_a_disk_limit() {
    let shape = bending(quiet);
    let used = [40.0, 80.0, 99.0, 100.0, 100.0];
    let disk = |i: usize, waiting: f64| {
        json!({"disk": {"devices": [{"device": "vda", "dev": "254:0", "util_pct": 12.0,
            "queue_mean": 0.1}], "blkio_delay_s": waiting * 2.0, "blkio_waiting_mean": waiting,
            "throttles": [{"cgroup": "/sb-disk", "dev": "254:0", "kind": "write_bps",
            "limit_per_s": 4194304.0, "used_per_s": used[i] / 100.0 * 4194304.0,
            "use_pct": used[i]}]}})
    };
    let d = diagnose_io(&shape, |i| disk(i, 1.0 + i as f64));
    assert_eq!(d.limit, Limit::Disk, "{}", d.sentence);
    assert_eq!(d.confidence, Confidence::High, "{}", d.sentence);
    assert!(
        d.sentence
            .contains("on average 5.0 of its tasks waited for block I/O")
            && d.sentence
                .contains("write_bps throttle on 254:0 (4.19 MB/s) was 100% used")
            && d.sentence
                .ends_with("or group commit (fewer syncs per request)."),
        "{}",
        d.sentence
    );
    // A full throttle nobody waits on is not the limit.
    let d = diagnose_io(&shape, |i| disk(i, 0.1));
    assert_ne!(d.limit, Limit::Disk, "{}", d.sentence);
}

/// The steps of `shape`, each with `extra` merged into its `server` object (the window, the
/// tree's CPU, the cgroups, the neighbours).
fn diagnose_with(shape: &[S], extra: impl Fn(usize) -> serde_json::Value) -> Diagnosis {
    let d = analyze_steps(&steps_with(shape, extra)).diagnosis[0].clone();
    assert!(d.sentence.starts_with("web/sep "), "{}", d.sentence);
    d
}

/// `shape`'s steps with `extra(i)`'s keys set in step i's server observation.
fn steps_with(shape: &[S], extra: impl Fn(usize) -> serde_json::Value) -> Vec<StepResult> {
    shape
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut r = step(s);
            if let serde_json::Value::Object(m) = extra(i) {
                let mut server = serde_json::to_value(&r.server).unwrap();
                for (k, v) in m {
                    server[k] = v;
                }
                r.server = serde_json::from_value(server).unwrap();
            }
            r
        })
        .collect()
}

/// A 2 s window in which the tree used `cpus` CPUs, in a v1 group of 0.2 CPUs throttled in
/// `throttled` of 20 periods.
fn throttled(cpus: f64, throttled: u64) -> serde_json::Value {
    json!({"window_s": 2.0, "server": {"pid": 1, "user_s": 2.0 * cpus, "sys_s": 0.0},
        "cgroup_cpu": {"groups": [{"path": "/stairbench-quota", "version": 1, "quota_cpus": 0.2,
            "period_us": 100000, "periods": 20, "throttled_periods": throttled,
            "throttled_s": 0.08 * throttled as f64, "usage_s": 2.0 * cpus}]}})
}

/// Latency as Little's law predicts, both sides idle, throughput flat past 4 clients: what
/// the old diagnosis called `outside`, at high confidence.
fn idle_flat() -> Vec<S> {
    bending(|_, s| {
        s.busy_pct = 10.0;
        s.client_busy_pct = 20.0;
    })
}

#[test]
fn a_throttling_quota_is_the_limit_not_outside() {
    let before = diagnose_all(&idle_flat());
    assert_eq!(before.limit, Limit::Outside, "{}", before.sentence);
    let d = diagnose_with(&idle_flat(), |i| {
        throttled([0.1, 0.15, 0.2, 0.2, 0.2][i], [0, 5, 19, 19, 19][i])
    });
    assert_eq!(
        (d.limit, d.confidence),
        (Limit::Quota, Confidence::High),
        "{}",
        d.sentence
    );
    assert_eq!(metric(&d, Metric::QuotaCpus).value, 0.2);
    assert_eq!(metric(&d, Metric::ThrottledPeriodsPct).value, 95.0);
    assert!(
        d.sentence.contains(
            "its cgroup /stairbench-quota allows 0.20 CPUs (cpu.cfs_quota_us) and throttled it in 19 of 20 periods (1.52 s throttled in 2.0 s) at 16 clients, while the server used 0.20 CPUs (100% of the quota)"
        ),
        "{}",
        d.sentence
    );
    assert!(
        d.sentence.ends_with(
            "a CPU quota limit. Next: raise the cgroup's CPU quota (cpu.cfs_quota_us) or run the server outside that cgroup."
        ),
        "{}",
        d.sentence
    );
    // A quota the server stayed far below rules it out, and says so among outside's figures.
    let d = diagnose_with(&idle_flat(), |_| throttled(0.02, 0));
    assert_eq!(d.limit, Limit::Outside, "{}", d.sentence);
    assert_eq!(metric(&d, Metric::ThrottledPeriodsPct).value, 0.0);
}

/// `others_pct` of the server's one CPU taken by pid 77 (`sh`), the CPU `busy` % busy.
fn neighbours(others_pct: f64, busy: f64) -> serde_json::Value {
    json!({"window_s": 2.0, "server_cpus_busy_pct": busy,
        "neighbours": {"server_cpus_others_pct": others_pct, "client_cpus_others_pct": 0.0,
            "server_steal_pct": 0.0, "client_steal_pct": 0.0,
            "busiest": [{"pid": 77, "name": "sh", "cpu_pct": others_pct, "server_cpus_pct": others_pct - 1.0, "client_cpus_pct": 0.0}]}})
}

/// [`FALLING`] with the server on CPU 0.
fn falling() -> Vec<S> {
    FALLING
        .iter()
        .map(|&(c, x)| {
            let mut s = base(c, x);
            s.server_cpus = "0";
            s
        })
        .collect()
}

#[test]
fn a_busy_neighbour_is_named_before_coherency() {
    let before = diagnose_all(&falling());
    assert_eq!(before.limit, Limit::Coherency, "{}", before.sentence);
    let d = diagnose_with(&falling(), |_| neighbours(48.0, 99.0));
    assert_eq!(
        (d.limit, d.confidence),
        (Limit::Neighbour, Confidence::High),
        "{}",
        d.sentence
    );
    assert_eq!(metric(&d, Metric::NeighboursPct).value, 48.0);
    assert!(
        d.sentence.contains("other processes took 48% of its 1 CPU at 32 clients while it was 99% busy (steal 0%); the busiest: sh (pid 77) 47%: a neighbour limit. Next: move the other processes off the server's CPUs"),
        "{}",
        d.sentence
    );
}

#[test]
fn a_series_whose_every_step_was_disturbed_says_by_what_not_nothing_measured() {
    let mut steps = steps_with(&falling(), |_| neighbours(48.0, 99.0));
    for s in &mut steps {
        s.status = StepStatus::Disturbed;
        s.figures.disturbed = Some(crate::record::figures::Disturbance {
            server_cpus_others_pct: Some(48.0),
            threshold_pct: 10.0,
            ..Default::default()
        });
    }
    // Left out of the diagnosis as of every other analysis: no limit is read from them.
    let d = analyze_steps(&steps).diagnosis[0].clone();
    assert_eq!(d.limit, Limit::Undetermined, "{}", d.sentence);
    assert!(
        d.sentence.starts_with(
            "web/sep: every step it measured was disturbed, so none is analysed (the most: \
             other processes took 48% of the server's CPUs"
        ) && d.sentence.contains("--keep-disturbed"),
        "{}",
        d.sentence
    );
    // Kept (`--keep-disturbed`: ok and marked), they are read: the neighbour is named.
    for s in &mut steps {
        s.status = StepStatus::Ok;
    }
    let d = analyze_steps(&steps).diagnosis[0].clone();
    assert_eq!(d.limit, Limit::Neighbour, "{}", d.sentence);
}

#[test]
fn a_neighbour_the_server_never_waited_for_is_not_its_limit() {
    // A job under `nice` fills the server's idle time and yields whenever it wakes: the CPUs
    // are busy and others took 48% of them, but the server's threads waited 2% of the window.
    let waited = |pct: f64| -> Vec<S> {
        let mut shape = falling();
        for s in &mut shape {
            s.run_delay = Some((5.0, pct));
        }
        shape
    };
    let niced = diagnose_with(&waited(2.0), |_| neighbours(48.0, 99.0));
    assert_eq!(niced.limit, Limit::Coherency, "{}", niced.sentence);
    let competed = diagnose_with(&waited(45.0), |_| neighbours(48.0, 99.0));
    assert_eq!(competed.limit, Limit::Neighbour, "{}", competed.sentence);
}

#[test]
fn a_neighbour_with_room_left_caps_another_limits_confidence_and_says_so() {
    let d = diagnose_with(&falling(), |_| neighbours(12.0, 60.0));
    assert_eq!(d.limit, Limit::Coherency, "{}", d.sentence);
    assert!(d.confidence < Confidence::High, "{d:?}");
    assert!(
        d.notes.iter().any(
            |n| n.contains("other processes took 12% of the server's CPUs")
                && n.contains("; the busiest: sh (pid 77) 11%")
                && n.ends_with("no limit is named at high confidence")
        ),
        "{:?}",
        d.notes
    );
}

#[test]
fn a_series_flat_from_its_second_level_stops_scaling_at_2() {
    let shape: Vec<S> = [(1, 10e3), (2, 30e3), (4, 30.3e3), (8, 30.1e3), (16, 30.2e3)]
        .iter()
        .map(|&(c, x)| base(c, x))
        .collect();
    let d = diagnose_all(&shape);
    assert!(
        d.sentence.contains("stops scaling at 2 clients"),
        "{}",
        d.sentence
    );
    assert!(!d.sentence.contains("no knee"), "{}", d.sentence);
    assert_eq!(d.knee_clients, Some(2), "{d:?}");
    // The series' knee, which the scalability tables (markdown, HTML) print, says the same.
    let steps: Vec<StepResult> = shape.iter().map(step).collect();
    let a = analyze_steps(&steps);
    let knee = a.series[0].knee.as_ref().unwrap().throughput_knee;
    assert_eq!(knee, Some(2.0), "{:?}", a.series[0].knee);
}

#[test]
fn every_sentence_ends_with_what_to_try_next() {
    for d in [
        diagnose_all(&falling()),
        diagnose_all(&idle_flat()),
        diagnose_all(&bending(|i, s| s.saturated = i >= 3)),
        diagnose_all(&bending(|_, s| s.busy_pct = 75.0)),
    ] {
        let next = d.sentence.rsplit_once(". Next: ").map(|x| x.1);
        assert!(
            next.is_some_and(|n| n.ends_with('.') && !n.contains(". ") && !n.contains('\n')),
            "{}",
            d.sentence
        );
    }
}

/// Over generated series (rising, bending, falling; idle or busy; with throttling and
/// neighbours on random levels), a limit named at high confidence never contradicts the
/// recorded evidence of another: a throttled quota is never `outside`, a neighbour's share
/// of 10% or more past the knee never leaves another limit at high.
#[test]
fn a_high_limit_never_contradicts_the_recorded_evidence_of_another() {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f64 / (1u64 << 53) as f64
    };
    for case in 0..300 {
        let base_shape = match case % 3 {
            0 => idle_flat(),
            1 => falling(),
            _ => bending(|i, s| s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i]),
        };
        let n = base_shape.len();
        let busy = 10.0 + 90.0 * next();
        let throttle: Vec<u64> = (0..n).map(|_| (20.0 * next()) as u64).collect();
        let others: Vec<f64> = (0..n).map(|_| 30.0 * next()).collect();
        let with_quota = next() < 0.5;
        let with_neighbours = next() < 0.5;
        let d = diagnose_with(&base_shape, |i| {
            let mut v = json!({"window_s": 2.0});
            if with_quota {
                v = throttled(0.2 * throttle[i] as f64 / 20.0, throttle[i]);
            }
            if with_neighbours {
                let nb = neighbours(others[i], busy);
                v["neighbours"] = nb["neighbours"].clone();
                v["server_cpus_busy_pct"] = nb["server_cpus_busy_pct"].clone();
            }
            v
        });
        let top = n - 1;
        if with_quota && throttle[top] >= 4 {
            assert_ne!(d.limit, Limit::Outside, "case {case}: {}", d.sentence);
        }
        let from = d
            .knee_clients
            .and_then(|k| base_shape.iter().position(|s| s.clients == k))
            .unwrap_or(top);
        let neighbour_seen = with_neighbours && others[from..].iter().any(|&o| o >= 10.0);
        if neighbour_seen && d.confidence == Confidence::High {
            assert_eq!(
                d.limit,
                Limit::Neighbour,
                "case {case}: {} {:?}",
                d.sentence,
                d.notes
            );
        }
        if neighbour_seen {
            assert!(
                d.limit == Limit::Neighbour
                    || d.notes.iter().any(|n| n.contains("other processes took")),
                "case {case}: {} {:?}",
                d.sentence,
                d.notes
            );
        }
    }
}

#[test]
fn limit_and_confidence_names_are_serdes() {
    for l in Limit::ALL {
        let json = serde_json::to_string(&l).unwrap();
        assert_eq!(json, format!("\"{l}\""));
        assert_eq!(serde_json::from_str::<Limit>(&json).unwrap(), l);
    }
    for c in Confidence::ALL {
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(json, format!("\"{c}\""));
        assert_eq!(serde_json::from_str::<Confidence>(&json).unwrap(), c);
    }
    let mut names: Vec<&str> = Limit::ALL.iter().map(|l| l.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Limit::ALL.len());
}

/// A run of three series (a single-thread limit measured twice, a series nothing fits whose
/// evidence holds figures not measured, a client limit) as analysis.json holds it.
fn three_series() -> RunAnalysis {
    let named = |target: &str, shape: Vec<S>, rep: usize| -> Vec<StepResult> {
        shape
            .iter()
            .map(|s| {
                let mut r = step(s);
                r.target = target.into();
                r.rep = rep;
                r.id = format!("{target}.sep.c{}.r{rep}", s.clients);
                r
            })
            .collect()
    };
    let thread = |i: usize, s: &mut S| {
        s.busiest = Some(("reactor-0", [30.0, 55.0, 92.0, 96.0, 97.0][i]));
        s.busy_pct = [15.0, 28.0, 47.0, 49.0, 50.0][i];
        s.cpu_us = 7.7;
    };
    let mut steps = named("redis", bending(thread), 0);
    steps.extend(named(
        "redis",
        bending(|i, s| {
            thread(i, s);
            s.x *= 1.01;
        }),
        1,
    ));
    steps.extend(named(
        "web",
        bending(|_, s| {
            s.busy_pct = 75.0;
            s.client_busy_pct = 70.0;
        }),
        0,
    ));
    steps.extend(named("wrk", bending(|i, s| s.saturated = i >= 3), 0));
    analyze_steps(&steps)
}

/// `a` and `b` hold the same keys, strings, nulls and bools, and numbers within 1e-12.
fn same_json(a: &serde_json::Value, b: &serde_json::Value, at: &str) {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            assert!(
                (x - y).abs() <= 1e-12 * x.abs().max(1.0),
                "{at}: {x} != {y}"
            );
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys = |m: &serde_json::Map<String, Value>| m.keys().cloned().collect::<Vec<_>>();
            assert_eq!(keys(x), keys(y), "{at}");
            for (k, v) in x {
                same_json(v, &y[k], &format!("{at}.{k}"));
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            assert_eq!(x.len(), y.len(), "{at}");
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                same_json(v, w, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(a, b, "{at}"),
    }
}

#[test]
fn analysis_json_reads_back_into_its_types() {
    let a = three_series();
    let limits: Vec<Limit> = a.diagnosis.iter().map(|d| d.limit).collect();
    assert_eq!(
        limits,
        [Limit::OneThread, Limit::Undetermined, Limit::Client]
    );
    let undetermined = &a.diagnosis[1];
    assert!(undetermined
        .figure(Metric::BusiestThreadCpuPct)
        .unwrap()
        .is_nan());
    let written = serde_json::to_string_pretty(&a).unwrap();
    let back: RunAnalysis = serde_json::from_str(&written).unwrap();
    // serde_json reads a float to within one ulp (its exact parser is a feature left off):
    // every name, string and null the same, every number within 1e-12.
    let again = serde_json::to_value(&back).unwrap();
    same_json(&serde_json::to_value(&a).unwrap(), &again, "");
    let back_limits: Vec<Limit> = back.diagnosis.iter().map(|d| d.limit).collect();
    assert_eq!(back_limits, limits);
    assert_eq!(back.diagnosis[0].confidence, a.diagnosis[0].confidence);
    assert_eq!(
        back.diagnosis[1].evidence.len(),
        undetermined.evidence.len()
    );
    // The names are the ones scripts read: `"metric": "busiest_thread_cpu_pct"`, a figure not
    // measured as null.
    assert!(written.contains("\"limit\": \"one_thread\""), "{written}");
    assert!(
        written.contains("\"metric\": \"busiest_thread_cpu_pct\",\n          \"value\": null"),
        "{written}"
    );
}

/// The names schema/analysis.schema.json allows for a diagnosis' `path` (`limit`,
/// `confidence`, `evidence.metric`).
fn schema_enum(path: &[&str]) -> Vec<String> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/analysis.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let mut at = &schema["$defs"]["diagnosis"]["properties"];
    for (i, key) in path.iter().enumerate() {
        at = &at[key];
        if i + 1 < path.len() {
            at = &at["items"]["properties"];
        }
    }
    let list = at["enum"]
        .as_array()
        .unwrap_or_else(|| panic!("no enum at {path:?}"));
    list.iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_schema_names_every_limit_confidence_and_metric() {
    let names = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        schema_enum(&["limit"]),
        names(Limit::ALL.iter().map(|l| l.as_str()).collect())
    );
    assert_eq!(
        schema_enum(&["confidence"]),
        names(Confidence::ALL.iter().map(|c| c.as_str()).collect())
    );
    assert_eq!(
        schema_enum(&["evidence", "metric"]),
        names(Metric::ALL.iter().map(|m| m.as_str()).collect())
    );
    let serde_names = |v: Vec<serde_json::Value>| -> Vec<String> {
        v.iter().map(|x| x.as_str().unwrap().to_string()).collect()
    };
    assert_eq!(
        schema_enum(&["resources", "resource"]),
        serde_names(resources::Resource::ALL.iter().map(|r| json!(r)).collect())
    );
    assert_eq!(
        schema_enum(&["resources", "thresholds", "threshold"]),
        serde_names(resources::Threshold::ALL.iter().map(|t| json!(t)).collect())
    );
}

/// A 2 s window in which the server's 4 threads spent `storage`, `lock` and `socket`
/// thread-seconds blocked, 0.4 on a CPU and the rest waiting for work; their socket waits on
/// an upstream gunicorn.
fn states(storage: f64, lock: f64, socket: f64) -> serde_json::Value {
    let idle = 8.0 - 0.4 - storage - lock - socket;
    json!({"window_s": 2.0, "thread_states": {"groups": [{"pid": 1, "process": "srv",
        "name": "worker", "threads": 4, "seconds": {"on_cpu_user_s": 0.3, "on_cpu_sys_s": 0.1,
        "storage_s": storage, "lock_s": lock, "socket_s": socket, "idle_s": idle},
        "peers": [{"addr": "127.0.0.1:8001", "pid": 42, "process": "gunicorn",
            "thread_s": socket}]}]}})
}

/// `a` with `b`'s keys added (the fixtures' server figures merged).
fn merged(a: serde_json::Value, b: serde_json::Value) -> serde_json::Value {
    let (serde_json::Value::Object(mut a), serde_json::Value::Object(b)) = (a, b) else {
        panic!("objects")
    };
    a.extend(b);
    serde_json::Value::Object(a)
}

fn row(d: &Diagnosis, r: resources::Resource) -> &ResourceRow {
    d.resources
        .iter()
        .find(|x| x.resource == r)
        .unwrap_or_else(|| panic!("no {r:?} row in {:?}", d.resources))
}

/// Catches a table built from other figures than the rules read: for each limit a synthetic
/// series names, the row of the resource it names is saturated (and a limit that names a
/// resource whose row has room, or a table without the row, fails).
#[test]
fn each_limit_names_a_saturated_row_of_its_table() {
    use resources::{named_by, Resource, State};
    let flat = |i: usize, s: &mut S| quiet(i, s);
    let disk = |i: usize| {
        let used = [40.0, 80.0, 99.0, 100.0, 100.0][i];
        json!({"disk": {"devices": [{"device": "vda", "dev": "254:0", "util_pct": 12.0,
            "queue_mean": 0.1}], "blkio_delay_s": 4.0, "blkio_waiting_mean": 2.0,
            "throttles": [{"cgroup": "/sb-disk", "dev": "254:0", "kind": "write_iops",
            "limit_per_s": 100.0, "used_per_s": used, "use_pct": used}]}})
    };
    let waiting = [0.0, 0.1, 2.0, 6.0, 14.0];
    let concurrency: Vec<S> = [(1, 190.0), (2, 380.0), (4, 400.0), (8, 400.0), (16, 400.0)]
        .iter()
        .map(|&(c, x)| {
            let mut s = base(c, x);
            quiet(0, &mut s);
            s.latency_us = Some(if c == 1 { 5_000.0 } else { c as f64 / x * 1e6 });
            s
        })
        .collect();
    let cases: Vec<(Limit, Diagnosis)> = vec![
        (
            Limit::OneThread,
            diagnose_all(&bending(|i, s| {
                s.busiest = Some(("reactor-0", [30.0, 55.0, 92.0, 96.0, 97.0][i]));
                s.cpu_us = 7.7;
            })),
        ),
        (
            Limit::ServerCpu,
            diagnose_all(&bending(|i, s| {
                s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
            })),
        ),
        (
            Limit::Oversubscription,
            diagnose_all(&bending(|i, s| {
                s.server_cpus = "1";
                s.busy_pct = 98.0;
                s.run_delay = Some(
                    [
                        (1.0, 5.0),
                        (2.0, 10.0),
                        (10.0, 80.0),
                        (30.0, 150.0),
                        (60.0, 300.0),
                    ][i],
                );
            })),
        ),
        (
            Limit::Client,
            diagnose_all(&bending(|i, s| s.saturated = i >= 3)),
        ),
        (
            Limit::Concurrency,
            diagnose_io(&concurrency, |i| {
                json!({"sockets": {"waiting_mean": waiting[i], "unread_connections_mean": 1.0,
                    "accept_queue_mean": waiting[i] - 1.0, "samples": 20}})
            }),
        ),
        (
            Limit::Network,
            diagnose_io(
                &bending(|i, s| {
                    quiet(i, s);
                    s.latency_us = Some(s.clients as f64 / s.x * 0.5e6);
                }),
                |i| link([30.0, 60.0, 95.0, 97.0, 97.0][i]),
            ),
        ),
        (Limit::Disk, diagnose_io(&bending(flat), disk)),
        (
            Limit::Quota,
            diagnose_with(&idle_flat(), |i| {
                throttled([0.1, 0.15, 0.2, 0.2, 0.2][i], [0, 5, 19, 19, 19][i])
            }),
        ),
        (
            Limit::Neighbour,
            diagnose_with(&falling(), |_| neighbours(48.0, 99.0)),
        ),
        (
            Limit::Contention,
            diagnose_with(
                &bending(|i, s| {
                    s.busy_pct = [30.0, 60.0, 92.0, 95.0, 96.0][i];
                    s.cpu_us = [20.0, 22.0, 30.0, 45.0, 70.0][i];
                }),
                |i| states(0.0, [0.1, 0.5, 2.0, 4.0, 6.0][i], 0.0),
            ),
        ),
        (
            Limit::Outside,
            diagnose_with(&idle_flat(), |_| states(0.0, 0.1, 6.0)),
        ),
    ];
    for (limit, d) in &cases {
        assert_eq!(d.limit, *limit, "{}", d.sentence);
        let named = named_by(*limit);
        assert!(!named.is_empty(), "{limit}");
        let full: Vec<&ResourceRow> = d
            .resources
            .iter()
            .filter(|r| named.contains(&r.resource) && r.state == State::Saturated)
            .collect();
        assert!(!full.is_empty(), "{limit}: {:#?}", d.resources);
        assert!(full
            .iter()
            .all(|r| r.at_clients == 16 || *limit == Limit::Client || *limit == Limit::Neighbour));
    }
    // Rows the limit does not name keep what their figures say: the one-thread series' CPUs
    // (50% busy) have room, its quota row is absent (no quota), its locks not sampled.
    let one = &cases[0].1;
    assert_eq!(row(one, Resource::ServerCpus).state, State::Room);
    assert_eq!(row(one, Resource::ServerCpus).utilisation_pct, Some(50.0));
    assert!(one
        .resources
        .iter()
        .all(|r| r.resource != Resource::CpuQuota));
    assert_eq!(row(one, Resource::Link).state, State::NotObserved);
    // The disk series: the write-IOPS throttle, its waiting tasks, the device with room.
    let disk = &cases[6].1;
    let throttle = row(disk, Resource::IoThrottle);
    assert_eq!(throttle.name, "cgroup /sb-disk: write_iops on 254:0, 100/s");
    assert_eq!(throttle.utilisation_pct, Some(100.0));
    assert_eq!(throttle.saturation.unwrap().value, 2.0);
    assert_eq!(row(disk, Resource::Disk).state, State::Room);
    // The outside series: the upstream named, 6 of its 7.6 busy thread-seconds on it.
    // Lock waits as long at the first level as at the last (idle helper threads asleep on a
    // condition variable) are not a full lock.
    let idle_helpers = diagnose_with(&idle_flat(), |_| states(0.0, 6.0, 0.0));
    let locks = row(&idle_helpers, Resource::Locks);
    assert!(locks.time_share_pct.unwrap() > 90.0, "{locks:?}");
    assert_eq!(locks.state, State::Room, "{locks:?}");
    // A pool that grows with the clients (Tomcat's exec threads: 4 at 1 client, 129 at 128,
    // measured): its futex waits grow with it, but the pool runs 0.2% of its time at the top,
    // waiting for work, not on a lock. Contention still shows: the same growth from workers
    // that run a tenth of their time.
    let pool = |threads: [u32; 5], cpu_s: [f64; 5]| {
        move |i: usize| {
            let (n, cpu) = (f64::from(threads[i]), cpu_s[i]);
            json!({"window_s": 2.0, "thread_states": {"groups": [{"pid": 1,
                "process": "java", "name": "exec", "threads": threads[i],
                "seconds": {"on_cpu_user_s": cpu, "lock_s": 2.0 * n - cpu}}]}})
        }
    };
    let growing = pool([4, 8, 16, 64, 129], [0.4; 5]);
    let parked = diagnose_with(&idle_flat(), growing);
    let locks = row(&parked, Resource::Locks);
    assert_eq!(locks.state, State::Room, "{locks:?}");
    let contended = pool([4, 8, 16, 64, 129], [0.8, 1.6, 3.2, 12.8, 25.8]);
    let contended = diagnose_with(&idle_flat(), contended);
    let locks = row(&contended, Resource::Locks);
    assert_eq!(locks.state, State::Saturated, "{locks:?}");
    // A fixed pool (the built-in one, 8 workers on 1 CPU, as measured): parked at the first
    // level (0.9% of its time on a CPU), not at the others (3.6%), its waits as sampled flat.
    // They did not come with the load (saturated when "grew" read them through the parked
    // rule: 0 threads waiting at the first level, 7.7 at the last).
    let fixed = pool([8; 5], [0.14, 0.58, 0.58, 0.58, 0.58]);
    let fixed = diagnose_with(&idle_flat(), fixed);
    let locks = row(&fixed, Resource::Locks);
    assert!(locks.time_share_pct.unwrap() > 90.0, "{locks:?}");
    assert_eq!(locks.state, State::Room, "{locks:?}");
    let hop = row(&cases[10].1, Resource::NextHop);
    assert_eq!(hop.name, "gunicorn (pid 42, 127.0.0.1:8001)");
    assert!(
        (hop.time_share_pct.unwrap() - 100.0 * 6.0 / 6.5).abs() < 1e-9,
        "{hop:?}"
    );
}

/// The issue-40 store: one writer that fsyncs every write behind a 100-IOPS throttle, delay
/// accounting off; throughput still grows with the clients because each sync carries more
/// writes (group commit), each request waiting longer. Catches "no rule fits: undetermined.
/// Next: run more repetitions" when the throttle is full and nothing is noisy.
fn fsync_store(latency_ms: [f64; 5]) -> Vec<S> {
    [
        (1, 95.0),
        (4, 300.0),
        (16, 900.0),
        (64, 2500.0),
        (256, 6000.0),
    ]
    .iter()
    .enumerate()
    .map(|(i, &(c, x))| {
        let mut s = base(c, x);
        quiet(i, &mut s);
        s.latency_us = Some(latency_ms[i] * 1e3);
        s
    })
    .collect()
}

fn full_throttle(_: usize) -> serde_json::Value {
    json!({"disk": {"devices": [{"device": "vda", "dev": "254:0", "util_pct": 30.0,
        "queue_mean": 0.3}], "throttles": [{"cgroup": "/kv", "dev": "254:0",
        "kind": "write_iops", "limit_per_s": 100.0, "used_per_s": 100.0, "use_pct": 100.0}]}})
}

#[test]
fn a_still_scaling_series_behind_a_full_io_throttle_is_latency_bound_on_the_disk() {
    let latency = [10.5, 13.3, 17.8, 25.6, 42.7];
    let d = diagnose_io(&fsync_store(latency), full_throttle);
    assert_eq!(d.knee_clients, None, "{}", d.sentence);
    assert_eq!(
        (d.limit, d.confidence),
        (Limit::Disk, Confidence::Low),
        "{}",
        d.sentence
    );
    assert!(
        d.sentence.contains("each request takes 42.7 ms on average")
            && d.sentence.contains("its storage throttle (cgroup /kv: write_iops on 254:0, 100/s) is 100% used")
            && d.sentence.contains("latency-bound on the disk, throughput still growing")
            && d.sentence.contains("as each I/O carries more requests (1.05 operations per request at 1 client, 0.02 at 256)")
            && d.sentence.ends_with(
                "Next: faster storage or a higher I/O limit (its I/O already carries several \
                 requests each)."
            ),
        "{}",
        d.sentence
    );
    assert!(!d.sentence.contains("repetitions"), "{}", d.sentence);
    // Thread states say where the time went when delay accounting is off: 1.9 of 2.0 busy
    // thread-seconds blocked on storage, the throttle's saturation.
    let d = diagnose_io(&fsync_store(latency), |i| {
        merged(full_throttle(i), states(1.6, 0.0, 0.0))
    });
    assert_eq!(d.limit, Limit::Disk, "{}", d.sentence);
    let t = row(&d, resources::Resource::IoThrottle);
    assert!((t.time_share_pct.unwrap() - 80.0).abs() < 1e-9, "{t:?}");
    assert!((t.saturation.unwrap().value - 0.8).abs() < 1e-9, "{t:?}");
    assert!(
        d.sentence
            .contains("80% of their time on something blocked on storage"),
        "{}",
        d.sentence
    );
    // Without the disk's figures nothing names it: undetermined, and the advice is to observe
    // what was not observed, not more repetitions (no level is noisy).
    let d = diagnose_all(&fsync_store(latency));
    assert_eq!(d.limit, Limit::Undetermined, "{}", d.sentence);
    assert!(
        d.sentence
            .contains("Next: observe what the table lists as not observed (")
            && d.sentence.contains("the disk")
            && !d.sentence.contains("repetitions"),
        "{}",
        d.sentence
    );
}

/// Catches advice to run more repetitions when no level is noisy, and its absence when one is.
#[test]
fn more_repetitions_only_when_noise_is_the_reason() {
    let shape = bending(|_, s| {
        s.busy_pct = 75.0;
        s.client_busy_pct = 70.0;
    });
    let quiet = diagnose_all(&shape);
    assert_eq!(quiet.limit, Limit::Undetermined, "{}", quiet.sentence);
    assert!(
        !quiet.sentence.contains("repetitions"),
        "{}",
        quiet.sentence
    );
    let noisy = diagnose_two_reps(&shape, |i, s| {
        if i == 4 {
            s.x *= 1.3;
        }
    });
    assert_eq!(noisy.limit, Limit::Undetermined, "{}", noisy.sentence);
    assert!(
        noisy.sentence.contains("Next: run more repetitions"),
        "{}",
        noisy.sentence
    );
}
