//! HTTP/2 generator threads (`h2c://`, `--http2` on `http://` or, over TLS with `h2` chosen by
//! ALPN, on `https://`), with the `h2` crate (and `tokio-rustls` for TLS).
//!
//! Why a different loop: `h2` (framing, HPACK, flow control, stream limits, GOAWAY) is
//! written for tokio's I/O traits, and writing HTTP/2 by hand is what the project avoids.
//! So an HTTP/2 thread runs a tokio current-thread runtime of its own (one per generator
//! thread: no cross-thread wake-ups, no work stealing) instead of the mio loop, and records
//! through the same [`Recorder`] as every other thread: one HdrHistogram per thread, the
//! per-second intervals, the window, `sent`/`resent` and errors by kind. The plain and
//! HTTP/1.1-over-TLS paths are untouched. The cost per request is measured against h2load
//! by `bench/vs_h2load.sh`.
//!
//! Each connection runs `--depth` request loops (its streams), each sending one request and
//! reading its whole response before the next, never more than the server's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`. `h2` enforces the flow-control windows; the response
//! bodies' capacity is released as they are read. A request is counted in `sent` when `h2`
//! takes it; when the server refuses it unprocessed (a GOAWAY naming a lower last stream, or
//! RST_STREAM REFUSED_STREAM) it leaves `sent` and is sent again (counted once more in `sent`
//! and in `resent`), as for an HTTP/1.1 `Connection: close`. With `--rate`, a free stream
//! waits for the next request the schedule releases ([`open`]); with `--requests`, each
//! connection renders its own (`template::H2Requests`).

use std::cell::{Cell, RefCell};
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

mod conn;
mod evloop;
mod open;

pub(super) use evloop::H2Loop;

use super::recorder::{Msg, Recorder, Schedule};
use super::target::Target;
use super::template::H2Requests;
use super::{LoadConfig, LoadError};

/// Receive windows large enough that flow control never paces a benchmark (h2load's
/// defaults are 1 GiB; these are what a browser announces).
const STREAM_WINDOW: u32 = 4 << 20;
const CONNECTION_WINDOW: u32 = 16 << 20;
/// How long a request loop waits before looking again for a connection being reopened.
const RETRY: Duration = Duration::from_millis(1);

/// One HTTP/2 generator thread.
pub(super) struct H2Worker {
    config: Arc<LoadConfig>,
    target: Arc<Target>,
    sched: Arc<Schedule>,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    thread: usize,
    /// The load-wide numbers of the thread's connections (they seed their templates).
    conns: Range<usize>,
}

/// What the tasks of one thread share.
struct Shared {
    config: Arc<LoadConfig>,
    target: Arc<Target>,
    stop: Arc<AtomicBool>,
    t0: Cell<Instant>,
    rec: RefCell<Recorder>,
    conns: Vec<RefCell<Slot>>,
    inflight: Cell<u64>,
    /// Requests withdrawn from `sent` (refused unprocessed): the next sends re-send them.
    resend_owed: Cell<u64>,
    /// Without `--requests`: the request every stream sends, and its body.
    request: http::Request<()>,
    body: Option<Bytes>,
    /// With `--requests`: each connection's requests.
    templates: Vec<RefCell<H2Requests>>,
    /// Open loop (`--rate`): the schedule the streams take their requests from.
    open: Option<open::Open>,
    /// This thread's index (with a connection's, picks its source address).
    thread: usize,
}

/// One connection: its handle while open, and a generation number so a failure is acted on
/// once.
struct Slot {
    send: Option<SendRequest<Bytes>>,
    generation: u64,
}

impl H2Worker {
    pub fn new(
        config: Arc<LoadConfig>,
        target: Arc<Target>,
        sched: Arc<Schedule>,
        stop: Arc<AtomicBool>,
        tx: Sender<Msg>,
        thread: usize,
        conns: Range<usize>,
    ) -> Self {
        H2Worker {
            config,
            target,
            sched,
            stop,
            tx,
            thread,
            conns,
        }
    }

