//! `shm://NAME`: load on the shmkv server over shared memory. Each connection is a client
//! thread attached to the region, in closed loop at depth 1, each request timed with the
//! monotonic clock. The threads report per-second intervals and per-thread HdrHistograms
//! through the engine's merger, so the report is the same as for the socket protocols.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use super::engine::{ThreadBody, Threads};
use super::protocol::redis::SplitMix64;
use super::recorder::{Msg, Recorder, Schedule};
use super::{Distribution, LoadConfig, LoadError, LoadOutcome};
use crate::record::load::IntervalSink;
use crate::record::load::RequestError;
use crate::wire::shmkv::msg::{MAX_KEY, MAX_VALUE};
use crate::wire::shmkv::{ShmkvClient, ShmkvError};

/// How long a client waits for the region to appear (a server just started).
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// Runs one load on `shm://NAME` (called by the engine for that scheme), its warm-up started
/// at `start_at_unix_ns` when given.
pub fn run(
    config: &LoadConfig,
    start_at_unix_ns: Option<i64>,
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
    threads.drive(&config, &sched, start_at_unix_ns, sink, stop)
}

/// The server name, once the options are known to suit a shared-memory client.
fn check(config: &LoadConfig) -> Result<String, LoadError> {
    let bad = |s: String| Err(LoadError::BadInput(s));
    let name = config.url.trim_start_matches("shm://").to_string();
    if let Err(e) = crate::wire::shmkv::region_path(&name) {
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
    if o.keys == 0 || key_width(o.keys) + 4 > MAX_KEY {
        return bad(format!("--keys must be between 1 and 10^{}", MAX_KEY - 4));
    }
    check_slot_options(config, "shm://")?;
    Ok(name)
}

/// The checks every shared-memory client shares (`shm://`, `kvd://`): read ratio, value size,
/// the generator's CPUs.
pub(super) fn check_slot_options(config: &LoadConfig, scheme: &str) -> Result<(), LoadError> {
    let bad = |s: String| Err(LoadError::BadInput(s));
    let o = &config.proto;
    if !(0.0..=1.0).contains(&o.read_ratio) {
        return bad(format!(
            "--read-ratio must be between 0 and 1, got {}",
            o.read_ratio
        ));
    }
    if o.value_size > MAX_VALUE {
        return bad(format!(
            "--value-size is at most {MAX_VALUE} bytes for {scheme}"
        ));
    }
    if config.cpuset.as_ref().is_some_and(|c| c.is_empty()) {
        return bad("--cpuset is empty".into());
    }
    super::engine::check_cpus(config)
}

pub(super) fn key_width(keys: u64) -> usize {
    (keys.max(1) - 1).to_string().len()
}

/// One client thread: its attachment, its key generator, its statistics.
struct ClientThread {
    name: String,
    config: Arc<LoadConfig>,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    rng: SplitMix64,
    key: Vec<u8>,
    value: Vec<u8>,
    out: Vec<u8>,
    rec: Recorder,
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
            name: name.to_string(),
            config: config.clone(),
            stop,
            tx: tx.clone(),
            rng: SplitMix64(o.seed.wrapping_mul(1000).wrapping_add(index as u64)),
            key: format!("key:{}", "0".repeat(key_width(o.keys))).into_bytes(),
            value: vec![b'x'; o.value_size],
            out: Vec::with_capacity(MAX_VALUE),
            rec: Recorder::new(sched, tx.clone(), index, false),
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
        self.rec.start();
        self.closed_loop(&mut client, t0);
        self.rec.finish();
    }

    fn closed_loop(&mut self, client: &mut ShmkvClient, t0: Instant) {
        let mut now = t0.elapsed().as_nanos() as u64;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                self.rec.stop_at(now);
            }
            // Closed loop at depth 1: the connection always has its request out.
            self.rec.cross_boundaries(now, || 1);
            if now >= self.rec.end_ns {
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
            self.rec.sent();
            match result {
                Ok(()) => self.complete(is_set, (done - sent).as_nanos() as u64, now),
                Err(e) => self.count_error(&e, now),
            }
        }
    }

    /// Draws the next key into `self.key`; true for a SET.
    fn next_request(&mut self) -> bool {
        let o = &self.config.proto;
        let k = self.rng.next_u64() % o.keys;
        let is_set = o.read_ratio < 1.0 && self.rng.next_f64() >= o.read_ratio;
        let digits = &mut self.key[4..];
        let mut v = k;
        for b in digits.iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
        is_set
    }

    fn complete(&mut self, is_set: bool, latency_ns: u64, now: u64) {
        let sent = self.key.len() + if is_set { self.value.len() } else { 0 };
        let received = if is_set { 0 } else { self.out.len() };
        self.rec.bytes_out(sent, now);
        self.rec.bytes_in(received, now);
        self.rec.success(latency_ns, latency_ns, now);
    }

    fn count_error(&mut self, e: &ShmkvError, now: u64) {
        let kind = match e {
            ShmkvError::Timeout => RequestError::Timeout,
            ShmkvError::Stopped => RequestError::ServerStopped,
            _ => RequestError::ShmError,
        };
        self.rec.error(kind, now);
        if matches!(e, ShmkvError::Stopped | ShmkvError::Timeout) {
            // The server is gone or stuck: retry slowly rather than count millions.
            std::thread::sleep(Duration::from_millis(10));
        }
    }
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
    fn keys_are_zero_padded() {
        assert_eq!(key_width(1024), 4);
        assert_eq!(key_width(1), 1);
    }
}
