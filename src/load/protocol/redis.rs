//! RESP commands (GET/SET) and reply framing.
//!
//! Each connection keeps one encoded GET and one encoded SET and patches the key digits in
//! place (as redis-benchmark does), drawing keys from its own deterministic generator seeded
//! with `seed * 1000 + connection` (seed 004's convention).

use super::{Protocol, Reply};
use crate::load::Distribution;

/// Largest bulk string accepted in a reply.
const MAX_BULK_BYTES: i64 = 512 * 1024 * 1024;
/// Deepest array nesting accepted in a reply.
const MAX_DEPTH: usize = 8;

/// A key space that cannot be drawn from.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum KeySpaceError {
    /// No key at all.
    #[error("--keys must be at least 1")]
    NoKeys,
    /// A Zipf exponent outside (0, 1).
    #[error("zipf theta must be between 0 and 1 (exclusive), got {0}")]
    Theta(f64),
}

/// Key choice shared by all connections (the Zipf constants are computed once).
#[derive(Debug, Clone)]
pub struct KeySpace {
    keys: u64,
    width: usize,
    zipf: Option<Zipf>,
}

impl KeySpace {
    /// A key space of `keys` keys drawn by `distribution`.
    pub fn new(keys: u64, distribution: Distribution) -> Result<Self, KeySpaceError> {
        if keys == 0 {
            return Err(KeySpaceError::NoKeys);
        }
        let zipf = match distribution {
            Distribution::Uniform => None,
            Distribution::Zipf(theta) => Some(Zipf::new(keys, theta)?),
        };
        let width = (keys - 1).to_string().len();
        Ok(KeySpace { keys, width, zipf })
    }

    /// Number of keys: they are `key:0` to `key:N-1`, zero-padded to one width.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Digits of a key's number (`keys - 1` written out; smaller numbers are zero-padded).
    pub fn width(&self) -> usize {
        self.width
    }

    /// The next key number, drawn with `rng`.
    pub fn draw(&self, rng: &mut SplitMix64) -> u64 {
        match &self.zipf {
            None => rng.next_u64() % self.keys,
            Some(z) => z.draw(rng.next_f64()),
        }
    }
}

/// One connection's RESP requests and reply parser.
pub struct Redis {
    get: Vec<u8>,
    set: Vec<u8>,
    get_key_at: usize,
    set_key_at: usize,
    space: KeySpace,
    read_ratio: f64,
    rng: SplitMix64,
    use_set: bool,
}

impl Redis {
    /// A connection drawing from `space`, GET with probability `read_ratio`, SET values of
    /// `value_size` bytes, its generator seeded with `seed`.
    pub fn new(space: KeySpace, read_ratio: f64, value_size: usize, seed: u64) -> Self {
        let key = format!("key:{}", "0".repeat(space.width));
        let get = format!("*2\r\n$3\r\nGET\r\n${}\r\n{key}\r\n", key.len());
        let get_key_at = get.len() - 2 - space.width;
        let mut set = format!(
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${value_size}\r\n",
            key.len()
        );
        let set_key_at = set.len() - 2 - value_size.to_string().len() - 1 - 2 - space.width;
        set.push_str(&"x".repeat(value_size));
        set.push_str("\r\n");
        Redis {
            get: get.into_bytes(),
            set: set.into_bytes(),
            get_key_at,
            set_key_at,
            space,
            read_ratio,
            rng: SplitMix64(seed),
            use_set: false,
        }
    }
}

impl Redis {
    /// The SET of key number `key` (for `--preload`), patched in place like the others.
    pub fn set_of(&mut self, key: u64) -> &[u8] {
        let at = self.set_key_at;
        write_digits(&mut self.set[at..at + self.space.width], key);
        &self.set
    }
}

