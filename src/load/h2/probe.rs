//! One call outside any load, blocking, on a connection of its own: what `load --verbose`
//! shows of the server's reply (its message, for the user to see the server understood)
//! before the load starts, and each question to the server's reflection service (one request
//! message, the stream ended, every reply message read), over `grpc://` or `grpcs://` (the
//! load's TLS options, `h2` agreed by ALPN). Its call is not counted in the load's.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use super::conn::{encode_request, Event, H2Conn};
use crate::load::protocol::grpc_reflection::{CallError, Server};
use crate::load::target::Target;
use crate::load::ProtoOptions;
use crate::wire::grpc::PREFIX_LEN;

/// Why the one call gave no message.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The url or options do not make a call.
    #[error("{0}")]
    Target(#[from] crate::load::LoadError),
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
    /// The call ended with a gRPC status other than OK.
    #[error("{}", crate::load::protocol::grpc::status_kind(*.code, .message))]
    Status {
        /// The status code (12 is UNIMPLEMENTED: the server has no such method).
        code: u32,
        /// The status message.
        message: String,
    },
    /// The call ended without a message: how (an HTTP status, an error kind).
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
    let mut replies = replies(url, opts, timeout)?;
    match replies.is_empty() {
        true => Err(ProbeError::Ended(
            "the call ended OK with no message".into(),
        )),
        false => Ok(replies.swap_remove(0)),
    }
}

/// Makes the call `url` with `opts` describes (its one request message sent, then the stream
/// ended, as a unary call does) and returns every reply message, their prefixes removed, once
/// the server ends the call with OK; an error says how it ended otherwise, or that `timeout`
/// passed.
pub fn replies(
    url: &str,
    opts: &ProtoOptions,
    timeout: Duration,
) -> Result<Vec<Vec<u8>>, ProbeError> {
    let target = Target::parse(url, opts)?;
    let mut socket = connect(&target, timeout)?;
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
        let n = match socket.read(&mut input) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(ProbeError::Timeout(timeout))
            }
            read => read?,
        };
        if n == 0 {
            return Err(ProbeError::Closed);
        }
        h2.receive(&input[..n], &mut events)
            .map_err(|e| ProbeError::Http2(e.kind.as_str()))?;
    }
}

/// Either side of a connection: plain TCP or TLS over it.
trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The target's connection, blocking, each read and write given at most `timeout`; over TLS
/// with the handshake done and `h2` agreed by ALPN.
fn connect(target: &Target, timeout: Duration) -> Result<Box<dyn ReadWrite>, ProbeError> {
    let addr = target.addr;
    let socket = TcpStream::connect_timeout(&addr, timeout)
        .map_err(|source| ProbeError::Connect { addr, source })?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    let Some(tls) = &target.tls else {
        return Ok(Box::new(socket));
    };
    let mut stream = rustls::StreamOwned::new(tls.session()?, socket);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    let alpn = stream.conn.alpn_protocol();
    if alpn != Some(super::H2_ALPN) {
        return Err(std::io::Error::other(super::not_h2(tls.host(), alpn)).into());
    }
    Ok(Box::new(stream))
}

/// The reply's messages, or how the call failed.
fn ended(event: Event<()>, data: &[u8]) -> Result<Vec<Vec<u8>>, ProbeError> {
    let failed = |how: String| Err(ProbeError::Ended(how));
    match event {
        Event::Done(_, status) if status != 200 => {
            failed(format!("HTTP status {status} and no gRPC message"))
        }
        Event::Done(..) | Event::Streamed(..) => Ok(messages(data)),
        Event::GrpcStatus(_, code, message) => Err(ProbeError::Status { code, message }),
        Event::Failed(_, kind) => failed(kind.as_str().to_string()),
        Event::Refused(_) => failed("the server refused the stream".into()),
    }
}

/// The messages of a call's DATA, each after its 5-byte prefix (a message cut short at the end
/// is kept as far as it came).
fn messages(mut data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while data.len() >= PREFIX_LEN {
        let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
        let end = (PREFIX_LEN + len).min(data.len());
        out.push(data[PREFIX_LEN..end].to_vec());
        data = &data[end..];
    }
    out
}

/// gRPC's status code UNIMPLEMENTED: the server has no such method.
const UNIMPLEMENTED: u32 = 12;

/// The server of a grpc:// url, called by [`replies`] (each call on a connection of its own,
/// with the user's metadata): how the server's reflection service is asked.
pub struct ProbeServer {
    /// The url up to its path (`grpc://HOST:PORT`).
    base: String,
    /// `Name: value` metadata of each call.
    headers: Vec<String>,
    /// Over grpcs://: the TLS options (`--cacert`, `--insecure`).
    tls: crate::load::tls::TlsOptions,
    /// Each call's limit.
    timeout: Duration,
}

impl ProbeServer {
    /// The server of `url` (its path left out), called with `headers` as metadata, over
    /// grpcs:// with `tls`, each call given at most `timeout`.
    pub fn new(
        url: &str,
        headers: Vec<String>,
        tls: crate::load::tls::TlsOptions,
        timeout: Duration,
    ) -> ProbeServer {
        let path = crate::load::protocol::grpc_message::url_path(url).unwrap_or_default();
        ProbeServer {
            base: url[..url.len() - path.len()].to_string(),
            headers,
            tls,
            timeout,
        }
    }
}

impl Server for ProbeServer {
    fn name(&self) -> String {
        let authority = self.base.split_once("://").map_or(&*self.base, |(_, a)| a);
        authority.to_string()
    }

    fn call(&mut self, method: &str, request: Vec<u8>) -> Result<Vec<Vec<u8>>, CallError> {
        let opts = ProtoOptions {
            headers: self.headers.clone(),
            body_file: Some(request.into()),
            tls: self.tls.clone(),
            ..ProtoOptions::default()
        };
        let url = format!("{}{method}", self.base);
        replies(&url, &opts, self.timeout).map_err(|e| match e {
            ProbeError::Status {
                code: UNIMPLEMENTED,
                ..
            } => CallError::Unimplemented,
            other => CallError::Failed(other.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_data_is_split_into_its_messages() {
        let data = [
            &[0, 0, 0, 0, 2, 7, 8][..],
            &[0, 0, 0, 0, 0],
            &[0, 0, 0, 0, 3, 1],
        ]
        .concat();
        assert_eq!(messages(&data), vec![vec![7, 8], vec![], vec![1]]);
        assert!(messages(&[0, 0, 0]).is_empty());
    }

    #[test]
    fn the_server_is_the_urls_authority_and_its_calls_replace_the_path() {
        let s = ProbeServer::new(
            "grpc://127.0.0.1:5/greeter.Greeter/SayHello",
            vec![],
            crate::load::tls::TlsOptions::default(),
            Duration::from_secs(1),
        );
        assert_eq!(s.base, "grpc://127.0.0.1:5");
        assert_eq!(s.name(), "127.0.0.1:5");
    }
}
