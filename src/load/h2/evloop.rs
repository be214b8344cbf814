//! HTTP/2 generator threads on the mio event loop: the HTTP/1.1 thread's shape (one epoll,
//! edge-triggered sockets registered once, one read buffer per thread, a timerfd for open
//! loop) with a sans-I/O HTTP/2 connection ([`H2Conn`]) per socket, plain or TLS
//! ([`Stream`]). Per event: the socket is read until drained, the frames acted on, the
//! streams that ended recorded, new streams opened in their place, and everything queued
//! written with one `write`.
//!
//! `sent` counts a stream when its HEADERS are queued; a stream the server refused
//! unprocessed (above a GOAWAY's last stream id, or RST_STREAM REFUSED_STREAM before any
//! answer) leaves `sent` and is sent again, counted once more in `sent` and in `resent`, as
//! for an HTTP/1.1 `Connection: close`. A connection the server is done with (GOAWAY) is
//! replaced once its last streams ended.
//!
//! What the connections hold of the server's bytes (a frame cut by a read, a header block
//! being collected: at most 80 KiB each) is charged to the thread's [`ReplyBudget`] after
//! each read and given back when the frame or block is whole or the connection is closed,
//! as the HTTP/1.1 threads do with their replies.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::timerfd::{ClockId, TimerFd, TimerFlags};

use super::conn::{encode_request, ConnError, Event, H2Conn};
use crate::load::budget::ReplyBudget;
use crate::load::recorder::{thread_cpu_ns, Msg, Recorder, Schedule};
use crate::load::target::Target;
use crate::load::template::H2Requests;
use crate::load::transport::{connect_error_kind, error_kind, Stream};
use crate::load::worker::{drain_timer, next_wake_ns, wait_until, OpenLoop, SPIN_NS};
use crate::load::{LoadConfig, LoadError};

const TIMER: Token = Token(usize::MAX);
/// The thread's one read buffer (as the HTTP/1.1 threads'): frames cut by the end of a read
/// stay with their connection.
const READ_CHUNK: usize = 64 * 1024;
/// Reads one connection may make in a row before the others' turn.
const MAX_READS_PER_TURN: usize = 16;
/// A write buffer grown past this is freed once flushed.
const KEEP_WBUF_BYTES: usize = 64 * 1024;
/// How often timeouts and reconnections are looked after.
const HOUSEKEEPING_NS: u64 = 20_000_000;

/// A stream's request: when it was due (open loop) and when it was sent.
#[derive(Clone, Copy)]
struct Tag {
    intended_ns: u64,
    sent_ns: u64,
}

struct Conn {
    stream: Option<Stream>,
    h2: Option<H2Conn<Tag>>,
    /// TCP (and TLS) not established yet.
    connecting: bool,
    /// How much of `h2.out` was written.
    wpos: usize,
    /// When the connection was opened (a server that never sends its SETTINGS times out).
    opened_ns: u64,
    retry_at_ns: u64,
    in_free_queue: bool,
    /// With `--requests`: this connection's requests.
    templates: Option<H2Requests>,
    /// What `h2` holds of the server's bytes (a cut frame, a header block being collected)
    /// as the thread's [`ReplyBudget`] has it.
    held: usize,
}

impl Conn {
    fn new(templates: Option<H2Requests>) -> Self {
        Conn {
            stream: None,
            h2: None,
            connecting: false,
            wpos: 0,
            opened_ns: 0,
            retry_at_ns: 0,
            in_free_queue: false,
            templates,
            held: 0,
        }
    }

    /// Tells `budget` what the HTTP/2 state holds now; the error kind when that is more
    /// than the connection's share and the budget cannot lend the rest (what it held before
    /// stays charged until it is closed).
    fn charge(&mut self, budget: &mut ReplyBudget) -> Result<(), &'static str> {
        let now = self.h2.as_ref().map_or(0, H2Conn::held_bytes);
        if now == self.held {
            return Ok(());
        }
        if now > self.held {
            budget.grow(self.held, now, now)?;
        }
        budget.held(self.held, now);
        self.held = now;
        Ok(())
    }

    /// Forgets the HTTP/2 state (the socket is gone): what it held goes back to `budget`.
    fn close(&mut self, budget: &mut ReplyBudget) {
        self.h2 = None;
        self.connecting = false;
        self.wpos = 0;
        // Down to nothing: never refused.
        let _ = self.charge(budget);
    }
}

