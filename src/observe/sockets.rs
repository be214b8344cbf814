//! Requests waiting inside the server (the `concurrency` limit's evidence): the server's TCP
//! sockets sampled every [`SAMPLE_EVERY`] (or as [`BUDGET_SHARE`] allows) during the window.
//! A server that holds a fixed number of requests at once (a worker pool, a connection cap)
//! leaves the rest unread in its connections' receive queues and its listen sockets' accept
//! queues while its CPUs idle.
//!
//! The sockets come from sock_diag over netlink (only listening and established TCP sockets:
//! a server closing a connection per request leaves thousands in TIME_WAIT that
//! /proc/net/tcp would list and cost 10 ms of CPU a read), one netlink socket opened in each
//! network namespace of the tree's processes; /proc/PID/net/tcp{,6} when netlink is refused.
//! They are matched to the socket inodes the tree's processes hold open (/proc/PID/fd). A
//! connection the kernel completed but no process accepted has no inode yet: it counts in
//! its listen socket's accept queue (the receive queue of a listening socket).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::fds::SocketFds;
use crate::record::use_io::SocketQueues;

/// How often the sockets and the tasks' block-I/O delay are sampled during a window, at most
/// (see [`BUDGET_SHARE`]).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// The share of one CPU the socket dumps may take: a dump waits longer after one that cost
/// more than this share of [`SAMPLE_EVERY`] (at a thousand connections a dump of both sides
/// and a read of the tree's fds cost about 5 ms: a dump about every second).
pub const BUDGET_SHARE: f64 = 0.005;
/// The share of one CPU the block-I/O delay reads may take. They are for the tasks that end
/// inside the window (the window's ends read the others), so the budget scales them: a
/// process per connection (PostgreSQL's backends, a dozen tasks at 0.2-0.3 ms a pass) is read
/// every 20-30 ms, as a backend may live for less than a spaced dump's interval; two hundred
/// threads of one process (4 ms a pass), whose threads seldom end, about every 0.4 s. At
/// 0.003 (2026-11-30) PostgreSQL's backends, born and ended inside a 2 s window, went unread
/// long enough that the throttled-disk case read 0.01 tasks waiting for block I/O, not disk.
pub const BLKIO_BUDGET_SHARE: f64 = 0.01;
/// How often the tree's process list is refreshed (listing every process costs more than
/// reading a few fd tables). Listed afresh each time, not taken from another observer's
/// listing: a process per connection may live for less than twice this, and its block-I/O
/// delay would go unread (the other observers share this thread's listings). Afresh costs one
/// read of /proc/loadavg while no task began or ended (`listing`).
const PIDS_EVERY: Duration = Duration::from_millis(500);

/// TCP state of a listening socket in /proc/net/tcp.
const LISTEN: u8 = 0x0A;
/// TCP state of an established connection.
const ESTABLISHED: u8 = 0x01;

/// One line of /proc/net/tcp{,6}.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpLine {
    /// The TCP state (0x0A listening, 0x01 established, ...).
    pub state: u8,
    /// Send queue: unsent and unacknowledged bytes; for a listening socket, its backlog limit
    /// from sock_diag (/proc/net/tcp gives 0 there).
    pub tx_queue: u64,
    /// Receive queue: unread bytes; for a listening socket, its accept queue's length.
    pub rx_queue: u64,
    /// The socket's inode (0 for a connection no process has accepted).
    pub inode: u64,
}

