//! One generator thread: its connections, its event loop, its histograms.
//!
//! Per request the loop makes one `write` and one `read` at most: sockets are registered
//! once, edge-triggered, for both directions (no `epoll_ctl` per request, unlike wrk), a
//! read shorter than the buffer means the socket is drained, and the replies that one read
//! brings are answered by one write.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

use super::arrivals::{ConnRamp, Cursor, RateCurve};
use super::budget::ReplyBudget;
use super::protocol::{Protocol, Reply};
use super::recorder::{thread_cpu_ns, Msg, Recorder, Schedule};
use super::target::Target;
use super::transport::{connect_error_kind, error_kind, Stream};
use super::{LoadConfig, LoadError};

const TIMER: Token = Token(usize::MAX);
/// The thread's one read buffer: every connection reads into it, and only the bytes of a reply
/// cut by the end of a read stay with the connection (in `Conn::partial`). 64 KiB per thread,
/// not per connection: an idle or keep-alive connection holds no buffer at all.
const READ_CHUNK: usize = 64 * 1024;
/// Reads one connection may make in a row (1 MiB) before the others' turn: a server sending
/// without pause must not hold the thread (its per-second lines, timeouts, other connections).
const MAX_READS_PER_TURN: usize = 16;
/// A write buffer grown past this (a deep pipeline of big requests) is freed once flushed.
const KEEP_WBUF_BYTES: usize = 16 * 1024;
/// Open loop: the timer is set this much before a request is due and the loop polls without
/// sleeping for the rest, because a timerfd wake-up comes tens of µs late on a VM and that
/// lateness would count as the server's latency.
pub(super) const SPIN_NS: u64 = 50_000;
/// A send this much after its due time (or one schedule interval, if longer) with a
/// connection free was late because of the generator, not the server.
const LATE_SEND_NS: u64 = 100_000;
/// How often timeouts and reconnections are looked after.
const HOUSEKEEPING_NS: u64 = 20_000_000;

/// A request on the wire.
struct Pending {
    intended_ns: u64,
    sent_ns: u64,
}

struct Conn {
    stream: Option<Stream>,
    proto: Box<dyn Protocol>,
    /// The start of a reply a read cut short; empty (no allocation) between replies.
    partial: Vec<u8>,
    /// `partial`'s capacity as the thread's [`ReplyBudget`] has it.
    held: usize,
    /// Requests not yet written; sized to the requests, not reserved up front.
    wbuf: Vec<u8>,
    wpos: usize,
    pending: VecDeque<Pending>,
    connecting: bool,
    /// The server announced it closes after its last reply: write nothing more.
    closing: bool,
    retry_at_ns: u64,
    in_free_queue: bool,
}

/// Everything one thread owns.
pub(super) struct Worker {
    config: Arc<LoadConfig>,
    target: Arc<Target>,
    sched: Arc<Schedule>,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    poll: Poll,
    conns: Vec<Conn>,
    /// The read buffer all this thread's connections share (see [`READ_CHUNK`]).
    scratch: Vec<u8>,
    /// What the connections' `partial` buffers may hold together.
    budget: ReplyBudget,
    /// Connections whose turn ended with bytes still unread (and whether the peer had
    /// closed): read again before the next wait, since an edge-triggered socket will not say.
    unread: Vec<(usize, bool)>,
    t0: Instant,
    open: Option<OpenLoop>,
    rec: Recorder,
    timer: Option<TimerFd>,
    timer_armed_ns: u64,
    /// Requests withdrawn from `sent` when a closing reply left them unread: the next writes,
    /// up to this many, are their re-sends.
    resend_owed: u64,
    /// Closed loop under `--ramp`: which connections work when.
    ramp: Option<ConnRamp>,
    /// Index of this thread's first connection over the whole load (picks its source).
    first_conn: usize,
}