/// One HTTP/2 generator thread on mio.
pub(in crate::load) struct H2Loop {
    config: Arc<LoadConfig>,
    target: Arc<Target>,
    sched: Arc<Schedule>,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    poll: Poll,
    conns: Vec<Conn>,
    scratch: Vec<u8>,
    /// What the connections' HTTP/2 states may hold together.
    budget: ReplyBudget,
    /// Connections whose turn ended with bytes still unread (and whether the peer closed).
    unread: Vec<(usize, bool)>,
    /// How streams ended, from the last frames read (reused).
    events: Vec<Event<Tag>>,
    t0: Instant,
    open: Option<OpenLoop>,
    rec: Recorder,
    timer: Option<TimerFd>,
    timer_armed_ns: u64,
    /// Requests withdrawn from `sent` (refused unprocessed): the next sends re-send them.
    resend_owed: u64,
    /// Without `--requests`: the one request's HPACK block and body.
    block: Vec<u8>,
    body: Option<Bytes>,
    /// With `--requests`: each request's block, encoded as it is sent.
    template_block: Vec<u8>,
    first_conn: usize,
}

impl H2Loop {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        config: Arc<LoadConfig>,
        target: Arc<Target>,
        sched: Arc<Schedule>,
        stop: Arc<AtomicBool>,
        tx: Sender<Msg>,
        thread: usize,
        first_conn: usize,
        n_conns: usize,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let conns = (first_conn..first_conn + n_conns)
            .map(|i| Conn::new(target.http2_templates(i, &config.proto)))
            .collect();
        let budget = ReplyBudget::new(config.reply_budget_bytes, n_conns);
        let open = config.rate_rps.map(|_| OpenLoop::new(&config, thread));
        let rec = Recorder::new(sched.clone(), tx.clone(), thread, open.is_some());
        let (request, body) = target.http2_request(&config.proto);
        let mut block = Vec::new();
        encode_request(&request, &mut block);
        Ok(H2Loop {
            config,
            target,
            sched,
            stop,
            tx,
            poll,
            conns,
            scratch: vec![0; READ_CHUNK],
            budget,
            unread: Vec::new(),
            events: Vec::new(),
            t0: Instant::now(),
            open,
            rec,
            timer: None,
            timer_armed_ns: 0,
            resend_owed: 0,
            block,
            body,
            template_block: Vec::new(),
            first_conn,
        })
    }

    /// Connects, waits for the common start, runs the schedule, drains, reports.
    pub fn run(mut self, barrier: Arc<Barrier>, start: Arc<OnceLock<Instant>>) {
        let ready = self.connect_all();
        let ok = ready.is_ok();
        let _ = self.tx.send(Msg::Ready(ready));
        barrier.wait();
        let Some(&t0) = start.get() else { return };
        if !ok {
            return;
        }
        self.t0 = t0;
        if self.open.is_some() {
            self.timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK).ok();
            if let Some(t) = &self.timer {
                let fd = t.as_fd().as_raw_fd();
                let _ =
                    self.poll
                        .registry()
                        .register(&mut SourceFd(&fd), TIMER, Interest::READABLE);
            }
        }
        self.rec.start();
        self.event_loop();
        self.rec.finish();
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Opens every connection (paced by `--connect-rate`) and waits until each is
    /// established (TLS included) and has its preface queued; the seconds they took, summed.
    fn connect_all(&mut self) -> Result<f64, LoadError> {
        let started = Instant::now();
        let gap = self.config.connect.gap_per_thread(self.config.threads);
        let limit = self.config.timeout.min(Duration::from_secs(10));
        let n = self.conns.len();
        let mut opened_at: Vec<Instant> = Vec::with_capacity(n);
        let mut total_s = 0.0;
        let mut waiting = 0;
        let mut events = Events::with_capacity(1024);
        while opened_at.len() < n || waiting > 0 {
            let now = Instant::now();
            while opened_at.len() < n
                && gap.is_none_or(|g| now >= started + g * opened_at.len() as u32)
            {
                self.connect(opened_at.len(), 0)
                    .map_err(|source| self.connect_error(source))?;
                opened_at.push(Instant::now());
                waiting += 1;
            }
            let next_open = gap
                .filter(|_| opened_at.len() < n)
                .map(|g| started + g * opened_at.len() as u32);
            let deadline = opened_at
                .iter()
                .zip(&self.conns)
                .filter(|(_, c)| c.connecting)
                .map(|(at, _)| *at + limit)
                .min()
                .unwrap_or(now + limit);
            if now >= deadline {
                return Err(LoadError::ConnectTimeout {
                    addr: self.target.addr.to_string(),
                    established: self.conns.iter().filter(|c| c.h2.is_some()).count(),
                    connections: n,
                    limit_s: limit.as_secs_f64(),
                });
            }
            let wake = next_open.map_or(deadline, |o| o.min(deadline));
            self.poll
                .poll(&mut events, Some(wake.saturating_duration_since(now)))
                .map_err(|source| LoadError::Io {
                    context: "polling connections".into(),
                    source,
                })?;
            for ev in events.iter() {
                let i = ev.token().0;
                if i >= n || !self.conns[i].connecting {
                    continue;
                }
                match self.establish(i) {
                    Ok(true) => {
                        waiting -= 1;
                        total_s += opened_at[i].elapsed().as_secs_f64();
                    }
                    Ok(false) => {}
                    Err(source) => return Err(self.connect_error(source)),
                }
            }
        }
        Ok(total_s)
    }

    fn connect_error(&self, source: io::Error) -> LoadError {
        LoadError::Connect {
            addr: self.target.addr.to_string(),
            error: source,
        }
    }

    fn connect(&mut self, i: usize, now: u64) -> io::Result<()> {
        let source = crate::load::sources::source_of(&self.target.sources, self.first_conn + i);
        let mut stream = Stream::connect(self.target.addr, source, self.target.tls.as_ref())?;
        self.poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let conn = &mut self.conns[i];
        conn.close(&mut self.budget);
        conn.stream = Some(stream);
        conn.connecting = true;
        conn.opened_ns = now;
        Ok(())
    }

    /// Drives connection `i`'s connect (and TLS handshake); once established, checks ALPN
    /// and queues the HTTP/2 preface. Whether it is established.
    fn establish(&mut self, i: usize) -> io::Result<bool> {
        let stream = self.conns[i].stream.as_mut().expect("connecting stream");
        if !stream.established()? {
            return Ok(false);
        }
        if let Some(h) = stream.take_handshake() {
            self.rec.tls_handshake(h.duration_ns, h.resumed);
        }
        if let Some(tls) = &self.target.tls {
            let alpn = stream.alpn_protocol();
            if alpn != Some(super::H2_ALPN) {
                return Err(io::Error::other(super::not_h2(tls.host(), alpn)));
            }
        }
        let conn = &mut self.conns[i];
        conn.connecting = false;
        conn.h2 = Some(H2Conn::new(self.config.depth));
        Ok(true)
    }

    fn event_loop(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_housekeeping = 0;
        // Server SETTINGS may have come while the others connected (their edge is past).
        for i in 0..self.conns.len() {
            // The time now, not 0: a request's latency counts from when it was sent.
            let now = self.now_ns();
            self.on_event(i, false, now);
        }
        loop {
            let now = self.now_ns();
            if self.stop.load(Ordering::Relaxed) {
                self.rec.stop_at(now);
            }
            let conns = &self.conns;
            self.rec
                .cross_boundaries(now, || conns.iter().map(|c| in_flight(c) as u64).sum());
            if now >= self.rec.end_ns && (self.idle() || now >= self.drain_deadline_ns()) {
                return;
            }
            if now >= next_housekeeping {
                self.housekeeping(now);
                next_housekeeping = now + HOUSEKEEPING_NS;
            }
            self.pace(now);
            let wake_ns = self.next_wake_ns(now, next_housekeeping);
            let spinning = self.timer.is_some() && wake_ns > now && wake_ns <= now + SPIN_NS;
            let cpu_before_ns = if spinning { thread_cpu_ns() } else { 0 };
            if self.wait(&mut events, now, wake_ns).is_err() {
                return;
            }
            let now = self.now_ns();
            if spinning && events.is_empty() {
                // Polling for a request not yet due is waiting, not work.
                let spun_ns = thread_cpu_ns().saturating_sub(cpu_before_ns);
                self.rec.idle(spun_ns, now);
            }
            for ev in events.iter() {
                match ev.token() {
                    TIMER => self.drain_timer(),
                    Token(i) => self.on_event(i, ev.is_read_closed(), now),
                }
            }
            for (i, read_closed) in std::mem::take(&mut self.unread) {
                self.on_event(i, read_closed, now);
            }
            self.count_omitted(now);
        }
    }

    fn idle(&self) -> bool {
        self.conns.iter().all(|c| in_flight(c) == 0)
    }

    fn drain_deadline_ns(&self) -> u64 {
        self.rec.end_ns + self.sched.timeout_ns
    }

    fn next_wake_ns(&self, now: u64, housekeeping: u64) -> u64 {
        next_wake_ns(
            now,
            housekeeping,
            !self.unread.is_empty(),
            &self.rec,
            self.open.as_ref(),
        )
    }

    fn wait(&mut self, events: &mut Events, now: u64, wake_ns: u64) -> io::Result<()> {
        let alarm = (self.timer.as_ref(), &mut self.timer_armed_ns, self.t0);
        wait_until(&mut self.poll, alarm, events, now, wake_ns)
    }

    fn drain_timer(&mut self) {
        drain_timer(self.timer.as_ref(), &mut self.timer_armed_ns);
    }

    fn on_event(&mut self, i: usize, read_closed: bool, now: u64) {
        if i >= self.conns.len() || self.conns[i].stream.is_none() {
            return;
        }
        if self.conns[i].connecting {
            match self.establish(i) {
                // Read at once: the server's SETTINGS may have come with the handshake.
                Ok(true) => self.flush(i, now),
                Ok(false) => return,
                Err(e) => {
                    self.rec.error(connect_error_kind(&e), now);
                    self.drop_stream(i);
                    self.conns[i].retry_at_ns = now + HOUSEKEEPING_NS;
                    return;
                }
            }
        }
        if !self.read_frames(i, read_closed, now) {
            return;
        }
        if !self.replace_if_done(i, now) {
            self.refill(i, now);
        }
    }

    /// After a GOAWAY, once its last streams ended: a new connection in its place. Whether
    /// it was replaced.
    fn replace_if_done(&mut self, i: usize, now: u64) -> bool {
        let done = self.conns[i]
            .h2
            .as_ref()
            .is_some_and(|h| h.going_away() && h.active() == 0);
        if done {
            self.flush(i, now);
            self.drop_stream(i);
            self.reconnect(i, now);
        }
        done
    }

    /// Reads until the socket is drained (to its end when the peer closed), acting on the
    /// frames. False when the connection was dropped.
    fn read_frames(&mut self, i: usize, to_eof: bool, now: u64) -> bool {
        let mut scratch = std::mem::take(&mut self.scratch);
        let open = self.read_into(i, &mut scratch, to_eof, now);
        self.scratch = scratch;
        open
    }

    fn read_into(&mut self, i: usize, scratch: &mut [u8], to_eof: bool, now: u64) -> bool {
        for _ in 0..MAX_READS_PER_TURN {
            let stream = self.conns[i].stream.as_mut().expect("open stream");
            match stream.read(scratch) {
                Ok(0) => {
                    let kind = match &self.conns[i].h2 {
                        Some(h) if h.goaway_error() => "h2_goaway",
                        _ => "closed",
                    };
                    self.reset(i, kind, now);
                    return false;
                }
                Ok(n) => {
                    self.rec.bytes_in(n, now);
                    if !self.take_frames(i, &scratch[..n], now) {
                        return false;
                    }
                    let drained = self.conns[i].stream.as_ref().is_none_or(Stream::drained);
                    if n < scratch.len() && !to_eof && drained {
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.reset(i, error_kind(&e), now);
                    return false;
                }
            }
        }
        self.unread.push((i, to_eof));
        true
    }

    /// Hands `read` to the connection's HTTP/2 state and records the streams that ended.
    /// False when the connection failed (and was dropped).
    fn take_frames(&mut self, i: usize, read: &[u8], now: u64) -> bool {
        let h2 = self.conns[i].h2.as_mut().expect("an HTTP/2 connection");
        let mut events = std::mem::take(&mut self.events);
        let result = h2.receive(read, &mut events);
        for e in events.drain(..) {
            self.ended(e, now);
        }
        self.events = events;
        // Over its share with nothing left to lend: the connection ends as for a protocol
        // error, which frees what it held.
        let result = result.and_then(|()| {
            self.conns[i]
                .charge(&mut self.budget)
                .map_err(ConnError::over_budget)
        });
        if let Err(e) = result {
            if let Some(h2) = self.conns[i].h2.as_mut() {
                h2.goaway(e.code);
            }
            self.flush(i, now);
            self.reset(i, e.kind, now);
            return false;
        }
        true
    }

    /// Records how one stream ended.
    fn ended(&mut self, e: Event<Tag>, now: u64) {
        match e {
            Event::Done(tag, status) => match crate::load::protocol::http::status_error(status) {
                None => self.rec.success(
                    now.saturating_sub(tag.intended_ns),
                    now.saturating_sub(tag.sent_ns),
                    now,
                ),
                Some(kind) => self.rec.error(kind, now),
            },
            Event::Refused(tag) => {
                self.rec.withdraw(1);
                self.resend_owed += 1;
                if let Some(open) = &mut self.open {
                    open.resend.push_front(tag.intended_ns);
                }
            }
            Event::Failed(_, kind) => self.rec.error(kind, now),
        }
    }

    /// Keeps the connection's streams full (closed loop) or offers it to the backlog, then
    /// writes what was queued.
    fn refill(&mut self, i: usize, now: u64) {
        if self.open.is_some() {
            self.offer_free(i);
            self.dispatch(now);
        } else if now < self.rec.end_ns {
            let depth = self.config.depth;
            while self.conns[i].h2.as_ref().is_some_and(|h| h.can_open(depth)) {
                self.send(i, now, now);
            }
        }
        self.flush(i, now);
    }

    /// Opens one stream on connection `i` with the next request.
    fn send(&mut self, i: usize, intended_ns: u64, now: u64) {
        let tag = Tag {
            intended_ns,
            sent_ns: now,
        };
        let conn = &mut self.conns[i];
        let h2 = conn.h2.as_mut().expect("an HTTP/2 connection");
        match conn.templates.as_mut() {
            None => h2.open(&self.block, self.body.clone(), tag),
            Some(t) => {
                let (request, body) = t.next_request();
                self.template_block.clear();
                encode_request(&request, &mut self.template_block);
                h2.open(&self.template_block, body, tag);
            }
        }
        self.rec.sent();
        if self.resend_owed > 0 {
            self.resend_owed -= 1;
            self.rec.resent();
        }
    }

    fn flush(&mut self, i: usize, now: u64) {
        let conn = &mut self.conns[i];
        let (Some(stream), Some(h2)) = (conn.stream.as_mut(), conn.h2.as_mut()) else {
            return;
        };
        match stream.flush_pending() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => return self.reset(i, error_kind(&e), now),
        }
        while conn.wpos < h2.out.len() {
            match stream.write(&h2.out[conn.wpos..]) {
                Ok(n) => {
                    conn.wpos += n;
                    h2.written(conn.wpos);
                    self.rec.bytes_out(n, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.reset(i, error_kind(&e), now),
            }
        }
        h2.out.clear();
        conn.wpos = 0;
        if h2.out.capacity() > KEEP_WBUF_BYTES {
            h2.out = Vec::with_capacity(4096);
        }
    }

    /// Drops a broken connection: its streams in flight fail with `kind` (a protocol error
    /// costs one even with none in flight); it is reopened.
    fn reset(&mut self, i: usize, kind: &'static str, now: u64) {
        let mut lost = Vec::new();
        if let Some(h2) = self.conns[i].h2.as_mut() {
            h2.abandon(&mut lost);
        }
        let n = if kind == "closed" || kind == "h2_goaway" {
            lost.len()
        } else {
            lost.len().max(1)
        };
        for _ in 0..n {
            self.rec.error(kind, now);
        }
        self.drop_stream(i);
        self.reconnect(i, now);
    }

    fn drop_stream(&mut self, i: usize) {
        if let Some(mut s) = self.conns[i].stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        self.conns[i].close(&mut self.budget);
    }

    fn reconnect(&mut self, i: usize, now: u64) {
        if now >= self.rec.end_ns {
            return;
        }
        if self.connect(i, now).is_err() {
            self.rec.error("connect", now);
            self.conns[i].retry_at_ns = now + HOUSEKEEPING_NS;
        }
    }

    /// Stream timeouts, servers that never sent their SETTINGS, reconnection retries.
    fn housekeeping(&mut self, now: u64) {
        let timeout_ns = self.sched.timeout_ns;
        let mut expired = Vec::new();
        for i in 0..self.conns.len() {
            let conn = &mut self.conns[i];
            if conn.stream.is_none() {
                if now >= conn.retry_at_ns && now < self.rec.end_ns {
                    self.reconnect(i, now);
                }
                continue;
            }
            let Some(h2) = conn.h2.as_mut() else {
                continue;
            };
            if !h2.ready() && now.saturating_sub(conn.opened_ns) >= timeout_ns {
                self.reset(i, "timeout", now);
                continue;
            }
            h2.cancel_where(
                |t| now.saturating_sub(t.sent_ns) >= timeout_ns,
                &mut expired,
            );
            for _ in expired.drain(..) {
                self.rec.error("timeout", now);
            }
            if !self.replace_if_done(i, now) {
                self.refill(i, now);
            }
        }
    }

    /// Open loop: releases the requests whose time has come and sends what it can.
    fn pace(&mut self, now: u64) {
        let end = self.rec.end_ns;
        let Some(open) = &mut self.open else { return };
        while now < end && open.next_due_ns() <= now {
            let lag_ns = now - open.next_due_ns();
            let late = lag_ns > open.late_threshold_ns();
            self.rec.scheduled_send(lag_ns, late, now);
            open.release();
        }
        self.dispatch(now);
    }

    /// Counts the released requests still waiting once the replies that had arrived were
    /// read: they had no free stream, so they are omitted (the server's delay).
    fn count_omitted(&mut self, now: u64) {
        if let Some(open) = &mut self.open {
            self.rec.omitted(open.newly_waiting() as usize, now);
        }
    }

    fn offer_free(&mut self, i: usize) {
        let depth = self.config.depth;
        let conn = &mut self.conns[i];
        if let Some(open) = &mut self.open {
            if !conn.in_free_queue && conn.h2.as_ref().is_some_and(|h| h.can_open(depth)) {
                conn.in_free_queue = true;
                open.free.push_back(i);
            }
        }
    }

    /// Sends waiting requests on connections with a stream free.
    fn dispatch(&mut self, now: u64) {
        let depth = self.config.depth;
        let mut touched = Vec::new();
        loop {
            let Some(open) = &mut self.open else { return };
            let (true, Some(&i)) = (open.has_waiting(), open.free.front()) else {
                break;
            };
            let conn = &mut self.conns[i];
            if !conn.h2.as_ref().is_some_and(|h| h.can_open(depth)) {
                conn.in_free_queue = false;
                open.free.pop_front();
                continue;
            }
            let intended = open.take_waiting();
            self.send(i, intended, now);
            if touched.last() != Some(&i) {
                touched.push(i);
            }
        }
        for i in touched {
            self.flush(i, now);
        }
    }
}

/// Streams in flight on a connection.
fn in_flight(c: &Conn) -> usize {
    c.h2.as_ref().map_or(0, H2Conn::active)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADERS: u8 = 0x1;
    const SETTINGS: u8 = 0x4;
    const CONTINUATION: u8 = 0x9;
    const END_HEADERS: u8 = 0x4;
    const END_STREAM: u8 = 0x1;
    /// HPACK: `:status 200`.
    const STATUS_200: u8 = 0x88;
    const KIB: usize = 1024;

    fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let len = (payload.len() as u32).to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], ty, flags];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A connection whose server sent its SETTINGS, with stream 1 open.
    fn conn_with_a_stream() -> Conn {
        let mut h2 = H2Conn::new(1);
        h2.receive(&frame(SETTINGS, 0, 0, &[]), &mut Vec::new())
            .unwrap();
        let tag = Tag {
            intended_ns: 0,
            sent_ns: 0,
        };
        h2.open(&[0x82], None, tag);
        let mut c = Conn::new(None);
        c.h2 = Some(h2);
        c
    }

    /// The last frame of the header block [`a_block_begun`] begins.
    fn last_frame() -> Vec<u8> {
        frame(CONTINUATION, END_HEADERS, 1, &[STATUS_200; 16 * KIB - 1])
    }

    /// The server's answer to stream 1 begun: a header block (of 64 KiB when whole) of
    /// 1 + 3 × 16 KiB so far, and half of its last frame (the read cut it).
    fn a_block_begun() -> Vec<u8> {
        let mut bytes = frame(HEADERS, END_STREAM, 1, &[STATUS_200]);
        for _ in 0..3 {
            bytes.extend(frame(CONTINUATION, 0, 1, &[STATUS_200; 16 * KIB]));
        }
        bytes.extend_from_slice(&last_frame()[..8 * KIB]);
        bytes
    }

    fn take(c: &mut Conn, budget: &mut ReplyBudget, bytes: &[u8]) -> Result<(), &'static str> {
        let h2 = c.h2.as_mut().unwrap();
        h2.receive(bytes, &mut Vec::new()).unwrap();
        c.charge(budget)
    }

    /// No share (a million connections): whatever a connection holds is lent from the pool,
    /// which is the whole budget.
    fn pool_only(bytes: usize) -> ReplyBudget {
        ReplyBudget::new(bytes, 1_000_000)
    }

    #[test]
    fn a_connection_dropped_mid_block_gives_back_what_it_held() {
        let mut budget = pool_only(1 << 20);
        let mut c = conn_with_a_stream();
        take(&mut c, &mut budget, &a_block_begun()).unwrap();
        // Room for the 64-KiB block, and for the whole cut frame.
        assert!(c.held >= 64 * KIB + 16 * KIB, "{}", c.held);
        assert!(c.held <= super::super::conn::MAX_HELD_BYTES, "{}", c.held);
        assert_eq!(budget.lent_bytes(), c.held);
        c.close(&mut budget);
        assert_eq!((c.held, budget.lent_bytes()), (0, 0));
    }

    #[test]
    fn a_block_made_whole_gives_back_what_it_held() {
        let mut budget = pool_only(1 << 20);
        let mut c = conn_with_a_stream();
        let begun = a_block_begun();
        take(&mut c, &mut budget, &begun).unwrap();
        assert!(budget.lent_bytes() > 0);
        take(&mut c, &mut budget, &last_frame()[8 * KIB..]).unwrap();
        assert_eq!((c.held, budget.lent_bytes()), (0, 0));
        assert_eq!(c.h2.as_ref().unwrap().active(), 0, "the stream ended");
    }

    #[test]
    fn a_connection_over_the_budget_is_refused_until_another_gives_back() {
        // Room for one begun block (about 64 KiB), not two.
        let mut budget = pool_only(100 * KIB);
        let (mut a, mut b) = (conn_with_a_stream(), conn_with_a_stream());
        take(&mut a, &mut budget, &a_block_begun()).unwrap();
        assert_eq!(
            take(&mut b, &mut budget, &a_block_begun()),
            Err("reply_over_budget")
        );
        // Refused, b holds what it held before (nothing) until it is closed.
        assert_eq!((b.held, budget.lent_bytes()), (0, a.held));
        b.close(&mut budget);
        a.close(&mut budget);
        assert_eq!(budget.lent_bytes(), 0);
        let mut b = conn_with_a_stream();
        take(&mut b, &mut budget, &a_block_begun()).unwrap();
        assert_eq!(budget.lent_bytes(), b.held);
    }
}
