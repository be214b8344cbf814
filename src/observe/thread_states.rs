//! Where every thread's time goes over a window, on both sides: the server's tree and the load
//! generator (stairbench's own `load-N`, `kvd-N`, `shm-N` threads, and the processes it
//! started that are not the server's: an external load tool).
//!
//! Exact where the kernel counts: each thread's time on a CPU and waiting for one
//! (/proc/PID/task/TID/schedstat), its user : system split (stat's utime : stime), and, when
//! the kernel keeps delay accounting, its block-I/O wait (stat's delayacct_blkio_ticks).
//! Sampled where it does not: a thread found sleeping (stat's state letter S or D) is placed
//! by what it sleeps in (/proc/PID/task/TID/syscall: the system call and its arguments; the
//! file descriptor it waits on, read through /proc/PID/fd; wchan in D state) — see
//! [`classify`]. Each thread's blocked kinds then share its time off a CPU (its time alive
//! in the window less its on-CPU and run-queue time) in proportion to its samples.
//!
//! Sockets: a wait on a connection the thread's process accepted (its local port is a
//! listening port) is *waiting for work* when it is a read (no request has come) and a
//! *socket wait* on that client when it is a write; a wait on a connection the process opened
//! is a socket wait on its other end, named by [`peers`]. An event loop's wait (epoll, poll,
//! select) is waiting for work on the server and, on the load generator, waiting on the
//! server, the peer named from the event loop's first registered socket.
//!
//! Cost: each pass reads two or three small files per thread; passes are spaced, and past
//! some hundreds of threads each pass reads a rotating subset, so that the sampling stays
//! under [`BUDGET_SHARE`] of one CPU ([`plan`]).

pub mod peers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::machine::procfs;
use crate::machine::threads::merge_thread_name;
use crate::record::observed::{PeerWait, StateSeconds, ThreadStateGroup, ThreadStates};

/// The sampler's CPU budget, in share of one CPU.
pub const BUDGET_SHARE: f64 = 0.01;
/// The shortest time between two passes.
pub const MIN_EVERY: Duration = Duration::from_millis(10);
/// The longest time between two passes: past it, each pass reads a subset of the threads.
pub const MAX_EVERY: Duration = Duration::from_millis(100);
/// How often the list of threads is refreshed (listing every process costs more than a pass).
const LIST_EVERY: Duration = Duration::from_secs(1);
/// Names of stairbench's own load-generator threads (before their `-N`).
const LOAD_THREADS: [&str; 3] = ["load", "kvd", "shm"];
/// Processes this one starts that are observers, not load: never counted as the client.
const OBSERVER_TOOLS: [&str; 2] = ["perf", "tc"];

/// What a blocked thread was found waiting on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Wait {
    /// A file or block device.
    Storage,
    /// A futex or a file lock.
    Lock,
    /// A socket's other end (by inode; 0 when unknown).
    Socket(u64),
    /// A read on a socket: waiting for work when a client opened it, else on its other end.
    SocketRead(u64),
    /// Nothing to do.
    Idle,
    /// A page fault.
    Paging,
    /// Anything else.
    Other,
}

/// Which side a thread is on: an event loop's wait means waiting for work on the server and
/// waiting on the server on the load generator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The observed server's tree.
    Server,
    /// The load generator.
    Client,
}

/// The kind of system call a thread sleeps in, by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Reads from arg0.
    Read,
    /// Writes to arg0 (or connects it).
    Write,
    /// Syncs a file (or all of them).
    Sync,
    /// Waits on asynchronous disk I/O.
    AioWait,
    /// futex, flock, fcntl.
    Lock,
    /// epoll_wait-like, on the epoll fd arg0.
    Epoll,
    /// poll, select.
    Poll,
    /// accept.
    Accept,
    /// Waits for a child or a signal.
    Idle,
    /// Anything else.
    Other,
}

