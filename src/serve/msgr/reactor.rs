//! The reactor architecture (the Seastar/Crimson model): one pinned event loop per core,
//! each with its own SO_REUSEPORT listener; a connection is accepted, read and answered on
//! the same thread, and no mutable state is shared between loops.

use std::sync::Arc;

use mio::net::TcpStream;
use mio::{Interest, Poll};

use super::conn::{self, Close, OutBuf, Slab, OUT_HIGH_WATER_BYTES, READ_BUF_BYTES};
use super::work::Work;
use super::{accept_all, EventLoop, LoopShared, LISTENER};
use crate::serve::stats::ThreadStat;
use crate::wire::msgr::{encode_reply, RequestDecoder};

struct Conn {
    stream: TcpStream,
    decoder: RequestDecoder,
    out: OutBuf,
    /// Input left when the output filled mid-read (at most one read buffer).
    carry: Vec<u8>,
}

/// One reactor thread's state.
pub struct Reactor {
    poll: Poll,
    listener: mio::net::TcpListener,
    conns: Slab<Conn>,
    read_buf: Box<[u8]>,
    stat: Arc<ThreadStat>,
    shared: Arc<LoopShared>,
}

impl Reactor {
    /// A reactor over `poll` (whose waker the server keeps, to stop it) and its own listener.
    pub fn new(
        poll: Poll,
        mut listener: mio::net::TcpListener,
        stat: Arc<ThreadStat>,
        shared: Arc<LoopShared>,
    ) -> std::io::Result<Reactor> {
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        Ok(Reactor {
            poll,
            listener,
            conns: Slab::default(),
            read_buf: vec![0u8; READ_BUF_BYTES].into_boxed_slice(),
            stat,
            shared,
        })
    }

    /// Serves until the server's stop flag is set.
    pub fn run(mut self) {
        super::run_event_loop(&mut self);
    }
}

impl EventLoop for Reactor {
    fn parts(&mut self) -> (&mut Poll, &LoopShared, &ThreadStat) {
        (&mut self.poll, &self.shared, &self.stat)
    }

    fn accept(&mut self) {
        let registry = self.poll.registry();
        let conns = &mut self.conns;
        accept_all(&self.listener, &self.shared, |stream| {
            let conn = Conn {
                stream,
                decoder: RequestDecoder::default(),
                out: OutBuf::default(),
                carry: Vec::new(),
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
        let rules = (self.shared.max_frame, self.shared.work);
        let buf = &mut self.read_buf;
        if let Err(why) = serve(conn, buf, rules, &self.stat, peer_closed) {
            self.shared.counters.count_close(&why);
            if let Some(mut conn) = self.conns.remove(slot) {
                let _ = self.poll.registry().deregister(&mut conn.stream);
            }
        }
    }
}

/// Reads, answers and writes until the socket is drained or the peer stops reading.
fn serve(
    conn: &mut Conn,
    read_buf: &mut [u8],
    rules: (u32, Work),
    stat: &ThreadStat,
    peer_closed: bool,
) -> Result<(), Close> {
    loop {
        conn.out.flush(&mut conn.stream)?;
        if conn.out.pending() > OUT_HIGH_WATER_BYTES {
            // Resumed by the writable edge once the peer reads.
            return Ok(());
        }
        if !conn.carry.is_empty() {
            let used = answer(&mut conn.decoder, &mut conn.out, &conn.carry, rules, stat)?;
            conn.carry.drain(..used);
            continue;
        }
        let mid_frame = !conn.decoder.at_frame_boundary();
        let Some(n) = conn::read_some(&mut conn.stream, read_buf, mid_frame)? else {
            return Ok(());
        };
        let used = answer(
            &mut conn.decoder,
            &mut conn.out,
            &read_buf[..n],
            rules,
            stat,
        )?;
        if used < n {
            conn.carry.extend_from_slice(&read_buf[used..n]);
        } else if n < read_buf.len() && !peer_closed {
            // A short read drained the socket (epoll signals the next arrival): skip the
            // read that would only say EAGAIN.
            conn.out.flush(&mut conn.stream)?;
            return Ok(());
        }
    }
}

/// Appends a reply for every whole request in `data`, stopping once the output is full;
/// returns the bytes used.
fn answer(
    decoder: &mut RequestDecoder,
    out: &mut OutBuf,
    data: &[u8],
    (max_frame, work): (u32, Work),
    stat: &ThreadStat,
) -> Result<usize, Close> {
    let mut served = 0;
    let used = decoder.feed(data, max_frame, |reply_len| {
        work.run();
        encode_reply(out.buf_mut(), reply_len);
        served += 1;
        out.pending() <= OUT_HIGH_WATER_BYTES
    })?;
    stat.add_ops(served);
    Ok(used)
}
