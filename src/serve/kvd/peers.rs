//! Start-up: one TCP connection per pair of ranks. A rank connects to every lower rank
//! (retrying until the deadline) and accepts every higher one; both sides send a hello with
//! their rank and rank list, and a list that differs is refused on both sides.
//!
//! The listening side does not trust what connects: a connection that sends no whole hello
//! within [`HELLO_WAIT`], or bytes that are not a hello, or a rank that should not connect
//! here, is closed and logged once (its address and what it sent, escaped), and the rank
//! keeps waiting for its real peers. Up to [`MAX_PENDING`] connections wait for their hello
//! at once, read without blocking, so a stalled one delays nobody. Every wait polls the stop
//! flag, so SIGTERM while connecting ends the start-up (and the region is removed).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::KvdError;
use crate::wire::kvd::{decode_hello, encode_hello, hello_wants, FrameError, Hello};

/// How long a connection to the listening side has to send its whole hello.
pub const HELLO_WAIT: Duration = Duration::from_secs(1);
/// How long the dialling side waits for the hello of the rank it reached.
const DIALLED_HELLO_WAIT: Duration = Duration::from_secs(5);
/// Connections waiting for their hello at once; a new one beyond closes the oldest.
pub const MAX_PENDING: usize = 32;
/// Bytes of what a refused connection sent that its log line shows.
const SHOWN_BYTES: usize = 64;
/// How often the waits look at the stop flag and the clock.
const TICK: Duration = Duration::from_millis(5);

/// A connected peer.
#[derive(Debug)]
pub struct PeerConn {
    /// Its rank.
    pub rank: u32,
    /// Its address from the rank list.
    pub addr: SocketAddr,
    /// The connection (blocking until the daemon makes it non-blocking).
    pub stream: TcpStream,
}

/// The rank list as compared at the handshake: addresses trimmed, comma-joined.
pub fn normalized(list: &str) -> String {
    list.split(',').map(str::trim).collect::<Vec<_>>().join(",")
}

/// What this rank is and expects, for the handshakes.
struct Me<'a> {
    rank: u32,
    list: &'a str,
    addrs: &'a [SocketAddr],
    stop: &'a AtomicBool,
}

impl Me<'_> {
    fn stopped(&self) -> Result<(), KvdError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(KvdError::Stopped(self.rank));
        }
        Ok(())
    }
}

/// Connects to every peer of `rank` within `wait`; slot `rank` of the result is `None`.
/// `stop` (SIGTERM) ends the wait with [`KvdError::Stopped`].
pub fn connect_all(
    rank: u32,
    list: &str,
    addrs: &[SocketAddr],
    wait: Duration,
    stop: &AtomicBool,
) -> Result<Vec<Option<PeerConn>>, KvdError> {
    let list = normalized(list);
    let me = Me {
        rank,
        list: &list,
        addrs,
        stop,
    };
    let mut peers: Vec<Option<PeerConn>> = (0..addrs.len()).map(|_| None).collect();
    me.stopped()?;
    if addrs.len() == 1 {
        return Ok(peers);
    }
    let deadline = Instant::now() + wait;
    // Listen first, so the higher ranks can connect while we reach the lower ones.
    let listener = TcpListener::bind(addrs[rank as usize]).map_err(|error| KvdError::Io {
        context: format!(
            "rank {rank}: cannot listen on {} (its entry in --ranks)",
            addrs[rank as usize]
        ),
        error,
    })?;
    for (j, addr) in addrs.iter().enumerate().take(rank as usize) {
        let stream = connect_until(&me, j as u32, *addr, deadline, wait)?;
        peers[j] = Some(dialled_handshake(&me, stream, j as u32, *addr)?);
    }
    listener
        .set_nonblocking(true)
        .map_err(|error| KvdError::Io {
            context: "setting the listener non-blocking".into(),
            error,
        })?;
    accept_higher(&me, &listener, &mut peers, deadline, wait)?;
    Ok(peers)
}

/// A connection to the listener waiting for its hello.
struct Pending {
    stream: TcpStream,
    from: SocketAddr,
    got: Vec<u8>,
    since: Instant,
}

/// Accepts until every higher rank has connected with a good hello.
fn accept_higher(
    me: &Me<'_>,
    listener: &TcpListener,
    peers: &mut [Option<PeerConn>],
    deadline: Instant,
    wait: Duration,
) -> Result<(), KvdError> {
    let rank = me.rank;
    let mut pending: Vec<Pending> = Vec::new();
    while let Some(missing) = (rank as usize + 1..me.addrs.len()).find(|&j| peers[j].is_none()) {
        me.stopped()?;
        accept_new(me, listener, &mut pending)?;
        let mut i = 0;
        while i < pending.len() {
            match read_hello(&mut pending[i]) {
                Ok(None) if pending[i].since.elapsed() < HELLO_WAIT => i += 1,
                Ok(None) => {
                    let p = pending.swap_remove(i);
                    let why = format!("it sent no whole hello within {} s", secs(HELLO_WAIT));
                    refuse(rank, &p, &why);
                }
                Ok(Some(_)) => {
                    let p = pending.swap_remove(i);
                    if let Some(peer) = accepted(me, p, peers)? {
                        let at = peer.rank as usize;
                        peers[at] = Some(peer);
                    }
                }
                Err(why) => {
                    let p = pending.swap_remove(i);
                    refuse(rank, &p, &why.to_string());
                }
            }
        }
        if Instant::now() >= deadline {
            return Err(KvdError::Peer(format!(
                "rank {rank}: rank {missing} ({}) did not connect within {} s; is it running with the same --ranks?",
                me.addrs[missing],
                secs(wait)
            )));
        }
        std::thread::sleep(TICK);
    }
    for p in &pending {
        refuse(rank, p, "every peer had connected before its hello came");
    }
    Ok(())
}

