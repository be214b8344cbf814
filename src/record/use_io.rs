//! The USE evidence (utilisation, saturation, errors) of the resources a request passes
//! through outside the CPU, as a step records it (`server.sockets`, `server.link`,
//! `server.disk` of steps.jsonl): the server's socket queues, the link carrying its traffic,
//! the storage it waits on. `observe::{sockets, link, disk}` fill them; the diagnosis reads
//! them (`analyze/run/diagnosis/limits_io.rs`).

use serde::{Deserialize, Serialize};

/// Requests waiting inside the server: its sockets sampled during the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SocketQueues {
    /// Samples taken during the window (`sample_every_ms` apart on average).
    pub samples: u64,
    /// Mean interval between two samples, in milliseconds (50, longer where a dump cost more
    /// than 1% of a CPU's time to the next).
    pub sample_every_ms: u64,
    /// Mean number of established connections the server's processes hold.
    pub connections_mean: f64,
    /// Mean number of those connections with unread bytes in their receive queue (a request
    /// the server has not read yet).
    pub unread_connections_mean: f64,
    /// Mean unread bytes over all of the server's connections.
    pub unread_bytes_mean: f64,
    /// Mean length of the accept queues of the server's listen sockets (connections the
    /// kernel completed and no process has accepted yet).
    pub accept_queue_mean: f64,
    /// Longest accept queue seen in a sample.
    pub accept_queue_max: u64,
    /// The largest accept-queue limit (listen backlog) of the server's listen sockets (from
    /// sock_diag; None when the sockets were read from /proc, which does not give it).
    pub accept_backlog: Option<u64>,
    /// Mean requests waiting inside the server: connections with unread bytes plus the
    /// accept queues.
    pub waiting_mean: f64,
}

/// The network interface that carried most of the server's traffic, in the server's own
/// network namespace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinkUse {
    /// The interface's name (`lo` for loopback).
    pub interface: String,
    /// Bytes the server's side sent per second over the window.
    pub tx_bytes_per_s: f64,
    /// Bytes the server's side received per second over the window.
    pub rx_bytes_per_s: f64,
    /// The interface's own speed, in bits per second (/sys/class/net/IF/speed; None for
    /// virtual interfaces that report none).
    pub speed_bits_per_s: Option<f64>,
    /// The root qdisc's kind (`tbf`, `htb`, `fq_codel`, `noqueue`, ...).
    pub qdisc: Option<String>,
    /// The root qdisc's rate, in bits per second (tbf's `rate`), None for a qdisc without one.
    pub qdisc_rate_bits_per_s: Option<f64>,
    /// The capacity the utilisation is taken against: the qdisc's rate, else the speed.
    pub capacity_bits_per_s: Option<f64>,
    /// The busier direction's bits per second, in % of the capacity (sent bytes count
    /// against an egress qdisc's rate).
    pub utilisation_pct: Option<f64>,
    /// Packets the qdisc dropped over the window.
    pub qdisc_drops: u64,
    /// Times the qdisc held a packet back over its rate (`overlimits`) over the window.
    pub qdisc_overlimits: u64,
    /// Bytes queued in the qdisc at the window's end.
    pub qdisc_backlog_bytes: u64,
    /// TCP segments retransmitted in the namespace over the window (/proc/net/snmp).
    pub tcp_retrans_segs: u64,
    /// TCP segments sent in the namespace over the window.
    pub tcp_out_segs: u64,
}

/// The storage the server's files are on, and the server's waiting on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DiskUse {
    /// The block devices holding the server's open files and working directories.
    pub devices: Vec<DeviceUse>,
    /// Time the server tree's tasks spent waiting for block I/O, in seconds (delay
    /// accounting, /proc/PID/stat field 42); None when the kernel does not count it
    /// (kernel.task_delayacct = 0).
    pub blkio_delay_s: Option<f64>,
    /// That delay over the window: the mean number of the tree's tasks waiting for block I/O.
    pub blkio_waiting_mean: Option<f64>,
    /// The I/O throttles of the server's cgroups (v1 blkio.throttle.*, v2 io.max).
    pub throttles: Vec<IoThrottle>,
}

/// One block device's figures over the window (/proc/diskstats).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceUse {
    /// The device's name (`vda`, `nvme0n1p2`).
    pub device: String,
    /// Major:minor.
    pub dev: String,
    /// Share of the window the device had I/O in flight, in %.
    pub util_pct: f64,
    /// Mean number of requests in flight or queued (weighted time in queue over the window).
    pub queue_mean: f64,
    /// Reads completed per second.
    pub reads_per_s: f64,
    /// Writes completed per second.
    pub writes_per_s: f64,
    /// Bytes read per second.
    pub read_bytes_per_s: f64,
    /// Bytes written per second.
    pub write_bytes_per_s: f64,
    /// Mean time a request took (queue and service), in milliseconds; None without I/O.
    pub await_ms: Option<f64>,
}

/// One limit of a cgroup's I/O throttle, and how much of it the window used.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct IoThrottle {
    /// The cgroup's path (under its hierarchy's mount).
    pub cgroup: String,
    /// Major:minor of the throttled device.
    pub dev: String,
    /// What is limited: `read_bps`, `write_bps`, `read_iops`, `write_iops`.
    pub kind: String,
    /// The limit, in bytes or operations per second.
    pub limit_per_s: f64,
    /// What the cgroup did over the window, in the same unit.
    pub used_per_s: f64,
    /// `used_per_s` in % of the limit.
    pub use_pct: f64,
}
