//! The figures a diagnosis rests on, one variant each: its name in analysis.json (serde's
//! snake_case of the variant), its unit, and the side it measures. Rules and reports match
//! on the variant, never on its name.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What a figure's value counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Percent (of a cpuset, of one CPU, of a window, of a capacity: the metric says which).
    Pct,
    /// Percentage points (a difference of two shares).
    Points,
    /// Microseconds.
    Us,
    /// Seconds.
    S,
    /// Requests per second.
    Rps,
    /// Bits per second.
    BitsPerS,
    /// Bytes.
    Bytes,
    /// CPUs.
    Cpus,
    /// Clients (a load level).
    Clients,
    /// A count (requests, tasks, packets, steps, switches per request).
    Count,
    /// A dimensionless ratio or coefficient.
    Ratio,
    /// 1 for yes, 0 for no.
    Flag,
}

impl Unit {
    /// The symbol written after a value (empty for counts, ratios and flags).
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::Pct => "%",
            Unit::Points => " points",
            Unit::Us => " µs",
            Unit::S => " s",
            Unit::Rps => " req/s",
            Unit::BitsPerS => " bit/s",
            Unit::Bytes => " B",
            Unit::Cpus => " CPUs",
            Unit::Clients => " clients",
            Unit::Count | Unit::Ratio | Unit::Flag => "",
        }
    }
}

/// Declares [`Metric`]: each variant with the name analysis.json holds and its unit. The
/// name is written out (not only derived) so that [`Metric::as_str`] needs no allocation and
/// a test can hold serde's derived name against it.
macro_rules! metrics {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $unit:ident;)*) => {
        /// One figure of a diagnosis' evidence.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Metric {
            $($(#[$doc])* $variant,)*
        }

        impl Metric {
            /// Every metric, in declaration order.
            pub const ALL: &'static [Metric] = &[$(Metric::$variant,)*];

            /// Its name in analysis.json and the reports (`busiest_thread_cpu_pct`).
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Metric::$variant => $name,)*
                }
            }

            /// What its value counts.
            pub fn unit(self) -> Unit {
                match self {
                    $(Metric::$variant => Unit::$unit,)*
                }
            }
        }
    };
}

metrics! {
    /// The server tree's tasks waiting for block I/O, mean (delay accounting).
    BlkioWaiting = "blkio_waiting", Count;
    /// The busiest other process' share of a side's CPUs.
    BusiestNeighbourPct = "busiest_neighbour_pct", Pct;
    /// The server's busiest thread, % of one CPU.
    BusiestThreadCpuPct = "busiest_thread_cpu_pct", Pct;
    /// Bytes the server sent per request.
    BytesPerReq = "bytes_per_req", Bytes;
    /// CPUs the server's cpuset cgroup allows.
    CgroupCpusetCpus = "cgroup_cpuset_cpus", Cpus;
    /// The load generator's busiest thread, % of one CPU.
    ClientBusiestThreadPct = "client_busiest_thread_pct", Pct;
    /// The load generator's own CPU, % of its cpuset.
    ClientCpuPct = "client_cpu_pct", Pct;
    /// The load generator's threads waiting for a CPU, % of the window.
    ClientRunDelayPct = "client_run_delay_pct", Pct;
    /// The load generator was saturated (1) or not (0).
    ClientSaturated = "client_saturated", Flag;
    /// Server CPU per request.
    CpuUsPerReq = "cpu_us_per_req", Us;
    /// A side's CPUs' busy %, everything on them.
    CpusBusyPct = "cpus_busy_pct", Pct;
    /// The busiest disk's share of the window with I/O in flight.
    DiskUtilPct = "disk_util_pct", Pct;
    /// The most used cgroup I/O throttle, % of its limit.
    IoThrottleUsePct = "io_throttle_use_pct", Pct;
    /// The link's busier direction.
    LinkBitsPerS = "link_bits_per_s", BitsPerS;
    /// The link's bits per second against its capacity.
    LinkUtilisationPct = "link_utilisation_pct", Pct;
    /// Little's law: X·R / L.
    LittleRatio = "little_ratio", Ratio;
    /// The server threads' lock waits (futexes, file locks), % of their working time.
    LockWaitPct = "lock_wait_pct", Pct;
    /// The server's threads waiting on a lock, mean over the window.
    LockWaitingThreads = "lock_waiting_threads", Count;
    /// Mean latency.
    MeanLatencyUs = "mean_latency_us", Us;
    /// Other processes' share of a side's CPUs.
    NeighboursPct = "neighbours_pct", Pct;
    /// The next hop's busiest thread, % of one CPU.
    NextHopBusiestThreadPct = "next_hop_busiest_thread_pct", Pct;
    /// Connections open to the next hop (a process the server's requests go to), mean.
    NextHopConnections = "next_hop_connections", Count;
    /// The next hop's CPU, % of one CPU.
    NextHopCpuPct = "next_hop_cpu_pct", Pct;
    /// The next hop's CPUs busy, by every process on them, % of one CPU.
    NextHopCpusBusyPct = "next_hop_cpus_busy_pct", Pct;
    /// The next hop's threads serving a request, mean (sampled).
    NextHopInService = "next_hop_in_service", Count;
    /// Requests waiting inside the next hop (its accept queue + unread connections), mean.
    NextHopWaiting = "next_hop_waiting", Count;
    /// Steps that measured something.
    OkSteps = "ok_steps", Count;
    /// Median latency.
    P50LatencyUs = "p50_latency_us", Us;
    /// A function's growth in share of CPU samples between two profiled levels.
    ProfileGrowthPoints = "profile_growth_points", Points;
    /// Packets the qdisc dropped over the window.
    QdiscDrops = "qdisc_drops", Count;
    /// Packets the qdisc held back over its rate, over the window.
    QdiscOverlimits = "qdisc_overlimits", Count;
    /// A cgroup's CPU quota, in CPUs.
    QuotaCpus = "quota_cpus", Cpus;
    /// Repetitions whose own figures name another limit.
    RepetitionsDisagreeing = "repetitions_disagreeing", Count;
    /// Server threads' run-queue wait, % of the window.
    RunDelayPct = "run_delay_pct", Pct;
    /// Server run-queue wait per request.
    RunDelayUsPerReq = "run_delay_us_per_req", Us;
    /// Requests the server holds at once (X × service time).
    ServedAtOnce = "served_at_once", Count;
    /// The server's own CPU, % of its cpuset.
    ServerCpuPct = "server_cpu_pct", Pct;
    /// The server was observed (1) or not (0).
    ServerObserved = "server_observed", Flag;
    /// The server's CPU, % of its quota.
    ServerQuotaUsedPct = "server_quota_used_pct", Pct;
    /// Median latency with server and client sharing CPUs.
    SharedP50LatencyUs = "shared_p50_latency_us", Us;
    /// Lock, futex and scheduler frames, % of CPU samples.
    SyncFramesPct = "sync_frames_pct", Pct;
    /// TCP segments retransmitted over the window.
    TcpRetransSegs = "tcp_retrans_segs", Count;
    /// Enforcement periods throttled, % of all.
    ThrottledPeriodsPct = "throttled_periods_pct", Pct;
    /// Time throttled in the window.
    ThrottledS = "throttled_s", S;
    /// Throughput.
    ThroughputRps = "throughput_rps", Rps;
    /// USL κ, the coherency coefficient.
    UslKappa = "usl_kappa", Ratio;
    /// The load of the USL's peak.
    UslNStar = "usl_n_star", Clients;
    /// USL σ, the contention coefficient.
    UslSigma = "usl_sigma", Ratio;
    /// Voluntary context switches per request.
    VoluntaryCsPerReq = "voluntary_cs_per_req", Count;
    /// Requests waiting inside the server (unread connections + accept queue), mean.
    WaitingRequests = "waiting_requests", Count;
}

