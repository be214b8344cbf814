//! Built-in reference servers, started by `stairbench serve` or in-process by tests and the
//! sweep (see [`msgr::spawn_msgr`]).

pub mod kvd;
pub mod msgr;
pub mod shmkv;
pub mod stats;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

pub use msgr::{spawn_msgr, Arch, MsgrOptions, MsgrServer, MsgrStats};

/// How often a running server prints its ops/s and busy % line.
const REPORT_EVERY: Duration = Duration::from_secs(2);

/// The built-in servers.
#[derive(Debug, clap::Subcommand)]
pub enum ServeCommand {
    /// Length-prefixed messenger server, reactor or pool architecture.
    Msgr(MsgrArgs),
    /// Shared-memory hash-table server: one shared request channel, or rings per worker.
    Shmkv(shmkv::ShmkvArgs),
    /// Key-value daemon of several ranks: shared-memory clients, key k on rank k mod ranks,
    /// remote keys forwarded over TCP to their rank's daemon; per-request phase histograms.
    Kvd(kvd::KvdArgs),
}

/// Options of `stairbench serve msgr`.
#[derive(Debug, clap::Args)]
pub struct MsgrArgs {
    /// reactor: one pinned event loop per thread, SO_REUSEPORT, shared-nothing.
    /// pool: I/O threads hand every message through one shared queue to worker threads.
    #[arg(long, value_enum, default_value_t = Arch::Reactor)]
    pub arch: Arch,
    /// Reactor: event loops. Pool: worker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Pool only: I/O threads, each with its own listener.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub io_threads: u16,
    /// CPUs to pin the threads to, round-robin (e.g. 0-3,8); unpinned when absent.
    #[arg(long, value_name = "LIST")]
    pub cpuset: Option<CpuList>,
    /// TCP port; 0 picks a free one (printed on the "listening on" line).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
    /// Largest payload_len or reply_len accepted; a larger frame closes its connection.
    #[arg(long, value_name = "BYTES", default_value_t = crate::wire::msgr::DEFAULT_MAX_FRAME)]
    pub max_frame: u32,
    /// CPU work done for every message before its reply, in ns of the thread's CPU time (a
    /// calibrated compute loop standing in for a real server's handling; pool: on a worker).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub work_ns: u64,
    /// JSON file of per-thread busy_ns, loops and ops, rewritten every 200 ms.
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<std::path::PathBuf>,
}

pub use crate::cpuset::CpuList;

impl MsgrArgs {
    /// The server options these flags describe.
    pub fn options(&self) -> MsgrOptions {
        MsgrOptions {
            arch: self.arch,
            threads: usize::from(self.threads),
            io_threads: usize::from(self.io_threads),
            cpuset: self.cpuset.clone().map(|c| c.0).unwrap_or_default(),
            addr: SocketAddr::new(self.bind, self.port),
            max_frame: self.max_frame,
            work_ns: self.work_ns,
            report_every: Some(REPORT_EVERY),
            metrics_file: self.metrics.clone(),
        }
    }
}
