//! The decoder: a cursor over one header block, each field handed to the caller as it is
//! decoded (borrowed from the table or the decoder's buffers: nothing is allocated per
//! field once the buffers have grown).

use std::fmt;

use super::huffman::{self, HuffmanError};
use super::table::DynamicTable;

/// The largest integer accepted (a length or an index past this is an error, not a guess).
const MAX_INTEGER: u64 = u32::MAX as u64;

/// What was wrong with a header block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// It ends inside an integer or a string.
    Truncated,
    /// An integer above 2^32 - 1.
    IntegerOverflow,
    /// An indexed field of index 0.
    IndexZero,
    /// An index past the static and dynamic tables.
    IndexPastTable {
        /// The index.
        index: usize,
        /// The dynamic table's entries at the time.
        dynamic_entries: usize,
    },
    /// A table-size update above the limit we announced (SETTINGS_HEADER_TABLE_SIZE).
    TableSizeAboveLimit {
        /// The size asked for.
        size: usize,
        /// Our limit.
        limit: usize,
    },
    /// A table-size update after a field (only allowed at the start of a block).
    TableSizeUpdateAfterField,
    /// A Huffman string with EOS or bad padding.
    Huffman(HuffmanError),
}

/// A malformed header block: what, and at which byte of the block (the start of the
/// representation or string at fault). A COMPRESSION_ERROR in HTTP/2's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HpackError {
    /// The offset in the block.
    pub at: usize,
    /// What was wrong.
    pub problem: Problem,
}

impl fmt::Display for HpackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.problem {
            Problem::Truncated => write!(f, "the block ends inside a field"),
            Problem::IntegerOverflow => write!(f, "an integer above 2^32 - 1"),
            Problem::IndexZero => write!(f, "an indexed field of index 0"),
            Problem::IndexPastTable {
                index,
                dynamic_entries,
            } => write!(
                f,
                "index {index} past the table (61 static + {dynamic_entries} dynamic entries)"
            ),
            Problem::TableSizeAboveLimit { size, limit } => write!(
                f,
                "a table-size update to {size} bytes, above the {limit} announced"
            ),
            Problem::TableSizeUpdateAfterField => {
                write!(f, "a table-size update after the block's first field")
            }
            Problem::Huffman(HuffmanError::Eos) => write!(f, "a Huffman string holding EOS"),
            Problem::Huffman(HuffmanError::Padding) => write!(
                f,
                "a Huffman string padded with more than 7 bits or not with ones"
            ),
        }?;
        write!(f, " at byte {} of the header block", self.at)
    }
}

impl std::error::Error for HpackError {}

/// One connection's (one direction's) HPACK decoding state.
pub struct Decoder {
    table: DynamicTable,
    /// The largest table size the encoder may set: what we announced.
    limit: usize,
    /// A literal field's name and value (reused).
    name: Vec<u8>,
    value: Vec<u8>,
}

impl Decoder {
    /// A decoder whose table may grow to `limit` bytes (our SETTINGS_HEADER_TABLE_SIZE); it
    /// starts at that size, as RFC 7541 §4.2 says.
    pub fn new(limit: usize) -> Self {
        Decoder {
            table: DynamicTable::new(limit),
            limit,
            name: Vec::new(),
            value: Vec::new(),
        }
    }

    /// A new SETTINGS_HEADER_TABLE_SIZE took effect: the limit of the next updates.
    pub fn set_limit(&mut self, limit: usize) {
        self.limit = limit;
    }

    /// The dynamic table.
    pub fn table(&self) -> &DynamicTable {
        &self.table
    }

