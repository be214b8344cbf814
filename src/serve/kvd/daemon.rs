//! The daemon thread's poll loop, the benchkv study's four phases: read the peers (replies to our
//! forwarded requests, then their requests to us), scan the client slots (answer local keys,
//! queue remote ones), flush the peer connections (once per loop with `--batch`, else at
//! once), and sample the in-flight count.
//!
//! Timestamps (monotonic ns) per remote request: `call` when it is queued, `flush` when the
//! write holding it is issued, `cb` when its reply is read: RTT = cb − call, call_to_flush,
//! flush_to_cb. For a request from a peer: incoming_turnaround = the flush of its reply −
//! the read that brought it.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::calibrate::{PollMode, Wire};
use super::metrics::{Counters, Gauges, Phases, Shared, PUBLISH_EVERY};
use super::peers::{PeerConn, PeerFault};
use crate::serve::shmkv::per_worker::reap_dead;
use crate::wire::kvd::{
    decode, encode_request, encode_response, key_number, owner, Frame, ST_PEER_DOWN,
};
use crate::wire::shmkv::msg::{
    Request, Response, MAX_VALUE, OP_GET, OP_SET, ST_BAD_REQUEST, ST_NOT_FOUND, ST_OK,
};
use crate::wire::shmkv::per_worker::{block, Block, CELLS, SPIN, WORKER_NAP, YIELD};
use crate::wire::shmkv::region::Region;
use crate::wire::shmkv::sync::{futex_wait, futex_wake_all};

/// Phase indexes into `Phases` (as `metrics::PHASES`).
const RTT: usize = 0;
const CALL_TO_FLUSH: usize = 1;
const FLUSH_TO_CB: usize = 2;
const TURNAROUND: usize = 3;
const PING_PONG: usize = 4;

/// A parked daemon with clients looks at its peers this often.
const PARK: Duration = Duration::from_micros(100);
/// A parked daemon without clients waits on its peers' sockets; a new client's first
/// request waits at most this.
const PARK_ALONE: Duration = Duration::from_millis(1);
/// Longest poll(2) for peers while every client waits for a remote answer, ms.
const PARK_POLL_MS: u16 = 1;
/// How often the daemon looks for dead clients.
const REAP_EVERY: Duration = Duration::from_millis(100);

/// The daemon's settings.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// This rank.
    pub rank: u32,
    /// Number of ranks.
    pub ranks: u32,
    /// Slots in the local table.
    pub keys_per_rank: u64,
    /// Flush once per loop (true) or at once.
    pub batch: bool,
    /// Round trips of the ping-pong at start, with each higher rank.
    pub ping_pong: u64,
    /// How the loop waits when it has nothing to do.
    pub poll: PollMode,
}

/// One peer connection's buffers.
struct Peer {
    rank: u32,
    addr: SocketAddr,
    stream: Option<TcpStream>,
    input: Vec<u8>,
    output: Vec<u8>,
    /// Requests queued since the last flush (their ids), to stamp at the flush.
    unflushed: Vec<u32>,
    /// Read times of the peer's requests whose replies are queued but not flushed.
    replies_read_ns: Vec<u64>,
}

/// A forwarded request waiting for its reply.
#[derive(Clone, Copy)]
struct Pending {
    cell: u16,
    seq: u32,
    peer: u32,
    call_ns: u64,
    flush_ns: u64,
}

struct Daemon {
    cfg: Config,
    table: Vec<Option<Vec<u8>>>,
    peers: Vec<Option<Peer>>,
    pending: Vec<Option<Pending>>,
    free: Vec<u32>,
    inflight: u64,
    /// The request sequence last taken from each cell.
    seen: [u32; CELLS],
    counters: Counters,
    phases: Phases,
    epoch: Instant,
    read_buf: Vec<u8>,
}

