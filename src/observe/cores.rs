//! The server's and the client's per-core busy % second by second over a step's measured
//! window, from /proc/stat (`machine::procfs`'s parser), written as the
//! `server_per_core_busy` and `client_per_core_busy` columns of `intervals/<step>.csv`: the
//! report's heat map shows where the server's cores were busy while the load ran.
//!
//! With the built-in engine a sample is taken as each of its per-second lines arrives, so
//! the busy % covers the same second as the line's throughput. An external tool's lines (if
//! it prints any) come after it ends, so then a thread samples once per second and its rows
//! are matched to the tool's lines by time at the end of the step.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::{read_proc_stat, thread_cpu_s};
use crate::machine::procfs::{self, CpuTimes};
use crate::record::load::{IntervalLine, IntervalSink};
use crate::record::rundir::{CoreRow, StepSink};

/// Reads the per-CPU times (tests give recorded samples).
pub type StatReader = Box<dyn FnMut() -> BTreeMap<usize, CpuTimes> + Send>;

/// Differences of /proc/stat between successive calls, for two cpusets.
pub struct CoreSampler {
    server: Vec<usize>,
    client: Vec<usize>,
    last: BTreeMap<usize, CpuTimes>,
    read: StatReader,
    /// CPU seconds the sampling used (so its cost is reported with the observers').
    cpu_s: f64,
}

impl CoreSampler {
    /// Starts from the current /proc/stat.
    pub fn start(server: &[usize], client: &[usize]) -> CoreSampler {
        Self::with_reader(server, client, Box::new(read_proc_stat))
    }

    /// Starts from what `read` gives.
    pub fn with_reader(server: &[usize], client: &[usize], mut read: StatReader) -> CoreSampler {
        let cpu0 = thread_cpu_s();
        let last = read();
        CoreSampler {
            server: server.to_vec(),
            client: client.to_vec(),
            last,
            read,
            cpu_s: thread_cpu_s() - cpu0,
        }
    }

    /// Busy % since the previous call (or the start).
    pub fn sample(&mut self) -> CoreRow {
        let cpu0 = thread_cpu_s();
        let now = (self.read)();
        let row = CoreRow {
            server_busy_pct: busy_of(&self.last, &now, &self.server),
            client_busy_pct: busy_of(&self.last, &now, &self.client),
        };
        self.last = now;
        self.cpu_s += thread_cpu_s() - cpu0;
        row
    }

    /// CPU seconds used so far.
    pub fn cpu_s(&self) -> f64 {
        self.cpu_s
    }
}

/// Adds the sampling's CPU to a step's `observer_cpu_s` (when the observers reported one).
pub fn add_observer_cpu(observer_cpu_s: &mut Option<f64>, cpu_s: f64) {
    if let Some(v) = observer_cpu_s {
        *v += cpu_s;
    }
}

fn busy_of(
    before: &BTreeMap<usize, CpuTimes>,
    after: &BTreeMap<usize, CpuTimes>,
    cpus: &[usize],
) -> Vec<f64> {
    let got = procfs::core_busy(before, after, cpus);
    cpus.iter()
        .map(|c| {
            got.iter()
                .find(|b| b.cpu == *c)
                .map_or(f64::NAN, |b| b.busy_pct)
        })
        .collect()
}

/// A thread sampling once per `period` until finished; each row is stamped with the seconds
/// since the start at which it ends.
pub struct Ticker {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Vec<(f64, CoreRow)>, f64)>,
}

