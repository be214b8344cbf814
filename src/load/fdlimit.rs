//! File descriptors: a load of N connections needs N descriptors. Checked before anything is
//! allocated, so a limit that is too low fails at once with what to do, instead of after
//! minutes of per-connection allocations with a misleading connect error.

use std::io;

use nix::errno::Errno;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

use super::LoadError;

/// Descriptors the process holds besides the connections: standard streams, the output files,
/// the preload connection, the observers' /proc files, a margin.
const RESERVED_FDS: u64 = 64;

/// Descriptors `connections` connections on `threads` threads need: one per connection,
/// an epoll and a timerfd per thread, the ones already open and a reserve.
pub(super) fn needed_fds(connections: usize, threads: usize) -> u64 {
    connections as u64 + 2 * threads as u64 + open_fds() + RESERVED_FDS
}

/// Raises the soft RLIMIT_NOFILE to the hard limit when the load needs more than the soft
/// one; fails, saying how many are needed and what to do, when the hard limit is too low.
pub(super) fn ensure(connections: usize, threads: usize) -> Result<(), LoadError> {
    let needed = needed_fds(connections, threads);
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io_error)?;
    if needed <= soft {
        return Ok(());
    }
    if needed > hard {
        return Err(LoadError::FdLimit {
            connections,
            needed,
            hard_limit: hard,
            usable: hard.saturating_sub(needed - connections as u64),
        });
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).map_err(io_error)
}

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

fn io_error(e: Errno) -> LoadError {
    LoadError::Io {
        context: "reading or raising the open-file limit (RLIMIT_NOFILE)".into(),
        source: io::Error::from(e),
    }
}

/// What a failed connect means, named by its errno (the OS message follows in the chain).
pub(super) fn connect_cause(e: &io::Error) -> String {
    let errno = e.raw_os_error().map(Errno::from_raw);
    let what = match errno {
        Some(Errno::ECONNREFUSED) => "ECONNREFUSED: nothing listens there (is the server running?)",
        Some(Errno::EMFILE) => "EMFILE: out of file descriptors (raise `ulimit -n` or use fewer connections)",
        Some(Errno::ENFILE) => "ENFILE: the system's file table is full",
        Some(Errno::EADDRNOTAVAIL) => "EADDRNOTAVAIL: no free local port (the ephemeral port range is used up: fewer connections, or widen net.ipv4.ip_local_port_range)",
        Some(Errno::ENETUNREACH | Errno::EHOSTUNREACH) => "the network or host is unreachable",
        Some(Errno::ETIMEDOUT) => "ETIMEDOUT: the server did not answer",
        _ if e.kind() == io::ErrorKind::TimedOut => "timed out: the server did not accept in time",
        Some(other) => return format!("{}", other),
        // Not an OS error (a TLS failure, say): its own words are the reason.
        None => return e.to_string(),
    };
    what.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_causes_are_named() {
        let refused = io::Error::from_raw_os_error(libc::ECONNREFUSED);
        assert!(connect_cause(&refused).contains("is the server running"));
        let emfile = io::Error::from_raw_os_error(libc::EMFILE);
        assert!(connect_cause(&emfile).starts_with("EMFILE"));
        assert!(!connect_cause(&emfile).contains("server running"));
        let port = io::Error::from_raw_os_error(libc::EADDRNOTAVAIL);
        assert!(connect_cause(&port).starts_with("EADDRNOTAVAIL"));
    }
}