    /// Connects, waits for the common start, runs the schedule, drains, reports.
    pub fn run(self, barrier: Arc<Barrier>, start: Arc<OnceLock<Instant>>) {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(source) => {
                let _ = self.tx.send(Msg::Ready(Err(LoadError::Io {
                    context: "starting an HTTP/2 event loop".into(),
                    source,
                })));
                barrier.wait();
                return;
            }
        };
        let local = tokio::task::LocalSet::new();
        local.block_on(&runtime, self.run_async(barrier, start));
    }

    async fn run_async(self, barrier: Arc<Barrier>, start: Arc<OnceLock<Instant>>) {
        let open_loop = self.config.rate_rps.is_some();
        let rec = Recorder::new(self.sched.clone(), self.tx.clone(), self.thread, open_loop);
        let (request, body) = self.target.http2_request(&self.config.proto);
        let shared = Rc::new(Shared {
            config: self.config.clone(),
            target: self.target.clone(),
            stop: self.stop.clone(),
            t0: Cell::new(Instant::now()),
            rec: RefCell::new(rec),
            conns: self
                .conns
                .clone()
                .map(|_| {
                    RefCell::new(Slot {
                        send: None,
                        generation: 0,
                    })
                })
                .collect(),
            inflight: Cell::new(0),
            resend_owed: Cell::new(0),
            request,
            body,
            templates: self
                .conns
                .clone()
                .filter_map(|c| self.target.http2_templates(c, &self.config.proto))
                .map(RefCell::new)
                .collect(),
            open: open_loop.then(|| open::Open::new(&self.config, self.thread)),
            thread: self.thread,
        });
        let ready = connect_all(&shared).await;
        let ok = ready.is_ok();
        let _ = self.tx.send(Msg::Ready(ready));
        barrier.wait();
        let Some(&t0) = start.get() else { return };
        if !ok {
            return;
        }
        shared.t0.set(t0);
        shared.rec.borrow_mut().start();
        let mut loops = Vec::new();
        for conn in 0..self.conns.len() {
            for stream in 0..self.config.depth {
                loops.push(tokio::task::spawn_local(request_loop(
                    shared.clone(),
                    conn,
                    stream,
                )));
            }
        }
        let ticker = tokio::task::spawn_local(tick(shared.clone()));
        let pacer = tokio::task::spawn_local(open::pace(shared.clone()));
        for l in loops {
            let _ = l.await;
        }
        ticker.abort();
        pacer.abort();
        let now = shared.now_ns();
        let end = shared.rec.borrow().end_ns;
        shared.rec.borrow_mut().cross_boundaries(now.max(end), || 0);
        for slot in &shared.conns {
            slot.borrow_mut().send = None;
        }
        // Not `Rc::try_unwrap`: a reconnecting task may still hold `shared`, and a thread that
        // returned without its totals made the whole load read as 0 requests in 0 s, exit 0.
        shared.rec.borrow_mut().finish();
    }
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.t0.get().elapsed().as_nanos() as u64
    }

    /// The next request of connection `conn`, and its body.
    fn next_request(&self, conn: usize) -> (http::Request<()>, Option<Bytes>) {
        match self.templates.get(conn) {
            Some(t) => t.borrow_mut().next_request(),
            None => (self.request.clone(), self.body.clone()),
        }
    }

    /// Open loop: a request taken from the schedule goes back to it (not sent, or refused
    /// unprocessed).
    fn put_back(&self, intended_ns: Option<u64>) {
        if let (Some(open), Some(t)) = (&self.open, intended_ns) {
            open.put_back(t);
        }
    }

    /// One request taken by `h2`; the first `resend_owed` ones re-send refused requests.
    fn count_sent(&self) {
        let mut rec = self.rec.borrow_mut();
        rec.sent();
        if self.resend_owed.get() > 0 {
            self.resend_owed.set(self.resend_owed.get() - 1);
            rec.resent();
        }
    }

    /// The connection of generation `generation` is gone: reopen it (once).
    fn connection_lost(self: &Rc<Self>, conn: usize, generation: u64) {
        let mut slot = self.conns[conn].borrow_mut();
        if slot.generation != generation {
            return;
        }
        slot.send = None;
        slot.generation += 1;
        let next = slot.generation;
        drop(slot);
        tokio::task::spawn_local(reopen(self.clone(), conn, next));
    }
}

/// Opens every connection of the thread (TCP, TLS when asked, the HTTP/2 preface and
/// settings); the seconds they took in total.
async fn connect_all(shared: &Rc<Shared>) -> Result<f64, LoadError> {
    let timeout = shared.config.timeout.min(Duration::from_secs(10));
    let gap = shared.config.connect.gap_per_thread(shared.config.threads);
    let first = Instant::now();
    let mut total_s = 0.0;
    for conn in 0..shared.conns.len() {
        if let Some(g) = gap {
            tokio::time::sleep_until((first + g * conn as u32).into()).await;
        }
        let started = Instant::now();
        let send = tokio::time::timeout(timeout, open(shared, conn, 0))
            .await
            .unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "timed out")))
            .map_err(|source| LoadError::Connect {
                addr: shared.target.addr.to_string(),
                source,
            })?;
        total_s += started.elapsed().as_secs_f64();
        shared.conns[conn].borrow_mut().send = Some(send);
    }
    Ok(total_s)
}