/// Parses /proc/net/tcp or tcp6 (the header line is skipped).
pub fn parse_tcp(text: &str) -> Vec<TcpLine> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (tx, rx) = f.get(4)?.split_once(':')?;
            Some(TcpLine {
                state: u8::from_str_radix(f.get(3)?, 16).ok()?,
                tx_queue: u64::from_str_radix(tx, 16).ok()?,
                rx_queue: u64::from_str_radix(rx, 16).ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// One sample of the server's sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Established connections the tree holds.
    pub connections: u64,
    /// Of those, connections with unread bytes.
    pub unread_connections: u64,
    /// Unread bytes over them.
    pub unread_bytes: u64,
    /// Accept queues of the tree's listen sockets, summed.
    pub accept_queue: u64,
    /// The largest listen backlog.
    pub backlog: Option<u64>,
}

/// The tree's sockets among `lines`.
pub fn sample(lines: &[TcpLine], inodes: &BTreeSet<u64>) -> Sample {
    let mut s = Sample::default();
    for l in lines
        .iter()
        .filter(|l| l.inode != 0 && inodes.contains(&l.inode))
    {
        match l.state {
            LISTEN => {
                s.accept_queue += l.rx_queue;
                if l.tx_queue > 0 {
                    s.backlog = s.backlog.max(Some(l.tx_queue));
                }
            }
            ESTABLISHED => {
                s.connections += 1;
                s.unread_bytes += l.rx_queue;
                s.unread_connections += u64::from(l.rx_queue > 0);
            }
            _ => {}
        }
    }
    s
}

/// Running sums of a window's samples: a held step of 30 minutes takes 36,000 samples, and
/// keeping them all grew the run's memory with its length.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    samples: u64,
    connections: u64,
    unread_connections: u64,
    unread_bytes: u64,
    accept_queue: u64,
    accept_queue_max: u64,
    backlog: Option<u64>,
    /// When the first and the last samples were taken.
    span: Option<(Instant, Instant)>,
}

impl Tally {
    /// Adds one sample, taken at `at`.
    pub fn add(&mut self, s: &Sample, at: Instant) {
        self.samples += 1;
        self.span = Some((self.span.map_or(at, |(first, _)| first), at));
        self.connections += s.connections;
        self.unread_connections += s.unread_connections;
        self.unread_bytes += s.unread_bytes;
        self.accept_queue += s.accept_queue;
        self.accept_queue_max = self.accept_queue_max.max(s.accept_queue);
        self.backlog = self.backlog.max(s.backlog);
    }

    /// The mean time between two samples ([`SAMPLE_EVERY`] with fewer than two).
    fn mean_spacing(&self) -> Duration {
        match self.span {
            Some((first, last)) if self.samples > 1 => (last - first) / (self.samples - 1) as u32,
            _ => SAMPLE_EVERY,
        }
    }

    /// The window's figures (None without a sample).
    pub fn summary(&self) -> Option<SocketQueues> {
        let n = self.samples as f64;
        let mean = |sum: u64| sum as f64 / n;
        (self.samples > 0).then(|| {
            let unread = mean(self.unread_connections);
            let accept = mean(self.accept_queue);
            SocketQueues {
                samples: self.samples,
                sample_every_ms: self.mean_spacing().as_millis() as u64,
                connections_mean: mean(self.connections),
                unread_connections_mean: unread,
                unread_bytes_mean: mean(self.unread_bytes),
                accept_queue_mean: accept,
                accept_queue_max: self.accept_queue_max,
                accept_backlog: self.backlog,
                waiting_mean: unread + accept,
            }
        })
    }
}

/// A thread sampling a tree's sockets until [`SocketWatch::finish`]; it also keeps each
/// task's block-I/O delay at its last sample (the disk's evidence), since a process per
/// connection (PostgreSQL's backends) may begin and end inside the window.
#[derive(Debug)]
pub struct SocketWatch {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<Watched>,
}

/// Each task's block-I/O delay in ticks at its first and last samples, by (pid, tid).
pub type BlkioSeen = std::collections::BTreeMap<(i32, i32), (u64, u64)>;

/// What the sampling thread saw.
#[derive(Debug, Default)]
struct Watched {
    samples: Tally,
    blkio_ticks: BlkioSeen,
    cpu_s: f64,
}

