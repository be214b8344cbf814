//! `shm://NAME`: load on the shmkv server over shared memory. Each connection is a client
//! thread attached to the region, in closed loop at depth 1, each request timed with the
//! monotonic clock. The threads report per-second intervals and per-thread HdrHistograms
//! through the engine's merger, so the report is the same as for the socket protocols.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use super::engine::{ThreadBody, Threads};
use super::worker::{thread_cpu_ns, thread_rusage, IntervalMsg, Msg, Schedule, Totals};
use super::{Distribution, IntervalSink, LoadConfig, LoadError, LoadOutcome};
use crate::serve::shmkv::msg::{MAX_KEY, MAX_VALUE};
use crate::serve::shmkv::{ShmkvClient, ShmkvError};

/// How long a client waits for the region to appear (a server just started).
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// Runs one load on `shm://NAME` (called by the engine for that scheme).
pub fn run(
    config: &LoadConfig,
    sink: &mut dyn IntervalSink,
    stop: &AtomicBool,
) -> Result<LoadOutcome, LoadError> {
    let name = check(config)?;
    let config = Arc::new(LoadConfig {
        threads: config.connections,
        ..config.clone()
    });
    let sched = Arc::new(Schedule::new(&config));
    let stop_flag = Arc::new(AtomicBool::new(false));
    let (tx, rx) = channel();
    let bodies: Vec<ThreadBody> = (0..config.connections)
        .map(|i| {
            let client =
                ClientThread::new(&config, &name, i, sched.clone(), stop_flag.clone(), &tx);
            Box::new(move |b, s| client.run(b, s)) as ThreadBody
        })
        .collect();
    drop(tx);
    let threads = Threads {
        bodies,
        name: "shm",
        stop_flag,
        rx,
    };
    threads.drive(&config, &sched, sink, stop)
}

/// The server name, once the options are known to suit a shared-memory client.
fn check(config: &LoadConfig) -> Result<String, LoadError> {
    let bad = |s: String| Err(LoadError::BadInput(s));
    let name = config.url.trim_start_matches("shm://").to_string();
    if let Err(e) = crate::serve::shmkv::region_path(&name) {
        return bad(format!("bad URL {:?}: {e}", config.url));
    }
    let o = &config.proto;
    if config.connections == 0 || config.duration.is_zero() || config.timeout.is_zero() {
        return bad("--connections, --duration and --timeout must be above zero".into());
    }
    if config.depth != 1 || config.rate_rps.is_some() {
        return bad("shm:// runs closed loop at depth 1: drop --depth and --rate".into());
    }
    if o.distribution != Distribution::Uniform {
        return bad("shm:// draws keys uniformly: drop --distribution".into());
    }
    if !(0.0..=1.0).contains(&o.read_ratio) {
        return bad(format!(
            "--read-ratio must be between 0 and 1, got {}",
            o.read_ratio
        ));
    }
    if o.keys == 0 || key_width(o.keys) + 4 > MAX_KEY {
        return bad(format!("--keys must be between 1 and 10^{}", MAX_KEY - 4));
    }
    if o.value_size > MAX_VALUE {
        return bad(format!(
            "--value-size is at most {MAX_VALUE} bytes for shm://"
        ));
    }
    if config.cpuset.as_ref().is_some_and(|c| c.is_empty()) {
        return bad("--cpuset is empty".into());
    }
    Ok(name)
}

fn key_width(keys: u64) -> usize {
    (keys.max(1) - 1).to_string().len()
}

/// One client thread: its attachment, its key generator, its statistics.
struct ClientThread {
    index: usize,
    name: String,
    config: Arc<LoadConfig>,
    sched: Arc<Schedule>,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    rng: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    out: Vec<u8>,
    end_ns: u64,
    interval: usize,
    stats: Stats,
}

#[derive(Default)]
struct Stats {
    totals: Totals,
    hist: Option<hdrhistogram::Histogram<u64>>,
    ops: u64,
    lat_sum_ns: u64,
    bytes_sent: u64,
    bytes_received: u64,
    errors: u64,
    cpu_mark_ns: u64,
    window_rusage: Option<(f64, f64, f64)>,
}

