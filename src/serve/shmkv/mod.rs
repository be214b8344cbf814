//! `stairbench serve shmkv`: the shared-memory hash-table study's server in both of its
//! architectures, `single` (the measured "preopt" design) and `per-worker` (the proposed
//! one). The region, its layouts and the client end are the wire's ([`crate::wire::shmkv`]).

pub mod per_worker;
pub mod single;
pub mod table;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::wire::shmkv::region::{Region, HEADER_BYTES};
use crate::wire::shmkv::{Arch, ShmkvError};

/// Options of `stairbench serve shmkv`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShmkvArgs {
    /// Architecture: single (one request channel passed between clients, a dispatcher and
    /// worker threads) or per-worker (each worker its own input and output rings).
    #[arg(long, value_enum, default_value = "per-worker")]
    pub arch: Arch,
    /// Worker threads (`--threads` is the same, as for the other built-in servers).
    #[arg(long, alias = "threads", default_value_t = 1)]
    pub workers: usize,
    /// Region name: the region is /dev/shm/stairbench.shmkv.NAME; clients use shm://NAME.
    #[arg(long)]
    pub name: String,
    /// Hash-table buckets (rounded up to a power of two), each with its own lock.
    #[arg(long, default_value_t = 4096)]
    pub buckets: usize,
    /// Pin the workers to these CPUs, round-robin (e.g. 0 or 0-1).
    #[arg(long, value_name = "LIST")]
    pub cpuset: Option<crate::cpuset::CpuList>,
    /// Ignored (shared memory has no port): accepted so that a runner giving every
    /// built-in server a `--port` can start this one too.
    #[arg(long, hide = true)]
    pub port: Option<u16>,
}

/// A running server (in this process). Dropping it stops it and removes the region.
pub struct ShmkvServer {
    region: Arc<Region>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    arch: Arch,
    workers: usize,
}

/// Creates the region and starts the server's threads.
pub fn spawn_shmkv(opts: &ShmkvArgs) -> Result<ShmkvServer, ShmkvError> {
    if opts.workers == 0 || opts.workers > 1024 {
        return Err(ShmkvError::BadOption(format!(
            "--workers must be between 1 and 1024, got {}",
            opts.workers
        )));
    }
    let cpus = opts.cpuset.as_ref().map(|c| c.0.clone());
    if cpus.as_ref().is_some_and(|c| c.is_empty()) {
        return Err(ShmkvError::BadOption("--cpuset is empty".into()));
    }
    if let Err(e) = crate::cpuset::check_available(cpus.as_deref().unwrap_or_default()) {
        return Err(ShmkvError::BadOption(e.to_string()));
    }
    let (block, len) = opts.arch.layout(opts.workers);
    let region = Arc::new(Region::create(&opts.name, len - HEADER_BYTES)?);
    if opts.arch == Arch::Single {
        crate::wire::shmkv::single::init(&region);
    }
    region.publish(opts.arch, opts.workers as u32, block);
    let table = Arc::new(table::Table::new(opts.buckets));
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = match opts.arch {
        Arch::Single => single::spawn(region.clone(), table, stop.clone(), opts.workers, cpus),
        Arch::PerWorker | Arch::Kvd => spawn_per_worker(&region, &table, &stop, opts.workers, cpus),
    };
    let threads = spawned.map_err(|error| ShmkvError::Io {
        context: "starting the server threads".into(),
        error,
    })?;
    Ok(ShmkvServer {
        region,
        stop,
        threads,
        arch: opts.arch,
        workers: opts.workers,
    })
}

fn spawn_per_worker(
    region: &Arc<Region>,
    table: &Arc<table::Table>,
    stop: &Arc<AtomicBool>,
    workers: usize,
    cpus: Option<Vec<usize>>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    (0..workers)
        .map(|w| {
            let (r, t, s) = (region.clone(), table.clone(), stop.clone());
            let cpu = cpus.as_ref().map(|c| c[w % c.len()]);
            std::thread::Builder::new()
                .name(format!("shmkv-w{w}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = crate::cpuset::pin_current_thread(cpu);
                    }
                    per_worker::worker_loop(r, w, t, s)
                })
        })
        .collect()
}

impl ShmkvServer {
    /// The region's path in /dev/shm.
    pub fn path(&self) -> &str {
        &self.region.path
    }
}

impl Drop for ShmkvServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.region.header().stopping.store(1, Ordering::SeqCst);
        match self.arch {
            Arch::Single => single::wake_all(&self.region),
            Arch::PerWorker | Arch::Kvd => per_worker::wake_all(&self.region, self.workers),
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.region.unlink();
    }
}
