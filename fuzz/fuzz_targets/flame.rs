//! Fuzzes the perf script / folded parser and every transform: no input may panic, and the
//! transforms must keep the total weight (the split must partition it).
//!
//! cargo +nightly fuzz run flame fuzz/corpus/flame -- -max_total_time=300
//! Seed corpus: the checked-in capture, tests/data/flame/workers.perf-script.gz, unpacked.
#![no_main]

use std::sync::Once;

use libfuzzer_sys::fuzz_target;
use stairbench::profile::input::load_bytes;
use stairbench::profile::render::{diff_stacks, write_flame_graph, GraphLabels};
use stairbench::profile::table::{share_deltas, top_functions};
use stairbench::profile::{speedscope, FoldOptions, Folded, Side, Transforms};

static QUIET: Once = Once::new();

fuzz_target!(|input: &[u8]| {
    // The folder catches inferno's own panics and counts the sample as garbled; libfuzzer's
    // hook would abort before that, so keep the default unwinding (an escaping panic still
    // reaches libfuzzer's catch and is reported as a crash).
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    for opts in [
        FoldOptions::default(),
        FoldOptions { annotate_kernel: true, include_tid: true, ..FoldOptions::default() },
    ] {
        let Ok(loaded) = load_bytes(input, opts) else {
            continue;
        };
        check(&loaded.folded);
    }
});

fn check(folded: &Folded) {
    let total = folded.total();
    let all = Transforms {
        merge_threads: true,
        pid_suffix: true,
        demangle: true,
        coalesce: true,
        rename: vec!["[0-9]+=N".parse().expect("valid rule")],
        ..Transforms::default()
    };
    let out = all.apply(folded);
    assert_eq!(out.total(), total);
    let side = |s| Transforms { split: Some(s), ..Transforms::default() }.apply(folded).total();
    assert_eq!(side(Side::User) + side(Side::Kernel), total);
    assert_eq!(Folded::parse(&out.to_text()).folded.total(), total);
    let _ = top_functions(folded, 10);
    assert!(share_deltas(folded, folded, 0).iter().all(|d| d.delta_points == 0.0));
    let diff = diff_stacks(folded, &out);
    assert!(diff.stacks.values().map(|(_, b)| b).sum::<u64>() == total);
    let _ = speedscope::to_json(&out, "fuzz", None);
    let mut svg = Vec::new();
    let _ = write_flame_graph(&out, &GraphLabels::new("fuzz", None), &mut svg);
}
