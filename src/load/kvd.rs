//! `kvd://NAME[,NAME...]`: load on `serve kvd` daemons through their shared-memory slots
//! (several names: client i uses daemon i mod names, so one load drives every rank). Each
//! connection is a client thread holding `--depth` slots (1 by default: the benchkv study's QD 1),
//! drawing keys from the whole key space (`--keys`, default keys-per-rank × ranks, so most
//! requests of a multi-rank run are remote) with its own generator seeded `seed × 1000 + i`.
//! A GET of a key never SET is a miss (counted, not an error); a request whose owner rank is
//! down is an error of kind `peer_down`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use super::engine::{ThreadBody, Threads};
use super::protocol::redis::{KeySpace, SplitMix64};
use super::recorder::{Msg, Recorder, Schedule};
use super::shm::key_width;
use super::{LoadConfig, LoadError, LoadOutcome};
use crate::record::load::IntervalSink;
use crate::record::load::RequestError;
use crate::wire::kvd::{attach, ST_PEER_DOWN};
use crate::wire::shmkv::msg::{MAX_KEY, OP_GET, OP_SET, ST_NOT_FOUND, ST_OK};
use crate::wire::shmkv::per_worker::Client;
use crate::wire::shmkv::sync::pid_alive;
use crate::wire::shmkv::ShmkvError;

/// How long a client waits for the region to appear (a daemon just started).
const ATTACH_WAIT: Duration = Duration::from_secs(5);

/// Runs one load on `kvd://NAME` (called by the engine for that scheme), its warm-up started
/// at `start_at_unix_ns` when given (client groups on several hosts start together).
pub fn run(
    config: &LoadConfig,
    start_at_unix_ns: Option<i64>,
    sink: &mut dyn IntervalSink,
    stop: &AtomicBool,
) -> Result<LoadOutcome, LoadError> {
    let names = check(config)?;
    // The key space needs the daemon's rank count: read it once here.
    let keys = match config.proto.keys {
        0 => {
            let a = attach(&names[0], ATTACH_WAIT.min(config.timeout))
                .map_err(|e| LoadError::BadInput(format!("kvd://{}: {e}", names[0])))?;
            a.keys_per_rank * a.ranks as u64
        }
        k => k,
    };
    let space = KeySpace::new(keys, config.proto.distribution)
        .map_err(|e| LoadError::BadInput(e.to_string()))?;
    if key_width(keys) + 4 > MAX_KEY {
        return Err(LoadError::BadInput(format!(
            "--keys must be below 10^{}",
            MAX_KEY - 4
        )));
    }
    let mut config = LoadConfig {
        threads: config.connections,
        ..config.clone()
    };
    config.proto.keys = keys;
    let config = Arc::new(config);
    let sched = Arc::new(Schedule::new(&config));
    let stop_flag = Arc::new(AtomicBool::new(false));
    let (tx, rx) = channel();
    let bodies: Vec<ThreadBody> = (0..config.connections)
        .map(|i| {
            let name = &names[i % names.len()];
            let client = ClientThread::new(&config, name, &space, i, &sched, &stop_flag, &tx);
            Box::new(move |b, s| client.run(b, s)) as ThreadBody
        })
        .collect();
    drop(tx);
    let threads = Threads {
        bodies,
        name: "kvd",
        stop_flag,
        rx,
    };
    threads.drive(&config, &sched, start_at_unix_ns, sink, stop)
}

/// The daemons' names, once the options are known to suit a kvd client.
fn check(config: &LoadConfig) -> Result<Vec<String>, LoadError> {
    let bad = |s: String| Err(LoadError::BadInput(s));
    let names: Vec<String> = config
        .url
        .trim_start_matches("kvd://")
        .split(',')
        .map(str::to_string)
        .collect();
    for name in &names {
        if let Err(e) = crate::wire::shmkv::region_path(name) {
            return bad(format!("bad URL {:?}: {e}", config.url));
        }
    }
    if config.connections == 0 || config.duration.is_zero() || config.timeout.is_zero() {
        return bad("--connections, --duration and --timeout must be above zero".into());
    }
    if config.rate_rps.is_some() {
        return bad("kvd:// runs closed loop: drop --rate".into());
    }
    if config.depth == 0 || config.depth > crate::wire::shmkv::per_worker::CELLS {
        return bad(format!(
            "--depth must be between 1 and {} for kvd:// (slots of one daemon)",
            crate::wire::shmkv::per_worker::CELLS
        ));
    }
    super::shm::check_slot_options(config, "kvd://")?;
    Ok(names)
}

