//! The figures observed beside the load, as a step records them (`server` and the per-request
//! figures of `steps.jsonl`): the types the observers write and the analysis and reports read,
//! so a field renamed on one side is a compile error on the other, never a figure silently
//! missing. `observe` fills them; `schema/steps.schema.json` declares them (a test checks
//! the two agree).

use serde::{Deserialize, Serialize};

use crate::machine::procfs::{CoreBusy, NetCounters};
use crate::machine::threads::ThreadUsage;
use crate::record::next_hop::NextHop;
use crate::record::use_cpu::{CgroupCpu, Neighbours};
use crate::record::use_io::{DiskUse, LinkUse, SocketQueues};

/// The server process tree's figures over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
// Read back tolerantly, as Observation.
#[serde(default)]
pub struct TreeUsage {
    /// The tree's root process id.
    pub pid: i32,
    /// Processes in the tree at the end of the window (the root and its descendants).
    pub processes: u64,
    /// Threads in the tree at the end of the window.
    pub threads: u64,
    /// User CPU, in seconds (10 ms resolution: /proc counts clock ticks).
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub user_s: f64,
    /// System CPU, in seconds (10 ms resolution).
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub sys_s: f64,
    /// Voluntary context switches (a thread blocked), summed over threads alive at the end.
    pub voluntary_cs: u64,
    /// Involuntary context switches (a thread was preempted), summed over threads alive at the end.
    pub involuntary_cs: u64,
    /// Minor page faults (no disk read).
    pub minor_faults: u64,
    /// Major page faults (a disk read).
    pub major_faults: u64,
}

/// Everything observed beside the load during one measured window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
// Read back tolerantly (an older run, a host that answered part): a field it lacks is absent.
#[serde(default)]
pub struct Observation {
    /// Length of the observed window, in seconds.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub window_s: f64,
    /// The server's process tree (None when no server pid was given or it had ended).
    pub server: Option<TreeUsage>,
    /// The server tree's threads grouped by merged name: CPU, busiest thread, run-queue wait
    /// (None when the tree was not observed at both ends).
    #[serde(default)]
    pub threads: Option<ThreadUsage>,
    /// Busy % of each of the server's CPUs over the window (from /proc/stat).
    pub server_cpus: Vec<CoreBusy>,
    /// Busy % of each of the client's CPUs over the window (from /proc/stat).
    pub client_cpus: Vec<CoreBusy>,
    /// Mean busy % over the server's CPUs.
    pub server_cpus_busy_pct: Option<f64>,
    /// Mean busy % over the client's CPUs.
    pub client_cpus_busy_pct: Option<f64>,
    /// Loopback (`lo`) packets and bytes over the window (None when /proc/net/dev has no `lo`).
    pub loopback: Option<NetCounters>,
    /// `perf stat` counts of the server's tree; unavailable events are None, never 0.
    pub perf: PerfCounters,
    /// CPU the observers used, in seconds: this process while sampling plus perf's own CPU.
    #[serde(deserialize_with = "crate::record::load::nan_if_null")]
    pub observer_cpu_s: f64,
    /// What made a figure partial or unavailable.
    pub notes: Vec<String>,
    /// The CPU quota, throttling and cpuset of the server's cgroups (None when none was
    /// readable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_cpu: Option<CgroupCpu>,
    /// The other processes on the server's and the client's CPUs (None when not observed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub neighbours: Option<Neighbours>,
    /// Requests waiting inside the server: its sockets' receive and accept queues, sampled
    /// during the window (None when the server was not observed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockets: Option<SocketQueues>,
    /// The interface that carried most of the server's traffic: bytes/s against its speed or
    /// its qdisc's rate, the qdisc's drops, overlimits and backlog, TCP retransmits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkUse>,
    /// The storage the server uses: its devices' utilisation and queue, the tree's block-I/O
    /// delay, its cgroups' I/O throttles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskUse>,
    /// Where the server tree's threads spent the window: on a CPU, waiting for one, blocked on
    /// storage, a lock, a socket peer, waiting for work, paging (None when not observed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_states: Option<ThreadStates>,
    /// The same for the load generator on this machine: stairbench's own load threads and the
    /// external load tool it started (None when there was none to observe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_thread_states: Option<ThreadStates>,
    /// The processes the server's own connections went to (a proxy's upstream, a database),
    /// and theirs in turn: their queues, threads and CPU over the window (empty when the
    /// server opened none, or was not observed).
    pub next_hops: Vec<NextHop>,
}

