//! The run directory's files and their types (layer 2: imports only the leaf modules).
//!
//! A run directory holds `steps.jsonl` ([`steps`]), `profiles.jsonl` ([`profiles`]), one
//! HdrHistogram interval log per step ([`hlog`]) and one per-second CSV per step; [`rundir`]
//! writes them as a run goes; [`run`] reads them back once, typed, into `RunData`; [`overhead`] is what other hosts cost a run. The load's own result types ([`load`]) live here too, because
//! the step lines and the per-second files are made of them.

pub mod environment;
pub mod figures;
pub mod hist_b64;
pub mod history;
pub mod hlog;
pub mod load;
pub mod next_hop;
pub mod observed;
pub mod overhead;
pub mod profiles;
pub mod run;
pub mod rundir;
pub mod steps;
pub mod use_cpu;
pub mod use_io;
