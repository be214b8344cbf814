//! Per-thread counters of a server and the line it prints every few seconds: total ops/s
//! and each thread's busy %, from the thread's own CPU clock (so an idle-spinning poller
//! would show as busy, and a thread blocked in epoll_wait does not).

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::{Duration, Instant};

/// What one server thread did; written by that thread only, read by the reporter.
#[derive(Debug)]
pub struct ThreadStat {
    /// Thread name, as the OS sees it (perf merges threads by it).
    pub name: String,
    /// Requests this thread completed.
    pub ops: AtomicU64,
    /// Turns of the thread's loop (event-loop wake-ups, or jobs taken by a worker).
    pub loops: AtomicU64,
    cpu_clock: OnceLock<libc::clockid_t>,
}

impl ThreadStat {
    /// A counter for the thread called `name`.
    pub fn new(name: String) -> Arc<ThreadStat> {
        Arc::new(ThreadStat {
            name,
            ops: AtomicU64::new(0),
            loops: AtomicU64::new(0),
            cpu_clock: OnceLock::new(),
        })
    }

    /// Called once by the thread itself, so others can read its CPU clock.
    pub fn register_current_thread(&self) {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self is always valid for the calling thread; clock is a valid out pointer.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
        if rc == 0 {
            let _ = self.cpu_clock.set(clock);
        }
    }

    /// Adds `n` completed requests.
    pub fn add_ops(&self, n: u64) {
        self.ops.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one turn of the thread's loop.
    pub fn add_loop(&self) {
        self.loops.fetch_add(1, Ordering::Relaxed);
    }

    /// CPU time the thread has used, in nanoseconds; `None` before it registered or after it exited.
    pub fn cpu_ns(&self) -> Option<u64> {
        let clock = *self.cpu_clock.get()?;
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid out pointer; a stale clock id makes the call fail, not misbehave.
        let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
        (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }
}

/// A snapshot taken at one instant, to difference with the next.
struct Sample {
    at: Instant,
    ops: u64,
    cpu_ns: Vec<Option<u64>>,
}

fn sample(threads: &[Arc<ThreadStat>]) -> Sample {
    Sample {
        at: Instant::now(),
        ops: threads.iter().map(|t| t.ops.load(Ordering::Relaxed)).sum(),
        cpu_ns: threads.iter().map(|t| t.cpu_ns()).collect(),
    }
}

/// Formats one report line from two samples.
fn line(start: Instant, prev: &Sample, now: &Sample, threads: &[Arc<ThreadStat>]) -> String {
    let wall_s = now.at.duration_since(prev.at).as_secs_f64().max(1e-9);
    let ops_per_s = (now.ops - prev.ops) as f64 / wall_s;
    let elapsed_s = now.at.duration_since(start).as_secs_f64();
    let mut out = format!("{elapsed_s:6.1}s {ops_per_s:>11.0} ops/s  busy%");
    for (i, t) in threads.iter().enumerate() {
        // A thread that started after the previous sample has used its CPU since then.
        let busy = match (prev.cpu_ns[i].unwrap_or(0), now.cpu_ns[i]) {
            (a, Some(b)) => format!("{:.0}", b.saturating_sub(a) as f64 / 1e9 / wall_s * 100.0),
            (_, None) => "-".to_string(),
        };
        let _ = write!(out, " {}={busy}", t.name);
    }
    out
}

/// Prints a line on stderr every `interval` until `stop` is dropped or sent to.
pub fn spawn_reporter(
    threads: Vec<Arc<ThreadStat>>,
    interval: Duration,
    stop: mpsc::Receiver<()>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("msgr-report".into())
        .spawn(move || {
            let start = Instant::now();
            let mut prev = sample(&threads);
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(interval) {
                let now = sample(&threads);
                let _ = writeln!(std::io::stderr(), "{}", line(start, &prev, &now, &threads));
                prev = now;
            }
        })
}

/// The metrics file's JSON: `{"threads": {name: {"busy_ns", "loops", "ops"}}}` (totals since
/// the start; whoever reads it twice takes the difference).
pub fn metrics_json(threads: &[Arc<ThreadStat>]) -> serde_json::Value {
    let mut by_name = serde_json::Map::new();
    for t in threads {
        by_name.insert(
            t.name.clone(),
            serde_json::json!({
                "busy_ns": t.cpu_ns(),
                "loops": t.loops.load(Ordering::Relaxed),
                "ops": t.ops.load(Ordering::Relaxed),
            }),
        );
    }
    serde_json::json!({
        "threads": by_name,
        // observe::metrics::WRITTEN_FIELD (the layers keep serve from importing observe).
        "written_unix_ns": unix_now_ns(),
    })
}

/// Now, in nanoseconds since the Unix epoch: the metrics file says when it was written, so a
/// reader knows which span two readings cover whatever the file's mtime.
fn unix_now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Writes `metrics_json` to `path` now, whole: a temporary file beside it (`FILE.tmp`)
/// renamed over it, so a reader never sees half a file.
pub fn write_metrics(path: &std::path::Path, threads: &[Arc<ThreadStat>]) -> std::io::Result<()> {
    write_json(path, &metrics_json(threads))
}

/// Writes `value` to `path` whole: `FILE.tmp` renamed over it.
pub fn write_json(path: &std::path::Path, value: &serde_json::Value) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, value.to_string())?;
    std::fs::rename(&tmp, path)
}

