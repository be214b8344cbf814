//! The `single` design, seed 002's first ("preopt") architecture, built faithfully:
//!
//! - one request channel: a client takes the gate (a robust process-shared mutex), writes
//!   its request, posts `req_full`, and waits on `req_taken` until the dispatcher has copied
//!   it out, so the two semaphores pass the channel between the server and one client;
//! - a dispatcher thread hands each request to one of K worker threads, which answer from
//!   the hash table and hand the answer to a responder thread;
//! - one response channel: the responder writes one answer at a time and every waiting
//!   client reads it, one after the other (a baton passed through per-client semaphores);
//!   the last reader posts `resp_free` so the next answer can be written.
//!
//! Every token is a hint checked against state kept under a mutex (generation numbers and
//! tickets), so a client that dies holding a lock or a baton costs a short timeout, never
//! a wedged server.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::msg::{boxed, copy_request, copy_response, serve, Request, Response};
use super::region::Region;
use super::sync::{pid_alive, PMutex, PSem};
use super::table::Table;
use super::ShmkvError;

/// Client entries on the response channel: the most clients at once.
pub const READERS: usize = 256;
/// Server threads wake this often to notice a stop.
const NAP: Duration = Duration::from_millis(50);
/// A response not fully read after this long makes the responder look for dead readers.
const READ_STALL: Duration = Duration::from_millis(20);

#[repr(C, align(64))]
struct Reader {
    /// The owning process, 0 when free.
    pid: AtomicI32,
    /// Under `resp_lock`: a request of this client is unanswered.
    waiting: UnsafeCell<u32>,
    /// Under `resp_lock`: the last response generation this client has read.
    last_gen: UnsafeCell<u64>,
    /// The baton: posted when it is this client's turn to read.
    turn: PSem,
}

/// The shared channel of the `single` design.
#[repr(C)]
pub struct Channel {
    gate: PMutex,
    req_full: PSem,
    req_taken: PSem,
    /// Under `gate`: the last ticket handed out.
    next_ticket: UnsafeCell<u64>,
    /// The ticket of the request the dispatcher copied out last.
    taken_ticket: AtomicU64,
    req: UnsafeCell<Request>,
    resp_lock: PMutex,
    resp_free: PSem,
    /// Under `resp_lock`: the generation of the response in `resp`.
    gen: UnsafeCell<u64>,
    /// One past the highest reader entry ever claimed.
    readers_used: AtomicU32,
    resp: UnsafeCell<Response>,
    readers: [Reader; READERS],
}

/// Bytes of the channel.
pub fn block_size() -> usize {
    std::mem::size_of::<Channel>()
}

fn channel_of(region: &Region) -> &Channel {
    // SAFETY: the channel is atomics, plain records and primitives the creator initialised.
    unsafe { region.body::<Channel>(0) }
}

/// Initialises the semaphores and mutexes of a fresh region.
pub fn init(region: &Region) {
    let ch = channel_of(region);
    ch.gate.init();
    ch.req_full.init(0);
    ch.req_taken.init(0);
    ch.resp_lock.init();
    ch.resp_free.init(1);
    for r in &ch.readers {
        r.turn.init(0);
    }
}

/// A request travelling dispatcher → worker → responder, then back for reuse.
struct Job {
    req: Box<Request>,
    resp: Box<Response>,
}

/// Starts the dispatcher, `workers` workers and the responder. Workers are pinned to
/// `cpus` round-robin; the dispatcher and responder to the whole set.
pub fn spawn(
    region: Arc<Region>,
    table: Arc<Table>,
    stop: Arc<AtomicBool>,
    workers: usize,
    cpus: Option<Vec<usize>>,
) -> std::io::Result<Vec<JoinHandle<()>>> {
    let (done_tx, done_rx) = channel::<Job>();
    let (free_tx, free_rx) = channel::<Job>();
    let mut to_workers = Vec::new();
    let mut handles = Vec::new();
    for w in 0..workers {
        let (tx, rx) = channel::<Job>();
        to_workers.push(tx);
        let (table, stop, done) = (table.clone(), stop.clone(), done_tx.clone());
        let cpu = cpus.as_ref().map(|c| vec![c[w % c.len()]]);
        handles.push(named(&format!("shmkv-w{w}"), cpu, move || {
            worker(rx, done, &table, &stop)
        })?);
    }
    drop(done_tx);
    let (r, s) = (region.clone(), stop.clone());
    handles.push(named("shmkv-disp", cpus.clone(), move || {
        dispatcher(&r, to_workers, free_rx, &s)
    })?);
    handles.push(named("shmkv-resp", cpus, move || {
        responder(&region, done_rx, free_tx, &stop)
    })?);
    Ok(handles)
}

