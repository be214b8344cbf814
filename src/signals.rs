//! Ctrl-C, SIGTERM and SIGHUP as a flag that long-running work polls. SIGHUP too: it is what
//! `salloc --kill-command` sends by default when the allocation ends (a batch job gets
//! SIGTERM), and what a closed terminal sends.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs SIGINT, SIGTERM and SIGHUP handlers (once) that set the returned flag.
pub fn stop_flag() -> &'static AtomicBool {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        let _ = unsafe { sigaction(sig, &action) };
    }
    &STOP
}
