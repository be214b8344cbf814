//! The `single` design, the shared-memory hash-table study's first ("preopt") architecture, built faithfully:
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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::table::{serve, Table};
use crate::wire::shmkv::msg::{boxed, copy_request, copy_response, Request, Response};
use crate::wire::shmkv::region::Region;
use crate::wire::shmkv::single::{channel_of, next_unread, Channel, NAP, READERS};
use crate::wire::shmkv::sync::pid_alive;

/// A response not fully read after this long makes the responder look for dead readers.
const READ_STALL: Duration = Duration::from_millis(20);

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