/// Takes every connection the listener has; beyond [`MAX_PENDING`] waiting, the oldest is
/// closed.
fn accept_new(
    me: &Me<'_>,
    listener: &TcpListener,
    pending: &mut Vec<Pending>,
) -> Result<(), KvdError> {
    loop {
        match listener.accept() {
            Ok((stream, from)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                if pending.len() >= MAX_PENDING {
                    let oldest = pending.remove(0);
                    let why = format!("{MAX_PENDING} connections were waiting for their hello");
                    refuse(me.rank, &oldest, &why);
                }
                pending.push(Pending {
                    stream,
                    from,
                    got: Vec::new(),
                    since: Instant::now(),
                });
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            // A connection reset before it was accepted is that connection's problem.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionAborted | ErrorKind::Interrupted
                ) => {}
            Err(error) => {
                return Err(KvdError::Io {
                    context: format!("rank {}: accepting a peer", me.rank),
                    error,
                })
            }
        }
    }
}

/// Why a peer connection (or one that claims to be) is dropped: a phrase, said after "rank
/// N failed: " or "closed a connection from ADDRESS that is not a peer: ".
#[derive(Debug, thiserror::Error)]
pub enum PeerFault {
    /// Writing to it failed.
    #[error("writing to it failed: {0}")]
    Write(std::io::Error),
    /// Reading from it failed.
    #[error("reading from it failed: {0}")]
    Read(std::io::Error),
    /// It closed the connection.
    #[error("it closed the connection")]
    Closed,
    /// It sent bytes that are no frame.
    #[error("it sent a malformed frame: {0}")]
    Malformed(FrameError),
    /// It asked for a key this rank does not own.
    #[error("it sent a request for key {key:?}, which rank {rank} does not own")]
    NotOwned {
        /// The key, as text.
        key: String,
        /// This rank.
        rank: u32,
    },
    /// An answer to a request it was not sent.
    #[error("it answered request {0}, which it was not sent")]
    Unasked(u32),
    /// A ping answered by another frame.
    #[error("it answered ping {0} with another frame")]
    OtherFrame(u64),
    /// Something else than a ping during calibration.
    #[error("it sent a frame other than a ping at the start")]
    NotPing,
    /// The calibration took too long (seconds).
    #[error("the ping-pong at start did not end within {0} s")]
    Calibration(u64),
    /// Its hello is not a kvd hello.
    #[error("it is not a kvd peer: {0}")]
    NotAPeer(FrameError),
    /// It closed before its hello was whole.
    #[error("it closed the connection before a whole hello")]
    ClosedBeforeHello,
    /// Reading its hello failed.
    #[error("reading its hello failed: {0}")]
    ReadHello(std::io::Error),
}

/// Reads what a pending connection has sent, never past its hello: `Some(len)` once the
/// hello is whole, an error once it cannot become one.
fn read_hello(p: &mut Pending) -> Result<Option<usize>, PeerFault> {
    loop {
        match decode_hello(&p.got) {
            Ok(Some((_, len))) => return Ok(Some(len)),
            Ok(None) => {}
            Err(e) => {
                // A little more of what it sent, for the log line (never waited for).
                let mut more = [0u8; SHOWN_BYTES];
                if let Ok(n) = p
                    .stream
                    .read(&mut more[..SHOWN_BYTES.saturating_sub(p.got.len())])
                {
                    p.got.extend_from_slice(&more[..n]);
                }
                return Err(PeerFault::NotAPeer(e));
            }
        }
        let mut buf = vec![0u8; hello_wants(&p.got)];
        match p.stream.read(&mut buf) {
            Ok(0) => return Err(PeerFault::ClosedBeforeHello),
            Ok(n) => p.got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(PeerFault::ReadHello(e)),
        }
    }
}

