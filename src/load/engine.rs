//! Runs the generator threads and merges what they report.

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::h2::H2Session;
use super::pipelined::Pipelined;
use super::protocol::grpc::GrpcStream;
use super::recorder::{Counts, IntervalMsg, Msg, Schedule, Totals};
use super::target::Target;
use super::worker::{Connection, LoopContext, Worker};
use super::{LoadConfig, LoadError, LoadOutcome};
use crate::record::load::{
    latency_us, ClientCpu, IntervalLine, IntervalSink, LoadReport, StreamFigures, SCHEMA_VERSION,
};

/// A generator core busier than this measured the client rather than the server.
const SATURATED_BUSY_PCT: f64 = 90.0;
/// Open loop: more late sends than this share of all sends measured the client.
const SATURATED_LATE_SHARE: f64 = 0.01;

/// The longest wait for a `start_at_unix_ns` start: further off, the clocks or the caller are
/// wrong, and waiting would only hide it.
pub const MAX_START_WAIT: Duration = Duration::from_secs(120);

/// Refuses a `start_at_unix_ns` further off than [`MAX_START_WAIT`].
pub fn check_start_at(start_at_unix_ns: Option<i64>) -> Result<(), LoadError> {
    if let Some(at) = start_at_unix_ns {
        let ahead_ns = at - crate::clock::now_ns();
        if ahead_ns > MAX_START_WAIT.as_nanos() as i64 {
            return Err(LoadError::BadInput(format!(
                "--start-at is {:.0} s ahead of this host's clock (at most {} s): do the clocks agree?",
                ahead_ns as f64 / 1e9,
                MAX_START_WAIT.as_secs()
            )));
        }
    }
    Ok(())
}

/// A load over sockets (every scheme but `shm://`), its warm-up starting at
/// `start_at_unix_ns` when given (see [`super::run_at`]).
pub fn run_sockets(
    config: &LoadConfig,
    start_at_unix_ns: Option<i64>,
    sink: &mut dyn IntervalSink,
    stop: &AtomicBool,
) -> Result<LoadOutcome, LoadError> {
    let config = Arc::new(validate(config)?);
    let mut target = Target::parse(&config.url, &config.proto)?;
    target.sources = super::sources::plan(
        &config.connect.source_addrs,
        target.addr,
        config.connections,
        super::sources::ephemeral_ports(),
    )?;
    let target = Arc::new(target);
    if let Some(tls) = &target.tls {
        let alpn = super::tls::probe(
            target.addr,
            tls,
            config.timeout.min(Duration::from_secs(10)),
        )?;
        if target.http2 {
            super::h2::check_alpn(&target, alpn.as_deref())?;
        }
    }
    // Before any per-connection state is allocated.
    super::fdlimit::ensure(config.connections, config.threads)?;
    let preloaded = super::preload::run(&config, &target)?;
    let sched = Arc::new(Schedule::new(&config));
    // Threads poll a flag of their own; it follows `stop` (which the caller owns).
    let stop_flag = Arc::new(AtomicBool::new(false));
    let (tx, rx) = channel();
    let mut bodies: Vec<ThreadBody> = Vec::new();
    let mut first_conn = 0;
    for t in 0..config.threads {
        let n = config.connections / config.threads
            + usize::from(t < config.connections % config.threads);
        let ctx = LoopContext {
            config: config.clone(),
            target: target.clone(),
            sched: sched.clone(),
            stop: stop_flag.clone(),
            tx: tx.clone(),
            thread: t,
            first_conn,
            connections: n,
        };
        bodies.push(if target.http2 {
            thread_body::<H2Session>(ctx, "creating an HTTP/2 event loop")?
        } else {
            thread_body::<Pipelined>(ctx, "creating an event loop")?
        });
        first_conn += n;
    }
    drop(tx);
    let threads = Threads {
        bodies,
        name: "load",
        stop_flag,
        rx,
    };
    let mut outcome = threads.drive(&config, &sched, start_at_unix_ns, sink, stop)?;
    outcome.report.sent += preloaded;
    Ok(outcome)
}

