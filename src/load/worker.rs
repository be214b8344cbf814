//! One generator thread: its connections, its event loop, its histograms. One loop for every
//! wire protocol: generic over the connection ([`Connection`]: HTTP/1.1, RESP and msgr in
//! [`super::pipelined`], HTTP/2 in [`super::h2`]), which holds what its protocol keeps; the
//! loop owns the sockets, the timers, connecting, open-loop pacing and the recording.
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
use super::recorder::{thread_cpu_ns, Msg, Recorder, Schedule};
use super::target::Target;
use super::transport::{connect_error_kind, error_kind, Stream};
use super::{LoadConfig, LoadError};
use crate::record::load::RequestError;

const TIMER: Token = Token(usize::MAX);
/// The thread's one read buffer: every connection reads into it, and only the bytes of a reply
/// cut by the end of a read stay with the connection. 64 KiB per thread, not per connection:
/// an idle or keep-alive connection holds no buffer at all.
const READ_CHUNK: usize = 64 * 1024;
/// Reads one connection may make in a row (1 MiB) before the others' turn: a server sending
/// without pause must not hold the thread (its per-second lines, timeouts, other connections).
const MAX_READS_PER_TURN: usize = 16;
/// Open loop: the timer is set this much before a request is due and the loop polls without
/// sleeping for the rest, because a timerfd wake-up comes tens of µs late on a VM and that
/// lateness would count as the server's latency.
const SPIN_NS: u64 = 50_000;
/// A send this much after its due time (or one schedule interval, if longer) with a
/// connection free was late because of the generator, not the server.
const LATE_SEND_NS: u64 = 100_000;
/// How often timeouts and reconnections are looked after.
const HOUSEKEEPING_NS: u64 = 20_000_000;

/// What a generator thread is built from.
pub(super) struct LoopContext {
    pub config: Arc<LoadConfig>,
    pub target: Arc<Target>,
    pub sched: Arc<Schedule>,
    /// Set when the load must stop early.
    pub stop: Arc<AtomicBool>,
    /// To the engine: ready, per-second lines, the thread's report.
    pub tx: Sender<Msg>,
    /// The thread's number.
    pub thread: usize,
    /// Index of this thread's first connection over the whole load (picks its source and
    /// its request sequence).
    pub first_conn: usize,
    /// How many connections the thread opens.
    pub connections: usize,
}

/// One request on the wire: when it was due (open loop; closed loop: when it was sent) and
/// when it was written, ns after the start.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    pub intended_ns: u64,
    pub sent_ns: u64,
}

/// What a connection's protocol keeps between the loop's turns: its requests in flight, what
/// it has to write, the part of a reply a read cut. The loop owns the socket.
pub(super) trait Connection: Send + Sized {
    /// Read the socket as soon as it is established (HTTP/2: the server's SETTINGS may have
    /// come with the handshake), rather than only once the first requests are written.
    const READ_ON_CONNECT: bool;
    /// Connection number `index` over the whole load.
    fn new(index: usize, config: &LoadConfig, target: &Target) -> Self;
    /// A socket is being opened for it at `now` (first, or after a drop).
    fn opened(&mut self, now: u64, budget: &mut ReplyBudget);
    /// Its socket is established (TLS included): check what was agreed and begin.
    fn established(
        &mut self,
        stream: &Stream,
        config: &LoadConfig,
        target: &Target,
    ) -> io::Result<()>;
    /// Requests in flight.
    fn in_flight(&self) -> usize;
    /// Whether it takes one more request now, with at most `depth` in flight.
    fn can_send(&self, depth: usize) -> bool;
    /// Queues the next request.
    fn queue(&mut self, sent: Sent);
    /// Bytes queued to write (the loop has written the first `wpos` of them).
    fn out(&self) -> &[u8];
    /// The first `upto` bytes of [`Connection::out`] are written.
    fn written(&mut self, upto: usize);
    /// All of [`Connection::out`] is written.
    fn flushed(&mut self);
    /// Acts on bytes read, telling `tally` how requests ended.
    fn take(
        &mut self,
        read: &[u8],
        budget: &mut ReplyBudget,
        tally: &mut Tally,
        now: u64,
    ) -> Verdict;
    /// The error kind of the peer's close.
    fn closed_kind(&self) -> RequestError {
        RequestError::Closed
    }
    /// The socket is dropped: forget the requests in flight; how many there were.
    fn abandon(&mut self) -> usize;
    /// The socket is gone: forget the protocol state, giving back what it held of `budget`.
    fn dropped(&mut self, budget: &mut ReplyBudget);
    /// Requests older than `timeout_ns` at `now`: what expired alone is told to `tally`; the
    /// error kind when the whole connection must be reset.
    fn expire(&mut self, timeout_ns: u64, tally: &mut Tally, now: u64) -> Option<RequestError>;
    /// The server is done with the connection and nothing is in flight: replace it.
    fn finished(&self) -> bool {
        false
    }
}

