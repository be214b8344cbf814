//! Fuzzes the HPACK decoder: blocks (each a 2-byte big-endian length then its bytes, the rest
//! one last block) through one decoder, as a connection's header blocks. No input may panic
//! or take more than linear time; the table keeps within its size; every field decoded
//! encodes (statelessly) to a block that decodes back to it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::wire::hpack::{encode_field, Decoder, DEFAULT_TABLE_SIZE};

fuzz_target!(|input: &[u8]| {
    let mut decoder = Decoder::new(DEFAULT_TABLE_SIZE);
    let mut fields = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let block = match rest {
            [hi, lo, tail @ ..] if usize::from(*hi) << 8 | usize::from(*lo) <= tail.len() => {
                let (block, tail) = tail.split_at(usize::from(*hi) << 8 | usize::from(*lo));
                rest = tail;
                block
            }
            _ => std::mem::take(&mut rest),
        };
        fields.clear();
        let ok = decoder
            .decode(block, |n, v| fields.push((n.to_vec(), v.to_vec())))
            .is_ok();
        let table = decoder.table();
        assert!(table.size() <= table.max_size() && table.max_size() <= DEFAULT_TABLE_SIZE);
        if !ok {
            return;
        }
        let mut again = Decoder::new(DEFAULT_TABLE_SIZE);
        for (n, v) in &fields {
            let mut one = Vec::new();
            encode_field(n, v, &mut one);
            let mut got = Vec::new();
            again
                .decode(&one, |n, v| got.push((n.to_vec(), v.to_vec())))
                .expect("our own block decodes");
            assert_eq!(got, [(n.clone(), v.clone())]);
        }
    }
});