impl SocketWatch {
    /// Starts sampling the sockets of the tree rooted at `root` (its dumps of this process's
    /// namespace put in `shared`), and its tasks' block-I/O delay.
    pub fn start(root: i32, shared: SharedDump) -> std::io::Result<SocketWatch> {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("observe-sockets".into())
            .spawn(move || {
                let proc_root = Path::new("/proc");
                let mut seen = Watched::default();
                let delayacct = super::disk::delayacct_note().is_none();
                let mut pids = super::listing::tree(proc_root, root, Duration::ZERO);
                let source = Source::open(proc_root, &pids);
                if matches!(&source, Source::Diag(socks) if socks.iter().any(|s| s.1)) {
                    shared.feed();
                }
                // Every link read once before the passes begin: a pass is spaced by what it
                // cost, and the first full read would put the second off by seconds.
                let mut fds = SocketFds::new();
                fds.read(proc_root, &pids, |_| false);
                let mut listed = Instant::now();
                let mut dumps = super::Paced::new(SAMPLE_EVERY, BUDGET_SHARE);
                let mut blkio = super::Paced::new(SAMPLE_EVERY, BLKIO_BUDGET_SHARE);
                loop {
                    if listed.elapsed() >= PIDS_EVERY {
                        pids = super::listing::tree(proc_root, root, Duration::ZERO);
                        listed = Instant::now();
                    }
                    let now = Instant::now();
                    if dumps.due(now) {
                        match dumps.run(now, || {
                            sample_now(proc_root, root, &pids, &source, &mut fds, &shared)
                        }) {
                            Some(s) => seen.samples.add(&s, now),
                            None => break,
                        }
                    } else if !proc_root.join(root.to_string()).exists() {
                        break;
                    }
                    if delayacct && blkio.due(now) {
                        blkio.run(now, || blkio_sample(&pids, &mut seen.blkio_ticks));
                    }
                    // Asleep until the next pass is due (a dump every second or so at a
                    // thousand connections), not woken every 50 ms to find nothing due.
                    let wait = if delayacct {
                        dumps.wait().min(blkio.wait())
                    } else {
                        dumps.wait()
                    };
                    if !matches!(
                        stopped.recv_timeout(wait.max(Duration::from_millis(1))),
                        Err(mpsc::RecvTimeoutError::Timeout)
                    ) {
                        break;
                    }
                }
                seen.cpu_s = super::thread_cpu_s();
                seen
            })?;
        Ok(SocketWatch { stop, handle })
    }

    /// Stops sampling: the window's figures (None when no sample was taken), each task's
    /// block-I/O delay at its first and last samples, and the CPU the sampling used, in seconds.
    pub fn finish(self) -> (Option<SocketQueues>, BlkioSeen, f64) {
        let _ = self.stop.send(());
        let seen = self.handle.join().unwrap_or_default();
        (seen.samples.summary(), seen.blkio_ticks, seen.cpu_s)
    }
}

/// Each task's block-I/O delay now, kept with the first seen by (pid, tid).
fn blkio_sample(pids: &[i32], seen: &mut BlkioSeen) {
    let mut now = std::collections::BTreeMap::new();
    for &pid in pids {
        super::disk::blkio_of(pid, &mut now);
    }
    for (task, t) in now {
        seen.entry(task).or_insert((t, t)).1 = t;
    }
}

/// Where the sockets are read: netlink sockets opened in the tree's namespaces (each with
/// whether it is this process's own), else /proc.
enum Source {
    Diag(Vec<(std::os::fd::OwnedFd, bool)>),
    Proc,
}

/// A dump of this process's network namespace (listening, established and connecting TCP
/// sockets) and the tree's socket inodes read just after it, passed from the sockets thread
/// to the next hop's: while the server has opened no connection of its own, the next hop
/// reads these instead of dumping every socket again (at a thousand connections, two dumps
/// a second cost it 0.6% of a CPU).
#[derive(Debug, Clone, Default)]
pub struct SharedDump(Arc<Mutex<SharedState>>);

