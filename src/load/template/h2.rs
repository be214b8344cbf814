//! Request templates for HTTP/2: each request's method, path, header values and body are
//! rendered apart (the compiled pieces carry a mark at the end of each field) into one
//! buffer, whose fields are then shared, not copied, into an `http::Request` as `Bytes`.
//! The header names, the scheme, the authority and the `-H` headers are made once, when the
//! file is compiled; per request there is a render (copies and integer formats) and the
//! checks `http` makes of a method, a path and header values (scans, no parse of a request).

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_LENGTH};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{Method, Request, Uri};

use super::compile::{header_name, Builder, Req, TemplateConn};
use super::{Compiled, Entry, Part, RequestFile, TemplateError, Text};

/// Bytes of rendered requests allocated at a time (their fields are slices of it).
const ARENA_BYTES: usize = 16 << 10;

/// What every HTTP/2 request of a file shares.
#[derive(Debug)]
pub(crate) struct Common {
    scheme: Scheme,
    authority: Authority,
    /// The `-H` headers (connection-specific ones left out: HTTP/2 forbids them).
    extra: Vec<(HeaderName, HeaderValue)>,
}

/// How the fields of one HTTP/2 request follow each other: method, path, one value per
/// header name, then the body if it has one.
#[derive(Debug)]
pub(crate) struct Shape {
    names: Vec<HeaderName>,
    /// The header (index in `names`) that is `Host`: its value is the `:authority`.
    host: Option<usize>,
    body: bool,
}