/// What became of a connection after a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It goes on.
    Open,
    /// Broken: its requests in flight fail with this kind; it is reopened.
    Reset(RequestError),
    /// The same, after writing what it queued last (an HTTP/2 GOAWAY).
    FlushAndReset(RequestError),
    /// The server closes it after its last reply: the requests it left unread were handed
    /// back ([`Tally::refused`]); it is reopened.
    Reopen,
}

/// What requests became: the thread's recorder, the open-loop schedule (which takes back
/// requests a server refused unread), and how many re-sends are owed.
pub(super) struct Tally {
    rec: Recorder,
    open: Option<OpenLoop>,
    /// Requests withdrawn from `sent` (refused unread): the next writes, up to this many, are
    /// their re-sends.
    resend_owed: u64,
}

impl Tally {
    /// A request answered (`error`: the kind when the answer says it failed).
    #[inline]
    pub fn answered(&mut self, req: Sent, error: Option<RequestError>, now: u64) {
        match error {
            Some(kind) => self.rec.error(kind, now),
            None => self.rec.success(
                now.saturating_sub(req.intended_ns),
                now.saturating_sub(req.sent_ns),
                now,
            ),
        }
    }

    /// A gRPC call whose reply was streamed ended well with `messages`, the first whole at
    /// `first_ns` (0 without one).
    pub fn streamed(&mut self, req: Sent, messages: u32, first_ns: u64, now: u64) {
        self.answered(req, None, now);
        let first = (first_ns > 0).then(|| first_ns.saturating_sub(req.intended_ns));
        self.rec.streamed(messages, first, now);
    }

    /// `n` gRPC reply messages read whole (the whole run's count).
    pub fn messages_read(&mut self, n: u64) {
        self.rec.messages_read(n);
    }

    /// A request failed without an answer.
    pub fn failed(&mut self, kind: RequestError, now: u64) {
        self.rec.error(kind, now);
    }

    /// A request failed with the server's own words for why (a gRPC status).
    pub fn failed_named(&mut self, kind: &str, now: u64) {
        self.rec.error_named(kind, now);
    }

    /// A lookup answered: whether the key was found.
    pub fn lookup(&mut self, found: bool, now: u64) {
        self.rec.lookup(found, now);
    }

    /// The HTTP status of a request that failed (already counted by its class).
    pub fn failed_status(&mut self, status: u16, now: u64) {
        self.rec.failed_status(status, now);
    }

    /// A request the server never read (it closed first, or refused the stream): out of
    /// `sent`, to be sent again. Called newest first, so that they go out again in order.
    pub fn refused(&mut self, req: Sent) {
        self.rec.withdraw(1);
        self.resend_owed += 1;
        if let Some(open) = &mut self.open {
            open.resend.push_front(req.intended_ns);
        }
    }

    /// One request written; the first `resend_owed` ones re-send withdrawn requests.
    fn sent(&mut self) {
        self.rec.sent();
        if self.resend_owed > 0 {
            self.resend_owed -= 1;
            self.rec.resent();
        }
    }
}

