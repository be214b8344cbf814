//! Waiting across processes: futexes, and the process-shared POSIX semaphores and robust
//! mutexes of the `single` design. All of them live inside the shared region.

use std::cell::UnsafeCell;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout` (a shared, not private, futex).
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = timespec(timeout);
    // SAFETY: the word is a live atomic in a mapping shared with the other processes.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            0usize,
            0u32,
        );
    }
}

/// Wakes the sleepers on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: as in `futex_wait`.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            0usize,
            0usize,
            0u32,
        );
    }
}

/// Whether process `pid` still exists (a dead client or server is recognised by its pid).
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

fn timespec(d: Duration) -> libc::timespec {
    libc::timespec {
        tv_sec: d.as_secs() as libc::time_t,
        tv_nsec: d.subsec_nanos() as libc::c_long,
    }
}

/// CLOCK_REALTIME `d` from now, as `sem_timedwait` and `pthread_mutex_timedlock` want it.
fn deadline(d: Duration) -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into our timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
    let nanos = now.tv_nsec as u64 + d.subsec_nanos() as u64;
    libc::timespec {
        tv_sec: now.tv_sec + d.as_secs() as libc::time_t + (nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (nanos % 1_000_000_000) as libc::c_long,
    }
}

/// A POSIX semaphore shared between processes.
#[repr(C)]
pub struct PSem(UnsafeCell<libc::sem_t>);

impl PSem {
    /// Initialises the semaphore in place (the region's creator does this once).
    pub fn init(&self, value: u32) {
        // SAFETY: the memory belongs to the region and nobody uses it before init.
        unsafe { libc::sem_init(self.0.get(), 1, value) };
    }

    /// Adds one token.
    pub fn post(&self) {
        // SAFETY: initialised by the creator of the region.
        unsafe { libc::sem_post(self.0.get()) };
    }

    /// Takes one token, waiting at most `timeout`. False on timeout.
    pub fn wait_for(&self, timeout: Duration) -> bool {
        let at = deadline(timeout);
        loop {
            // SAFETY: initialised by the creator of the region.
            if unsafe { libc::sem_timedwait(self.0.get(), &at) } == 0 {
                return true;
            }
            if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
                return false;
            }
        }
    }

    /// Takes every token there is (a new owner starts from a clean state).
    pub fn drain(&self) {
        // SAFETY: initialised by the creator of the region.
        while unsafe { libc::sem_trywait(self.0.get()) } == 0 {}
    }
}

/// A robust, process-shared pthread mutex: when its holder dies, the next locker is told
/// (and recovers the protected state) instead of waiting forever.
#[repr(C)]
pub struct PMutex(UnsafeCell<libc::pthread_mutex_t>);

/// A held [`PMutex`]; unlocks on drop.
pub struct PGuard<'a> {
    mutex: &'a PMutex,
    /// The previous holder died holding the lock: the protected state may be half-written.
    pub recovered: bool,
}

impl PMutex {
    /// Initialises the mutex in place as process-shared and robust.
    pub fn init(&self) {
        // SAFETY: plain pthread attribute calls on memory we own.
        unsafe {
            let mut attr: libc::pthread_mutexattr_t = std::mem::zeroed();
            libc::pthread_mutexattr_init(&mut attr);
            libc::pthread_mutexattr_setpshared(&mut attr, libc::PTHREAD_PROCESS_SHARED);
            libc::pthread_mutexattr_setrobust(&mut attr, libc::PTHREAD_MUTEX_ROBUST);
            libc::pthread_mutex_init(self.0.get(), &attr);
            libc::pthread_mutexattr_destroy(&mut attr);
        }
    }

    /// Locks, waiting at most `timeout`; `None` on timeout.
    pub fn lock_for(&self, timeout: Duration) -> Option<PGuard<'_>> {
        let at = deadline(timeout);
        // SAFETY: initialised by the creator of the region.
        match unsafe { libc::pthread_mutex_timedlock(self.0.get(), &at) } {
            0 => Some(PGuard {
                mutex: self,
                recovered: false,
            }),
            libc::EOWNERDEAD => {
                // SAFETY: we hold the lock; marking it consistent keeps it usable.
                unsafe { libc::pthread_mutex_consistent(self.0.get()) };
                Some(PGuard {
                    mutex: self,
                    recovered: true,
                })
            }
            _ => None,
        }
    }
}

impl Drop for PGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: we hold the lock.
        unsafe { libc::pthread_mutex_unlock(self.mutex.0.get()) };
    }
}

// SAFETY: the primitives are made for sharing between threads and processes.
unsafe impl Sync for PSem {}
unsafe impl Sync for PMutex {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semaphore_counts_and_times_out() {
        let s = Box::new(PSem(UnsafeCell::new(unsafe { std::mem::zeroed() })));
        s.init(1);
        assert!(s.wait_for(Duration::from_millis(1)));
        assert!(!s.wait_for(Duration::from_millis(5)));
        s.post();
        s.post();
        s.drain();
        assert!(!s.wait_for(Duration::from_millis(1)));
    }

    #[test]
    fn own_pid_is_alive_and_a_reaped_child_is_not() {
        assert!(pid_alive(std::process::id() as i32));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert!(!pid_alive(pid));
    }
}
