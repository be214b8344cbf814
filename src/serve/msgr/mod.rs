//! `stairbench serve msgr`: the length-prefixed messenger server in two architectures whose
//! scaling the lab compares (the messenger study: Crimson's reactor against the async messenger).
//! The frame format lives in [`crate::wire::msgr`].

mod conn;
mod listen;
mod pool;
mod reactor;
mod work;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use mio::{Events, Poll, Token, Waker};
use thiserror::Error;

use crate::serve::stats::{self, ThreadStat};
use crate::wire::msgr::DEFAULT_MAX_FRAME;
use conn::ConnCounters;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

/// How the server spreads work over its threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// One pinned event loop per thread, SO_REUSEPORT, shared-nothing.
    Reactor,
    /// I/O threads hand every message through one shared queue to worker threads.
    Pool,
}

impl Arch {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Reactor => "reactor",
            Arch::Pool => "pool",
        }
    }
}

/// Everything a msgr server needs.
#[derive(Debug, Clone)]
pub struct MsgrOptions {
    /// The architecture.
    pub arch: Arch,
    /// Reactor: event loops. Pool: worker threads.
    pub threads: usize,
    /// Pool only: I/O threads (each with its own listener).
    pub io_threads: usize,
    /// CPUs the threads are pinned to, round-robin; empty leaves them unpinned.
    pub cpuset: Vec<usize>,
    /// Address to listen on; port 0 picks a free port.
    pub addr: SocketAddr,
    /// Bound on a frame's payload_len and reply_len.
    pub max_frame: u32,
    /// CPU work done for every message before its reply, ns (reactor: on its loop; pool: on a
    /// worker, after the hand-off).
    pub work_ns: u64,
    /// How often to print the ops/s and busy % line on stderr; `None` prints nothing.
    pub report_every: Option<Duration>,
    /// A JSON file of per-thread busy time, loop turns and ops, rewritten every 200 ms
    /// (`stairbench serve msgr --metrics FILE`; the sweep reads it at a step's edges).
    pub metrics_file: Option<std::path::PathBuf>,
}

impl Default for MsgrOptions {
    fn default() -> Self {
        MsgrOptions {
            arch: Arch::Reactor,
            threads: 1,
            io_threads: 1,
            cpuset: Vec::new(),
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            max_frame: DEFAULT_MAX_FRAME,
            work_ns: 0,
            report_every: None,
            metrics_file: None,
        }
    }
}

/// Options that cannot give a working server.
#[derive(Debug, Error)]
pub enum MsgrConfigError {
    /// A thread count of zero.
    #[error("--{flag} must be at least 1")]
    NoThreads {
        /// The flag at fault.
        flag: &'static str,
    },
    /// A CPU this process may not run on.
    #[error("cannot pin to CPU {cpu}: this machine has CPUs {allowed}")]
    CpuNotAllowed {
        /// The CPU asked for.
        cpu: usize,
        /// The CPUs this process may use, as a list.
        allowed: String,
    },
}

