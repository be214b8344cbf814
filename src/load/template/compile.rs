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
use crate::load::protocol::{http::Framer, Protocol, Reply};

/// `{rand:N}`'s characters: 64 of them, so each takes 6 bits of a draw.
const RAND_ALPHABET: &[u8; 64] =
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
/// `{rand:N}` copies N characters from a random offset below this in a block of random
/// characters made once per load: one draw and one copy per placeholder, where drawing each
/// character cost 4× the whole rest of a request (measured, 60 characters).
pub(crate) const RAND_OFFSETS: usize = 1 << 16;
/// `{seq}` values a connection takes from the shared counter at a time, so the counter's
/// cache line is not written on every request.
const SEQ_BLOCK: u64 = 64;

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
    /// HTTP/2: each request's method, path, header values and body rendered apart, then
    /// made into an `http::Request` (see [`super::h2`]).
    Http2 {
        /// `http` or `https`.
        scheme: &'a str,
        /// The `:authority` (unless the file sets `Host`).
        authority: &'a str,
        /// Headers added to every request (`-H`).
        headers: &'a [String],
    },
}

/// The requests of a file, ready to render; shared by every connection of a load.
#[derive(Debug)]
pub struct Compiled {
    reqs: Vec<Req>,
    /// Running sum of the weights, for the weighted pick.
    cum_weights: Vec<u64>,
    order: Order,
    /// `{seq}`'s counter, shared by the load's connections (taken in blocks).
    seq: AtomicU64,
    /// Random characters `{rand:N}` copies from.
    rand_pool: Vec<u8>,
    resp: bool,
    /// HTTP/2: what every request shares (scheme, authority, `-H` headers).
    pub(super) h2: Option<super::h2::Common>,
    /// Most placeholders in one request (the per-connection value buffer's size).
    max_slots: usize,
    /// HTTP/1.1: some requests are HEAD, so each connection notes which of its requests in
    /// flight are (their replies have no body).
    any_head: bool,
}

#[derive(Debug)]
pub(super) struct Req {
    /// Whether the request uses `{seq}` (one value per request).
    has_seq: bool,
    pieces: Vec<Piece>,
    gens: Vec<Gen>,
    groups: Vec<Group>,
    /// HTTP/2: the header names and where the fields rendered between marks go.
    pub(super) h2: Option<super::h2::Shape>,
    /// HTTP/1.1: the method is HEAD (its reply has no body).
    head: bool,
}

#[derive(Debug)]
enum Piece {
    Lit(Box<[u8]>),
    /// Placeholder slot.
    Gen(usize),
    /// The decimal length of a sized group.
    Len(usize),
    /// HTTP/2: the end of a field (its offset is kept in the render's marks).
    Mark,
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
            Framing::Http2 { .. } => super::h2::req(file, e),
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
    let max_rand = reqs
        .iter()
        .flat_map(|r| &r.gens)
        .filter_map(|g| match g {
            Gen::Rand(n) => Some(*n),
            _ => None,
        })
        .max();
    let rand_pool = max_rand.map_or_else(Vec::new, rand_pool);
    let h2 = match framing {
        Framing::Http2 {
            scheme,
            authority,
            headers,
        } => Some(super::h2::Common::new(scheme, authority, headers)?),
        _ => None,
    };
    let mut compiled = Compiled {
        reqs,
        cum_weights,
        order,
        seq: AtomicU64::new(0),
        rand_pool,
        resp: matches!(framing, Framing::Resp),
        h2,
        max_slots,
        any_head: false,
    };
    compiled.any_head = compiled.reqs.iter().any(|r| r.head);
    if compiled.h2.is_some() {
        let shared = Arc::new(compiled);
        super::h2::check(file, &shared)?;
        compiled = Arc::into_inner(shared).expect("the check's renderer is dropped");
        // The check drew `{seq}` values: the load's start at 0.
        compiled.seq = AtomicU64::new(0);
    }
    Ok(compiled)
}

/// Builds a request's pieces.
#[derive(Default)]
pub(super) struct Builder {
    req: Option<Req>,
    lit: Vec<u8>,
}

