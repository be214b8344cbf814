//! One call outside any load, blocking, on a connection of its own: what `load --verbose`
//! shows of the server's reply (its message, for the user to see the server understood)
//! before the load starts. Plain `grpc://` only; its call is not counted in the load's.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::conn::{encode_request, Event, H2Conn};
use crate::load::target::Target;
use crate::load::ProtoOptions;
use crate::wire::grpc::PREFIX_LEN;

/// Why the one call gave no message.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The url or options do not make a call.
    #[error("{0}")]
    Target(#[from] crate::load::LoadError),
    /// Over TLS the call is not made (the probe speaks plain HTTP/2 only).
    #[error("the first reply is shown for grpc:// only, not over TLS")]
    Tls,
    /// The connection could not be made.
    #[error("connecting to {addr}: {source}")]
    Connect {
        /// The target's address.
        addr: std::net::SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// Writing or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The server broke HTTP/2: the error kind.
    #[error("HTTP/2 error {0}")]
    Http2(&'static str),
    /// The server closed the connection before the call ended.
    #[error("the server closed the connection")]
    Closed,
    /// No reply within the timeout.
    #[error("no reply in {0:?}")]
    Timeout(Duration),
    /// The call ended without a message: how (a status, an error kind).
    #[error("{0}")]
    Ended(String),
}

/// Makes the call `url` with `opts` describes and returns its reply message's bytes (the
/// first message of a unary reply, its prefix removed); an error says how the call ended
/// otherwise, or that `timeout` passed.
pub fn first_reply(
    url: &str,
    opts: &ProtoOptions,
    timeout: Duration,
) -> Result<Vec<u8>, ProbeError> {
    let target = Target::parse(url, opts)?;
    if target.tls.is_some() {
        return Err(ProbeError::Tls);
    }
    let addr = target.addr;
    let mut socket = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| ProbeError::Connect { addr, source })?;
    socket.set_read_timeout(Some(timeout))?;
    let streamed = opts.grpc_stream.is_some_and(|s| s.streamed_replies);
    let h2 = H2Conn::new(1);
    let mut h2 = match streamed {
        true => h2.grpc_streamed(),
        false => h2.grpc(),
    }
    .keep_data();
    let (request, body) = target.http2_request(opts);
    let mut block = Vec::new();
    encode_request(&request, &mut block);
    let deadline = Instant::now() + timeout;
    let mut opened = false;
    let mut events = Vec::new();
    let mut input = vec![0u8; 16 * 1024];
    loop {
        if !opened && h2.ready() {
            h2.open(&block, body.clone(), ());
            opened = true;
        }
        if !h2.out.is_empty() {
            socket.write_all(&h2.out)?;
            h2.written(h2.out.len());
            h2.out.clear();
        }
        if let Some(event) = events.pop() {
            return ended(event, &h2.kept);
        }
        if Instant::now() > deadline {
            return Err(ProbeError::Timeout(timeout));
        }
        let n = socket.read(&mut input)?;
        if n == 0 {
            return Err(ProbeError::Closed);
        }
        h2.receive(&input[..n], &mut events)
            .map_err(|e| ProbeError::Http2(e.kind.as_str()))?;
    }
}

/// The reply's message, or how the call failed.
fn ended(event: Event<()>, data: &[u8]) -> Result<Vec<u8>, ProbeError> {
    let failed = |how: String| Err(ProbeError::Ended(how));
    match event {
        Event::Done(..) | Event::Streamed(..) if data.len() >= PREFIX_LEN => {
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            let end = (PREFIX_LEN + len).min(data.len());
            Ok(data[PREFIX_LEN..end].to_vec())
        }
        Event::Done(_, status) => failed(format!("HTTP status {status} and no gRPC message")),
        Event::GrpcStatus(_, code, message) => {
            failed(crate::load::protocol::grpc::status_kind(code, &message))
        }
        Event::Failed(_, kind) => failed(kind.as_str().to_string()),
        Event::Streamed(..) => failed("a streamed reply of no message".into()),
        Event::Refused(_) => failed("the server refused the stream".into()),
    }
}
