//! Pieces both architectures use per connection: the slot table, the output buffer, the
//! reasons a connection ends, and the counters of those ends.

use std::io::{self, ErrorKind, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::wire::msgr::FrameError;

/// Read buffer of one event loop, shared by all its connections (the decoder keeps no payload).
pub const READ_BUF_BYTES: usize = 64 * 1024;

/// Stop reading a connection while this much output waits for the peer to read it:
/// a client that pipelines without reading cannot grow the server's memory.
pub const OUT_HIGH_WATER_BYTES: usize = 256 * 1024;

/// First mio token of a connection; 0 and 1 are the listener and the waker.
pub const FIRST_CONN_TOKEN: usize = 2;

/// Why a connection was closed by the server.
#[derive(Debug)]
pub enum Close {
    /// The peer closed between frames.
    PeerClosed,
    /// The peer closed in the middle of a frame.
    Truncated,
    /// A frame broke the bound (garbage reads as a huge length).
    Refused(FrameError),
    /// A socket error (reset, broken pipe: routine when a load generator stops).
    Io,
}

impl From<FrameError> for Close {
    fn from(err: FrameError) -> Self {
        Close::Refused(err)
    }
}

impl From<io::Error> for Close {
    fn from(_: io::Error) -> Self {
        Close::Io
    }
}

/// Connection events of a whole server (updated on accept and close only, never per message).
#[derive(Debug, Default)]
pub struct ConnCounters {
    /// Connections accepted.
    pub accepted: AtomicU64,
    /// Connections the peer closed cleanly.
    pub peer_closed: AtomicU64,
    /// Connections closed mid-frame.
    pub truncated: AtomicU64,
    /// Connections closed for a frame over `--max-frame` (or garbage).
    pub refused: AtomicU64,
    /// Connections closed on a socket error.
    pub io_errors: AtomicU64,
}

impl ConnCounters {
    /// Counts one closed connection by its reason.
    pub fn count_close(&self, why: &Close) {
        let counter = match why {
            Close::PeerClosed => &self.peer_closed,
            Close::Truncated => &self.truncated,
            Close::Refused(_) => &self.refused,
            Close::Io => &self.io_errors,
        };
        if let Close::Refused(err) = why {
            eprintln!("msgr: closed a connection: {err}");
        }
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Reads once into `buf`: `Ok(None)` when nothing is there now, `Err` on close or error.
pub fn read_some(
    stream: &mut impl Read,
    buf: &mut [u8],
    mid_frame: bool,
) -> Result<Option<usize>, Close> {
    loop {
        return match stream.read(buf) {
            Ok(0) if mid_frame => Err(Close::Truncated),
            Ok(0) => Err(Close::PeerClosed),
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => Err(Close::Io),
        };
    }
}

/// Bytes waiting to be written to one connection; the Vec is reused, never shrunk below 64 KiB.
#[derive(Debug, Default)]
pub struct OutBuf {
    buf: Vec<u8>,
    written: usize,
}

impl OutBuf {
    /// Bytes not yet written.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.written
    }

    /// The buffer to append replies to.
    pub fn buf_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Writes until empty or the socket is full.
    pub fn flush(&mut self, stream: &mut impl Write) -> io::Result<()> {
        while self.pending() > 0 {
            match stream.write(&self.buf[self.written..]) {
                Ok(n) => self.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.compact();
        Ok(())
    }

    fn compact(&mut self) {
        if self.pending() == 0 {
            self.buf.clear();
            self.written = 0;
            // One big reply must not pin its memory for the life of the connection.
            if self.buf.capacity() > READ_BUF_BYTES {
                self.buf.shrink_to(READ_BUF_BYTES);
            }
        } else if self.written > self.buf.len() / 2 {
            self.buf.drain(..self.written);
            self.written = 0;
        }
    }
}

/// A table of connections indexed by slot, reusing freed slots.
#[derive(Debug)]
pub struct Slab<T> {
    items: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `item` and returns its slot.
    pub fn insert(&mut self, item: T) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.items[slot] = Some(item);
                slot
            }
            None => {
                self.items.push(Some(item));
                self.items.len() - 1
            }
        }
    }

    /// The item in `slot`, if any.
    pub fn get_mut(&mut self, slot: usize) -> Option<&mut T> {
        self.items.get_mut(slot).and_then(Option::as_mut)
    }

    /// Takes the item out of `slot`.
    pub fn remove(&mut self, slot: usize) -> Option<T> {
        let item = self.items.get_mut(slot)?.take();
        if item.is_some() {
            self.free.push(slot);
        }
        item
    }
}

/// Files a new connection in `conns` and registers its stream under the slot's token,
/// edge-triggered in both directions once (no epoll_ctl per message); a connection that
/// cannot be registered is dropped.
pub fn register_new<C>(
    registry: &mio::Registry,
    conns: &mut Slab<C>,
    conn: C,
    stream: fn(&mut C) -> &mut mio::net::TcpStream,
) {
    let slot = conns.insert(conn);
    let conn = conns.get_mut(slot).expect("just inserted");
    let token = mio::Token(slot + FIRST_CONN_TOKEN);
    let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
    if registry.register(stream(conn), token, interest).is_err() {
        conns.remove(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_reuses_slots() {
        let mut slab = Slab::default();
        let a = slab.insert("a");
        let b = slab.insert("b");
        assert_eq!(slab.remove(a), Some("a"));
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.insert("c"), a);
        assert_eq!(slab.get_mut(b), Some(&mut "b"));
    }

    /// A writer that accepts at most `room` bytes, then would block.
    struct Tight {
        got: Vec<u8>,
        room: usize,
    }

    impl Write for Tight {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.room).min(3);
            self.room -= n;
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn outbuf_keeps_what_would_block_in_order() {
        let mut out = OutBuf::default();
        out.buf_mut().extend_from_slice(b"0123456789");
        let mut w = Tight {
            got: Vec::new(),
            room: 7,
        };
        out.flush(&mut w).unwrap();
        assert_eq!(out.pending(), 3);
        out.buf_mut().extend_from_slice(b"ab");
        w.room = 100;
        out.flush(&mut w).unwrap();
        assert_eq!(out.pending(), 0);
        assert_eq!(w.got, b"0123456789ab");
    }
}