#[derive(Debug, Default)]
struct SharedState {
    /// The sockets thread dumps this namespace and puts its dumps here.
    fed: bool,
    latest: Option<Dumped>,
}

/// A dump shared: when taken, its sockets, and the tree's inodes then (inode → pid).
pub type Dumped = (Instant, Arc<Vec<diag::Sock>>, Arc<BTreeMap<u64, i32>>);

impl SharedDump {
    fn state(&self) -> std::sync::MutexGuard<'_, SharedState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Says dumps will come (the sockets thread reads this namespace by sock_diag).
    fn feed(&self) {
        self.state().fed = true;
    }

    fn put(&self, dumped: Dumped) {
        self.state().latest = Some(dumped);
    }

    /// Whether the sockets thread puts its dumps here.
    pub fn fed(&self) -> bool {
        self.state().fed
    }

    /// The latest dump, when it was taken after `after`.
    pub fn newer_than(&self, after: Instant) -> Option<Dumped> {
        self.state()
            .latest
            .as_ref()
            .filter(|(at, ..)| *at > after)
            .cloned()
    }
}

impl Source {
    /// Netlink sockets in the network namespace of each of `pids` (entered with setns on this
    /// thread, which then returns to its own); /proc when any of it fails (no permission to
    /// enter another namespace, no sock_diag).
    fn open(proc_root: &Path, pids: &[i32]) -> Source {
        let ns_of =
            |pid: i32| std::fs::read_link(proc_root.join(pid.to_string()).join("ns/net")).ok();
        let own = std::fs::read_link("/proc/thread-self/ns/net").ok();
        let mut seen = BTreeSet::new();
        let mut socks = Vec::new();
        for &pid in pids {
            let ns = ns_of(pid);
            if ns.is_none() || !seen.insert(ns.clone()) {
                continue;
            }
            let sock = if ns == own {
                diag::open()
            } else {
                diag::open_in(&proc_root.join(pid.to_string()).join("ns/net"))
            };
            match sock {
                Ok(s) => socks.push((s, ns == own)),
                Err(_) => return Source::Proc,
            }
        }
        if socks.is_empty() {
            Source::Proc
        } else {
            Source::Diag(socks)
        }
    }
}

/// One sample of the tree's sockets: the TCP tables first, then the inodes the tree holds
/// (`fds`: a link is read again only where the tables no longer list its socket); None once
/// the root has gone.
fn sample_now(
    proc_root: &Path,
    root: i32,
    pids: &[i32],
    source: &Source,
    fds: &mut SocketFds,
    shared: &SharedDump,
) -> Option<Sample> {
    if !proc_root.join(root.to_string()).exists() {
        return None;
    }
    let at = Instant::now();
    let (lines, own) = match source {
        Source::Diag(socks) => diag_lines(socks),
        Source::Proc => None,
    }
    .or_else(|| Some((proc_lines(proc_root, root, pids)?, None)))?;
    let live: BTreeSet<u64> = lines.iter().map(|l| l.inode).collect();
    let held = fds.read(proc_root, pids, |inode| live.contains(&inode));
    let inodes: BTreeSet<u64> = held.keys().copied().collect();
    if let Some(own) = own {
        shared.put((at, Arc::new(own), Arc::new(held)));
    }
    Some(sample(&lines, &inodes))
}

/// The listening and established sockets dumped, and every socket of this process's own
/// namespace when it was dumped.
type DiagLines = (Vec<TcpLine>, Option<Vec<diag::Sock>>);

