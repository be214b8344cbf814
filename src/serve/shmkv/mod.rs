//! `stairbench serve shmkv`: seed 002's shared-memory hash-table server in both of its
//! architectures, `single` (the measured "preopt" design) and `per-worker` (the proposed
//! one), plus the client end that `stairbench load shm://NAME` and the tests use.
//!
//! The region lives in /dev/shm (see [`region`]); its header names the architecture, so a
//! client needs only the name.

pub mod msg;
pub mod per_worker;
pub mod region;
pub mod single;
pub mod sync;
pub mod table;

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::Context;

use msg::{Response, OP_GET, OP_SET, ST_NOT_FOUND, ST_OK};
use region::{Region, HEADER_BYTES};

/// The two architectures of seed 002.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// One request channel, one response channel, a dispatcher and K workers.
    Single,
    /// One block of input/output rings per worker; clients attach round-robin.
    PerWorker,
}

impl Arch {
    fn code(self) -> u32 {
        match self {
            Arch::Single => 1,
            Arch::PerWorker => 2,
        }
    }

    fn from_code(code: u32) -> Option<Arch> {
        match code {
            1 => Some(Arch::Single),
            2 => Some(Arch::PerWorker),
            _ => None,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Single => "single",
            Arch::PerWorker => "per-worker",
        }
    }

    /// (bytes of one block, bytes of the whole region) for `workers` workers.
    fn layout(self, workers: usize) -> (usize, usize) {
        match self {
            Arch::Single => (single::block_size(), HEADER_BYTES + single::block_size()),
            Arch::PerWorker => {
                let b = per_worker::block_size();
                (b, HEADER_BYTES + workers * b)
            }
        }
    }
}

/// Why the shmkv server or one of its clients failed.
#[derive(Debug, thiserror::Error)]
pub enum ShmkvError {
    /// The name cannot be a shm object name.
    #[error("bad region name {0:?}: use letters, digits, '.', '_' and '-' (at most 200)")]
    BadName(String),
    /// No region of that name.
    #[error("no region {path}: is `stairbench serve shmkv --name {name}` running?")]
    NotFound {
        /// The /dev/shm path looked for.
        path: String,
        /// The server name.
        name: String,
    },
    /// The server has created the region but not yet published its header.
    #[error("region {0} is still being set up by its server; try again")]
    NotReady(String),
    /// Not a region this build can use: foreign, malformed, or another layout.
    #[error("{path} is not a usable stairbench shmkv region: {why}")]
    Foreign {
        /// The /dev/shm path.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// A live server already serves this name.
    #[error("{path} is in use by a running server (pid {pid}); stop it or pick another --name")]
    InUse {
        /// The /dev/shm path.
        path: String,
        /// The serving process.
        pid: i32,
    },
    /// Every client entry is taken.
    #[error("the server takes at most {clients} clients at once; detach some, or start it with more --workers")]
    Full {
        /// Client entries the region has.
        clients: usize,
    },
    /// A key or value out of the records' range.
    #[error("key of {key_len} bytes or value of {value_len} bytes out of range: keys take 1 to {} bytes, values at most {}", msg::MAX_KEY, msg::MAX_VALUE)]
    TooLarge {
        /// Key length asked for.
        key_len: usize,
        /// Value length asked for.
        value_len: usize,
    },
    /// The server did not answer within the timeout.
    #[error("the shmkv server did not answer in time")]
    Timeout,
    /// The server is stopping.
    #[error("the shmkv server stopped")]
    Stopped,
    /// An option is unusable.
    #[error("{0}")]
    BadOption(String),
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

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
        single::init(&region);
    }
    region.publish(opts.arch, opts.workers as u32, block);
    let table = Arc::new(table::Table::new(opts.buckets));
    let stop = Arc::new(AtomicBool::new(false));
    let spawned = match opts.arch {
        Arch::Single => single::spawn(region.clone(), table, stop.clone(), opts.workers, cpus),
        Arch::PerWorker => spawn_per_worker(&region, &table, &stop, opts.workers, cpus),
    };
    let threads = spawned.map_err(|source| ShmkvError::Io {
        context: "starting the server threads".into(),
        source,
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
            Arch::PerWorker => per_worker::wake_all(&self.region, self.workers),
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.region.unlink();
    }
}

/// A client attached to a server's region, of either architecture.
pub struct ShmkvClient {
    kind: ClientKind,
    arch: Arch,
    timeout: Duration,
}

enum ClientKind {
    Single(single::Client),
    PerWorker(per_worker::Client),
}

impl ShmkvClient {
    /// Attaches to the server `name` (its header tells the architecture).
    pub fn attach(name: &str) -> Result<ShmkvClient, ShmkvError> {
        let (region, arch) = Region::attach(name)?;
        let region = Arc::new(region);
        let kind = match arch {
            Arch::Single => ClientKind::Single(single::Client::attach(region)?),
            Arch::PerWorker => ClientKind::PerWorker(per_worker::Client::attach(region)?),
        };
        Ok(ShmkvClient {
            kind,
            arch,
            timeout: Duration::from_secs(10),
        })
    }