fn call(nr: i64) -> Call {
    use libc as l;
    match nr {
        l::SYS_read
        | l::SYS_readv
        | l::SYS_pread64
        | l::SYS_preadv
        | l::SYS_preadv2
        | l::SYS_recvfrom
        | l::SYS_recvmsg
        | l::SYS_recvmmsg => Call::Read,
        l::SYS_write
        | l::SYS_writev
        | l::SYS_pwrite64
        | l::SYS_pwritev
        | l::SYS_pwritev2
        | l::SYS_sendto
        | l::SYS_sendmsg
        | l::SYS_sendmmsg
        | l::SYS_connect => Call::Write,
        l::SYS_fsync
        | l::SYS_fdatasync
        | l::SYS_sync
        | l::SYS_syncfs
        | l::SYS_sync_file_range
        | l::SYS_msync => Call::Sync,
        l::SYS_io_getevents => Call::AioWait,
        l::SYS_futex | l::SYS_futex_waitv | l::SYS_flock | l::SYS_fcntl => Call::Lock,
        l::SYS_epoll_pwait | l::SYS_epoll_pwait2 => Call::Epoll,
        l::SYS_ppoll | l::SYS_pselect6 => Call::Poll,
        l::SYS_accept | l::SYS_accept4 => Call::Accept,
        l::SYS_wait4 | l::SYS_waitid | l::SYS_rt_sigsuspend | l::SYS_rt_sigtimedwait => Call::Idle,
        _ => legacy_call(nr),
    }
}

/// The system calls x86-64 has beside the generic table.
#[cfg(target_arch = "x86_64")]
fn legacy_call(nr: i64) -> Call {
    match nr {
        libc::SYS_epoll_wait => Call::Epoll,
        libc::SYS_poll | libc::SYS_select => Call::Poll,
        libc::SYS_pause => Call::Idle,
        _ => Call::Other,
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn legacy_call(_nr: i64) -> Call {
    Call::Other
}

/// What an fd's link in /proc/PID/fd points to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FdKind {
    /// A socket, by inode.
    Socket(u64),
    /// A regular file or a block device.
    Storage,
    /// An eventfd, signalfd or timerfd: an event source.
    Event,
    /// A pipe, terminal, character device, or unknown.
    Other,
}

/// The kind of an fd's link target (`socket:[N]`, `/var/lib/x`, `/dev/vda`, `pipe:[N]`...).
pub fn fd_kind(target: &str) -> FdKind {
    if let Some(ino) = peers::socket_inode(target) {
        return FdKind::Socket(ino);
    }
    if target.starts_with("anon_inode:[eventfd")
        || target.starts_with("anon_inode:[signalfd")
        || target.starts_with("anon_inode:[timerfd")
    {
        return FdKind::Event;
    }
    if let Some(dev) = target.strip_prefix("/dev/") {
        use std::os::unix::fs::FileTypeExt;
        let block = std::fs::metadata(Path::new("/dev").join(dev))
            .is_ok_and(|m| m.file_type().is_block_device());
        return if block {
            FdKind::Storage
        } else {
            FdKind::Other
        };
    }
    if target.starts_with('/') {
        return FdKind::Storage;
    }
    FdKind::Other
}

/// A D-state wait channel that is block I/O.
pub fn io_wchan(wchan: &str) -> bool {
    const IO: [&str; 10] = [
        "io_schedule",
        "blk",
        "bio",
        "folio_wait",
        "wait_on_page",
        "wait_on_buffer",
        "jbd2",
        "writeback",
        "ext4",
        "xfs",
    ];
    IO.iter().any(|w| wchan.contains(w))
}

/// What a sleeping thread waits on: `state` is stat's letter (S or D), `nr` the system call
/// it is in (None outside any: a fault), `fd` the kind of its arg0 descriptor, where the call
/// takes one, and `wchan` the kernel function it sleeps in (read only in D state).
pub fn classify(role: Role, state: u8, nr: Option<i64>, fd: Option<FdKind>, wchan: &str) -> Wait {
    let Some(nr) = nr else {
        return match state {
            b'D' if io_wchan(wchan) => Wait::Storage,
            b'D' => Wait::Paging,
            _ => Wait::Other,
        };
    };
    let by_call = match (call(nr), fd) {
        (Call::Read, Some(FdKind::Socket(i))) => Wait::SocketRead(i),
        (Call::Write, Some(FdKind::Socket(i))) => Wait::Socket(i),
        (Call::Read | Call::Write | Call::Sync, Some(FdKind::Storage)) => Wait::Storage,
        (Call::Read, Some(FdKind::Event)) => Wait::Idle,
        (Call::Sync | Call::AioWait, _) => Wait::Storage,
        (Call::Lock, _) => Wait::Lock,
        (Call::Epoll, Some(FdKind::Socket(i))) if role == Role::Client => Wait::Socket(i),
        (Call::Epoll | Call::Poll, _) if role == Role::Client => Wait::Socket(0),
        (Call::Epoll | Call::Poll | Call::Accept | Call::Idle, _) => Wait::Idle,
        _ => Wait::Other,
    };
    match by_call {
        Wait::Other if state == b'D' && io_wchan(wchan) => Wait::Storage,
        w => w,
    }
}

/// How the sampling is spaced: a pass every `every`, reading `per_pass` threads of all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Plan {
    /// Time between two passes.
    pub every: Duration,
    /// Threads read per pass (all of them unless that would exceed the budget).
    pub per_pass: usize,
}