/// A connection as the loop holds it: the socket and the protocol's state.
struct Slot<C> {
    stream: Option<Stream>,
    /// TCP (and TLS) not established yet.
    connecting: bool,
    /// How much of `conn.out()` was written.
    wpos: usize,
    retry_at_ns: u64,
    in_free_queue: bool,
    conn: C,
}

impl<C: Connection> Slot<C> {
    /// Established, and taking one more request.
    #[inline]
    fn can_send(&self, depth: usize) -> bool {
        self.stream.is_some() && !self.connecting && self.conn.can_send(depth)
    }
}

/// Everything one thread owns.
pub(super) struct Worker<C> {
    config: Arc<LoadConfig>,
    target: Arc<Target>,
    sched: Arc<Schedule>,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    poll: Poll,
    conns: Vec<Slot<C>>,
    /// The read buffer all this thread's connections share (see [`READ_CHUNK`]).
    scratch: Vec<u8>,
    /// What the connections may hold together of the server's bytes.
    budget: ReplyBudget,
    /// Connections whose turn ended with bytes still unread (and whether the peer had
    /// closed): read again before the next wait, since an edge-triggered socket will not say.
    unread: Vec<(usize, bool)>,
    t0: Instant,
    tally: Tally,
    timer: Option<TimerFd>,
    timer_armed_ns: u64,
    /// Closed loop under `--ramp`: which connections work when.
    ramp: Option<ConnRamp>,
    first_conn: usize,
}

/// Open-loop pacing. Request `i` of the schedule is due at a time the arrival cursors
/// compute from `i` alone, so the requests waiting for a free connection are the index range
/// `dispatched..issued`: nothing grows with overload.
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

