//! A connection's byte stream: plain TCP, or TLS over it.
//!
//! TLS uses rustls's sans-I/O `ClientConnection`, so it fits the engine's edge-triggered
//! event loop unchanged: the socket is read into a buffer of ours (one `read` per event, as
//! for plain TCP, where rustls's own `read_tls` would read 4 KiB at a time) and the records
//! fed to rustls from it; outgoing records are collected and written with one `write`. The
//! worker sees plaintext through [`Stream::read`] and [`Stream::write`] either way.
//!
//! The handshake is driven by [`Stream::established`], which the worker already calls until
//! a non-blocking connect has completed: a TLS connection counts as established once its
//! handshake is done, and the handshake's duration (from the TCP connection to the end of
//! the handshake) is kept for the load's `tls_handshake_us`.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use mio::event::Source;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use rustls::{ClientConnection, HandshakeKind};

use super::tls::{is_tls_error, TlsClient};
use crate::record::load::RequestError;

/// Ciphertext read from the socket at a time.
const TLS_READ_CHUNK: usize = 64 * 1024;

/// A completed TLS handshake.
pub(super) struct Handshake {
    /// From the TCP connection to the end of the handshake.
    pub duration_ns: u64,
    /// An abbreviated handshake that resumed an earlier session.
    pub resumed: bool,
}

/// One connection's stream.
pub(super) struct Stream {
    sock: TcpStream,
    tls: Option<Box<Tls>>,
}

/// TLS state of one connection.
struct Tls {
    session: ClientConnection,
    /// Ciphertext read from the socket, not yet given to rustls: `raw_in[in_pos..in_end]`.
    raw_in: Vec<u8>,
    in_pos: usize,
    in_end: usize,
    /// The last socket read was short: the socket had nothing more then.
    socket_drained: bool,
    /// The server closed (or sent close_notify) after plaintext already returned: the next
    /// read returns end of file.
    eof_pending: bool,
    /// Ciphertext made by rustls, not yet written: `raw_out[out_pos..]`.
    raw_out: Vec<u8>,
    out_pos: usize,
    /// When the TCP connection was established (the handshake's start).
    tcp_up: Option<Instant>,
    /// The finished handshake: its duration and whether it resumed a session, until taken.
    handshake: Option<Handshake>,
}

impl Stream {
    /// Starts a non-blocking connection to `addr` (from `source` when given), with TLS when
    /// `tls` is given.
    pub fn connect(
        addr: SocketAddr,
        source: Option<IpAddr>,
        tls: Option<&TlsClient>,
    ) -> io::Result<Stream> {
        let sock = match source {
            None => TcpStream::connect(addr)?,
            Some(src) => TcpStream::from_std(super::sources::connect_from(addr, src)?),
        };
        sock.set_nodelay(true)?;
        let tls = match tls {
            Some(client) => Some(Box::new(Tls {
                session: client.session()?,
                raw_in: vec![0; TLS_READ_CHUNK],
                in_pos: 0,
                in_end: 0,
                socket_drained: false,
                eof_pending: false,
                raw_out: Vec::with_capacity(4096),
                out_pos: 0,
                tcp_up: None,
                handshake: None,
            })),
            None => None,
        };
        Ok(Stream { sock, tls })
    }

    /// Whether the connection is ready for requests: the TCP connect has completed and, with
    /// TLS, so has the handshake (driven forward here). An error is a failed connect or
    /// handshake.
    pub fn established(&mut self) -> io::Result<bool> {
        let Some(tls) = self.tls.as_mut() else {
            return tcp_established(&self.sock);
        };
        if tls.tcp_up.is_none() {
            if !tcp_established(&self.sock)? {
                return Ok(false);
            }
            tls.tcp_up = Some(Instant::now());
        }
        tls.handshake(&mut self.sock)
    }

    /// The protocol the server chose by ALPN (TLS only).
    pub fn alpn_protocol(&self) -> Option<&[u8]> {
        self.tls.as_ref().and_then(|t| t.session.alpn_protocol())
    }

    /// The TLS handshake that just completed, once.
    pub fn take_handshake(&mut self) -> Option<Handshake> {
        self.tls.as_mut().and_then(|t| t.handshake.take())
    }