/// A pending connection whose hello is whole: our hello goes back (so a list mismatch is
/// seen on both sides), then a list that differs is refused, a rank that should not connect
/// here is closed and logged, and a good one is a peer.
fn accepted(
    me: &Me<'_>,
    mut p: Pending,
    peers: &[Option<PeerConn>],
) -> Result<Option<PeerConn>, KvdError> {
    let (Hello { rank: theirs, list }, _) = decode_hello(&p.got)
        .ok()
        .flatten()
        .expect("read_hello saw a whole hello");
    let fits =
        theirs > me.rank && (theirs as usize) < me.addrs.len() && peers[theirs as usize].is_none();
    if list == me.list && !fits {
        let why = format!(
            "it says it is rank {theirs}, which should not connect here (a higher rank, once)"
        );
        refuse(me.rank, &p, &why);
        return Ok(None);
    }
    let mut hello = Vec::new();
    encode_hello(&mut hello, me.rank, me.list);
    let _ = p.stream.set_nonblocking(false);
    let _ = p.stream.set_write_timeout(Some(HELLO_WAIT));
    if let Err(e) = p.stream.write_all(&hello) {
        refuse(me.rank, &p, &format!("sending our hello to it failed: {e}"));
        return Ok(None);
    }
    check_list(me.rank, theirs, list, me.list)?;
    let _ = p.stream.set_write_timeout(None);
    let _ = p.stream.set_nodelay(true);
    Ok(Some(PeerConn {
        rank: theirs,
        addr: me.addrs[theirs as usize],
        stream: p.stream,
    }))
}

fn check_list(rank: u32, theirs: u32, their_list: &str, list: &str) -> Result<(), KvdError> {
    if their_list != list {
        return Err(KvdError::BadOption(format!(
            "rank {rank}: rank list mismatch with rank {theirs}: it has --ranks {their_list:?}, this rank has {list:?}; give every rank the same list in the same order"
        )));
    }
    Ok(())
}

/// Closes a connection that is not a peer, with one line saying who and why.
fn refuse(rank: u32, p: &Pending, why: &str) {
    let line = format!(
        "kvd rank {rank}: closed a connection from {} that is not a peer: {why}; it sent {}\n",
        p.from,
        shown(&p.got)
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    let _ = p.stream.shutdown(std::net::Shutdown::Both);
}

/// What a connection sent, escaped and bounded, for a log line.
pub fn shown(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing".into();
    }
    let head = &bytes[..bytes.len().min(SHOWN_BYTES)];
    let more = if bytes.len() > SHOWN_BYTES { "..." } else { "" };
    format!("\"{}{more}\" ({} bytes)", head.escape_ascii(), bytes.len())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn connect_until(
    me: &Me<'_>,
    peer: u32,
    addr: SocketAddr,
    deadline: Instant,
    wait: Duration,
) -> Result<TcpStream, KvdError> {
    loop {
        me.stopped()?;
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(KvdError::Peer(format!(
                    "rank {}: could not reach rank {peer} at {addr} within {} s: {e}",
                    me.rank,
                    secs(wait)
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Sends our hello to the lower rank `expect` we dialled at `addr`, reads theirs, checks
/// rank and list. What is at an address of the list must be that rank: anything else is an
/// error.
fn dialled_handshake(
    me: &Me<'_>,
    mut stream: TcpStream,
    expect: u32,
    addr: SocketAddr,
) -> Result<PeerConn, KvdError> {
    let rank = me.rank;
    let who = format!("rank {expect} ({addr})");
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(DIALLED_HELLO_WAIT));
    let mut hello = Vec::new();
    encode_hello(&mut hello, rank, me.list);
    stream.write_all(&hello).map_err(|error| KvdError::Io {
        context: format!("rank {rank}: sending the hello to {who}"),
        error,
    })?;
    let _ = stream.set_read_timeout(Some(Duration::from_millis(100)));
    let until = Instant::now() + DIALLED_HELLO_WAIT;
    let mut got = Vec::new();
    let not_kvd =
        |e: FrameError| KvdError::Peer(format!("rank {rank}: {who} is not a kvd daemon: {e}"));
    let theirs = loop {
        me.stopped()?;
        if let Some((h, _)) = decode_hello(&got).map_err(not_kvd)? {
            break (h.rank, h.list.to_string());
        }
        if Instant::now() >= until {
            return Err(KvdError::Peer(format!(
                "rank {rank}: {who} sent no whole hello within {} s (it sent {})",
                secs(DIALLED_HELLO_WAIT),
                shown(&got)
            )));
        }
        let mut buf = vec![0u8; hello_wants(&got)];
        match stream.read(&mut buf) {
            Ok(0) => {
                return Err(KvdError::Peer(format!(
                    "rank {rank}: {who} closed the connection before its hello (it sent {}); its log says why it refused this rank",
                    shown(&got)
                )))
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(error) => {
                return Err(KvdError::Io {
                    context: format!("rank {rank}: reading the hello of {who}"),
                    error,
                })
            }
        }
    };
    check_list(rank, theirs.0, &theirs.1, me.list)?;
    if theirs.0 != expect {
        return Err(KvdError::Peer(format!(
            "rank {rank}: {addr} is rank {expect} in the list but says it is rank {}",
            theirs.0
        )));
    }
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(None);
    Ok(PeerConn {
        rank: expect,
        addr,
        stream,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_stranger_sent_is_escaped_and_bounded() {
        assert_eq!(shown(b""), "nothing");
        assert_eq!(shown(b"GET /\r\n"), "\"GET /\\r\\n\" (7 bytes)");
        let long = shown(&[0xffu8; 1000]);
        assert!(long.ends_with("...\" (1000 bytes)"), "{long}");
        assert_eq!(long.matches("\\xff").count(), SHOWN_BYTES);
    }
}