/// Open-loop pacing. Request `i` of the schedule is due at a time the arrival cursors
/// compute from `i` alone, so the requests waiting for a free connection are the index range
/// `dispatched..issued`: nothing grows with overload. The HTTP/2 threads pace with it too.
pub(super) struct OpenLoop {
    /// Due time of request `issued` (the next to release).
    issue: Cursor,
    /// Due time of request `dispatched` (the next waiting one to send).
    dispatch: Cursor,
    /// The mean gap at the final rate, ns.
    period_ns: f64,
    /// Requests released by the schedule so far.
    issued: u64,
    /// Requests of the schedule sent so far.
    dispatched: u64,
    /// Requests below this index that waited were counted as omitted already.
    counted_upto: u64,
    /// Intended times of requests the server never read (it closed first), sent again
    /// before the schedule's: at most one pipeline per close, and already counted.
    pub(super) resend: VecDeque<u64>,
    pub(super) free: VecDeque<usize>,
}

impl OpenLoop {
    pub(super) fn new(config: &LoadConfig, thread: usize) -> Self {
        let rate = config.rate_rps.unwrap_or(0.0);
        let curve = RateCurve::new(rate, config.ramp.as_ref(), config.warmup, config.threads);
        let seed = config.proto.seed.wrapping_mul(0x9E37_79B9) ^ (0x5EED_0000 + thread as u64);
        let cursor = Cursor::new(curve, config.arrivals, thread, config.threads, seed);
        OpenLoop {
            issue: cursor.clone(),
            dispatch: cursor,
            period_ns: curve.final_period_ns(),
            issued: 0,
            dispatched: 0,
            counted_upto: 0,
            resend: VecDeque::new(),
            free: VecDeque::new(),
        }
    }

    pub(super) fn next_due_ns(&self) -> u64 {
        self.issue.due_ns()
    }

    /// Releases the next request of the schedule.
    pub(super) fn release(&mut self) {
        self.issued += 1;
        self.issue.advance();
    }

    pub(super) fn has_waiting(&self) -> bool {
        !self.resend.is_empty() || self.dispatched < self.issued
    }

    /// Takes the next waiting request's intended time.
    pub(super) fn take_waiting(&mut self) -> u64 {
        if let Some(intended) = self.resend.pop_front() {
            return intended;
        }
        self.dispatched += 1;
        let due = self.dispatch.due_ns();
        self.dispatch.advance();
        due
    }

    /// Requests released but neither sent nor counted yet.
    pub(super) fn has_uncounted(&self) -> bool {
        self.issued > self.counted_upto.max(self.dispatched)
    }

    /// Counts the scheduled requests left waiting that were not counted before.
    pub(super) fn newly_waiting(&mut self) -> u64 {
        self.newly_waiting_beyond(0)
    }

    /// The same, but the next `taken` waiting requests are about to be sent (HTTP/2: streams
    /// already waiting for them), so they did not wait.
    pub(super) fn newly_waiting_beyond(&mut self, taken: u64) -> u64 {
        let from = self.counted_upto.max(self.dispatched + taken);
        self.counted_upto = self.issued.max(self.counted_upto);
        self.issued.saturating_sub(from)
    }

    pub(super) fn late_threshold_ns(&self) -> u64 {
        LATE_SEND_NS.max(self.period_ns as u64)
    }
}

