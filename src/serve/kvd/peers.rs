//! Start-up: one TCP connection per pair of ranks. A rank connects to every lower rank
//! (retrying until the deadline) and accepts every higher one; both sides send a hello with
//! their rank and rank list, and a list that differs is refused on both sides.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::KvdError;
use crate::wire::kvd::{decode_hello_header, encode_hello, HELLO_HEADER};

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

/// Connects to every peer of `rank` within `wait`; slot `rank` of the result is `None`.
pub fn connect_all(
    rank: u32,
    list: &str,
    addrs: &[SocketAddr],
    wait: Duration,
) -> Result<Vec<Option<PeerConn>>, KvdError> {
    let list = normalized(list);
    let mut peers: Vec<Option<PeerConn>> = (0..addrs.len()).map(|_| None).collect();
    if addrs.len() == 1 {
        return Ok(peers);
    }
    let deadline = Instant::now() + wait;
    // Listen first, so the higher ranks can connect while we reach the lower ones.
    let listener = TcpListener::bind(addrs[rank as usize]).map_err(|source| KvdError::Io {
        context: format!(
            "rank {rank}: cannot listen on {} (its entry in --ranks)",
            addrs[rank as usize]
        ),
        source,
    })?;
    for (j, addr) in addrs.iter().enumerate().take(rank as usize) {
        let stream = connect_until(rank, j as u32, *addr, deadline, wait)?;
        peers[j] = Some(handshake(rank, &list, stream, Some(j as u32), *addr)?);
    }
    listener
        .set_nonblocking(true)
        .map_err(|source| KvdError::Io {
            context: "setting the listener non-blocking".into(),
            source,
        })?;
    while let Some(missing) = (rank as usize + 1..addrs.len()).find(|&j| peers[j].is_none()) {
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let p = handshake(rank, &list, stream, None, addrs[missing])?;
                if p.rank <= rank || peers[p.rank as usize].is_some() {
                    return Err(KvdError::Peer(format!(
                        "rank {rank}: a peer said it is rank {}, which should not connect here (it must be a higher rank, once)",
                        p.rank
                    )));
                }
                let at = p.rank as usize;
                peers[at] = Some(PeerConn {
                    addr: addrs[at],
                    ..p
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(KvdError::Peer(format!(
                        "rank {rank}: rank {missing} ({}) did not connect within {} s; is it running with the same --ranks?",
                        addrs[missing],
                        wait.as_secs_f64()
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(source) => {
                return Err(KvdError::Io {
                    context: format!("rank {rank}: accepting a peer"),
                    source,
                })
            }
        }
    }
    Ok(peers)
}

fn connect_until(
    rank: u32,
    peer: u32,
    addr: SocketAddr,
    deadline: Instant,
    wait: Duration,
) -> Result<TcpStream, KvdError> {
    loop {
        match TcpStream::connect_timeout(&addr, Duration::from_millis(500)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(KvdError::Peer(format!(
                    "rank {rank}: could not reach rank {peer} at {addr} within {} s: {e}",
                    wait.as_secs_f64()
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Sends our hello, reads theirs, checks rank and list. `expect` is the rank we dialled.
fn handshake(
    rank: u32,
    list: &str,
    mut stream: TcpStream,
    expect: Option<u32>,
    addr: SocketAddr,
) -> Result<PeerConn, KvdError> {
    let io = |context: String| move |source| KvdError::Io { context, source };
    let who = match expect {
        Some(j) => format!("rank {j} ({addr})"),
        None => "a connecting peer".to_string(),
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_nodelay(true);
    let mut hello = Vec::new();
    encode_hello(&mut hello, rank, list);
    stream
        .write_all(&hello)
        .map_err(io(format!("rank {rank}: sending the hello to {who}")))?;
    let mut head = [0u8; HELLO_HEADER];
    stream
        .read_exact(&mut head)
        .map_err(io(format!("rank {rank}: reading the hello of {who}")))?;
    let (theirs, len) = decode_hello_header(&head)
        .map_err(|e| KvdError::Peer(format!("rank {rank}: {who} is not a kvd daemon: {e}")))?;
    let mut text = vec![0u8; len];
    stream
        .read_exact(&mut text)
        .map_err(io(format!("rank {rank}: reading the rank list of {who}")))?;
    let their_list = String::from_utf8_lossy(&text);
    if their_list != list {
        return Err(KvdError::BadOption(format!(
            "rank {rank}: rank list mismatch with rank {theirs}: it has --ranks {their_list:?}, this rank has {list:?}; give every rank the same list in the same order"
        )));
    }
    if let Some(j) = expect.filter(|&j| j != theirs) {
        return Err(KvdError::Peer(format!(
            "rank {rank}: {addr} is rank {j} in the list but says it is rank {theirs}"
        )));
    }
    let _ = stream.set_read_timeout(None);
    Ok(PeerConn {
        rank: theirs,
        addr,
        stream,
    })
}
