//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B): a table-driven decoder that reads four
//! bits a step, and an encoder.
//!
//! The decoder's table is built at compile time (a `const fn`) from the code table: its
//! states are the 256 inner nodes of the code's tree, and each (state, nibble) entry says the
//! state after those four bits, the symbol completed on the way if any (codes are at least 5
//! bits long, so at most one), whether EOS was reached (an error), and whether the new state
//! may end a string (the bits since the last symbol are at most 7 ones: valid padding).

use super::tables::HUFFMAN;

const EOS: u16 = 256;
/// A child in the tree under construction: an inner node's index, or a leaf's symbol.
const LEAF: u16 = 0x8000;

/// The tree: each inner node's two children (0 = none yet; the root, 0, is nobody's child).
const fn tree() -> [[u16; 2]; 256] {
    let mut nodes = [[0u16; 2]; 256];
    let mut next_free: u16 = 1;
    let mut sym = 0;
    while sym < HUFFMAN.len() {
        let (code, len) = HUFFMAN[sym];
        let mut node = 0usize;
        let mut bit = len;
        while bit > 1 {
            bit -= 1;
            let b = ((code >> bit) & 1) as usize;
            if nodes[node][b] == 0 {
                nodes[node][b] = next_free;
                next_free += 1;
            }
            node = nodes[node][b] as usize;
        }
        nodes[node][(code & 1) as usize] = LEAF | sym as u16;
        sym += 1;
    }
    nodes
}

/// Entry flags: a symbol was completed (in bits 8-15), EOS was met, the new state may end.
const EMIT: u32 = 1 << 16;
const FAIL: u32 = 1 << 17;
const ACCEPT: u32 = 1 << 18;

/// The decoder's table: for each state and nibble, the next state (bits 0-7), the symbol
/// (bits 8-15) and the flags.
const fn decode_table() -> [[u32; 16]; 256] {
    let nodes = tree();
    // The nodes that may end a string: the root and those reached by at most 7 one bits.
    let mut accept = [false; 256];
    accept[0] = true;
    let mut node = 0usize;
    let mut depth = 0;
    while depth < 7 {
        node = nodes[node][1] as usize;
        accept[node] = true;
        depth += 1;
    }
    let mut table = [[0u32; 16]; 256];
    let mut state = 0;
    while state < 256 {
        let mut nibble = 0;
        while nibble < 16 {
            let mut cur = state;
            let mut entry = 0u32;
            let mut bit = 4;
            while bit > 0 {
                bit -= 1;
                let child = nodes[cur][(nibble >> bit) & 1];
                if child & LEAF == 0 {
                    cur = child as usize;
                    continue;
                }
                let sym = child & !LEAF;
                if sym == EOS {
                    entry |= FAIL;
                }
                entry |= EMIT | ((sym as u32 & 0xff) << 8);
                cur = 0;
            }
            if accept[cur] {
                entry |= ACCEPT;
            }
            table[state][nibble] = entry | cur as u32;
            nibble += 1;
        }
        state += 1;
    }
    table
}

static DECODE: [[u32; 16]; 256] = decode_table();

/// What makes a Huffman string invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HuffmanError {
    /// It contains the EOS symbol.
    Eos,
    /// Its padding is longer than 7 bits or not all ones.
    Padding,
}

/// Decodes `src`, appending the text to `out`.
pub fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), HuffmanError> {
    // The shortest code is 5 bits.
    out.reserve(src.len() * 8 / 5);
    let mut state = 0usize;
    let mut entry = ACCEPT;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0xf] {
            entry = DECODE[state][nibble as usize];
            if entry & (EMIT | FAIL) != 0 {
                if entry & FAIL != 0 {
                    return Err(HuffmanError::Eos);
                }
                out.push((entry >> 8) as u8);
            }
            state = (entry & 0xff) as usize;
        }
    }
    if entry & ACCEPT == 0 {
        return Err(HuffmanError::Padding);
    }
    Ok(())
}

/// The length of `src` Huffman-encoded, in bytes.
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src.iter().map(|&b| HUFFMAN[b as usize].1 as usize).sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-encoded to `out`, padded with ones.
pub fn encode(src: &[u8], out: &mut Vec<u8>) {
    let mut acc: u64 = 0;
    let mut bits = 0u32;
    for &b in src {
        let (code, len) = HUFFMAN[b as usize];
        acc = (acc << len) | code as u64;
        bits += len as u32;
        while bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(((acc << (8 - bits)) as u8) | (0xff >> bits));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn rfc7541_appendix_c4_strings_decode_and_encode() {
        for (wire, text) in [
            ("f1e3c2e5f23a6ba0ab90f4ff", "www.example.com"),
            ("a8eb10649cbf", "no-cache"),
            ("25a849e95ba97d7f", "custom-key"),
            ("25a849e95bb8e8b4bf", "custom-value"),
            ("6402", "302"),
            ("aec3771a4b", "private"),
            (
                "d07abe941054d444a8200595040b8166e082a62d1bff",
                "Mon, 21 Oct 2013 20:13:21 GMT",
            ),
        ] {
            let mut out = Vec::new();
            decode(&hex(wire), &mut out).unwrap();
            assert_eq!(out, text.as_bytes());
            let mut enc = Vec::new();
            encode(text.as_bytes(), &mut enc);
            assert_eq!(enc, hex(wire), "{text}");
            assert_eq!(encoded_len(text.as_bytes()), enc.len());
        }
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let mut enc = Vec::new();
        encode(&all, &mut enc);
        let mut out = Vec::new();
        decode(&enc, &mut out).unwrap();
        assert_eq!(out, all);
    }

    #[test]
    fn bad_padding_and_eos_are_refused() {
        // "0" is 00000 (5 bits): padded with 000 rather than ones.
        assert_eq!(decode(&[0x00], &mut Vec::new()), Err(HuffmanError::Padding));
        // "0" then 11 ones: padding of more than 7 bits.
        assert_eq!(
            decode(&[0x07, 0xff], &mut Vec::new()),
            Err(HuffmanError::Padding)
        );
        // A whole byte of ones alone: 8 bits of padding.
        assert_eq!(decode(&[0xff], &mut Vec::new()), Err(HuffmanError::Padding));
        // EOS (30 ones) then padding.
        assert_eq!(
            decode(&[0xff, 0xff, 0xff, 0xff], &mut Vec::new()),
            Err(HuffmanError::Eos)
        );
        // "0" then 3 ones: fine.
        let mut out = Vec::new();
        decode(&[0x07], &mut out).unwrap();
        assert_eq!(out, b"0");
        decode(&[], &mut out).unwrap();
    }
}
