//! HTTP/2 connections under the generator's event loop ([`crate::load::worker`], the
//! HTTP/1.1 threads' loop: one epoll, edge-triggered sockets registered once, one read buffer
//! per thread, a timerfd for open loop), each a sans-I/O HTTP/2 connection ([`H2Conn`]) over
//! its socket, plain or TLS. Per event: the socket is read until drained, the frames acted
//! on, the streams that ended recorded, new streams opened in their place, and everything
//! queued written with one `write`.
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

use bytes::Bytes;

use super::conn::{encode_request, ConnError, Event, H2Conn};
use crate::load::budget::ReplyBudget;
use crate::load::target::Target;
use crate::load::template::grpc::Calls;
use crate::load::template::H2Requests;
use crate::load::transport::Stream;
use crate::load::worker::{Connection, Sent, Tally, Verdict};
use crate::load::LoadConfig;
use crate::record::load::RequestError;

/// A write buffer grown past this is freed once flushed.
const KEEP_WBUF_BYTES: usize = 64 * 1024;

/// A stream's request: when it was due (open loop) and when it was sent.
type Tag = Sent;

/// One HTTP/2 connection's state beside its socket.
pub(in crate::load) struct H2Session {
    /// Once the socket is established (and ALPN agreed `h2`).
    h2: Option<H2Conn<Tag>>,
    /// When the connection was opened (a server that never sends its SETTINGS times out).
    opened_ns: u64,
    /// With `--requests`: this connection's requests.
    templates: Option<H2Requests>,
    /// Without `--requests`: the one request's HPACK block and body.
    block: Vec<u8>,
    body: Option<Bytes>,
    /// gRPC with a message made per call: this connection's maker of them.
    calls: Option<Calls>,
    /// gRPC: the messages each call sends (more than 1 on a client stream).
    per_call: u32,
    /// With `--requests`: each request's block, encoded as it is sent.
    template_block: Vec<u8>,
    /// How streams ended, from the last frames read (reused).
    events: Vec<Event<Tag>>,
    /// What `h2` holds of the server's bytes (a cut frame, a header block being collected)
    /// as the thread's [`ReplyBudget`] has it.
    held: usize,
}

impl Connection for H2Session {
    const READ_ON_CONNECT: bool = true;

    fn new(index: usize, config: &LoadConfig, target: &Target) -> Self {
        let templates = target.http2_templates(index, &config.proto);
        let mut block = Vec::new();
        let mut body = None;
        if templates.is_none() {
            let (request, b) = target.http2_request(&config.proto);
            encode_request(&request, &mut block);
            body = b;
        }
        let mut session = H2Session::empty(templates);
        session.block = block;
        session.body = body;
        session.per_call = config.proto.grpc_stream.map_or(1, |s| s.messages_per_call);
        session.calls = config.proto.grpc_calls.as_ref().map(|t| {
            t.connection(
                index,
                crate::load::target::connection_seed(index, &config.proto),
            )
        });
        session
    }

    fn opened(&mut self, now: u64, budget: &mut ReplyBudget) {
        self.close(budget);
        self.opened_ns = now;
    }

    /// Checks ALPN (over TLS) and queues the HTTP/2 preface.
    fn established(
        &mut self,
        stream: &Stream,
        config: &LoadConfig,
        target: &Target,
    ) -> io::Result<()> {
        if let Some(tls) = &target.tls {
            let alpn = stream.alpn_protocol();
            if alpn != Some(super::H2_ALPN) {
                return Err(io::Error::other(super::not_h2(tls.host(), alpn)));
            }
        }
        let h2 = H2Conn::new(config.depth);
        let streamed = config.proto.grpc_stream.is_some_and(|s| s.streamed_replies);
        self.h2 = Some(match (target.grpc, streamed) {
            (false, _) => h2,
            (true, false) => h2.grpc(),
            (true, true) => h2.grpc_streamed(),
        });
        Ok(())
    }

    #[inline]
    fn in_flight(&self) -> usize {
        self.h2.as_ref().map_or(0, H2Conn::active)
    }

    #[inline]
    fn can_send(&self, depth: usize) -> bool {
        self.h2.as_ref().is_some_and(|h| h.can_open(depth))
    }

    /// Opens one stream with the next request.
    fn queue(&mut self, tag: Sent) {
        let h2 = self.h2.as_mut().expect("an HTTP/2 connection");
        match self.templates.as_mut() {
            None => match self.calls.as_mut() {
                None => h2.open(&self.block, self.body.clone(), tag),
                Some(calls) => h2.open(&self.block, Some(calls.next_messages(self.per_call)), tag),
            },
            Some(t) => {
                let (request, body) = t.next_request();
                self.template_block.clear();
                encode_request(&request, &mut self.template_block);
                h2.open(&self.template_block, body, tag);
            }
        }
    }

