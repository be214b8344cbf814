use serde_json::json;

use super::*;
use crate::analyze::run::analyze_steps;
use crate::analyze::run::diagnosis::{Diagnosis, Limit};
use crate::record::steps::{StepResult, StepStatus};

/// gunicorn-like: 2 sync workers serving, 30 requests in its accept queue, 3% of a CPU.
fn workers(depth: u32, in_tree: bool) -> NextHop {
    NextHop {
        depth,
        from_pid: 7,
        addr: "127.0.0.1:8000".into(),
        pid: Some(42),
        process: Some("python3".into()),
        command: Some("python3 -m gunicorn".into()),
        in_tree,
        samples: 20,
        connections_mean: 32.0,
        accept_queue_mean: 29.8,
        accept_queue_max: 31,
        accept_backlog: Some(2048),
        unread_connections_mean: 0.0,
        threads: 3,
        in_service_mean: Some(2.0),
        cpu_pct: Some(3.0),
        busiest_thread_pct: Some(1.5),
        cpus: Some(2),
        cpus_busy_pct: None,
    }
}

fn level(hops: Vec<NextHop>) -> HopLevel {
    hop_level(&[Observation {
        next_hops: hops,
        ..Observation::default()
    }])
    .expect("a hop")
}

#[test]
fn a_hop_whose_cpus_others_filled_is_its_cpu_limit_and_says_who_took_it() {
    // Measured (tests/solo/next_hop.rs): gunicorn's 2 workers computing on its 1 CPU at 88%,
    // nginx pinned to the same CPU taking most of the rest.
    let mut shared = workers(1, false);
    (shared.cpu_pct, shared.busiest_thread_pct, shared.cpus) = (Some(88.0), Some(60.0), Some(1));
    let alone = level(vec![shared.clone()]);
    assert_eq!(alone.own_limit(), HopLimit::Concurrency, "no CPU figure");
    shared.cpus_busy_pct = Some(99.0);
    let h = level(vec![shared.clone()]);
    assert_eq!(h.own_limit(), HopLimit::Cpu);
    assert!(
        h.clause().starts_with(
            "uses 88% of one CPU, its 1 CPU full (other processes took 11% of one CPU of them)"
        ),
        "{}",
        h.clause()
    );
    // Its CPU 89% busy, not full: the queue is its workers'.
    shared.cpus_busy_pct = Some(89.0);
    assert_eq!(level(vec![shared]).own_limit(), HopLimit::Concurrency);
}

#[test]
fn each_hop_is_read_by_the_servers_own_rules() {
    let h = level(vec![workers(1, false)]);
    assert_eq!(h.own_limit(), HopLimit::Concurrency);
    assert!(
        h.reading().starts_with("python3 -m gunicorn (pid 42, 127.0.0.1:8000), which serves 2.0 requests at once (of its 3 threads) while 29.8 wait in its accept queue"),
        "{}",
        h.reading()
    );
    assert_eq!(
        h.next_step(),
        "more workers or threads in python3 -m gunicorn (pid 42)"
    );
    // The same workers on one CPU they fill: its CPU, not its concurrency.
    let mut cpu = workers(1, false);
    (cpu.cpu_pct, cpu.cpus) = (Some(97.0), Some(1));
    assert_eq!(level(vec![cpu.clone()]).own_limit(), HopLimit::Cpu);
    // Measured: gunicorn's 2 workers computing on 1 CPU, one of them doing nearly all of it;
    // the tree's counter read a little under its busiest thread's. Its CPU, not one thread.
    (cpu.cpu_pct, cpu.busiest_thread_pct) = (Some(89.6), Some(90.1));
    let cpu = level(vec![cpu]);
    assert_eq!(cpu.own_limit(), HopLimit::Cpu);
    assert!(cpu.clause().starts_with("uses 90% of one CPU, its 1 CPU full, with 29.8 wait in its accept queue: a CPU limit in it"), "{}", cpu.clause());
    // One thread of a store on 2 CPUs, requests unread in its connections.
    let mut store = workers(1, false);
    (
        store.cpu_pct,
        store.busiest_thread_pct,
        store.accept_queue_mean,
    ) = (Some(99.0), Some(98.0), 0.0);
    store.unread_connections_mean = 12.0;
    let store = level(vec![store]);
    assert_eq!(store.own_limit(), HopLimit::OneThread);
    assert!(store.clause().contains("12.0 unread in its connections"));
    // Nothing waiting, nothing busy.
    let mut idle = workers(1, false);
    idle.accept_queue_mean = 0.2;
    assert_eq!(level(vec![idle]).own_limit(), HopLimit::Unseen);
    // A remote address: no process to read, the limit is there.
    let mut remote = workers(1, false);
    (remote.pid, remote.command) = (None, None);
    let remote = level(vec![remote]);
    assert!(remote.clause().contains("no process of this machine"));
    assert!(remote
        .next_step()
        .starts_with("look at what answers at 127.0.0.1:8000"));
    // A hop that carries less than one connection on average is not where requests go.
    let mut rare = workers(1, false);
    rare.connections_mean = 0.3;
    assert!(hop_level(&[Observation {
        next_hops: vec![rare],
        ..Observation::default()
    }])
    .is_none());
}

