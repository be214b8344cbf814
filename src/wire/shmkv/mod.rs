//! The shmkv wire: what a `stairbench serve shmkv` server and its clients share: the region
//! in /dev/shm (see [`region`]), the records in it ([`msg`]), the cross-process waits
//! ([`sync`]), each architecture's layout with its client end ([`single`], [`per_worker`]),
//! and the client type `stairbench load shm://NAME` and the tests use.
//!
//! The region's header names the architecture, so a client needs only the name.

pub mod msg;
pub mod per_worker;
pub mod region;
pub mod single;
pub mod sync;

use std::sync::Arc;
use std::time::{Duration, Instant};

use msg::{Response, OP_GET, OP_SET, ST_NOT_FOUND, ST_OK};
use region::{Region, HEADER_BYTES};

/// Bytes after a kvd region's block for the daemon's rank record.
pub const KVD_INFO_BYTES: usize = 64;

/// The two architectures of the shared-memory hash-table study, and the kvd daemon's region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// One request channel, one response channel, a dispatcher and K workers.
    Single,
    /// One block of input/output rings per worker; clients attach round-robin.
    PerWorker,
    /// A `serve kvd` daemon: one per-worker block (its daemon thread is the worker) and
    /// the daemon's rank record after it (`wire::kvd::KvdInfo`).
    #[value(skip)]
    Kvd,
}

impl Arch {
    fn code(self) -> u32 {
        match self {
            Arch::Single => 1,
            Arch::PerWorker => 2,
            Arch::Kvd => 3,
        }
    }

    fn from_code(code: u32) -> Option<Arch> {
        match code {
            1 => Some(Arch::Single),
            2 => Some(Arch::PerWorker),
            3 => Some(Arch::Kvd),
            _ => None,
        }
    }

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Single => "single",
            Arch::PerWorker => "per-worker",
            Arch::Kvd => "kvd",
        }
    }

    /// (bytes of one block, bytes of the whole region) for `workers` workers.
    pub fn layout(self, workers: usize) -> (usize, usize) {
        match self {
            Arch::Single => (single::block_size(), HEADER_BYTES + single::block_size()),
            Arch::PerWorker => {
                let b = per_worker::block_size();
                (b, HEADER_BYTES + workers * b)
            }
            Arch::Kvd => {
                let b = per_worker::block_size();
                (b, HEADER_BYTES + workers * b + KVD_INFO_BYTES)
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
    #[error("{context}: {error}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        error: std::io::Error,
    },
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
            Arch::PerWorker | Arch::Kvd => {
                ClientKind::PerWorker(per_worker::Client::attach(region)?)
            }
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
