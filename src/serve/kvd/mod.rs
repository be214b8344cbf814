//! `stairbench serve kvd`: the benchkv study's key-value daemon. One daemon thread per rank polls its
//! local clients' slots in shared memory (the `per-worker` design of `serve shmkv`: one
//! block, the daemon is its worker) and one TCP connection per peer rank; key k belongs to
//! rank k mod ranks. Local keys are answered from the rank's table, remote ones forwarded to
//! their owner and the reply written back to the client's slot. Inside the daemon every
//! remote request is timed (RTT, call_to_flush, flush_to_cb; the owner's
//! incoming_turnaround) into HdrHistograms written to `--metrics FILE` ([`metrics`]).

pub mod calibrate;
pub mod daemon;
pub mod metrics;
pub mod peers;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::wire::kvd::{set_info, Arch};
use crate::wire::shmkv::region::{Region, HEADER_BYTES};
use crate::wire::shmkv::ShmkvError;

/// How long a rank waits for its peers at start.
pub const PEER_WAIT: Duration = Duration::from_secs(10);

/// Options of `stairbench serve kvd`.
#[derive(Debug, Clone, clap::Args)]
pub struct KvdArgs {
    /// This daemon's rank: its position in --ranks, from 0 [default: the launcher's
    /// SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK, in that order, else 0].
    #[arg(long)]
    pub rank: Option<u32>,
    /// Every rank's address, host:port, in the same order on every rank (this rank listens
    /// on its own). One address: a single rank, no network.
    #[arg(long, value_name = "HOST:PORT,...", default_value = "127.0.0.1:0")]
    pub ranks: String,
    /// Region name: the region is /dev/shm/stairbench.shmkv.NAME; clients use kvd://NAME.
    #[arg(long)]
    pub name: String,
    /// Pin the daemon thread to these CPUs (e.g. 0).
    #[arg(long, value_name = "LIST")]
    pub cpuset: Option<crate::cpuset::CpuList>,
    /// Keys each rank holds: key k lives on rank k mod ranks, in slot k div ranks.
    #[arg(long, default_value_t = 1024)]
    pub keys_per_rank: u64,
    /// Flush the peer connections once per poll loop (the default: a doorbell per loop).
    #[arg(long, overrides_with = "no_batch")]
    pub batch: bool,
    /// Flush every forwarded request and reply at once.
    #[arg(long)]
    pub no_batch: bool,
    /// At start, bounce a GET-sized frame this many times over each peer connection (the
    /// lower rank of a pair pings, one frame in flight) and keep the round trips as the
    /// `ping_pong` histogram: the plain TCP ping-pong between these same processes.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub ping_pong: u64,
    /// How the daemon waits when idle with remote requests in flight: `adaptive` spins a
    /// few µs, then blocks in poll(2) on the peers when every client waits for a peer
    /// (yields otherwise); `spin` never blocks.
    #[arg(long, value_enum, default_value = "adaptive")]
    pub poll: calibrate::PollMode,
    /// JSON file of the daemon's counters, gauges and phase histograms, rewritten every 200 ms.
    #[arg(long, value_name = "FILE")]
    pub metrics: Option<PathBuf>,
    /// Rank 0 starts the other ranks itself, as child processes of this binary on this host
    /// (regions NAME-r1, ...; metrics FILE.r1, ...; same --cpuset), stopped with it: one
    /// command for a runner that starts one process per target.
    #[arg(long)]
    pub spawn_peers: bool,
    /// With --spawn-peers and at least one CPU per rank in --cpuset: rank j's daemon thread
    /// gets the list's j-th CPU to itself (else every rank gets the whole list).
    #[arg(long)]
    pub cpu_per_rank: bool,
    /// Ignored (one daemon thread per rank): accepted so that a runner giving every built-in
    /// server `--threads` can start this one too.
    #[arg(long, hide = true)]
    pub threads: Option<usize>,
    /// How long to wait for the peers at start, ms (tests shorten it).
    #[arg(long, hide = true, default_value_t = PEER_WAIT.as_millis() as u64)]
    pub peer_wait_ms: u64,
    /// Ignored (the daemon's port is in --ranks): accepted so that a runner giving every
    /// built-in server a `--port` can start this one too.
    #[arg(long, hide = true)]
    pub port: Option<u16>,
}