/// The listening and established sockets of each netlink socket's namespace, and every
/// socket of this process's own namespace when it is one of them (for the next hop). None
/// when a dump fails.
fn diag_lines(socks: &[(std::os::fd::OwnedFd, bool)]) -> Option<DiagLines> {
    let mut lines = Vec::new();
    let mut own_socks = None;
    for (s, own) in socks {
        if *own {
            let all = diag::dump_all(s).ok()?;
            let kept = all
                .iter()
                .filter(|s| [LISTEN, ESTABLISHED].contains(&s.state));
            lines.extend(kept.map(diag::Sock::line));
            own_socks = Some(all);
            continue;
        }
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            diag::dump(s, family, &mut lines).ok()?;
        }
    }
    Some((lines, own_socks))
}

/// The TCP tables in /proc of every network namespace the tree's processes are in, read once
/// each (None when the root's could not be read).
fn proc_lines(proc_root: &Path, root: i32, pids: &[i32]) -> Option<Vec<TcpLine>> {
    let mut namespaces = BTreeSet::new();
    let mut lines = Vec::new();
    let mut any = false;
    for &pid in pids {
        let ns = std::fs::read_link(proc_root.join(pid.to_string()).join("ns/net")).ok();
        if !namespaces.insert(ns) {
            continue;
        }
        let net = proc_root.join(pid.to_string()).join("net");
        for file in ["tcp", "tcp6"] {
            if let Ok(text) = std::fs::read_to_string(net.join(file)) {
                any |= pid == root;
                lines.extend(parse_tcp(&text));
            }
        }
    }
    any.then_some(lines)
}

/// sock_diag (INET_DIAG) over netlink: the listening and established TCP sockets of one
/// network namespace, with their queues and inodes.
pub mod diag {
    use std::io;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::path::Path;

    use super::{TcpLine, ESTABLISHED, LISTEN};

    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLMSG_DONE: u16 = 3;
    /// struct nlmsghdr.
    const HDR: usize = 16;
    /// struct inet_diag_req_v2.
    const REQ: usize = 56;
    /// struct inet_diag_msg.
    const MSG: usize = 72;