    /// Decodes one whole header block, calling `field(name, value)` for each field in order.
    /// After an error the table may hold part of the block: the connection is to be dropped.
    pub fn decode(
        &mut self,
        block: &[u8],
        mut field: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), HpackError> {
        let mut cur = Cursor { buf: block, at: 0 };
        let mut fields = false;
        while let Some(&first) = block.get(cur.at) {
            let start = cur.at;
            if first & 0x80 != 0 {
                // Indexed field.
                let index = cur.integer(7)?;
                let (n, v) = lookup(&self.table, index, start)?;
                field(n, v);
            } else if first & 0x40 != 0 {
                // Literal with incremental indexing.
                let index = cur.integer(6)?;
                let mut entry = self.table.buffer();
                if index == 0 {
                    cur.string(&mut entry)?;
                } else {
                    entry.extend_from_slice(lookup(&self.table, index, start)?.0);
                }
                let name_len = entry.len();
                cur.string(&mut entry)?;
                field(&entry[..name_len], &entry[name_len..]);
                self.table.insert(entry, name_len);
            } else if first & 0x20 != 0 {
                // Dynamic table size update: only before the block's first field.
                if fields {
                    return Err(error(start, Problem::TableSizeUpdateAfterField));
                }
                let size = cur.integer(5)?;
                if size > self.limit {
                    let limit = self.limit;
                    return Err(error(start, Problem::TableSizeAboveLimit { size, limit }));
                }
                self.table.set_max_size(size);
                continue;
            } else {
                // Literal without indexing (0000) or never indexed (0001).
                let index = cur.integer(4)?;
                self.value.clear();
                if index == 0 {
                    self.name.clear();
                    cur.string(&mut self.name)?;
                    cur.string(&mut self.value)?;
                    field(&self.name, &self.value);
                } else {
                    let name = lookup(&self.table, index, start)?.0;
                    cur.string(&mut self.value)?;
                    field(name, &self.value);
                }
            }
            fields = true;
        }
        Ok(())
    }
}

/// Field `index` of the tables, or the error saying why there is none.
fn lookup(table: &DynamicTable, index: usize, at: usize) -> Result<(&[u8], &[u8]), HpackError> {
    if index == 0 {
        return Err(error(at, Problem::IndexZero));
    }
    table.get(index).ok_or_else(|| {
        let dynamic_entries = table.entries();
        error(
            at,
            Problem::IndexPastTable {
                index,
                dynamic_entries,
            },
        )
    })
}

fn error(at: usize, problem: Problem) -> HpackError {
    HpackError { at, problem }
}

