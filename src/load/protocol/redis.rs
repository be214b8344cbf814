//! RESP commands (GET/SET) and reply framing.
//!
//! Each connection keeps one encoded GET and one encoded SET ([`KvRequests`]) and patches the key digits in
//! place (as redis-benchmark does), drawing keys from its own deterministic generator seeded
//! with `seed * 1000 + connection` (the benchkv study's convention).

use super::keys::KvRequests;
pub use super::keys::{KeySpace, SplitMix64};
use super::{Preload, Protocol, Reply};
use crate::record::load::RequestError;

/// Largest bulk string accepted in a reply.
const MAX_BULK_BYTES: i64 = 512 * 1024 * 1024;
/// Deepest array nesting accepted in a reply.
const MAX_DEPTH: usize = 8;

/// One connection's RESP requests and reply parser.
pub struct Redis(KvRequests);

impl Redis {
    /// A connection drawing from `space`, GET with probability `read_ratio`, SET values of
    /// `value_size` bytes, its generator seeded with `seed`.
    pub fn new(space: KeySpace, read_ratio: f64, value_size: usize, seed: u64) -> Self {
        let key = KvRequests::key_pattern(&space);
        let get = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
        let set = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_size}\r\n{}\r\n",
            key.len(),
            "x".repeat(value_size)
        );
        Redis(KvRequests::new(get, set, space, read_ratio, seed))
    }
}

impl Preload for Redis {
    fn set_of(&mut self, key: u64) -> &[u8] {
        self.0.set_of(key)
    }
}

impl Protocol for Redis {
    fn next_request(&mut self) -> &[u8] {
        self.0.next_request()
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        parse_resp(buf)
    }
}

/// Frames one RESP reply at the front of `buf`.
pub fn parse_resp(buf: &[u8]) -> Reply {
    match parse_value(buf, 0, 0) {
        Ok(Some((len, kind))) => Reply::Done {
            len,
            error: (kind == Value::Error).then_some(RequestError::RespError),
            close: false,
            found: match kind {
                Value::Bulk => Some(true),
                Value::Nil => Some(false),
                _ => None,
            },
            status: None,
        },
        Ok(None) => Reply::Incomplete,
        Err(kind) => Reply::Invalid(kind),
    }
}

/// The kind of a RESP value, as far as the engine cares: a GET answers a bulk string when
/// its key exists and nil when it does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Bulk,
    Nil,
    Error,
    Other,
}

/// Frames one RESP value starting at `pos`: `(end, kind)` or `None` when incomplete.
fn parse_value(
    buf: &[u8],
    pos: usize,
    depth: usize,
) -> Result<Option<(usize, Value)>, RequestError> {
    if depth > MAX_DEPTH {
        return Err(RequestError::RespBadReply);
    }
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let Some(line_end) = find_crlf(buf, pos + 1) else {
        return Ok(None);
    };
    let after = line_end + 2;
    match kind {
        b'+' | b':' => Ok(Some((after, Value::Other))),
        b'-' => Ok(Some((after, Value::Error))),
        b'$' => {
            let n = parse_int(&buf[pos + 1..line_end])?;
            if n < 0 {
                return Ok(Some((after, Value::Nil)));
            }
            if n > MAX_BULK_BYTES {
                return Err(RequestError::RespBadReply);
            }
            let end = after + n as usize + 2;
            Ok((buf.len() >= end).then_some((end, Value::Bulk)))
        }
        b'*' => {
            let n = parse_int(&buf[pos + 1..line_end])?;
            let mut at = after;
            for _ in 0..n.max(0) {
                match parse_value(buf, at, depth + 1)? {
                    Some((end, _)) => at = end,
                    None => return Ok(None),
                }
            }
            Ok(Some((at, Value::Other)))
        }
        _ => Err(RequestError::RespBadReply),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_int(digits: &[u8]) -> Result<i64, RequestError> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or(RequestError::RespBadReply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::Distribution;

    fn conn(read_ratio: f64) -> Redis {
        Redis::new(
            KeySpace::new(1000, Distribution::Uniform).unwrap(),
            read_ratio,
            4,
            7,
        )
    }

    #[test]
    fn get_is_patched_in_place() {
        let mut r = conn(1.0);
        let req = String::from_utf8(r.next_request().to_vec()).unwrap();
        assert!(req.starts_with("*2\r\n$3\r\nGET\r\n$7\r\nkey:"), "{req:?}");
        assert_eq!(req.len(), "*2\r\n$3\r\nGET\r\n$7\r\nkey:123\r\n".len());
        assert!(req[req.len() - 5..req.len() - 2]
            .bytes()
            .all(|b| b.is_ascii_digit()));
    }

    #[test]
    fn set_carries_value() {
        let mut r = conn(0.0);
        let req = String::from_utf8(r.next_request().to_vec()).unwrap();
        assert!(req.starts_with("*3\r\n$3\r\nSET\r\n$7\r\nkey:"), "{req:?}");
        assert!(req.ends_with("\r\n$4\r\nxxxx\r\n"), "{req:?}");
    }

    #[test]
    fn same_seed_same_keys() {
        let (mut a, mut b) = (conn(0.5), conn(0.5));
        for _ in 0..100 {
            assert_eq!(a.next_request().to_vec(), b.next_request().to_vec());
        }
    }

    #[test]
    fn frames_replies() {
        let mut r = conn(1.0);
        let ok = |len, error, found| Reply::Done {
            len,
            error,
            close: false,
            found,
            status: None,
        };
        assert_eq!(r.parse_reply(b"+OK\r\n"), ok(5, None, None));
        assert_eq!(r.parse_reply(b"$-1\r\n"), ok(5, None, Some(false)));
        assert_eq!(r.parse_reply(b"$3\r\nabc\r\n+OK"), ok(9, None, Some(true)));
        assert_eq!(r.parse_reply(b"$3\r\nab"), Reply::Incomplete);
        assert_eq!(
            r.parse_reply(b"-ERR no\r\n"),
            ok(9, Some(RequestError::RespError), None)
        );
        assert_eq!(
            r.parse_reply(b"*2\r\n:1\r\n$1\r\na\r\n"),
            ok(15, None, None)
        );
        assert_eq!(r.parse_reply(b"*2\r\n:1\r\n"), Reply::Incomplete);
        assert_eq!(r.parse_reply(b"HTTP/1.1"), Reply::Incomplete);
        assert_eq!(
            r.parse_reply(b"HTTP/1.1\r\n"),
            Reply::Invalid(RequestError::RespBadReply)
        );
        assert_eq!(
            r.parse_reply(b"$4294967296\r\n"),
            Reply::Invalid(RequestError::RespBadReply)
        );
    }

    #[test]
    fn preload_sets_the_given_key() {
        let mut r = conn(1.0);
        let req = String::from_utf8(r.set_of(42).to_vec()).unwrap();
        assert_eq!(req, "*3\r\n$3\r\nSET\r\n$7\r\nkey:042\r\n$4\r\nxxxx\r\n");
    }
}