/// Why a msgr server could not start.
#[derive(Debug, Error)]
pub enum MsgrError {
    /// Its options are wrong (a usage error).
    #[error(transparent)]
    Config(#[from] MsgrConfigError),
    /// The OS refused something it needs, with what it was doing.
    #[error("{what}")]
    Os {
        /// What it was doing ("cannot listen on 127.0.0.1:7000 (is the port in use?)").
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl From<std::io::Error> for MsgrError {
    fn from(source: std::io::Error) -> Self {
        MsgrError::Os {
            what: "the server could not start".into(),
            source,
        }
    }
}

/// `map_err` for an OS error with what was being done.
fn doing(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> MsgrError {
    let what = what.into();
    move |source| MsgrError::Os { what, source }
}

impl MsgrOptions {
    /// Checks the options before any thread or socket is made.
    pub fn validate(&self) -> Result<(), MsgrConfigError> {
        if self.threads == 0 {
            return Err(MsgrConfigError::NoThreads { flag: "threads" });
        }
        if self.arch == Arch::Pool && self.io_threads == 0 {
            return Err(MsgrConfigError::NoThreads { flag: "io-threads" });
        }
        let allowed = crate::cpuset::allowed();
        match self.cpuset.iter().find(|cpu| !allowed.contains(cpu)) {
            Some(&cpu) => Err(MsgrConfigError::CpuNotAllowed {
                cpu,
                allowed: crate::cpuset::format(&allowed),
            }),
            None => Ok(()),
        }
    }

    fn cpu_for(&self, thread_index: usize) -> Option<usize> {
        (!self.cpuset.is_empty()).then(|| self.cpuset[thread_index % self.cpuset.len()])
    }
}

/// What every event loop of one server reads (set once, or only on connection events).
pub struct LoopShared {
    stop: AtomicBool,
    max_frame: u32,
    counters: ConnCounters,
    /// CPU work done for every message before its reply (`--work-ns`).
    work: work::Work,
}

/// Accepts every pending connection on `listener`, handing each to `register`.
fn accept_all(
    listener: &mio::net::TcpListener,
    shared: &LoopShared,
    mut register: impl FnMut(mio::net::TcpStream),
) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                shared.counters.accepted.fetch_add(1, Ordering::Relaxed);
                register(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // EMFILE and the like: keep serving the connections we have.
                eprintln!("msgr: accept failed: {e}");
                return;
            }
        }
    }
}

/// One thread's side of the event loop the reactors and the pool's I/O threads share.
trait EventLoop {
    /// Its poll, the server's shared state and the thread's counters.
    fn parts(&mut self) -> (&mut Poll, &LoopShared, &ThreadStat);
    /// Connections are waiting on the listener.
    fn accept(&mut self);
    /// The waker fired (besides a stop: workers' replies are back, for the pool).
    fn woken(&mut self) {}
    /// Connection `slot` is ready; `peer_closed`: the peer's FIN was in the event.
    fn drive(&mut self, slot: usize, peer_closed: bool);
    /// After every batch of events.
    fn after_events(&mut self) {}
}

/// Serves `l`'s events until the server's stop flag is set or polling fails.
fn run_event_loop(l: &mut impl EventLoop) {
    let mut events = Events::with_capacity(1024);
    loop {
        let (poll, shared, stat) = l.parts();
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        stat.add_loop();
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() != std::io::ErrorKind::Interrupted {
                eprintln!("{}: poll failed: {e}", stat.name);
                return;
            }
        }
        for event in events.iter() {
            match event.token() {
                LISTENER => l.accept(),
                WAKER => l.woken(),
                Token(t) => l.drive(t - conn::FIRST_CONN_TOKEN, event.is_read_closed()),
            }
        }
        l.after_events();
    }
}

/// Counters of a running server, summed over its threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MsgrStats {
    /// Requests answered (reply built).
    pub ops: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections the peer closed cleanly.
    pub peer_closed: u64,
    /// Connections closed because the peer closed mid-frame.
    pub truncated: u64,
    /// Connections closed for a frame over `--max-frame` (garbage counts here).
    pub refused: u64,
    /// Connections closed on a socket error.
    pub io_errors: u64,
}

/// A running msgr server; dropping it stops it.
pub struct MsgrServer {
    addr: SocketAddr,
    arch: Arch,
    shared: Arc<LoopShared>,
    wakers: Vec<Arc<Waker>>,
    queue: Option<Arc<pool::SharedQueue>>,
    threads: Vec<JoinHandle<()>>,
    stats: Vec<Arc<ThreadStat>>,
    reporter: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
    metrics_writer: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl MsgrServer {
    /// The address it listens on (with the port picked when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its architecture.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// Names of its threads, in pinning order.
    pub fn thread_names(&self) -> Vec<String> {
        self.stats.iter().map(|s| s.name.clone()).collect()
    }

    /// Counters so far.
    pub fn stats(&self) -> MsgrStats {
        let c = &self.shared.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        MsgrStats {
            ops: self.stats.iter().map(|s| load(&s.ops)).sum(),
            accepted: load(&c.accepted),
            peer_closed: load(&c.peer_closed),
            truncated: load(&c.truncated),
            refused: load(&c.refused),
            io_errors: load(&c.io_errors),
        }
    }

    /// Stops every thread and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        for waker in &self.wakers {
            let _ = waker.wake();
        }
        if let Some(queue) = &self.queue {
            queue.stop();
        }
        // The reporter reads the threads' CPU clocks: it goes first.
        if let Some((tx, handle)) = self.reporter.take() {
            drop(tx);
            let _ = handle.join();
        }
        if let Some((tx, handle)) = self.metrics_writer.take() {
            drop(tx);
            let _ = handle.join();
        }
        for handle in self.threads.drain(..) {
            let _ = handle.join();
        }
    }
}

