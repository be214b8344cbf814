//! SIGINT/SIGTERM for a server run from the command line: blocked in every thread and
//! taken synchronously by the main thread with sigwait, so no handler runs in a signal context.

use anyhow::Context as _;
use nix::sys::signal::{SigSet, Signal};

/// Blocks SIGINT and SIGTERM in the calling thread (and the threads it starts later).
pub fn block_termination() -> anyhow::Result<SigSet> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.thread_block().context("cannot block SIGINT/SIGTERM")?;
    Ok(set)
}

/// Waits for one of the blocked signals.
pub fn wait(set: &SigSet) -> anyhow::Result<Signal> {
    set.wait().context("waiting for SIGINT/SIGTERM failed")
}