/// One request slot of a client thread.
struct Slot {
    client: Client,
    key: Vec<u8>,
    is_set: bool,
    sent: Instant,
}

/// One client thread: its slots, its key generator, its statistics.
struct ClientThread {
    name: String,
    config: Arc<LoadConfig>,
    space: KeySpace,
    stop: Arc<AtomicBool>,
    tx: Sender<Msg>,
    rng: SplitMix64,
    value: Vec<u8>,
    rec: Recorder,
}

impl ClientThread {
    fn new(
        config: &Arc<LoadConfig>,
        name: &str,
        space: &KeySpace,
        index: usize,
        sched: &Arc<Schedule>,
        stop: &Arc<AtomicBool>,
        tx: &Sender<Msg>,
    ) -> Self {
        let o = &config.proto;
        ClientThread {
            name: name.to_string(),
            config: config.clone(),
            space: space.clone(),
            stop: stop.clone(),
            tx: tx.clone(),
            rng: SplitMix64(o.seed.wrapping_mul(1000).wrapping_add(index as u64)),
            value: vec![b'x'; o.value_size],
            rec: Recorder::new(sched.clone(), tx.clone(), index, false),
        }
    }

    /// Attaches `--depth` slots.
    fn slots(&self) -> Result<Vec<Slot>, LoadError> {
        let err = |e: ShmkvError| LoadError::BadInput(format!("kvd://{}: {e}", self.name));
        let a = attach(&self.name, ATTACH_WAIT.min(self.config.timeout)).map_err(err)?;
        let width = key_width(self.config.proto.keys);
        (0..self.config.depth)
            .map(|_| {
                Ok(Slot {
                    client: Client::attach(a.region.clone()).map_err(err)?,
                    key: format!("key:{}", "0".repeat(width)).into_bytes(),
                    is_set: false,
                    sent: Instant::now(),
                })
            })
            .collect()
    }

    fn run(mut self, barrier: Arc<Barrier>, start: Arc<OnceLock<Instant>>) {
        let began = Instant::now();
        let slots = self.slots();
        let ready = match &slots {
            Ok(_) => Ok(began.elapsed().as_secs_f64()),
            Err(e) => Err(LoadError::BadInput(e.to_string())),
        };
        let _ = self.tx.send(Msg::Ready(ready));
        barrier.wait();
        let (Some(&t0), Ok(mut slots)) = (start.get(), slots) else {
            return;
        };
        self.rec.start();
        self.closed_loop(&mut slots, t0);
        self.rec.finish();
    }

