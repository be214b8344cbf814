//! Wire protocols of the load engine, one module each behind [`Protocol`].
//!
//! A protocol instance belongs to one connection: it encodes requests (once, patching
//! varying fields in place) and recognises complete replies at the front of a buffer.

pub mod grpc;
pub mod grpc_message;
pub mod grpc_reflection;
pub mod http;
pub mod keys;
pub mod memcache;
pub mod msgr;
pub mod redis;

use crate::record::load::RequestError;

/// What [`Protocol::parse_reply`] found at the front of the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// Not a whole reply yet: read more.
    Incomplete,
    /// One whole reply of `len` bytes.
    Done {
        /// Bytes the reply occupies at the front of the buffer.
        len: usize,
        /// The error kind when the reply says the request failed (HTTP non-2xx, RESP error).
        error: Option<RequestError>,
        /// The server will close the connection after this reply (HTTP `Connection: close`).
        close: bool,
        /// For a lookup (a redis GET): whether the key was found; `None` for other replies.
        found: Option<bool>,
        /// HTTP: the reply's status code, so failures are counted per code (403, 503), not
        /// only per class; `None` for other protocols.
        status: Option<u16>,
    },
    /// The bytes cannot be a reply: the connection must be dropped. Names the error kind.
    Invalid(RequestError),
}

/// One connection's view of a request/reply protocol.
pub trait Protocol: Send {
    /// The next request's bytes. Implementations keep one encoded request and patch it.
    fn next_request(&mut self) -> &[u8];
    /// Looks for one complete reply at the front of `buf`. Until it returns `Done` or
    /// `Invalid`, the next call gets the same reply's bytes from its start, maybe more of them
    /// (a parser may remember how far it got).
    fn parse_reply(&mut self, buf: &[u8]) -> Reply;
    /// The connection was dropped: forget the reply in progress and the requests in flight.
    fn reset(&mut self) {}
}

/// A key-value protocol's store of one key, for `--preload` (RESP's SET, memcached's set).
pub trait Preload: Protocol {
    /// The store of key number `key`, the reply read as any other.
    fn set_of(&mut self, key: u64) -> &[u8];
}