impl ClientThread {
    fn new(
        config: &Arc<LoadConfig>,
        name: &str,
        index: usize,
        sched: Arc<Schedule>,
        stop: Arc<AtomicBool>,
        tx: &Sender<Msg>,
    ) -> Self {
        let o = &config.proto;
        ClientThread {
            index,
            name: name.to_string(),
            config: config.clone(),
            stop,
            tx: tx.clone(),
            rng: o.seed.wrapping_mul(1000).wrapping_add(index as u64),
            key: format!("key:{}", "0".repeat(key_width(o.keys))).into_bytes(),
            value: vec![b'x'; o.value_size],
            out: Vec::with_capacity(MAX_VALUE),
            end_ns: sched.measure_end_ns,
            interval: 0,
            stats: Stats {
                hist: Some(sched.new_hist()),
                ..Stats::default()
            },
            sched,
        }
    }

    fn run(mut self, barrier: Arc<Barrier>, start: Arc<OnceLock<Instant>>) {
        let began = Instant::now();
        let client = ShmkvClient::attach_wait(&self.name, ATTACH_WAIT.min(self.config.timeout));
        let ready = match &client {
            Ok(_) => Ok(began.elapsed().as_secs_f64()),
            Err(e) => Err(LoadError::BadInput(format!("shm://{}: {e}", self.name))),
        };
        let _ = self.tx.send(Msg::Ready(ready));
        barrier.wait();
        let (Some(&t0), Ok(mut client)) = (start.get(), client) else {
            return;
        };
        client.set_timeout(self.config.timeout);
        self.stats.cpu_mark_ns = thread_cpu_ns();
        self.closed_loop(&mut client, t0);
        self.finish();
    }

    fn closed_loop(&mut self, client: &mut ShmkvClient, t0: Instant) {
        let mut now = t0.elapsed().as_nanos() as u64;
        loop {
            if self.stop.load(Ordering::Relaxed) && now < self.end_ns {
                self.end_ns = now;
            }
            self.cross_boundaries(now);
            if now >= self.end_ns {
                return;
            }
            let is_set = self.next_request();
            let sent = Instant::now();
            let result = if is_set {
                client.set(&self.key, &self.value)
            } else {
                client.get(&self.key, &mut self.out).map(|_| ())
            };
            let done = Instant::now();
            now = (done - t0).as_nanos() as u64;
            self.stats.totals.sent += 1;
            match result {
                Ok(()) => self.complete(is_set, (done - sent).as_nanos() as u64, now),
                Err(e) => self.count_error(&e, now),
            }
        }
    }

    /// Draws the next key into `self.key`; true for a SET.
    fn next_request(&mut self) -> bool {
        let o = &self.config.proto;
        let k = splitmix(&mut self.rng) % o.keys;
        let is_set = o.read_ratio < 1.0
            && (splitmix(&mut self.rng) >> 11) as f64 / (1u64 << 53) as f64 >= o.read_ratio;
        let digits = &mut self.key[4..];
        let mut v = k;
        for b in digits.iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
        is_set
    }

    fn in_window(&self, now: u64) -> bool {
        now >= self.sched.warmup_end_ns && now < self.end_ns
    }

    fn complete(&mut self, is_set: bool, latency_ns: u64, now: u64) {
        let latency_ns = latency_ns.max(1);
        let sent = self.key.len() + if is_set { self.value.len() } else { 0 };
        let received = if is_set { 0 } else { self.out.len() };
        let s = &mut self.stats;
        s.ops += 1;
        s.lat_sum_ns += latency_ns;
        s.bytes_sent += sent as u64;
        s.bytes_received += received as u64;
        if now >= self.sched.warmup_end_ns && now < self.end_ns {
            s.totals.requests += 1;
            s.totals.bytes_sent += sent as u64;
            s.totals.bytes_received += received as u64;
            if let Some(h) = &mut s.hist {
                h.saturating_record(latency_ns);
            }
        }
    }