    /// A netlink sock_diag socket in this thread's network namespace.
    pub fn open() -> io::Result<OwnedFd> {
        // SAFETY: plain socket(2); the descriptor is owned at once.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a new descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// A sock_diag socket in the network namespace `ns` (/proc/PID/ns/net): this thread enters
    /// it, opens the socket (which stays in it) and returns to its own namespace.
    pub fn open_in(ns: &Path) -> io::Result<OwnedFd> {
        let own = std::fs::File::open("/proc/thread-self/ns/net")?;
        let theirs = std::fs::File::open(ns)?;
        // SAFETY: setns(2) on this thread with descriptors we hold open.
        if unsafe { libc::setns(theirs.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = open();
        // SAFETY: as above, back to the namespace this thread started in.
        if unsafe { libc::setns(own.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        sock
    }

    /// Appends the listening and established TCP sockets of `family` to `out`.
    pub fn dump(sock: &OwnedFd, family: u8, out: &mut Vec<TcpLine>) -> io::Result<()> {
        let states = (1 << ESTABLISHED) | (1 << LISTEN);
        dump_each(sock, family, states, |msg| out.push(parse_msg(msg).line()))
    }

    /// Every established, connecting and listening TCP socket of `sock`'s network namespace.
    pub fn dump_all(sock: &OwnedFd) -> io::Result<Vec<Sock>> {
        const SYN_SENT: u8 = 2;
        let states: u32 = (1 << ESTABLISHED) | (1 << SYN_SENT) | (1 << LISTEN);
        let mut out = Vec::new();
        for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
            dump_each(sock, family, states, |msg| out.push(parse_msg(msg)))?;
        }
        Ok(out)
    }

    /// One TCP socket of the machine, as sock_diag gives it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Sock {
        /// Its TCP state (1 established, 2 connecting, 10 listening).
        pub state: u8,
        /// Its own address.
        pub local: SocketAddr,
        /// The other end's (unspecified for a listener).
        pub remote: SocketAddr,
        /// Unread bytes; for a listener, its accept queue.
        pub rx: u64,
        /// Unsent bytes; for a listener, its backlog.
        pub tx: u64,
        /// Its inode (0 for a connection no process has accepted yet).
        pub inode: u64,
    }

    impl Sock {
        /// Its state, queues and inode, as a /proc/net/tcp line gives them.
        pub fn line(&self) -> TcpLine {
            TcpLine {
                state: self.state,
                rx_queue: self.rx,
                tx_queue: self.tx,
                inode: self.inode,
            }
        }
    }

    /// One `inet_diag_msg` (at least [`MSG`] bytes): the one decoder of the kernel's record.
    pub fn parse_msg(msg: &[u8]) -> Sock {
        let port = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
        Sock {
            state: msg[1],
            local: SocketAddr::new(ip(msg[0], &msg[8..24]), port(4)),
            remote: SocketAddr::new(ip(msg[0], &msg[24..40]), port(6)),
            rx: u64::from(u32_at(msg, 56)),
            tx: u64::from(u32_at(msg, 60)),
            inode: u64::from(u32_at(msg, 68)),
        }
    }

    /// An address of `family` from sock_diag's 16 bytes; an IPv4-mapped IPv6 address as IPv4,
    /// so both ends of a connection compare equal.
    fn ip(family: u8, b: &[u8]) -> IpAddr {
        if family == libc::AF_INET as u8 {
            return IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
        }
        let mut a = [0u8; 16];
        a.copy_from_slice(&b[..16]);
        let v6 = Ipv6Addr::from(a);
        v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
    }

    /// Dumps the TCP sockets of `family` whose state bit is set in `states`, calling `each`
    /// with every `struct inet_diag_msg` (at least [`MSG`] bytes) the kernel sends.
    pub fn dump_each(
        sock: &OwnedFd,
        family: u8,
        states: u32,
        mut each: impl FnMut(&[u8]),
    ) -> io::Result<()> {
        let mut req = [0u8; HDR + REQ];
        req[0..4].copy_from_slice(&((HDR + REQ) as u32).to_ne_bytes());
        req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        req[6..8].copy_from_slice(&flags.to_ne_bytes());
        req[HDR] = family;
        req[HDR + 1] = libc::IPPROTO_TCP as u8;
        req[HDR + 4..HDR + 8].copy_from_slice(&states.to_ne_bytes());
        // SAFETY: sockaddr_nl is plain data; zero is the kernel's address.
        let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        kernel.nl_family = libc::AF_NETLINK as u16;
        // SAFETY: sendto(2) with a buffer and an address that outlive the call.
        let sent = unsafe {
            libc::sendto(
                sock.as_raw_fd(),
                req.as_ptr().cast(),
                req.len(),
                0,
                std::ptr::addr_of!(kernel).cast(),
                std::mem::size_of::<libc::sockaddr_nl>() as u32,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: recv(2) into a buffer we own, at most its length.
            let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if walk(&buf[..n as usize], &mut each)? {
                return Ok(());
            }
        }
    }

    /// A native-endian u32 at byte `i`.
    pub fn u32_at(b: &[u8], i: usize) -> u32 {
        u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
    }

    /// Walks one datagram of a dump, calling `each` with every `inet_diag_msg`; true at the
    /// dump's end.
    pub fn walk(mut buf: &[u8], each: &mut impl FnMut(&[u8])) -> io::Result<bool> {
        while buf.len() >= HDR {
            let len = u32_at(buf, 0) as usize;
            let kind = u16::from_ne_bytes([buf[4], buf[5]]);
            if len < HDR || len > buf.len() {
                return Err(io::Error::other("sock_diag: a truncated message"));
            }
            match kind {
                NLMSG_DONE => return Ok(true),
                NLMSG_ERROR => {
                    return Err(io::Error::other("sock_diag: the kernel refused the dump"))
                }
                _ => {}
            }
            let msg = &buf[HDR..len];
            if msg.len() >= MSG {
                each(msg);
            }
            buf = &buf[((len + 3) & !3).min(buf.len())..];
        }
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000800:0000000C 00:00000000 00000000     0        0 100 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:A000 01 00000000:0000004E 00:00000000 00000000     0        0 101 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:1F90 0100007F:A001 01 00000000:00000000 00:00000000 00000000     0        0 102 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:A002 01 00000000:0000004E 00:00000000 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1
   4: 0100007F:A000 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 900 1 0000000000000000 20 4 30 10 -1
";

    #[test]
    fn the_trees_sockets_give_unread_connections_and_the_accept_queue() {
        let lines = parse_tcp(TCP);
        assert_eq!(lines.len(), 5);
        let inodes = BTreeSet::from([100, 101, 102]);
        let s = sample(&lines, &inodes);
        // The client's end (900) and the not-yet-accepted connection (inode 0) are not the
        // tree's: the latter counts in the listen socket's accept queue (12).
        assert_eq!(s.connections, 2);
        assert_eq!(s.unread_connections, 1);
        assert_eq!(s.unread_bytes, 0x4E);
        assert_eq!(s.accept_queue, 12);
        assert_eq!(s.backlog, Some(0x800));
        let mut tally = Tally::default();
        assert!(tally.summary().is_none());
        let t0 = Instant::now();
        tally.add(&s, t0);
        tally.add(&Sample::default(), t0 + Duration::from_millis(400));
        let q = tally.summary().unwrap();
        assert_eq!(q.samples, 2);
        assert_eq!(q.sample_every_ms, 400);
        assert_eq!(q.waiting_mean, 6.5);
        assert_eq!(q.accept_queue_max, 12);
        assert_eq!(q.accept_backlog, Some(0x800));
    }

    #[test]
    fn a_listening_socket_of_this_process_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let me = std::process::id() as i32;
        let root = Path::new("/proc");
        // Both sources: sock_diag (its socket in our own namespace) and /proc's tables.
        let diag = Source::open(root, &[me]);
        assert!(matches!(diag, Source::Diag(_)), "sock_diag refused");
        for source in [diag, Source::Proc] {
            let diag = matches!(source, Source::Diag(_));
            let shared = SharedDump::default();
            let s = sample_now(root, me, &[me], &source, &mut SocketFds::new(), &shared);
            let s = s.unwrap();
            // sock_diag's dump of our own namespace is shared with the next hop, with the
            // inodes held then (the listener's among them).
            let put = shared.newer_than(Instant::now() - Duration::from_secs(60));
            assert_eq!(put.is_some(), diag, "{put:?}");
            // The client's connection waits in the accept queue; the client's own end is ours.
            assert!(s.accept_queue >= 1, "{s:?}");
            assert!(s.connections >= 1, "{s:?}");
            // Only sock_diag tells a listening socket's backlog.
            assert_eq!(s.backlog.is_some(), diag, "{s:?}");
        }
    }

    #[test]
    fn a_connection_accepted_after_the_fds_were_read_is_found_by_the_next_read() {
        use std::os::fd::AsRawFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let me = std::process::id() as i32;
        let root = Path::new("/proc");
        let Source::Diag(socks) = Source::open(root, &[me]) else {
            panic!("sock_diag refused");
        };
        let mut fds = SocketFds::new();
        fds.read(root, &[me], |_| false);
        // Its fd is new, or a number another test's closed socket had: either way read again.
        let (accepted, _) = listener.accept().unwrap();
        let inode = nix::sys::stat::fstat(accepted.as_raw_fd()).unwrap().st_ino;
        let live: BTreeSet<u64> = diag_lines(&socks)
            .unwrap()
            .0
            .iter()
            .map(|l| l.inode)
            .collect();
        assert!(live.contains(&inode), "the dump lists the accepted socket");
        let held = fds.read(root, &[me], |i| live.contains(&i));
        assert_eq!(held.get(&inode), Some(&me));
    }
}
