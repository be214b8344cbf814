//! The wire's own round trip between two daemons: at start, before its poll loop, every
//! daemon thread bounces frames over its peer connections, the lower rank of each pair
//! pinging and the higher one echoing, one frame in flight, with the loop's waiting policy
//! ([`PollMode`]) and nothing else to do. A ping is a request frame the size of a
//! client's GET (8-byte key, 16-byte value: 36 bytes), its echo a response carrying the
//! value back (28 bytes, as a GET hit). The pinger records each round trip into the
//! `ping_pong` histogram: the plain TCP ping-pong the daemon's remote RTT is compared with,
//! between the very same threads and over the very same connection.
//!
//! The pinger sends `n` pings and then a last one ([`OP_PING_LAST`]), so the echoing side
//! needs no count. Pairs are taken in rank order on every rank ((0,1), (0,2), ..., (1,2),
//! ...), so no two ranks wait on each other.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::peers::PeerFault;
use crate::wire::kvd::{decode, encode_request, encode_response, Frame};
use crate::wire::shmkv::per_worker::SPIN;

/// Op of a ping frame (never a client's op).
pub const OP_PING: u8 = 0xF0;
/// Op of the last ping: the echoing side returns to its loop after echoing it.
pub const OP_PING_LAST: u8 = 0xF1;
/// The whole calibration of one pair must end within this.
pub const CALIBRATION_LIMIT: Duration = Duration::from_secs(10);

/// How a daemon waits when it has nothing to do but wait for a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PollMode {
    /// Spin [`SPIN`], then block in poll(2) on the peer sockets when every client's request
    /// is waiting for a peer (yield otherwise): the CPU goes to the clients and the other
    /// rank when they share it.
    Adaptive,
    /// Spin (never block) while a remote request is in flight: the fastest on CPUs of its
    /// own, time slices of delay when the CPU is shared.
    Spin,
}

/// A peer connection during calibration: its bytes read and not yet used.
pub struct Wire<'a> {
    /// The connection (non-blocking).
    pub stream: &'a mut TcpStream,
    /// Bytes read past the last whole frame: the peer's first frames after calibration,
    /// which the daemon takes as its peer input.
    pub input: Vec<u8>,
    mode: PollMode,
    deadline: Instant,
}

/// A ping's key and value: the size of a client's GET of `key:NNNN` with 16-byte values.
const KEY: &[u8] = b"key:0000";
const VALUE: [u8; 16] = [b'p'; 16];

impl<'a> Wire<'a> {
    /// Calibration over `stream`, waiting with `mode`.
    pub fn new(stream: &'a mut TcpStream, mode: PollMode) -> Self {
        Wire {
            stream,
            input: Vec::with_capacity(4096),
            mode,
            deadline: Instant::now() + CALIBRATION_LIMIT,
        }
    }

    /// Sends `n` pings and the last one, one at a time, recording each round trip (ns).
    pub fn ping(&mut self, n: u64, rtt_ns: &mut Histogram<u64>) -> Result<(), PeerFault> {
        let mut out = Vec::with_capacity(64);
        for i in 0..=n {
            out.clear();
            let op = if i == n { OP_PING_LAST } else { OP_PING };
            encode_request(&mut out, i as u32, op, KEY, &VALUE);
            let sent = Instant::now();
            self.write_all(&out)?;
            let (len, ok) =
                self.frame(|f| matches!(f, Frame::Response { id, .. } if id == i as u32))?;
            if !ok {
                return Err(PeerFault::OtherFrame(i));
            }
            if i < n {
                let _ = rtt_ns.record(sent.elapsed().as_nanos() as u64);
            }
            self.input.drain(..len);
        }
        Ok(())
    }

    /// Echoes pings until the last one; how many came.
    pub fn pong(&mut self) -> Result<u64, PeerFault> {
        let mut out = Vec::with_capacity(64);
        for count in 0.. {
            let mut echo = None;
            let (len, ok) = self.frame(|f| match f {
                Frame::Request { id, op, value, .. } if op == OP_PING || op == OP_PING_LAST => {
                    out.clear();
                    encode_response(&mut out, id, op, value);
                    echo = Some(op);
                    true
                }
                _ => false,
            })?;
            if !ok {
                return Err(PeerFault::NotPing);
            }
            self.input.drain(..len);
            self.write_all(&out)?;
            if echo == Some(OP_PING_LAST) {
                return Ok(count);
            }
        }
        unreachable!("the loop returns")
    }

    /// Waits for a whole frame; (its length, what `check` said of it).
    fn frame(
        &mut self,
        mut check: impl FnMut(Frame<'_>) -> bool,
    ) -> Result<(usize, bool), PeerFault> {
        let mut buf = [0u8; 4096];
        let mut idle_since = Instant::now();
        loop {
            match decode(&self.input) {
                Ok(Some((f, len))) => return Ok((len, check(f))),
                Ok(None) => {}
                Err(e) => return Err(PeerFault::Malformed(e)),
            }
            match self.stream.read(&mut buf) {
                Ok(0) => return Err(PeerFault::Closed),
                Ok(n) => {
                    self.input.extend_from_slice(&buf[..n]);
                    idle_since = Instant::now();
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    self.wait(idle_since)?
                }
                Err(e) => return Err(PeerFault::Read(e)),
            }
        }
    }

    /// One wait for the socket: spin, or (adaptive, after [`SPIN`]) poll(2) for 1 ms.
    fn wait(&self, idle_since: Instant) -> Result<(), PeerFault> {
        if Instant::now() >= self.deadline {
            return Err(PeerFault::Calibration(CALIBRATION_LIMIT.as_secs()));
        }
        if self.mode == PollMode::Adaptive && idle_since.elapsed() >= SPIN {
            let mut fds = [PollFd::new(self.stream.as_fd(), PollFlags::POLLIN)];
            let _ = poll(&mut fds, PollTimeout::from(1u8));
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }

    fn write_all(&mut self, mut bytes: &[u8]) -> Result<(), PeerFault> {
        while !bytes.is_empty() {
            match self.stream.write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    self.wait(Instant::now())?
                }
                Err(e) => return Err(PeerFault::Write(e)),
            }
        }
        Ok(())
    }
}
