//! perf profiles: folding, thread merging, coalescing, flame graphs, diffs.

pub mod cli;
