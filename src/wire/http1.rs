//! HTTP/1.1 reply framing as RFC 9112 §6 has it, kept across reads: the one parser of HTTP/1.1
//! replies, for the load engine's connections and for the target-metrics reader
//! (`observe::metrics`), which takes the body too ([`Framer::frame_into`]).
//!
//! The caller hands the parser the bytes of the reply in progress from its first byte, longer
//! after each read, until the reply is whole. The parser remembers how far it got (where the
//! search for the end of the head stopped, which chunk it is in), so a reply costs time in
//! proportion to its length however many reads bring it: a chunked body used to be rescanned
//! from its start on every read.
//!
//! What frames a reply (§6.3): a reply to HEAD, a 204 and a 304 have no body whatever their
//! headers say; `1xx` interim replies (100 Continue, 103 Early Hints) come before the final
//! one and are skipped (they count in the final reply's length); `101 Switching Protocols` is
//! an error, since no upgrade is ever asked for; `Transfer-Encoding` with `Content-Length` is
//! an error (a sign of response splitting, §6.3 item 3), as are two different lengths. A
//! body delimited by the close of the connection is an error for the load (it cannot keep
//! the connection) and read to the close by the metrics reader ([`Framer::for_one_answer`]).

use std::mem::MaybeUninit;

/// What [`Framer::frame`] found at the front of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// Not a whole reply yet: read more.
    Incomplete,
    /// One whole reply of `len` bytes.
    Done {
        /// Bytes the reply occupies at the front of the buffer (interim replies included).
        len: usize,
        /// The final reply's status code.
        status: u16,
        /// The server closes the connection after this reply (`Connection: close`, HTTP/1.0).
        close: bool,
    },
    /// The bytes cannot be a reply: how.
    Invalid(Malformed),
}

/// How bytes fail to be an HTTP/1.1 reply (each is counted as its own error kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// Not an HTTP reply head (or a Content-Length that is not a number).
    BadResponse,
    /// 101 Switching Protocols to a request that asked for none.
    Unexpected101,
    /// A malformed chunked body.
    BadChunk,
    /// Both Transfer-Encoding and Content-Length.
    TeAndContentLength,
    /// Content-Length headers that disagree.
    ConflictingContentLength,
    /// A body larger than the engine reads.
    BodyTooLarge,
    /// A reply whose length cannot be told.
    NoLength,
}

/// Where [`Framer::frame_into`] puts a reply's body, piece by piece as the parser passes it.
pub trait BodySink {
    /// The next piece of the body (a chunk's data, or the whole body when it has a length).
    fn take(&mut self, piece: &[u8]);
}

/// The load's sink: the body is not kept.
impl BodySink for () {
    #[inline(always)]
    fn take(&mut self, _: &[u8]) {}
}

impl BodySink for Vec<u8> {
    fn take(&mut self, piece: &[u8]) {
        self.extend_from_slice(piece);
    }
}

/// Largest header block accepted before the response is called garbage.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest body accepted (a hostile length must not make the engine buffer gigabytes).
pub(crate) const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;
/// Longest chunk-size line (size and extensions) or trailer section accepted.
const MAX_CHUNK_LINE_BYTES: usize = 4 * 1024;

/// One connection's reply parser: where it stopped in the reply in progress.
#[derive(Debug)]
pub struct Framer {
    state: State,
    /// Largest body (and chunk) accepted.
    max_body: u64,
    /// A body without a length ends with the connection ([`Framer::for_one_answer`]);
    /// otherwise it is the error `http_no_length`.
    until_close: bool,
}