/// Connection-specific headers, which HTTP/2 forbids (RFC 9113 §8.2.2); `Host` is the
/// `:authority` pseudo-header.
pub fn is_connection_specific(name: &[u8]) -> bool {
    [
        &b"connection"[..],
        b"host",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

impl Common {
    pub(super) fn new(
        scheme: &str,
        authority: &str,
        headers: &[String],
    ) -> Result<Common, TemplateError> {
        let bad = |what: String| TemplateError(what);
        let scheme =
            Scheme::try_from(scheme).map_err(|e| bad(format!("scheme {scheme:?}: {e}")))?;
        let authority = Authority::try_from(authority)
            .map_err(|e| bad(format!("bad URL host {authority:?}: {e}")))?;
        let mut extra = Vec::new();
        for h in headers {
            let bad_header = || bad(format!("-H {h:?}: not a valid HTTP/2 header (Name: value)"));
            let (name, value) = h.split_once(':').ok_or_else(bad_header)?;
            let name = name.trim();
            if is_connection_specific(name.as_bytes()) {
                continue;
            }
            let name = HeaderName::try_from(name).map_err(|_| bad_header())?;
            let value = HeaderValue::try_from(value.trim()).map_err(|_| bad_header())?;
            extra.push((name, value));
        }
        Ok(Common {
            scheme,
            authority,
            extra,
        })
    }
}

/// Compiles one request of the file for HTTP/2.
pub(super) fn req(file: &RequestFile, e: &Entry) -> Result<Req, TemplateError> {
    let [method, path] = e.words.as_slice() else {
        return Err(file.error(
            e.line,
            "an HTTP request line is METHOD PATH (with an optional weight=N before it)",
        ));
    };
    let mut b = Builder::default();
    b.field(method);
    b.field(path);
    let mut names = Vec::new();
    let mut host = None;
    for (line, h) in &e.headers {
        let name = header_name(h);
        let Some(value) = header_value(h) else {
            return Err(file.error(
                *line,
                "a header's name must be plain text (placeholders go in its value)",
            ));
        };
        if name.eq_ignore_ascii_case(b"content-length") {
            return Err(file.error(*line, "Content-Length is set from the body: leave it out"));
        }
        if name.eq_ignore_ascii_case(b"host") {
            host = Some(names.len());
        } else if is_connection_specific(name) {
            continue;
        }
        let name = HeaderName::from_bytes(name).map_err(|_| {
            file.error(
                *line,
                format!(
                    "{:?} is not a valid header name",
                    String::from_utf8_lossy(name)
                ),
            )
        })?;
        b.field(&value);
        names.push(name);
    }
    if let Some((_, body)) = &e.body {
        b.field(body);
    }
    let mut req = b.finish();
    req.h2 = Some(Shape {
        names,
        host,
        body: e.body.is_some(),
    });
    Ok(req)
}

/// The value of a `Name: value` header whose name is plain text: what follows the colon.
fn header_value(h: &Text) -> Option<Text> {
    let Some(Part::Lit(first)) = h.0.first() else {
        return None;
    };
    let colon = first.iter().position(|&c| c == b':')?;
    let rest = first[colon + 1..].trim_ascii_start();
    let mut parts = Vec::with_capacity(h.0.len());
    if !rest.is_empty() {
        parts.push(Part::Lit(rest.to_vec()));
    }
    parts.extend(h.0[1..].iter().cloned());
    Some(Text(parts))
}

/// Renders every request of the file once, so a method, path or header value HTTP/2 cannot
/// carry is an error naming its line before any load starts (placeholders only ever add
/// digits and `[A-Za-z0-9_-]`).
pub(super) fn check(file: &RequestFile, compiled: &Arc<Compiled>) -> Result<(), TemplateError> {
    let mut requests = compiled.h2_connection(0, 0);
    for (i, e) in file.entries.iter().enumerate() {
        requests.conn.render_at(i);
        requests
            .build(i)
            .map_err(|err| file.error(e.line, format!("not a valid HTTP/2 request: {err}")))?;
    }
    Ok(())
}

/// One connection's HTTP/2 requests drawn from a compiled file.
pub struct H2Requests {
    conn: TemplateConn,
    arena: BytesMut,
}

impl Compiled {
    /// Connection number `conn`'s HTTP/2 requests, its generator seeded with `seed`; the
    /// file must have been compiled with [`super::Framing::Http2`].
    pub fn h2_connection(self: &Arc<Self>, conn: usize, seed: u64) -> H2Requests {
        H2Requests {
            conn: self.renderer(conn, seed),
            arena: BytesMut::new(),
        }
    }
}

impl H2Requests {
    /// The next request and its body.
    pub fn next_request(&mut self) -> (Request<()>, Option<Bytes>) {
        let i = self.conn.render();
        // Every request was built once by `check` when compiled; placeholders add only
        // characters valid in any field.
        self.build(i)
            .expect("an HTTP/2 template checked when compiled")
    }

    /// The request rendered last (request `i` of the file), made into an `http::Request`.
    fn build(&mut self, i: usize) -> Result<(Request<()>, Option<Bytes>), http::Error> {
        let c = &*self.conn.compiled;
        let (common, shape) = match (&c.h2, &c.req(i).h2) {
            (Some(common), Some(shape)) => (common, shape),
            _ => unreachable!("compiled for HTTP/2"),
        };
        if self.arena.capacity() < self.conn.buf.len() {
            self.arena.reserve(ARENA_BYTES.max(self.conn.buf.len()));
        }
        self.arena.extend_from_slice(&self.conn.buf);
        let all = self.arena.split().freeze();
        let marks = &self.conn.marks;
        let field = |k: usize| all.slice(if k == 0 { 0 } else { marks[k - 1] }..marks[k]);
        let method = Method::from_bytes(&field(0))?;
        let path = PathAndQuery::from_maybe_shared(field(1))?;
        let mut authority = None;
        let mut headers = HeaderMap::with_capacity(shape.names.len() + common.extra.len() + 1);
        for (k, name) in shape.names.iter().enumerate() {
            if shape.host == Some(k) {
                authority = Some(Authority::from_maybe_shared(field(2 + k))?);
            } else {
                headers.append(name.clone(), HeaderValue::from_maybe_shared(field(2 + k))?);
            }
        }
        for (name, value) in &common.extra {
            headers.append(name.clone(), value.clone());
        }
        let body = shape.body.then(|| field(2 + shape.names.len()));
        if let Some(b) = &body {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(b.len()));
        }
        let mut uri = http::uri::Parts::default();
        uri.scheme = Some(common.scheme.clone());
        uri.authority = Some(authority.unwrap_or_else(|| common.authority.clone()));
        uri.path_and_query = Some(path);
        let mut request = Request::new(());
        *request.method_mut() = method;
        *request.uri_mut() = Uri::from_parts(uri)?;
        *request.headers_mut() = headers;
        Ok((request, body))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{compile, Framing, Order};
    use super::*;

    fn compiled(s: &str) -> Result<Arc<Compiled>, TemplateError> {
        let file = RequestFile {
            path: "req.txt".into(),
            entries: super::super::parse::entries(Path::new("req.txt"), s).unwrap(),
        };
        let framing = Framing::Http2 {
            scheme: "https",
            authority: "h:1",
            headers: &["X-All: 1".to_string(), "Connection: close".to_string()],
        };
        compile(&file, Order::Sequential, framing).map(Arc::new)
    }

    #[test]
    fn fields_are_rendered_apart_into_a_request() {
        let c = compiled(
            "POST /i/{seq}?c={conn}\n  X-Key: k{uniform:1000}\n  body id={seq}\nGET /\n  Host: other:2\n",
        )
        .unwrap();
        let mut r = c.h2_connection(7, 1);
        let (req, body) = r.next_request();
        assert_eq!(req.method(), Method::POST);
        assert_eq!(req.uri().to_string(), "https://h:1/i/0?c=7");
        let key = req.headers()["x-key"].to_str().unwrap();
        assert!(key.len() == 4 && key.starts_with('k'), "{key}");
        assert_eq!(req.headers()["x-all"], "1");
        assert!(req.headers().get("connection").is_none());
        assert_eq!(body.as_deref(), Some(&b"id=0"[..]));
        assert_eq!(req.headers()[CONTENT_LENGTH], "4");
        let (req, body) = r.next_request();
        assert_eq!(req.uri().to_string(), "https://other:2/");
        assert!(req.headers().get("host").is_none() && body.is_none());
        // {seq} once per request, the body's length following its digits.
        for _ in 0..18 {
            r.next_request();
        }
        let (req, body) = r.next_request();
        assert_eq!(req.uri().path(), "/i/10");
        assert_eq!(body.as_deref(), Some(&b"id=10"[..]));
        assert_eq!(req.headers()[CONTENT_LENGTH], "5");
    }

    #[test]
    fn what_http2_cannot_carry_names_the_line() {
        let msg = |s: &str| compiled(s).unwrap_err().to_string();
        assert!(
            msg("GET /\nGET /a b{seq}\n").starts_with("req.txt:2: an HTTP request line"),
            "{}",
            msg("GET /\nGET /a b{seq}\n")
        );
        let m = msg("GET /\n  X-{seq}: 1\n");
        assert!(
            m.starts_with("req.txt:2: a header's name must be plain"),
            "{m}"
        );
        let m = msg("GET /\nGET /<x>\n");
        assert!(
            m.starts_with("req.txt:2: not a valid HTTP/2 request"),
            "{m}"
        );
    }
}
