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
//! Cost: each pass reads stat and schedstat per thread (held open and read again from their
//! start: see the sampler's `Held`), and a sleeping thread's syscall; passes are spaced, and
//! past some hundreds of threads each pass reads a rotating subset, so that the sampling stays
//! under [`BUDGET_SHARE`] of one CPU ([`plan`]).
//!
//! The sampler never asks a running thread for its system call ([`wait_files`]). The kernel
//! answers /proc/TID/syscall of a task in state R with `running` and nothing else; for a task
//! that has set a sleeping state but is still on its CPU it makes the *reader* wait until the
//! task is off it (task_current_syscall → wait_task_inactive: the reader spins, or sleeps a
//! tick while the task is preempted). The task itself is never stopped, so the read costs the
//! sampler, not the server.

/// Whether steps sample their threads' states: on unless `STAIRBENCH_THREAD_STATES=0`.
/// What it costs (about 1% of one CPU at 10 to 2,000 threads) and that it leaves the server's
/// throughput within noise are in docs/measured.md.
pub fn enabled() -> bool {
    enabled_by(std::env::var("STAIRBENCH_THREAD_STATES").ok().as_deref())
}

/// [`enabled`] for the variable's value (None when unset): unset, empty or anything but `0`
/// leaves it on; `0` (or `off`, `false`, `no`) turns it off.
pub fn enabled_by(value: Option<&str>) -> bool {
    let v = value.map(|v| v.trim().to_ascii_lowercase());
    !matches!(v.as_deref(), Some("0" | "off" | "false" | "no"))
}

pub mod peers;
mod sampler;

pub use sampler::{Targets, ThreadStateWatch, Watched};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::machine::threads::merge_thread_name;
use crate::record::observed::{PeerWait, StateSeconds, ThreadStateGroup};

/// The sampler's CPU budget, in share of one CPU.
pub const BUDGET_SHARE: f64 = 0.01;
/// The shortest time between two passes.
pub const MIN_EVERY: Duration = Duration::from_millis(10);
/// The longest time between two passes: past it, each pass reads a subset of the threads.
pub const MAX_EVERY: Duration = Duration::from_millis(100);

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

/// The files a sample reads beyond stat and schedstat to place a thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitFiles {
    /// /proc/PID/task/TID/syscall: the call it sleeps in and its first argument.
    pub syscall: bool,
    /// /proc/PID/task/TID/wchan: the kernel function it sleeps in.
    pub wchan: bool,
}

/// Which files place a thread that stat found in `state`: a sleeping one (S) its system call,
/// one in D state its wait channel too; any other (R running or runnable, T, t, Z, X, I)
/// nothing, as the kernel would answer `running` or make the reader wait (module docs).
pub fn wait_files(state: u8) -> WaitFiles {
    WaitFiles {
        syscall: matches!(state, b'S' | b'D'),
        wchan: state == b'D',
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
    /// One thread's seconds in each state and its socket waits by peer address. A thread
    /// never found blocked (a pass reads a subset of many threads) takes the shares of its
    /// group's samples, `pooled`; with none either, its time off a CPU is `other`.
    pub fn thread(
        &self,
        t: &Tally,
        pooled: &BTreeMap<Wait, u64>,
    ) -> (StateSeconds, BTreeMap<String, f64>) {
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
        let mut waits = if t.waits.is_empty() {
            pooled.clone()
        } else {
            t.waits.clone()
        };
        let blk_s =
            t.last.blkio_ticks.saturating_sub(t.first.blkio_ticks) as f64 / self.ticks_per_s;
        if self.delayacct && super::disk::plausible_blkio(blk_s, t.span_s.1 - t.span_s.0) {
            out.storage_s = blk_s.min(off_s);
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
        // The sockets whose other end is `addr` (closed ones from earlier dumps among them):
        // the first whose peer inode has an owner.
        let mut ours = (self.table.by_inode.iter()).filter(|(_, e)| e.remote.to_string() == addr);
        ours.find_map(|(&i, _)| self.owners.get(&self.table.peer_inode(i)?).copied())
            .or_else(|| self.owners.get(by_local.get(addr)?).copied())
    }

    /// Every tally grouped by (side, process, merged name), most non-idle time first; the
    /// server's groups and the load generator's apart.
    pub fn groups(&self, tallies: &[Tally]) -> BTreeMap<Role, Vec<ThreadStateGroup>> {
        type Key = (Role, i32, String);
        let mut acc: BTreeMap<Key, (ThreadStateGroup, BTreeMap<String, f64>)> = BTreeMap::new();
        let key = |t: &Tally| {
            let name = merge_thread_name(&t.name).to_string();
            (t.role.unwrap_or(Role::Server), t.pid, name)
        };
        let mut pooled: BTreeMap<Key, BTreeMap<Wait, u64>> = BTreeMap::new();
        for t in tallies {
            let p = pooled.entry(key(t)).or_default();
            for (w, k) in &t.waits {
                *p.entry(*w).or_insert(0) += k;
            }
        }
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
            let (secs, by_addr) = self.thread(t, &pooled[&key(t)]);
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

#[cfg(test)]
mod tests;
