//! The pool architecture (the async-messenger model): I/O threads decode frames and hand
//! every message through ONE shared queue to a pool of worker threads; a worker builds the
//! reply and sends it back to the I/O thread that owns the connection, which writes it.
//! The shared queue, the wake-ups and the cross-thread hand-back are the costs the reactor
//! does not pay.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use mio::net::TcpStream;
use mio::{Interest, Poll, Waker};

use super::conn::{self, Close, OutBuf, Slab, OUT_HIGH_WATER_BYTES, READ_BUF_BYTES};
use super::{accept_all, EventLoop, LoopShared, LISTENER};
use crate::serve::stats::ThreadStat;
use crate::wire::msgr::{encode_reply, RequestDecoder, HEADER_LEN};

/// A connection stops being read while this many of its requests are with the workers.
const MAX_IN_FLIGHT_PER_CONN: usize = 1024;

/// One decoded request on its way to a worker.
#[derive(Debug, Clone, Copy)]
struct Job {
    io: usize,
    slot: usize,
    generation: u64,
    seq: u64,
    reply_len: u32,
}

/// A worker's reply on its way back to the owning I/O thread.
struct Done {
    slot: usize,
    generation: u64,
    seq: u64,
    reply: Vec<u8>,
}

#[derive(Default)]
struct JobQueue {
    jobs: VecDeque<Job>,
    idle_workers: usize,
    stop: bool,
}

/// The queue every I/O thread pushes to and every worker pops from.
#[derive(Default)]
pub struct SharedQueue {
    state: Mutex<JobQueue>,
    ready: Condvar,
}

impl SharedQueue {
    fn push_all(&self, jobs: &mut Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        let mut q = self.state.lock().expect("queue lock");
        q.jobs.extend(jobs.drain(..));
        let wake = q.idle_workers.min(q.jobs.len());
        drop(q);
        for _ in 0..wake {
            self.ready.notify_one();
        }
    }

    fn pop(&self) -> Option<Job> {
        let mut q = self.state.lock().expect("queue lock");
        loop {
            if q.stop {
                return None;
            }
            if let Some(job) = q.jobs.pop_front() {
                return Some(job);
            }
            q.idle_workers += 1;
            q = self.ready.wait(q).expect("queue lock");
            q.idle_workers -= 1;
        }
    }

    /// Wakes every worker to exit.
    pub fn stop(&self) {
        self.state.lock().expect("queue lock").stop = true;
        self.ready.notify_all();
    }
}

/// Replies going back to one I/O thread, and the waker that tells it.
pub struct ReturnQueue {
    done: Mutex<Vec<Done>>,
    waker: Arc<Waker>,
}

impl ReturnQueue {
    /// The return path of the I/O thread woken by `waker`.
    pub fn new(waker: Arc<Waker>) -> ReturnQueue {
        ReturnQueue {
            done: Mutex::new(Vec::new()),
            waker,
        }
    }

    fn push(&self, done: Done) {
        let mut q = self.done.lock().expect("return lock");
        let was_empty = q.is_empty();
        q.push(done);
        drop(q);
        // The I/O thread takes the whole queue at once: one wake per batch is enough.
        if was_empty {
            let _ = self.waker.wake();
        }
    }
}

/// Runs one worker thread until the queue stops.
pub fn run_worker(
    queue: &SharedQueue,
    returns: &[ReturnQueue],
    stat: &ThreadStat,
    work: super::work::Work,
) {
    while let Some(job) = queue.pop() {
        stat.add_loop();
        work.run();
        let mut reply = Vec::with_capacity(HEADER_LEN + job.reply_len as usize);
        encode_reply(&mut reply, job.reply_len);
        stat.add_ops(1);
        returns[job.io].push(Done {
            slot: job.slot,
            generation: job.generation,
            seq: job.seq,
            reply,
        });
    }
}