/// One generator thread's body: connect, report ready, wait at the barrier for the common
/// start, run the schedule, report.
pub(super) type ThreadBody = Box<dyn FnOnce(Arc<Barrier>, Arc<OnceLock<Instant>>) + Send>;

/// The body of a thread whose connections are `C`s.
fn thread_body<C: Connection + 'static>(
    ctx: LoopContext,
    what: &str,
) -> Result<ThreadBody, LoadError> {
    let worker = Worker::<C>::new(ctx).map_err(|source| LoadError::Io {
        context: what.into(),
        source,
    })?;
    Ok(Box::new(move |b, s| worker.run(b, s)))
}

/// The generator threads of one load and the channel they report on; shared by the socket
/// and the shared-memory paths.
pub(super) struct Threads {
    /// One body per thread, pinned round-robin over the cpuset in this order.
    pub bodies: Vec<ThreadBody>,
    /// Thread name prefix.
    pub name: &'static str,
    /// The flag the threads poll; set when `stop` is seen.
    pub stop_flag: Arc<AtomicBool>,
    /// Where the threads report (every sender already handed to a body).
    pub rx: Receiver<Msg>,
}

impl Threads {
    /// Spawns the threads, starts them together once all are ready, merges what they report.
    pub fn drive(
        self,
        config: &LoadConfig,
        sched: &Arc<Schedule>,
        start_at_unix_ns: Option<i64>,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
    ) -> Result<LoadOutcome, LoadError> {
        let n = self.bodies.len();
        let setup_started = Instant::now();
        let barrier = Arc::new(Barrier::new(n + 1));
        let start = Arc::new(OnceLock::new());
        let mut handles = Vec::new();
        for (t, body) in self.bodies.into_iter().enumerate() {
            let cpu = config.cpuset.as_ref().map(|cpus| cpus[t % cpus.len()]);
            let (b, s) = (barrier.clone(), start.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("{}-{t}", self.name))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        let _ = crate::cpuset::pin_current_thread(cpu);
                    }
                    body(b, s)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(source) => {
                    // Threads already started wait at the barrier: release them (no start).
                    abandon(&barrier, handles.len(), n);
                    handles.into_iter().for_each(|h| drop(h.join()));
                    return Err(LoadError::Io {
                        context: "starting a generator thread".into(),
                        source,
                    });
                }
            }
        }
        let connect = wait_ready(&self.rx, n);
        let setup_s = setup_started.elapsed().as_secs_f64();
        let ready_unix_ns = crate::clock::now_ns();
        if let (Ok(_), Some(at)) = (&connect, start_at_unix_ns) {
            if !crate::clock::sleep_until_ns_unless(at, stop) {
                // No start time: the threads return without a window.
                barrier.wait();
                handles.into_iter().for_each(|h| drop(h.join()));
                return Err(LoadError::Stopped);
            }
        }
        let started_unix_ns = crate::clock::now_ns();
        let t0 = Instant::now();
        let _ = start.set(t0);
        barrier.wait();
        let connect_s = match connect {
            Ok(s) => s,
            Err(e) => {
                handles.into_iter().for_each(|h| drop(h.join()));
                return Err(e);
            }
        };
        let mut merger = Merger::new(config, sched);
        let mut window = WindowSignal::new(t0, sched);
        merger.collect(&self.rx, sink, stop, &self.stop_flag, &mut window);
        handles.into_iter().for_each(|h| drop(h.join()));
        if merger.totals.len() < config.threads {
            return Err(LoadError::LostThread {
                reported: merger.totals.len(),
                threads: config.threads,
            });
        }
        Ok(merger.finish(
            config,
            connect_s / config.connections as f64,
            setup_s,
            (ready_unix_ns, started_unix_ns),
        ))
    }
}

/// Lets `started` threads past a barrier sized for `total`, without a start time.
fn abandon(barrier: &Arc<Barrier>, started: usize, total: usize) {
    let missing = total - started;
    let b = barrier.clone();
    // The barrier needs total + 1 arrivals: the missing threads' and ours.
    for _ in 0..missing {
        let b = b.clone();
        std::thread::spawn(move || {
            b.wait();
        });
    }
    barrier.wait();
}