impl Drop for MsgrServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Starts a msgr server; it runs on its own threads until stopped or dropped.
pub fn spawn_msgr(opts: MsgrOptions) -> Result<MsgrServer, MsgrError> {
    opts.validate()?;
    let loops = match opts.arch {
        Arch::Reactor => opts.threads,
        Arch::Pool => opts.io_threads,
    };
    let listeners = listen::reuseport_listeners(opts.addr, loops).map_err(doing(format!(
        "cannot listen on {} (is the port in use?)",
        opts.addr
    )))?;
    let addr = listeners[0].local_addr()?;
    let shared = Arc::new(LoopShared {
        stop: AtomicBool::new(false),
        max_frame: opts.max_frame,
        counters: ConnCounters::default(),
        work: work::Work::calibrate(opts.work_ns),
    });
    let mut server = MsgrServer {
        addr,
        arch: opts.arch,
        shared,
        wakers: Vec::new(),
        queue: None,
        threads: Vec::new(),
        stats: Vec::new(),
        reporter: None,
        metrics_writer: None,
    };
    match opts.arch {
        Arch::Reactor => start_reactors(&mut server, &opts, listeners)?,
        Arch::Pool => start_pool(&mut server, &opts, listeners)?,
    }
    if let Some(every) = opts.report_every {
        let (tx, rx) = mpsc::channel();
        let handle = stats::spawn_reporter(server.stats.clone(), every, rx)?;
        server.reporter = Some((tx, handle));
    }
    if let Some(path) = &opts.metrics_file {
        let (tx, rx) = mpsc::channel();
        let every = Duration::from_millis(200);
        let handle =
            stats::spawn_metrics_writer(server.stats.clone(), path.clone(), every, rx).map_err(
                doing(format!("cannot write the metrics file {}", path.display())),
            )?;
        server.metrics_writer = Some((tx, handle));
    }
    Ok(server)
}

/// Spawns a named thread pinned to `cpu`, which registers its CPU clock and runs `body`.
fn spawn_pinned(
    server: &mut MsgrServer,
    stat: Arc<ThreadStat>,
    cpu: Option<usize>,
    body: impl FnOnce() + Send + 'static,
) -> Result<(), MsgrError> {
    server.stats.push(stat.clone());
    let name = stat.name.clone();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            if let Some(cpu) = cpu {
                if let Err(e) = crate::cpuset::pin_current_thread(cpu) {
                    eprintln!("{name}: cannot pin to CPU {cpu}: {e}");
                }
            }
            stat.register_current_thread();
            body();
        })
        .map_err(doing("cannot start a server thread"))?;
    server.threads.push(handle);
    Ok(())
}

fn new_poll(server: &mut MsgrServer) -> Result<(Poll, Arc<Waker>), MsgrError> {
    let poll = Poll::new().map_err(doing("cannot create an event loop (epoll)"))?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    server.wakers.push(waker.clone());
    Ok((poll, waker))
}

fn start_reactors(
    server: &mut MsgrServer,
    opts: &MsgrOptions,
    listeners: Vec<mio::net::TcpListener>,
) -> Result<(), MsgrError> {
    for (i, listener) in listeners.into_iter().enumerate() {
        let (poll, _) = new_poll(server)?;
        let shared = server.shared.clone();
        let stat = ThreadStat::new(format!("msgr-reactor-{i}"));
        let reactor = reactor::Reactor::new(poll, listener, stat.clone(), shared)?;
        spawn_pinned(server, stat, opts.cpu_for(i), move || reactor.run())?;
    }
    Ok(())
}

fn start_pool(
    server: &mut MsgrServer,
    opts: &MsgrOptions,
    listeners: Vec<mio::net::TcpListener>,
) -> Result<(), MsgrError> {
    let queue = Arc::new(pool::SharedQueue::default());
    server.queue = Some(queue.clone());
    let mut polls = Vec::new();
    let mut returns = Vec::new();
    for _ in 0..listeners.len() {
        let (poll, waker) = new_poll(server)?;
        polls.push(poll);
        returns.push(pool::ReturnQueue::new(waker));
    }
    let returns = Arc::new(returns);
    for (i, (poll, listener)) in polls.into_iter().zip(listeners).enumerate() {
        let (q, r, shared) = (queue.clone(), returns.clone(), server.shared.clone());
        let stat = ThreadStat::new(format!("msgr-io-{i}"));
        let io = pool::IoLoop::new(i, poll, listener, q, r, stat.clone(), shared)?;
        spawn_pinned(server, stat, opts.cpu_for(i), move || io.run())?;
    }
    for w in 0..opts.threads {
        let (q, r) = (queue.clone(), returns.clone());
        let cpu = opts.cpu_for(opts.io_threads + w);
        let stat = ThreadStat::new(format!("msgr-worker-{w}"));
        let worker_stat = stat.clone();
        let work = server.shared.work;
        spawn_pinned(server, stat, cpu, move || {
            pool::run_worker(&q, &r, &worker_stat, work)
        })?;
    }
    Ok(())
}