struct Conn {
    stream: TcpStream,
    decoder: RequestDecoder,
    /// Tells a reply for this connection from one for an earlier occupant of the slot.
    generation: u64,
    next_seq: u64,
    /// Replies in request order from `first_seq`; `None` while a worker still has it.
    pending: VecDeque<Option<Vec<u8>>>,
    first_seq: u64,
    /// Reply bytes asked for and not yet moved to `out`.
    in_flight_bytes: usize,
    out: OutBuf,
    /// Input left when the connection filled up mid-read (at most one read buffer).
    carry: Vec<u8>,
    /// Reading stopped because of backlog; resumed when replies drain.
    paused: bool,
}

impl Conn {
    fn backlogged(&self) -> bool {
        self.out.pending() + self.in_flight_bytes > OUT_HIGH_WATER_BYTES
            || self.pending.len() >= MAX_IN_FLIGHT_PER_CONN
    }

    /// Files a worker's reply and moves every reply now in order to the output.
    fn complete(&mut self, seq: u64, reply: Vec<u8>) {
        let Some(slot) = self.pending.get_mut((seq - self.first_seq) as usize) else {
            return;
        };
        *slot = Some(reply);
        while let Some(Some(_)) = self.pending.front() {
            let reply = self.pending.pop_front().flatten().expect("checked");
            self.out.buf_mut().extend_from_slice(&reply);
            self.in_flight_bytes -= reply.len();
            self.first_seq += 1;
        }
    }
}

/// One I/O thread's state.
pub struct IoLoop {
    index: usize,
    poll: Poll,
    listener: mio::net::TcpListener,
    conns: Slab<Conn>,
    read_buf: Box<[u8]>,
    next_generation: u64,
    batch: Vec<Job>,
    returned: Vec<Done>,
    touched: Vec<usize>,
    queue: Arc<SharedQueue>,
    returns: Arc<Vec<ReturnQueue>>,
    stat: Arc<ThreadStat>,
    shared: Arc<LoopShared>,
}

impl IoLoop {
    /// I/O thread `index`, whose waker is `returns[index]`'s.
    pub fn new(
        index: usize,
        poll: Poll,
        mut listener: mio::net::TcpListener,
        queue: Arc<SharedQueue>,
        returns: Arc<Vec<ReturnQueue>>,
        stat: Arc<ThreadStat>,
        shared: Arc<LoopShared>,
    ) -> std::io::Result<IoLoop> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(IoLoop {
            index,
            poll,
            listener,
            conns: Slab::default(),
            read_buf: vec![0u8; READ_BUF_BYTES].into_boxed_slice(),
            next_generation: 0,
            batch: Vec::new(),
            returned: Vec::new(),
            touched: Vec::new(),
            queue,
            returns,
            stat,
            shared,
        })
    }

    /// Serves until the server's stop flag is set.
    pub fn run(mut self) {
        super::run_event_loop(&mut self);
    }
}

impl EventLoop for IoLoop {
    fn parts(&mut self) -> (&mut Poll, &LoopShared, &ThreadStat) {
        (&mut self.poll, &self.shared, &self.stat)
    }

    fn accept(&mut self) {
        let registry = self.poll.registry();
        let conns = &mut self.conns;
        let generation = &mut self.next_generation;
        accept_all(&self.listener, &self.shared, |stream| {
            *generation += 1;
            let conn = Conn {
                stream,
                decoder: RequestDecoder::default(),
                generation: *generation,
                next_seq: 0,
                pending: VecDeque::new(),
                first_seq: 0,
                in_flight_bytes: 0,
                out: OutBuf::default(),
                carry: Vec::new(),
                paused: false,
            };
            conn::register_new(registry, conns, conn, |c| &mut c.stream);
        });
    }

