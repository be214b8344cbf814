//! The hash table: a fixed array of buckets, each behind its own lock, so workers touching
//! different buckets never wait for each other; and `serve`, which answers one request from it.

use std::sync::Mutex;

use crate::wire::shmkv::msg::{
    Request, Response, OP_GET, OP_SET, ST_BAD_REQUEST, ST_NOT_FOUND, ST_OK,
};

/// A byte-key, byte-value hash table with one lock per bucket.
pub struct Table {
    buckets: Box<[Mutex<Vec<Entry>>]>,
    mask: usize,
}

struct Entry {
    key: Box<[u8]>,
    value: Vec<u8>,
}

impl Table {
    /// A table of at least `buckets` buckets (rounded up to a power of two).
    pub fn new(buckets: usize) -> Self {
        let n = buckets.max(1).next_power_of_two();
        Table {
            buckets: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            mask: n - 1,
        }
    }

    fn bucket(&self, key: &[u8]) -> std::sync::MutexGuard<'_, Vec<Entry>> {
        let i = fnv1a(key) as usize & self.mask;
        // A worker that panicked cannot leave an entry half-written: values are replaced whole.
        self.buckets[i].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Copies the value of `key` into `out`; its length, or `None` when absent.
    pub fn get(&self, key: &[u8], out: &mut [u8]) -> Option<usize> {
        let bucket = self.bucket(key);
        let e = bucket.iter().find(|e| &*e.key == key)?;
        let n = e.value.len().min(out.len());
        out[..n].copy_from_slice(&e.value[..n]);
        Some(n)
    }

    /// Stores `value` under `key`, reusing the old value's allocation.
    pub fn set(&self, key: &[u8], value: &[u8]) {
        let mut bucket = self.bucket(key);
        match bucket.iter_mut().find(|e| &*e.key == key) {
            Some(e) => {
                e.value.clear();
                e.value.extend_from_slice(value);
            }
            None => bucket.push(Entry {
                key: key.into(),
                value: value.to_vec(),
            }),
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Answers `req` from `table` into `resp` (status, value, and the routing fields).
pub fn serve(table: &Table, req: &Request, resp: &mut Response) {
    resp.client = req.client;
    resp.seq = req.seq;
    resp.value_len = 0;
    let Some(key) = req.key() else {
        resp.status = ST_BAD_REQUEST;
        return;
    };
    resp.status = match req.op {
        OP_GET => match table.get(key, &mut resp.value) {
            Some(n) => {
                resp.value_len = n as u32;
                ST_OK
            }
            None => ST_NOT_FOUND,
        },
        OP_SET => {
            table.set(key, &req.value[..req.value_len as usize]);
            ST_OK
        }
        _ => ST_BAD_REQUEST,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::shmkv::msg::{boxed, MAX_KEY};

    #[test]
    fn keys_in_one_bucket_stay_apart() {
        let t = Table::new(1);
        t.set(b"a", b"1");
        t.set(b"b", b"22");
        t.set(b"a", b"333");
        let mut out = [0u8; 8];
        assert_eq!(t.get(b"a", &mut out), Some(3));
        assert_eq!(&out[..3], b"333");
        assert_eq!(t.get(b"b", &mut out), Some(2));
        assert_eq!(t.get(b"c", &mut out), None);
    }

    #[test]
    fn buckets_round_up() {
        assert_eq!(Table::new(1000).buckets.len(), 1024);
    }

    #[test]
    fn set_then_get_and_bad_lengths() {
        let table = Table::new(16);
        let (mut req, mut resp) = (boxed::<Request>(), boxed::<Response>());
        req.fill(OP_GET, b"k", b"", 3, 9);
        serve(&table, &req, &mut resp);
        assert_eq!((resp.status, resp.client, resp.seq), (ST_NOT_FOUND, 3, 9));
        req.fill(OP_SET, b"k", b"hello", 3, 10);
        serve(&table, &req, &mut resp);
        assert_eq!(resp.status, ST_OK);
        req.fill(OP_GET, b"k", b"", 3, 11);
        serve(&table, &req, &mut resp);
        assert_eq!(&resp.value[..resp.value_len as usize], b"hello");
        req.key_len = MAX_KEY as u32 + 1;
        serve(&table, &req, &mut resp);
        assert_eq!(resp.status, ST_BAD_REQUEST);
        req.fill(7, b"k", b"", 3, 12);
        serve(&table, &req, &mut resp);
        assert_eq!(resp.status, ST_BAD_REQUEST);
    }
}