/// The spacing that keeps the sampling of `threads` threads, each read costing
/// `cost_per_thread_s` of CPU, within [`BUDGET_SHARE`]: every thread each pass, passes as
/// close as [`MIN_EVERY`] when few; passes stretched up to [`MAX_EVERY`] as threads grow;
/// beyond, a rotating subset each pass.
pub fn plan(threads: usize, cost_per_thread_s: f64) -> Plan {
    let threads = threads.max(1);
    let pass_s = threads as f64 * cost_per_thread_s.max(1e-7);
    let every_s = (pass_s / BUDGET_SHARE).clamp(MIN_EVERY.as_secs_f64(), MAX_EVERY.as_secs_f64());
    let affordable = (BUDGET_SHARE * every_s / cost_per_thread_s.max(1e-7)).floor() as usize;
    Plan {
        every: Duration::from_secs_f64(every_s),
        per_pass: affordable.clamp(1, threads),
    }
}

/// A first guess of one thread read's CPU (stat and syscall), refined as passes are timed.
const COST_GUESS_S: f64 = 15e-6;

/// Exact counters of one thread at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    /// stat's utime, in ticks.
    pub utime: u64,
    /// stat's stime, in ticks.
    pub stime: u64,
    /// schedstat's time on a CPU, ns.
    pub run_ns: u64,
    /// schedstat's run-queue wait, ns.
    pub wait_ns: u64,
    /// stat's delayacct_blkio_ticks.
    pub blkio_ticks: u64,
}

/// stat's state letter and its counters (None when it cannot be parsed).
pub fn parse_stat(text: &str) -> Option<(u8, Counters)> {
    let close = text.rfind(')')?;
    let f: Vec<&str> = text[close + 1..].split_whitespace().collect();
    // f[0] is field 3 (state).
    let num = |k: usize| f.get(k - 3).and_then(|v| v.parse::<u64>().ok());
    Some((
        *f.first()?.as_bytes().first()?,
        Counters {
            utime: num(14)?,
            stime: num(15)?,
            blkio_ticks: num(42).unwrap_or(0),
            ..Counters::default()
        },
    ))
}

/// The system call number and arg0 from /proc/PID/task/TID/syscall: None for `running`,
/// Some((None, _)) outside any call (`-1 ...`).
pub fn parse_syscall(text: &str) -> Option<(Option<i64>, u64)> {
    let mut f = text.split_whitespace();
    let nr: i64 = f.next()?.parse().ok()?;
    if nr < 0 {
        return Some((None, 0));
    }
    let arg0 = f
        .next()
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
    Some((Some(nr), arg0.unwrap_or(0)))
}