/// Every thread's window split by state, grouped by process and merged thread name. On-CPU
/// and run-queue seconds are exact (schedstat); the blocked kinds share the rest of each
/// thread's window in proportion to its samples (delay accounting's block-I/O time, when the
/// kernel keeps it, replaces the sampled storage share).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadStates {
    /// Mean time between two sampling passes, in milliseconds (adapted to the number of
    /// threads so the sampling stays within its CPU budget).
    pub sample_interval_ms: f64,
    /// Thread samples taken (one thread's state read once), blocked or running.
    pub samples: u64,
    /// Storage waits came from the kernel's delay accounting (exact), not from the samples.
    pub delay_accounting: bool,
    /// One entry per process and merged thread name, most non-idle time first.
    pub groups: Vec<ThreadStateGroup>,
}

/// The threads of one merged name in one process over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadStateGroup {
    /// Their process.
    pub pid: i32,
    /// Their process's name (`comm`).
    pub process: String,
    /// The merged thread name (`worker` for `worker-0..7`, as the thread CPU figures merge).
    pub name: String,
    /// Threads of this name seen in the window.
    pub threads: u32,
    /// Their thread-seconds in each state over the window.
    pub seconds: StateSeconds,
    /// Whom their socket waits were on, most time first.
    pub peers: Vec<PeerWait>,
}

/// Thread-seconds in each state (summed over threads: two threads blocked for the whole of a
/// 1 s window make 2 s). Per thread they add up to the time it was alive in the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StateSeconds {
    /// On a CPU in user mode (schedstat's run time split by stat's utime : stime).
    pub on_cpu_user_s: f64,
    /// On a CPU in the kernel.
    pub on_cpu_sys_s: f64,
    /// Runnable, waiting for a CPU (schedstat's run-queue wait).
    pub runqueue_s: f64,
    /// Blocked on storage: a read, write or sync on a file or block device, or in D state on
    /// block I/O.
    pub storage_s: f64,
    /// Blocked on a lock: a futex (mutexes, and condition variables and semaphores alike),
    /// flock, a waiting fcntl lock.
    pub lock_s: f64,
    /// Waiting on a socket's other end: a connection it opened (a read, write or connect), or
    /// a write to a client that does not read; on the load generator, its event loop too.
    pub socket_s: f64,
    /// Waiting for work: the server's event loop, accept, or a read on a connection a client
    /// opened to it, with nothing to do; waiting for a child, a signal or an eventfd.
    pub idle_s: f64,
    /// Blocked in a page fault (D state outside any system call).
    pub paging_s: f64,
    /// Anything else: sleeps, pipes, terminals, stopped.
    pub other_s: f64,
}

impl StateSeconds {
    /// Every state's seconds.
    pub fn total_s(&self) -> f64 {
        self.busy_s() + self.idle_s
    }

    /// Every state but waiting for work: the time the threads spent on something.
    pub fn busy_s(&self) -> f64 {
        self.on_cpu_user_s
            + self.on_cpu_sys_s
            + self.runqueue_s
            + self.storage_s
            + self.lock_s
            + self.socket_s
            + self.paging_s
            + self.other_s
    }

    /// `self + other`, state by state.
    pub fn add(&mut self, o: &StateSeconds) {
        self.on_cpu_user_s += o.on_cpu_user_s;
        self.on_cpu_sys_s += o.on_cpu_sys_s;
        self.runqueue_s += o.runqueue_s;
        self.storage_s += o.storage_s;
        self.lock_s += o.lock_s;
        self.socket_s += o.socket_s;
        self.idle_s += o.idle_s;
        self.paging_s += o.paging_s;
        self.other_s += o.other_s;
    }

