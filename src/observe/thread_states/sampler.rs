//! The sampling thread of [`super`]: which threads it watches (the server's tree, the load
//! generator's), their counters at the window's ends, and the passes between them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{call, Role, Summary, Tally, Wait};
use super::{
    classify, fd_kind, parse_stat, parse_syscall, peers, plan, wait_files, Call, FdKind, WaitFiles,
    BUDGET_SHARE,
};
use crate::machine::procfs;
use crate::machine::threads::{merge_thread_name, TaskSample};
use crate::observe::listing;
use crate::record::observed::{ThreadStateGroup, ThreadStates};

/// How often the watched processes' threads are listed again, and every process's parent
/// read again (to find the trees' new processes: a listing costs one read while nothing on
/// the machine began or ended, `observe::listing`). As often as the sockets thread lists:
/// this sampler is the tree watch, and a process per connection may live less than a second.
const LIST_EVERY: Duration = Duration::from_millis(500);
/// How often the owners of the sockets waited on are looked for again, at most (every
/// process's fds).
const OWNERS_EVERY: Duration = Duration::from_secs(1);
/// Names of stairbench's own load-generator threads (before their `-N`).
const LOAD_THREADS: [&str; 3] = ["load", "kvd", "shm"];
/// Processes this one starts that are observers, not load: never counted as the client.
const OBSERVER_TOOLS: [&str; 2] = ["perf", "tc"];
/// A first guess of one thread read's CPU (stat and syscall), refined as passes are timed.
const COST_GUESS_S: f64 = 15e-6;
/// Share of this process's open-file limit (soft RLIMIT_NOFILE) the held files may take: the
/// rest stays for the load generator's connections.
const HELD_FD_SHARE: u64 = 8;
/// Files held per thread: stat, schedstat and, for the server's, status.
const HELD_PER_THREAD: u64 = 3;
/// The most threads whose files are held open, whatever the limit.
const HELD_MAX_THREADS: usize = 2_048;

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

/// What a window's sampling saw.
#[derive(Debug, Default)]
pub struct Watched {
    /// The server's thread states (None where there was no thread to watch).
    pub server: Option<ThreadStates>,
    /// The load generator's.
    pub client: Option<ThreadStates>,
    /// Each server thread at its last read, as the tree watch would have seen it.
    pub tasks: BTreeMap<(i32, i32), TaskSample>,
    /// The server's threads alive at the window's end, read then (None without a server):
    /// the tree's threads at the end, not read a second time.
    pub end_tasks: Option<BTreeMap<(i32, i32), TaskSample>>,
    /// Passes over the threads.
    pub passes: u64,
    /// The CPU the sampling used, in seconds.
    pub cpu_s: f64,
}

impl ThreadStateWatch {
    /// Starts watching now: every target thread's counters are read at once (the window's
    /// start), then sampled until `finish`.
    pub fn start(targets: Targets) -> std::io::Result<ThreadStateWatch> {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("observe-states".into())
            .spawn(move || {
                let cpu0 = crate::observe::thread_cpu_s();
                let mut w = Sampler::new(targets);
                // The window's first reads are a fixed cost, outside the sampling's budget.
                w.run(&stopped, crate::observe::thread_cpu_s());
                let mut seen = w.finish();
                seen.cpu_s = crate::observe::thread_cpu_s() - cpu0;
                Some(seen)
            })?;
        Ok(ThreadStateWatch { stop, handle })
    }

