//! A request file turned into byte pieces for one protocol, and each connection's renderer.
//!
//! A compiled request is literal byte runs, placeholder slots and length slots (HTTP's
//! `Content-Length`, RESP's `$N`). Rendering draws the slots' values, sums the lengths of the
//! sized parts and writes the pieces: copies and integer formats only. A length whose part
//! holds no variable-width placeholder is written at compile time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Entry, Gen, Order, Part, RequestFile, TemplateError, Text};
use crate::load::protocol::redis::{parse_resp, SplitMix64};
use crate::load::protocol::{http::parse_response, Protocol, Reply};

/// `{rand:N}`'s characters: 64 of them, so each takes 6 bits of a draw.
const RAND_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Which wire format the requests are compiled for.
#[derive(Debug, Clone, Copy)]
pub enum Framing<'a> {
    /// HTTP/1.1: `Host` (unless the file sets one) and the `-H` headers added to each request.
    Http {
        /// The `Host` header's value.
        host: &'a str,
        /// Headers added to every request (`-H`).
        headers: &'a [String],
    },
    /// RESP commands (redis).
    Resp,
}

/// The requests of a file, ready to render; shared by every connection of a load.
#[derive(Debug)]
pub struct Compiled {
    reqs: Vec<Req>,
    /// Running sum of the weights, for the weighted pick.
    cum_weights: Vec<u64>,
    order: Order,
    /// `{seq}`'s counter, shared by the load's connections.
    seq: AtomicU64,
    resp: bool,
    /// Most placeholders in one request (the per-connection value buffer's size).
    max_slots: usize,
}

#[derive(Debug)]
struct Req {
    pieces: Vec<Piece>,
    gens: Vec<Gen>,
    groups: Vec<Group>,
}

#[derive(Debug)]
enum Piece {
    Lit(Box<[u8]>),
    /// Placeholder slot.
    Gen(usize),
    /// The decimal length of a sized group.
    Len(usize),
}

/// A sized part: its length is `fixed` plus the digits of its variable-width slots.
#[derive(Debug, Default)]
struct Group {
    fixed: usize,
    var_slots: Vec<usize>,
}