fn named(
    name: &str,
    cpus: Option<Vec<usize>>,
    f: impl FnOnce() + Send + 'static,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            if let Some(c) = cpus {
                let _ = crate::cpuset::pin_current_thread_to(&c);
            }
            f()
        })
}

fn dispatcher(region: &Region, workers: Vec<Sender<Job>>, free: Receiver<Job>, stop: &AtomicBool) {
    let ch = channel_of(region);
    let mut last_ticket = 0;
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        if !ch.req_full.wait_for(NAP) {
            continue;
        }
        let mut job = free.try_recv().unwrap_or_else(|_| Job {
            req: boxed(),
            resp: boxed(),
        });
        // SAFETY: the gate holder wrote the request before posting `req_full`.
        copy_request(&mut job.req, unsafe { &*ch.req.get() });
        // A token left by a client that died after posting must not dispatch twice.
        if job.req.seq == last_ticket {
            continue;
        }
        last_ticket = job.req.seq;
        ch.taken_ticket.store(job.req.seq, Ordering::Release);
        ch.req_taken.post();
        let _ = workers[next % workers.len()].send(job);
        next += 1;
    }
}

fn worker(rx: Receiver<Job>, done: Sender<Job>, table: &Table, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        match rx.recv_timeout(NAP) {
            Ok(mut job) => {
                serve(table, &job.req, &mut job.resp);
                let _ = done.send(job);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn responder(region: &Region, done: Receiver<Job>, free: Sender<Job>, stop: &AtomicBool) {
    let ch = channel_of(region);
    while !stop.load(Ordering::Relaxed) {
        match done.recv_timeout(NAP) {
            Ok(job) => {
                publish(ch, &job.resp, stop);
                let _ = free.send(job);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Writes one response once every waiting client has read the previous one, and hands
/// the baton to the first waiting client.
fn publish(ch: &Channel, resp: &Response, stop: &AtomicBool) {
    let guard = loop {
        let freed = ch.resp_free.wait_for(READ_STALL);
        let Some(g) = ch.resp_lock.lock_for(NAP) else {
            continue;
        };
        // SAFETY (all `unsafe` below): reader state is only touched under `resp_lock`.
        if unsafe { next_unread(ch, 0) }.is_none() {
            break g;
        }
        if !freed {
            unsafe { recover_readers(ch) };
        }
        drop(g);
        if stop.load(Ordering::Relaxed) {
            return;
        }
    };
    let first = unsafe {
        *ch.gen.get() += 1;
        copy_response(&mut *ch.resp.get(), resp);
        next_unread(ch, 0)
    };
    drop(guard);
    match first {
        Some(r) => ch.readers[r].turn.post(),
        None => ch.resp_free.post(),
    }
}

/// The first waiting client at or after `from` (circularly) that has not read the current
/// response.
///
/// # Safety
/// Caller holds `resp_lock`.
unsafe fn next_unread(ch: &Channel, from: usize) -> Option<usize> {
    let used = (ch.readers_used.load(Ordering::Acquire) as usize).min(READERS);
    let gen = *ch.gen.get();
    (0..used).map(|k| (from + k) % used.max(1)).find(|&i| {
        let r = &ch.readers[i];
        r.pid.load(Ordering::Relaxed) != 0 && *r.waiting.get() != 0 && *r.last_gen.get() < gen
    })
}

/// A response has been unread for a while: frees the entries of dead clients and posts
/// the baton again (a hint: a live reader that already has it drops the copy).
///
/// # Safety
/// Caller holds `resp_lock`.
unsafe fn recover_readers(ch: &Channel) {
    let used = (ch.readers_used.load(Ordering::Acquire) as usize).min(READERS);
    for r in &ch.readers[..used] {
        let pid = r.pid.load(Ordering::Acquire);
        if pid != 0 && !pid_alive(pid) {
            *r.waiting.get() = 0;
            r.pid.store(0, Ordering::Release);
        }
    }
    match next_unread(ch, 0) {
        Some(i) => ch.readers[i].turn.post(),
        None => ch.resp_free.post(),
    }
}

/// Wakes waiting clients so they notice the server stopping.
pub fn wake_all(region: &Region) {
    let ch = channel_of(region);
    ch.req_taken.post();
    for r in &ch.readers {
        r.turn.post();
    }
}

/// A client's end of the single channel.
pub struct Client {
    region: Arc<Region>,
    me: usize,
    resp: Box<Response>,
}

impl Client {
    /// Claims a reader entry.
    pub fn attach(region: Arc<Region>) -> Result<Client, ShmkvError> {
        let ch = channel_of(&region);
        let pid = std::process::id() as i32;
        let me = (0..READERS)
            .find(|&i| {
                ch.readers[i]
                    .pid
                    .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })
            .ok_or(ShmkvError::Full { clients: READERS })?;
        let r = &ch.readers[me];
        {
            let _g = ch.resp_lock.lock_for(Duration::from_secs(5));
            // SAFETY: under `resp_lock`.
            unsafe {
                *r.waiting.get() = 0;
                *r.last_gen.get() = *ch.gen.get();
            }
        }
        r.turn.drain();
        ch.readers_used.fetch_max(me as u32 + 1, Ordering::AcqRel);
        Ok(Client {
            region,
            me,
            resp: boxed(),
        })
    }

    /// Sends one request through the request channel and reads responses until its own.
    pub fn call(
        &mut self,
        op: u32,
        key: &[u8],
        value: &[u8],
        timeout: Duration,
    ) -> Result<&Response, ShmkvError> {
        let deadline = Instant::now() + timeout;
        let ticket = match self.send(op, key, value, deadline) {
            Ok(t) => t,
            Err(e) => {
                self.set_waiting(false);
                return Err(e);
            }
        };
        self.receive(ticket, deadline)?;
        Ok(&self.resp)
    }

    fn send(
        &mut self,
        op: u32,
        key: &[u8],
        value: &[u8],
        deadline: Instant,
    ) -> Result<u64, ShmkvError> {
        let region = self.region.clone();
        let ch = channel_of(&region);
        let gate = ch
            .gate
            .lock_for(left(deadline))
            .ok_or(ShmkvError::Timeout)?;
        // SAFETY: `next_ticket` and `req` belong to the gate holder.
        let ticket = unsafe {
            *ch.next_ticket.get() += 1;
            let t = *ch.next_ticket.get();
            (*ch.req.get()).fill(op, key, value, self.me as u32, t);
            t
        };
        self.set_waiting(true);
        ch.req_full.post();
        while ch.taken_ticket.load(Ordering::Acquire) != ticket {
            if !ch.req_taken.wait_for(left(deadline).min(NAP)) {
                self.check_alive(deadline)?;
            }
        }
        drop(gate);
        Ok(ticket)
    }

    fn receive(&mut self, ticket: u64, deadline: Instant) -> Result<(), ShmkvError> {
        let region = self.region.clone();
        let turn = &channel_of(&region).readers[self.me].turn;
        loop {
            if turn.wait_for(left(deadline).min(NAP)) {
                if self.read_turn(ticket) {
                    return Ok(());
                }
            } else if let Err(e) = self.check_alive(deadline) {
                // Reading (and passing on) what is there leaves the channel as if we had.
                self.read_turn(ticket);
                self.set_waiting(false);
                return Err(e);
            }
        }
    }

    /// One turn on the response channel: reads the current response if not read yet,
    /// passes the baton on. True when it was ours.
    fn read_turn(&mut self, ticket: u64) -> bool {
        let ch = channel_of(&self.region);
        let Some(g) = ch.resp_lock.lock_for(NAP) else {
            return false;
        };
        let r = &ch.readers[self.me];
        // SAFETY: reader state and `resp` are read under `resp_lock`.
        let (mine, next) = unsafe {
            if *r.waiting.get() == 0 || *r.last_gen.get() >= *ch.gen.get() {
                return false; // a stale or duplicate baton
            }
            *r.last_gen.get() = *ch.gen.get();
            let resp = &*ch.resp.get();
            let mine = resp.client as usize == self.me && resp.seq == ticket;
            if mine {
                copy_response(&mut self.resp, resp);
                *r.waiting.get() = 0;
            }
            (mine, next_unread(ch, self.me + 1))
        };
        drop(g);
        match next {
            Some(i) => ch.readers[i].turn.post(),
            None => ch.resp_free.post(),
        }
        mine
    }

    fn set_waiting(&self, on: bool) {
        let ch = channel_of(&self.region);
        let _g = ch.resp_lock.lock_for(Duration::from_secs(5));
        let r = &ch.readers[self.me];
        // SAFETY: under `resp_lock` (or its holder is hopelessly stuck, and then this
        // entry's own fields are ours alone).
        unsafe {
            if on {
                *r.last_gen.get() = *ch.gen.get();
            }
            *r.waiting.get() = u32::from(on);
        }
    }

    fn check_alive(&self, deadline: Instant) -> Result<(), ShmkvError> {
        if self.region.header().stopping.load(Ordering::Relaxed) != 0 {
            return Err(ShmkvError::Stopped);
        }
        if Instant::now() >= deadline {
            return Err(ShmkvError::Timeout);
        }
        Ok(())
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.set_waiting(false);
        channel_of(&self.region).readers[self.me]
            .pid
            .store(0, Ordering::Release);
    }
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
