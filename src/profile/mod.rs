//! perf profiles: folding, thread merging, coalescing, flame graphs, diffs.
//!
//! The analyses this crate automates read CPU profiles by hand: `perf script | stackcollapse |
//! sed 's/reactor-[0-9]+/reactor/' | coalesce.py | flamegraph.pl`. Here that chain is a library:
//! [`input`] reads perf script text (plain or gzip), perf.data or folded stacks into a
//! [`Folded`] set (inferno folds, so the stacks equal `inferno-collapse-perf`'s), [`transform`]
//! merges threads, coalesces towers and splits user from kernel, [`render`] draws flame graphs
//! and differential graphs, [`table`] lists function shares, [`speedscope`] exports,
//! [`capture`] runs `perf record` around a process for the runner and `stairbench profile`, and
//! [`passes`] plans the runner's profile passes (which levels, whose processes, their records).

pub mod capture;
pub mod categories;
pub mod folded;
pub mod input;
pub mod jvm;
pub mod passes;
pub mod perf_script;
pub mod render;
pub mod speedscope;
pub mod table;
pub mod transform;

use std::path::PathBuf;

pub use capture::{capture, diff_dirs, ProfileSummary};
pub use folded::Folded;
pub use input::{load, InputFormat, InputReport, Loaded};
pub use perf_script::FoldOptions;
pub use transform::{Side, Transforms};

/// What can go wrong while reading, folding, drawing or capturing a profile.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The input had no bytes at all.
    #[error(
        "{path}: the input is empty: give a `perf script` output, a perf.data or folded stacks"
    )]
    EmptyInput { path: PathBuf },
    /// The input had bytes but no sample that could be folded.
    #[error("no samples to fold: {what}")]
    NoSamples { what: String },
    /// Reading or writing a file failed.
    #[error("{what}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// `perf` is not installed.
    #[error("perf is not installed (`{program}` not found): install it (Debian: apt-get install linux-perf) to profile")]
    PerfMissing { program: String },
    /// `perf` runs but may not record here.
    #[error("perf may not record here: {reason}")]
    PerfNotPermitted { reason: String },
    /// A `perf` command failed for another reason.
    #[error("`{command}` failed: {stderr}")]
    PerfFailed { command: String, stderr: String },
    /// An option was malformed (a rule, a category file).
    #[error("{what}")]
    BadOption { what: String },
}

impl ProfileError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> ProfileError {
        ProfileError::Io {
            what: what.into(),
            source,
        }
    }
}