    #[inline]
    fn out(&self) -> &[u8] {
        self.h2.as_ref().map_or(&[], |h| &h.out)
    }

    #[inline]
    fn written(&mut self, upto: usize) {
        if let Some(h2) = self.h2.as_mut() {
            h2.written(upto);
        }
    }

    fn flushed(&mut self) {
        if let Some(h2) = self.h2.as_mut() {
            h2.out.clear();
            if h2.out.capacity() > KEEP_WBUF_BYTES {
                h2.out = Vec::with_capacity(4096);
            }
        }
    }

    /// Hands `read` to the HTTP/2 state and records the streams that ended. A connection
    /// error (or over its share of the budget with nothing left to lend) ends the connection
    /// with a GOAWAY, which frees what it held.
    fn take(
        &mut self,
        read: &[u8],
        budget: &mut ReplyBudget,
        tally: &mut Tally,
        now: u64,
    ) -> Verdict {
        let h2 = self.h2.as_mut().expect("an HTTP/2 connection");
        let result = h2.receive_at(read, now, &mut self.events);
        tally.messages_read(h2.take_messages());
        for e in self.events.drain(..) {
            ended(e, tally, now);
        }
        let result = result.and_then(|()| self.charge(budget).map_err(ConnError::over_budget));
        match result {
            Ok(()) => Verdict::Open,
            Err(e) => {
                if let Some(h2) = self.h2.as_mut() {
                    h2.goaway(e.code);
                }
                Verdict::FlushAndReset(e.kind)
            }
        }
    }

    fn closed_kind(&self) -> RequestError {
        match &self.h2 {
            Some(h) if h.goaway_error() => RequestError::H2Goaway,
            _ => RequestError::Closed,
        }
    }

    fn abandon(&mut self) -> usize {
        let mut lost = Vec::new();
        if let Some(h2) = self.h2.as_mut() {
            h2.abandon(&mut lost);
        }
        lost.len()
    }

    fn dropped(&mut self, budget: &mut ReplyBudget) {
        self.close(budget);
    }

    /// A server that never sent its SETTINGS resets the connection; streams past their
    /// timeout are cancelled, each a `timeout` error.
    fn expire(&mut self, timeout_ns: u64, tally: &mut Tally, now: u64) -> Option<RequestError> {
        let h2 = self.h2.as_mut()?;
        if !h2.ready() && now.saturating_sub(self.opened_ns) >= timeout_ns {
            return Some(RequestError::Timeout);
        }
        let mut expired = Vec::new();
        h2.cancel_where(
            |t| now.saturating_sub(t.sent_ns) >= timeout_ns,
            &mut expired,
        );
        for _ in expired {
            tally.failed(RequestError::Timeout, now);
        }
        None
    }

    /// After a GOAWAY, once its last streams ended.
    fn finished(&self) -> bool {
        self.h2
            .as_ref()
            .is_some_and(|h| h.going_away() && h.active() == 0)
    }
}

impl H2Session {
    fn empty(templates: Option<H2Requests>) -> Self {
        H2Session {
            h2: None,
            opened_ns: 0,
            templates,
            block: Vec::new(),
            body: None,
            calls: None,
            per_call: 1,
            template_block: Vec::new(),
            events: Vec::new(),
            held: 0,
        }
    }

    /// Tells `budget` what the HTTP/2 state holds now; the error kind when that is more
    /// than the connection's share and the budget cannot lend the rest (what it held before
    /// stays charged until it is closed).
    fn charge(&mut self, budget: &mut ReplyBudget) -> Result<(), RequestError> {
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
        // Down to nothing: never refused.
        let _ = self.charge(budget);
    }
}

/// Records how one stream ended.
fn ended(e: Event<Tag>, tally: &mut Tally, now: u64) {
    match e {
        Event::Done(tag, status) => {
            let error = crate::load::protocol::http::status_error(status);
            tally.answered(tag, error, now);
            if error.is_some() {
                tally.failed_status(status, now);
            }
        }
        Event::Streamed(tag, messages, first_ns) => tally.streamed(tag, messages, first_ns, now),
        Event::Refused(tag) => tally.refused(tag),
        Event::Failed(_, kind) => tally.failed(kind, now),
        Event::GrpcStatus(_, code, message) => tally.failed_named(
            &crate::load::protocol::grpc::status_kind(code, &message),
            now,
        ),
    }
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
    fn conn_with_a_stream() -> H2Session {
        let mut h2 = H2Conn::new(1);
        h2.receive(&frame(SETTINGS, 0, 0, &[]), &mut Vec::new())
            .unwrap();
        let tag = Tag {
            intended_ns: 0,
            sent_ns: 0,
        };
        h2.open(&[0x82], None, tag);
        let mut c = H2Session::empty(None);
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

    fn take(c: &mut H2Session, budget: &mut ReplyBudget, bytes: &[u8]) -> Result<(), RequestError> {
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
            Err(RequestError::ReplyOverBudget)
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
