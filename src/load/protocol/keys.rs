//! Keys shared by the key-value protocols (RESP, memcached) and the engines of the built-in
//! servers: the key space and its distribution, the per-connection generator, and the
//! zero-padded key digits patched into an encoded request in place.

use crate::load::Distribution;

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

/// One connection's two encoded requests, a lookup and a store of the same key, patched in
/// place: each request draws a key from the space and, with probability `1 - read_ratio`,
/// is the store (as redis-benchmark does; the text protocols differ only in the bytes).
#[derive(Debug, Clone)]
pub struct KvRequests {
    get: Vec<u8>,
    set: Vec<u8>,
    get_key_at: usize,
    set_key_at: usize,
    space: KeySpace,
    read_ratio: f64,
    rng: SplitMix64,
}

impl KvRequests {
    /// The key each request names, zero-padded to the space's width (`key:000`): requests
    /// encode it and [`KvRequests::new`] finds where to patch it.
    pub fn key_pattern(space: &KeySpace) -> String {
        format!("key:{}", "0".repeat(space.width))
    }

    /// Requests `get` and `set`, each naming [`KvRequests::key_pattern`] once (the first
    /// occurrence is patched), GET with probability `read_ratio`, keys drawn with `seed`.
    pub fn new(get: String, set: String, space: KeySpace, read_ratio: f64, seed: u64) -> Self {
        let key = Self::key_pattern(&space);
        let digits_at = |req: &str| req.find(&key).expect("the request names the key") + 4;
        KvRequests {
            get_key_at: digits_at(&get),
            set_key_at: digits_at(&set),
            get: get.into_bytes(),
            set: set.into_bytes(),
            space,
            read_ratio,
            rng: SplitMix64(seed),
        }
    }

    /// The next request: a lookup or a store of a freshly drawn key.
    #[inline]
    pub fn next_request(&mut self) -> &[u8] {
        let key = self.space.draw(&mut self.rng);
        let use_set = self.read_ratio < 1.0 && self.rng.next_f64() >= self.read_ratio;
        let (buf, at) = if use_set {
            (&mut self.set, self.set_key_at)
        } else {
            (&mut self.get, self.get_key_at)
        };
        write_digits(&mut buf[at..at + self.space.width], key);
        buf
    }

    /// The store of key number `key` (for `--preload`), patched in place like the others.
    pub fn set_of(&mut self, key: u64) -> &[u8] {
        let at = self.set_key_at;
        write_digits(&mut self.set[at..at + self.space.width], key);
        &self.set
    }
}

/// Writes `value` as zero-padded decimal filling `out`.
fn write_digits(out: &mut [u8], mut value: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (value % 10) as u8;
        value /= 10;
    }
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