    /// Every state's seconds times `k`.
    pub fn scaled(&self, k: f64) -> StateSeconds {
        StateSeconds {
            on_cpu_user_s: self.on_cpu_user_s * k,
            on_cpu_sys_s: self.on_cpu_sys_s * k,
            runqueue_s: self.runqueue_s * k,
            storage_s: self.storage_s * k,
            lock_s: self.lock_s * k,
            socket_s: self.socket_s * k,
            idle_s: self.idle_s * k,
            paging_s: self.paging_s * k,
            other_s: self.other_s * k,
        }
    }
}

impl ThreadStates {
    /// Every group's seconds, summed.
    pub fn total(&self) -> StateSeconds {
        let mut t = StateSeconds::default();
        for g in &self.groups {
            t.add(&g.seconds);
        }
        t
    }
}

/// The time some threads waited on one socket peer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PeerWait {
    /// The other end's address (`127.0.0.1:8080`), or `unix` / `unknown` when unnamed.
    pub addr: String,
    /// The process on this machine holding the other end (None when remote or unknown).
    pub pid: Option<i32>,
    /// That process's name.
    pub process: Option<String>,
    /// Thread-seconds spent waiting on it.
    pub thread_s: f64,
}

/// The perf stat counts of the window; None where perf could not count the event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerfCounters {
    /// Context switches (software event `context-switches`).
    pub context_switches: Option<u64>,
    /// Migrations between CPUs (software event `cpu-migrations`).
    pub cpu_migrations: Option<u64>,
    /// Page faults (software event `page-faults`).
    pub page_faults: Option<u64>,
    /// CPU time of the observed threads, in milliseconds (software event `task-clock`).
    pub task_clock_ms: Option<f64>,
    /// Core cycles (at the running frequency, turbo included).
    pub cycles: Option<u64>,
    /// Instructions retired.
    pub instructions: Option<u64>,
    /// Reference cycles (at the nominal frequency).
    pub ref_cycles: Option<u64>,
    /// Cycles the front end stalled.
    pub stalled_cycles_frontend: Option<u64>,
    /// Cycles the back end stalled.
    pub stalled_cycles_backend: Option<u64>,
    /// Branch mispredictions.
    pub branch_misses: Option<u64>,
    /// Last-level cache loads.
    pub llc_loads: Option<u64>,
    /// Why some or all events are unavailable (perf missing, not permitted, not supported).
    pub note: Option<String>,
}

/// Figures per request, as the Tomcat/rxNetty study's benchreport columns; None where an input is unavailable.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PerRequest {
    /// Server CPU per request, in microseconds.
    pub cpu_us_per_req: CpuUsPerReq,
    /// Server context switches per request (perf's count, else /proc's voluntary + involuntary).
    pub cs_per_req: Option<f64>,
    /// Server voluntary context switches per request (a thread blocked; /proc).
    #[serde(default)]
    pub voluntary_cs_per_req: Option<f64>,
    /// Server involuntary context switches per request (a thread was preempted; /proc).
    #[serde(default)]
    pub involuntary_cs_per_req: Option<f64>,
    /// Time the server's threads spent runnable but waiting for a CPU, per request, in
    /// microseconds (schedstat; None where the kernel has none).
    #[serde(default)]
    pub run_delay_us_per_req: Option<f64>,
    /// Server CPU migrations per request (perf).
    pub migr_per_req: Option<f64>,
    /// Instructions per cycle.
    pub ipc: Option<f64>,
    /// Instructions per reference cycle (IPC without turbo's skew).
    pub iprc: Option<f64>,
    /// Stalled cycles per instruction (the larger of front-end and back-end stalls, as perf prints).
    pub scpi: Option<f64>,
    /// Last-level cache loads per request.
    pub llc_loads_per_req: Option<f64>,
    /// Loopback packets received per request.
    pub pkts_per_req: Option<f64>,
}

