//! The `single` design's shared layout and its client end (the server threads are in
//! `serve::shmkv::single`).
//!
//! The shared-memory hash-table study's first ("preopt") architecture, built faithfully:
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
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::msg::{boxed, copy_response, Request, Response};
use super::region::Region;
use super::sync::{PMutex, PSem};
use super::ShmkvError;

/// Client entries on the response channel: the most clients at once.
pub const READERS: usize = 256;
/// Both sides wake this often to notice a stop (or, for a client, its deadline).
pub const NAP: Duration = Duration::from_millis(50);

/// One client's entry on the response channel.
#[repr(C, align(64))]
pub struct Reader {
    /// The owning process, 0 when free.
    pub pid: AtomicI32,
    /// Under `resp_lock`: a request of this client is unanswered.
    pub waiting: UnsafeCell<u32>,
    /// Under `resp_lock`: the last response generation this client has read.
    pub last_gen: UnsafeCell<u64>,
    /// The baton: posted when it is this client's turn to read.
    pub turn: PSem,
}

/// The shared channel of the `single` design.
#[repr(C)]
pub struct Channel {
    /// Held by the one client writing the request slot.
    pub gate: PMutex,
    /// Posted by a client once `req` holds its request.
    pub req_full: PSem,
    /// Posted by the dispatcher once it has copied `req` out.
    pub req_taken: PSem,
    /// Under `gate`: the last ticket handed out.
    pub next_ticket: UnsafeCell<u64>,
    /// The ticket of the request the dispatcher copied out last.
    pub taken_ticket: AtomicU64,
    /// The request slot.
    pub req: UnsafeCell<Request>,
    /// Guards the response slot and every reader's state.
    pub resp_lock: PMutex,
    /// Posted when every waiting client has read the response: the next may be written.
    pub resp_free: PSem,
    /// Under `resp_lock`: the generation of the response in `resp`.
    pub gen: UnsafeCell<u64>,
    /// One past the highest reader entry ever claimed.
    pub readers_used: AtomicU32,
    /// The response slot.
    pub resp: UnsafeCell<Response>,
    /// The clients' entries.
    pub readers: [Reader; READERS],
}

/// Bytes of the channel.
pub fn block_size() -> usize {
    std::mem::size_of::<Channel>()
}

/// The channel at the start of a `single` region's body.
pub fn channel_of(region: &Region) -> &Channel {
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

/// The first waiting client at or after `from` (circularly) that has not read the current
/// response.
///
/// # Safety
/// Caller holds `resp_lock`.
pub unsafe fn next_unread(ch: &Channel, from: usize) -> Option<usize> {
    let used = (ch.readers_used.load(Ordering::Acquire) as usize).min(READERS);
    let gen = *ch.gen.get();
    (0..used).map(|k| (from + k) % used.max(1)).find(|&i| {
        let r = &ch.readers[i];
        r.pid.load(Ordering::Relaxed) != 0 && *r.waiting.get() != 0 && *r.last_gen.get() < gen
    })
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
