//! The next hop: where the server's requests go when it opens connections of its own (a
//! reverse proxy to its upstream, an application to its database). Sampled during the window:
//! every TCP socket on this machine (sock_diag), the server tree's connections that it opened
//! (neither listening nor accepted by one of the machine's listeners), grouped by the address
//! they go to; for each such address, the listening socket that takes them (its accept queue
//! and backlog), the other ends that hold unread bytes (a request the hop has not read), and
//! the process holding the listener: its threads' states (serving a request or waiting for
//! work, by [`thread_states::classify`]) and its CPU over the window. A hop that is not part
//! of the server's tree is followed in turn (its own connections), up to [`MAX_DEPTH`].
//!
//! Cost: one dump of the machine's TCP sockets per sample, every [`SAMPLE_EVERY`] for the
//! first second and then while the tree has connected to a hop in the window, every
//! [`IDLE_EVERY`] otherwise; a scan of every
//! process's fds once per new address (to find its listener's holder); the hop's own threads
//! (at most [`MAX_TASKS`]) each sample. Samples are spaced further apart when one costs more
//! than [`BUDGET_SHARE`] of the time between two (measured: 4,100 sockets cost 18 ms of CPU
//! a sample in the debug build, 7 ms of it the dump).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::fds::SocketFds;
use super::sockets::diag;
pub use super::sockets::diag::Sock;
use super::thread_states::{self, peers, FdKind, Role, Wait};
use crate::machine::procfs;
use crate::record::next_hop::NextHop;

/// Time between two samples once the tree has connected to a hop in the window.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// Time between two samples until it has, past the first [`EAGER_SAMPLES`] (a server that
/// opens none costs little).
pub const IDLE_EVERY: Duration = Duration::from_millis(500);
/// Samples taken every [`SAMPLE_EVERY`] at the window's start whatever they find: a proxy at
/// 1 or 2 clients holds a connection to its upstream only while a request is there.
pub const EAGER_SAMPLES: u32 = 10;
/// ... for this long at most: at a thousand connections a dump costs milliseconds and the
/// budget spaces them a second apart, and ten would take the whole window.
pub const EAGER_FOR: Duration = Duration::from_secs(1);
/// The sampling's CPU budget, in share of one CPU: past it (a dump of thousands of sockets
/// costs milliseconds) samples are spaced further apart.
pub const BUDGET_SHARE: f64 = 0.005;
/// Hops followed from the server: its own upstream, that one's, and one more.
pub const MAX_DEPTH: u32 = 3;
/// Addresses followed per process, the most connected first.
pub const MAX_HOPS: usize = 4;
/// A hop's threads read per sample (a pool of hundreds is read in part).
pub const MAX_TASKS: usize = 64;
/// How often each hop's process list is refreshed.
const PIDS_EVERY: Duration = Duration::from_millis(500);

const LISTEN: u8 = 10;

/// One dump, indexed.
#[derive(Debug, Default)]
pub struct Sockets {
    all: Vec<Sock>,
    by_inode: BTreeMap<u64, usize>,
    by_pair: BTreeMap<(SocketAddr, SocketAddr), usize>,
    listeners: BTreeMap<u16, Vec<usize>>,
}

/// One sample of one hop's queues.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Queues {
    /// Connections open to it.
    pub connections: u64,
    /// Its listener's accept queue.
    pub accept_queue: u64,
    /// Its listener's backlog.
    pub backlog: Option<u64>,
    /// Its accepted ends of those connections holding unread bytes.
    pub unread: u64,
}

impl Sockets {
    /// The inodes the dump lists.
    pub fn inodes(&self) -> BTreeSet<u64> {
        self.by_inode.keys().copied().collect()
    }

    /// Indexes a dump.
    pub fn new(all: Vec<Sock>) -> Sockets {
        let mut s = Sockets::default();
        for (i, k) in all.iter().enumerate() {
            if k.inode != 0 {
                s.by_inode.insert(k.inode, i);
            }
            if k.state == LISTEN {
                s.listeners.entry(k.local.port()).or_default().push(i);
            } else {
                s.by_pair.insert((k.local, k.remote), i);
            }
        }
        s.all = all;
        s
    }

