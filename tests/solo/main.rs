//! Tests that need the machine to themselves. Cargo runs one test binary after the other, so
//! nothing in `tests/it` runs beside these: the diagnosis demonstrations run their servers
//! under SCHED_FIFO (`chrt -f 5`), which beside other tests would starve them (a 0.5 s step of
//! another test once measured no request) and be disturbed by them in turn.

/// Held by every test here for its whole run: libtest runs two tests at once on this machine,
/// and a JVM warming up or a server under `chrt -f 5` beside another demonstration is the busy
/// neighbour the diagnosis (rightly) names instead of the limit being shown.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed while holding it poisons it; the next still runs alone.
    ALONE.lock().unwrap_or_else(|e| e.into_inner())
}

#[allow(dead_code)]
#[path = "../it/common.rs"]
mod common;
mod diagnosis;
mod grpc;
mod limits_io;
mod load_histograms;
mod memcached;
mod next_hop;
mod tomcat;