/// One thread's tally over the window.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Its process.
    pub pid: i32,
    /// Which side it is on.
    pub role: Option<Role>,
    /// Its name.
    pub name: String,
    /// Counters when first seen (zero for a thread born in the window).
    pub first: Counters,
    /// Counters when last seen.
    pub last: Counters,
    /// When first and last seen, in seconds from the window's start.
    pub span_s: (f64, f64),
    /// Samples taken of it, running or not.
    pub sampled: u64,
    /// Samples of each blocked kind.
    pub waits: BTreeMap<Wait, u64>,
}

/// The sampled threads' figures, grouped: `tallies` over a window of `window_s`, socket
/// inodes named through `table` and `owners` (inode → pid, pid → name).
pub struct Summary<'a> {
    /// The sockets seen.
    pub table: &'a peers::Table,
    /// The process holding each peer inode.
    pub owners: &'a BTreeMap<u64, i32>,
    /// Process names.
    pub names: &'a BTreeMap<i32, String>,
    /// Seconds per clock tick's reciprocal (ticks per second).
    pub ticks_per_s: f64,
    /// Delay accounting was on: storage comes from blkio ticks.
    pub delayacct: bool,
}

impl Summary<'_> {
    /// One thread's seconds in each state and its socket waits by peer address.
    pub fn thread(&self, t: &Tally) -> (StateSeconds, BTreeMap<String, f64>) {
        let run_s = t.last.run_ns.saturating_sub(t.first.run_ns) as f64 / 1e9;
        let wait_s = t.last.wait_ns.saturating_sub(t.first.wait_ns) as f64 / 1e9;
        let (u, s) = (
            t.last.utime.saturating_sub(t.first.utime),
            t.last.stime.saturating_sub(t.first.stime),
        );
        let user_share = if u + s == 0 {
            1.0
        } else {
            u as f64 / (u + s) as f64
        };
        let mut out = StateSeconds {
            on_cpu_user_s: run_s * user_share,
            on_cpu_sys_s: run_s * (1.0 - user_share),
            runqueue_s: wait_s,
            ..StateSeconds::default()
        };
        let mut off_s = (t.span_s.1 - t.span_s.0 - run_s - wait_s).max(0.0);
        let mut waits = t.waits.clone();
        if self.delayacct {
            let blk = t.last.blkio_ticks.saturating_sub(t.first.blkio_ticks) as f64;
            out.storage_s = (blk / self.ticks_per_s).min(off_s);
            off_s -= out.storage_s;
            waits.remove(&Wait::Storage);
        }
        let n: u64 = waits.values().sum();
        let mut peers = BTreeMap::new();
        if n == 0 {
            out.other_s += off_s;
            return (out, peers);
        }
        for (w, k) in waits {
            let s = off_s * k as f64 / n as f64;
            match self.resolve(w, t.role) {
                Wait::Storage => out.storage_s += s,
                Wait::Lock => out.lock_s += s,
                Wait::Idle => out.idle_s += s,
                Wait::Paging => out.paging_s += s,
                Wait::Socket(ino) => {
                    out.socket_s += s;
                    *peers.entry(self.addr(ino)).or_insert(0.0) += s;
                }
                Wait::SocketRead(_) | Wait::Other => out.other_s += s,
            }
        }
        (out, peers)
    }

    /// A read on a connection its process accepted is waiting for work; any other socket read
    /// is a wait on the other end.
    fn resolve(&self, w: Wait, _role: Option<Role>) -> Wait {
        match w {
            Wait::SocketRead(ino) if self.table.accepted(ino) => Wait::Idle,
            Wait::SocketRead(ino) => Wait::Socket(ino),
            w => w,
        }
    }

    fn addr(&self, ino: u64) -> String {
        match self.table.by_inode.get(&ino) {
            Some(e) => e.remote.to_string(),
            None => "unknown".into(),
        }
    }

    /// The peer waits of a group, named: the process holding the other end where it is on
    /// this machine.
    fn peer_waits(&self, by_addr: BTreeMap<String, f64>) -> Vec<PeerWait> {
        let by_local: BTreeMap<String, u64> = self
            .table
            .by_inode
            .iter()
            .map(|(&ino, e)| (e.local.to_string(), ino))
            .collect();
        let mut out: Vec<PeerWait> = by_addr
            .into_iter()
            .map(|(addr, thread_s)| {
                let pid = self.peer_pid(&addr, &by_local);
                PeerWait {
                    process: pid.and_then(|p| self.names.get(&p).cloned()),
                    pid,
                    addr,
                    thread_s,
                }
            })
            .collect();
        out.sort_by(|a, b| b.thread_s.total_cmp(&a.thread_s));
        out
    }

    fn peer_pid(&self, addr: &str, by_local: &BTreeMap<String, u64>) -> Option<i32> {
        // Any of our sockets whose other end is `addr`: its peer inode's owner.
        let ours = self
            .table
            .by_inode
            .iter()
            .find(|(_, e)| e.remote.to_string() == addr)
            .map(|(&i, _)| i)?;
        let peer = self
            .table
            .peer_inode(ours)
            .or_else(|| by_local.get(addr).copied())?;
        self.owners.get(&peer).copied()
    }

    /// Every tally grouped by (side, process, merged name), most non-idle time first; the
    /// server's groups and the load generator's apart.
    pub fn groups(&self, tallies: &[Tally]) -> BTreeMap<Role, Vec<ThreadStateGroup>> {
        type Key = (Role, i32, String);
        let mut acc: BTreeMap<Key, (ThreadStateGroup, BTreeMap<String, f64>)> = BTreeMap::new();
        for t in tallies {
            let role = t.role.unwrap_or(Role::Server);
            let name = merge_thread_name(&t.name).to_string();
            let (g, peers) = acc.entry((role, t.pid, name.clone())).or_insert_with(|| {
                let group = ThreadStateGroup {
                    pid: t.pid,
                    process: self.names.get(&t.pid).cloned().unwrap_or_default(),
                    name,
                    ..ThreadStateGroup::default()
                };
                (group, BTreeMap::new())
            });
            let (secs, by_addr) = self.thread(t);
            g.threads += 1;
            g.seconds.add(&secs);
            for (a, s) in by_addr {
                *peers.entry(a).or_insert(0.0) += s;
            }
        }
        let mut out: BTreeMap<Role, Vec<ThreadStateGroup>> = BTreeMap::new();
        for ((role, ..), (mut g, by_addr)) in acc {
            g.peers = self.peer_waits(by_addr);
            out.entry(role).or_default().push(g);
        }
        for groups in out.values_mut() {
            groups.sort_by(|a, b| b.seconds.busy_s().total_cmp(&a.seconds.busy_s()));
        }
        out
    }
}

