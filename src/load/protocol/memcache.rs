//! memcached's text protocol: `get`/`set`, or the meta commands `mg`/`ms` (memcached 1.6 and
//! later), and reply framing for both.
//!
//! The requests are [`KvRequests`], as RESP's: one encoded lookup and one encoded store per
//! connection, the key digits patched in place. Replies come back in order, so the parser
//! needs no memory of what was asked: every reply names its own shape (`VALUE`/`END`,
//! `VA`/`EN`, `STORED`/`HD`, or an error line).

use std::str::FromStr;

use super::keys::{KeySpace, KvRequests};
use super::{Preload, Protocol, Reply};
use crate::record::load::RequestError;

/// Longest reply line accepted (a `VALUE` line names a key of at most 250 bytes; an error
/// line is a short sentence): a longer one without its CRLF is not memcached talking.
const MAX_LINE_BYTES: usize = 4096;
/// Largest value accepted (memcached's own ceiling for `-I`).
const MAX_VALUE_BYTES: usize = 1 << 30;

/// Which commands a connection sends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Commands {
    /// `get KEY` and `set KEY 0 0 N`: every memcached, and the servers that speak its protocol.
    #[default]
    Text,
    /// `mg KEY v` and `ms KEY N`: the meta commands of memcached 1.6 and later.
    Meta,
}

/// A `--memcache-commands` that is neither `text` nor `meta`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0:?}: expected text (get/set) or meta (mg/ms)")]
pub struct BadCommands(String);

impl FromStr for Commands {
    type Err = BadCommands;

    fn from_str(s: &str) -> Result<Self, BadCommands> {
        match s {
            "text" => Ok(Commands::Text),
            "meta" => Ok(Commands::Meta),
            _ => Err(BadCommands(s.to_string())),
        }
    }
}

/// One connection's memcached requests and reply parser.
pub struct Memcache(KvRequests);

impl Memcache {
    /// A connection drawing from `space`, a lookup with probability `read_ratio`, stored values
    /// of `value_size` bytes, its generator seeded with `seed`.
    pub fn new(
        space: KeySpace,
        read_ratio: f64,
        value_size: usize,
        seed: u64,
        commands: Commands,
    ) -> Self {
        let key = KvRequests::key_pattern(&space);
        let value = "x".repeat(value_size);
        let (get, set) = match commands {
            Commands::Text => (
                format!("get {key}\r\n"),
                format!("set {key} 0 0 {value_size}\r\n{value}\r\n"),
            ),
            Commands::Meta => (
                format!("mg {key} v\r\n"),
                format!("ms {key} {value_size}\r\n{value}\r\n"),
            ),
        };
        Memcache(KvRequests::new(get, set, space, read_ratio, seed))
    }
}

impl Preload for Memcache {
    fn set_of(&mut self, key: u64) -> &[u8] {
        self.0.set_of(key)
    }
}

impl Protocol for Memcache {
    #[inline]
    fn next_request(&mut self) -> &[u8] {
        self.0.next_request()
    }

    #[inline]
    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        parse_memcache(buf)
    }
}

/// Frames one memcached reply (text or meta) at the front of `buf`.
pub fn parse_memcache(buf: &[u8]) -> Reply {
    let mut at = 0;
    let mut values = 0;
    loop {
        let (line, next) = match line_at(buf, at) {
            Ok(Some(l)) => l,
            Ok(None) => return Reply::Incomplete,
            Err(kind) => return Reply::Invalid(kind),
        };
        let (word, rest) = split_word(line);
        let end = match word {
            // Only more values or their END may follow a value.
            _ if values > 0 && word != b"VALUE" && word != b"END" => {
                return Reply::Invalid(RequestError::MemcacheBadReply)
            }
            b"VALUE" => value_after(rest, 2, buf, next),
            b"VA" => value_after(rest, 0, buf, next),
            _ => return status(word, next, values > 0),
        };
        match end {
            Ok(Some(end)) if word == b"VALUE" => {
                at = end;
                values += 1;
            }
            Ok(Some(end)) => return done(end, None, Some(true)),
            Ok(None) => return Reply::Incomplete,
            Err(kind) => return Reply::Invalid(kind),
        }
    }
}