impl Builder {
    fn req(&mut self) -> &mut Req {
        self.req.get_or_insert_with(|| Req {
            has_seq: false,
            pieces: Vec::new(),
            gens: Vec::new(),
            groups: Vec::new(),
            h2: None,
            head: false,
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
                    req.has_seq |= matches!(gen, Gen::Seq);
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

    /// HTTP/2: adds `text` as a field (it ends with a mark).
    pub(super) fn field(&mut self, text: &Text) {
        self.text(text, None);
        self.flush();
        self.req().pieces.push(Piece::Mark);
    }

    pub(super) fn finish(mut self) -> Req {
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
    let mut req = b.finish();
    // A method drawn from a placeholder is not known to be HEAD: its replies are framed by
    // their headers.
    req.head = *method == Text(vec![Part::Lit(b"HEAD".to_vec())]);
    Ok(req)
}

/// The name of a `Name: value` header (its leading literal, up to the colon).
pub(super) fn header_name(h: &Text) -> &[u8] {
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
        Box::new(self.renderer(conn, seed))
    }

    pub(super) fn renderer(self: &Arc<Self>, conn: usize, seed: u64) -> TemplateConn {
        TemplateConn {
            compiled: self.clone(),
            rng: SplitMix64(seed),
            conn: conn as u64,
            next: 0,
            seq: 0,
            seq_end: 0,
            buf: Vec::with_capacity(1024),
            vals: vec![0; self.max_slots],
            marks: Vec::new(),
            framer: Framer::default(),
            heads: std::collections::VecDeque::new(),
        }
    }

    /// The request at `i` (in file order).
    pub(super) fn req(&self, i: usize) -> &Req {
        &self.reqs[i]
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
pub(super) struct TemplateConn {
    pub(super) compiled: Arc<Compiled>,
    rng: SplitMix64,
    conn: u64,
    /// The next request in sequential order.
    next: usize,
    /// The next `{seq}` value, and the end of the block it is taken from.
    seq: u64,
    seq_end: u64,
    pub(super) buf: Vec<u8>,
    vals: Vec<u64>,
    /// HTTP/2: the end offset in `buf` of each field rendered.
    pub(super) marks: Vec<usize>,
    /// HTTP/1.1: the reply parser.
    framer: Framer,
    /// HTTP/1.1 with HEAD requests in the file: whether each request in flight is one, oldest
    /// first.
    heads: std::collections::VecDeque<bool>,
}

impl TemplateConn {
    fn next_seq(&mut self) -> u64 {
        if self.seq == self.seq_end {
            self.seq = self.compiled.seq.fetch_add(SEQ_BLOCK, Ordering::Relaxed);
            self.seq_end = self.seq + SEQ_BLOCK;
        }
        self.seq += 1;
        self.seq - 1
    }

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

impl TemplateConn {
    /// Renders the next request into `buf` (and its fields' ends into `marks`); its index.
    pub(super) fn render(&mut self) -> usize {
        let i = self.pick();
        self.render_at(i);
        i
    }

    /// Renders request `i`.
    pub(super) fn render_at(&mut self, i: usize) {
        let seq = if self.compiled.reqs[i].has_seq {
            self.next_seq()
        } else {
            0
        };
        let c = &*self.compiled;
        let req = &c.reqs[i];
        for (slot, gen) in req.gens.iter().enumerate() {
            self.vals[slot] = match gen {
                Gen::Seq => seq,
                Gen::Conn => self.conn,
                Gen::Key(space) => space.draw(&mut self.rng),
                Gen::Rand(_) => self.rng.next_u64() & (RAND_OFFSETS as u64 - 1),
            };
        }
        self.buf.clear();
        self.marks.clear();
        for piece in &req.pieces {
            match piece {
                Piece::Lit(b) => self.buf.extend_from_slice(b),
                Piece::Gen(slot) => match &req.gens[*slot] {
                    Gen::Key(space) => write_padded(&mut self.buf, self.vals[*slot], space.width()),
                    Gen::Rand(n) => {
                        let at = self.vals[*slot] as usize;
                        self.buf.extend_from_slice(&c.rand_pool[at..at + n]);
                    }
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
                Piece::Mark => self.marks.push(self.buf.len()),
            }
        }
    }
}

impl Protocol for TemplateConn {
    fn next_request(&mut self) -> &[u8] {
        let i = self.render();
        if self.compiled.any_head {
            self.heads.push_back(self.compiled.reqs[i].head);
        }
        &self.buf
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        if self.compiled.resp {
            return parse_resp(buf);
        }
        let head_request = self.heads.front().copied().unwrap_or(false);
        let reply = self.framer.frame(buf, head_request);
        if matches!(reply, Reply::Done { .. }) {
            self.heads.pop_front();
        }
        reply
    }

    fn reset(&mut self) {
        self.framer.reset();
        self.heads.clear();
    }
}

fn decimal_width(v: u64) -> usize {
    let mut w = 1;
    let mut p = 10u64;
    while w < 20 && v >= p {
        w += 1;
        p = p.wrapping_mul(10);
    }
    w
}

/// The random characters `{rand:N}` copies from, for placeholders of at most `max_n`: one
/// draw and one copy per placeholder (the offset below [`RAND_OFFSETS`]).
pub(crate) fn rand_pool(max_n: usize) -> Vec<u8> {
    let mut pool = Vec::new();
    write_rand(
        &mut pool,
        RAND_OFFSETS + max_n,
        &mut SplitMix64(0x7E57_DA7A),
    );
    pool
}

/// `v` in decimal.
pub(crate) fn write_decimal(out: &mut Vec<u8>, v: u64) {
    write_padded(out, v, decimal_width(v));
}

/// `v` in decimal, zero-padded to `width` digits (at most 20; a key's width is at most 20).
pub(crate) fn write_padded(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let mut digits = [b'0'; 20];
    for d in digits[20 - width..].iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[20 - width..]);
}

/// `n` random characters, ten from each 64-bit draw.
fn write_rand(out: &mut Vec<u8>, n: usize, rng: &mut SplitMix64) {
    let start = out.len();
    out.resize(start + n, 0);
    for chunk in out[start..].chunks_mut(10) {
        let mut bits = rng.next_u64();
        for b in chunk {
            *b = RAND_ALPHABET[(bits & 63) as usize];
            bits >>= 6;
        }
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
        assert!(first.starts_with("POST /i/0 HTTP/1.1\r\nX-C: 7\r\nHost: h:1\r\nX-All: 1\r\nContent-Length: 10\r\n\r\nid=0 k="), "{first:?}");
        for _ in 0..9 {
            render(&mut *p);
        }
        // One {seq} per request; at 10 the body grows by a digit and Content-Length follows.
        let eleventh = render(&mut *p);
        assert!(eleventh.starts_with("POST /i/10 "), "{eleventh:?}");
        assert!(
            eleventh.contains("Content-Length: 11\r\n\r\nid=10 k="),
            "{eleventh:?}"
        );
        let body = eleventh.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(body.len(), 11);
    }

    #[test]
    fn replies_to_the_head_requests_of_a_file_have_no_body() {
        let c = http_of("HEAD /a\nGET /b\n", Order::Sequential);
        let mut p = c.connection(0, 1);
        // Three in flight (pipelined): HEAD, GET, HEAD.
        for _ in 0..3 {
            render(&mut *p);
        }
        let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n";
        let with_body = [&reply[..], b"ok"].concat();
        let whole = |len| Reply::Done {
            len,
            error: None,
            close: false,
            found: None,
            status: Some(200),
        };
        assert_eq!(p.parse_reply(reply), whole(reply.len()));
        assert_eq!(p.parse_reply(reply), Reply::Incomplete);
        assert_eq!(p.parse_reply(&with_body), whole(with_body.len()));
        assert_eq!(p.parse_reply(reply), whole(reply.len()));
        // A dropped connection forgets its requests in flight: GET (dropped), then HEAD.
        render(&mut *p);
        p.reset();
        render(&mut *p);
        assert_eq!(p.parse_reply(&with_body), whole(reply.len()));
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
        // Requests without {seq} take no value: the eleventh SET has seq 10.
        assert_eq!(
            render(&mut *p),
            "*3\r\n$3\r\nSET\r\n$6\r\nkey:10\r\n$3\r\na b\r\n"
        );
        // Another connection takes the next block of values.
        let mut q = c.connection(1, 1);
        let first = render(&mut *q);
        assert!(
            first.contains(&format!("\r\nkey:{SEQ_BLOCK}\r\n")),
            "{first:?}"
        );
        assert_eq!(
            p.parse_reply(b"+OK\r\n"),
            Reply::Done {
                len: 5,
                error: None,
                close: false,
                found: None,
                status: None
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

    /// `cargo test --release --lib template::compile::tests::render_cost -- --ignored
    /// --nocapture`: ns per request of the built-in SET and of a 3-placeholder template.
    #[test]
    #[ignore]
    fn render_cost() {
        use crate::load::protocol::redis::{KeySpace, Redis};
        use crate::load::Distribution;
        let n = 2_000_000;
        let time = |p: &mut dyn Protocol| {
            let t = std::time::Instant::now();
            let mut sum = 0usize;
            for _ in 0..n {
                sum += p.next_request().len();
            }
            (t.elapsed().as_nanos() as f64 / n as f64, sum)
        };
        let mut plain = Redis::new(
            KeySpace::new(1024, Distribution::Uniform).unwrap(),
            0.0,
            64,
            1,
        );
        for t in ["SET key:{uniform:1024} {rand:60}-{seq}\n", "SET key:1 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n", "SET key:{uniform:1024} x\n", "SET key:1 {rand:60}\n", "SET key:{seq} x\n"] {
            let c = Arc::new(compile(&file(t), Order::Weighted, Framing::Resp).unwrap());
            let mut templ = c.connection(0, 1);
            println!("plain {:.1} ns, template {:.1} ns: {t}", time(&mut plain).0, time(&mut *templ).0);
        }
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