    /// Serves one connection's readiness; `peer_closed` (the peer's FIN was in the event)
    /// means reading must go on to EOF even after a short read.
    fn drive(&mut self, slot: usize, peer_closed: bool) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let io = (self.index, slot);
        let max_frame = self.shared.max_frame;
        let batch = &mut self.batch;
        if let Err(why) = decode(conn, &mut self.read_buf, max_frame, io, batch, peer_closed) {
            self.close(slot, why);
        }
    }

    fn woken(&mut self) {
        self.take_replies();
    }

    /// Hands the jobs decoded from this batch of events to the workers at once.
    fn after_events(&mut self) {
        self.queue.push_all(&mut self.batch);
    }
}

impl IoLoop {
    fn close(&mut self, slot: usize, why: Close) {
        self.shared.counters.count_close(&why);
        if let Some(mut conn) = self.conns.remove(slot) {
            let _ = self.poll.registry().deregister(&mut conn.stream);
        }
    }

    /// Moves the workers' replies to their connections, writes them, resumes paused reads.
    fn take_replies(&mut self) {
        std::mem::swap(
            &mut *self.returns[self.index].done.lock().expect("return lock"),
            &mut self.returned,
        );
        let mut returned = std::mem::take(&mut self.returned);
        let mut touched = std::mem::take(&mut self.touched);
        for done in returned.drain(..) {
            let Some(conn) = self.conns.get_mut(done.slot) else {
                continue;
            };
            if conn.generation == done.generation {
                conn.complete(done.seq, done.reply);
                if touched.last() != Some(&done.slot) {
                    touched.push(done.slot);
                }
            }
        }
        self.returned = returned;
        touched.sort_unstable();
        touched.dedup();
        for &slot in &touched {
            self.flush_or_resume(slot);
        }
        touched.clear();
        self.touched = touched;
    }

    fn flush_or_resume(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        if conn.paused {
            // Events that came while paused were not acted on: read to the end.
            return self.drive(slot, true);
        }
        if conn.out.flush(&mut conn.stream).is_err() {
            self.close(slot, Close::Io);
        }
    }
}

/// Reads and decodes until the socket is drained or the connection has too much in flight;
/// each request becomes a job in `batch`.
fn decode(
    conn: &mut Conn,
    read_buf: &mut [u8],
    max_frame: u32,
    owner: (usize, usize),
    batch: &mut Vec<Job>,
    peer_closed: bool,
) -> Result<(), Close> {
    loop {
        conn.out.flush(&mut conn.stream)?;
        conn.paused = conn.backlogged();
        if conn.paused {
            return Ok(());
        }
        if !conn.carry.is_empty() {
            let carry = std::mem::take(&mut conn.carry);
            let used = submit(conn, &carry, max_frame, owner, batch)?;
            conn.carry = carry;
            conn.carry.drain(..used);
            continue;
        }
        let mid_frame = !conn.decoder.at_frame_boundary();
        let Some(n) = conn::read_some(&mut conn.stream, read_buf, mid_frame)? else {
            return Ok(());
        };
        let used = submit(conn, &read_buf[..n], max_frame, owner, batch)?;
        if used < n {
            conn.carry.extend_from_slice(&read_buf[used..n]);
        } else if n < read_buf.len() && !peer_closed {
            return Ok(());
        }
    }
}

/// Turns every whole request in `data` into a job, stopping once the connection is
/// backlogged; returns the bytes used.
fn submit(
    conn: &mut Conn,
    data: &[u8],
    max_frame: u32,
    (io, slot): (usize, usize),
    batch: &mut Vec<Job>,
) -> Result<usize, Close> {
    let mut decoder = std::mem::take(&mut conn.decoder);
    let used = decoder.feed(data, max_frame, |reply_len| {
        batch.push(Job {
            io,
            slot,
            generation: conn.generation,
            seq: conn.next_seq,
            reply_len,
        });
        conn.next_seq += 1;
        conn.in_flight_bytes += HEADER_LEN + reply_len as usize;
        conn.pending.push_back(None);
        !conn.backlogged()
    });
    conn.decoder = decoder;
    Ok(used?)
}