    /// Reads plaintext. With TLS, a read shorter than `buf` may leave the socket unread; see
    /// [`Stream::drained`].
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.tls.as_mut() {
            None => self.sock.read(buf),
            Some(tls) => tls.read(&mut self.sock, buf),
        }
    }

    /// After a read shorter than its buffer: whether the socket has nothing more for now
    /// (edge-triggered, the loop may wait for the next event).
    pub fn drained(&self) -> bool {
        self.tls.as_ref().is_none_or(|t| !t.eof_pending)
    }

    /// Writes plaintext; returns how much was taken.
    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.tls.as_mut() {
            None => self.sock.write(buf),
            Some(tls) => tls.write(&mut self.sock, buf),
        }
    }

    /// Writes what TLS has ready (records of earlier writes, handshake messages, alerts).
    pub fn flush_pending(&mut self) -> io::Result<()> {
        match self.tls.as_mut() {
            None => Ok(()),
            Some(tls) => tls.flush(&mut self.sock),
        }
    }
}

/// The error kind of a failed read or write: a TLS protocol failure or a socket's.
pub(super) fn error_kind(e: &io::Error) -> RequestError {
    if is_tls_error(e) {
        RequestError::TlsError
    } else {
        RequestError::IoError
    }
}

/// The error kind of a failed connection attempt.
pub(super) fn connect_error_kind(e: &io::Error) -> RequestError {
    if is_tls_error(e) {
        RequestError::TlsHandshake
    } else {
        RequestError::Connect
    }
}

impl Tls {
    fn handshake(&mut self, sock: &mut TcpStream) -> io::Result<bool> {
        loop {
            match self.flush(sock) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            if !self.session.is_handshaking() {
                let started = self.tcp_up.expect("handshake started");
                self.handshake = Some(Handshake {
                    duration_ns: started.elapsed().as_nanos() as u64,
                    resumed: self.session.handshake_kind() == Some(HandshakeKind::Resumed),
                });
                return Ok(true);
            }
            if self.in_pos == self.in_end {
                match sock.read(&mut self.raw_in) {
                    Ok(0) => {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection during the TLS handshake",
                        ))
                    }
                    Ok(n) => (self.in_pos, self.in_end) = (0, n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            self.feed()?;
        }
    }

    /// Gives rustls the next ciphertext of `raw_in` and processes it.
    fn feed(&mut self) -> io::Result<()> {
        let mut rest = &self.raw_in[self.in_pos..self.in_end];
        let n = self.session.read_tls(&mut rest)?;
        self.in_pos += n;
        if let Err(e) = self.session.process_new_packets() {
            // The alert that says why goes out before the connection is dropped.
            let _ = self.session.write_tls(&mut self.raw_out);
            return Err(io::Error::new(io::ErrorKind::InvalidData, e));
        }
        Ok(())
    }

    fn read(&mut self, sock: &mut TcpStream, buf: &mut [u8]) -> io::Result<usize> {
        if self.eof_pending {
            return Ok(0);
        }
        let mut got = 0;
        loop {
            match self.session.reader().read(&mut buf[got..]) {
                // close_notify.
                Ok(0) if got < buf.len() => return self.end_of_file(got),
                Ok(n) => {
                    got += n;
                    if got == buf.len() {
                        return Ok(got);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if got > 0 => {
                    let _ = e;
                    return self.end_of_file(got);
                }
                Err(e) => return Err(e),
            }
            if self.in_pos < self.in_end {
                self.feed()?;
                continue;
            }
            if got > 0 && self.socket_drained {
                return Ok(got);
            }
            match sock.read(&mut self.raw_in) {
                Ok(0) => return self.end_of_file(got),
                Ok(n) => {
                    (self.in_pos, self.in_end) = (0, n);
                    self.socket_drained = n < self.raw_in.len();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if got > 0 && e.kind() == io::ErrorKind::WouldBlock => return Ok(got),
                Err(e) => return Err(e),
            }
        }
    }

    /// The stream ended after `got` bytes: those first, then end of file.
    fn end_of_file(&mut self, got: usize) -> io::Result<usize> {
        self.eof_pending = got > 0;
        Ok(got)
    }

    fn write(&mut self, sock: &mut TcpStream, buf: &[u8]) -> io::Result<usize> {
        self.flush(sock)?;
        let n = self.session.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        match self.flush(sock) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            // The records stay in `raw_out` until the socket takes them.
            _ => Ok(n),
        }
    }

    fn flush(&mut self, sock: &mut TcpStream) -> io::Result<()> {
        while self.session.wants_write() {
            self.session.write_tls(&mut self.raw_out)?;
        }
        while self.out_pos < self.raw_out.len() {
            match sock.write(&self.raw_out[self.out_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.raw_out.clear();
        self.out_pos = 0;
        Ok(())
    }
}

/// Whether a non-blocking connect has completed.
fn tcp_established(stream: &TcpStream) -> io::Result<bool> {
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    match stream.peer_addr() {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
        Err(e) => Err(e),
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.sock.register(registry, token, interests)
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        self.sock.reregister(registry, token, interests)
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        self.sock.deregister(registry)
    }
}