/// Opens connection `conn` (generation `generation`): TCP, TLS when the target has it (its
/// handshake recorded as for HTTP/1.1, ALPN checked to be `h2`), then HTTP/2.
async fn open(shared: &Rc<Shared>, conn: usize, generation: u64) -> io::Result<SendRequest<Bytes>> {
    let index = conn * shared.config.threads + shared.thread;
    let tcp = match super::sources::source_of(&shared.target.sources, index) {
        None => TcpStream::connect(shared.target.addr).await?,
        Some(source) => {
            let sock = match source {
                std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
                std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
            };
            super::sources::bind_source(&sock, source)?;
            sock.connect(shared.target.addr).await?
        }
    };
    tcp.set_nodelay(true)?;
    let Some(tls) = &shared.target.tls else {
        return start(shared, conn, generation, tcp).await;
    };
    let started = Instant::now();
    let stream = tokio_rustls::TlsConnector::from(tls.config())
        .connect(tls.server_name(), tcp)
        .await?;
    let session = stream.get_ref().1;
    if session.alpn_protocol() != Some(H2_ALPN) {
        return Err(io::Error::other(not_h2(
            tls.host(),
            session.alpn_protocol(),
        )));
    }
    let resumed = session.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    let handshake_ns = started.elapsed().as_nanos() as u64;
    shared.rec.borrow_mut().tls_handshake(handshake_ns, resumed);
    start(shared, conn, generation, stream).await
}

/// The HTTP/2 preface and settings over `io` (plaintext: its bytes are counted as
/// HTTP/1.1's are), and the connection's driver.
async fn start<S>(
    shared: &Rc<Shared>,
    conn: usize,
    generation: u64,
    io: S,
) -> io::Result<SendRequest<Bytes>>
where
    S: AsyncRead + AsyncWrite + Unpin + 'static,
{
    let io = Counted {
        inner: io,
        shared: Rc::downgrade(shared),
    };
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake::<_, Bytes>(io)
        .await
        .map_err(io::Error::other)?;
    let weak = Rc::downgrade(shared);
    tokio::task::spawn_local(async move {
        let _ = connection.await;
        if let Some(shared) = weak.upgrade() {
            shared.connection_lost(conn, generation);
        }
    });
    Ok(send)
}

/// HTTP/2's ALPN protocol name.
const H2_ALPN: &[u8] = b"h2";

/// The sentence for a TLS server that chose `alpn` rather than `h2`.
fn not_h2(host: &str, alpn: Option<&[u8]>) -> String {
    let chose = match alpn {
        Some(p) => format!("chose {} by ALPN", String::from_utf8_lossy(p)),
        None => "chose no protocol by ALPN".to_string(),
    };
    format!("{host} does not speak HTTP/2 over TLS (the server {chose}): drop --http2 for HTTP/1.1")
}

/// After the probe's handshake: the server must have chosen `h2`.
pub(super) fn check_alpn(target: &Target, alpn: Option<&[u8]>) -> Result<(), LoadError> {
    match &target.tls {
        Some(tls) if alpn != Some(H2_ALPN) => Err(LoadError::BadInput(not_h2(tls.host(), alpn))),
        _ => Ok(()),
    }
}

