//! What one generator thread counts, and the per-second intervals it reports: shared by the
//! socket event loops and the shared-memory clients, so both measure the same way. The
//! schedule the threads share, the messages they send the engine and the thread CPU clocks
//! live here too: the recorder fills them, and the loops and the engine read them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use hdrhistogram::Histogram;

use super::{LoadConfig, LoadError};
use crate::record::load::RequestError;

/// The schedule every thread shares, in nanoseconds since the common start `t0`.
#[derive(Debug)]
pub(super) struct Schedule {
    /// Ends of the per-second intervals; the last one is the end of the measured window.
    pub boundaries_ns: Vec<u64>,
    /// Index of the first interval of the measured window.
    pub first_measured: usize,
    pub warmup_end_ns: u64,
    pub measure_end_ns: u64,
    pub timeout_ns: u64,
    pub hist_max_ns: u64,
    /// Buffers of [`Counts`] the engine has read, for the threads' next intervals: a thread
    /// that finds one allocates nothing at a boundary (see [`Counts`]).
    spare_counts: Mutex<Vec<Vec<(u64, u64)>>>,
    /// How many [`Counts`] the threads send per interval, all together: the spares kept. More
    /// would let every moment the engine fell behind add buffers for good (a pool of 64 grew
    /// a 30-minute soak's RSS by 1% in 12 minutes); fewer would allocate every second.
    counts_per_interval: AtomicUsize,
    /// Whether a buffer was dropped, the spares being full: one a thread allocated while the
    /// engine fell behind (see [`Schedule::take_surplus`]).
    surplus: AtomicBool,
}

impl Schedule {
    pub fn new(config: &LoadConfig) -> Self {
        let warmup_end_ns = config.warmup.as_nanos() as u64;
        let measure_end_ns = warmup_end_ns + config.duration.as_nanos() as u64;
        let mut boundaries_ns = second_marks(0, warmup_end_ns);
        let first_measured = boundaries_ns.len();
        boundaries_ns.extend(second_marks(warmup_end_ns, measure_end_ns));
        let timeout_ns = config.timeout.as_nanos() as u64;
        Schedule {
            boundaries_ns,
            first_measured,
            warmup_end_ns,
            measure_end_ns,
            timeout_ns,
            hist_max_ns: (timeout_ns * 2).max(1_000_000_000),
            spare_counts: Mutex::new(Vec::new()),
            counts_per_interval: AtomicUsize::new(0),
            surplus: AtomicBool::new(false),
        }
    }