    fn closed_loop(&mut self, slots: &mut [Slot], t0: Instant) {
        if let [one] = slots {
            return self.depth_one(one, t0);
        }
        let depth = slots.len() as u64;
        for s in slots.iter_mut() {
            self.send(s);
        }
        let mut now = t0.elapsed().as_nanos() as u64;
        let mut spins: u32 = 0;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                self.rec.stop_at(now);
            }
            self.rec.cross_boundaries(now, || depth);
            if now >= self.rec.end_ns {
                return;
            }
            let mut any = false;
            for s in slots.iter_mut() {
                if s.client.answered() {
                    let done = Instant::now();
                    now = (done - t0).as_nanos() as u64;
                    self.complete(s, (done - s.sent).as_nanos() as u64, now);
                    self.send(s);
                    any = true;
                }
            }
            if any {
                spins = 0;
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins & 63 == 0 {
                now = t0.elapsed().as_nanos() as u64;
                if spins & 4095 == 0 && self.waited_too_long(slots, now) {
                    return;
                }
                if spins > 1 << 16 {
                    std::thread::yield_now();
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Depth 1: the slot's own wait, which parks on a futex after a few µs (more client
    /// threads than CPUs do not starve the daemon) and notices a daemon gone.
    fn depth_one(&mut self, s: &mut Slot, t0: Instant) {
        let mut now = t0.elapsed().as_nanos() as u64;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                self.rec.stop_at(now);
            }
            self.rec.cross_boundaries(now, || 1);
            if now >= self.rec.end_ns {
                return;
            }
            self.send(s);
            let waited = s.client.wait_answer(self.config.timeout);
            let done = Instant::now();
            now = (done - t0).as_nanos() as u64;
            match waited {
                Ok(()) => self.complete(s, (done - s.sent).as_nanos() as u64, now),
                Err(e) => {
                    let kind = match e {
                        ShmkvError::Timeout => RequestError::Timeout,
                        _ => RequestError::ServerStopped,
                    };
                    self.rec.error(kind, now);
                    // The slot cannot be reused: stop here.
                    return;
                }
            }
        }
    }

    /// Counts a slot unanswered past `--timeout` (or a daemon gone) as an error; true when
    /// the thread must stop (its slots cannot be reused).
    fn waited_too_long(&mut self, slots: &mut [Slot], now: u64) -> bool {
        let region = slots[0].client.region();
        let h = region.header();
        let gone = h.stopping.load(Ordering::Relaxed) != 0
            || !pid_alive(h.server_pid.load(Ordering::Relaxed));
        let late = slots
            .iter()
            .any(|s| s.sent.elapsed() >= self.config.timeout);
        if !gone && !late {
            return false;
        }
        let kind = if gone {
            RequestError::ServerStopped
        } else {
            RequestError::Timeout
        };
        for s in slots.iter_mut().filter(|s| !s.client.answered()) {
            self.rec.error(kind, now);
            s.client.abandon();
        }
        true
    }

    /// Draws the next key into the slot and posts its request.
    fn send(&mut self, s: &mut Slot) {
        let o = &self.config.proto;
        let k = self.space.draw(&mut self.rng);
        s.is_set = o.read_ratio < 1.0 && self.rng.next_f64() >= o.read_ratio;
        let mut v = k;
        for b in s.key[4..].iter_mut().rev() {
            *b = b'0' + (v % 10) as u8;
            v /= 10;
        }
        let (op, value) = if s.is_set {
            (OP_SET, &self.value[..])
        } else {
            (OP_GET, &[][..])
        };
        s.sent = Instant::now();
        // The slot is answered (or fresh): posting cannot fail.
        let _ = s.client.send(op, &s.key, value);
        self.rec.sent();
    }

    fn complete(&mut self, s: &Slot, latency_ns: u64, now: u64) {
        let resp = s.client.response();
        match resp.status {
            ST_OK | ST_NOT_FOUND => {
                if !s.is_set {
                    self.rec.lookup(resp.status == ST_OK, now);
                }
                let sent = s.key.len() + if s.is_set { self.value.len() } else { 0 };
                self.rec.bytes_out(sent, now);
                self.rec.bytes_in(resp.value_len as usize, now);
                self.rec.success(latency_ns, latency_ns, now);
            }
            ST_PEER_DOWN => self.rec.error(RequestError::PeerDown, now),
            _ => self.rec.error(RequestError::BadRequest, now),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_kvd_client_cannot_honour_are_refused() {
        let ok = LoadConfig {
            url: "kvd://x".into(),
            ..LoadConfig::default()
        };
        assert_eq!(check(&ok).unwrap(), ["x"]);
        let two = LoadConfig {
            url: "kvd://a,a-r1".into(),
            ..ok.clone()
        };
        assert_eq!(check(&two).unwrap(), ["a", "a-r1"]);
        let msg = |c: LoadConfig| check(&c).unwrap_err().to_string();
        assert!(msg(LoadConfig {
            rate_rps: Some(10.0),
            ..ok.clone()
        })
        .contains("--rate"));
        assert!(msg(LoadConfig {
            depth: 65,
            ..ok.clone()
        })
        .contains("--depth"));
        assert!(msg(LoadConfig {
            url: "kvd://a/b".into(),
            ..ok.clone()
        })
        .contains("bad region name"));
    }
}