#[test]
fn a_hop_that_only_waits_is_followed_to_the_one_that_limits() {
    // A middle tier: idle, queueing nothing, its connections to a CPU-full database.
    let mut middle = workers(1, false);
    (middle.accept_queue_mean, middle.addr, middle.pid) = (0.0, "127.0.0.1:9000".into(), Some(50));
    middle.command = Some("middle".into());
    let mut db = workers(2, false);
    (db.cpu_pct, db.cpus, db.command, db.addr) = (
        Some(195.0),
        Some(2),
        Some("db".into()),
        "127.0.0.1:5432".into(),
    );
    let h = level(vec![middle, db]);
    assert_eq!(h.own_limit(), HopLimit::Unseen);
    assert_eq!(h.limiting().hop.command.as_deref(), Some("db"));
    assert!(
        h.reading().contains("; it waits in turn on db (pid 42, 127.0.0.1:5432), which uses 195% of one CPU, its 2 CPUs full"),
        "{}",
        h.reading()
    );
    assert!(h
        .limiting()
        .next_step()
        .starts_with("more CPUs for db (pid 42)"));
    // A hop inside the server's tree is not followed further: its connections are the tree's.
    let mut inside = workers(1, true);
    inside.accept_queue_mean = 0.0;
    let mut db = workers(2, false);
    db.cpu_pct = Some(195.0);
    assert!(level(vec![inside, db]).next.is_none());
}

/// 1..16 clients behind 2 workers at 5 ms (400 req/s), both sides idle, latency as Little's
/// law says; each step's server figures with `hops` and its sockets' `accept`.
fn proxy_series(hops: &[NextHop], accept: f64) -> Diagnosis {
    let steps: Vec<StepResult> = [(1, 190.0), (2, 380.0), (4, 400.0), (8, 400.0), (16, 400.0)]
        .iter()
        .map(|&(c, x)| {
            let mut r = StepResult::empty(format!("t.p.c{c}"), "web", "sep", c, 0);
            r.status = StepStatus::Ok;
            r.inflight = c;
            r.server_cpus = "0".into();
            r.client_cpus = "1".into();
            let mut load = crate::record::load::LoadReport {
                throughput_rps: x,
                duration_s: 2.0,
                ..Default::default()
            };
            load.client_cpu.user_s = 0.2;
            load.latency_us.mean = if c == 1 { 5_000.0 } else { c as f64 / x * 1e6 };
            r.load = Some(load);
            let top = c == 16;
            let hops: Vec<NextHop> = hops
                .iter()
                .map(|h| NextHop {
                    accept_queue_mean: if top { h.accept_queue_mean } else { 0.5 },
                    connections_mean: c as f64,
                    ..h.clone()
                })
                .collect();
            let waiting = if top { accept } else { 0.0 };
            r.server = serde_json::from_value(json!({
                "server_cpus_busy_pct": 5.0, "client_cpus_busy_pct": 10.0,
                "threads": {"groups": [], "busiest": {"name": "nginx", "group": "nginx",
                    "pid": 7, "tid": 7, "cpu_pct": 5.0}, "run_delay_s": null,
                    "run_delay_pct": null, "cpu_source": "schedstat"},
                "sockets": {"waiting_mean": waiting, "accept_queue_mean": waiting, "samples": 20},
                "next_hops": hops,
            }))
            .unwrap();
            r.per_request.cpu_us_per_req.total = Some(40.0);
            r
        })
        .collect();
    analyze_steps(&steps).diagnosis[0].clone()
}

#[test]
fn outside_names_the_upstream_and_what_limits_it() {
    let mut hop = workers(1, false);
    hop.accept_queue_mean = 13.5;
    let d = proxy_series(&[hop], 0.0);
    assert_eq!(d.limit, Limit::Outside, "{}", d.sentence);
    assert!(
        d.sentence.contains("the limit is outside both processes, in its upstream python3 -m gunicorn (pid 42, 127.0.0.1:8000), which serves 2.0 requests at once (of its 3 threads) while 13.5 wait in its accept queue, using 3% of one CPU: a concurrency limit in it. Next: more workers or threads in python3 -m gunicorn (pid 42)."),
        "{}",
        d.sentence
    );
    assert_eq!(d.figure(Metric::NextHopWaiting), Some(13.5));
    assert_eq!(d.figure(Metric::NextHopInService), Some(2.0));
    // Without the hop the sentence says only that it is outside.
    let d = proxy_series(&[], 0.0);
    assert_eq!(d.limit, Limit::Outside);
    assert!(d.sentence.ends_with("Next: find what each request waits on outside both processes (a backend, a pool, the network or the disk) and widen it."), "{}", d.sentence);
}

#[test]
fn a_queue_in_a_process_of_the_tree_names_that_process() {
    let mut hop = workers(1, true);
    hop.accept_queue_mean = 13.5;
    let d = proxy_series(&[hop.clone()], 13.6);
    assert_eq!(d.limit, Limit::Concurrency, "{}", d.sentence);
    assert!(
        d.sentence.contains("13.6 of the 16 requests waited unread inside its tree, 13.5 of them in python3 -m gunicorn (pid 42, 127.0.0.1:8000), a process of the tree that pid 7 connects to, which serves 2.0 requests at once"),
        "{}",
        d.sentence
    );
    assert!(
        d.sentence
            .ends_with("Next: more workers or threads in python3 -m gunicorn (pid 42)."),
        "{}",
        d.sentence
    );
    // The tree's queue mostly elsewhere (its own listener): the process is not named.
    hop.accept_queue_mean = 2.0;
    let d = proxy_series(&[hop], 13.6);
    assert_eq!(d.limit, Limit::Concurrency);
    assert!(
        d.sentence.ends_with("Next: more workers or threads."),
        "{}",
        d.sentence
    );
}
