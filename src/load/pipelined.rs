//! Connections of the request/reply protocols (HTTP/1.1, RESP, msgr) under the generator's
//! event loop ([`super::worker`]): requests pipelined up to the depth, replies taken in order.
//!
//! Replies are parsed straight from the thread's read buffer; only the start of a reply a
//! read cut stays with the connection (`partial`), charged to the thread's [`ReplyBudget`]
//! and freed once whole.

use std::collections::VecDeque;
use std::io;

use super::budget::ReplyBudget;
use super::protocol::{Protocol, Reply};
use super::target::Target;
use super::transport::Stream;
use super::worker::{Connection, Sent, Tally, Verdict};
use super::LoadConfig;
use crate::record::load::RequestError;

/// A write buffer grown past this (a deep pipeline of big requests) is freed once flushed.
const KEEP_WBUF_BYTES: usize = 16 * 1024;

/// One connection's protocol and its requests.
pub(super) struct Pipelined {
    proto: Box<dyn Protocol>,
    /// The start of a reply a read cut short; empty (no allocation) between replies.
    partial: Vec<u8>,
    /// `partial`'s capacity as the thread's [`ReplyBudget`] has it.
    held: usize,
    /// Requests not yet written; sized to the requests, not reserved up front.
    wbuf: Vec<u8>,
    /// Requests on the wire, oldest first.
    pending: VecDeque<Sent>,
}

impl Connection for Pipelined {
    const READ_ON_CONNECT: bool = false;

    fn new(index: usize, config: &LoadConfig, target: &Target) -> Self {
        Pipelined {
            proto: target.connection(index, &config.proto),
            partial: Vec::new(),
            held: 0,
            wbuf: Vec::new(),
            pending: VecDeque::with_capacity(config.depth),
        }
    }

    fn opened(&mut self, _now: u64, budget: &mut ReplyBudget) {
        self.partial = Vec::new();
        self.wbuf.clear();
        self.account(budget);
    }

    fn established(&mut self, _: &Stream, _: &LoadConfig, _: &Target) -> io::Result<()> {
        Ok(())
    }

    #[inline]
    fn in_flight(&self) -> usize {
        self.pending.len()
    }

    #[inline]
    fn can_send(&self, depth: usize) -> bool {
        self.pending.len() < depth
    }

    #[inline]
    fn queue(&mut self, sent: Sent) {
        self.wbuf.extend_from_slice(self.proto.next_request());
        self.pending.push_back(sent);
    }

    #[inline]
    fn out(&self) -> &[u8] {
        &self.wbuf
    }

    #[inline]
    fn written(&mut self, _upto: usize) {}

    #[inline]
    fn flushed(&mut self) {
        self.wbuf.clear();
        if self.wbuf.capacity() > KEEP_WBUF_BYTES {
            self.wbuf = Vec::new();
        }
    }

    /// Completes the whole replies that `read` (just received) ends, keeping the start of a
    /// cut one.
    fn take(
        &mut self,
        read: &[u8],
        budget: &mut ReplyBudget,
        tally: &mut Tally,
        now: u64,
    ) -> Verdict {
        if self.partial.is_empty() {
            // The common case: whole replies straight from the thread's buffer, no copy.
            let used = match self.parse_replies(read, tally, now) {
                Ok(used) => used,
                Err(verdict) => return verdict,
            };
            if used < read.len() {
                let rest = &read[used..];
                match budget.grow(0, rest.len(), rest.len()) {
                    Ok(_) => self.partial.extend_from_slice(rest),
                    Err(kind) => return Verdict::Reset(kind),
                }
                self.account(budget);
            }
            return Verdict::Open;
        }
        let mut buf = std::mem::take(&mut self.partial);
        let need = buf.len() + read.len();
        if need > buf.capacity() {
            // Amortised growth (doubling) as far as the budget allows, so what is accounted
            // is what is allocated.
            match budget.grow(self.held, need, buf.capacity() * 2) {
                Ok(cap) => buf.reserve_exact(cap - buf.len()),
                Err(kind) => {
                    self.partial = buf;
                    return Verdict::Reset(kind);
                }
            }
        }
        buf.extend_from_slice(read);
        let used = match self.parse_replies(&buf, tally, now) {
            Ok(used) => used,
            Err(verdict) => {
                self.partial = buf;
                return verdict;
            }
        };
        if used < buf.len() {
            buf.drain(..used);
            // Freed once whole (below); until then it holds one reply's bytes at most.
            self.partial = buf;
        }
        self.account(budget);
        Verdict::Open
    }

    fn abandon(&mut self) -> usize {
        let n = self.pending.len();
        self.pending.clear();
        n
    }

    fn dropped(&mut self, budget: &mut ReplyBudget) {
        self.partial = Vec::new();
        self.proto.reset();
        self.account(budget);
    }

    fn expire(&mut self, timeout_ns: u64, _: &mut Tally, now: u64) -> Option<RequestError> {
        let oldest = self.pending.front().map(|p| p.sent_ns);
        oldest
            .is_some_and(|t| now.saturating_sub(t) >= timeout_ns)
            .then_some(RequestError::Timeout)
    }
}

impl Pipelined {
    /// Tells the budget what the reply buffer holds now.
    fn account(&mut self, budget: &mut ReplyBudget) {
        let cap = self.partial.capacity();
        if cap != self.held {
            budget.held(self.held, cap);
            self.held = cap;
        }
    }

    /// Completes the whole replies at the front of `buf`: the bytes they used, or what
    /// becomes of the connection when it cannot go on.
    #[inline]
    fn parse_replies(&mut self, buf: &[u8], tally: &mut Tally, now: u64) -> Result<usize, Verdict> {
        let mut at = 0;
        while at < buf.len() {
            match self.proto.parse_reply(&buf[at..]) {
                Reply::Incomplete => break,
                Reply::Invalid(kind) => return Err(Verdict::Reset(kind)),
                Reply::Done {
                    len,
                    error,
                    close,
                    found,
                    status,
                } => {
                    at += len;
                    let Some(p) = self.pending.pop_front() else {
                        return Err(Verdict::Reset(RequestError::UnexpectedReply));
                    };
                    tally.answered(p, error, now);
                    if let (Some(_), Some(code)) = (error, status) {
                        tally.failed_status(code, now);
                    }
                    if let Some(found) = found {
                        tally.lookup(found, now);
                    }
                    if close {
                        self.close_after_reply(tally);
                        return Err(Verdict::Reopen);
                    }
                }
            }
        }
        Ok(at)
    }

    /// The server said it closes: requests written after that reply were never read by it,
    /// so they leave `sent` and are sent again on a new connection (not counted as errors).
    fn close_after_reply(&mut self, tally: &mut Tally) {
        while let Some(p) = self.pending.pop_back() {
            tally.refused(p);
        }
        self.wbuf.clear();
    }
}