impl Ticker {
    /// Starts sampling now.
    pub fn start(mut sampler: CoreSampler, period: Duration) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || {
            let start = Instant::now();
            let mut rows = Vec::new();
            let mut next = period;
            let mut last = Duration::ZERO;
            loop {
                while start.elapsed() < next && !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20).min(period));
                }
                let now = start.elapsed();
                let stopping = flag.load(Ordering::Relaxed);
                // The window's last part counts when it is at least half an interval long.
                if !stopping || (now - last) * 2 >= period {
                    rows.push((now.as_secs_f64(), sampler.sample()));
                    last = now;
                }
                if stopping {
                    return (rows, thread_cpu_s());
                }
                next += period;
            }
        });
        Ticker { stop, handle }
    }

    /// Stops the thread and returns its rows and the CPU seconds it used.
    pub fn finish(self) -> (Vec<(f64, CoreRow)>, f64) {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// The per-core columns of one step's measured window, started with the observers.
pub enum CoreColumns {
    /// A sample per line of a driver that reports while it runs; the window's last sample is
    /// taken when the window ends (the last line arrives after the drain), kept for that line.
    Live(CoreSampler, Option<CoreRow>),
    /// A sampling thread, and the lines the driver gave (merged with its rows at the end).
    Background {
        /// The thread.
        ticker: Ticker,
        /// The driver's lines so far.
        lines: Vec<IntervalLine>,
    },
}

impl CoreColumns {
    /// Starts at the beginning of the measured window; `live`: the driver's lines come while
    /// it runs.
    pub fn start(live: bool, server: &[usize], client: &[usize]) -> CoreColumns {
        let sampler = CoreSampler::start(server, client);
        if live {
            CoreColumns::Live(sampler, None)
        } else {
            CoreColumns::Background {
                ticker: Ticker::start(sampler, Duration::from_secs(1)),
                lines: Vec::new(),
            }
        }
    }

    /// A line of the driver: written at once with its sample (live), or kept for the end.
    pub fn line(&mut self, line: &IntervalLine, hist_ns: &Histogram<u64>, sink: &mut StepSink) {
        match self {
            CoreColumns::Live(sampler, at_end) if line.elapsed_s > 0.0 => {
                let row = at_end.take().unwrap_or_else(|| sampler.sample());
                sink.line_with_cores(line, hist_ns, Some(&row));
            }
            CoreColumns::Live(..) => sink.interval(line, hist_ns),
            CoreColumns::Background { lines, .. } => lines.push(line.clone()),
        }
    }

    /// The measured window ends now: a live sampler takes the window's last sample here, not
    /// when the last line arrives after the drain and the merging.
    pub fn end_window(&mut self) {
        if let CoreColumns::Live(sampler, at_end @ None) = self {
            *at_end = Some(sampler.sample());
        }
    }

    /// Ends the window; a background sampler's rows are merged with the driver's lines.
    /// Returns the CPU seconds the sampling used.
    pub fn finish(self, sink: &mut StepSink) -> f64 {
        let (lines, (rows, cpu_s)) = match self {
            CoreColumns::Live(sampler, _) => return sampler.cpu_s(),
            CoreColumns::Background { ticker, lines } => (lines, ticker.finish()),
        };
        let empty = Histogram::<u64>::new(3).ok();
        for (elapsed_s, line, row) in merge(lines, rows) {
            match (line, &empty) {
                (Some(line), Some(h)) => sink.line_with_cores(&line, h, row.as_ref()),
                (Some(_), None) => {}
                (None, _) => {
                    if let Some(row) = row {
                        sink.cores_only(elapsed_s, &row);
                    }
                }
            }
        }
        cpu_s
    }
}

/// One CSV row of a merged window: a driver line, a sample, or both.
type MergedRow = (f64, Option<IntervalLine>, Option<CoreRow>);

/// Pairs each driver line with the sample ending within half a second of it; the samples
/// left over become rows of their own. In time order.
pub fn merge(lines: Vec<IntervalLine>, rows: Vec<(f64, CoreRow)>) -> Vec<MergedRow> {
    let mut rows: Vec<Option<(f64, CoreRow)>> = rows.into_iter().map(Some).collect();
    let mut out: Vec<MergedRow> = Vec::new();
    for line in lines {
        let near = rows.iter().position(|r| {
            r.as_ref()
                .is_some_and(|(t, _)| (t - line.elapsed_s).abs() < 0.5)
        });
        let row = near.and_then(|i| rows[i].take()).map(|(_, r)| r);
        out.push((line.elapsed_s, Some(line), row));
    }
    out.extend(rows.into_iter().flatten().map(|(t, r)| (t, None, Some(r))));
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(user: u64, idle: u64) -> CpuTimes {
        CpuTimes {
            user,
            idle,
            ..CpuTimes::default()
        }
    }

    #[test]
    fn samples_differences_per_cpu_in_cpuset_order() {
        // cpu0 busy 3 ticks of 4 then 1 of 4; cpu1 idle; cpu7 not in /proc/stat.
        let samples = vec![
            BTreeMap::from([(0, times(0, 0)), (1, times(0, 0))]),
            BTreeMap::from([(0, times(3, 1)), (1, times(0, 4))]),
            BTreeMap::from([(0, times(4, 4)), (1, times(2, 6))]),
        ];
        let mut it = samples.into_iter();
        let mut s = CoreSampler::with_reader(
            &[1, 0],
            &[7],
            Box::new(move || it.next().unwrap_or_default()),
        );
        let first = s.sample();
        assert_eq!(first.server_busy_pct, [0.0, 75.0]);
        assert!(first.client_busy_pct[0].is_nan());
        let second = s.sample();
        assert_eq!(second.server_busy_pct, [50.0, 25.0]);
        assert_eq!(second.cells().0, "50.0 25.0");
    }

    #[test]
    fn the_last_live_line_gets_the_sample_taken_when_the_window_ended() {
        // Reads: start; line 1; window end; anything later (the drain) must not be used.
        let samples = vec![
            BTreeMap::from([(0, times(0, 0))]),
            BTreeMap::from([(0, times(1, 1))]),
            BTreeMap::from([(0, times(2, 2))]),
            BTreeMap::from([(0, times(2, 10))]),
        ];
        let mut it = samples.into_iter();
        let sampler =
            CoreSampler::with_reader(&[0], &[], Box::new(move || it.next().unwrap_or_default()));
        let mut cols = CoreColumns::Live(sampler, None);
        let CoreColumns::Live(s, _) = &mut cols else {
            unreachable!()
        };
        assert_eq!(s.sample().server_busy_pct, [50.0]);
        cols.end_window();
        cols.end_window();
        let CoreColumns::Live(s, at_end) = &mut cols else {
            unreachable!()
        };
        // 1 busy tick of 2 between line 1 and the window's end; the drain (idle) is left out.
        assert_eq!(at_end.take().map(|r| r.server_busy_pct), Some(vec![50.0]));
        assert_eq!(s.sample().server_busy_pct, [0.0]);
    }

    #[test]
    fn tool_lines_meet_their_samples_and_the_rest_get_rows() {
        let row = |b: f64| CoreRow {
            server_busy_pct: vec![b],
            client_busy_pct: vec![],
        };
        let line = |t: f64| IntervalLine {
            elapsed_s: t,
            ..IntervalLine::default()
        };
        let merged = merge(
            vec![line(2.0)],
            vec![(1.02, row(10.0)), (2.1, row(20.0)), (2.7, row(30.0))],
        );
        let shape: Vec<(f64, bool, Option<f64>)> = merged
            .iter()
            .map(|(t, l, r)| (*t, l.is_some(), r.as_ref().map(|r| r.server_busy_pct[0])))
            .collect();
        assert_eq!(
            shape,
            [
                (1.02, false, Some(10.0)),
                (2.0, true, Some(20.0)),
                (2.7, false, Some(30.0))
            ]
        );
    }

    #[test]
    fn sampling_cost_joins_the_observers_cost_when_there_is_one() {
        let mut observer_cpu_s = None;
        add_observer_cpu(&mut observer_cpu_s, 0.25);
        assert_eq!(observer_cpu_s, None);
        observer_cpu_s = Some(0.5);
        add_observer_cpu(&mut observer_cpu_s, 0.25);
        assert_eq!(observer_cpu_s, Some(0.75));
    }

    #[test]
    fn the_ticker_samples_once_per_period() {
        let ticker = Ticker::start(
            CoreSampler::with_reader(&[0], &[], Box::new(BTreeMap::new)),
            Duration::from_millis(50),
        );
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(180));
        let most = (start.elapsed().as_millis() / 50 + 1) as usize;
        let (rows, cpu_s) = ticker.finish();
        // The sampler's own CPU: seconds, not ms, so below the wall time it ran.
        let wall_s = start.elapsed().as_secs_f64();
        assert!(cpu_s < wall_s, "sampling cost {cpu_s} s in {wall_s} s");
        // At 50, 100, 150 ms (a loaded machine may add one); the last 30 ms are under half a
        // period and not counted.
        assert!((3..=most).contains(&rows.len()), "{rows:?}");
        assert!(rows.windows(2).all(|w| w[1].0 > w[0].0));
    }
}