/// Compiles `file` for `framing`, picking requests by `order`.
pub fn compile(
    file: &RequestFile,
    order: Order,
    framing: Framing<'_>,
) -> Result<Compiled, TemplateError> {
    let reqs = file
        .entries
        .iter()
        .map(|e| match framing {
            Framing::Http { host, headers } => http(file, e, host, headers),
            Framing::Resp => resp(file, e),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cum_weights = file
        .entries
        .iter()
        .scan(0, |sum, e| {
            *sum += e.weight;
            Some(*sum)
        })
        .collect();
    let max_slots = reqs.iter().map(|r| r.gens.len()).max().unwrap_or(0);
    Ok(Compiled {
        reqs,
        cum_weights,
        order,
        seq: AtomicU64::new(0),
        resp: matches!(framing, Framing::Resp),
        max_slots,
    })
}

/// Builds a request's pieces.
#[derive(Default)]
struct Builder {
    req: Option<Req>,
    lit: Vec<u8>,
}

impl Builder {
    fn req(&mut self) -> &mut Req {
        self.req.get_or_insert_with(|| Req {
            pieces: Vec::new(),
            gens: Vec::new(),
            groups: Vec::new(),
        })
    }

    fn lit(&mut self, b: &[u8]) {
        self.lit.extend_from_slice(b);
    }

    fn flush(&mut self) {
        if !self.lit.is_empty() {
            let lit = std::mem::take(&mut self.lit).into_boxed_slice();
            self.req().pieces.push(Piece::Lit(lit));
        }
    }

    /// Adds `text`, counting it into `group` when given.
    fn text(&mut self, text: &Text, group: Option<&mut Group>) {
        let mut group = group;
        for part in &text.0 {
            match part {
                Part::Lit(b) => {
                    self.lit(b);
                    if let Some(g) = group.as_deref_mut() {
                        g.fixed += b.len();
                    }
                }
                Part::Gen(gen) => {
                    self.flush();
                    let req = self.req();
                    let slot = req.gens.len();
                    req.gens.push(gen.clone());
                    req.pieces.push(Piece::Gen(slot));
                    if let Some(g) = group.as_deref_mut() {
                        match fixed_width(gen) {
                            Some(w) => g.fixed += w,
                            None => g.var_slots.push(slot),
                        }
                    }
                }
            }
        }
    }

    /// The length of `text`, then (after `between`) the text itself.
    fn sized(&mut self, text: &Text, between: &[u8]) {
        let mut group = Group::default();
        let mut body = Builder::default();
        body.text(text, Some(&mut group));
        if group.var_slots.is_empty() {
            self.lit(group.fixed.to_string().as_bytes());
        } else {
            self.flush();
            let req = self.req();
            req.pieces.push(Piece::Len(req.groups.len()));
        }
        self.lit(between);
        // Re-add the text to this request, its slots numbered after the ones so far.
        let offset = self.req().gens.len();
        group.var_slots.iter_mut().for_each(|s| *s += offset);
        if !group.var_slots.is_empty() {
            self.req().groups.push(group);
        }
        self.text(text, None);
    }

    fn finish(mut self) -> Req {
        self.flush();
        self.req().pieces.shrink_to_fit();
        self.req.take().expect("request started")
    }
}

/// Width of a placeholder's output when it does not depend on the value.
fn fixed_width(gen: &Gen) -> Option<usize> {
    match gen {
        Gen::Key(space) => Some(space.width()),
        Gen::Rand(n) => Some(*n),
        Gen::Seq | Gen::Conn => None,
    }
}

fn http(file: &RequestFile, e: &Entry, host: &str, extra: &[String]) -> Result<Req, TemplateError> {
    let [method, path] = e.words.as_slice() else {
        return Err(file.error(
            e.line,
            "an HTTP request line is METHOD PATH (with an optional weight=N before it)",
        ));
    };
    let mut b = Builder::default();
    b.text(method, None);
    b.lit(b" ");
    b.text(path, None);
    b.lit(b" HTTP/1.1\r\n");
    let mut has_host = false;
    for (line, h) in &e.headers {
        let name = header_name(h);
        if name.eq_ignore_ascii_case(b"content-length") {
            return Err(file.error(*line, "Content-Length is set from the body: leave it out"));
        }
        has_host |= name.eq_ignore_ascii_case(b"host");
        b.text(h, None);
        b.lit(b"\r\n");
    }
    if !has_host {
        b.lit(format!("Host: {host}\r\n").as_bytes());
    }
    for h in extra {
        b.lit(h.trim().as_bytes());
        b.lit(b"\r\n");
    }
    match &e.body {
        Some((_, body)) => {
            b.lit(b"Content-Length: ");
            b.sized(body, b"\r\n\r\n");
        }
        None => b.lit(b"\r\n"),
    }
    Ok(b.finish())
}

/// The name of a `Name: value` header (its leading literal, up to the colon).
fn header_name(h: &Text) -> &[u8] {
    match h.0.first() {
        Some(Part::Lit(b)) => b.split(|&c| c == b':').next().unwrap_or(b).trim_ascii(),
        _ => b"",
    }
}

fn resp(file: &RequestFile, e: &Entry) -> Result<Req, TemplateError> {
    if let Some((line, _)) = e.headers.first().or(e.body.as_ref()) {
        return Err(file.error(
            *line,
            "a redis command takes no headers or body: put its arguments on its line",
        ));
    }
    let mut b = Builder::default();
    b.lit(format!("*{}\r\n", e.words.len()).as_bytes());
    for word in &e.words {
        b.lit(b"$");
        b.sized(word, b"\r\n");
        b.lit(b"\r\n");
    }
    Ok(b.finish())
}

impl Compiled {
    /// Connection number `conn`'s renderer, its generator seeded with `seed`.
    pub fn connection(self: &Arc<Self>, conn: usize, seed: u64) -> Box<dyn Protocol> {
        Box::new(TemplateConn {
            compiled: self.clone(),
            rng: SplitMix64(seed),
            conn: conn as u64,
            next: 0,
            buf: Vec::with_capacity(1024),
            vals: vec![0; self.max_slots],
        })
    }

    /// Number of requests in the file.
    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    /// Whether there are none (never, once compiled from a checked file).
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}

/// One connection's requests drawn from a compiled file.
struct TemplateConn {
    compiled: Arc<Compiled>,
    rng: SplitMix64,
    conn: u64,
    /// The next request in sequential order.
    next: usize,
    buf: Vec<u8>,
    vals: Vec<u64>,
}

impl TemplateConn {
    fn pick(&mut self) -> usize {
        let c = &self.compiled;
        if c.reqs.len() == 1 {
            return 0;
        }
        match c.order {
            Order::Sequential => {
                let i = self.next;
                self.next = (i + 1) % c.reqs.len();
                i
            }
            Order::Weighted => {
                let total = *c.cum_weights.last().expect("some requests");
                let u = self.rng.next_u64() % total;
                c.cum_weights.partition_point(|&w| w <= u)
            }
        }
    }
}

impl Protocol for TemplateConn {
    fn next_request(&mut self) -> &[u8] {
        let i = self.pick();
        let c = &*self.compiled;
        let req = &c.reqs[i];
        for (slot, gen) in req.gens.iter().enumerate() {
            self.vals[slot] = match gen {
                Gen::Seq => c.seq.fetch_add(1, Ordering::Relaxed),
                Gen::Conn => self.conn,
                Gen::Key(space) => space.draw(&mut self.rng),
                Gen::Rand(_) => 0,
            };
        }
        self.buf.clear();
        for piece in &req.pieces {
            match piece {
                Piece::Lit(b) => self.buf.extend_from_slice(b),
                Piece::Gen(slot) => match &req.gens[*slot] {
                    Gen::Key(space) => write_padded(&mut self.buf, self.vals[*slot], space.width()),
                    Gen::Rand(n) => write_rand(&mut self.buf, *n, &mut self.rng),
                    Gen::Seq | Gen::Conn => write_decimal(&mut self.buf, self.vals[*slot]),
                },
                Piece::Len(g) => {
                    let group = &req.groups[*g];
                    let len: usize = group.fixed
                        + group
                            .var_slots
                            .iter()
                            .map(|&s| decimal_width(self.vals[s]))
                            .sum::<usize>();
                    write_decimal(&mut self.buf, len as u64);
                }
            }
        }
        &self.buf
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        if self.compiled.resp {
            parse_resp(buf)
        } else {
            parse_response(buf)
        }
    }
}

fn decimal_width(mut v: u64) -> usize {
    let mut w = 1;
    while v >= 10 {
        v /= 10;
        w += 1;
    }
    w
}

fn write_decimal(out: &mut Vec<u8>, v: u64) {
    let w = decimal_width(v);
    write_padded(out, v, w);
}

/// `v` in decimal, zero-padded to `width` digits.
fn write_padded(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for b in out[start..].iter_mut().rev() {
        *b = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// `n` random characters, ten from each 64-bit draw.
fn write_rand(out: &mut Vec<u8>, n: usize, rng: &mut SplitMix64) {
    let mut left = n;
    while left > 0 {
        let mut bits = rng.next_u64();
        for _ in 0..left.min(10) {
            out.push(RAND_ALPHABET[(bits & 63) as usize]);
            bits >>= 6;
        }
        left -= left.min(10);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn file(s: &str) -> RequestFile {
        RequestFile {
            path: "req.txt".into(),
            entries: super::super::parse::entries(Path::new("req.txt"), s).unwrap(),
        }
    }

    fn http_of(s: &str, order: Order) -> Arc<Compiled> {
        let framing = Framing::Http {
            host: "h:1",
            headers: &["X-All: 1".to_string()],
        };
        Arc::new(compile(&file(s), order, framing).unwrap())
    }

    fn render(p: &mut dyn Protocol) -> String {
        String::from_utf8(p.next_request().to_vec()).unwrap()
    }

    #[test]
    fn http_request_with_placeholders_and_sized_body() {
        let c = http_of(
            "POST /i/{seq}\n  X-C: {conn}\n  body id={seq} k={uniform:1000}\n",
            Order::Weighted,
        );
        let mut p = c.connection(7, 1);
        let first = render(&mut *p);
        assert!(first.starts_with("POST /i/0 HTTP/1.1\r\nX-C: 7\r\nHost: h:1\r\nX-All: 1\r\nContent-Length: 10\r\n\r\nid=1 k="), "{first:?}");
        for _ in 0..9 {
            render(&mut *p);
        }
        // Seq 20 and 21: the body grows by one digit and Content-Length follows.
        let eleventh = render(&mut *p);
        assert!(eleventh.starts_with("POST /i/20 "), "{eleventh:?}");
        assert!(
            eleventh.contains("Content-Length: 11\r\n\r\nid=21 k="),
            "{eleventh:?}"
        );
        let body = eleventh.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(body.len(), 11);
    }

    #[test]
    fn fixed_width_body_length_is_compiled_in() {
        let c = http_of("PUT /\n  Host: other\n  body {rand:64}\n", Order::Weighted);
        assert!(matches!(c.reqs[0].pieces[0], Piece::Lit(_)));
        assert!(c.reqs[0].groups.is_empty());
        let r = render(&mut *c.connection(0, 1));
        assert!(
            r.starts_with(
                "PUT / HTTP/1.1\r\nHost: other\r\nX-All: 1\r\nContent-Length: 64\r\n\r\n"
            ),
            "{r:?}"
        );
        let body = r.split("\r\n\r\n").nth(1).unwrap();
        assert!(body.len() == 64 && body.bytes().all(|b| RAND_ALPHABET.contains(&b)));
    }

    #[test]
    fn resp_commands() {
        let c = Arc::new(
            compile(
                &file("SET key:{seq} \"a b\"\nHINCRBY h f{uniform:10} 1\n"),
                Order::Sequential,
                Framing::Resp,
            )
            .unwrap(),
        );
        let mut p = c.connection(0, 1);
        assert_eq!(
            render(&mut *p),
            "*3\r\n$3\r\nSET\r\n$5\r\nkey:0\r\n$3\r\na b\r\n"
        );
        let h = render(&mut *p);
        assert!(
            h.starts_with("*4\r\n$7\r\nHINCRBY\r\n$1\r\nh\r\n$2\r\nf"),
            "{h:?}"
        );
        assert!(h.ends_with("\r\n$1\r\n1\r\n"), "{h:?}");
        for _ in 0..18 {
            render(&mut *p);
        }
        assert_eq!(
            render(&mut *p),
            "*3\r\n$3\r\nSET\r\n$6\r\nkey:10\r\n$3\r\na b\r\n"
        );
        assert_eq!(
            p.parse_reply(b"+OK\r\n"),
            Reply::Done {
                len: 5,
                error: None,
                close: false,
                found: None
            }
        );
    }

    #[test]
    fn weights_and_seeds() {
        let c = http_of("weight=3 GET /a\nGET /b\n", Order::Weighted);
        let (mut p, mut q) = (c.connection(0, 5), c.connection(0, 5));
        let draws: Vec<String> = (0..4000).map(|_| render(&mut *p)).collect();
        let a = draws.iter().filter(|r| r.starts_with("GET /a ")).count();
        assert!((2800..3200).contains(&a), "{a}");
        // The same seed draws the same requests.
        assert!(draws.iter().take(100).all(|d| *d == render(&mut *q)));
        let s = http_of("weight=3 GET /a\nGET /b\n", Order::Sequential);
        let mut p = s.connection(0, 5);
        let seq: Vec<String> = (0..4).map(|_| render(&mut *p)[..6].to_string()).collect();
        assert_eq!(seq, ["GET /a", "GET /b", "GET /a", "GET /b"]);
    }

    #[test]
    fn wrong_shapes_name_the_line() {
        let f = file("GET /\nGET / extra\n");
        let e = compile(
            &f,
            Order::Weighted,
            Framing::Http {
                host: "h",
                headers: &[],
            },
        )
        .unwrap_err();
        assert!(
            e.0.starts_with("req.txt:2: an HTTP request line is METHOD PATH"),
            "{}",
            e.0
        );
        let e = compile(&file("GET k\n  X: 1\n"), Order::Weighted, Framing::Resp).unwrap_err();
        assert!(
            e.0.starts_with("req.txt:2: a redis command takes no headers"),
            "{}",
            e.0
        );
        let f = file("POST /\n  Content-Length: 3\n  body abc\n");
        let e = compile(
            &f,
            Order::Weighted,
            Framing::Http {
                host: "h",
                headers: &[],
            },
        )
        .unwrap_err();
        assert!(e.0.starts_with("req.txt:2: Content-Length"), "{}", e.0);
    }
}