/// Server CPU per request, in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuUsPerReq {
    /// User CPU per request, in microseconds.
    pub user: Option<f64>,
    /// System CPU per request, in microseconds.
    pub sys: Option<f64>,
    /// User + system CPU per request, in microseconds.
    pub total: Option<f64>,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::machine::threads::{BusiestThread, ThreadGroup};
    use crate::record::use_cpu::{CpuGroup, Neighbour};
    use serde_json::Value;

    /// Every field set, so that every key the types write is serialised.
    pub(crate) fn full() -> (Observation, PerRequest) {
        let tree = TreeUsage {
            pid: 1,
            processes: 2,
            threads: 3,
            user_s: 1.0,
            sys_s: 0.5,
            voluntary_cs: 10,
            involuntary_cs: 2,
            minor_faults: 1,
            major_faults: 0,
        };
        let threads = ThreadUsage {
            groups: vec![ThreadGroup {
                name: "reactor".into(),
                threads: 2,
                cpu_pct: 90.0,
                max_thread_cpu_pct: 60.0,
                run_delay_pct: Some(1.0),
                voluntary_cs: 5,
                involuntary_cs: 1,
            }],
            busiest: Some(BusiestThread {
                name: "reactor-0".into(),
                group: "reactor".into(),
                pid: 1,
                tid: 2,
                cpu_pct: 60.0,
            }),
            run_delay_s: Some(0.1),
            run_delay_pct: Some(5.0),
            cpu_source: "schedstat".into(),
            ended_threads: 1,
            unsampled_cpu_pct: Some(7.0),
        };
        let core = CoreBusy {
            cpu: 0,
            busy_pct: 50.0,
            user_pct: 40.0,
            sys_pct: 10.0,
            irq_pct: 0.0,
            steal_pct: 0.0,
        };
        let obs = Observation {
            window_s: 2.0,
            server: Some(tree),
            threads: Some(threads),
            server_cpus: vec![core.clone()],
            client_cpus: vec![core],
            server_cpus_busy_pct: Some(50.0),
            client_cpus_busy_pct: Some(20.0),
            loopback: Some(NetCounters::default()),
            perf: PerfCounters::default(),
            observer_cpu_s: 0.01,
            notes: vec!["a note".into()],
            cgroup_cpu: Some(CgroupCpu {
                groups: vec![CpuGroup {
                    path: "/q".into(),
                    version: 1,
                    quota_cpus: Some(0.2),
                    period_us: 100_000,
                    periods: 10,
                    throttled_periods: 9,
                    throttled_s: 0.7,
                    usage_s: Some(0.2),
                }],
                narrower_cpuset: Some("0".into()),
            }),
            neighbours: Some(Neighbours {
                server_cpus_others_pct: Some(50.0),
                client_cpus_others_pct: Some(1.0),
                server_irq_pct: 0.0,
                client_irq_pct: 0.0,
                server_steal_pct: 0.0,
                client_steal_pct: 0.0,
                busiest: vec![Neighbour {
                    pid: 9,
                    name: "sh".into(),
                    cpu_pct: 50.0,
                    server_cpus_pct: 50.0,
                    client_cpus_pct: 0.0,
                }],
                notes: Vec::new(),
            }),
            sockets: Some(SocketQueues::default()),
            link: Some(LinkUse::default()),
            disk: Some(DiskUse::default()),
            thread_states: Some(thread_states()),
            client_thread_states: Some(thread_states()),
            next_hops: vec![NextHop {
                pid: Some(3),
                process: Some("up".into()),
                command: Some("up".into()),
                accept_backlog: Some(8),
                in_service_mean: Some(1.0),
                cpu_pct: Some(1.0),
                busiest_thread_pct: Some(1.0),
                cpus: Some(1),
                ..NextHop::default()
            }],
        };
        let some = Some(1.0);
        let per = PerRequest {
            cpu_us_per_req: CpuUsPerReq {
                user: some,
                sys: some,
                total: some,
            },
            cs_per_req: some,
            voluntary_cs_per_req: some,
            involuntary_cs_per_req: some,
            run_delay_us_per_req: some,
            migr_per_req: some,
            ipc: some,
            iprc: some,
            scpi: some,
            llc_loads_per_req: some,
            pkts_per_req: some,
        };
        (obs, per)
    }

    fn thread_states() -> ThreadStates {
        ThreadStates {
            sample_interval_ms: 10.0,
            samples: 100,
            delay_accounting: false,
            groups: vec![ThreadStateGroup {
                pid: 1,
                process: "srv".into(),
                name: "worker".into(),
                threads: 2,
                seconds: StateSeconds::default(),
                peers: vec![PeerWait {
                    addr: "127.0.0.1:80".into(),
                    pid: Some(2),
                    process: Some("up".into()),
                    thread_s: 1.0,
                }],
            }],
        }
    }

    fn schema() -> Value {
        serde_json::from_str(include_str!("../../schema/steps.schema.json")).unwrap()
    }

    fn keys(v: &Value) -> Vec<String> {
        let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    }

    /// The schema declares what the types write, and nothing they do not (besides the
    /// remote observer's `host`): a field renamed in a type and not in the schema fails here.
    #[test]
    fn the_step_schema_and_the_observed_types_agree() {
        let schema = schema();
        let (obs, per) = full();
        let server = &schema["properties"]["server"]["properties"];
        let mut declared = keys(server);
        declared.retain(|k| k != "host");
        let written = keys(&serde_json::to_value(&obs).unwrap());
        assert_eq!(
            declared, written,
            "steps.schema.json's server against Observation"
        );
        let tree = serde_json::to_value(obs.server.as_ref().unwrap()).unwrap();
        assert_eq!(keys(&server["server"]["properties"]), keys(&tree));
        let threads = serde_json::to_value(obs.threads.as_ref().unwrap()).unwrap();
        let declared = keys(&schema["$defs"]["threads"]["properties"]);
        let written = keys(&threads);
        assert_eq!(
            declared, written,
            "steps.schema.json's threads against ThreadUsage"
        );
        let core = serde_json::to_value(&obs.server_cpus[0]).unwrap();
        assert_eq!(
            keys(&schema["$defs"]["core_busy"]["properties"]),
            keys(&core)
        );
        let use_cpu = [
            ("cgroup_cpu", serde_json::to_value(&obs.cgroup_cpu).unwrap()),
            ("neighbours", serde_json::to_value(&obs.neighbours).unwrap()),
        ];
        for (name, written) in use_cpu {
            let def = &schema["$defs"][name];
            assert_eq!(keys(&def["properties"]), keys(&written), "{name}");
            let inner = if name == "cgroup_cpu" {
                "groups"
            } else {
                "busiest"
            };
            let items = &def["properties"][inner]["items"];
            let items = match items["$ref"].as_str() {
                Some(r) => &schema["$defs"][r.trim_start_matches("#/$defs/")],
                None => items,
            };
            assert_eq!(
                keys(&items["properties"]),
                keys(&written[inner][0]),
                "{name}.{inner}"
            );
        }
        let ts = serde_json::to_value(obs.thread_states.as_ref().unwrap()).unwrap();
        let def = &schema["$defs"]["thread_states"];
        assert_eq!(keys(&def["properties"]), keys(&ts), "thread_states");
        let group = &def["properties"]["groups"]["items"];
        assert_eq!(keys(&group["properties"]), keys(&ts["groups"][0]));
        let secs = &group["properties"]["seconds"];
        assert_eq!(keys(&secs["properties"]), keys(&ts["groups"][0]["seconds"]));
        let peer = &group["properties"]["peers"]["items"];
        assert_eq!(
            keys(&peer["properties"]),
            keys(&ts["groups"][0]["peers"][0])
        );
        let hop = serde_json::to_value(&obs.next_hops[0]).unwrap();
        let def = &schema["$defs"]["next_hop"];
        assert_eq!(keys(&def["properties"]), keys(&hop), "next_hop");
        let top = keys(&schema["properties"]);
        for k in keys(&serde_json::to_value(&per).unwrap()) {
            assert!(
                top.contains(&k),
                "{k}: a per-request figure steps.schema.json lacks"
            );
        }
    }
}
