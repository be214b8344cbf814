//! The event loops of the load engine.

use std::sync::atomic::AtomicBool;

use super::{IntervalSink, LoadConfig, LoadError, LoadOutcome};

/// Runs one load to completion (warm-up, measured window, drain). `stop` ends it early
/// (Ctrl-C): the figures of what was measured so far are still returned.
pub fn run(
    _config: &LoadConfig,
    _sink: &mut dyn IntervalSink,
    _stop: &AtomicBool,
) -> Result<LoadOutcome, LoadError> {
    Err(LoadError::BadInput(
        "the load engine is not built yet".into(),
    ))
}