impl<C: Connection> Worker<C> {
    pub fn new(ctx: LoopContext) -> io::Result<Self> {
        let LoopContext {
            config,
            target,
            sched,
            stop,
            tx,
            thread,
            first_conn,
            connections,
        } = ctx;
        let poll = Poll::new()?;
        let conns = (first_conn..first_conn + connections)
            .map(|i| Slot {
                stream: None,
                connecting: false,
                wpos: 0,
                retry_at_ns: 0,
                in_free_queue: false,
                conn: C::new(i, &config, &target),
            })
            .collect();
        let open = config.rate_rps.map(|_| OpenLoop::new(&config, thread));
        let ramp = ConnRamp::new(&config, thread);
        let rec = Recorder::new(sched.clone(), tx.clone(), thread, open.is_some());
        let budget = ReplyBudget::new(config.reply_budget_bytes, connections);
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
            tally: Tally {
                rec,
                open,
                resend_owed: 0,
            },
            timer: None,
            timer_armed_ns: 0,
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
        if self.tally.open.is_some() {
            self.timer = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK).ok();
            if let Some(t) = &self.timer {
                let fd = t.as_fd().as_raw_fd();
                let _ =
                    self.poll
                        .registry()
                        .register(&mut SourceFd(&fd), TIMER, Interest::READABLE);
            }
        }
        self.tally.rec.start();
        self.event_loop();
        self.tally.rec.finish();
    }

    fn now_ns(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Opens every connection (paced by `--connect-rate`) and waits until all are
    /// established (and, HTTP/2, have their preface queued); the seconds each took from its
    /// own connect, summed.
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
                self.connect(opened_at.len(), 0)
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

    /// When the oldest connection still connecting times out (`limit` after its connect);
    /// an error once that is past. `oldest` is where the search starts (connections before it
    /// are established: they are opened in index order, so it only moves forward); it is left
    /// at the one found.
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

    fn connect(&mut self, i: usize, now: u64) -> io::Result<()> {
        let source = super::sources::source_of(&self.target.sources, self.first_conn + i);
        let mut stream = Stream::connect(self.target.addr, source, self.target.tls.as_ref())?;
        self.poll.registry().register(
            &mut stream,
            Token(i),
            Interest::READABLE | Interest::WRITABLE,
        )?;
        let slot = &mut self.conns[i];
        slot.conn.opened(now, &mut self.budget);
        slot.stream = Some(stream);
        slot.connecting = true;
        slot.wpos = 0;
        Ok(())
    }

    /// Drives connection `i`'s connect (and TLS handshake); once established, lets the
    /// protocol check it and begin. Whether it is established.
    fn establish(&mut self, i: usize) -> io::Result<bool> {
        let slot = &mut self.conns[i];
        let stream = slot.stream.as_mut().expect("connecting stream");
        if !stream.established()? {
            return Ok(false);
        }
        if let Some(h) = stream.take_handshake() {
            self.tally.rec.tls_handshake(h.duration_ns, h.resumed);
        }
        slot.conn.established(stream, &self.config, &self.target)?;
        slot.connecting = false;
        Ok(true)
    }

    fn event_loop(&mut self) {
        let mut events = Events::with_capacity(1024);
        let mut next_housekeeping = 0;
        for i in 0..self.conns.len() {
            // The time now, not 0: a request's latency counts from when it was sent.
            let now = self.now_ns();
            if C::READ_ON_CONNECT {
                // What the server sent while the others connected (its edge is past).
                self.on_event(i, false, now);
            } else {
                self.refill(i, now);
            }
        }
        loop {
            let now = self.now_ns();
            if self.stop.load(Ordering::Relaxed) {
                self.tally.rec.stop_at(now);
            }
            let conns = &self.conns;
            self.tally.rec.cross_boundaries(now, || {
                conns.iter().map(|s| s.conn.in_flight() as u64).sum()
            });
            if now >= self.tally.rec.end_ns && (self.idle() || now >= self.drain_deadline_ns()) {
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
                self.tally.rec.idle(spun_ns, now);
            }
            for ev in events.iter() {
                match ev.token() {
                    TIMER => drain_timer(self.timer.as_ref(), &mut self.timer_armed_ns),
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
        self.conns.iter().all(|s| s.conn.in_flight() == 0)
    }

    fn drain_deadline_ns(&self) -> u64 {
        self.tally.rec.end_ns + self.sched.timeout_ns
    }

    /// When the loop must wake next: at once with sockets still to read, else at the
    /// housekeeping, the next second's boundary or (open loop) the next request's due time.
    fn next_wake_ns(&self, now: u64, housekeeping: u64) -> u64 {
        if !self.unread.is_empty() {
            return now;
        }
        let rec = &self.tally.rec;
        let mut wake = housekeeping;
        if let Some(b) = rec.next_boundary_ns() {
            wake = wake.min(b);
        }
        if let Some(open) = &self.tally.open {
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

    /// Waits for events until `wake_ns`. Open loop uses a timerfd: epoll's millisecond
    /// timeout would send requests up to 1 ms late and charge that to the server.
    fn wait(&mut self, events: &mut Events, now: u64, wake_ns: u64) -> io::Result<()> {
        let timeout = match &self.timer {
            Some(_) if wake_ns <= now + SPIN_NS => Some(Duration::ZERO),
            Some(timer) => {
                let alarm_ns = wake_ns - SPIN_NS;
                if self.timer_armed_ns != alarm_ns {
                    let at = self.t0 + Duration::from_nanos(alarm_ns);
                    let _ = timer.set(
                        Expiration::OneShot(TimeSpec::from_duration(instant_to_monotonic(at))),
                        TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                    );
                    self.timer_armed_ns = alarm_ns;
                }
                None
            }
            _ => Some(Duration::from_nanos(wake_ns - now)),
        };
        match self.poll.poll(events, timeout) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            other => other,
        }
    }

    /// `read_closed`: the peer's FIN (or a reset) came with this event; it may have come with
    /// the last bytes, in which case no later event would tell.
    fn on_event(&mut self, i: usize, read_closed: bool, now: u64) {
        if i >= self.conns.len() || self.conns[i].stream.is_none() {
            return;
        }
        if self.conns[i].connecting {
            match self.establish(i) {
                Ok(true) if C::READ_ON_CONNECT => self.flush(i, now),
                Ok(true) => return self.refill(i, now),
                Ok(false) => return,
                Err(e) => {
                    self.tally.failed(connect_error_kind(&e), now);
                    self.drop_stream(i);
                    self.conns[i].retry_at_ns = now + HOUSEKEEPING_NS;
                    return;
                }
            }
        }
        if self.read(i, read_closed, now) {
            self.carry_on(i, now);
        }
    }

    /// After a turn: a connection the server is done with is replaced, the others refilled.
    fn carry_on(&mut self, i: usize, now: u64) {
        if self.conns[i].conn.finished() {
            self.flush(i, now);
            self.drop_stream(i);
            self.reconnect(i, now);
        } else {
            self.refill(i, now);
        }
    }

    /// Reads until the socket is drained, acting on what came; when the peer closed, until
    /// the end of the stream (a short read does not mean drained then: the FIN is still to be
    /// read, and an edge-triggered socket would not tell again). False when the connection
    /// was dropped or reopened.
    fn read(&mut self, i: usize, read_closed: bool, now: u64) -> bool {
        let mut scratch = std::mem::take(&mut self.scratch);
        let open = self.read_into(i, &mut scratch, read_closed, now);
        self.scratch = scratch;
        open
    }

    fn read_into(&mut self, i: usize, scratch: &mut [u8], to_eof: bool, now: u64) -> bool {
        for _ in 0..MAX_READS_PER_TURN {
            let slot = &mut self.conns[i];
            let stream = slot.stream.as_mut().expect("open stream");
            match stream.read(scratch) {
                Ok(0) => {
                    let kind = slot.conn.closed_kind();
                    self.reset(i, kind, now);
                    return false;
                }
                Ok(n) => {
                    self.tally.rec.bytes_in(n, now);
                    let verdict =
                        slot.conn
                            .take(&scratch[..n], &mut self.budget, &mut self.tally, now);
                    if verdict != Verdict::Open {
                        self.act_on(i, verdict, now);
                        return false;
                    }
                    // A TLS stream may hold decrypted bytes the socket read already brought.
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

    fn act_on(&mut self, i: usize, verdict: Verdict, now: u64) {
        match verdict {
            Verdict::Open => {}
            Verdict::Reset(kind) => self.reset(i, kind, now),
            Verdict::FlushAndReset(kind) => {
                self.flush(i, now);
                self.reset(i, kind, now);
            }
            Verdict::Reopen => {
                self.drop_stream(i);
                self.reconnect(i, now);
            }
        }
    }

    /// Keeps the connection's pipeline full (closed loop) or offers it to the backlog, then
    /// writes what was queued.
    fn refill(&mut self, i: usize, now: u64) {
        if self.tally.open.is_some() {
            self.offer_free(i);
            self.dispatch(now);
        } else if now < self.tally.rec.end_ns {
            let depth = self.config.depth;
            let active = self.ramp.as_ref().is_none_or(|r| r.active(i, now));
            while active && self.conns[i].can_send(depth) {
                self.send(i, now, now);
            }
        }
        self.flush(i, now);
    }

    #[inline]
    fn send(&mut self, i: usize, intended_ns: u64, now: u64) {
        self.conns[i].conn.queue(Sent {
            intended_ns,
            sent_ns: now,
        });
        self.tally.sent();
    }

    fn flush(&mut self, i: usize, now: u64) {
        let slot = &mut self.conns[i];
        let Some(stream) = slot.stream.as_mut() else {
            return;
        };
        if slot.connecting {
            return;
        }
        match stream.flush_pending() {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => return self.reset(i, error_kind(&e), now),
        }
        while slot.wpos < slot.conn.out().len() {
            match stream.write(&slot.conn.out()[slot.wpos..]) {
                Ok(n) => {
                    slot.wpos += n;
                    slot.conn.written(slot.wpos);
                    self.tally.rec.bytes_out(n, now);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.reset(i, error_kind(&e), now),
            }
        }
        slot.wpos = 0;
        slot.conn.flushed();
    }

    /// Drops a broken connection: its requests in flight fail with `kind`; it is reopened.
    fn reset(&mut self, i: usize, kind: RequestError, now: u64) {
        let in_flight = self.conns[i].conn.abandon();
        // An idle connection the server closed lost nothing; garbage always costs one.
        let lost = if kind == RequestError::Closed || kind == RequestError::H2Goaway {
            in_flight
        } else {
            in_flight.max(1)
        };
        for _ in 0..lost {
            self.tally.failed(kind, now);
        }
        self.drop_stream(i);
        self.reconnect(i, now);
    }

    fn drop_stream(&mut self, i: usize) {
        let slot = &mut self.conns[i];
        if let Some(mut s) = slot.stream.take() {
            let _ = self.poll.registry().deregister(&mut s);
        }
        slot.connecting = false;
        slot.wpos = 0;
        slot.conn.dropped(&mut self.budget);
    }

    fn reconnect(&mut self, i: usize, now: u64) {
        if now >= self.tally.rec.end_ns {
            return;
        }
        if self.connect(i, now).is_err() {
            self.tally.failed(RequestError::Connect, now);
            self.conns[i].retry_at_ns = now + HOUSEKEEPING_NS;
        }
    }

    /// Timeouts, reconnection retries, connections a ramp has just let in or whose requests
    /// expired.
    fn housekeeping(&mut self, now: u64) {
        let timeout_ns = self.sched.timeout_ns;
        for i in 0..self.conns.len() {
            let slot = &mut self.conns[i];
            if slot.stream.is_none() {
                if now >= slot.retry_at_ns && now < self.tally.rec.end_ns {
                    self.reconnect(i, now);
                }
                continue;
            }
            if slot.connecting {
                continue;
            }
            match slot.conn.expire(timeout_ns, &mut self.tally, now) {
                Some(kind) => self.reset(i, kind, now),
                None => self.carry_on(i, now),
            }
        }
    }

    /// Open loop: releases the requests whose time has come and sends what it can.
    fn pace(&mut self, now: u64) {
        let end = self.tally.rec.end_ns;
        let Some(open) = &mut self.tally.open else {
            return;
        };
        while now < end && open.next_due_ns() <= now {
            // The timer wakes the loop before each due time, so a request the loop gets to
            // late was delayed by the generator (busy or descheduled), whatever the
            // connections: a late send.
            let lag_ns = now - open.next_due_ns();
            let late = lag_ns > open.late_threshold_ns();
            self.tally.rec.scheduled_send(lag_ns, late, now);
            open.release();
        }
        self.dispatch(now);
    }

    /// Counts the released requests still waiting once the replies that had arrived were
    /// read: they had no free connection, so they are omitted (the server's delay), not
    /// late sends (the generator's).
    fn count_omitted(&mut self, now: u64) {
        if let Some(open) = &mut self.tally.open {
            self.tally.rec.omitted(open.newly_waiting() as usize, now);
        }
    }

    fn offer_free(&mut self, i: usize) {
        let depth = self.config.depth;
        let slot = &mut self.conns[i];
        if let Some(open) = &mut self.tally.open {
            if !slot.in_free_queue && slot.can_send(depth) {
                slot.in_free_queue = true;
                open.free.push_back(i);
            }
        }
    }

    /// Sends waiting requests on free connections.
    fn dispatch(&mut self, now: u64) {
        let depth = self.config.depth;
        let mut touched = Vec::new();
        loop {
            let Some(open) = &mut self.tally.open else {
                return;
            };
            let (true, Some(&i)) = (open.has_waiting(), open.free.front()) else {
                break;
            };
            let slot = &mut self.conns[i];
            if !slot.can_send(depth) {
                slot.in_free_queue = false;
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

fn io_error(context: &str, source: io::Error) -> LoadError {
    LoadError::Io {
        context: context.to_string(),
        source,
    }
}

/// Reads the timerfd's expirations (so its next edge is seen) and disarms the record of it.
fn drain_timer(timer: Option<&TimerFd>, armed_ns: &mut u64) {
    if let Some(t) = timer {
        let mut expirations = [0u8; 8];
        let _ = nix::unistd::read(t.as_fd().as_raw_fd(), &mut expirations);
    }
    *armed_ns = 0;
}

/// The CLOCK_MONOTONIC reading of an `Instant` (they share the clock on Linux).
fn instant_to_monotonic(at: Instant) -> Duration {
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
