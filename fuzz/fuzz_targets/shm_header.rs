//! Fuzzes the shared-memory region's header check (the bytes a client reads from a region it
//! attaches to, which any local process may have written): no input may panic, and a header
//! it accepts describes this build's layout of exactly the region's size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stairbench::wire::shmkv::region::{check_header, HEADER_FIXED_BYTES};

fuzz_target!(|input: &[u8]| {
    let _ = check_header(input, input.len(), "fuzz");
    if input.len() < HEADER_FIXED_BYTES {
        return;
    }
    // The size the header states, so inputs reach the checks after the size's.
    let stated = u64::from_ne_bytes(input[24..32].try_into().expect("8 bytes"));
    let Ok(region_len) = usize::try_from(stated) else {
        return;
    };
    if let Ok(arch) = check_header(input, region_len, "fuzz") {
        let workers = u32::from_ne_bytes(input[16..20].try_into().expect("4 bytes"));
        assert_eq!(arch.layout(workers as usize).1, region_len);
    }
});