    /// The listening socket that takes connections to `addr` (its address, else the wildcard).
    pub fn listener(&self, addr: SocketAddr) -> Option<&Sock> {
        let ls = self.listeners.get(&addr.port())?;
        let of = |exact: bool| {
            ls.iter().map(|&i| &self.all[i]).find(|l| {
                if exact {
                    l.local.ip() == addr.ip()
                } else {
                    l.local.ip().is_unspecified()
                }
            })
        };
        of(true).or_else(|| of(false))
    }

    /// A connection one of the machine's listeners accepted (its local address is one).
    fn accepted(&self, s: &Sock) -> bool {
        self.listener(s.local).is_some()
    }

    /// Whether the socket `inode` is an accepted connection (a read on it waits for a client).
    pub fn accepted_inode(&self, inode: u64) -> bool {
        self.by_inode
            .get(&inode)
            .is_some_and(|&i| self.all[i].state != LISTEN && self.accepted(&self.all[i]))
    }

    /// The connections among `inodes` (inode → holding pid) their processes opened, by the
    /// address they go to, the most connected first.
    pub fn outgoing(&self, inodes: &BTreeMap<u64, i32>) -> Vec<(SocketAddr, Vec<(i32, Sock)>)> {
        let mut by_addr: BTreeMap<SocketAddr, Vec<(i32, Sock)>> = BTreeMap::new();
        for (ino, &pid) in inodes {
            let Some(&i) = self.by_inode.get(ino) else {
                continue;
            };
            let s = self.all[i];
            if s.state != LISTEN && !self.accepted(&s) {
                by_addr.entry(s.remote).or_default().push((pid, s));
            }
        }
        let mut out: Vec<_> = by_addr.into_iter().collect();
        out.sort_by_key(|(_, conns)| std::cmp::Reverse(conns.len()));
        out
    }

    /// The queues of the hop at `addr` reached by `conns`: its listener's accept queue, and
    /// the accepted ends of those connections that hold unread bytes (ends still in the
    /// accept queue have no inode and count there).
    pub fn queues(&self, addr: SocketAddr, conns: &[Sock]) -> Queues {
        let listener = self.listener(addr);
        let unread = conns
            .iter()
            .filter_map(|c| self.by_pair.get(&(c.remote, c.local)))
            .map(|&i| &self.all[i])
            .filter(|end| end.inode != 0 && end.rx > 0)
            .count() as u64;
        Queues {
            connections: conns.len() as u64,
            accept_queue: listener.map_or(0, |l| l.rx),
            backlog: listener.map(|l| l.tx).filter(|&b| b > 0),
            unread,
        }
    }
}

/// The socket inodes `pids` hold open, each with its holder.
fn inodes_of(proc_root: &Path, pids: &[i32]) -> BTreeMap<u64, i32> {
    let mut out = BTreeMap::new();
    for &pid in pids {
        peers::socket_inodes_of(proc_root, pid, &mut out);
    }
    out
}

/// The eldest process holding `inode`, starting from one holder: its parents while they
/// hold it too (a pre-fork server's master and workers share their listener).
fn eldest_holder(proc_root: &Path, mut pid: i32, inode: u64) -> i32 {
    for _ in 0..8 {
        let Some(parent) = std::fs::read_to_string(proc_root.join(format!("{pid}/stat")))
            .ok()
            .and_then(|t| procfs::parse_pid_stat(&t))
            .map(|s| s.ppid)
        else {
            break;
        };
        let mut held = BTreeMap::new();
        peers::socket_inodes_of(proc_root, parent, &mut held);
        if parent <= 1 || !held.contains_key(&inode) {
            break;
        }
        pid = parent;
    }
    pid
}

/// A process's command, short: its name, and the module or script an interpreter runs
/// (`python3 -m gunicorn`, `node app.js`); the name alone otherwise.
pub fn short_command(comm: &str, cmdline: &[String]) -> String {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let script = |s: &str| {
        [".py", ".js", ".rb", ".pl", ".jar", ".php"]
            .iter()
            .any(|e| s.ends_with(e))
    };
    match cmdline {
        [_, flag, module, ..] if flag == "-m" || flag == "-jar" => {
            format!("{comm} {flag} {}", base(module))
        }
        [_, s, ..] if script(s) => format!("{comm} {}", base(s)),
        _ => comm.to_string(),
    }
}

