//! Open loop for HTTP/2 (`--rate` with `h2c://` or `--http2`), paced as the HTTP/1.1
//! threads pace: the same schedule ([`OpenLoop`]: uniform or poisson arrivals, ramps), a
//! timerfd armed [`SPIN_NS`] before each due time then polling (tokio's timer has 1 ms
//! steps, which would be charged to the server), latency from the intended time, and
//! `omitted` counting the requests released with no stream free to take them.
//!
//! A stream is free when it has its connection and a stream slot the server allows, and
//! waits in [`Open::take`]; released requests are the permits of a semaphore those free
//! streams wait on, taken in schedule order.

use std::cell::{Cell, RefCell};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::sync::Semaphore;

use super::Shared;
use crate::load::worker::{instant_to_monotonic, OpenLoop, SPIN_NS};
use crate::load::LoadConfig;

/// Longest wait between looks at the window's end (a stop shortens it).
const MAX_WAIT_NS: u64 = 10_000_000;

/// One thread's open-loop schedule and the requests released but not yet taken.
pub(super) struct Open {
    state: RefCell<OpenLoop>,
    /// One permit per request released (or to re-send) and not yet taken by a stream.
    permits: Semaphore,
    /// Streams waiting in [`Open::take`].
    idle: Cell<u64>,
}

impl Open {
    pub fn new(config: &LoadConfig, thread: usize) -> Self {
        Open {
            state: RefCell::new(OpenLoop::new(config, thread)),
            permits: Semaphore::new(0),
            idle: Cell::new(0),
        }
    }

    /// Waits for a released request: its intended time, or `None` once the schedule ended.
    pub async fn take(&self) -> Option<u64> {
        self.idle.set(self.idle.get() + 1);
        let permit = self.permits.acquire().await;
        self.idle.set(self.idle.get() - 1);
        permit.ok()?.forget();
        Some(self.state.borrow_mut().take_waiting())
    }

    /// A request taken but not sent, or refused unprocessed: sent again before the
    /// schedule's, with its intended time.
    pub fn put_back(&self, intended_ns: u64) {
        self.state.borrow_mut().resend.push_front(intended_ns);
        self.permits.add_permits(1);
    }

    /// Releases the requests due by `now`; the streams waiting take them.
    fn release_due(&self, shared: &Shared, now: u64) {
        let mut state = self.state.borrow_mut();
        let mut rec = shared.rec.borrow_mut();
        let mut released = 0;
        while now < rec.end_ns && state.next_due_ns() <= now {
            let lag_ns = now - state.next_due_ns();
            rec.scheduled_send(lag_ns, lag_ns > state.late_threshold_ns(), now);
            state.release();
            released += 1;
        }
        if released == 0 {
            return;
        }
        self.permits.add_permits(released);
        // Those beyond the streams already waiting found none free: the server's delay.
        let omitted = state.newly_waiting_beyond(self.idle.get());
        rec.omitted(omitted as usize, now);
    }
}

/// The thread's pacer: releases requests on time until the window ends, then lets the
/// waiting streams go.
pub(super) async fn pace(shared: Rc<Shared>) {
    let Some(open) = &shared.open else { return };
    let timer = Timer::new();
    loop {
        let now = shared.now_ns();
        let end = shared.rec.borrow().end_ns;
        if now >= end {
            open.permits.close();
            return;
        }
        open.release_due(&shared, now);
        let due = open.state.borrow().next_due_ns();
        let wake = due.min(end).min(now + MAX_WAIT_NS);
        match &timer {
            // Close to the due time: poll (the other tasks and the sockets run in between).
            _ if wake <= now + SPIN_NS => tokio::task::yield_now().await,
            Some(timer) => timer.sleep_until(shared.t0.get(), wake - SPIN_NS).await,
            None => tokio::time::sleep(Duration::from_nanos(wake - now)).await,
        }
    }
}

/// A timerfd the runtime watches: wake-ups at the µs, not tokio's 1 ms steps.
struct Timer(AsyncFd<Fd>);

struct Fd(TimerFd);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl Timer {
    /// `None` if the kernel gives none (tokio's timer is used then, as epoll's is by the
    /// HTTP/1.1 threads).
    fn new() -> Option<Timer> {
        let fd = TimerFd::new(ClockId::CLOCK_MONOTONIC, TimerFlags::TFD_NONBLOCK).ok()?;
        // SAFETY: `Fd` owns the timerfd, which stays open, the same descriptor, until the
        // `AsyncFd` (its only owner) is dropped.
        unsafe { AsyncFd::register_with_interest(Fd(fd), Interest::READABLE) }
            .ok()
            .map(Timer)
    }

    /// Sleeps until `at_ns` after `t0`.
    async fn sleep_until(&self, t0: Instant, at_ns: u64) {
        let at = instant_to_monotonic(t0 + Duration::from_nanos(at_ns));
        let fd = &self.0.get_ref().0;
        if fd
            .set(
                Expiration::OneShot(TimeSpec::from_duration(at)),
                TimerSetTimeFlags::TFD_TIMER_ABSTIME,
            )
            .is_err()
        {
            return;
        }
        if let Ok(mut ready) = self.0.readable().await {
            let mut expirations = [0u8; 8];
            let _ = nix::unistd::read(fd.as_fd().as_raw_fd(), &mut expirations);
            ready.clear_ready();
        }
    }
}