/// Lets the calling thread run on every CPU its cgroup allows, whatever affinity the
/// process was started with (the kernel drops the CPUs the cgroup does not allow).
pub fn run_on_any_cpu() -> nix::Result<()> {
    let mut all = nix::sched::CpuSet::new();
    for cpu in 0..nix::sched::CpuSet::count() {
        all.set(cpu)?;
    }
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &all)
}

/// Writes the metrics file now, then every `interval` until `stop` is dropped or sent to.
pub fn spawn_metrics_writer(
    threads: Vec<Arc<ThreadStat>>,
    path: std::path::PathBuf,
    interval: Duration,
    stop: mpsc::Receiver<()>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    write_metrics(&path, &threads)?;
    std::thread::Builder::new()
        .name("msgr-metrics".into())
        .spawn(move || {
            // A split instance's process is confined to its reactor's one busy core: off it,
            // the rewrites do not wait for the reactor's time slices.
            let _ = run_on_any_cpu();
            // No last write at the end: the threads are gone by then and their CPU clocks with them.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(interval) {
                if let Err(e) = write_metrics(&path, &threads) {
                    eprintln!("msgr: cannot write {}: {e}", path.display());
                }
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_clock_advances_with_work() {
        let stat = ThreadStat::new("t".into());
        stat.register_current_thread();
        let before = stat.cpu_ns().unwrap();
        // Spin until the clock shows 5 ms of CPU, bounded by 2 s of wall time: on a loaded
        // machine 20 ms of wall time may hold less than 5 ms on a CPU. A clock that does not
        // advance (a wall clock would, a wrong thread's clock would not) fails at the bound.
        let mut x = 0u64;
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until && stat.cpu_ns().unwrap() <= before + 5_000_000 {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        assert!(stat.cpu_ns().unwrap() > before + 5_000_000);
    }

    #[test]
    fn metrics_file_holds_each_threads_counters() {
        let stat = ThreadStat::new("w".into());
        stat.register_current_thread();
        stat.add_ops(3);
        stat.add_loop();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        write_metrics(&path, &[stat]).unwrap();
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(v["threads"]["w"]["ops"], 3);
        assert_eq!(v["threads"]["w"]["loops"], 1);
        assert!(v["threads"]["w"]["busy_ns"].as_u64().unwrap() > 0);
    }

    /// CPUs the thread behind `handle` may run on.
    fn affinity_of(handle: &std::thread::JoinHandle<()>) -> Vec<usize> {
        use std::os::unix::thread::JoinHandleExt;
        // SAFETY: the thread is alive (joined only later); set is a valid out buffer of the size given.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            libc::pthread_getaffinity_np(handle.as_pthread_t(), size, &mut set);
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect()
        }
    }

    #[test]
    fn metrics_writer_leaves_the_core_it_was_started_on() {
        let allowed = crate::cpuset::allowed();
        if allowed.len() < 2 {
            crate::machine::skip_test("one CPU allowed, nowhere else to run");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.json");
        let (tx, rx) = mpsc::channel();
        let every = Duration::from_millis(50);
        let spawner = std::thread::spawn(move || {
            // As when the process is confined to its reactor's core.
            crate::cpuset::pin_current_thread(allowed[0]).unwrap();
            spawn_metrics_writer(Vec::new(), path, every, rx).unwrap()
        });
        let writer = spawner.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut cpus = affinity_of(&writer);
        while cpus.len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            cpus = affinity_of(&writer);
        }
        drop(tx);
        writer.join().unwrap();
        let allowed = crate::cpuset::allowed();
        assert!(
            allowed.iter().all(|c| cpus.contains(c)),
            "{cpus:?} ⊉ {allowed:?}"
        );
    }

    #[test]
    fn line_reports_rate_and_busy() {
        let threads = vec![ThreadStat::new("a".into()), ThreadStat::new("b".into())];
        let t0 = Instant::now();
        let prev = Sample {
            at: t0,
            ops: 0,
            cpu_ns: vec![Some(0), None],
        };
        let now = Sample {
            at: t0 + Duration::from_secs(2),
            ops: 2000,
            cpu_ns: vec![Some(1_000_000_000), None],
        };
        let text = line(t0, &prev, &now, &threads);
        assert!(text.contains(" 1000 ops/s"), "{text}");
        assert!(text.contains("a=50 b=-"), "{text}");
    }
}