fn validate(config: &LoadConfig) -> Result<LoadConfig, LoadError> {
    let bad = |s: &str| Err(LoadError::BadInput(s.to_string()));
    if config.connections == 0 {
        return bad("--connections must be at least 1");
    }
    if config.depth == 0 {
        return bad("--depth must be at least 1");
    }
    let http2 = config.proto.http2
        || ["h2c://", "grpc://", "grpcs://"]
            .iter()
            .any(|s| config.url.starts_with(s));
    if http2 && config.ramp.is_some() && config.rate_rps.is_none() {
        return bad("--ramp without --rate (a ramp of connections) is not available with HTTP/2: give --rate to ramp the rate");
    }
    if config.proto.new_connection_per_request && config.depth > 1 {
        return bad("--new-connection-per-request sends one request per connection: use --depth 1");
    }
    if config.duration.is_zero() {
        return bad("--duration must be longer than zero");
    }
    if config.timeout.is_zero() {
        return bad("--timeout must be longer than zero");
    }
    if config.rate_rps.is_some_and(|r| !(r > 0.0 && r.is_finite())) {
        return bad("--rate must be a positive number of requests per second");
    }
    if config.cpuset.as_ref().is_some_and(|c| c.is_empty()) {
        return bad("--cpuset is empty");
    }
    check_cpus(config)?;
    let mut c = config.clone();
    super::arrivals::apply(&mut c).map_err(|e| LoadError::BadInput(e.to_string()))?;
    c.threads = c.threads.clamp(1, c.connections);
    Ok(c)
}

/// A `--cpuset` CPU this machine lacks is an error: pinning there would run unpinned.
pub(super) fn check_cpus(config: &LoadConfig) -> Result<(), LoadError> {
    let cpus = config.cpuset.as_deref().unwrap_or_default();
    crate::cpuset::check_available(cpus).map_err(|e| LoadError::BadInput(e.to_string()))
}

fn wait_ready(rx: &Receiver<Msg>, threads: usize) -> Result<f64, LoadError> {
    let mut total = 0.0;
    let mut first_err = None;
    for _ in 0..threads {
        match rx.recv() {
            Ok(Msg::Ready(Ok(s))) => total += s,
            Ok(Msg::Ready(Err(e))) => first_err = first_err.or(Some(e)),
            _ => {}
        }
    }
    first_err.map_or(Ok(total), Err)
}

/// Tells the sink when the measured window starts and ends, at the schedule's instants
/// (before the drain, the thread joins and the merging), so observers cover the same span
/// as the load's `duration_s`.
struct WindowSignal {
    start: Instant,
    end: Instant,
    started: bool,
    ended: bool,
}

impl WindowSignal {
    fn new(t0: Instant, sched: &Schedule) -> Self {
        WindowSignal {
            start: t0 + Duration::from_nanos(sched.warmup_end_ns),
            end: t0 + Duration::from_nanos(sched.measure_end_ns),
            started: false,
            ended: false,
        }
    }

    /// Fires what is due by now.
    fn fire_due(&mut self, sink: &mut dyn IntervalSink) {
        let now = Instant::now();
        if !self.started && now >= self.start {
            self.started = true;
            sink.window_started();
        }
        if self.started && !self.ended && now >= self.end {
            self.ended = true;
            sink.window_ended();
        }
    }

    /// The load stopped early (or its threads ended): a started window ends now.
    fn stopped(&mut self, sink: &mut dyn IntervalSink) {
        if self.started && !self.ended {
            self.ended = true;
            sink.window_ended();
        }
    }

    /// How long the merger may block: until the next signal, at most 50 ms.
    fn wait(&self) -> Duration {
        let next = match (self.started, self.ended) {
            (false, _) => self.start,
            (true, false) => self.end,
            (true, true) => return Duration::from_millis(50),
        };
        next.saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50))
    }
}

/// One interval some threads have reported: their figures summed, their histograms merged.
/// Their histograms stay counts until the last thread's arrive: rebuilt at once, an interval
/// a slow thread held back kept two ~200 KB histograms each (a soak's heap grew 416 KB).
struct Pending {
    /// Their figures summed (without the counts, kept below).
    msg: IntervalMsg,
    /// Each thread's latencies from the intended send time, in order of arrival.
    hist: Vec<Counts>,
    /// Open loop: each thread's latencies from the actual send time, in order of arrival.
    uncorrected: Vec<Counts>,
}