    /// Start of interval `i`.
    pub fn interval_start_ns(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.boundaries_ns[i - 1]
        }
    }

    /// A histogram sized for the usual range that grows when a latency exceeds it: open-loop
    /// latency includes the wait in the backlog, which no timeout bounds.
    pub fn new_hist(&self) -> Histogram<u64> {
        let mut h =
            Histogram::new_with_bounds(1, self.hist_max_ns, 3).expect("valid histogram bounds");
        h.auto(true);
        h
    }

    /// `h`'s counts, `h` emptied for the next interval; `keep` false sends no counts and
    /// leaves `h` as it is (a warm-up interval: what was recorded belongs to the next one).
    fn take_counts(&self, h: &mut Histogram<u64>, keep: bool) -> Counts {
        let mut buckets = self
            .spare_counts
            .lock()
            .ok()
            .and_then(|mut spare| spare.pop())
            .unwrap_or_default();
        buckets.clear();
        if keep && !h.is_empty() {
            buckets.extend(
                h.iter_recorded()
                    .map(|v| (v.value_iterated_to(), v.count_at_value())),
            );
            h.reset();
        }
        Counts { buckets }
    }

    /// Hands back the buffer of counts the engine has read, for [`Schedule::take_counts`].
    pub fn recycle_counts(&self, counts: Counts) {
        if let Ok(mut spare) = self.spare_counts.lock() {
            if spare.len() < self.counts_per_interval.load(Ordering::Relaxed) {
                spare.push(counts.buckets);
            } else {
                self.surplus.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Whether buffers beyond the spares were dropped since the last call: the threads
    /// allocated while the engine fell behind, and that memory is free again.
    pub fn take_surplus(&self) -> bool {
        self.surplus.swap(false, Ordering::Relaxed)
    }
}

/// One thread's latencies for one interval as its histogram's non-empty buckets: (a value in
/// the bucket, its count). A thread keeps its two histograms (~200 KB each) for the whole run
/// and sends these instead of a fresh pair every second: a moment the engine fell behind used
/// to leave each thread's malloc arena a pair of histograms larger for good (a 30-minute soak's
/// RSS stepped up 1.1 MB at minute 3). The engine rebuilds the very histogram the thread would
/// have sent ([`Counts::replay`]), so every figure and logged byte is the same.
#[derive(Default)]
pub(super) struct Counts {
    buckets: Vec<(u64, u64)>,
}

impl Counts {
    /// Records the counts into `h` as the thread recorded them into a fresh histogram: each
    /// value lands in its bucket, and `h` grows as the thread's did (growth depends only on
    /// the bucket of the largest value, and min and max are read back per bucket).
    pub fn replay(&self, h: &mut Histogram<u64>) {
        for &(value, count) in &self.buckets {
            if h.record_n(value, count).is_err() {
                h.saturating_record_n(value, count);
            }
        }
    }

    /// How many latencies these counts hold.
    #[cfg(test)]
    pub fn len(&self) -> u64 {
        self.buckets.iter().map(|b| b.1).sum()
    }
}

/// Whole-second marks after `from` up to and including `to`.
fn second_marks(from: u64, to: u64) -> Vec<u64> {
    let mut marks = Vec::new();
    let mut t = from;
    while t < to {
        t = (t + 1_000_000_000).min(to);
        marks.push(t);
    }
    marks
}

/// What a thread tells the engine.
pub(super) enum Msg {
    /// Connections are open (or could not be opened).
    Ready(Result<f64, LoadError>),
    /// One interval's figures.
    Interval(Box<IntervalMsg>),
    /// The thread has finished.
    Done(Box<Totals>),
}

/// One thread's figures for one interval.
pub(super) struct IntervalMsg {
    pub index: usize,
    /// Latencies from the intended send time (empty in warm-up intervals).
    pub hist: Counts,
    /// Open loop: latencies from the actual send time.
    pub uncorrected: Option<Counts>,
    pub ops: u64,
    pub lat_sum_ns: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub errors: u64,
    pub inflight: u64,
    /// CPU time of each reporting thread in the interval: (thread, ns).
    pub cpu_ns: Vec<(usize, u64)>,
    pub wall_ns: u64,
}

/// One thread's totals.
#[derive(Default)]
pub(super) struct Totals {
    /// The reporting thread (its CPU is `cpuset[thread % len]` when pinned).
    pub thread: usize,
    /// Requests the server received (a re-sent one once, a withdrawn one not at all).
    pub sent: u64,
    /// Requests written again on a new connection after the server closed theirs unread.
    pub resent: u64,
    /// Redis GETs in the window that found their key.
    pub redis_hits: u64,
    /// Redis GETs in the window answered nil.
    pub redis_misses: u64,
    pub requests: u64,
    pub errors: BTreeMap<String, u64>,
    /// Failed HTTP requests per status code (their classes are in `errors`).
    pub error_statuses: BTreeMap<u16, u64>,
    pub omitted: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub window_user_s: f64,
    pub window_sys_s: f64,
    pub window_cpu_s: f64,
    pub window_end_ns: u64,
    /// Time this thread waited runnable for a CPU over the window, seconds (None without
    /// schedstat).
    pub window_run_delay_s: Option<f64>,
    /// Open loop: sends that left late with a connection free (the generator lagged).
    pub late_sends: u64,
    /// Open loop: delay of each scheduled send after its due time, ns (window only).
    pub send_lag: Option<Histogram<u64>>,
    /// TLS: the duration of every handshake of the run (the first connections' included), ns.
    pub tls_handshake: Option<Histogram<u64>>,
    /// TLS: handshakes of the run that resumed a session.
    pub tls_resumed: u64,
    /// gRPC: reply messages read whole over the run (calls of any end).
    pub messages_received: u64,
    /// gRPC, streamed replies: messages of the window's successful calls.
    pub window_messages: u64,
    /// gRPC, streamed replies: latency to the first message of the window's successful
    /// calls, ns.
    pub first_message: Option<Histogram<u64>>,
}

/// Records `ns` in an auto-resizing histogram; clips only if the histogram cannot grow
/// (out of memory), the one case where `max` could fall short.
fn record(h: &mut Histogram<u64>, ns: u64) {
    if h.record(ns).is_err() {
        h.saturating_record(ns);
    }
}

/// The distinct error kinds a thread keeps: past them (a gRPC server whose messages vary
/// from call to call), errors of a new kind count under [`OTHER_ERRORS`].
const MAX_ERROR_KINDS: usize = 64;
/// The kind of the errors past [`MAX_ERROR_KINDS`].
const OTHER_ERRORS: RequestError = RequestError::OtherKinds;

/// One thread's counters for the interval under way, its totals for the window, and where it
/// stands in the shared schedule.
pub(super) struct Recorder {
    sched: Arc<Schedule>,
    tx: Sender<Msg>,
    thread: usize,
    /// End of this thread's measured window (earlier than the schedule's after a stop).
    pub end_ns: u64,
    interval: usize,
    totals: Totals,
    hist: Histogram<u64>,
    uncorrected: Option<Histogram<u64>>,
    ops: u64,
    lat_sum_ns: u64,
    bytes_sent: u64,
    bytes_received: u64,
    errors: u64,
    cpu_mark_ns: u64,
    /// CPU spent waiting (open loop's spin before a due request) in the interval, ns.
    idle_ns: u64,
    /// The same over the measured window, ns.
    window_idle_ns: u64,
    window_rusage: Option<(f64, f64, f64)>,
    /// The thread's run-queue wait at the window's start, ns.
    window_run_delay_ns: Option<u64>,
}

impl Recorder {
    /// A recorder for thread `thread`; `open_loop` keeps the uncorrected histogram too.
    pub fn new(sched: Arc<Schedule>, tx: Sender<Msg>, thread: usize, open_loop: bool) -> Self {
        sched
            .counts_per_interval
            .fetch_add(1 + usize::from(open_loop), Ordering::Relaxed);
        Recorder {
            end_ns: sched.measure_end_ns,
            hist: sched.new_hist(),
            uncorrected: open_loop.then(|| sched.new_hist()),
            totals: Totals {
                thread,
                send_lag: open_loop.then(|| sched.new_hist()),
                ..Totals::default()
            },
            sched,
            tx,
            thread,
            interval: 0,
            ops: 0,
            lat_sum_ns: 0,
            bytes_sent: 0,
            bytes_received: 0,
            errors: 0,
            cpu_mark_ns: 0,
            idle_ns: 0,
            window_idle_ns: 0,
            window_rusage: None,
            window_run_delay_ns: None,
        }
    }

    /// Marks the start of the thread's work (its CPU clock for the first interval).
    pub fn start(&mut self) {
        self.cpu_mark_ns = thread_cpu_ns();
    }

    /// Ends the measured window now (a stop was asked for).
    pub fn stop_at(&mut self, now: u64) {
        if now < self.end_ns {
            self.end_ns = now;
        }
    }

    /// Whether `now` lies in the measured window.
    pub fn in_window(&self, now: u64) -> bool {
        now >= self.sched.warmup_end_ns && now < self.end_ns
    }

    /// One request written to the wire (warm-up and drain included).
    pub fn sent(&mut self) {
        self.totals.sent += 1;
    }

    /// `n` requests counted by `sent` that the server never read (written behind a reply that
    /// closed the connection).
    pub fn withdraw(&mut self, n: u64) {
        self.totals.sent -= n;
    }

    /// One request written again after its connection closed unread (counted by `sent` too).
    pub fn resent(&mut self) {
        self.totals.resent += 1;
    }

    /// A TLS handshake completed in `ns` (counted whenever it happened: most happen as the
    /// connections open, before the window); `resumed` when it resumed a session.
    pub fn tls_handshake(&mut self, ns: u64, resumed: bool) {
        self.totals.tls_resumed += u64::from(resumed);
        let h = self
            .totals
            .tls_handshake
            .get_or_insert_with(|| self.sched.new_hist());
        record(h, ns.max(1));
    }

    /// `n` gRPC reply messages read whole (any call's, the whole run).
    pub fn messages_read(&mut self, n: u64) {
        self.totals.messages_received += n;
    }

    /// A call whose reply was streamed ended well at `now` with `messages`, the first of
    /// them `first_ns` after the call's intended send (none without a message).
    pub fn streamed(&mut self, messages: u32, first_ns: Option<u64>, now: u64) {
        if !self.in_window(now) {
            return;
        }
        self.totals.window_messages += u64::from(messages);
        if let Some(ns) = first_ns {
            let h = self
                .totals
                .first_message
                .get_or_insert_with(|| self.sched.new_hist());
            record(h, ns.max(1));
        }
    }

    /// A redis GET answered: its key was `found` or not.
    pub fn lookup(&mut self, found: bool, now: u64) {
        if self.in_window(now) {
            if found {
                self.totals.redis_hits += 1;
            } else {
                self.totals.redis_misses += 1;
            }
        }
    }

    /// The HTTP status of a failed request in the window, counted per code beside its class.
    pub fn failed_status(&mut self, status: u16, now: u64) {
        if self.in_window(now) {
            *self.totals.error_statuses.entry(status).or_default() += 1;
        }
    }

    /// `n` bytes written.
    pub fn bytes_out(&mut self, n: usize, now: u64) {
        self.bytes_sent += n as u64;
        if self.in_window(now) {
            self.totals.bytes_sent += n as u64;
        }
    }

    /// `n` bytes read.
    pub fn bytes_in(&mut self, n: usize, now: u64) {
        self.bytes_received += n as u64;
        if self.in_window(now) {
            self.totals.bytes_received += n as u64;
        }
    }

    /// A request answered successfully at `now` after `latency_ns` (from its intended send
    /// time), `uncorrected_ns` from its actual send time in open loop.
    pub fn success(&mut self, latency_ns: u64, uncorrected_ns: u64, now: u64) {
        let latency_ns = latency_ns.max(1);
        self.ops += 1;
        self.lat_sum_ns += latency_ns;
        if self.in_window(now) {
            self.totals.requests += 1;
            record(&mut self.hist, latency_ns);
            if let Some(h) = &mut self.uncorrected {
                record(h, uncorrected_ns.max(1));
            }
        }
    }

    /// A failed request, by kind.
    #[inline]
    pub fn error(&mut self, kind: RequestError, now: u64) {
        self.error_named(kind.as_str(), now);
    }

    /// A failed request whose kind is the server's words (a gRPC status and its message).
    pub fn error_named(&mut self, kind: &str, now: u64) {
        self.errors += 1;
        if self.in_window(now) {
            let errors = &mut self.totals.errors;
            let kind = match errors.len() < MAX_ERROR_KINDS || errors.contains_key(kind) {
                true => kind,
                false => OTHER_ERRORS.as_str(),
            };
            match errors.get_mut(kind) {
                Some(n) => *n += 1,
                None => {
                    errors.insert(kind.to_string(), 1);
                }
            }
        }
    }

    /// `n` requests that left later than their intended time (open loop).
    pub fn omitted(&mut self, n: usize, now: u64) {
        if self.in_window(now) {
            self.totals.omitted += n as u64;
        }
    }

    /// A scheduled send (open loop) left `lag_ns` after its due time; `late` when a
    /// connection was free, so the lag was the generator's.
    pub fn scheduled_send(&mut self, lag_ns: u64, late: bool, now: u64) {
        if !self.in_window(now) {
            return;
        }
        if let Some(h) = &mut self.totals.send_lag {
            record(h, lag_ns.max(1));
        }
        self.totals.late_sends += u64::from(late);
    }

    /// `ns` of CPU spent waiting rather than working (not counted as busy).
    pub fn idle(&mut self, ns: u64, now: u64) {
        self.idle_ns += ns;
        if self.in_window(now) {
            self.window_idle_ns += ns;
        }
    }

    /// When the interval under way ends, if one does.
    pub fn next_boundary_ns(&self) -> Option<u64> {
        let b = *self.sched.boundaries_ns.get(self.interval)?;
        Some(b.min(self.end_ns))
    }

    /// Reports every interval that has ended by `now`; `inflight` is asked only then (it
    /// may walk every connection, so not on every turn of the loop).
    pub fn cross_boundaries(&mut self, now: u64, inflight: impl Fn() -> u64) {
        while let Some(end) = self.next_boundary_ns() {
            if now < end {
                break;
            }
            self.emit_interval(end, inflight());
            if end == self.end_ns {
                self.interval = usize::MAX;
                break;
            }
        }
        if now >= self.sched.warmup_end_ns && self.window_rusage.is_none() {
            self.window_rusage = Some(thread_rusage());
            self.window_run_delay_ns = thread_run_delay_ns();
        }
    }

    fn emit_interval(&mut self, end_ns: u64, inflight: u64) {
        let index = self.interval;
        let cpu_now = thread_cpu_ns();
        let measured = index >= self.sched.first_measured;
        // Warm-up intervals report their counts but an empty histogram.
        let hist = self.sched.take_counts(&mut self.hist, measured);
        let uncorrected = self
            .uncorrected
            .as_mut()
            .map(|h| self.sched.take_counts(h, measured));
        let msg = IntervalMsg {
            index,
            hist,
            uncorrected,
            ops: std::mem::take(&mut self.ops),
            lat_sum_ns: std::mem::take(&mut self.lat_sum_ns),
            bytes_sent: std::mem::take(&mut self.bytes_sent),
            bytes_received: std::mem::take(&mut self.bytes_received),
            errors: std::mem::take(&mut self.errors),
            inflight,
            cpu_ns: vec![(
                self.thread,
                cpu_now
                    .saturating_sub(self.cpu_mark_ns)
                    .saturating_sub(std::mem::take(&mut self.idle_ns)),
            )],
            wall_ns: end_ns - self.sched.interval_start_ns(index),
        };
        self.cpu_mark_ns = cpu_now;
        let _ = self.tx.send(Msg::Interval(Box::new(msg)));
        self.interval += 1;
    }

    /// Sends the thread's totals (its CPU over the window included). Takes `&mut self`: the
    /// HTTP/2 thread's recorder sits behind a shared pointer that a reconnecting task may still
    /// hold when the load ends.
    pub fn finish(&mut self) {
        let (u1, s1, c1) = thread_rusage();
        if let Some((u0, s0, c0)) = self.window_rusage {
            self.totals.window_user_s = u1 - u0;
            self.totals.window_sys_s = s1 - s0;
            self.totals.window_cpu_s = (c1 - c0 - self.window_idle_ns as f64 / 1e9).max(0.0);
        }
        if let (Some(d0), Some(d1)) = (self.window_run_delay_ns, thread_run_delay_ns()) {
            self.totals.window_run_delay_s = Some(d1.saturating_sub(d0) as f64 / 1e9);
        }
        self.totals.window_end_ns = self.end_ns;
        let _ = self
            .tx
            .send(Msg::Done(Box::new(std::mem::take(&mut self.totals))));
    }
}

/// CPU time of the calling thread, nanoseconds.
pub(super) fn thread_cpu_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// Time the calling thread has waited runnable for a CPU, ns: the second figure of
/// /proc/thread-self/schedstat (None where the kernel keeps no schedstat).
pub(super) fn thread_run_delay_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().nth(1)?.parse().ok()
}

/// User, system and total CPU seconds of the calling thread.
pub(super) fn thread_rusage() -> (f64, f64, f64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    let secs = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    let (u, s) = (secs(ru.ru_utime), secs(ru.ru_stime));
    (u, s, thread_cpu_ns() as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use super::*;
    use crate::load::LoadConfig;

    #[test]
    fn latencies_beyond_the_histograms_range_are_recorded_not_clipped() {
        let config = LoadConfig {
            timeout: Duration::from_millis(10),
            duration: Duration::from_secs(1),
            ..LoadConfig::default()
        };
        let sched = Arc::new(Schedule::new(&config));
        // The histogram's initial range ends at 1 s; an open-loop backlog wait can exceed it.
        assert_eq!(sched.hist_max_ns, 1_000_000_000);
        let (tx, rx) = channel();
        let mut rec = Recorder::new(sched.clone(), tx, 0, true);
        rec.success(5_000_000_000, 1_000, 500_000_000);
        rec.success(1_000, 1_000, 600_000_000);
        rec.cross_boundaries(1_000_000_000, || 0);
        let Ok(Msg::Interval(m)) = rx.try_recv() else {
            panic!("no interval")
        };
        assert_eq!(m.hist.len(), 2);
        let mut hist = sched.new_hist();
        m.hist.replay(&mut hist);
        let max_s = crate::record::load::latency_us(&hist).max / 1e6;
        assert!((4.99..5.01).contains(&max_s), "max {max_s} s");
    }

    #[test]
    fn spare_counts_are_one_per_buffer_the_threads_send_each_interval() {
        let sched = Arc::new(Schedule::new(&LoadConfig::default()));
        let (tx, _rx) = channel();
        // Two open-loop threads send two counts each per interval, a closed-loop one one.
        let _recs: Vec<Recorder> = [true, true, false]
            .into_iter()
            .enumerate()
            .map(|(t, open)| Recorder::new(sched.clone(), tx.clone(), t, open))
            .collect();
        for _ in 0..9 {
            sched.recycle_counts(Counts::default());
        }
        assert_eq!(sched.spare_counts.lock().unwrap().len(), 5);
        // A thread takes a spare rather than allocating.
        let mut h = sched.new_hist();
        h.record(1_500).unwrap();
        let counts = sched.take_counts(&mut h, true);
        assert_eq!((counts.len(), h.len()), (1, 0));
        assert_eq!(sched.spare_counts.lock().unwrap().len(), 4);
    }
}