/// Reopens connection `conn` until it opens or the window ends.
async fn reopen(shared: Rc<Shared>, conn: usize, generation: u64) {
    loop {
        let now = shared.now_ns();
        if now >= shared.rec.borrow().end_ns {
            return;
        }
        match open(&shared, conn, generation).await {
            Ok(send) => {
                let mut slot = shared.conns[conn].borrow_mut();
                if slot.generation == generation {
                    slot.send = Some(send);
                }
                return;
            }
            Err(e) => {
                let kind = super::transport::connect_error_kind(&e);
                shared.rec.borrow_mut().error(kind, now);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// How one request ended.
enum Outcome {
    /// Answered with this status.
    Status(u16),
    /// Not processed by the server (refused before it read it): to be sent again.
    Refused,
    /// Failed, by kind.
    Failed(&'static str),
}

/// Stream `stream` of connection `conn`: one request at a time until the window ends.
async fn request_loop(shared: Rc<Shared>, conn: usize, stream: usize) {
    let timeout = shared.config.timeout;
    // The connection's handle, kept while its generation lasts (a clone and its drop take
    // `h2`'s lock twice per request otherwise).
    let mut handle: Option<(u64, SendRequest<Bytes>)> = None;
    loop {
        let now = shared.now_ns();
        if shared.stop.load(Ordering::Relaxed) {
            shared.rec.borrow_mut().stop_at(now);
        }
        if now >= shared.rec.borrow().end_ns {
            return;
        }
        let generation = shared.conns[conn].borrow().generation;
        if handle.as_ref().map(|h| h.0) != Some(generation) {
            handle = shared.conns[conn]
                .borrow()
                .send
                .clone()
                .map(|s| (generation, s));
        }
        // No connection (being reopened), or more streams than the server allows.
        let Some((_, send)) = handle
            .as_mut()
            .filter(|(_, s)| stream < s.current_max_send_streams())
        else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        if std::future::poll_fn(|cx| send.poll_ready(cx))
            .await
            .is_err()
        {
            handle = None;
            shared.connection_lost(conn, generation);
            continue;
        }
        // Open loop: a free stream waits for the next request due.
        let intended_ns = match &shared.open {
            Some(open) => match open.take().await {
                Some(t) => Some(t),
                None => return,
            },
            None => None,
        };
        let (request, body) = shared.next_request(conn);
        let (response, mut body_stream) = match send.send_request(request, body.is_none()) {
            Ok(r) => r,
            // Not taken: the connection is going away; nothing was sent.
            Err(_) => {
                handle = None;
                shared.put_back(intended_ns);
                shared.connection_lost(conn, generation);
                continue;
            }
        };
        if let Some(body) = body {
            let _ = body_stream.send_data(body, true);
        }
        shared.count_sent();
        let sent_ns = shared.now_ns();
        shared.inflight.set(shared.inflight.get() + 1);
        let outcome = match tokio::time::timeout(timeout, exchange(response)).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Failed("timeout"),
        };
        shared.inflight.set(shared.inflight.get() - 1);
        let now = shared.now_ns();
        let mut rec = shared.rec.borrow_mut();
        match outcome {
            Outcome::Status(status) => match super::protocol::http::status_error(status) {
                None => rec.success(now - intended_ns.unwrap_or(sent_ns), now - sent_ns, now),
                Some(kind) => rec.error(kind, now),
            },
            Outcome::Refused => {
                rec.withdraw(1);
                shared.resend_owed.set(shared.resend_owed.get() + 1);
                drop(rec);
                shared.put_back(intended_ns);
                shared.connection_lost(conn, generation);
            }
            Outcome::Failed(kind) => rec.error(kind, now),
        }
    }
}

/// Waits for the response and reads its body to the end.
async fn exchange(response: h2::client::ResponseFuture) -> Outcome {
    let response = match response.await {
        Ok(r) => r,
        Err(e) => return classify(&e),
    };
    let status = response.status().as_u16();
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        match chunk {
            Ok(data) => {
                let _ = body.flow_control().release_capacity(data.len());
            }
            Err(e) => {
                return match classify(&e) {
                    // Refused after part of the answer: it was processed.
                    Outcome::Refused => Outcome::Failed("h2_reset"),
                    other => other,
                };
            }
        }
    }
    Outcome::Status(status)
}

/// What an `h2` error on a stream means for its request.
fn classify(e: &h2::Error) -> Outcome {
    let graceful_goaway =
        e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR);
    if graceful_goaway || e.reason() == Some(h2::Reason::REFUSED_STREAM) {
        Outcome::Refused
    } else if e.is_reset() {
        Outcome::Failed("h2_reset")
    } else if e.is_go_away() {
        Outcome::Failed("h2_goaway")
    } else if e.is_io() {
        Outcome::Failed("io_error")
    } else {
        Outcome::Failed("h2_error")
    }
}

/// Reports the per-second intervals as they end, and notices a stop.
async fn tick(shared: Rc<Shared>) {
    loop {
        let now = shared.now_ns();
        if shared.stop.load(Ordering::Relaxed) {
            shared.rec.borrow_mut().stop_at(now);
        }
        let inflight = shared.inflight.get();
        let next = {
            let mut rec = shared.rec.borrow_mut();
            rec.cross_boundaries(now, || inflight);
            rec.next_boundary_ns()
        };
        let Some(next) = next else { return };
        let wait_ns = next.saturating_sub(shared.now_ns()).min(10_000_000);
        tokio::time::sleep(Duration::from_nanos(wait_ns.max(100_000))).await;
    }
}

/// The connection's socket, counting the bytes that cross it.
struct Counted<S> {
    inner: S,
    shared: std::rc::Weak<Shared>,
}

impl<S> Counted<S> {
    fn count(&self, n: usize, incoming: bool) {
        if let Some(shared) = self.shared.upgrade() {
            let now = shared.now_ns();
            let mut rec = shared.rec.borrow_mut();
            if incoming {
                rec.bytes_in(n, now);
            } else {
                rec.bytes_out(n, now);
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            self.count(n, true);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &poll {
            self.count(*n, false);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