/// A position in a block.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn byte(&mut self, start: usize) -> Result<u8, HpackError> {
        let b = *self
            .buf
            .get(self.at)
            .ok_or(error(start, Problem::Truncated))?;
        self.at += 1;
        Ok(b)
    }

    /// An integer with a `prefix_bits`-bit prefix (RFC 7541 §5.1).
    fn integer(&mut self, prefix_bits: u32) -> Result<usize, HpackError> {
        let start = self.at;
        let max = (1u8 << prefix_bits) - 1;
        let first = self.byte(start)? & max;
        if first < max {
            return Ok(first as usize);
        }
        let mut value = max as u64;
        let mut shift = 0;
        loop {
            let b = self.byte(start)?;
            value += ((b & 0x7f) as u64) << shift;
            if value > MAX_INTEGER {
                return Err(error(start, Problem::IntegerOverflow));
            }
            if b & 0x80 == 0 {
                return Ok(value as usize);
            }
            shift += 7;
            // Past 2^32 whatever follows (zero continuation bytes included).
            if shift > 28 {
                return Err(error(start, Problem::IntegerOverflow));
            }
        }
    }

    /// A string literal (RFC 7541 §5.2), appended to `out`.
    fn string(&mut self, out: &mut Vec<u8>) -> Result<(), HpackError> {
        let start = self.at;
        let huffman = self.buf.get(start).is_some_and(|b| b & 0x80 != 0);
        let len = self.integer(7)?;
        let bytes = self
            .buf
            .get(self.at..)
            .and_then(|rest| rest.get(..len))
            .ok_or(error(start, Problem::Truncated))?;
        self.at += len;
        if huffman {
            huffman::decode(bytes, out).map_err(|e| error(start, Problem::Huffman(e)))
        } else {
            out.extend_from_slice(bytes);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn fields(d: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, HpackError> {
        let mut out = Vec::new();
        d.decode(block, |n, v| {
            out.push((
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ))
        })?;
        Ok(out)
    }

    fn problem(block: &[u8]) -> Problem {
        fields(&mut Decoder::new(4096), block).unwrap_err().problem
    }

    /// RFC 7541 C.6: three responses with Huffman, a 256-byte table, evictions.
    #[test]
    fn rfc7541_c6_responses_with_evictions() {
        let mut d = Decoder::new(256);
        let first = fields(
            &mut d,
            &hex(
                "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0
                  82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
            ),
        )
        .unwrap();
        assert_eq!(first[0], (":status".into(), "302".into()));
        assert_eq!(
            first[3],
            ("location".into(), "https://www.example.com".into())
        );
        assert_eq!(d.table().size(), 222);
        let second = fields(&mut d, &hex("4883 640e ff c1 c0 bf")).unwrap();
        assert_eq!(second[0], (":status".into(), "307".into()));
        assert_eq!(second[2].0, "date");
        assert_eq!(d.table().size(), 222);
        let third = fields(
            &mut d,
            &hex(
                "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
                  77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
                  9587 3160 65c0 03ed 4ee5 b106 3d50 07",
            ),
        )
        .unwrap();
        assert_eq!(
            third[5].1,
            "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
        );
        assert_eq!((d.table().entries(), d.table().size()), (3, 215));
    }

    #[test]
    fn malformed_blocks_are_errors_not_panics() {
        // The three blocks that panicked httlib-hpack.
        assert_eq!(problem(&[0x00]), Problem::Truncated);
        assert_eq!(problem(&[0x0f]), Problem::Truncated);
        assert_eq!(problem(&[0xff, 0x80]), Problem::Truncated);
        assert_eq!(problem(&[0x80]), Problem::IndexZero);
        assert!(matches!(
            problem(&[0xbe]),
            Problem::IndexPastTable { index: 62, .. }
        ));
        assert_eq!(
            problem(&[0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            Problem::IntegerOverflow
        );
        // Zero continuation bytes forever are still an overflow, not a loop.
        assert_eq!(
            problem(&[0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80]),
            Problem::IntegerOverflow
        );
        // A string longer than the block.
        assert_eq!(problem(&[0x00, 0x05, b'a']), Problem::Truncated);
        assert_eq!(problem(&[0x40, 0x01, b'a', 0x7f]), Problem::Truncated);
        // Huffman: 8 bits of padding; EOS.
        assert_eq!(
            problem(&[0x00, 0x81, 0xff, 0x00]),
            Problem::Huffman(HuffmanError::Padding)
        );
        assert_eq!(
            problem(&[0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x00]),
            Problem::Huffman(HuffmanError::Eos)
        );
        // Table-size updates: above the limit, after a field.
        assert_eq!(
            problem(&[0x3f, 0xe2, 0x1f]),
            Problem::TableSizeAboveLimit {
                size: 4097,
                limit: 4096
            }
        );
        assert_eq!(problem(&[0x88, 0x20]), Problem::TableSizeUpdateAfterField);
        let e = fields(&mut Decoder::new(4096), &[0x88, 0x20]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a table-size update after the block's first field at byte 1 of the header block"
        );
    }

    #[test]
    fn table_size_updates_at_the_start_evict() {
        let mut d = Decoder::new(4096);
        fields(&mut d, &[0x40, 0x01, b'a', 0x01, b'b']).unwrap();
        assert_eq!(d.table().size(), 34);
        // Two updates (0 then 4096) at a block's start: the table is emptied.
        let got = fields(&mut d, &[0x20, 0x3f, 0xe1, 0x1f, 0x88]).unwrap();
        assert_eq!(got, vec![(":status".into(), "200".into())]);
        assert_eq!((d.table().entries(), d.table().max_size()), (0, 4096));
        assert!(fields(&mut d, &[0xbe]).is_err(), "entry 62 was evicted");
    }
}