    fn count_error(&mut self, e: &ShmkvError, now: u64) {
        let kind = match e {
            ShmkvError::Timeout => "timeout",
            ShmkvError::Stopped => "server_stopped",
            _ => "shm_error",
        };
        self.stats.errors += 1;
        if self.in_window(now) {
            *self.stats.totals.errors.entry(kind.into()).or_default() += 1;
        }
        if matches!(e, ShmkvError::Stopped | ShmkvError::Timeout) {
            // The server is gone or stuck: retry slowly rather than count millions.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn cross_boundaries(&mut self, now: u64) {
        while let Some(&b) = self.sched.boundaries_ns.get(self.interval) {
            let end = b.min(self.end_ns);
            if now < end {
                break;
            }
            self.emit_interval(end);
            if end == self.end_ns {
                self.interval = usize::MAX;
                break;
            }
        }
        if now >= self.sched.warmup_end_ns && self.stats.window_rusage.is_none() {
            self.stats.window_rusage = Some(thread_rusage());
        }
    }

    fn emit_interval(&mut self, end_ns: u64) {
        let index = self.interval;
        let cpu_now = thread_cpu_ns();
        let fresh = self.sched.new_hist();
        let hist = if index >= self.sched.first_measured {
            std::mem::replace(self.stats.hist.as_mut().expect("hist"), fresh)
        } else {
            fresh
        };
        let s = &mut self.stats;
        let msg = IntervalMsg {
            index,
            hist,
            uncorrected: None,
            ops: std::mem::take(&mut s.ops),
            lat_sum_ns: std::mem::take(&mut s.lat_sum_ns),
            bytes_sent: std::mem::take(&mut s.bytes_sent),
            bytes_received: std::mem::take(&mut s.bytes_received),
            errors: std::mem::take(&mut s.errors),
            // Closed loop at depth 1: the connection always has its request out.
            inflight: u64::from(end_ns < self.end_ns),
            cpu_ns: vec![(self.index, cpu_now.saturating_sub(s.cpu_mark_ns))],
            wall_ns: end_ns - self.sched.interval_start_ns(index),
        };
        s.cpu_mark_ns = cpu_now;
        let _ = self.tx.send(Msg::Interval(Box::new(msg)));
        self.interval += 1;
    }

    fn finish(mut self) {
        let (u1, s1, c1) = thread_rusage();
        if let Some((u0, s0, c0)) = self.stats.window_rusage {
            self.stats.totals.window_user_s = u1 - u0;
            self.stats.totals.window_sys_s = s1 - s0;
            self.stats.totals.window_cpu_s = c1 - c0;
        }
        self.stats.totals.window_end_ns = self.end_ns;
        let totals = std::mem::take(&mut self.stats.totals);
        let _ = self.tx.send(Msg::Done(Box::new(totals)));
    }
}

/// SplitMix64: a small, fast, deterministic generator (one per client thread).
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_shm_client_cannot_honour_are_refused() {
        let ok = LoadConfig {
            url: "shm://x".into(),
            ..LoadConfig::default()
        };
        assert_eq!(check(&ok).unwrap(), "x");
        let msg = |c: LoadConfig| check(&c).unwrap_err().to_string();
        assert!(msg(LoadConfig {
            depth: 4,
            ..ok.clone()
        })
        .contains("depth 1"));
        assert!(msg(LoadConfig {
            url: "shm://a/b".into(),
            ..ok.clone()
        })
        .contains("bad region name"));
        let mut big = ok.clone();
        big.proto.value_size = MAX_VALUE + 1;
        assert!(msg(big).contains("--value-size"));
    }

    #[test]
    fn keys_are_zero_padded_and_in_range() {
        assert_eq!(key_width(1024), 4);
        assert_eq!(key_width(1), 1);
        let mut rng = 7;
        for _ in 0..1000 {
            assert!(splitmix(&mut rng) % 10 < 10);
        }
    }
}