/// Runs the daemon until `stop`.
pub fn run(
    cfg: Config,
    region: Arc<Region>,
    conns: Vec<Option<PeerConn>>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    shared.thread.register_current_thread();
    let mut d = Daemon::new(cfg, &region, conns);
    let b = block(&region, 0);
    d.calibrate(b);
    d.publish(&shared);
    let mut idle_since: Option<Instant> = None;
    let (mut last_publish, mut last_reap) = (Instant::now(), Instant::now());
    loop {
        let worked = d.turn(b);
        if d.counters.loops & 255 == 0 {
            let now = Instant::now();
            if now - last_publish >= PUBLISH_EVERY {
                d.publish(&shared);
                last_publish = now;
                if stop.load(Ordering::Relaxed) {
                    return;
                }
            }
            if now - last_reap >= REAP_EVERY {
                reap_dead(b);
                last_reap = now;
            }
        }
        if worked {
            idle_since = None;
            continue;
        }
        let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
        if idle < SPIN || (d.inflight > 0 && cfg.poll == PollMode::Spin) {
            std::hint::spin_loop();
        } else if d.inflight > 0 && d.only_peers_can_wake(b) {
            poll_peers(&d.peers, PARK_POLL_MS);
        } else if idle < YIELD || d.inflight > 0 {
            std::thread::yield_now();
        } else {
            if stop.load(Ordering::Relaxed) {
                d.publish(&shared);
                return;
            }
            park(b, &d.seen, &d.peers);
        }
    }
}

/// Blocks in poll(2) until a peer sends something or `ms` pass; false (at once) without
/// peers.
fn poll_peers(peers: &[Option<Peer>], ms: u16) -> bool {
    let mut fds: Vec<PollFd<'_>> = peers
        .iter()
        .flatten()
        .filter_map(|p| p.stream.as_ref())
        .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN))
        .collect();
    if fds.is_empty() {
        return false;
    }
    let _ = poll(&mut fds, PollTimeout::from(ms));
    true
}

/// Waits for work: with clients attached, until one rings or [`PARK`] passes (then the
/// peers are read again); with none, until a peer sends something or [`PARK_ALONE`] passes.
fn park(b: &Block, seen: &[u32; CELLS], peers: &[Option<Peer>]) {
    let used = (b.ctl.cells_used.load(Ordering::Acquire) as usize).min(CELLS);
    let clients = (0..used).any(|i| b.input[i].owner_pid.load(Ordering::Relaxed) != 0);
    let bell = b.ctl.doorbell.load(Ordering::SeqCst);
    b.ctl.worker_parked.store(1, Ordering::SeqCst);
    if (0..used).all(|i| b.input[i].req_seq.load(Ordering::SeqCst) == seen[i]) {
        if clients {
            futex_wait(&b.ctl.doorbell, bell, PARK);
        } else if !poll_peers(peers, PARK_ALONE.as_millis() as u16) {
            futex_wait(&b.ctl.doorbell, bell, WORKER_NAP);
        }
    }
    b.ctl.worker_parked.store(0, Ordering::SeqCst);
}