    /// Ends the window: what the sampling saw.
    pub fn finish(self) -> Watched {
        let _ = self.stop.send(());
        self.handle.join().ok().flatten().unwrap_or_default()
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
    /// Socket inodes held by the watched processes and the server's tree, by inode: their
    /// owners, read when a wait's peer is first seen (at most once a listing interval).
    fd_owners: BTreeMap<u64, i32>,
    fd_scanned: Option<Instant>,
    /// Every process's parent, and when it was read.
    parents: (Option<Instant>, BTreeMap<i32, i32>),
    /// The table was dumped in this pass (at most once a pass).
    dumped: bool,
    /// The first socket registered in each (pid, epoll fd), for the load generator's waits.
    epoll_socket: BTreeMap<(i32, u64), u64>,
    delayacct: bool,
    /// Threads whose stat and schedstat are held open, and how many may be.
    held: BTreeMap<(i32, i32), Held>,
    held_max: usize,
    /// Each server thread as the tree watch would read it, at its last read: a thread that
    /// ends inside the window counts to there (the watch does not run beside this sampler).
    last_tasks: BTreeMap<(i32, i32), TaskSample>,
}

/// A thread's files as read once.
struct Texts {
    stat: String,
    schedstat: Option<String>,
    status: Option<String>,
}

/// A thread's stat and schedstat, opened once and read again from their start (`pread` at
/// offset 0 makes a /proc seq_file generate its text afresh). On this 2-CPU VM that costs
/// 5-6 µs a thread against 18-22 µs to open, read and close both (a C loop over 200 and
/// 2,000 threads, 2026-11-28). A held file of a thread that has ended fails to read (ESRCH):
/// it never reads another thread that took its id.
#[derive(Debug)]
struct Held {
    stat: File,
    schedstat: File,
    /// A server thread's status (its context switches).
    status: Option<File>,
}

impl Held {
    /// A thread's files under `dir` opened (status when `status`); None without a stat or a
    /// schedstat to hold.
    fn open(dir: &Path, status: bool) -> Option<Held> {
        Some(Held {
            stat: File::open(dir.join("stat")).ok()?,
            schedstat: File::open(dir.join("schedstat")).ok()?,
            status: status
                .then(|| File::open(dir.join("status")).ok())
                .flatten(),
        })
    }