impl Metric {
    /// A figure of the load generator's own side (what can be told of a run whose server
    /// was not observed).
    pub fn is_client(self) -> bool {
        matches!(
            self,
            Metric::ClientBusiestThreadPct
                | Metric::ClientCpuPct
                | Metric::ClientRunDelayPct
                | Metric::ClientSaturated
        )
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names analysis.json held while `Evidence.metric` was a string (main at 3302f11),
    /// sorted.
    const NAMES_BEFORE: [&str; 42] = [
        "blkio_waiting",
        "busiest_neighbour_pct",
        "busiest_thread_cpu_pct",
        "bytes_per_req",
        "cgroup_cpuset_cpus",
        "client_busiest_thread_pct",
        "client_cpu_pct",
        "client_run_delay_pct",
        "client_saturated",
        "cpu_us_per_req",
        "cpus_busy_pct",
        "disk_util_pct",
        "io_throttle_use_pct",
        "link_bits_per_s",
        "link_utilisation_pct",
        "little_ratio",
        "mean_latency_us",
        "neighbours_pct",
        "ok_steps",
        "p50_latency_us",
        "profile_growth_points",
        "qdisc_drops",
        "qdisc_overlimits",
        "quota_cpus",
        "repetitions_disagreeing",
        "run_delay_pct",
        "run_delay_us_per_req",
        "served_at_once",
        "server_cpu_pct",
        "server_observed",
        "server_quota_used_pct",
        "shared_p50_latency_us",
        "sync_frames_pct",
        "tcp_retrans_segs",
        "throttled_periods_pct",
        "throttled_s",
        "throughput_rps",
        "usl_kappa",
        "usl_n_star",
        "usl_sigma",
        "voluntary_cs_per_req",
        "waiting_requests",
    ];

    #[test]
    fn every_metric_keeps_its_json_name_and_reads_back() {
        let mut written: Vec<String> = Vec::new();
        for &m in Metric::ALL {
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()), "{m:?}");
            assert_eq!(m.to_string(), m.as_str());
            let back: Metric = serde_json::from_str(&json).unwrap();
            assert_eq!(back, m);
            written.push(m.as_str().to_string());
        }
        // Every name analysis.json held then is still written (new ones may join).
        for name in NAMES_BEFORE {
            assert!(
                written.iter().any(|w| w == name),
                "{name} is no longer written"
            );
        }
        assert!(serde_json::from_str::<Metric>("\"server_cpu\"").is_err());
    }

    #[test]
    fn the_client_side_is_the_client_prefixed_names() {
        for &m in Metric::ALL {
            assert_eq!(m.is_client(), m.as_str().starts_with("client_"), "{m}");
        }
        // The unit its name ends with, where it names one.
        for &m in Metric::ALL {
            let n = m.as_str();
            let named = [
                ("_pct", Unit::Pct),
                ("_us", Unit::Us),
                ("_us_per_req", Unit::Us),
                ("_rps", Unit::Rps),
                ("_bits_per_s", Unit::BitsPerS),
                ("throttled_s", Unit::S),
                ("_cpus", Unit::Cpus),
                ("_points", Unit::Points),
            ];
            if let Some((_, u)) = named.iter().find(|(end, _)| n.ends_with(end)) {
                assert_eq!(m.unit(), *u, "{m}");
            }
        }
        assert_eq!(Metric::CpuUsPerReq.unit(), Unit::Us);
        assert_eq!(Metric::LinkBitsPerS.unit().symbol(), " bit/s");
    }
}