impl Daemon {
    fn new(cfg: Config, region: &Region, conns: Vec<Option<PeerConn>>) -> Self {
        let peers = conns
            .into_iter()
            .map(|c| {
                c.map(|c| {
                    let _ = c.stream.set_nonblocking(true);
                    let _ = c.stream.set_nodelay(true);
                    Peer {
                        rank: c.rank,
                        addr: c.addr,
                        stream: Some(c.stream),
                        input: Vec::with_capacity(64 * 1024),
                        output: Vec::with_capacity(64 * 1024),
                        unflushed: Vec::new(),
                        replies_read_ns: Vec::new(),
                    }
                })
            })
            .collect();
        let b = block(region, 0);
        // What is answered: a request posted between the region's publication and now is
        // still to serve.
        let seen = std::array::from_fn(|i| b.output[i].resp_seq.load(Ordering::Acquire));
        Daemon {
            cfg,
            table: vec![None; cfg.keys_per_rank as usize],
            peers,
            pending: Vec::new(),
            free: Vec::new(),
            inflight: 0,
            seen,
            counters: Counters::default(),
            phases: Phases::new(),
            epoch: Instant::now(),
            read_buf: vec![0u8; 64 * 1024],
        }
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// One turn of the loop; whether it did anything.
    fn turn(&mut self, b: &Block) -> bool {
        self.counters.loops += 1;
        self.counters.inflight_sum += self.inflight;
        let mut worked = false;
        for j in 0..self.peers.len() {
            worked |= self.read_peer(j, b);
        }
        worked |= self.scan_cells(b);
        if self.cfg.batch {
            for j in 0..self.peers.len() {
                worked |= self.flush(j, b);
            }
        } else {
            // Anything a write could not take at once goes out as the socket drains.
            for j in 0..self.peers.len() {
                self.flush(j, b);
            }
        }
        worked
    }

    fn publish(&mut self, shared: &Shared) {
        let gauges = Gauges {
            inflight: self.inflight,
            peers_up: self
                .peers
                .iter()
                .flatten()
                .filter(|p| p.stream.is_some())
                .count() as u64,
            ranks: self.cfg.ranks as u64,
            rank: self.cfg.rank as u64,
        };
        shared.publish(&self.counters, gauges, &mut self.phases);
    }

    /// Takes every new request from the client slots.
    fn scan_cells(&mut self, b: &Block) -> bool {
        let used = (b.ctl.cells_used.load(Ordering::Acquire) as usize).min(CELLS);
        let mut worked = false;
        for i in 0..used {
            let seq = b.input[i].req_seq.load(Ordering::Acquire);
            if seq == self.seen[i] {
                continue;
            }
            self.seen[i] = seq;
            worked = true;
            self.counters.shm_requests += 1;
            // SAFETY: the client wrote `req` before publishing `seq` and leaves it alone
            // until we publish the answer.
            let req = unsafe { &*b.input[i].req.get() };
            self.take(b, i, seq, req);
        }
        worked
    }

    /// Answers or forwards the request in cell `i`.
    fn take(&mut self, b: &Block, i: usize, seq: u32, req: &Request) {
        let route = req
            .key()
            .and_then(key_number)
            .map(|k| owner(k, self.cfg.ranks));
        match route {
            Some((r, slot)) if r == self.cfg.rank => {
                self.counters.local += 1;
                // SAFETY: the response cell is the daemon's until it publishes `seq`.
                let resp = unsafe { &mut *b.output[i].resp.get() };
                let value = &req.value[..(req.value_len as usize).min(MAX_VALUE)];
                let status = self.local(req.op, slot, value, &mut resp.value);
                resp.value_len = status.1 as u32;
                answer(b, i, seq, status.0);
            }
            Some((r, _))
                if self.peers[r as usize]
                    .as_ref()
                    .is_some_and(|p| p.stream.is_some()) =>
            {
                self.counters.remote += 1;
                self.forward(b, i, seq, r, req);
            }
            Some(_) => {
                self.counters.peer_down += 1;
                answer(b, i, seq, ST_PEER_DOWN);
            }
            None => {
                self.counters.bad_requests += 1;
                answer(b, i, seq, ST_BAD_REQUEST);
            }
        }
    }

    /// Runs `op` on slot `slot` of the table: (status, value bytes written to `out`).
    fn local(&mut self, op: u32, slot: u64, value: &[u8], out: &mut [u8]) -> (u32, usize) {
        let Some(entry) = self.table.get_mut(slot as usize) else {
            self.counters.bad_requests += 1;
            return (ST_BAD_REQUEST, 0);
        };
        match op {
            OP_GET => match entry {
                Some(v) => {
                    let n = v.len().min(out.len());
                    out[..n].copy_from_slice(&v[..n]);
                    (ST_OK, n)
                }
                None => {
                    self.counters.misses += 1;
                    (ST_NOT_FOUND, 0)
                }
            },
            OP_SET => {
                let v = entry.get_or_insert_with(Vec::new);
                v.clear();
                v.extend_from_slice(value);
                (ST_OK, 0)
            }
            _ => {
                self.counters.bad_requests += 1;
                (ST_BAD_REQUEST, 0)
            }
        }
    }

    /// Queues cell `i`'s request for rank `r`.
    fn forward(&mut self, b: &Block, i: usize, seq: u32, r: u32, req: &Request) {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.pending.push(None);
                self.pending.len() as u32 - 1
            }
        };
        let call_ns = self.now_ns();
        self.pending[id as usize] = Some(Pending {
            cell: i as u16,
            seq,
            peer: r,
            call_ns,
            flush_ns: call_ns,
        });
        self.inflight += 1;
        let key = req.key().unwrap_or_default();
        let value = &req.value[..(req.value_len as usize).min(MAX_VALUE)];
        let p = self.peers[r as usize].as_mut().expect("a live peer");
        encode_request(&mut p.output, id, req.op as u8, key, value);
        p.unflushed.push(id);
        if !self.cfg.batch {
            self.flush(r as usize, b);
        }
    }

    /// Writes what is queued for peer `j`; whether anything was written.
    fn flush(&mut self, j: usize, b: &Block) -> bool {
        let Some(p) = self.peers[j].as_mut() else {
            return false;
        };
        let Some(stream) = p.stream.as_mut() else {
            return false;
        };
        if p.output.is_empty() {
            return false;
        }
        let result = stream.write(&p.output);
        let now = self.epoch.elapsed().as_nanos() as u64;
        // The stamps are for the write that takes the message to the kernel first.
        for id in p.unflushed.drain(..) {
            if let Some(q) = self.pending[id as usize].as_mut() {
                q.flush_ns = now;
                self.phases.record(CALL_TO_FLUSH, now - q.call_ns);
            }
        }
        for read in p.replies_read_ns.drain(..) {
            self.phases.record(TURNAROUND, now - read);
        }
        self.counters.flushes += 1;
        match result {
            Ok(n) => {
                p.output.drain(..n);
                true
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => false,
            Err(e) => {
                self.fail_peer(j, b, &PeerFault::Write(e));
                true
            }
        }
    }

    /// Reads what peer `j` sent and handles every whole frame; whether anything came.
    fn read_peer(&mut self, j: usize, b: &Block) -> bool {
        let Some(stream) = self.peers[j].as_mut().and_then(|p| p.stream.as_mut()) else {
            return false;
        };
        let n = match stream.read(&mut self.read_buf) {
            Ok(0) => {
                self.fail_peer(j, b, &PeerFault::Closed);
                return true;
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => return false,
            Err(e) => {
                self.fail_peer(j, b, &PeerFault::Read(e));
                return true;
            }
        };
        let read_ns = self.now_ns();
        let mut input = std::mem::take(&mut self.peers[j].as_mut().expect("peer").input);
        input.extend_from_slice(&self.read_buf[..n]);
        self.take_input(j, b, input, read_ns);
        true
    }

    /// Handles every whole frame of `input` (peer `j`'s bytes), keeping the rest.
    fn take_input(&mut self, j: usize, b: &Block, mut input: Vec<u8>, read_ns: u64) {
        let mut at = 0;
        let failure = loop {
            match decode(&input[at..]) {
                Ok(Some((frame, len))) => {
                    if let Err(why) = self.handle(j, b, frame, read_ns) {
                        break Some(why);
                    }
                    at += len;
                }
                Ok(None) => break None,
                Err(e) => break Some(PeerFault::Malformed(e)),
            }
        };
        input.drain(..at);
        if let Some(why) = failure {
            self.fail_peer(j, b, &why);
        } else if let Some(p) = self.peers[j].as_mut() {
            p.input = input;
            if !self.cfg.batch {
                self.flush(j, b);
            }
        }
    }

    /// The ping-pong at start with every peer ([`super::calibrate`]), in rank order; a
    /// peer that fails it is dropped as in the loop.
    fn calibrate(&mut self, b: &Block) {
        for j in 0..self.peers.len() {
            let Some(stream) = self.peers[j].as_mut().and_then(|p| p.stream.as_mut()) else {
                continue;
            };
            let mut wire = Wire::new(stream, self.cfg.poll);
            let done = if j > self.cfg.rank as usize {
                wire.ping(self.cfg.ping_pong, &mut self.phases.0[PING_PONG])
            } else {
                wire.pong().map(|_| ())
            };
            let left = std::mem::take(&mut wire.input);
            if done.is_ok() && j > self.cfg.rank as usize && self.cfg.ping_pong > 0 {
                let h = &self.phases.0[PING_PONG];
                let line = format!(
                    "kvd rank {}: ping-pong with rank {j}: {} round trips of 36/28-byte frames, p50 {:.2} µs\n",
                    self.cfg.rank,
                    h.len(),
                    h.value_at_quantile(0.5) as f64 / 1e3
                );
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            match done {
                Err(why) => self.fail_peer(j, b, &why),
                Ok(()) if !left.is_empty() => {
                    let now = self.now_ns();
                    self.take_input(j, b, left, now);
                }
                Ok(()) => {}
            }
        }
    }

    /// Whether every client's request is waiting for a peer (the slots can bring nothing
    /// new before an answer does).
    fn only_peers_can_wake(&self, b: &Block) -> bool {
        let used = (b.ctl.cells_used.load(Ordering::Acquire) as usize).min(CELLS);
        (0..used).all(|i| {
            b.input[i].owner_pid.load(Ordering::Relaxed) == 0
                || b.output[i].resp_seq.load(Ordering::Acquire) != self.seen[i]
        })
    }

    fn handle(
        &mut self,
        j: usize,
        b: &Block,
        frame: Frame<'_>,
        read_ns: u64,
    ) -> Result<(), PeerFault> {
        match frame {
            Frame::Request { id, op, key, value } => {
                self.counters.incoming += 1;
                let slot = match key_number(key).map(|k| owner(k, self.cfg.ranks)) {
                    Some((r, slot)) if r == self.cfg.rank => slot,
                    _ => {
                        return Err(PeerFault::NotOwned {
                            key: String::from_utf8_lossy(key).into_owned(),
                            rank: self.cfg.rank,
                        })
                    }
                };
                let mut out = std::mem::take(&mut self.read_buf);
                let (st, len) = self.local(op as u32, slot, value, &mut out[..MAX_VALUE]);
                let p = self.peers[j].as_mut().expect("peer");
                encode_response(&mut p.output, id, st as u8, &out[..len]);
                p.replies_read_ns.push(read_ns);
                self.read_buf = out;
                Ok(())
            }
            Frame::Response { id, status, value } => {
                let Some(q) = self
                    .pending
                    .get_mut(id as usize)
                    .and_then(Option::take)
                    .filter(|q| q.peer as usize == j)
                else {
                    return Err(PeerFault::Unasked(id));
                };
                let cb = self.now_ns();
                self.phases.record(RTT, cb - q.call_ns);
                self.phases
                    .record(FLUSH_TO_CB, cb.saturating_sub(q.flush_ns));
                self.free.push(id);
                self.inflight -= 1;
                self.counters.remote_done += 1;
                let i = q.cell as usize;
                // SAFETY: the response cell is the daemon's until it publishes `seq`.
                let resp: &mut Response = unsafe { &mut *b.output[i].resp.get() };
                let n = value.len().min(MAX_VALUE);
                resp.value[..n].copy_from_slice(&value[..n]);
                resp.value_len = n as u32;
                // A miss is counted by the key's owner (`local`), once.
                answer(b, i, q.seq, status as u32);
                Ok(())
            }
        }
    }

    /// Drops peer `j`: its in-flight requests answer `peer_down`, and so will its keys.
    fn fail_peer(&mut self, j: usize, b: &Block, why: &PeerFault) {
        let Some(p) = self.peers[j].as_mut() else {
            return;
        };
        if p.stream.take().is_none() {
            return;
        }
        p.output.clear();
        p.input.clear();
        p.unflushed.clear();
        p.replies_read_ns.clear();
        self.counters.peer_failures += 1;
        let mut lost = 0;
        for id in 0..self.pending.len() {
            if self.pending[id].is_some_and(|q| q.peer as usize == j) {
                let q = self.pending[id].take().expect("checked");
                self.free.push(id as u32);
                self.inflight -= 1;
                self.counters.peer_down += 1;
                lost += 1;
                answer(b, q.cell as usize, q.seq, ST_PEER_DOWN);
            }
        }
        eprintln!(
            "kvd rank {}: rank {} ({}) failed: {why}; {lost} request{} in flight to it failed (peer_down), and its keys answer peer_down from now on",
            self.cfg.rank,
            p.rank,
            p.addr,
            if lost == 1 { "" } else { "s" }
        );
    }
}

/// Publishes cell `i`'s answer for request `seq` with `status` (value already written).
fn answer(b: &Block, i: usize, seq: u32, status: u32) {
    let out = &b.output[i];
    // SAFETY: the response cell is the daemon's until it publishes `seq`.
    let resp = unsafe { &mut *out.resp.get() };
    resp.status = status;
    if status != ST_OK {
        resp.value_len = 0;
    }
    resp.seq = seq as u64;
    out.resp_seq.store(seq, Ordering::SeqCst);
    if out.client_parked.load(Ordering::SeqCst) != 0 {
        futex_wake_all(&out.resp_seq);
    }
}