impl Default for Framer {
    /// The load's framer: keep-alive replies only, bodies up to [`MAX_BODY_BYTES`].
    fn default() -> Self {
        Framer {
            state: State::default(),
            max_body: MAX_BODY_BYTES,
            until_close: false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// Looking for the end of a head that starts at `start` (after any interim replies); no
    /// end of head lies before `scanned`.
    Head { start: usize, scanned: usize },
    /// The head is read; `body` says where the reply ends.
    Body { head: Final, body: Body },
}

impl Default for State {
    fn default() -> Self {
        State::Head {
            start: 0,
            scanned: 0,
        }
    }
}

/// What the final head said about the request.
#[derive(Debug, Clone, Copy)]
struct Final {
    status: u16,
    close: bool,
}

#[derive(Debug, Clone, Copy)]
enum Body {
    /// The body is `from..end` and the reply ends at `end` (a length, or no body).
    EndsAt { from: usize, end: usize },
    /// The body starts at `from` and ends with the connection ([`Framer::for_one_answer`]).
    UntilClose { from: usize },
    /// A chunk-size line starts at `line`; no CRLF lies in `line..scanned`.
    ChunkLine { line: usize, scanned: usize },
    /// A chunk's data starts at `from`; it and its CRLF end at `end`.
    ChunkData { from: usize, end: usize },
    /// After the last chunk: trailer fields from `from`, then an empty line; no end of them
    /// lies before `scanned`.
    Trailers { from: usize, scanned: usize },
}

/// What a head says about its body.
#[derive(Debug, PartialEq, Eq)]
struct Head {
    status: u16,
    close: bool,
    length: Option<u64>,
    /// `Transfer-Encoding` was sent, and whether `chunked` is its last coding.
    transfer: Option<bool>,
}

impl Framer {
    /// The metrics reader's framer: one answer on a connection the server then closes, so a
    /// body without a length is read to the close ([`Framer::at_close`]); bodies up to
    /// `max_body` bytes.
    pub fn for_one_answer(max_body: u64) -> Self {
        Framer {
            max_body,
            until_close: true,
            ..Framer::default()
        }
    }

    /// Frames the reply at the front of `buf` (the same reply's bytes as the last call, maybe
    /// more, unless that call returned `Done` or `Invalid`). `head_request`: the request was
    /// HEAD, so the reply has no body.
    #[inline]
    pub fn frame(&mut self, buf: &[u8], head_request: bool) -> Frame {
        self.frame_into(buf, head_request, &mut ())
    }

    /// The same, handing the body to `body` as the parser passes it: each piece once, in
    /// order, over the calls that frame one reply (nothing of a reply that ends `Invalid`
    /// is to be trusted).
    pub fn frame_into<S: BodySink>(
        &mut self,
        buf: &[u8],
        head_request: bool,
        body: &mut S,
    ) -> Frame {
        let frame = self.advance(buf, head_request, body);
        if !matches!(frame, Frame::Incomplete) {
            self.state = State::default();
        }
        frame
    }

    /// The peer closed after sending `buf` (all of the reply's bytes, the same as the last
    /// call's or more): a body delimited by the close ends here; a reply still incomplete
    /// stays `Incomplete` (cut short).
    pub fn at_close<S: BodySink>(&mut self, buf: &[u8], head_request: bool, body: &mut S) -> Frame {
        let frame = self.advance(buf, head_request, body);
        if let (
            Frame::Incomplete,
            State::Body {
                head,
                body: Body::UntilClose { from },
            },
        ) = (frame, self.state)
        {
            body.take(&buf[from.min(buf.len())..]);
            self.state = State::default();
            return Frame::Done {
                len: buf.len(),
                status: head.status,
                close: true,
            };
        }
        if !matches!(frame, Frame::Incomplete) {
            self.state = State::default();
        }
        frame
    }

    /// Forgets the reply in progress (its connection was dropped).
    pub fn reset(&mut self) {
        self.state = State::default();
    }

    #[inline]
    fn advance<S: BodySink>(&mut self, buf: &[u8], head_request: bool, sink: &mut S) -> Frame {
        loop {
            match self.state {
                State::Head { start, scanned } => {
                    match self.head(buf, start, scanned, head_request) {
                        Ok(true) => {}
                        Ok(false) => return Frame::Incomplete,
                        Err(kind) => return Frame::Invalid(kind),
                    }
                }
                State::Body { head, body } => match self.body(buf, body, sink) {
                    Ok(Some(len)) => {
                        return Frame::Done {
                            len,
                            status: head.status,
                            close: head.close,
                        }
                    }
                    Ok(None) => return Frame::Incomplete,
                    Err(kind) => return Frame::Invalid(kind),
                },
            }
        }
    }

    /// Reads the head at `start` if it is whole: false when it is not yet.
    fn head(
        &mut self,
        buf: &[u8],
        start: usize,
        scanned: usize,
        head_request: bool,
    ) -> Result<bool, Malformed> {
        let from = scanned.saturating_sub(3).max(start);
        let Some(at) = memchr::memmem::find(&buf[from..], b"\r\n\r\n") else {
            if buf.len() - start > MAX_HEAD_BYTES {
                return Err(Malformed::BadResponse);
            }
            self.state = State::Head {
                start,
                scanned: buf.len(),
            };
            return Ok(false);
        };
        let end = from + at + 4;
        if end - start > MAX_HEAD_BYTES {
            return Err(Malformed::BadResponse);
        }
        let head = parse_head(&buf[start..end])?;
        if head.status == 101 {
            return Err(Malformed::Unexpected101);
        }
        if head.status < 200 {
            // An interim reply: no body; the final reply follows.
            self.state = State::Head {
                start: end,
                scanned: end,
            };
            return Ok(true);
        }
        let body = self.body_of(&head, end, head_request)?;
        let head = Final {
            status: head.status,
            close: head.close,
        };
        self.state = State::Body { head, body };
        Ok(true)
    }

    /// The reply's length once its body is whole.
    fn body<S: BodySink>(
        &mut self,
        buf: &[u8],
        mut body: Body,
        sink: &mut S,
    ) -> Result<Option<usize>, Malformed> {
        let done = loop {
            match body {
                Body::EndsAt { from, end } => {
                    if buf.len() < end {
                        break None;
                    }
                    sink.take(&buf[from..end]);
                    break Some(end);
                }
                Body::UntilClose { .. } => break None,
                Body::ChunkLine { line, scanned } => {
                    let from = scanned.saturating_sub(1).max(line);
                    let Some(at) = memchr::memmem::find(&buf[from..], b"\r\n") else {
                        // Over the limit whatever follows (its last byte may be the CR).
                        if buf.len() - line > MAX_CHUNK_LINE_BYTES + 1 {
                            return Err(Malformed::BadChunk);
                        }
                        body = Body::ChunkLine {
                            line,
                            scanned: buf.len(),
                        };
                        break None;
                    };
                    let line_end = from + at;
                    if line_end - line > MAX_CHUNK_LINE_BYTES {
                        return Err(Malformed::BadChunk);
                    }
                    let size = chunk_size(&buf[line..line_end], self.max_body)?;
                    let data = line_end + 2;
                    body = if size == 0 {
                        Body::Trailers {
                            from: data,
                            scanned: data,
                        }
                    } else {
                        Body::ChunkData {
                            from: data,
                            end: data + size as usize + 2,
                        }
                    };
                }
                Body::ChunkData { from, end } => {
                    if buf.len() < end {
                        break None;
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(Malformed::BadChunk);
                    }
                    sink.take(&buf[from..end - 2]);
                    body = Body::ChunkLine {
                        line: end,
                        scanned: end,
                    };
                }
                Body::Trailers { from, scanned } => {
                    if buf.len() >= from + 2 && &buf[from..from + 2] == b"\r\n" {
                        break Some(from + 2);
                    }
                    let search = scanned.saturating_sub(3).max(from);
                    if let Some(at) = memchr::memmem::find(&buf[search..], b"\r\n\r\n") {
                        let end = search + at + 4;
                        if end - from > MAX_HEAD_BYTES {
                            return Err(Malformed::BadChunk);
                        }
                        break Some(end);
                    }
                    // Their end is one byte on at least.
                    if buf.len() - from >= MAX_HEAD_BYTES {
                        return Err(Malformed::BadChunk);
                    }
                    body = Body::Trailers {
                        from,
                        scanned: buf.len(),
                    };
                    break None;
                }
            }
        };
        if let State::Body { body: kept, .. } = &mut self.state {
            *kept = body;
        }
        Ok(done)
    }

    /// Where the body of a final reply whose head ends at `end` ends (RFC 9112 §6.3).
    fn body_of(&self, head: &Head, end: usize, head_request: bool) -> Result<Body, Malformed> {
        if head.transfer.is_some() && head.length.is_some() {
            return Err(Malformed::TeAndContentLength);
        }
        if head_request || head.status == 204 || head.status == 304 {
            return Ok(Body::EndsAt { from: end, end });
        }
        match (head.transfer, head.length) {
            (Some(true), _) => Ok(Body::ChunkLine {
                line: end,
                scanned: end,
            }),
            (None, Some(n)) if n > self.max_body => Err(Malformed::BodyTooLarge),
            (None, Some(n)) => Ok(Body::EndsAt {
                from: end,
                end: end + n as usize,
            }),
            (_, None) if self.until_close => Ok(Body::UntilClose { from: end }),
            // A body delimited by the close of the connection (no length, or a transfer
            // coding other than chunked last) cannot be reused for keep-alive.
            _ => Err(Malformed::NoLength),
        }
    }
}

/// Frames one response at the front of `buf`, from nothing (a reply to a request other than
/// HEAD): what a new connection's parser says of these bytes.
pub fn parse_response(buf: &[u8]) -> Frame {
    Framer::default().frame(buf, false)
}

/// Header fields of the table on the stack (uninitialised, 4 KiB: a larger one costs stack
/// probes on every reply); a head with more is parsed again with a table on the heap.
const STACK_FIELDS: usize = 128;

/// Reads a whole head (status line, fields, the empty line) with httparse. It is parsed
/// strictly first (httparse's fast path: 107 ns of CPU for nginx's 9-field head, our own line
/// splitter 114-120); a head that fails is parsed again accepting obs-fold, as RFC 9112 §5.2
/// asks of a user agent (allowing it always costs 119 ns), with a table as large as its lines.
fn parse_head(block: &[u8]) -> Result<Head, Malformed> {
    let mut fields = [const { MaybeUninit::<httparse::Header>::uninit() }; STACK_FIELDS];
    if let Ok(head) = head_with(block, &mut fields, false) {
        return head;
    }
    let lines = memchr::memchr_iter(b'\n', block).count();
    let mut fields: Vec<MaybeUninit<httparse::Header>> = Vec::with_capacity(lines);
    fields.resize_with(lines, MaybeUninit::uninit);
    head_with(block, &mut fields, true).map_err(|_| Malformed::BadResponse)?
}

/// The head as httparse reads it with `fields` for its table (`obs_fold`: accepting folded
/// lines); the outer error is httparse's.
fn head_with<'b>(
    block: &'b [u8],
    fields: &mut [MaybeUninit<httparse::Header<'b>>],
    obs_fold: bool,
) -> Result<Result<Head, Malformed>, httparse::Error> {
    let mut resp = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .allow_obsolete_multiline_headers_in_responses(obs_fold)
        .parse_response_with_uninit_headers(&mut resp, block, fields)?;
    if parsed.is_partial() {
        return Err(httparse::Error::Status);
    }
    let Some(status) = resp.code.filter(|&c| c >= 100) else {
        return Ok(Err(Malformed::BadResponse));
    };
    let mut head = Head {
        status,
        close: resp.version == Some(0),
        length: None,
        transfer: None,
    };
    for field in resp.headers.iter() {
        if let Err(kind) = read_field(&mut head, field.name.as_bytes(), field.value.trim_ascii()) {
            return Ok(Err(kind));
        }
    }
    Ok(Ok(head))
}

/// What one header field says about the body and the connection.
fn read_field(head: &mut Head, name: &[u8], value: &[u8]) -> Result<(), Malformed> {
    if name.eq_ignore_ascii_case(b"content-length") {
        let n = parse_decimal(value).ok_or(Malformed::BadResponse)?;
        if head.length.is_some_and(|m| m != n) {
            return Err(Malformed::ConflictingContentLength);
        }
        head.length = Some(n);
    } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
        // Several fields are one list: the last coding of the last one counts.
        let last = value.rsplit(|&b| b == b',').next().unwrap_or(b"");
        head.transfer = Some(last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
    } else if name.eq_ignore_ascii_case(b"connection") {
        head.close = contains_ignore_case(value, b"close")
            || (head.close && !contains_ignore_case(value, b"keep-alive"));
    }
    Ok(())
}

/// A chunk-size line's size (RFC 9112 §7.1: hex digits, then optional `;` extensions).
fn chunk_size(line: &[u8], max_body: u64) -> Result<u64, Malformed> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = line[digits..].trim_ascii_start();
    if digits == 0 || digits > 15 || !(rest.is_empty() || rest[0] == b';') {
        return Err(Malformed::BadChunk);
    }
    let size = line[..digits].iter().fold(0u64, |acc, &d| {
        let v = (d as char).to_digit(16).unwrap_or(0);
        acc * 16 + u64::from(v)
    });
    if size > max_body {
        return Err(Malformed::BodyTooLarge);
    }
    Ok(size)
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(len: usize, status: u16, close: bool) -> Frame {
        Frame::Done { len, status, close }
    }

    /// Feeds `bytes` to one framer `step` bytes more at a time, as reads would bring them.
    fn in_steps(bytes: &[u8], step: usize, head_request: bool) -> Frame {
        let mut framer = Framer::default();
        let mut upto = 0;
        loop {
            upto = (upto + step).min(bytes.len());
            let r = framer.frame(&bytes[..upto], head_request);
            if r != Frame::Incomplete || upto == bytes.len() {
                return r;
            }
        }
    }

    #[test]
    fn frames_content_length() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
        assert_eq!(parse_response(r), done(r.len() - 8, 200, false));
        assert_eq!(parse_response(&r[..30]), Frame::Incomplete);
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Le"),
            Frame::Incomplete
        );
        for step in [1, 2, 3, 7] {
            assert_eq!(in_steps(r, step, false), done(r.len() - 8, 200, false));
        }
    }

    #[test]
    fn status_and_close() {
        let r = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 503, true));
        let r = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 200, true));
        let r = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 204, false));
        let r = b"HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 200, false));
    }

    #[test]
    fn replies_to_head_204_and_304_have_no_body_whatever_the_headers() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 612\r\n\r\nHTTP/1.1 200 OK\r\n";
        let head_len = r.len() - 17;
        assert_eq!(Framer::default().frame(r, true), done(head_len, 200, false));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(Framer::default().frame(r, true), done(r.len(), 200, false));
        let r = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 612\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 304, false));
        let r = b"HTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 204, false));
    }

    #[test]
    fn interim_replies_are_skipped_and_101_is_an_error() {
        let r = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n\
                  HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        assert_eq!(parse_response(r), done(r.len(), 200, false));
        for step in [1, 5, 30] {
            assert_eq!(in_steps(r, step, false), done(r.len(), 200, false));
        }
        assert_eq!(parse_response(&r[..26]), Frame::Incomplete);
        let r = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n";
        assert_eq!(parse_response(r), Frame::Invalid(Malformed::Unexpected101));
    }

    #[test]
    fn frames_chunked() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 200, false));
        assert_eq!(parse_response(&r[..r.len() - 2]), Frame::Incomplete);
        for step in 1..12 {
            assert_eq!(in_steps(r, step, false), done(r.len(), 200, false));
        }
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), 200, false));
        assert_eq!(in_steps(r, 1, false), done(r.len(), 200, false));
    }

    #[test]
    fn bad_chunks() {
        let head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        for body in [
            &b"zz\r\n"[..],
            b"5\r\nhelloXY0\r\n\r\n",
            b"\r\n",
            b"5 x\r\n",
            b"ffffffffffffffff\r\n",
        ] {
            let r = [&head[..], body].concat();
            assert!(
                matches!(
                    parse_response(&r),
                    Frame::Invalid(Malformed::BadChunk | Malformed::BodyTooLarge)
                ),
                "{:?}: {:?}",
                String::from_utf8_lossy(body),
                parse_response(&r)
            );
        }
        let endless = [&head[..], &vec![b'1'; MAX_CHUNK_LINE_BYTES + 2][..]].concat();
        assert_eq!(
            parse_response(&endless),
            Frame::Invalid(Malformed::BadChunk)
        );
        let trailer = [&b"X: "[..], &vec![b'y'; MAX_HEAD_BYTES][..], b"\r\n\r\n"].concat();
        let endless = [&head[..], b"0\r\n", &trailer[..]].concat();
        assert_eq!(
            parse_response(&endless),
            Frame::Invalid(Malformed::BadChunk)
        );
        assert_eq!(
            in_steps(&endless, 1000, false),
            Frame::Invalid(Malformed::BadChunk)
        );
    }

    #[test]
    fn transfer_encoding_with_content_length_is_an_error() {
        let r =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(r),
            Frame::Invalid(Malformed::TeAndContentLength)
        );
        let r =
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
        assert_eq!(
            parse_response(r),
            Frame::Invalid(Malformed::TeAndContentLength)
        );
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd";
        assert_eq!(
            parse_response(r),
            Frame::Invalid(Malformed::ConflictingContentLength)
        );
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc";
        assert_eq!(parse_response(r), done(r.len(), 200, false));
        // Chunked not last: the body would end with the connection.
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n";
        assert_eq!(parse_response(r), Frame::Invalid(Malformed::NoLength));
    }

    #[test]
    fn many_fields_and_folded_fields() {
        let mut r = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..2000 {
            r.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        r.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
        assert_eq!(parse_response(&r), done(r.len(), 200, false));
        let folded = b"HTTP/1.1 200 OK\r\nX-A: a\r\n  b\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse_response(folded), done(folded.len(), 200, false));
        // A folded Content-Length is still read (its value is "2 2" unfolded): not a length.
        let folded = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n 2\r\n\r\nok";
        assert_eq!(
            parse_response(folded),
            Frame::Invalid(Malformed::BadResponse)
        );
    }

    #[test]
    fn garbage_and_hostile_lengths() {
        assert_eq!(
            parse_response(b"SSH-2.0-x\r\n\r\n"),
            Frame::Invalid(Malformed::BadResponse)
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 099 x\r\n\r\n"),
            Frame::Invalid(Malformed::BadResponse)
        );
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 4294967296\r\n\r\n";
        assert_eq!(parse_response(r), Frame::Invalid(Malformed::BodyTooLarge));
        let long = vec![b'a'; MAX_HEAD_BYTES + 1];
        assert_eq!(
            parse_response(&long),
            Frame::Invalid(Malformed::BadResponse)
        );
        let r = b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nbody";
        assert_eq!(parse_response(r), Frame::Invalid(Malformed::NoLength));
    }

    #[test]
    fn a_chunked_body_read_in_small_pieces_costs_linear_time() {
        // 64 MiB in 8-byte chunks read 1 KiB at a time: with the rescans from the start this
        // took minutes (65,536 reads × up to 64 MiB each); linear, well under a second.
        let mut r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let chunks = 4 << 20;
        for _ in 0..chunks {
            r.extend_from_slice(b"3\r\nabc\r\n");
        }
        r.extend_from_slice(b"0\r\n\r\n");
        let started = std::time::Instant::now();
        assert_eq!(in_steps(&r, 1024, false), done(r.len(), 200, false));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    /// Frames `bytes` as one answer read `step` bytes more at a time until the peer closed,
    /// collecting the body.
    fn answer(bytes: &[u8], step: usize) -> (Frame, Vec<u8>) {
        let mut framer = Framer::for_one_answer(1 << 20);
        let mut body = Vec::new();
        let mut upto = 0;
        while upto < bytes.len() {
            upto = (upto + step).min(bytes.len());
            let f = framer.frame_into(&bytes[..upto], false, &mut body);
            if f != Frame::Incomplete {
                return (f, body);
            }
        }
        (framer.at_close(bytes, false, &mut body), body)
    }

    #[test]
    fn the_body_is_handed_over_whole_however_the_reads_cut_it() {
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
                        3;x=y\r\n{\"a\r\n4\r\n\":1}\r\n0\r\nX-T: 1\r\n\r\n";
        let length = b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}";
        let to_close = b"HTTP/1.0 200 OK\r\n\r\n{\"a\":1}";
        for step in 1..20 {
            for r in [&chunked[..], length, to_close] {
                let (f, body) = answer(r, step);
                assert!(matches!(f, Frame::Done { len, status: 200, .. } if len == r.len()));
                assert_eq!(
                    body,
                    b"{\"a\":1}",
                    "{step} {:?}",
                    String::from_utf8_lossy(r)
                );
            }
        }
        // Cut short: still incomplete at the close.
        assert_eq!(
            answer(&chunked[..chunked.len() - 2], 7).0,
            Frame::Incomplete
        );
        assert_eq!(answer(&length[..length.len() - 1], 7).0, Frame::Incomplete);
    }

    #[test]
    fn an_answer_framer_applies_its_body_limit_and_the_same_rules() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 1048577\r\n\r\n";
        assert_eq!(answer(r, 100).0, Frame::Invalid(Malformed::BodyTooLarge));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n100001\r\n";
        assert_eq!(answer(r, 100).0, Frame::Invalid(Malformed::BodyTooLarge));
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(
            answer(r, 100).0,
            Frame::Invalid(Malformed::TeAndContentLength)
        );
    }
}
