//! HTTP/1.1 keep-alive requests and response framing.
//!
//! The request is encoded once per connection and reused. Responses are framed as RFC 9112
//! says (by [`crate::wire::http1`], the one HTTP/1.1 reply parser, which the target-metrics
//! reader uses too); `Connection: close` (nginx sends it on every `keepalive_requests`-th
//! response) is reported so the engine reopens the connection.

use super::{Protocol, Reply};
use crate::record::load::RequestError;
use crate::wire::http1::{self, Frame, Malformed};

/// One connection's reply parser: [`http1::Framer`], its frames as the engine's replies.
#[derive(Debug, Default)]
pub struct Framer(http1::Framer);

impl Framer {
    /// Frames the reply at the front of `buf` (see [`http1::Framer::frame`]).
    #[inline]
    pub fn frame(&mut self, buf: &[u8], head_request: bool) -> Reply {
        reply(self.0.frame(buf, head_request))
    }

    /// Forgets the reply in progress (its connection was dropped).
    pub fn reset(&mut self) {
        self.0.reset();
    }
}

/// A frame as the engine's reply: a status other than 2xx is an error of its class.
#[inline]
fn reply(frame: Frame) -> Reply {
    match frame {
        Frame::Incomplete => Reply::Incomplete,
        Frame::Done { len, status, close } => Reply::Done {
            len,
            error: status_error(status),
            close,
            found: None,
            status: Some(status),
        },
        Frame::Invalid(how) => Reply::Invalid(malformed_kind(how)),
    }
}

/// The error kind a malformed reply is counted under.
fn malformed_kind(how: Malformed) -> RequestError {
    match how {
        Malformed::BadResponse => RequestError::HttpBadResponse,
        Malformed::Unexpected101 => RequestError::HttpUnexpected101,
        Malformed::BadChunk => RequestError::HttpBadChunk,
        Malformed::TeAndContentLength => RequestError::HttpTeAndContentLength,
        Malformed::ConflictingContentLength => RequestError::HttpConflictingContentLength,
        Malformed::BodyTooLarge => RequestError::HttpBodyTooLarge,
        Malformed::NoLength => RequestError::HttpNoLength,
    }
}

/// An HTTP/1.1 connection's requests and response parser.
pub struct Http {
    request: Vec<u8>,
    /// The method is HEAD: replies have no body.
    head_request: bool,
    framer: Framer,
}

impl Http {
    /// Encodes `method path` for `host` with extra `Name: value` headers and an optional body.
    pub fn new(
        method: &str,
        host: &str,
        path: &str,
        headers: &[String],
        body: Option<&str>,
    ) -> Self {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
        for h in headers {
            req.push_str(h.trim());
            req.push_str("\r\n");
        }
        if let Some(b) = body {
            req.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        let mut request = req.into_bytes();
        if let Some(b) = body {
            request.extend_from_slice(b.as_bytes());
        }
        Http {
            request,
            head_request: method == "HEAD",
            framer: Framer::default(),
        }
    }
}

impl Protocol for Http {
    fn next_request(&mut self) -> &[u8] {
        &self.request
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        self.framer.frame(buf, self.head_request)
    }

    fn reset(&mut self) {
        self.framer.reset();
    }
}

/// The error kind of an HTTP status (`None` for 2xx).
pub(crate) fn status_error(status: u16) -> Option<RequestError> {
    match status {
        200..=299 => None,
        100..=199 => Some(RequestError::Http1xx),
        300..=399 => Some(RequestError::Http3xx),
        400..=499 => Some(RequestError::Http4xx),
        _ => Some(RequestError::Http5xx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_malformed_reply_is_counted_under_its_own_kind() {
        let all = [
            Malformed::BadResponse,
            Malformed::Unexpected101,
            Malformed::BadChunk,
            Malformed::TeAndContentLength,
            Malformed::ConflictingContentLength,
            Malformed::BodyTooLarge,
            Malformed::NoLength,
        ];
        let kinds: std::collections::BTreeSet<RequestError> =
            all.iter().map(|&m| malformed_kind(m)).collect();
        assert_eq!(kinds.len(), all.len(), "{kinds:?}");
        assert!(kinds.iter().all(|k| k.as_str().starts_with("http_")));
    }

    #[test]
    fn encodes_request_once() {
        let mut h = Http::new("POST", "127.0.0.1:80", "/x", &["X-A: 1".into()], Some("hi"));
        let req = String::from_utf8(h.next_request().to_vec()).unwrap();
        assert_eq!(
            req,
            "POST /x HTTP/1.1\r\nHost: 127.0.0.1:80\r\nX-A: 1\r\nContent-Length: 2\r\n\r\nhi"
        );
    }

    #[test]
    fn a_head_request_expects_no_body() {
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 612\r\n\r\n";
        let mut head = Http::new("HEAD", "h", "/", &[], None);
        assert!(matches!(head.parse_reply(reply), Reply::Done { len, .. } if len == reply.len()));
        let mut get = Http::new("GET", "h", "/", &[], None);
        assert_eq!(get.parse_reply(reply), Reply::Incomplete);
    }
}
