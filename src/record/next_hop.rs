//! The next hop of the server's requests: a process its connections go to, with its queues,
//! threads and CPU from the same window (`server.next_hops` in steps.jsonl). `observe`'s
//! `next_hop` fills it; the diagnosis reads it to say what is outside the server, or which
//! process of its tree holds the limit.

use serde::{Deserialize, Serialize};

/// One address the server's connections (or a hop's own, deeper) went to over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NextHop {
    /// Hops from the server: 1 for the server tree's own connections, 2 for those of the
    /// process at depth 1, and so on.
    pub depth: u32,
    /// The process holding most of those connections (the server's, or the previous hop's).
    pub from_pid: i32,
    /// The address they go to (`127.0.0.1:8000`).
    pub addr: String,
    /// The process holding its listening socket (the eldest of those that hold it); None when
    /// the address is not on this machine or its holder was not found.
    pub pid: Option<i32>,
    /// That process's name (`comm`).
    pub process: Option<String>,
    /// Its command, short: the name with the module or script an interpreter runs
    /// (`python3 -m gunicorn`).
    pub command: Option<String>,
    /// It belongs to the observed server's own process tree.
    pub in_tree: bool,
    /// Samples taken of it.
    pub samples: u64,
    /// Connections open to it, mean over the samples.
    pub connections_mean: f64,
    /// Its listening socket's accept queue (connections it has not accepted yet), mean.
    pub accept_queue_mean: f64,
    /// The longest accept queue seen in a sample.
    pub accept_queue_max: u64,
    /// Its listening socket's accept-queue limit (listen backlog).
    pub accept_backlog: Option<u64>,
    /// Of the connections it accepted, those holding bytes it has not read (a request
    /// waiting inside it), mean.
    pub unread_connections_mean: f64,
    /// Threads of its process tree at the last sample.
    pub threads: u64,
    /// Its threads serving a request (on a CPU, runnable, or blocked on anything but waiting
    /// for work: an event loop, accept, a read on an idle client connection), mean over the
    /// samples; None when its threads could not be read.
    pub in_service_mean: Option<f64>,
    /// Its process tree's CPU over the window, in % of one CPU.
    pub cpu_pct: Option<f64>,
    /// Its busiest thread's CPU over the window, in % of one CPU.
    pub busiest_thread_pct: Option<f64>,
    /// CPUs it may run on (its affinity).
    pub cpus: Option<u64>,
    /// Those CPUs' busy time over the window, by every process on them, in % of one CPU (at
    /// most 100 × `cpus`): full while the hop itself used less of them, another process
    /// shared them.
    pub cpus_busy_pct: Option<f64>,
}

impl NextHop {
    /// Requests waiting inside it: its accept queue plus its connections with unread bytes.
    pub fn waiting_mean(&self) -> f64 {
        self.accept_queue_mean + self.unread_connections_mean
    }

    /// How the sentences name it: `gunicorn (pid 12, 127.0.0.1:8000)`, or its address alone.
    pub fn label(&self) -> String {
        match (&self.command, self.pid) {
            (Some(c), Some(pid)) => format!("{c} (pid {pid}, {})", self.addr),
            _ => self.addr.clone(),
        }
    }
}