    /// Attaches, retrying for up to `wait` while the region is absent or not ready yet.
    pub fn attach_wait(name: &str, wait: Duration) -> Result<ShmkvClient, ShmkvError> {
        let until = Instant::now() + wait;
        loop {
            match ShmkvClient::attach(name) {
                Err(ShmkvError::NotFound { .. } | ShmkvError::NotReady(_))
                    if Instant::now() < until =>
                {
                    std::thread::sleep(Duration::from_millis(10))
                }
                other => return other,
            }
        }
    }

    /// The server's architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// How long a request may wait for its answer (default 10 s).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Copies the value of `key` into `out`; false when the key was never set.
    pub fn get(&mut self, key: &[u8], out: &mut Vec<u8>) -> Result<bool, ShmkvError> {
        let resp = self.call(OP_GET, key, &[])?;
        out.clear();
        match resp.status {
            ST_OK => {
                out.extend_from_slice(&resp.value[..resp.value_len as usize]);
                Ok(true)
            }
            ST_NOT_FOUND => Ok(false),
            s => Err(ShmkvError::BadOption(format!(
                "the server refused a GET (status {s})"
            ))),
        }
    }

    /// Stores `value` under `key`.
    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ShmkvError> {
        match self.call(OP_SET, key, value)?.status {
            ST_OK => Ok(()),
            s => Err(ShmkvError::BadOption(format!(
                "the server refused a SET (status {s})"
            ))),
        }
    }

    fn call(&mut self, op: u32, key: &[u8], value: &[u8]) -> Result<&Response, ShmkvError> {
        msg::check_sizes(key, value)?;
        match &mut self.kind {
            ClientKind::Single(c) => c.call(op, key, value, self.timeout),
            ClientKind::PerWorker(c) => c.call(op, key, value, self.timeout),
        }
    }
}

/// The /dev/shm path of the region of server `name`.
pub fn region_path(name: &str) -> Result<String, ShmkvError> {
    region::path_of(name)
}

/// Runs `stairbench serve shmkv` until SIGINT or SIGTERM.
pub fn run(args: ShmkvArgs) -> anyhow::Result<ExitCode> {
    let stop = crate::signals::stop_flag();
    let server = spawn_shmkv(&args).with_context(|| format!("starting shmkv {:?}", args.name))?;
    eprintln!(
        "shmkv: serving {} ({}, {} worker{}), pid {}; clients use shm://{}",
        server.path(),
        args.arch.name(),
        args.workers,
        if args.workers == 1 { "" } else { "s" },
        std::process::id(),
        args.name
    );
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(server);
    eprintln!("shmkv: stopped; region removed");
    Ok(ExitCode::SUCCESS)
}