/// Histograms the merger rebuilds the threads' intervals into, reused from one second to
/// the next so the engine does not allocate two ~200 KB histograms per thread per second
/// either.
struct HistPool {
    sched: Arc<Schedule>,
    /// Empty histograms as [`Schedule::new_hist`] makes them.
    spare: Vec<Histogram<u64>>,
    /// The counts array length of a histogram that never grew.
    fresh_len: usize,
}

/// Spare histograms the merger keeps: it rebuilds one interval at a time, into at most four
/// (a merged pair and a scratch one for each).
const SPARE_HISTS_MAX: usize = 4;

impl HistPool {
    fn new(sched: &Arc<Schedule>) -> Self {
        HistPool {
            sched: sched.clone(),
            spare: Vec::new(),
            fresh_len: sched.new_hist().distinct_values(),
        }
    }

    /// The histogram the thread would have sent: a fresh one with `counts` recorded.
    fn rebuilt(&mut self, counts: &Counts) -> Histogram<u64> {
        let mut h = self.spare.pop().unwrap_or_else(|| self.sched.new_hist());
        counts.replay(&mut h);
        h
    }

    /// Takes `h` back once read. One that grew past the usual range (an outlier) is dropped,
    /// not kept: a reused histogram must be exactly a fresh one, its range included, since
    /// the interval log writes the range and merging depends on it.
    fn give(&mut self, mut h: Histogram<u64>) {
        let fresh = h.high() == self.sched.hist_max_ns && h.distinct_values() == self.fresh_len;
        if fresh && self.spare.len() < SPARE_HISTS_MAX {
            h.reset();
            self.spare.push(h);
        }
    }

    /// Adds `counts` to `into` as adding the thread's own histogram did.
    fn add(&mut self, into: &mut Histogram<u64>, counts: &Counts) {
        let h = self.rebuilt(counts);
        let _ = into.add(&h);
        self.give(h);
    }
}

/// Merges the threads' intervals into per-second lines and the window's histograms.
struct Merger {
    threads: usize,
    sched: Arc<Schedule>,
    pending: BTreeMap<usize, Pending>,
    pool: HistPool,
    hist: Histogram<u64>,
    uncorrected: Option<Histogram<u64>>,
    totals: Vec<Totals>,
}

impl Merger {
    fn new(config: &LoadConfig, sched: &Arc<Schedule>) -> Self {
        Merger {
            threads: config.threads,
            sched: sched.clone(),
            pending: BTreeMap::new(),
            pool: HistPool::new(sched),
            hist: sched.new_hist(),
            uncorrected: config.rate_rps.map(|_| sched.new_hist()),
            totals: Vec::new(),
        }
    }

