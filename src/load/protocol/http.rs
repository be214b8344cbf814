//! HTTP/1.1 keep-alive requests and response framing.
//!
//! The request is encoded once per connection and reused. Responses are framed by
//! `Content-Length` or chunked encoding; `Connection: close` (nginx sends it on every
//! `keepalive_requests`-th response) is reported so the engine reopens the connection.

use super::{Protocol, Reply};

/// Largest header block accepted before the response is called garbage.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Largest body accepted (a hostile length must not make the engine buffer gigabytes).
const MAX_BODY_BYTES: u64 = 256 * 1024 * 1024;

/// An HTTP/1.1 connection's requests and response parser.
pub struct Http {
    request: Vec<u8>,
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
        Http { request }
    }
}

impl Protocol for Http {
    fn next_request(&mut self) -> &[u8] {
        &self.request
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        parse_response(buf)
    }
}

/// What the head of a response says about its body.
struct Head {
    head_len: usize,
    status: u16,
    body: BodyKind,
    close: bool,
}

enum BodyKind {
    Length(u64),
    Chunked,
    None,
}

/// Frames one response at the front of `buf`.
pub fn parse_response(buf: &[u8]) -> Reply {
    let head = match parse_head(buf) {
        Ok(Some(h)) => h,
        Ok(None) => return Reply::Incomplete,
        Err(kind) => return Reply::Invalid(kind),
    };
    let body = &buf[head.head_len..];
    let body_len = match head.body {
        BodyKind::None => Some(0),
        BodyKind::Length(n) if n > MAX_BODY_BYTES => return Reply::Invalid("http_body_too_large"),
        BodyKind::Length(n) => (body.len() as u64 >= n).then_some(n as usize),
        BodyKind::Chunked => match chunked_len(body) {
            Ok(v) => v,
            Err(kind) => return Reply::Invalid(kind),
        },
    };
    match body_len {
        None => Reply::Incomplete,
        Some(n) => Reply::Done {
            len: head.head_len + n,
            error: status_error(head.status),
            close: head.close,
            found: None,
        },
    }
}

/// The error kind of an HTTP status (`None` for 2xx).
pub(crate) fn status_error(status: u16) -> Option<&'static str> {
    match status {
        200..=299 => None,
        100..=199 => Some("http_1xx"),
        300..=399 => Some("http_3xx"),
        400..=499 => Some("http_4xx"),
        _ => Some("http_5xx"),
    }
}

fn parse_head(buf: &[u8]) -> Result<Option<Head>, &'static str> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD_BYTES {
            Err("http_bad_response")
        } else {
            Ok(None)
        };
    };
    // Works on bytes: this runs once per response, on the engine's hot path.
    let mut lines = buf[..end].split(|&b| b == b'\n').map(trim_cr);
    let (http10, status) =
        parse_status_line(lines.next().unwrap_or(b"")).ok_or("http_bad_response")?;
    let mut head = Head {
        head_len: end + 4,
        status,
        body: BodyKind::None,
        close: http10,
    };
    let mut has_length = false;
    for line in lines {
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or("http_bad_response")?;
        let (name, value) = (&line[..colon], trim_ascii(&line[colon + 1..]));
        if name.eq_ignore_ascii_case(b"content-length") {
            head.body = BodyKind::Length(parse_decimal(value).ok_or("http_bad_response")?);
            has_length = true;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            if contains_ignore_case(value, b"chunked") {
                head.body = BodyKind::Chunked;
                has_length = true;
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            head.close = contains_ignore_case(value, b"close")
                || (head.close && !contains_ignore_case(value, b"keep-alive"));
        }
    }
    let bodiless = status < 200 || status == 204 || status == 304;
    if !has_length && !bodiless {
        // A body delimited by the close of the connection cannot be reused for keep-alive.
        return Err("http_no_length");
    }
    Ok(Some(head))
}

/// `(is HTTP/1.0, status)` from a status line.
fn parse_status_line(line: &[u8]) -> Option<(bool, u16)> {
    if line.len() < 12 || !line.starts_with(b"HTTP/1.") || line[8] != b' ' {
        return None;
    }
    let status = parse_decimal(&line[9..12])?;
    Some((line[7] == b'0', u16::try_from(status).ok()?))
}

fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 19 {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + u64::from(d - b'0'))
    })
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn trim_ascii(s: &[u8]) -> &[u8] {
    let start = s
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &s[start..end]
}

fn contains_ignore_case(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len())
        .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Length of a complete chunked body at the front of `body`, or `None` if incomplete.
fn chunked_len(body: &[u8]) -> Result<Option<usize>, &'static str> {
    let mut pos = 0;
    loop {
        let Some(line_end) = find(&body[pos..], b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&body[pos..pos + line_end]).map_err(|_| "http_bad_chunk")?;
        let size_hex = line.split(';').next().unwrap_or("").trim();
        let size = u64::from_str_radix(size_hex, 16).map_err(|_| "http_bad_chunk")?;
        if size > MAX_BODY_BYTES {
            return Err("http_body_too_large");
        }
        pos += line_end + 2;
        if size == 0 {
            // Trailers end with an empty line.
            return Ok(find(&body[pos..], b"\r\n\r\n")
                .map(|e| pos + e + 4)
                .or_else(|| body[pos..].starts_with(b"\r\n").then_some(pos + 2)));
        }
        let need = pos + size as usize + 2;
        if body.len() < need {
            return Ok(None);
        }
        pos = need;
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    // Jump between occurrences of the needle's first byte (memchr-accelerated by std).
    let mut from = 0;
    while let Some(i) = hay[from..].iter().position(|&b| b == needle[0]) {
        let at = from + i;
        if hay.len() - at < needle.len() {
            return None;
        }
        if &hay[at..at + needle.len()] == needle {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(len: usize, error: Option<&'static str>, close: bool) -> Reply {
        Reply::Done {
            len,
            error,
            close,
            found: None,
        }
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
    fn frames_content_length() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1";
        assert_eq!(parse_response(r), done(r.len() - 8, None, false));
        assert_eq!(parse_response(&r[..30]), Reply::Incomplete);
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Le"),
            Reply::Incomplete
        );
    }

    #[test]
    fn status_and_close() {
        let r = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), Some("http_5xx"), true));
        let r = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), None, true));
        let r = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), None, false));
    }

    #[test]
    fn frames_chunked() {
        let r = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nabc\r\n0\r\n\r\n";
        assert_eq!(parse_response(r), done(r.len(), None, false));
        assert_eq!(parse_response(&r[..r.len() - 2]), Reply::Incomplete);
    }

    #[test]
    fn garbage_and_hostile_lengths() {
        assert_eq!(
            parse_response(b"SSH-2.0-x\r\n\r\n"),
            Reply::Invalid("http_bad_response")
        );
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 4294967296\r\n\r\n";
        assert_eq!(parse_response(r), Reply::Invalid("http_body_too_large"));
        let long = vec![b'a'; MAX_HEAD_BYTES + 1];
        assert_eq!(parse_response(&long), Reply::Invalid("http_bad_response"));
        let r = b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\nbody";
        assert_eq!(parse_response(r), Reply::Invalid("http_no_length"));
    }
}