/// The reply whose last line is `word`, ending at `end`.
fn status(word: &[u8], end: usize, had_values: bool) -> Reply {
    match word {
        b"END" => done(end, None, Some(had_values)),
        b"EN" => done(end, None, Some(false)),
        b"STORED" | b"HD" => done(end, None, None),
        b"NOT_STORED" | b"EXISTS" | b"NOT_FOUND" | b"NS" | b"EX" | b"NF" => {
            done(end, Some(RequestError::MemcacheNotStored), None)
        }
        b"SERVER_ERROR" => done(end, Some(RequestError::MemcacheServerError), None),
        b"CLIENT_ERROR" => done(end, Some(RequestError::MemcacheClientError), None),
        b"ERROR" => done(end, Some(RequestError::MemcacheError), None),
        _ => Reply::Invalid(RequestError::MemcacheBadReply),
    }
}

fn done(len: usize, error: Option<RequestError>, found: Option<bool>) -> Reply {
    Reply::Done {
        len,
        error,
        close: false,
        found,
        status: None,
    }
}

/// The line starting at `at` without its CRLF, and where the next one starts; `None` when
/// its end has not arrived.
#[inline]
fn line_at(buf: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, RequestError> {
    let rest = &buf[at..];
    let window = &rest[..rest.len().min(MAX_LINE_BYTES)];
    match memchr::memchr(b'\n', window) {
        Some(i) if i > 0 && window[i - 1] == b'\r' => Ok(Some((&window[..i - 1], at + i + 1))),
        Some(_) => Err(RequestError::MemcacheBadReply),
        None if rest.len() >= MAX_LINE_BYTES => Err(RequestError::MemcacheBadReply),
        None => Ok(None),
    }
}

/// The first space-separated word of `line` and what follows it.
#[inline]
fn split_word(line: &[u8]) -> (&[u8], &[u8]) {
    match memchr::memchr(b' ', line) {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => (line, &[]),
    }
}

/// The end of the data block a `VALUE`/`VA` line announces (its byte count is word number
/// `size_word` of `args`), the data starting at `data_at`: the block must end in CRLF.
fn value_after(
    args: &[u8],
    size_word: usize,
    buf: &[u8],
    data_at: usize,
) -> Result<Option<usize>, RequestError> {
    let size = args
        .split(|&b| b == b' ')
        .nth(size_word)
        .and_then(parse_size)
        .ok_or(RequestError::MemcacheBadReply)?;
    if size > MAX_VALUE_BYTES {
        return Err(RequestError::MemcacheBadReply);
    }
    let end = data_at + size + 2;
    if buf.len() < end {
        return Ok(None);
    }
    if &buf[end - 2..end] != b"\r\n" {
        return Err(RequestError::MemcacheBadValue);
    }
    Ok(Some(end))
}

fn parse_size(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 12 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        digits
            .iter()
            .fold(0, |n, &d| n * 10 + usize::from(d - b'0')),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Distribution;

    fn conn(read_ratio: f64, commands: Commands) -> Memcache {
        let space = KeySpace::new(1000, Distribution::Uniform).unwrap();
        Memcache::new(space, read_ratio, 4, 7, commands)
    }

    fn ok(len: usize, error: Option<RequestError>, found: Option<bool>) -> Reply {
        done(len, error, found)
    }

    #[test]
    fn text_requests_are_patched_in_place() {
        let get = String::from_utf8(conn(1.0, Commands::Text).next_request().to_vec()).unwrap();
        assert!(
            get.starts_with("get key:") && get.ends_with("\r\n"),
            "{get:?}"
        );
        assert_eq!(get.len(), "get key:123\r\n".len());
        let set = String::from_utf8(conn(0.0, Commands::Text).next_request().to_vec()).unwrap();
        assert!(set.starts_with("set key:"), "{set:?}");
        assert!(set.ends_with(" 0 0 4\r\nxxxx\r\n"), "{set:?}");
        assert_eq!(
            conn(1.0, Commands::Text).set_of(42),
            b"set key:042 0 0 4\r\nxxxx\r\n"
        );
    }

    #[test]
    fn meta_requests() {
        let mut m = conn(1.0, Commands::Meta);
        let get = String::from_utf8(m.next_request().to_vec()).unwrap();
        assert!(
            get.starts_with("mg key:") && get.ends_with(" v\r\n"),
            "{get:?}"
        );
        assert_eq!(m.set_of(7), b"ms key:007 4\r\nxxxx\r\n");
        assert!("binary".parse::<Commands>().is_err());
    }

    #[test]
    fn frames_text_replies() {
        let p = parse_memcache;
        assert_eq!(p(b"END\r\n"), ok(5, None, Some(false)));
        let hit = b"VALUE key:1 0 3\r\nabc\r\nEND\r\n";
        assert_eq!(p(hit), ok(hit.len(), None, Some(true)));
        assert_eq!(p(&hit[..hit.len() - 1]), Reply::Incomplete);
        assert_eq!(p(&hit[..20]), Reply::Incomplete);
        let cas = b"VALUE k 0 1 99\r\na\r\nVALUE j 0 0\r\n\r\nEND\r\nSTORED\r\n";
        assert_eq!(p(cas), ok(cas.len() - 8, None, Some(true)));
        assert_eq!(p(b"STORED\r\nEND\r\n"), ok(8, None, None));
        assert_eq!(
            p(b"NOT_STORED\r\n"),
            ok(12, Some(RequestError::MemcacheNotStored), None)
        );
    }

    #[test]
    fn frames_meta_replies() {
        let p = parse_memcache;
        assert_eq!(p(b"EN\r\n"), ok(4, None, Some(false)));
        assert_eq!(p(b"HD\r\n"), ok(4, None, None));
        assert_eq!(p(b"VA 2 f0\r\nab\r\nHD\r\n"), ok(13, None, Some(true)));
        assert_eq!(p(b"VA 2\r\nab"), Reply::Incomplete);
        assert_eq!(
            p(b"NS\r\n"),
            ok(4, Some(RequestError::MemcacheNotStored), None)
        );
    }

    #[test]
    fn errors_are_their_own_kinds() {
        let p = parse_memcache;
        let e = |s: &[u8], kind| assert_eq!(p(s), ok(s.len(), Some(kind), None), "{s:?}");
        e(
            b"SERVER_ERROR out of memory\r\n",
            RequestError::MemcacheServerError,
        );
        e(
            b"CLIENT_ERROR bad data chunk\r\n",
            RequestError::MemcacheClientError,
        );
        e(b"ERROR\r\n", RequestError::MemcacheError);
    }

    #[test]
    fn hostile_replies_are_invalid_not_panics() {
        let p = parse_memcache;
        let bad = |s: &[u8], kind| assert_eq!(p(s), Reply::Invalid(kind), "{s:?}");
        // A value longer than announced: its CRLF is not where the length says.
        bad(
            b"VALUE k 0 2\r\nabc\r\nEND\r\n",
            RequestError::MemcacheBadValue,
        );
        bad(b"VA 1\r\nabc\r\n", RequestError::MemcacheBadValue);
        bad(b"VALUE k 0 x\r\n", RequestError::MemcacheBadReply);
        bad(b"VALUE k 0\r\n", RequestError::MemcacheBadReply);
        bad(b"VALUE k 0 99999999999\r\n", RequestError::MemcacheBadReply);
        bad(
            b"VALUE k 0 1\r\na\r\nSTORED\r\n",
            RequestError::MemcacheBadReply,
        );
        bad(b"HTTP/1.1 200 OK\r\n", RequestError::MemcacheBadReply);
        bad(b"END\n", RequestError::MemcacheBadReply);
        bad(b"\n", RequestError::MemcacheBadReply);
        bad(&[b'x'; MAX_LINE_BYTES], RequestError::MemcacheBadReply);
        assert_eq!(p(b""), Reply::Incomplete);
        assert_eq!(p(b"VALU"), Reply::Incomplete);
    }
}