    fn collect(
        &mut self,
        rx: &Receiver<Msg>,
        sink: &mut dyn IntervalSink,
        stop: &AtomicBool,
        stop_flag: &AtomicBool,
        window: &mut WindowSignal,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        loop {
            if stop.load(Relaxed) {
                stop_flag.store(true, Relaxed);
                window.stopped(sink);
            }
            window.fire_due(sink);
            match rx.recv_timeout(window.wait()) {
                Ok(Msg::Interval(m)) => self.add(*m, sink),
                Ok(Msg::Done(t)) => self.totals.push(*t),
                Ok(Msg::Ready(_)) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        window.stopped(sink);
        let rest: Vec<usize> = self.pending.keys().copied().collect();
        for index in rest {
            self.emit(index, sink);
        }
    }

    fn add(&mut self, mut m: IntervalMsg, sink: &mut dyn IntervalSink) {
        let index = m.index;
        let hist = std::mem::take(&mut m.hist);
        let uncorrected = m.uncorrected.take();
        let p = match self.pending.entry(index) {
            Entry::Vacant(slot) => slot.insert(Pending {
                msg: m,
                hist: Vec::with_capacity(self.threads),
                uncorrected: Vec::new(),
            }),
            Entry::Occupied(slot) => {
                let p = slot.into_mut();
                merge_interval(&mut p.msg, m);
                p
            }
        };
        p.hist.push(hist);
        p.uncorrected.extend(uncorrected);
        if p.hist.len() == self.threads {
            self.emit(index, sink);
        }
    }

    fn emit(&mut self, index: usize, sink: &mut dyn IntervalSink) {
        let Some(p) = self.pending.remove(&index) else {
            return;
        };
        // As the threads' histograms were merged when they sent them whole: the first to
        // arrive, the others added to it in their order of arrival.
        let hist = self.merged(p.hist).unwrap_or_else(|| self.sched.new_hist());
        let uncorrected = self.merged(p.uncorrected);
        if index >= self.sched.first_measured {
            let _ = self.hist.add(&hist);
            if let (Some(total), Some(h)) = (&mut self.uncorrected, &uncorrected) {
                let _ = total.add(h);
            }
        }
        // The line goes to the sink only: kept here, a long run's lines grew its memory
        // (about 100 bytes a second, steps of 70 and 150 KB as the vector doubled).
        let line = interval_line(&self.sched, &p.msg);
        sink.interval(&line, &hist);
        self.pool.give(hist);
        if let Some(h) = uncorrected {
            self.pool.give(h);
        }
        if self.pending.is_empty() && self.sched.take_surplus() {
            release_freed_memory();
        }
    }

    /// The threads' counts merged into one histogram (None without counts); their buffers
    /// go back to the threads.
    fn merged(&mut self, counts: Vec<Counts>) -> Option<Histogram<u64>> {
        let mut counts = counts.into_iter();
        let first = counts.next()?;
        let mut merged = self.pool.rebuilt(&first);
        self.sched.recycle_counts(first);
        for c in counts {
            self.pool.add(&mut merged, &c);
            self.sched.recycle_counts(c);
        }
        Some(merged)
    }

    fn finish(
        self,
        config: &LoadConfig,
        connect_time_s: f64,
        setup_s: f64,
        (ready_unix_ns, started_unix_ns): (i64, i64),
    ) -> LoadOutcome {
        let mut report = LoadReport {
            schema: SCHEMA_VERSION,
            url: config.url.clone(),
            connections: config.connections,
            threads: config.threads,
            depth: config.depth,
            rate_rps: config.rate_rps,
            connect_time_s,
            setup_s,
            latency_us: latency_us(&self.hist),
            uncorrected_latency_us: self.uncorrected.as_ref().map(latency_us),
            omitted: config.rate_rps.map(|_| 0),
            ..LoadReport::default()
        };
        let end_ns = self
            .totals
            .iter()
            .map(|t| t.window_end_ns)
            .max()
            .unwrap_or(0);
        report.duration_s = end_ns.saturating_sub(self.sched.warmup_end_ns) as f64 / 1e9;
        let mut per_core = Vec::new();
        let mut send_lag = config.rate_rps.map(|_| self.sched.new_hist());
        let mut handshakes: Option<Histogram<u64>> = None;
        for t in &self.totals {
            report.sent += t.sent;
            report.requests += t.requests;
            report.bytes_sent += t.bytes_sent;
            report.bytes_received += t.bytes_received;
            report.client_cpu.user_s += t.window_user_s;
            report.client_cpu.sys_s += t.window_sys_s;
            if let Some(o) = &mut report.omitted {
                *o += t.omitted;
            }
            if let (Some(all), Some(h)) = (&mut send_lag, &t.send_lag) {
                let _ = all.add(h);
            }
            if let Some(h) = &t.tls_handshake {
                let _ = handshakes
                    .get_or_insert_with(|| self.sched.new_hist())
                    .add(h);
            }
            for (k, v) in &t.errors {
                *report.errors.entry(k.clone()).or_default() += v;
            }
            per_core.push(pct(t.window_cpu_s, report.duration_s));
        }
        super::accounting::fill(&mut report, &self.totals, config);
        if let Some(h) = &handshakes {
            report.tls_handshakes = Some(h.len());
            report.tls_resumed = Some(self.totals.iter().map(|t| t.tls_resumed).sum());
            report.tls_handshake_us = Some(latency_us(h));
        }
        report.throughput_rps = if report.duration_s > 0.0 {
            report.requests as f64 / report.duration_s
        } else {
            0.0
        };
        report.grpc_stream = config
            .proto
            .grpc_stream
            .map(|shape| self.stream_figures(shape, &report));
        if let Some(lag) = &send_lag {
            let late: u64 = self.totals.iter().map(|t| t.late_sends).sum();
            report.late_sends = Some(late);
            report.send_lag_p99_us = Some(lag.value_at_quantile(0.99) as f64 / 1e3);
        }
        report.client_saturated = busy_by_cpu(config, &self.totals, report.duration_s)
            .into_iter()
            .any(|b| b > SATURATED_BUSY_PCT)
            || late_share(report.late_sends, send_lag.as_ref()) > SATURATED_LATE_SHARE;
        report.client_cpu = ClientCpu {
            per_core_busy: per_core,
            busiest_thread_pct: self
                .totals
                .iter()
                .map(|t| pct(t.window_cpu_s, report.duration_s))
                .reduce(f64::max),
            run_delay_pct: run_delay_pct(&self.totals, report.duration_s),
            ..report.client_cpu
        };
        let window_start_ns = started_unix_ns + self.sched.warmup_end_ns as i64;
        LoadOutcome {
            window_unix_ns: (window_start_ns, started_unix_ns + end_ns as i64),
            ready_unix_ns,
            report,
            hist_ns: self.hist,
        }
    }

    /// A streaming load's messages, from the threads' totals: the messages sent are each
    /// call's, the messages of a single-message reply one per successful call.
    fn stream_figures(&self, shape: GrpcStream, report: &LoadReport) -> StreamFigures {
        let mut first: Option<Histogram<u64>> = None;
        for h in self.totals.iter().filter_map(|t| t.first_message.as_ref()) {
            let _ = first.get_or_insert_with(|| self.sched.new_hist()).add(h);
        }
        let window_messages = match shape.streamed_replies {
            true => self.totals.iter().map(|t| t.window_messages).sum(),
            false => report.requests,
        };
        StreamFigures {
            messages_per_call: shape.messages_per_call,
            messages_sent: report.sent * u64::from(shape.messages_per_call),
            messages_received: self.totals.iter().map(|t| t.messages_received).sum(),
            window_messages,
            messages_per_s: match report.duration_s > 0.0 {
                true => window_messages as f64 / report.duration_s,
                false => 0.0,
            },
            first_message_us: first.as_ref().map(latency_us),
        }
    }
}

/// Gives the memory malloc holds free back to the system. Called once the engine has caught
/// up after falling behind: the buffers the threads allocated meanwhile are free again, and
/// glibc would otherwise keep each arena at its high-water mark for the rest of the run (a
/// soak's RSS stepped up after each moment the engine fell behind and stayed there).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn release_freed_memory() {
    // SAFETY: malloc_trim only walks and releases the allocator's own free chunks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn release_freed_memory() {}

/// Busy % of each CPU of the cpuset, its threads' busy time summed (threads sharing a CPU
/// share its 100%); of each thread when unpinned.
fn busy_by_cpu(config: &LoadConfig, totals: &[Totals], duration_s: f64) -> Vec<f64> {
    let Some(cpus) = config.cpuset.as_ref().filter(|c| !c.is_empty()) else {
        return totals
            .iter()
            .map(|t| pct(t.window_cpu_s, duration_s))
            .collect();
    };
    let mut busy_s: BTreeMap<usize, f64> = BTreeMap::new();
    for t in totals {
        *busy_s.entry(cpus[t.thread % cpus.len()]).or_default() += t.window_cpu_s;
    }
    busy_s.values().map(|&s| pct(s, duration_s)).collect()
}

/// The threads' run-queue wait over the window, summed, % of the window (None when a thread
/// had no schedstat).
fn run_delay_pct(totals: &[Totals], duration_s: f64) -> Option<f64> {
    let waits: Option<Vec<f64>> = totals.iter().map(|t| t.window_run_delay_s).collect();
    // Not capped at 100 as busy % is: several threads can wait at once.
    waits
        .filter(|w| !w.is_empty() && duration_s > 0.0)
        .map(|w| 100.0 * w.iter().sum::<f64>() / duration_s)
}

/// Late sends as a share of the window's scheduled sends.
fn late_share(late_sends: Option<u64>, send_lag: Option<&Histogram<u64>>) -> f64 {
    match (late_sends, send_lag.map(Histogram::len)) {
        (Some(late), Some(sends)) if sends > 0 => late as f64 / sends as f64,
        _ => 0.0,
    }
}

/// Sums `m`'s figures into `acc` (the histograms are merged apart, see [`Merger::add`]).
fn merge_interval(acc: &mut IntervalMsg, m: IntervalMsg) {
    acc.ops += m.ops;
    acc.lat_sum_ns += m.lat_sum_ns;
    acc.bytes_sent += m.bytes_sent;
    acc.bytes_received += m.bytes_received;
    acc.errors += m.errors;
    acc.inflight += m.inflight;
    acc.cpu_ns.extend(m.cpu_ns);
    acc.wall_ns = acc.wall_ns.max(m.wall_ns);
}

fn interval_line(sched: &Schedule, m: &IntervalMsg) -> IntervalLine {
    let wall_s = (m.wall_ns as f64 / 1e9).max(1e-9);
    let end_ns = sched.interval_start_ns(m.index) as f64 + m.wall_ns as f64;
    IntervalLine {
        elapsed_s: (end_ns - sched.warmup_end_ns as f64) / 1e9,
        inflight: m.inflight,
        ops_per_s: m.ops as f64 / wall_s,
        mb_per_s: m.bytes_received as f64 / 1e6 / wall_s,
        mean_latency_ms: if m.ops > 0 {
            m.lat_sum_ns as f64 / m.ops as f64 / 1e6
        } else {
            0.0
        },
        errors: m.errors,
        per_core_busy: {
            let mut by_thread = m.cpu_ns.clone();
            by_thread.sort_unstable();
            by_thread
                .iter()
                .map(|&(_, ns)| pct(ns as f64 / 1e9, wall_s))
                .collect()
        },
    }
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        (100.0 * part / whole).min(100.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    fn thread_busy(thread: usize, cpu_s: f64) -> Totals {
        Totals {
            thread,
            window_cpu_s: cpu_s,
            ..Totals::default()
        }
    }

    #[test]
    fn threads_sharing_a_cpu_are_summed_into_that_cpus_busy() {
        // Five threads each 19% busy over 1 s.
        let totals: Vec<Totals> = (0..5).map(|t| thread_busy(t, 0.19)).collect();
        let pinned = LoadConfig {
            cpuset: Some(vec![1]),
            ..LoadConfig::default()
        };
        let busy = busy_by_cpu(&pinned, &totals, 1.0);
        assert_eq!(busy.len(), 1);
        assert!((busy[0] - 95.0).abs() < 1e-9, "{busy:?}");
        let two_cpus = LoadConfig {
            cpuset: Some(vec![0, 1]),
            ..LoadConfig::default()
        };
        let busy = busy_by_cpu(&two_cpus, &totals, 1.0);
        assert!((busy[0] - 57.0).abs() < 1e-9 && (busy[1] - 38.0).abs() < 1e-9);
        // Unpinned threads may each have a CPU of their own.
        assert_eq!(busy_by_cpu(&LoadConfig::default(), &totals, 1.0).len(), 5);
    }

    /// The V2 bytes of `h` (what `--hist-log` writes, before compression).
    fn v2(h: &Histogram<u64>) -> Vec<u8> {
        use hdrhistogram::serialization::{Serializer, V2Serializer};
        let mut out = Vec::new();
        V2Serializer::new().serialize(h, &mut out).unwrap();
        out
    }

    /// Collects the V2 bytes of each interval's histogram the sink is given.
    #[derive(Default)]
    struct Logged(Vec<Vec<u8>>);

    impl IntervalSink for Logged {
        fn interval(&mut self, _: &IntervalLine, hist_ns: &Histogram<u64>) {
            self.0.push(v2(hist_ns));
        }
    }

    /// A latency: mostly 20 us to 5 ms, now and then beyond the histograms' 1 s range.
    fn latency_ns(seed: &mut u64) -> u64 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let r = *seed >> 33;
        match r % 500 {
            0 => 1_000_000_000 + r % 40_000_000_000,
            _ => 20_000 + r % 5_000_000,
        }
    }

    #[test]
    fn merged_intervals_are_the_histograms_the_threads_used_to_send_byte_for_byte() {
        use super::super::recorder::Recorder;
        let config = LoadConfig {
            threads: 3,
            rate_rps: Some(1000.0),
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(6),
            timeout: Duration::from_millis(100),
            ..LoadConfig::default()
        };
        let sched = Arc::new(Schedule::new(&config));
        assert_eq!(sched.hist_max_ns, 1_000_000_000);
        let (tx, rx) = channel();
        let mut recs: Vec<Recorder> = (0..3)
            .map(|t| Recorder::new(sched.clone(), tx.clone(), t, true))
            .collect();
        let mut merger = Merger::new(&config, &sched);
        let mut logged = Logged::default();
        // What the threads sent before: a fresh histogram per thread and interval, the first
        // to arrive merged with the others in their order of arrival.
        let mut expected: Vec<Vec<u8>> = Vec::new();
        let mut window = sched.new_hist();
        let mut window_uncorrected = sched.new_hist();
        let mut seed = 17;
        for second in 0..7u64 {
            let mut fresh: Vec<Histogram<u64>> = (0..3).map(|_| sched.new_hist()).collect();
            for (t, rec) in recs.iter_mut().enumerate() {
                for k in 0..300 + 100 * t as u64 {
                    let now = second * 1_000_000_000 + k * 1_000_000;
                    let (lat, unc) = (latency_ns(&mut seed), latency_ns(&mut seed) / 3);
                    // Thread 2 alone, at second 4, past the range (its histogram grows).
                    let lat = if second == 4 && t == 2 && k == 0 {
                        90_000_000_000
                    } else {
                        lat
                    };
                    rec.success(lat, unc, now);
                    if rec.in_window(now) {
                        let _ = fresh[t].record(lat);
                        let _ = window_uncorrected.record(unc);
                    }
                }
            }
            // A different thread arrives first each second.
            let order: Vec<usize> = (0..3).map(|i| (i + second as usize) % 3).collect();
            let mut merged: Option<Histogram<u64>> = None;
            for &t in &order {
                recs[t].cross_boundaries((second + 1) * 1_000_000_000, || 0);
                let Ok(Msg::Interval(m)) = rx.try_recv() else {
                    panic!("no interval")
                };
                merger.add(*m, &mut logged);
                let h = std::mem::replace(&mut fresh[t], sched.new_hist());
                match &mut merged {
                    None => merged = Some(h),
                    Some(acc) => acc.add(&h).unwrap(),
                }
            }
            let merged = merged.unwrap();
            if second >= 1 {
                window.add(&merged).unwrap();
                expected.push(v2(&merged));
            } else {
                expected.push(v2(&sched.new_hist()));
            }
        }
        assert_eq!(logged.0.len(), 7);
        assert!(
            expected.iter().any(|e| e[24..32] != expected[0][24..32]),
            "no interval grew"
        );
        for (i, (got, want)) in logged.0.iter().zip(&expected).enumerate() {
            // The header (range included) and the counts; only the first bytes when they differ.
            assert!(
                got == want,
                "interval {i}: {:?} vs {:?}",
                &got[..40],
                &want[..40]
            );
        }
        assert!(
            v2(&merger.hist) == v2(&window),
            "the window's histogram differs"
        );
        assert_eq!(latency_us(&merger.hist), latency_us(&window));
        let uncorrected = merger.uncorrected.as_ref().unwrap();
        assert_eq!(latency_us(uncorrected), latency_us(&window_uncorrected));
        // The merger kept what it rebuilt into, never more than its bound.
        assert!((1..=SPARE_HISTS_MAX).contains(&merger.pool.spare.len()));
    }

    #[test]
    fn more_than_one_percent_late_sends_is_saturation() {
        let mut lag = Histogram::<u64>::new(3).unwrap();
        lag.record_n(1_000, 1_000).unwrap();
        assert_eq!(late_share(Some(20), Some(&lag)), 0.02);
        assert!(late_share(Some(5), Some(&lag)) < SATURATED_LATE_SHARE);
        assert_eq!(late_share(None, None), 0.0);
    }
}
