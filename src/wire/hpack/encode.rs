//! The encoder: one field at a time, stateless (no dynamic table), so a request's block is
//! encoded once and sent as it is on any connection.

use super::huffman;
use super::tables::STATIC;

/// Appends one field: the static table's index when it holds the field whole, else a literal
/// without indexing (its name by static index when the table has the name); each string
/// Huffman-coded when that is shorter.
pub fn encode_field(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    let mut name_index = 0;
    for (i, (n, v)) in STATIC.iter().enumerate() {
        if *n == name {
            if *v == value {
                integer(i + 1, 7, 0x80, out);
                return;
            }
            if name_index == 0 {
                name_index = i + 1;
            }
        }
    }
    // Literal without indexing: 0000 and a 4-bit name index (0: the name follows).
    integer(name_index, 4, 0x00, out);
    if name_index == 0 {
        string(name, out);
    }
    string(value, out);
}

/// An integer with an N-bit prefix (RFC 7541 §5.1), `flags` in the first byte's high bits.
fn integer(mut value: usize, prefix_bits: u32, flags: u8, out: &mut Vec<u8>) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    value -= max;
    while value >= 0x80 {
        out.push(0x80 | (value & 0x7f) as u8);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A string literal (RFC 7541 §5.2): Huffman-coded when strictly shorter.
fn string(s: &[u8], out: &mut Vec<u8>) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        integer(coded, 7, 0x80, out);
        huffman::encode(s, out);
    } else {
        integer(s.len(), 7, 0x00, out);
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_fields_are_indices_and_others_literals() {
        let mut out = Vec::new();
        encode_field(b":method", b"GET", &mut out);
        assert_eq!(out, [0x82]);
        out.clear();
        // :path (index 4) with another value; "/a" is not shorter in Huffman.
        encode_field(b":path", b"/a", &mut out);
        assert_eq!(out, [0x04, 0x02, b'/', b'a']);
        out.clear();
        // RFC 7541 C.2.2's field as a literal without indexing.
        encode_field(b":path", b"/sample/path", &mut out);
        assert_eq!(out[0], 0x04);
        out.clear();
        integer(1337, 5, 0, &mut out);
        assert_eq!(out, [31, 154, 10], "RFC 7541 C.1.2");
    }
}