    /// Their texts now; None when any fails to read (the thread has ended).
    fn read(&self) -> Option<Texts> {
        let status = match &self.status {
            Some(f) => Some(read_held(f)?),
            None => None,
        };
        Some(Texts {
            stat: read_held(&self.stat)?,
            schedstat: Some(read_held(&self.schedstat)?),
            status,
        })
    }
}

/// How many threads' files may be held open under a soft open-file limit of `soft_nofile`:
/// [`HELD_PER_THREAD`] files each within [`HELD_FD_SHARE`] of the limit, and at most
/// [`HELD_MAX_THREADS`].
pub(super) fn held_threads(soft_nofile: u64) -> usize {
    let threads = soft_nofile / HELD_FD_SHARE / HELD_PER_THREAD;
    (threads as usize).min(HELD_MAX_THREADS)
}

fn soft_nofile() -> u64 {
    nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .map_or(1024, |(soft, _)| soft)
}

/// The text of a /proc file held open, read from its start. A file of one record (stat,
/// schedstat) comes whole in one read shorter than the buffer: no second read to find its end.
pub(super) fn read_held(file: &File) -> Option<String> {
    let mut buf = vec![0u8; 1024];
    let mut n = 0;
    loop {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
        if n < buf.len() {
            break;
        }
        buf.resize(2 * n, 0);
    }
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

impl Sampler {
    fn new(targets: Targets) -> Sampler {
        let mut s = Sampler::bare(targets, PathBuf::from("/proc"));
        s.list();
        s.read_all();
        for t in s.tasks.values_mut() {
            t.first = t.last;
            t.span_s.0 = t.span_s.1;
        }
        s
    }

    /// A sampler of `proc_root` that has listed and read nothing yet.
    fn bare(targets: Targets, proc_root: PathBuf) -> Sampler {
        Sampler {
            targets,
            proc_root,
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
            parents: (None, BTreeMap::new()),
            fd_owners: BTreeMap::new(),
            fd_scanned: None,
            dumped: false,
            epoll_socket: BTreeMap::new(),
            delayacct: crate::observe::disk::delayacct_note().is_none(),
            held: BTreeMap::new(),
            held_max: held_threads(soft_nofile()),
            last_tasks: BTreeMap::new(),
        }
    }

    /// Refreshes the threads to watch; a thread seen for the first time counts from zero
    /// (born in the window) unless seen at the start.
    fn list(&mut self) {
        let mut now = Vec::new();
        // The first listing fresh (a process started just before is sampled), later ones
        // shared with the other observers'.
        let max_age = match self.parents.0 {
            None => Some(Duration::ZERO),
            Some(at) => (at.elapsed() >= LIST_EVERY).then_some(LIST_EVERY),
        };
        if let Some(max_age) = max_age {
            self.parents = (
                Some(Instant::now()),
                (*listing::parents(&self.proc_root, max_age)).clone(),
            );
        }
        let parents = std::mem::take(&mut self.parents.1);
        if let Some(root) = self.targets.server {
            for pid in procfs::descendants(root, &parents) {
                self.add_tasks(pid, Role::Server, &mut now, None);
            }
        }
        if self.targets.client {
            self.list_client(&parents, self.targets.server.unwrap_or(0), &mut now);
        }
        self.parents.1 = parents;
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
        let listed: BTreeSet<(i32, i32)> = self.order.iter().copied().collect();
        self.held.retain(|k, _| listed.contains(k));
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
    /// The tasks read, as (pid, tid).
    fn read_all(&mut self) -> BTreeSet<(i32, i32)> {
        let keys: Vec<_> = self.tasks.keys().copied().collect();
        keys.into_iter()
            .filter(|&(pid, tid)| self.read(pid, tid, false))
            .collect()
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
        let role = self.tasks.get(&(pid, tid)).and_then(|t| t.role);
        let server = role == Some(Role::Server);
        let Some(texts) = self.counters_text(pid, tid, &dir, server) else {
            return false;
        };
        let stat = &texts.stat;
        let Some((state, mut c)) = parse_stat(stat) else {
            return false;
        };
        let sched = (texts.schedstat.as_deref()).and_then(crate::machine::threads::parse_schedstat);
        if let Some((run, wait)) = sched {
            (c.run_ns, c.wait_ns) = (run, wait);
        }
        // The name stat holds between its first '(' and last ')' (no read of `comm`).
        let stat_name = || {
            (stat.find('(').zip(stat.rfind(')')))
                .and_then(|(open, close)| stat.get(open + 1..close))
                .map(str::to_string)
        };
        let name = if self
            .tasks
            .get(&(pid, tid))
            .is_some_and(|t| t.name.is_empty())
        {
            stat_name()
        } else {
            None
        };
        let switches = texts.status.as_deref().and_then(procfs::parse_status_ctxt);
        if let (true, Some((voluntary_cs, involuntary_cs))) = (server, switches) {
            let task = TaskSample {
                name: stat_name().unwrap_or_default(),
                cpu_ticks: c.utime + c.stime,
                run_ns: sched.map(|s| s.0),
                wait_ns: sched.map(|s| s.1),
                voluntary_cs,
                involuntary_cs,
                blkio_ticks: Some(c.blkio_ticks),
            };
            self.last_tasks.insert((pid, tid), task);
        }
        // stat first: syscall and wchan only for a thread it found sleeping.
        let files = wait_files(state);
        let wait = match role {
            Some(role) if sample && files.syscall => self.wait_of(pid, role, &dir, state, files),
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

    /// A thread's stat, schedstat (None when the kernel has none) and, when `status`, status
    /// texts: from its held files, else opened from `dir` and held while fewer than
    /// `held_max` are. None when the thread is gone.
    fn counters_text(&mut self, pid: i32, tid: i32, dir: &Path, status: bool) -> Option<Texts> {
        if let Some(h) = self.held.get(&(pid, tid)) {
            let texts = h.read();
            if texts.is_none() {
                self.held.remove(&(pid, tid));
            }
            return texts;
        }
        if self.held.len() < self.held_max {
            if let Some(h) = Held::open(dir, status) {
                let texts = h.read();
                if texts.is_some() {
                    self.held.insert((pid, tid), h);
                }
                return texts;
            }
        }
        let read_now = |name: &str| read(&dir.join(name));
        Some(Texts {
            stat: read_now("stat")?,
            schedstat: read_now("schedstat"),
            status: status.then(|| read_now("status")).flatten(),
        })
    }

    /// What a sleeping thread (its /proc directory `dir`) waits on, from the `files` its
    /// state calls for.
    fn wait_of(
        &mut self,
        pid: i32,
        role: Role,
        dir: &Path,
        state: u8,
        files: WaitFiles,
    ) -> Option<Wait> {
        let (nr, arg0) = read(&dir.join("syscall")).and_then(|t| parse_syscall(&t))?;
        let needs_fd = nr.is_some_and(|n| {
            matches!(call(n), Call::Read | Call::Write | Call::Sync)
                || (role == Role::Client && call(n) == Call::Epoll)
        });
        let fd = needs_fd
            .then(|| self.fd(pid, arg0, nr.map(call) == Some(Call::Epoll)))
            .flatten();
        let wchan = if files.wchan {
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
            let peer = self.table.peer_inode(i);
            let due = self.fd_scanned.is_none_or(|t| t.elapsed() >= OWNERS_EVERY);
            if peer.is_some_and(|p| !self.fd_owners.contains_key(&p)) && due {
                self.scan_owners();
            }
        }
        Some(w)
    }

    /// The socket inodes the server's tree and the watched processes hold.
    fn scan_owners(&mut self) {
        self.fd_scanned = Some(Instant::now());
        let mut pids: BTreeSet<i32> = self.order.iter().map(|&(p, _)| p).collect();
        if let Some(root) = self.targets.server {
            pids.extend(procfs::descendants(root, &self.parents.1));
        }
        for pid in pids {
            peers::socket_inodes_of(&self.proc_root, pid, &mut self.fd_owners);
        }
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

    /// Passes until told to stop. Besides the plan's spacing, a pass is skipped while this
    /// thread's CPU since `cpu0` (listing and table dumps included) is over the budget of the
    /// time elapsed.
    fn run(&mut self, stopped: &mpsc::Receiver<()>, cpu0: f64) {
        loop {
            if self.listed.elapsed() >= LIST_EVERY {
                self.list();
            }
            let p = plan(self.order.len(), self.cost_s);
            let spent_s = crate::observe::thread_cpu_s() - cpu0;
            let allowed_s = BUDGET_SHARE * self.started.elapsed().as_secs_f64();
            let read = if spent_s <= allowed_s {
                self.pass_timed(p.per_pass)
            } else {
                0
            };
            if read > 0 {
                self.passes += 1;
            }
            if !matches!(
                stopped.recv_timeout(p.every),
                Err(mpsc::RecvTimeoutError::Timeout)
            ) {
                return;
            }
        }
    }

    /// A pass of `n` threads, its CPU per thread read folded into the plan's estimate.
    fn pass_timed(&mut self, n: usize) -> usize {
        let cpu0 = crate::observe::thread_cpu_s();
        let read = self.pass(n);
        if read > 0 {
            let per = (crate::observe::thread_cpu_s() - cpu0) / read as f64;
            // A moving mean: one slow pass (a table dump) does not halve the rate.
            self.cost_s = 0.8 * self.cost_s + 0.2 * per;
        }
        read
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
    fn finish(mut self) -> Watched {
        // Listed again first: the end's read is the tree's threads at the window's end.
        self.list();
        let alive = self.read_all();
        let end_tasks = self.targets.server.map(|_| {
            (self.last_tasks.iter())
                .filter(|(task, _)| alive.contains(task))
                .map(|(task, t)| (*task, t.clone()))
                .collect()
        });
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
        // Owners seen during the window first (a connection may close before its end).
        let mut owners: BTreeMap<u64, i32> = (self.fd_owners.iter())
            .filter(|(i, _)| wanted.contains(i))
            .map(|(&i, &p)| (i, p))
            .collect();
        let missing: BTreeSet<u64> = wanted
            .into_iter()
            .filter(|i| !owners.contains_key(i))
            .collect();
        if !missing.is_empty() {
            owners.extend(peers::owners(&self.proc_root, &missing));
        }
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
        Watched {
            server: side(Role::Server, &mut groups),
            client: side(Role::Client, &mut groups),
            end_tasks,
            tasks: self.last_tasks,
            passes: self.passes,
            cpu_s: 0.0,
        }
    }
}

/// Samples thread `tid` of `pid` under `proc_root` once, as a server thread: the waits found.
#[cfg(test)]
pub(super) fn sample_once(proc_root: &Path, pid: i32, tid: i32) -> Option<BTreeMap<Wait, u64>> {
    let targets = Targets {
        server: None,
        client: false,
    };
    let mut s = Sampler::bare(targets, proc_root.to_path_buf());
    let t = Tally {
        pid,
        role: Some(Role::Server),
        ..Tally::default()
    };
    s.tasks.insert((pid, tid), t);
    s.read(pid, tid, true).then_some(())?;
    Some(s.tasks.remove(&(pid, tid))?.waits)
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