fn comm_and_command(proc_root: &Path, pid: i32) -> (Option<String>, Option<String>) {
    let dir = proc_root.join(pid.to_string());
    let comm = std::fs::read_to_string(dir.join("comm"))
        .ok()
        .map(|c| c.trim().to_string());
    let args: Vec<String> = std::fs::read(dir.join("cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let command = comm.as_deref().map(|c| short_command(c, &args));
    (comm, command)
}

/// The number of CPUs `pid` may run on.
fn allowed_cpus(proc_root: &Path, pid: i32) -> Option<Vec<usize>> {
    let status = std::fs::read_to_string(proc_root.join(format!("{pid}/status"))).ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    crate::cpuset::parse(list.trim()).ok()
}

/// The per-CPU times of /proc/stat, or None when it cannot be read.
fn cpu_times(proc_root: &Path) -> Option<BTreeMap<usize, procfs::CpuTimes>> {
    let text = std::fs::read_to_string(proc_root.join("stat")).ok()?;
    Some(procfs::parse_proc_stat(&text))
}

/// Whether a thread of a hop, in state `state`, serves a request: running or runnable, or
/// blocked on anything but waiting for work (as the thread-state sampler classifies it).
fn in_service(proc_root: &Path, pid: i32, tid: i32, state: u8, socks: &Sockets) -> bool {
    if state == b'R' {
        return true;
    }
    if state != b'S' && state != b'D' {
        return false;
    }
    let task = proc_root.join(format!("{pid}/task/{tid}"));
    let Some((nr, arg0)) = std::fs::read_to_string(task.join("syscall"))
        .ok()
        .and_then(|t| thread_states::parse_syscall(&t))
    else {
        // It ran between the two reads.
        return true;
    };
    let fd = std::fs::read_link(proc_root.join(format!("{pid}/fd/{arg0}")))
        .ok()
        .map(|t| thread_states::fd_kind(&t.to_string_lossy()));
    match thread_states::classify(Role::Server, state, nr, fd, "") {
        Wait::Idle => false,
        Wait::SocketRead(ino) => !socks.accepted_inode(ino),
        _ => !matches!(fd, Some(FdKind::Event)),
    }
}

/// One hop followed during the window.
#[derive(Debug)]
struct Hop {
    record: NextHop,
    /// Its tree's processes (the listener's eldest holder and its descendants).
    pids: Vec<i32>,
    listed: Instant,
    first: Option<(Instant, procfs::TreeSample)>,
    /// The CPUs it may run on, and their /proc/stat times when it was found.
    cpus: Vec<usize>,
    cpus_first: Option<BTreeMap<usize, procfs::CpuTimes>>,
    sum_connections: f64,
    sum_accept: f64,
    sum_unread: f64,
    service: (f64, u64),
}

impl Hop {
    fn add(&mut self, q: Queues) {
        let r = &mut self.record;
        r.samples += 1;
        self.sum_connections += q.connections as f64;
        self.sum_accept += q.accept_queue as f64;
        self.sum_unread += q.unread as f64;
        r.accept_queue_max = r.accept_queue_max.max(q.accept_queue);
        r.accept_backlog = r.accept_backlog.max(q.backlog);
    }

    /// Its threads' states in this sample.
    fn sample_threads(&mut self, proc_root: &Path, socks: &Sockets) {
        let mut serving = 0u64;
        let mut read = 0usize;
        for &pid in &self.pids {
            let Ok(tasks) = std::fs::read_dir(proc_root.join(format!("{pid}/task"))) else {
                continue;
            };
            for t in tasks.flatten() {
                if read >= MAX_TASKS {
                    break;
                }
                let Some(tid) = t.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                    continue;
                };
                let Some(state) = std::fs::read_to_string(t.path().join("stat"))
                    .ok()
                    .and_then(|s| thread_states::parse_stat(&s))
                    .map(|(st, _)| st)
                else {
                    continue;
                };
                read += 1;
                serving += u64::from(in_service(proc_root, pid, tid, state, socks));
            }
        }
        if read > 0 {
            self.service.0 += serving as f64;
            self.service.1 += 1;
        }
    }

    /// Its record at the window's end, with its CPU from its first sample to now.
    fn finish(mut self, proc_root: &Path) -> NextHop {
        let n = self.record.samples.max(1) as f64;
        let r = &mut self.record;
        r.connections_mean = self.sum_connections / n;
        r.accept_queue_mean = self.sum_accept / n;
        r.unread_connections_mean = self.sum_unread / n;
        r.in_service_mean = (self.service.1 > 0).then(|| self.service.0 / self.service.1 as f64);
        if let (Some(before), Some(after)) = (&self.cpus_first, cpu_times(proc_root)) {
            let busy = procfs::core_busy(before, &after, &self.cpus);
            r.cpus_busy_pct = (!busy.is_empty()).then(|| busy.iter().map(|c| c.busy_pct).sum());
        }
        if let (Some((t0, before)), Some(pid)) = (&self.first, r.pid) {
            if let Some(after) = procfs::sample_tree(proc_root, pid) {
                let elapsed = t0.elapsed().as_secs_f64();
                let ticks = procfs::ticks_per_s();
                let d = procfs::tree_delta(before, &after);
                r.threads = after.tasks.len() as u64;
                if elapsed > 0.0 {
                    r.cpu_pct = Some(100.0 * (d.user_ticks + d.sys_ticks) as f64 / ticks / elapsed);
                    r.busiest_thread_pct = after
                        .tasks
                        .iter()
                        .filter_map(|(k, t)| {
                            let t0 = before.tasks.get(k)?.cpu_ticks;
                            Some(100.0 * t.cpu_ticks.saturating_sub(t0) as f64 / ticks / elapsed)
                        })
                        .max_by(f64::total_cmp);
                }
            }
        }
        self.record
    }
}

/// What the sampling thread keeps between samples.
struct Follower {
    proc_root: &'static Path,
    root: i32,
    tree: Vec<i32>,
    tree_listed: Instant,
    hops: BTreeMap<SocketAddr, Hop>,
    /// Addresses with no holder found (remote, or another namespace's), not looked up again.
    unowned: BTreeSet<SocketAddr>,
    own_pid: i32,
    /// The tree's fds, their links read again only where the dump no longer lists the socket.
    fds: SocketFds,
    /// The socket inodes the latest dump listed.
    live: BTreeSet<u64>,
}

impl Follower {
    fn new(root: i32) -> Follower {
        let proc_root = Path::new("/proc");
        Follower {
            proc_root,
            root,
            tree: super::listing::tree(proc_root, root, Duration::ZERO),
            tree_listed: Instant::now(),
            hops: BTreeMap::new(),
            unowned: BTreeSet::new(),
            own_pid: std::process::id() as i32,
            fds: SocketFds::new(),
            live: BTreeSet::new(),
        }
    }

    /// The socket inodes the server's tree holds now (its process list refreshed every
    /// [`PIDS_EVERY`]; an fd's link read again only where the latest dump no longer lists its
    /// socket).
    fn tree_inodes(&mut self) -> BTreeMap<u64, i32> {
        let now = Instant::now();
        if now.duration_since(self.tree_listed) >= PIDS_EVERY {
            self.tree = super::listing::tree(self.proc_root, self.root, PIDS_EVERY);
            self.tree_listed = now;
        }
        let live = &self.live;
        self.fds
            .read(self.proc_root, &self.tree, |inode| live.contains(&inode))
    }

    /// One sample of the dump `socks`, the tree's inodes read just before it (`before`) and,
    /// when `read_again`, again now: a connection that lives a few milliseconds (one per
    /// request to an upstream that closes each) may be in the dump and missing from one of
    /// the two reads. False while the tree has opened no connection in the window (sample
    /// less often).
    fn sample(&mut self, socks: &Sockets, before: BTreeMap<u64, i32>, read_again: bool) -> bool {
        let proc_root = self.proc_root;
        self.live = socks.inodes();
        let mut tree_inodes = before;
        if read_again {
            tree_inodes.extend(self.tree_inodes());
        }
        let mut seen: BTreeSet<SocketAddr> = BTreeSet::new();
        let mut frontier = vec![(1u32, tree_inodes.clone())];
        while let Some((depth, inodes)) = frontier.pop() {
            for (addr, conns) in socks.outgoing(&inodes).into_iter().take(MAX_HOPS) {
                if !seen.insert(addr) {
                    continue;
                }
                let Some(hop) = self.hop(addr, depth, &conns, socks, &tree_inodes) else {
                    continue;
                };
                let ends: Vec<Sock> = conns.iter().map(|c| c.1).collect();
                hop.add(socks.queues(addr, &ends));
                if hop.listed.elapsed() >= PIDS_EVERY {
                    if let Some(pid) = hop.record.pid {
                        hop.pids = super::listing::tree(proc_root, pid, PIDS_EVERY);
                    }
                    hop.listed = Instant::now();
                }
                hop.sample_threads(proc_root, socks);
                if !hop.record.in_tree && hop.record.depth < MAX_DEPTH && !hop.pids.is_empty() {
                    let next = inodes_of(proc_root, &hop.pids);
                    frontier.push((hop.record.depth + 1, next));
                }
            }
        }
        // A hop known from an earlier sample with no connection now still has its queue read.
        for (addr, hop) in &mut self.hops {
            if !seen.contains(addr) {
                hop.add(socks.queues(*addr, &[]));
            }
        }
        !self.hops.is_empty()
    }

    /// The hop at `addr`, found now if new (None for an address of this process, or with no
    /// holder found: a remote address is recorded once, with its connections only).
    fn hop(
        &mut self,
        addr: SocketAddr,
        depth: u32,
        conns: &[(i32, Sock)],
        socks: &Sockets,
        tree_inodes: &BTreeMap<u64, i32>,
    ) -> Option<&mut Hop> {
        if !self.hops.contains_key(&addr) {
            let (pid, listener) = self.holder(addr, socks, tree_inodes);
            if pid == Some(self.own_pid) {
                return None;
            }
            let (process, command) =
                pid.map_or((None, None), |p| comm_and_command(self.proc_root, p));
            let pids = pid.map_or_else(Vec::new, |p| {
                super::listing::tree(self.proc_root, p, PIDS_EVERY)
            });
            let in_tree = listener.is_some_and(|l| tree_inodes.contains_key(&l));
            let cpus = pid.and_then(|p| allowed_cpus(self.proc_root, p));
            let hop = Hop {
                record: NextHop {
                    depth,
                    from_pid: most_common_pid(conns),
                    addr: addr.to_string(),
                    pid,
                    process,
                    command,
                    in_tree,
                    cpus: cpus.as_ref().map(|c| c.len() as u64),
                    ..NextHop::default()
                },
                cpus_first: cpus.as_ref().and_then(|_| cpu_times(self.proc_root)),
                cpus: cpus.unwrap_or_default(),
                pids,
                listed: Instant::now(),
                first: pid
                    .and_then(|p| Some((Instant::now(), procfs::sample_tree(self.proc_root, p)?))),
                sum_connections: 0.0,
                sum_accept: 0.0,
                sum_unread: 0.0,
                service: (0.0, 0),
            };
            self.hops.insert(addr, hop);
        }
        self.hops.get_mut(&addr)
    }

    /// The process holding the listener of `addr` and the listener's inode: from the tree's
    /// own sockets, else from a scan of every process's (once per address).
    fn holder(
        &mut self,
        addr: SocketAddr,
        socks: &Sockets,
        tree_inodes: &BTreeMap<u64, i32>,
    ) -> (Option<i32>, Option<u64>) {
        let Some(l) = socks.listener(addr).filter(|l| l.inode != 0) else {
            return (None, None);
        };
        if self.unowned.contains(&addr) {
            return (None, Some(l.inode));
        }
        let found = tree_inodes.get(&l.inode).copied().or_else(|| {
            peers::owners(self.proc_root, &BTreeSet::from([l.inode]))
                .get(&l.inode)
                .copied()
        });
        if found.is_none() {
            self.unowned.insert(addr);
        }
        (
            found.map(|p| eldest_holder(self.proc_root, p, l.inode)),
            Some(l.inode),
        )
    }

    fn finish(self) -> Vec<NextHop> {
        let proc_root = self.proc_root;
        let mut out: Vec<NextHop> = self
            .hops
            .into_values()
            .map(|h| h.finish(proc_root))
            .collect();
        out.sort_by(|a, b| {
            a.depth
                .cmp(&b.depth)
                .then(b.connections_mean.total_cmp(&a.connections_mean))
        });
        out
    }
}

fn most_common_pid(conns: &[(i32, Sock)]) -> i32 {
    let mut n: BTreeMap<i32, usize> = BTreeMap::new();
    for (pid, _) in conns {
        *n.entry(*pid).or_insert(0) += 1;
    }
    n.into_iter().max_by_key(|&(_, k)| k).map_or(0, |(p, _)| p)
}

/// A thread following the server tree's connections until [`NextHopWatch::finish`].
#[derive(Debug)]
pub struct NextHopWatch {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<(Vec<NextHop>, f64)>,
}

impl NextHopWatch {
    /// Starts following the connections of the tree rooted at `root` (in this process's
    /// network namespace: a server in another one is not followed).
    /// Idle (past its first samples, no connection of the tree's own seen), it reads the
    /// sockets thread's dumps from `shared` instead of its own where that thread puts them.
    pub fn start(root: i32, shared: super::sockets::SharedDump) -> io::Result<NextHopWatch> {
        let mut sock = diag::open()?;
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("observe-next-hop".into())
            .spawn(move || {
                let mut follower = Follower::new(root);
                // Every link read once before the dumps begin (they are spaced by their cost).
                follower.tree_inodes();
                // A failed dump (interrupted, or sock_diag refused) is skipped; three in a row
                // end the sampling with what it has.
                let (mut failed, mut taken, mut found) = (0, 0, false);
                let started = Instant::now();
                let mut dumped_at = started;
                // Thousands of sockets make a sample cost milliseconds: spaced so that the
                // sampling stays within its budget.
                let mut dumps = super::Paced::new(SAMPLE_EVERY, BUDGET_SHARE);
                while failed < 3 {
                    let now = Instant::now();
                    let eager = taken < EAGER_SAMPLES && now < started + EAGER_FOR;
                    let idle = !found && !eager && shared.fed();
                    let pass = dumps.run(now, || {
                        if idle {
                            // Nothing newer than the last sample: nothing to read.
                            return Ok(shared.newer_than(dumped_at).map(|(at, all, inodes)| {
                                dumped_at = at;
                                // The sockets thread read the tree's inodes after its dump.
                                let socks = Sockets::new(all.to_vec());
                                follower.sample(&socks, (*inodes).clone(), false)
                            }));
                        }
                        dumped_at = Instant::now();
                        let before = follower.tree_inodes();
                        diag::dump_all(&sock)
                            .map(|all| Some(follower.sample(&Sockets::new(all), before, true)))
                    });
                    match pass {
                        Ok(None) => dumps.not_before(now + IDLE_EVERY),
                        Ok(Some(now_found)) => {
                            failed = 0;
                            taken += 1;
                            found = now_found;
                            if !found && !eager {
                                dumps.not_before(now + IDLE_EVERY);
                            }
                        }
                        Err(_) => {
                            failed += 1;
                            // The rest of an interrupted dump would open the next one.
                            match diag::open() {
                                Ok(fresh) => sock = fresh,
                                Err(_) => break,
                            }
                        }
                    }
                    if !matches!(
                        stopped.recv_timeout(dumps.wait()),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    ) {
                        break;
                    }
                }
                (follower.finish(), super::thread_cpu_s())
            })?;
        Ok(NextHopWatch { stop, handle })
    }

    /// Stops: every hop followed (nearest first, the most connected first), and the CPU the
    /// sampling used, in seconds.
    pub fn finish(self) -> (Vec<NextHop>, f64) {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