/// Which tasks to watch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Targets {
    /// The server tree's root.
    pub server: Option<i32>,
    /// Watch this process's load threads and the load tools it started.
    pub client: bool,
}

/// A thread sampling the targets' threads until [`ThreadStateWatch::finish`].
#[derive(Debug)]
pub struct ThreadStateWatch {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<Option<Watched>>,
}

/// What the sampling thread returns.
#[derive(Debug, Default)]
struct Watched {
    server: Option<ThreadStates>,
    client: Option<ThreadStates>,
    cpu_s: f64,
}

impl ThreadStateWatch {
    /// Starts watching now: every target thread's counters are read at once (the window's
    /// start), then sampled until `finish`.
    pub fn start(targets: Targets) -> std::io::Result<ThreadStateWatch> {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("observe-states".into())
            .spawn(move || {
                let cpu0 = super::thread_cpu_s();
                let mut w = Sampler::new(targets);
                w.run(&stopped);
                let (server, client) = w.finish();
                Some(Watched {
                    server,
                    client,
                    cpu_s: super::thread_cpu_s() - cpu0,
                })
            })?;
        Ok(ThreadStateWatch { stop, handle })
    }

    /// Ends the window: the server's and the load generator's thread states (None where
    /// there was no thread to watch) and the CPU the sampling used, in seconds.
    pub fn finish(self) -> (Option<ThreadStates>, Option<ThreadStates>, f64) {
        let _ = self.stop.send(());
        let w = self.handle.join().ok().flatten().unwrap_or_default();
        (w.server, w.client, w.cpu_s)
    }
}

