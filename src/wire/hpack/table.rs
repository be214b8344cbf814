//! The dynamic table (RFC 7541 §2.3.2, §4): a ring of entries, newest first, each one
//! buffer holding its name then its value; evicted buffers are kept for the next insertions,
//! so a steady stream of headers allocates nothing.

use std::collections::VecDeque;

use super::tables::STATIC;

/// What each entry costs beyond its name and value (RFC 7541 §4.1).
pub const ENTRY_OVERHEAD: usize = 32;
/// Spare buffers kept for reuse (a few suffice: one per insertion between evictions).
const MAX_SPARE: usize = 8;
/// A spare buffer larger than this is dropped rather than kept.
const MAX_SPARE_BYTES: usize = 4096;

struct Entry {
    bytes: Vec<u8>,
    name_len: usize,
}

/// The decoder's dynamic table.
pub struct DynamicTable {
    /// Newest first.
    entries: VecDeque<Entry>,
    /// The sum of the entries' sizes (name + value + 32 each).
    size: usize,
    /// The size the encoder set (by a table-size update), at most the protocol's limit.
    max_size: usize,
    spare: Vec<Vec<u8>>,
}

impl DynamicTable {
    pub fn new(max_size: usize) -> Self {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max_size,
            spare: Vec::new(),
        }
    }

    /// Entries in the table.
    pub fn entries(&self) -> usize {
        self.entries.len()
    }

    /// The sum of the entries' sizes, in the RFC's accounting.
    pub fn size(&self) -> usize {
        self.size
    }

    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// Field `index` of the combined index space (1-61 static, then dynamic, newest first).
    pub fn get(&self, index: usize) -> Option<(&[u8], &[u8])> {
        if index == 0 {
            return None;
        }
        if index <= STATIC.len() {
            return Some(STATIC[index - 1]);
        }
        let e = self.entries.get(index - STATIC.len() - 1)?;
        Some(e.bytes.split_at(e.name_len))
    }

    /// A cleared buffer for an entry about to be built.
    pub fn buffer(&mut self) -> Vec<u8> {
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Adds `bytes` (name then value, the name `name_len` long) as the newest entry, evicting
    /// the oldest as needed; an entry larger than the table empties it and is not added.
    pub fn insert(&mut self, bytes: Vec<u8>, name_len: usize) {
        let size = bytes.len() + ENTRY_OVERHEAD;
        if size > self.max_size {
            self.evict_to(0);
            self.recycle(bytes);
            return;
        }
        self.evict_to(self.max_size - size);
        self.size += size;
        self.entries.push_front(Entry { bytes, name_len });
    }

    /// A table-size update: the new maximum, evicting what no longer fits.
    pub fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    fn evict_to(&mut self, size: usize) {
        while self.size > size {
            let Some(e) = self.entries.pop_back() else {
                break;
            };
            self.size -= e.bytes.len() + ENTRY_OVERHEAD;
            self.recycle(e.bytes);
        }
    }

    fn recycle(&mut self, bytes: Vec<u8>) {
        if self.spare.len() < MAX_SPARE && bytes.capacity() <= MAX_SPARE_BYTES {
            self.spare.push(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(t: &mut DynamicTable, name: &[u8], value: &[u8]) {
        let mut b = t.buffer();
        b.extend_from_slice(name);
        b.extend_from_slice(value);
        t.insert(b, name.len());
    }

    #[test]
    fn sizes_count_32_bytes_each_and_the_oldest_go_first() {
        let mut t = DynamicTable::new(100);
        entry(&mut t, b"a", b"1234"); // 37
        entry(&mut t, b"b", b"5678"); // 37
        assert_eq!((t.entries(), t.size()), (2, 74));
        assert_eq!(t.get(62), Some((&b"b"[..], &b"5678"[..])));
        assert_eq!(t.get(63), Some((&b"a"[..], &b"1234"[..])));
        assert_eq!(t.get(64), None);
        entry(&mut t, b"c", b"9"); // 34: 108 > 100 evicts a
        assert_eq!((t.entries(), t.size()), (2, 71));
        assert_eq!(t.get(63), Some((&b"b"[..], &b"5678"[..])));
        t.set_max_size(40);
        assert_eq!((t.entries(), t.size()), (1, 34));
        // Larger than the table: empties it.
        entry(&mut t, b"big", &[b'x'; 10]);
        assert_eq!((t.entries(), t.size()), (0, 0));
        assert_eq!(t.get(2), Some((&b":method"[..], &b"GET"[..])));
        assert_eq!(t.get(0), None);
    }
}
