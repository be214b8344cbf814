//! HPACK, HTTP/2's header compression (RFC 7541): a decoder that keeps the dynamic table
//! exactly and can be fed anything (every malformed block is an [`HpackError`] saying what
//! and where; time linear in the block, no panic), and a stateless encoder (static-table
//! indices and literals without indexing, so a block can be sent any number of times).
//!
//! Why our own rather than a crate: `httlib-hpack` (used until 2026-11) panicked on one-byte
//! blocks, could loop forever and was quadratic in a block's fields, and its bit-by-bit
//! Huffman reader was a quarter of the HTTP/2 client's CPU; this one reads Huffman codes four
//! bits a step from a table built at compile time. It is checked against the hpack-test-case
//! stories of five other implementations (`tests/it/hpack_conformance.rs`).

mod decode;
mod encode;
pub mod huffman;
mod table;
mod tables;

pub use decode::{Decoder, HpackError, Problem};
pub use encode::encode_field;
pub use table::{DynamicTable, ENTRY_OVERHEAD};

/// SETTINGS_HEADER_TABLE_SIZE's initial value: the dynamic table's limit until a peer
/// announces another.
pub const DEFAULT_TABLE_SIZE: usize = 4096;