/// The sampling thread's state.
struct Sampler {
    targets: Targets,
    proc_root: PathBuf,
    started: Instant,
    tasks: BTreeMap<(i32, i32), Tally>,
    /// Threads to read, in the order passes walk them, and where the next pass begins.
    order: Vec<(i32, i32)>,
    next: usize,
    listed: Instant,
    samples: u64,
    passes: u64,
    cost_s: f64,
    table: peers::Table,
    diag: Option<std::os::fd::OwnedFd>,
    /// Socket inodes a dump did not find (unix sockets, another namespace's): not dumped for
    /// again.
    missing: BTreeSet<u64>,
    /// The table was dumped in this pass (at most once a pass).
    dumped: bool,
    /// The first socket registered in each (pid, epoll fd), for the load generator's waits.
    epoll_socket: BTreeMap<(i32, u64), u64>,
    delayacct: bool,
}

impl Sampler {
    fn new(targets: Targets) -> Sampler {
        let mut s = Sampler {
            targets,
            proc_root: PathBuf::from("/proc"),
            started: Instant::now(),
            tasks: BTreeMap::new(),
            order: Vec::new(),
            next: 0,
            listed: Instant::now(),
            samples: 0,
            passes: 0,
            cost_s: COST_GUESS_S,
            table: peers::Table::default(),
            diag: peers::open().ok(),
            missing: BTreeSet::new(),
            dumped: false,
            epoll_socket: BTreeMap::new(),
            delayacct: super::disk::delayacct_note().is_none(),
        };
        s.list();
        s.read_all();
        for t in s.tasks.values_mut() {
            t.first = t.last;
            t.span_s.0 = t.span_s.1;
        }
        s
    }

    /// Refreshes the threads to watch; a thread seen for the first time counts from zero
    /// (born in the window) unless seen at the start.
    fn list(&mut self) {
        let mut now = Vec::new();
        if let Some(root) = self.targets.server {
            let parents = procfs::parent_map(&self.proc_root);
            for pid in procfs::descendants(root, &parents) {
                self.add_tasks(pid, Role::Server, &mut now, None);
            }
            if self.targets.client {
                self.list_client(&parents, root, &mut now);
            }
        } else if self.targets.client {
            let parents = procfs::parent_map(&self.proc_root);
            self.list_client(&parents, 0, &mut now);
        }
        let elapsed = self.started.elapsed().as_secs_f64();
        for &(pid, tid, role) in &now {
            let t = self.tasks.entry((pid, tid)).or_insert_with(|| Tally {
                pid,
                span_s: (elapsed, elapsed),
                ..Tally::default()
            });
            t.role = Some(role);
        }
        self.order = now.iter().map(|&(p, t, _)| (p, t)).collect();
        self.next %= self.order.len().max(1);
        self.listed = Instant::now();
    }

    fn list_client(&mut self, parents: &BTreeMap<i32, i32>, server: i32, now: &mut Vec<Triple>) {
        let me = std::process::id() as i32;
        self.add_tasks(me, Role::Client, now, Some(&LOAD_THREADS));
        let server_tree: BTreeSet<i32> = if server > 0 {
            procfs::descendants(server, parents).into_iter().collect()
        } else {
            BTreeSet::new()
        };
        let kids = parents.iter().filter(|&(_, &pp)| pp == me).map(|(&p, _)| p);
        for kid in kids.collect::<Vec<_>>() {
            let comm = comm(&self.proc_root, kid);
            if server_tree.contains(&kid) || OBSERVER_TOOLS.contains(&comm.as_str()) {
                continue;
            }
            for pid in procfs::descendants(kid, parents) {
                self.add_tasks(pid, Role::Client, now, None);
            }
        }
    }