/// Why the kvd daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum KvdError {
    /// An option is unusable.
    #[error("{0}")]
    BadOption(String),
    /// A peer could not be reached or answered wrongly at start.
    #[error("{0}")]
    Peer(String),
    /// The shared-memory region.
    #[error(transparent)]
    Region(#[from] ShmkvError),
    /// A system call failed.
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error (said in the message, so not a `source`: a chain printer would say
        /// it twice).
        error: std::io::Error,
    },
    /// SIGTERM or SIGINT came while the rank was connecting to its peers.
    #[error("rank {0}: stopped by a signal while connecting to its peers")]
    Stopped(u32),
}

/// A running daemon (in this process). Dropping it stops it and removes the region.
pub struct KvdServer {
    region: Arc<Region>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
    /// The daemon's shared counters.
    pub shared: Arc<metrics::Shared>,
}

/// The rank list as addresses, checked.
pub fn parse_ranks(list: &str, rank: u32) -> Result<Vec<SocketAddr>, KvdError> {
    let bad = KvdError::BadOption;
    let addrs = list
        .split(',')
        .map(|a| {
            a.trim()
                .to_socket_addrs()
                .ok()
                .and_then(|mut i| i.next())
                .ok_or_else(|| bad(format!("--ranks: {a:?} is not HOST:PORT")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if rank as usize >= addrs.len() {
        return Err(bad(format!(
            "--rank {rank} is not in --ranks ({} rank{}: 0 to {})",
            addrs.len(),
            if addrs.len() == 1 { "" } else { "s" },
            addrs.len() - 1
        )));
    }
    if addrs.len() > 1 && addrs.iter().any(|a| a.port() == 0) {
        return Err(bad(
            "--ranks: every rank needs a port when there are several".into(),
        ));
    }
    Ok(addrs)
}

/// The variables that launchers set to a task's rank, read in this order when `--rank` is
/// not given: Slurm's `srun`, Open MPI's `mpirun`, and MPICH/Intel MPI (PMI).
pub const RANK_VARS: &[&str] = &["SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];

/// Where a rank came from: `--rank`, a launcher's variable, or the default 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankSource {
    /// `--rank N`.
    Option,
    /// The launcher variable of this name.
    Launcher(&'static str),
    /// Neither: a single rank or rank 0.
    Default,
}

/// This task's rank: `--rank` when given, else the first of [`RANK_VARS`] that `env` has,
/// else 0. A launcher variable that is not a rank number is an error naming it.
pub fn resolve_rank(
    given: Option<u32>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(u32, RankSource), KvdError> {
    if let Some(rank) = given {
        return Ok((rank, RankSource::Option));
    }
    for &var in RANK_VARS {
        if let Some(value) = env(var) {
            let rank = value.trim().parse().map_err(|_| {
                KvdError::BadOption(format!(
                    "{var}={value:?} is not a rank number (or give --rank N)"
                ))
            })?;
            return Ok((rank, RankSource::Launcher(var)));
        }
    }
    Ok((0, RankSource::Default))
}

impl KvdArgs {
    /// This daemon's rank (0 when neither `--rank` nor a launcher gave one).
    pub fn rank(&self) -> u32 {
        self.rank.unwrap_or(0)
    }
}

/// Connects to the peers, creates the region and starts the daemon thread.
/// `stop` (the SIGTERM flag) ends the wait for the peers; the region is then removed.
pub fn spawn_kvd(opts: &KvdArgs, stop: &AtomicBool) -> Result<KvdServer, KvdError> {
    let addrs = parse_ranks(&opts.ranks, opts.rank())?;
    if opts.keys_per_rank == 0 || opts.keys_per_rank > 1 << 24 {
        return Err(KvdError::BadOption(format!(
            "--keys-per-rank must be between 1 and {}, got {}",
            1 << 24,
            opts.keys_per_rank
        )));
    }
    let cpus = opts
        .cpuset
        .as_ref()
        .map(|c| c.0.clone())
        .unwrap_or_default();
    if opts.cpuset.is_some() && cpus.is_empty() {
        return Err(KvdError::BadOption("--cpuset is empty".into()));
    }
    crate::cpuset::check_available(&cpus).map_err(|e| KvdError::BadOption(e.to_string()))?;
    let cpus = rank_cpus(opts, &cpus, 0).unwrap_or(cpus);
    // The region first: a name in use fails before the peers are disturbed.
    let (block, len) = Arch::Kvd.layout(1);
    let region = Arc::new(Region::create(&opts.name, len - HEADER_BYTES)?);
    let wait = Duration::from_millis(opts.peer_wait_ms);
    let peers = peers::connect_all(opts.rank(), &opts.ranks, &addrs, wait, stop)?;
    set_info(&region, opts.rank(), addrs.len() as u32, opts.keys_per_rank);
    region.publish(Arch::Kvd, 1, block);
    let stop = Arc::new(AtomicBool::new(false));
    let shared = Arc::new(metrics::Shared::new(format!("kvd-r{}", opts.rank())));
    let config = daemon::Config {
        rank: opts.rank(),
        ranks: addrs.len() as u32,
        keys_per_rank: opts.keys_per_rank,
        batch: !opts.no_batch,
        ping_pong: opts.ping_pong,
        poll: opts.poll,
    };
    let (r, s, sh) = (region.clone(), stop.clone(), shared.clone());
    let thread = std::thread::Builder::new()
        .name(format!("kvd-r{}", opts.rank()))
        .spawn(move || {
            if !cpus.is_empty() {
                let _ = crate::cpuset::pin_current_thread_to(&cpus);
            }
            daemon::run(config, r, peers, sh, s)
        })
        .map_err(|error| KvdError::Io {
            context: "starting the daemon thread".into(),
            error,
        })?;
    let writer = match &opts.metrics {
        Some(path) => Some(
            metrics::spawn_writer(shared.clone(), path.clone(), stop.clone()).map_err(|error| {
                KvdError::Io {
                    context: format!("cannot write the metrics file {}", path.display()),
                    error,
                }
            })?,
        ),
        None => None,
    };
    Ok(KvdServer {
        region,
        stop,
        thread: Some(thread),
        writer,
        shared,
    })
}

/// The command lines of the ranks rank 0 starts with `--spawn-peers` (after the program).
pub fn peer_args(opts: &KvdArgs) -> Vec<Vec<String>> {
    let n = opts.ranks.split(',').count();
    (1..n)
        .map(|j| {
            let mut a: Vec<String> = ["serve", "kvd", "--rank", &j.to_string()]
                .iter()
                .map(|s| s.to_string())
                .collect();
            a.extend(["--ranks".into(), opts.ranks.clone()]);
            a.extend(["--name".into(), format!("{}-r{j}", opts.name)]);
            a.extend(["--keys-per-rank".into(), opts.keys_per_rank.to_string()]);
            a.extend(["--peer-wait-ms".into(), opts.peer_wait_ms.to_string()]);
            if let Some(c) = &opts.cpuset {
                let cpus = rank_cpus(opts, &c.0, j).unwrap_or_else(|| c.0.clone());
                a.extend(["--cpuset".into(), crate::cpuset::format(&cpus)]);
            }
            a.extend(["--ping-pong".into(), opts.ping_pong.to_string()]);
            if opts.poll == calibrate::PollMode::Spin {
                a.extend(["--poll".into(), "spin".into()]);
            }
            if opts.no_batch {
                a.push("--no-batch".into());
            }
            if let Some(m) = &opts.metrics {
                a.extend(["--metrics".into(), format!("{}.r{j}", m.display())]);
            }
            a
        })
        .collect()
}

/// With `--spawn-peers --cpu-per-rank` and at least one CPU per rank in `--cpuset`, rank
/// `j`'s daemon thread gets the list's j-th CPU to itself; `None` when they share the list.
fn rank_cpus(opts: &KvdArgs, cpus: &[usize], j: usize) -> Option<Vec<usize>> {
    let ranks = opts.ranks.split(',').count();
    let spread = opts.spawn_peers && opts.cpu_per_rank && ranks > 1 && cpus.len() >= ranks;
    spread.then(|| vec![cpus[j]])
}

impl KvdServer {
    /// The region's path in /dev/shm.
    pub fn path(&self) -> &str {
        &self.region.path
    }

    /// Whether the daemon thread has ended (it only ends on stop).
    pub fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl Drop for KvdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.region.header().stopping.store(1, Ordering::SeqCst);
        crate::serve::shmkv::per_worker::wake_all(&self.region, 1);
        for t in [self.thread.take(), self.writer.take()]
            .into_iter()
            .flatten()
        {
            let _ = t.join();
        }
        self.region.unlink();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> KvdArgs {
        #[derive(clap::Parser)]
        struct Line {
            #[command(flatten)]
            kvd: KvdArgs,
        }
        <Line as clap::Parser>::parse_from(std::iter::once("kvd").chain(line.split(' '))).kvd
    }

    #[test]
    fn the_rank_comes_from_the_option_then_the_launchers_in_order() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let both = env(&[("PMI_RANK", "3"), ("OMPI_COMM_WORLD_RANK", "2")]);
        assert_eq!(
            resolve_rank(Some(0), both).unwrap(),
            (0, RankSource::Option)
        );
        let launched = resolve_rank(None, both).unwrap();
        assert_eq!(launched, (2, RankSource::Launcher("OMPI_COMM_WORLD_RANK")));
        let slurm = env(&[("SLURM_PROCID", "1"), ("PMI_RANK", "0")]);
        let from_slurm = resolve_rank(None, slurm).unwrap();
        assert_eq!(from_slurm, (1, RankSource::Launcher("SLURM_PROCID")));
        assert_eq!(
            resolve_rank(None, env(&[])).unwrap(),
            (0, RankSource::Default)
        );
        let err = resolve_rank(None, env(&[("SLURM_PROCID", "x")])).unwrap_err();
        assert!(
            err.to_string()
                .contains("SLURM_PROCID=\"x\" is not a rank number"),
            "{err}"
        );
    }

    #[test]
    fn spawned_ranks_get_a_cpu_each_only_with_cpu_per_rank() {
        let two = "--spawn-peers --ranks 127.0.0.1:1,127.0.0.1:2 --name n --ping-pong 5";
        assert_eq!(
            rank_cpus(&args(&format!("{two} --cpuset 2,3")), &[2, 3], 0),
            None
        );
        let spread = args(&format!("{two} --cpuset 2,3 --cpu-per-rank"));
        assert_eq!(rank_cpus(&spread, &[2, 3], 0), Some(vec![2]));
        let peer = &peer_args(&spread)[0];
        let at = peer.iter().position(|a| a == "--cpuset").unwrap();
        assert_eq!(peer[at + 1], "3");
        let at = peer.iter().position(|a| a == "--ping-pong").unwrap();
        assert_eq!(peer[at + 1], "5");
        // One CPU for two ranks: they share it.
        let shared = args(&format!("{two} --cpuset 2 --poll spin"));
        assert_eq!(rank_cpus(&shared, &[2], 0), None);
        let peer = &peer_args(&shared)[0];
        assert!(peer.windows(2).any(|w| w == ["--cpuset", "2"]), "{peer:?}");
        assert!(peer.windows(2).any(|w| w == ["--poll", "spin"]), "{peer:?}");
    }

    #[test]
    fn rank_lists_are_checked() {
        assert_eq!(parse_ranks("127.0.0.1:1,127.0.0.1:2", 1).unwrap().len(), 2);
        let msg = |l: &str, r| parse_ranks(l, r).unwrap_err().to_string();
        assert!(msg("127.0.0.1:1", 1).contains("--rank 1 is not in --ranks"));
        assert!(msg("127.0.0.1:1,nonsense", 0).contains("\"nonsense\""));
        assert!(msg("127.0.0.1:0,127.0.0.1:2", 0).contains("port"));
    }
}
