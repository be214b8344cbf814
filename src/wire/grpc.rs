//! gRPC's framing over HTTP/2 (grpc/grpc's PROTOCOL-HTTP2.md): each message is prefixed by
//! a compressed flag (one byte) and its length (u32, big-endian); a call's result is the
//! `grpc-status` (and `grpc-message`) of the response's trailers, or of its only header block
//! when the server answers at once ("Trailers-Only").
//!
//! [`ReplyReader`] follows one response (unary, or a stream of messages) as its header blocks
//! and DATA come, holding no message bytes (they are counted, not kept): a benchmark checks the
//! framing and the status, it does not decode protobuf.

use percent_encoding::percent_decode;

/// The request's `content-type`.
pub const CONTENT_TYPE: &str = "application/grpc";
/// A message's prefix: the compressed flag and the length.
pub const PREFIX_LEN: usize = 5;
/// The most of a `grpc-message` kept (the rest is cut at a character boundary).
const MAX_MESSAGE_CHARS: usize = 100;

/// `message` as one uncompressed length-prefixed message.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(PREFIX_LEN + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// How a unary call ended, read from its response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// `grpc-status: 0` and one whole message (a streamed reply: any number).
    Ok,
    /// A non-zero `grpc-status`: its code and `grpc-message` (percent-decoded, cut short).
    Status(u32, String),
    /// No `grpc-status` in any header block (the trailers are missing).
    NoStatus,
    /// The response broke gRPC's framing: how.
    Broken(Broken),
}

/// How a response broke gRPC's framing (each is counted as its own error kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// A message prefix whose flag is neither 0 nor 1, or a message cut short by the end.
    Framing,
    /// A `grpc-status` that is not a number.
    BadStatus,
    /// A compressed message without a `grpc-encoding` announcing one.
    CompressedUnannounced,
    /// A successful unary call whose response is not exactly one message.
    MessageCount,
}

/// One response's gRPC state, fed its header fields and DATA bytes in order.
#[derive(Debug, Default, Clone)]
pub struct ReplyReader {
    /// The reply is a stream (a server-streaming or bidirectional call): any number of
    /// messages, none included, ends a successful call.
    streamed: bool,
    /// The prefix being read: its bytes so far.
    prefix: [u8; PREFIX_LEN],
    prefix_len: u8,
    /// Bytes of the current message still to come.
    remaining: u32,
    /// Messages whose prefix was read.
    messages: u32,
    /// Messages read whole (prefix and every byte of the message).
    whole: u32,
    /// A `grpc-encoding` other than `identity` was announced: compressed messages may come.
    encoded: bool,
    status: Option<u32>,
    /// `grpc-message`, decoded (only kept when one came).
    message: Option<String>,
    /// The first framing error.
    broken: Option<Broken>,
}

impl ReplyReader {
    /// A reader for a streamed reply (see [`End::Ok`]).
    pub fn streamed() -> Self {
        ReplyReader {
            streamed: true,
            ..ReplyReader::default()
        }
    }

    /// Whether the reply is read as a stream.
    pub fn is_streamed(&self) -> bool {
        self.streamed
    }

    /// Messages read whole so far.
    pub fn whole(&self) -> u32 {
        self.whole
    }

    /// One header field of any of the response's header blocks.
    pub fn header(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b"grpc-status" => match parse_code(value) {
                Some(code) => self.status = Some(code),
                None => self.broke(Broken::BadStatus),
            },
            b"grpc-message" => self.message = Some(decode_message(value)),
            b"grpc-encoding" => self.encoded = value != b"identity",
            _ => {}
        }
    }

    /// DATA bytes (padding removed), in order.
    pub fn data(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && self.broken.is_none() {
            if self.remaining > 0 {
                let n = bytes.len().min(self.remaining as usize);
                self.remaining -= n as u32;
                bytes = &bytes[n..];
                self.whole += u32::from(self.remaining == 0);
                continue;
            }
            let at = self.prefix_len as usize;
            let n = (PREFIX_LEN - at).min(bytes.len());
            self.prefix[at..at + n].copy_from_slice(&bytes[..n]);
            self.prefix_len += n as u8;
            bytes = &bytes[n..];
            if self.prefix_len as usize == PREFIX_LEN {
                self.prefix_done();
            }
        }
    }

    /// A whole prefix: its flag checked, its message expected.
    fn prefix_done(&mut self) {
        self.prefix_len = 0;
        self.messages += 1;
        match self.prefix[0] {
            0 => {}
            1 if self.encoded => {}
            1 => return self.broke(Broken::CompressedUnannounced),
            _ => return self.broke(Broken::Framing),
        }
        let p = &self.prefix;
        self.remaining = u32::from_be_bytes([p[1], p[2], p[3], p[4]]);
        // An empty message is whole with its prefix.
        self.whole += u32::from(self.remaining == 0);
    }

    fn broke(&mut self, kind: Broken) {
        self.broken.get_or_insert(kind);
    }

    /// The response ended: how the call did. A message cut short by the end (its prefix
    /// promised more than came) is a framing error; so is a successful call whose reply is
    /// not streamed and is not exactly one message.
    pub fn end(self) -> End {
        if let Some(kind) = self.broken {
            return End::Broken(kind);
        }
        if self.remaining > 0 || self.prefix_len > 0 {
            return End::Broken(Broken::Framing);
        }
        match self.status {
            None => End::NoStatus,
            Some(0) if !self.streamed && self.messages != 1 => End::Broken(Broken::MessageCount),
            Some(0) => End::Ok,
            Some(code) => End::Status(code, self.message.unwrap_or_default()),
        }
    }
}