    /// Adds `pid`'s threads (only those whose merged name is among `names`, when given).
    fn add_tasks(&self, pid: i32, role: Role, now: &mut Vec<Triple>, names: Option<&[&str]>) {
        let dir = self.proc_root.join(pid.to_string()).join("task");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(names) = names {
                let name = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
                if !names.contains(&merge_thread_name(name.trim())) {
                    continue;
                }
            }
            now.push((pid, tid, role));
        }
    }

    /// Reads every watched thread's counters (the window's ends).
    fn read_all(&mut self) {
        let keys: Vec<_> = self.tasks.keys().copied().collect();
        for (pid, tid) in keys {
            let _ = self.read(pid, tid, false);
        }
    }

    /// Reads one thread: its counters and, when asked and it sleeps, what it waits on.
    /// False when it is gone. Each read is timed on its own: on a loaded machine the
    /// sampler may be preempted between two threads' reads, and a thread's counters must
    /// cover the span they are set against.
    fn read(&mut self, pid: i32, tid: i32, sample: bool) -> bool {
        let elapsed = self.started.elapsed().as_secs_f64();
        let dir = self
            .proc_root
            .join(pid.to_string())
            .join("task")
            .join(tid.to_string());
        let Some((state, mut c)) = read(&dir.join("stat")).and_then(|t| parse_stat(&t)) else {
            return false;
        };
        if let Some((run, wait)) =
            read(&dir.join("schedstat")).and_then(|t| crate::machine::threads::parse_schedstat(&t))
        {
            (c.run_ns, c.wait_ns) = (run, wait);
        }
        let name = if self
            .tasks
            .get(&(pid, tid))
            .is_some_and(|t| t.name.is_empty())
        {
            read(&dir.join("comm")).map(|n| n.trim().to_string())
        } else {
            None
        };
        let role = self.tasks.get(&(pid, tid)).and_then(|t| t.role);
        let wait = match role {
            Some(role) if sample && matches!(state, b'S' | b'D') => {
                self.wait_of(pid, role, &dir, state)
            }
            _ => None,
        };
        let Some(t) = self.tasks.get_mut(&(pid, tid)) else {
            return false;
        };
        if let Some(n) = name {
            t.name = n;
        }
        t.last = c;
        t.span_s.1 = elapsed;
        t.sampled += u64::from(sample);
        if let Some(w) = wait {
            *t.waits.entry(w).or_insert(0) += 1;
        }
        true
    }

    /// What a sleeping thread (its /proc directory `dir`) waits on.
    fn wait_of(&mut self, pid: i32, role: Role, dir: &Path, state: u8) -> Option<Wait> {
        let (nr, arg0) = read(&dir.join("syscall")).and_then(|t| parse_syscall(&t))?;
        let needs_fd = nr.is_some_and(|n| {
            matches!(call(n), Call::Read | Call::Write | Call::Sync)
                || (role == Role::Client && call(n) == Call::Epoll)
        });
        let fd = needs_fd
            .then(|| self.fd(pid, arg0, nr.map(call) == Some(Call::Epoll)))
            .flatten();
        let wchan = if state == b'D' {
            read(&dir.join("wchan")).unwrap_or_default()
        } else {
            String::new()
        };
        let w = classify(role, state, nr, fd, &wchan);
        if let Wait::Socket(i) | Wait::SocketRead(i) = w {
            let known = self.table.by_inode.contains_key(&i) || self.missing.contains(&i);
            if i != 0 && !known && !self.dumped {
                self.refresh_table();
                if !self.table.by_inode.contains_key(&i) {
                    self.missing.insert(i);
                }
            }
        }
        Some(w)
    }

    /// The kind of `pid`'s descriptor `fd`; for an epoll descriptor, its first socket's.
    fn fd(&mut self, pid: i32, fd: u64, epoll: bool) -> Option<FdKind> {
        if epoll {
            if let Some(&ino) = self.epoll_socket.get(&(pid, fd)) {
                return Some(FdKind::Socket(ino));
            }
            let ino = self.epoll_first_socket(pid, fd)?;
            self.epoll_socket.insert((pid, fd), ino);
            return Some(FdKind::Socket(ino));
        }
        let link = self.proc_root.join(format!("{pid}/fd/{fd}"));
        let target = std::fs::read_link(link).ok()?;
        Some(fd_kind(&target.to_string_lossy()))
    }

    fn epoll_first_socket(&self, pid: i32, epfd: u64) -> Option<u64> {
        let info = read(&self.proc_root.join(format!("{pid}/fdinfo/{epfd}")))?;
        info.lines()
            .filter_map(|l| {
                l.strip_prefix("tfd:")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .find_map(|tfd: u64| {
                let link = self.proc_root.join(format!("{pid}/fd/{tfd}"));
                peers::socket_inode(&std::fs::read_link(link).ok()?.to_string_lossy())
            })
    }

    fn refresh_table(&mut self) {
        self.dumped = true;
        if let Some(sock) = &self.diag {
            if peers::dump(sock, &mut self.table).is_err() {
                self.diag = None;
            }
        }
    }

    /// Passes until told to stop.
    fn run(&mut self, stopped: &mpsc::Receiver<()>) {
        loop {
            if self.listed.elapsed() >= LIST_EVERY {
                self.list();
            }
            let p = plan(self.order.len(), self.cost_s);
            let cpu0 = super::thread_cpu_s();
            let read = self.pass(p.per_pass);
            if read > 0 {
                let per = (super::thread_cpu_s() - cpu0) / read as f64;
                // A moving mean: one slow pass (a table dump) does not halve the rate.
                self.cost_s = 0.8 * self.cost_s + 0.2 * per;
            }
            self.passes += 1;
            if !matches!(
                stopped.recv_timeout(p.every),
                Err(mpsc::RecvTimeoutError::Timeout)
            ) {
                return;
            }
        }
    }

    /// One pass over `n` threads from where the last one stopped; how many were read.
    fn pass(&mut self, n: usize) -> usize {
        self.dumped = false;
        let n = n.min(self.order.len());
        for k in 0..n {
            let (pid, tid) = self.order[(self.next + k) % self.order.len()];
            if self.read(pid, tid, true) {
                self.samples += 1;
            }
        }
        self.next = (self.next + n) % self.order.len().max(1);
        n
    }

    /// Reads every thread once more (the window's end) and sums up both sides.
    fn finish(mut self) -> (Option<ThreadStates>, Option<ThreadStates>) {
        self.read_all();
        let window_s = self.started.elapsed().as_secs_f64();
        let tallies: Vec<Tally> = self
            .tasks
            .into_values()
            .filter(|t| t.role.is_some())
            .collect();
        let wanted: BTreeSet<u64> = tallies
            .iter()
            .flat_map(|t| t.waits.keys())
            .filter_map(|w| match w {
                Wait::Socket(i) | Wait::SocketRead(i) => self.table.peer_inode(*i),
                _ => None,
            })
            .collect();
        let owners = if wanted.is_empty() {
            BTreeMap::new()
        } else {
            peers::owners(&self.proc_root, &wanted)
        };
        let pids: BTreeSet<i32> = tallies
            .iter()
            .map(|t| t.pid)
            .chain(owners.values().copied())
            .collect();
        let names = pids
            .into_iter()
            .map(|p| (p, comm(&self.proc_root, p)))
            .collect();
        let summary = Summary {
            table: &self.table,
            owners: &owners,
            names: &names,
            ticks_per_s: procfs::ticks_per_s(),
            delayacct: self.delayacct,
        };
        let mut groups = summary.groups(&tallies);
        let interval_ms = if self.passes > 1 {
            1e3 * window_s / self.passes as f64
        } else {
            1e3 * window_s
        };
        let side = |role: Role, groups: &mut BTreeMap<Role, Vec<ThreadStateGroup>>| {
            let groups = groups.remove(&role)?;
            let samples = tallies
                .iter()
                .filter(|t| t.role == Some(role))
                .map(|t| t.sampled)
                .sum::<u64>();
            Some(ThreadStates {
                sample_interval_ms: interval_ms,
                samples,
                delay_accounting: self.delayacct,
                groups,
            })
        };
        let server = side(Role::Server, &mut groups);
        let client = side(Role::Client, &mut groups);
        (server, client)
    }
}

type Triple = (i32, i32, Role);

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn comm(proc_root: &Path, pid: i32) -> String {
    read(&proc_root.join(pid.to_string()).join("comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests;