impl Protocol for Redis {
    fn next_request(&mut self) -> &[u8] {
        let key = self.space.draw(&mut self.rng);
        self.use_set = self.read_ratio < 1.0 && self.rng.next_f64() >= self.read_ratio;
        let (buf, at) = if self.use_set {
            (&mut self.set, self.set_key_at)
        } else {
            (&mut self.get, self.get_key_at)
        };
        write_digits(&mut buf[at..at + self.space.width], key);
        buf
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
            error: (kind == Value::Error).then_some("resp_error"),
            close: false,
            found: match kind {
                Value::Bulk => Some(true),
                Value::Nil => Some(false),
                _ => None,
            },
        },
        Ok(None) => Reply::Incomplete,
        Err(kind) => Reply::Invalid(kind),
    }
}

/// Writes `value` as zero-padded decimal filling `out`.
fn write_digits(out: &mut [u8], mut value: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (value % 10) as u8;
        value /= 10;
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
) -> Result<Option<(usize, Value)>, &'static str> {
    if depth > MAX_DEPTH {
        return Err("resp_bad_reply");
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
                return Err("resp_bad_reply");
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
        _ => Err("resp_bad_reply"),
    }
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_int(digits: &[u8]) -> Result<i64, &'static str> {
    std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or("resp_bad_reply")
}

/// A small, fast, deterministic generator (SplitMix64); good enough to pick keys.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform float in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf-distributed ranks by Gray et al.'s method (as YCSB): O(n) set-up once, O(1) draws.
#[derive(Debug, Clone)]
struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    fn new(n: u64, theta: f64) -> Result<Self, KeySpaceError> {
        if !(theta > 0.0 && theta < 1.0) {
            return Err(KeySpaceError::Theta(theta));
        }
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Ok(Zipf {
            n,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        })
    }

    fn draw(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let rank = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        rank.min(self.n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        assert_eq!(r.parse_reply(b"+OK\r\n"), ok(5, None, None));
        assert_eq!(r.parse_reply(b"$-1\r\n"), ok(5, None, Some(false)));
        assert_eq!(r.parse_reply(b"$3\r\nabc\r\n+OK"), ok(9, None, Some(true)));
        assert_eq!(r.parse_reply(b"$3\r\nab"), Reply::Incomplete);
        assert_eq!(
            r.parse_reply(b"-ERR no\r\n"),
            ok(9, Some("resp_error"), None)
        );
        assert_eq!(
            r.parse_reply(b"*2\r\n:1\r\n$1\r\na\r\n"),
            ok(15, None, None)
        );
        assert_eq!(r.parse_reply(b"*2\r\n:1\r\n"), Reply::Incomplete);
        assert_eq!(r.parse_reply(b"HTTP/1.1"), Reply::Incomplete);
        assert_eq!(
            r.parse_reply(b"HTTP/1.1\r\n"),
            Reply::Invalid("resp_bad_reply")
        );
        assert_eq!(
            r.parse_reply(b"$4294967296\r\n"),
            Reply::Invalid("resp_bad_reply")
        );
    }

    #[test]
    fn preload_sets_the_given_key() {
        let mut r = conn(1.0);
        let req = String::from_utf8(r.set_of(42).to_vec()).unwrap();
        assert_eq!(req, "*3\r\n$3\r\nSET\r\n$7\r\nkey:042\r\n$4\r\nxxxx\r\n");
    }

    #[test]
    fn zipf_prefers_low_ranks() {
        let space = KeySpace::new(1000, Distribution::Zipf(0.99)).unwrap();
        let mut rng = SplitMix64(1);
        let draws: Vec<u64> = (0..20_000).map(|_| space.draw(&mut rng)).collect();
        assert!(draws.iter().all(|&k| k < 1000));
        let top10 = draws.iter().filter(|&&k| k < 10).count();
        // With theta 0.99 over 1000 keys the first 10 ranks carry about 39% of draws.
        assert!(top10 > 6_000 && top10 < 10_000, "{top10}");
        assert!(KeySpace::new(10, Distribution::Zipf(1.5)).is_err());
    }
}