impl Worker {
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
        rate_rps: Option<f64>,
    ) -> io::Result<Self> {
        let poll = Poll::new()?;
        let conns = (first_conn..first_conn + n_conns)
            .map(|i| Conn {
                stream: None,
                proto: target.connection(i, &config.proto),
                partial: Vec::new(),
                held: 0,
                wbuf: Vec::new(),
                wpos: 0,
                pending: VecDeque::with_capacity(config.depth),
                connecting: false,
                closing: false,
                retry_at_ns: 0,
                in_free_queue: false,
            })
            .collect();
        let open = rate_rps.map(|_| OpenLoop::new(&config, thread));
        let ramp = ConnRamp::new(&config, thread);
        let rec = Recorder::new(sched.clone(), tx.clone(), thread, open.is_some());
        let budget = ReplyBudget::new(config.reply_budget_bytes, n_conns);
        Ok(Worker {
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
            t0: Instant::now(),
            open,
            rec,
            timer: None,
            timer_armed_ns: 0,
            resend_owed: 0,
            ramp,
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

    /// Opens every connection (paced by `--connect-rate`) and waits until all are
    /// established; the seconds each took from its own connect, summed.
    fn connect_all(&mut self) -> Result<f64, LoadError> {
        let started = Instant::now();
        let gap = self.config.connect.gap_per_thread(self.config.threads);
        let limit = self.config.timeout.min(Duration::from_secs(10));
        let n = self.conns.len();
        let mut opened_at = Vec::with_capacity(n);
        let mut total_s = 0.0;
        let mut waiting = 0;
        let mut oldest = 0;
        let mut events = Events::with_capacity(1024);
        while opened_at.len() < n || waiting > 0 {
            let now = Instant::now();
            // Open every connection due by now (all of them at once when not paced).
            while opened_at.len() < n
                && gap.is_none_or(|g| now >= started + g * opened_at.len() as u32)
            {
                self.connect(opened_at.len())
                    .map_err(|source| self.connect_error(source))?;
                opened_at.push(Instant::now());
                waiting += 1;
            }
            let next_open = gap
                .filter(|_| opened_at.len() < n)
                .map(|g| started + g * opened_at.len() as u32);
            let deadline = self.connect_deadline(&opened_at, &mut oldest, limit)?;
            let wake = next_open.map_or(deadline, |o| o.min(deadline));
            self.poll
                .poll(&mut events, Some(wake.saturating_duration_since(now)))
                .map_err(|source| io_error("polling connections", source))?;
            for ev in events.iter() {
                let i = ev.token().0;
                let conn = &mut self.conns[i];
                if !conn.connecting {
                    continue;
                }
                let stream = conn.stream.as_mut().expect("connecting stream");
                match stream.established() {
                    Ok(true) => {
                        conn.connecting = false;
                        waiting -= 1;
                        total_s += opened_at[i].elapsed().as_secs_f64();
                        if let Some(h) = stream.take_handshake() {
                            self.rec.tls_handshake(h.duration_ns, h.resumed);
                        }
                    }
                    Ok(false) => {}
                    Err(source) => return Err(self.connect_error(source)),
                }
            }
        }
        Ok(total_s)
    }

    /// When the oldest connection still connecting times out (`limit` after its connect);
    /// an error once that is past. `oldest` is where the search starts (connections before it are established: they are
    /// opened in index order, so it only moves forward); it is left at the one found.
    fn connect_deadline(
        &self,
        opened_at: &[Instant],
        oldest: &mut usize,
        limit: Duration,
    ) -> Result<Instant, LoadError> {
        while *oldest < opened_at.len() && !self.conns[*oldest].connecting {
            *oldest += 1;
        }
        let Some(opened) = opened_at.get(*oldest) else {
            return Ok(Instant::now() + limit);
        };
        let deadline = *opened + limit;
        if Instant::now() < deadline {
            return Ok(deadline);
        }
        let established = (0..opened_at.len())
            .filter(|&i| !self.conns[i].connecting)
            .count();
        Err(LoadError::ConnectTimeout {
            addr: self.target.addr.to_string(),
            established,
            connections: self.conns.len(),
            limit_s: limit.as_secs_f64(),
        })
    }

    fn connect_error(&self, source: io::Error) -> LoadError {
        LoadError::Connect {
            addr: self.target.addr.to_string(),
            error: source,
        }
    }

    fn connect(&mut self, i: usize) -> io::Result<()> {
        let source = super::sources::source_of(&self.target.sources, self.first_conn + i);
        let mut stream = Stream::connect(self.target.addr, source, self.target.tls.as_ref())?;
        self.poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let conn = &mut self.conns[i];
        conn.stream = Some(stream);
        conn.connecting = true;
        conn.closing = false;
        conn.partial = Vec::new();
        conn.wbuf.clear();
        conn.wpos = 0;
        self.account(i);
        Ok(())
    }

    fn event_loop(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_housekeeping = 0;
        for i in 0..self.conns.len() {
            self.refill(i, 0);
        }
        loop {
            let now = self.now_ns();
            if self.stop.load(Ordering::Relaxed) {
                self.rec.stop_at(now);
            }
            let conns = &self.conns;
            self.rec
                .cross_boundaries(now, || conns.iter().map(|c| c.pending.len() as u64).sum());
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
        self.conns.iter().all(|c| c.pending.is_empty())
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

    /// `read_closed`: the peer's FIN (or a reset) came with this event; it may have come with
    /// the last bytes, in which case no later event would tell.
    fn on_event(&mut self, i: usize, read_closed: bool, now: u64) {
        if i >= self.conns.len() || self.conns[i].stream.is_none() {
            return;
        }
        if self.conns[i].connecting {
            self.on_connected(i, now);
            return;
        }
        self.read_replies(i, read_closed, now);
        if self.conns[i].stream.is_some() && !self.conns[i].connecting {
            self.refill(i, now);
        }
    }

    fn on_connected(&mut self, i: usize, now: u64) {
        let stream = self.conns[i].stream.as_mut().expect("stream");
        match stream.established() {
            Ok(true) => {
                if let Some(h) = stream.take_handshake() {
                    self.rec.tls_handshake(h.duration_ns, h.resumed);
                }
                self.conns[i].connecting = false;
                self.refill(i, now);
            }
            Ok(false) => {}
            Err(e) => {
                self.count_error(connect_error_kind(&e), now);
                self.drop_stream(i);
                self.conns[i].retry_at_ns = now + HOUSEKEEPING_NS;
            }
        }
    }

    /// Reads until the socket is drained, completing every whole reply; when the peer closed,
    /// until the end of the stream (a short read does not mean drained then: the FIN is
    /// still to be read, and an edge-triggered socket would not tell again).
    fn read_replies(&mut self, i: usize, read_closed: bool, now: u64) {
        let mut scratch = std::mem::take(&mut self.scratch);
        self.read_into(i, &mut scratch, read_closed, now);
        self.scratch = scratch;
    }

    fn read_into(&mut self, i: usize, scratch: &mut [u8], to_eof: bool, now: u64) {
        for _ in 0..MAX_READS_PER_TURN {
            let stream = self.conns[i].stream.as_mut().expect("open stream");
            match stream.read(scratch) {
                Ok(0) => return self.reset(i, "closed", now),
                Ok(n) => {
                    self.rec.bytes_in(n, now);
                    if !self.take_bytes(i, &scratch[..n], now) {
                        return;
                    }
                    // A TLS stream may hold decrypted bytes the socket read already brought.
                    let drained = self.conns[i].stream.as_ref().is_none_or(Stream::drained);
                    if n < scratch.len() && !to_eof && drained {
                        return;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.reset(i, error_kind(&e), now),
            }
        }
        self.unread.push((i, to_eof));
    }

    /// Completes the whole replies that `read` (just received) ends, keeping the start of a
    /// cut one. False when the connection was reset or reopened.
    fn take_bytes(&mut self, i: usize, read: &[u8], now: u64) -> bool {
        if self.conns[i].partial.is_empty() {
            // The common case: whole replies straight from the thread's buffer, no copy.
            let Some(used) = self.parse_replies(i, read, now) else {
                return false;
            };
            if used < read.len() {
                let rest = &read[used..];
                match self.budget.grow(0, rest.len(), rest.len()) {
                    Ok(_) => self.conns[i].partial.extend_from_slice(rest),
                    Err(kind) => {
                        self.reset(i, kind, now);
                        return false;
                    }
                }
                self.account(i);
            }
            return true;
        }
        let mut buf = std::mem::take(&mut self.conns[i].partial);
        let need = buf.len() + read.len();
        if need > buf.capacity() {
            // Amortised growth (doubling) as far as the budget allows, so what is accounted
            // is what is allocated.
            let held = self.conns[i].held;
            match self.budget.grow(held, need, buf.capacity() * 2) {
                Ok(cap) => buf.reserve_exact(cap - buf.len()),
                Err(kind) => {
                    self.conns[i].partial = buf;
                    self.reset(i, kind, now);
                    return false;
                }
            }
        }
        buf.extend_from_slice(read);
        let Some(used) = self.parse_replies(i, &buf, now) else {
            return false;
        };
        if used < buf.len() {
            buf.drain(..used);
            // Freed once whole (below); until then it holds one reply's bytes at most.
            self.conns[i].partial = buf;
        }
        self.account(i);
        true
    }

    /// Tells the budget what connection `i`'s reply buffer holds now.
    fn account(&mut self, i: usize) {
        let conn = &mut self.conns[i];
        let cap = conn.partial.capacity();
        if cap != conn.held {
            self.budget.held(conn.held, cap);
            conn.held = cap;
        }
    }

    /// Completes the whole replies at the front of `buf`: the bytes they used, or `None`
    /// when the connection was reset or reopened.
    fn parse_replies(&mut self, i: usize, buf: &[u8], now: u64) -> Option<usize> {
        let mut at = 0;
        while at < buf.len() {
            match self.conns[i].proto.parse_reply(&buf[at..]) {
                Reply::Incomplete => break,
                Reply::Invalid(kind) => {
                    self.reset(i, kind, now);
                    return None;
                }
                Reply::Done {
                    len,
                    error,
                    close,
                    found,
                } => {
                    at += len;
                    let Some(p) = self.conns[i].pending.pop_front() else {
                        self.reset(i, "unexpected_reply", now);
                        return None;
                    };
                    self.complete(&p, now, error);
                    if let Some(found) = found {
                        self.rec.lookup(found, now);
                    }
                    if close {
                        self.reopen_after_close(i, now);
                        return None;
                    }
                }
            }
        }
        Some(at)
    }

    fn complete(&mut self, p: &Pending, now: u64, error: Option<&'static str>) {
        match error {
            Some(kind) => self.rec.error(kind, now),
            None => self.rec.success(
                now.saturating_sub(p.intended_ns),
                now.saturating_sub(p.sent_ns),
                now,
            ),
        }
    }

    fn count_error(&mut self, kind: &str, now: u64) {
        self.rec.error(kind, now);
    }

    /// Keeps the connection's pipeline full (closed loop) or offers it to the backlog.
    fn refill(&mut self, i: usize, now: u64) {
        if self.open.is_some() {
            self.offer_free(i);
            self.dispatch(now);
        } else if now < self.rec.end_ns {
            let depth = self.config.depth;
            let active = self.ramp.as_ref().is_none_or(|r| r.active(i, now));
            while active && usable(&self.conns[i]) && self.conns[i].pending.len() < depth {
                self.send(i, now, now);
            }
        }
        self.flush(i, now);
    }

    fn send(&mut self, i: usize, intended_ns: u64, now: u64) {
        let conn = &mut self.conns[i];
        let req = conn.proto.next_request();
        conn.wbuf.extend_from_slice(req);
        conn.pending.push_back(Pending {
            intended_ns,
            sent_ns: now,
        });
        self.count_sent();
    }

    /// One request written; the first `resend_owed` ones re-send withdrawn requests.
    fn count_sent(&mut self) {
        self.rec.sent();
        if self.resend_owed > 0 {
            self.resend_owed -= 1;
            self.rec.resent();
        }
    }

    fn flush(&mut self, i: usize, now: u64) {
        let conn = &mut self.conns[i];
        let Some(stream) = conn.stream.as_mut() else {
            return;
        };
        if conn.connecting {
            return;
        }
        match stream.flush_pending() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => return self.reset(i, error_kind(&e), now),
        }
        while conn.wpos < conn.wbuf.len() && !conn.connecting {
            match stream.write(&conn.wbuf[conn.wpos..]) {
                Ok(n) => {
                    conn.wpos += n;
                    self.rec.bytes_out(n, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.reset(i, error_kind(&e), now),
            }
        }
        if conn.wpos == conn.wbuf.len() {
            conn.wbuf.clear();
            conn.wpos = 0;
            if conn.wbuf.capacity() > KEEP_WBUF_BYTES {
                conn.wbuf = Vec::new();
            }
        }
    }

    /// The server said it closes: requests written after that reply were never read by it,
    /// so they leave `sent` and are sent again on a new connection (not counted as errors).
    fn reopen_after_close(&mut self, i: usize, now: u64) {
        let unanswered: Vec<Pending> = self.conns[i].pending.drain(..).collect();
        self.rec.withdraw(unanswered.len() as u64);
        self.resend_owed += unanswered.len() as u64;
        if let Some(open) = &mut self.open {
            for p in unanswered.into_iter().rev() {
                open.resend.push_front(p.intended_ns);
            }
        }
        self.drop_stream(i);
        self.reconnect(i, now);
    }

    /// Drops a broken connection: its requests in flight fail with `kind`; it is reopened.
    fn reset(&mut self, i: usize, kind: &'static str, now: u64) {
        let in_flight = self.conns[i].pending.len();
        // An idle connection closed by the server lost nothing; garbage always costs one.
        let lost = if kind == "closed" {
            in_flight
        } else {
            in_flight.max(1)
        };
        self.conns[i].pending.clear();
        for _ in 0..lost {
            self.count_error(kind, now);
        }
        self.drop_stream(i);
        self.reconnect(i, now);
    }

    fn drop_stream(&mut self, i: usize) {
        if let Some(mut s) = self.conns[i].stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        self.conns[i].connecting = false;
        self.conns[i].partial = Vec::new();
        self.conns[i].proto.reset();
        self.account(i);
    }

    fn reconnect(&mut self, i: usize, now: u64) {
        if now >= self.rec.end_ns {
            return;
        }
        if self.connect(i).is_err() {
            self.count_error("connect", now);
            self.conns[i].retry_at_ns = now + HOUSEKEEPING_NS;
        }
    }

    /// Timeouts, reconnection retries, connections a ramp has just let in.
    fn housekeeping(&mut self, now: u64) {
        for i in 0..self.conns.len() {
            if self.ramp.is_some() && self.conns[i].pending.is_empty() {
                self.refill(i, now);
            }
            let conn = &self.conns[i];
            if conn.stream.is_none() {
                if now >= conn.retry_at_ns && now < self.rec.end_ns {
                    self.reconnect(i, now);
                }
                continue;
            }
            let oldest = conn.pending.front().map(|p| p.sent_ns);
            if oldest.is_some_and(|t| now.saturating_sub(t) >= self.sched.timeout_ns) {
                self.reset(i, "timeout", now);
            }
        }
    }

    /// Open loop: releases the requests whose time has come and sends what it can.
    fn pace(&mut self, now: u64) {
        let end = self.rec.end_ns;
        let Some(open) = &mut self.open else { return };
        while now < end && open.next_due_ns() <= now {
            // The timer wakes the loop before each due time, so a request the loop gets to
            // late was delayed by the generator (busy or descheduled), whatever the
            // connections: a late send.
            let lag_ns = now - open.next_due_ns();
            let late = lag_ns > open.late_threshold_ns();
            self.rec.scheduled_send(lag_ns, late, now);
            open.release();
        }
        self.dispatch(now);
    }

    /// Counts the released requests still waiting once the replies that had arrived were
    /// read: they had no free connection, so they are omitted (the server's delay), not
    /// late sends (the generator's).
    fn count_omitted(&mut self, now: u64) {
        if let Some(open) = &mut self.open {
            self.rec.omitted(open.newly_waiting() as usize, now);
        }
    }

    fn offer_free(&mut self, i: usize) {
        let depth = self.config.depth;
        let conn = &mut self.conns[i];
        if let Some(open) = &mut self.open {
            if !conn.in_free_queue && usable(conn) && conn.pending.len() < depth {
                conn.in_free_queue = true;
                open.free.push_back(i);
            }
        }
    }

    /// Sends waiting requests on free connections.
    fn dispatch(&mut self, now: u64) {
        let depth = self.config.depth;
        let Some(open) = &mut self.open else { return };
        let mut touched = Vec::new();
        while let (true, Some(&i)) = (open.has_waiting(), open.free.front()) {
            let conn = &mut self.conns[i];
            if !usable(conn) || conn.pending.len() >= depth {
                conn.in_free_queue = false;
                open.free.pop_front();
                continue;
            }
            let intended = open.take_waiting();
            conn.wbuf.extend_from_slice(conn.proto.next_request());
            conn.pending.push_back(Pending {
                intended_ns: intended,
                sent_ns: now,
            });
            touched.push(i);
        }
        for _ in 0..touched.len() {
            self.count_sent();
        }
        touched.dedup();
        for i in touched {
            self.flush(i, now);
        }
    }
}

fn usable(conn: &Conn) -> bool {
    conn.stream.is_some() && !conn.connecting && !conn.closing
}

fn io_error(context: &str, source: io::Error) -> LoadError {
    LoadError::Io {
        context: context.to_string(),
        source,
    }
}

/// The CLOCK_MONOTONIC reading of an `Instant` (they share the clock on Linux).
/// When an event loop must wake next: at once with sockets still to read, else at the
/// housekeeping, the next second's boundary or (open loop) the next request's due time.
/// Shared by the HTTP/1.1 and HTTP/2 loops.
pub(super) fn next_wake_ns(
    now: u64,
    housekeeping: u64,
    unread: bool,
    rec: &Recorder,
    open: Option<&OpenLoop>,
) -> u64 {
    if unread {
        return now;
    }
    let mut wake = housekeeping;
    if let Some(b) = rec.next_boundary_ns() {
        wake = wake.min(b);
    }
    if let Some(open) = open {
        if now < rec.end_ns {
            wake = wake.min(open.next_due_ns());
        }
        // Replies already in the sockets free connections: read them before judging
        // whether the requests released now had none.
        if open.has_uncounted() {
            wake = now;
        }
    }
    wake.max(now)
}

/// An open-loop thread's timerfd, the alarm it is armed for (ns after `t0`), and `t0`.
pub(super) type Alarm<'a> = (Option<&'a TimerFd>, &'a mut u64, Instant);

/// Waits for events until `wake_ns`. Open loop uses a timerfd: epoll's millisecond
/// timeout would send requests up to 1 ms late and charge that to the server.
pub(super) fn wait_until(
    poll: &mut Poll,
    (timer, armed_ns, t0): Alarm,
    events: &mut Events,
    now: u64,
    wake_ns: u64,
) -> io::Result<()> {
    let timeout = match timer {
        Some(_) if wake_ns <= now + SPIN_NS => Some(Duration::ZERO),
        Some(timer) => {
            let alarm_ns = wake_ns - SPIN_NS;
            if *armed_ns != alarm_ns {
                let at = t0 + Duration::from_nanos(alarm_ns);
                let _ = timer.set(
                    Expiration::OneShot(TimeSpec::from_duration(instant_to_monotonic(at))),
                    TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                );
                *armed_ns = alarm_ns;
            }
            None
        }
        _ => Some(Duration::from_nanos(wake_ns - now)),
    };
    match poll.poll(events, timeout) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
        other => other,
    }
}

/// Reads the timerfd's expirations (so its next edge is seen) and disarms the record of it.
pub(super) fn drain_timer(timer: Option<&TimerFd>, armed_ns: &mut u64) {
    if let Some(t) = timer {
        let mut expirations = [0u8; 8];
        let _ = nix::unistd::read(t.as_fd().as_raw_fd(), &mut expirations);
    }
    *armed_ns = 0;
}

pub(super) fn instant_to_monotonic(at: Instant) -> Duration {
    let now = Instant::now();
    let mono = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| Duration::new(t.tv_sec() as u64, t.tv_nsec() as u32))
        .unwrap_or_default();
    if at >= now {
        mono + (at - now)
    } else {
        mono.saturating_sub(now - at)
    }
}