/// A `grpc-status` value: decimal digits.
fn parse_code(value: &[u8]) -> Option<u32> {
    if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A `grpc-message`: percent-decoded, lossily UTF-8, at most [`MAX_MESSAGE_CHARS`].
fn decode_message(value: &[u8]) -> String {
    let text = percent_decode(value).decode_utf8_lossy();
    text.chars().take(MAX_MESSAGE_CHARS).collect()
}

/// The name of a status code (the gRPC spec's list), `UNKNOWN_CODE` past it.
pub fn code_name(code: u32) -> &'static str {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    NAMES.get(code as usize).copied().unwrap_or("UNKNOWN_CODE")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(headers: &[(&str, &str)], data: &[&[u8]], trailers: &[(&str, &str)]) -> End {
        let mut r = ReplyReader::default();
        for (n, v) in headers {
            r.header(n.as_bytes(), v.as_bytes());
        }
        for d in data {
            r.data(d);
        }
        for (n, v) in trailers {
            r.header(n.as_bytes(), v.as_bytes());
        }
        r.end()
    }

    const OK: &[(&str, &str)] = &[("grpc-status", "0")];

    #[test]
    fn one_message_and_status_0_is_ok_across_any_cuts() {
        let body = frame(b"hello");
        assert_eq!(body, b"\0\0\0\0\x05hello");
        for cut in 0..body.len() {
            let (a, b) = body.split_at(cut);
            assert_eq!(read(&[], &[a, b], OK), End::Ok, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(read(&[], &bytes, OK), End::Ok);
        assert_eq!(read(&[], &[&frame(b"")], OK), End::Ok, "an empty message");
    }

    #[test]
    fn a_non_zero_status_keeps_its_code_and_decoded_message() {
        let end = read(
            &[],
            &[],
            &[
                ("grpc-status", "5"),
                ("grpc-message", "no%20such key %E2%9C%93"),
            ],
        );
        assert_eq!(end, End::Status(5, "no such key ✓".into()));
        let long = "x".repeat(500);
        let End::Status(13, m) = read(&[], &[], &[("grpc-status", "13"), ("grpc-message", &long)])
        else {
            panic!()
        };
        assert_eq!(m.len(), MAX_MESSAGE_CHARS);
        assert_eq!(code_name(5), "NOT_FOUND");
        assert_eq!(code_name(99), "UNKNOWN_CODE");
    }

    #[test]
    fn each_broken_reply_is_an_error_of_its_kind() {
        let mut short = frame(b"hello");
        short.truncate(7);
        assert_eq!(read(&[], &[&short], OK), End::Broken(Broken::Framing));
        assert_eq!(read(&[], &[b"\0\0"], OK), End::Broken(Broken::Framing));
        let mut long = frame(b"hello");
        long[4] = 3; // says 3 bytes, 5 follow: the last 2 begin a prefix never finished
        assert_eq!(read(&[], &[&long], OK), End::Broken(Broken::Framing));
        let compressed = [1, 0, 0, 0, 0];
        assert_eq!(
            read(&[], &[&compressed], OK),
            End::Broken(Broken::CompressedUnannounced)
        );
        assert_eq!(
            read(&[("grpc-encoding", "gzip")], &[&compressed], OK),
            End::Ok
        );
        assert_eq!(
            read(&[], &[&[7, 0, 0, 0, 0]], OK),
            End::Broken(Broken::Framing)
        );
        assert_eq!(read(&[], &[&frame(b"a")], &[]), End::NoStatus);
        assert_eq!(read(&[], &[], OK), End::Broken(Broken::MessageCount));
        let two = [frame(b"a"), frame(b"b")].concat();
        assert_eq!(read(&[], &[&two], OK), End::Broken(Broken::MessageCount));
        assert_eq!(
            read(&[], &[&frame(b"a")], &[("grpc-status", "x1")]),
            End::Broken(Broken::BadStatus)
        );
    }

    /// A streamed reply ends well with any number of messages, none included, and counts
    /// each once it is whole, wherever the reads cut it; a message cut short by the end is
    /// still a framing error. A count that moved at a prefix, or that missed an empty
    /// message, fails here.
    #[test]
    fn a_streamed_reply_counts_whole_messages_across_any_cuts() {
        let body = [frame(b"one"), frame(b""), frame(b"three")].concat();
        for cut in 0..body.len() {
            let mut r = ReplyReader::streamed();
            r.data(&body[..cut]);
            let whole_at_cut = [8, 13, body.len()]
                .iter()
                .filter(|&&end| cut >= end)
                .count();
            assert_eq!(r.whole() as usize, whole_at_cut, "cut at {cut}");
            r.data(&body[cut..]);
            assert_eq!(r.whole(), 3);
            r.header(b"grpc-status", b"0");
            assert_eq!(r.end(), End::Ok, "cut at {cut}");
        }
        let mut none = ReplyReader::streamed();
        none.header(b"grpc-status", b"0");
        assert_eq!(none.end(), End::Ok, "a stream of no messages");
        let mut short = ReplyReader::streamed();
        short.data(&body[..body.len() - 1]);
        short.header(b"grpc-status", b"0");
        assert_eq!(short.end(), End::Broken(Broken::Framing));
    }
}
