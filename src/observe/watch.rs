//! The server's process tree sampled while a window runs (every [`WATCH_EVERY`], or less often
//! when a sample costs more than [`BUDGET_SHARE`] of the time to the next), so tasks
//! born after the window's first snapshot and gone before its last (a process per
//! connection: PostgreSQL's backends) still show in the per-thread evidence, with their CPU
//! up to their last sample.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::machine::procfs;
use crate::machine::threads::TaskSample;

/// How often the tree is sampled during a window, at most (see [`BUDGET_SHARE`]).
pub const WATCH_EVERY: Duration = Duration::from_millis(100);
/// How often the tree's processes are listed, at most: listing reads every process on the
/// machine (a few ms on a busy one), reading the tree's own tasks much less; a task's counters
/// add up from its start, so one found late loses nothing, and only the time between its
/// last sample and its end goes unsampled.
pub const LIST_EVERY: Duration = Duration::from_millis(500);
/// The sampling's CPU budget, in share of one CPU, for the tree's tasks and for the listing
/// each: past it, they are spaced further. (One budget for both spaced the task reads by the
/// listing's cost: a CI run beside other tests left 25% of a process-per-connection server's
/// CPU unsampled.)
pub const BUDGET_SHARE: f64 = 0.005;

/// A thread sampling one tree until [`TreeWatch::finish`].
#[derive(Debug)]
pub struct TreeWatch {
    stop: mpsc::Sender<()>,
    handle: JoinHandle<Watched>,
}

/// What the samples saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Watched {
    /// Every task seen, at its last sample, by (pid, tid).
    pub last: BTreeMap<(i32, i32), TaskSample>,
    /// Samples taken.
    pub samples: u64,
    /// CPU the sampling thread used, in seconds.
    pub cpu_s: f64,
}

impl TreeWatch {
    /// Starts sampling the tree rooted at `root`.
    pub fn start(root: i32) -> std::io::Result<TreeWatch> {
        let (stop, stopped) = mpsc::channel::<()>();
        let handle = std::thread::Builder::new()
            .name("observe-watch".into())
            .spawn(move || {
                let proc_root = Path::new("/proc");
                let mut seen = Watched::default();
                let mut pids = Vec::new();
                let mut listing = super::Paced::new(LIST_EVERY, BUDGET_SHARE);
                let mut reads = super::Paced::new(WATCH_EVERY, BUDGET_SHARE);
                reads.not_before(Instant::now() + WATCH_EVERY);
                while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(reads.wait())
                {
                    let now = Instant::now();
                    if listing.due(now) {
                        // The first listing fresh: a process started just before is watched.
                        let max_age = if seen.samples == 0 {
                            Duration::ZERO
                        } else {
                            LIST_EVERY
                        };
                        pids = listing.run(now, || super::listing::tree(proc_root, root, max_age));
                    }
                    if !proc_root.join(root.to_string()).exists() {
                        break;
                    }
                    reads.run(now, || {
                        for &pid in &pids {
                            for (tid, task) in procfs::read_tasks(proc_root, pid) {
                                seen.last.insert((pid, tid), task);
                            }
                        }
                    });
                    seen.samples += 1;
                }
                seen.cpu_s = super::thread_cpu_s();
                seen
            })?;
        Ok(TreeWatch { stop, handle })
    }

    /// Stops sampling; what was seen.
    pub fn finish(self) -> Watched {
        let _ = self.stop.send(());
        self.handle.join().unwrap_or_default()
    }
}

/// The tasks at the window's end, with those that ended inside it at their last sample
/// added: the `after` of a window's per-thread deltas. Also how many were added.
pub fn with_ended(
    after: &BTreeMap<(i32, i32), TaskSample>,
    watched: &Watched,
) -> (BTreeMap<(i32, i32), TaskSample>, u64) {
    let mut all = after.clone();
    let mut ended = 0;
    for (key, task) in &watched.last {
        if !all.contains_key(key) {
            all.insert(*key, task.clone());
            ended += 1;
        }
    }
    (all, ended)
}

/// `after` with the context switches of the tasks the samples saw that were gone by the end,
/// at their last sample: a process per connection (PostgreSQL's backends) blocks and wakes for
/// every request, and its switches would otherwise be lost with it.
pub fn with_ended_switches(after: &procfs::TreeSample, watched: &Watched) -> procfs::TreeSample {
    let mut all = after.clone();
    for (key, task) in &watched.last {
        all.threads
            .entry(*key)
            .or_insert((task.voluntary_cs, task.involuntary_cs));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(name: &str, run_ms: u64) -> TaskSample {
        TaskSample {
            name: name.into(),
            run_ns: Some(run_ms * 1_000_000),
            wait_ns: Some(0),
            ..TaskSample::default()
        }
    }

    #[test]
    fn tasks_gone_by_the_end_count_at_their_last_sample() {
        let after = BTreeMap::from([((1, 1), task("postgres", 50))]);
        let watched = Watched {
            last: BTreeMap::from([
                ((1, 1), task("postgres", 40)),
                ((7, 7), task("postgres", 300)),
                ((8, 8), task("postgres", 280)),
            ]),
            samples: 10,
            cpu_s: 0.0,
        };
        let (all, ended) = with_ended(&after, &watched);
        assert_eq!(ended, 2);
        // The end's own sample wins for a task alive at the end.
        assert_eq!(all[&(1, 1)].run_ns, Some(50_000_000));
        assert_eq!(all[&(7, 7)].run_ns, Some(300_000_000));
    }

    #[test]
    fn switches_of_tasks_gone_by_the_end_count_at_their_last_sample() {
        let counted = |vol: u64| TaskSample {
            voluntary_cs: vol,
            involuntary_cs: 1,
            ..TaskSample::default()
        };
        let before = procfs::TreeSample {
            threads: BTreeMap::from([((1, 1), (100, 0)), ((2, 2), (10, 0))]),
            ..procfs::TreeSample::default()
        };
        let after = procfs::TreeSample {
            threads: BTreeMap::from([((1, 1), (150, 0))]),
            ..procfs::TreeSample::default()
        };
        let watched = Watched {
            last: BTreeMap::from([
                ((1, 1), counted(140)),
                ((2, 2), counted(40)),
                ((9, 9), counted(1000)),
            ]),
            samples: 10,
            cpu_s: 0.0,
        };
        let d = procfs::tree_delta(&before, &with_ended_switches(&after, &watched));
        // 50 of the live thread (its end sample wins), 30 of the one that ended, 1000 of the
        // one born and gone inside the window; without the samples only the first 50.
        assert_eq!(d.voluntary_cs, 50 + 30 + 1000);
        assert_eq!(d.threads_lost, 0);
        assert_eq!(procfs::tree_delta(&before, &after).voluntary_cs, 50);
    }

    #[test]
    fn a_forked_child_is_seen_while_it_lives() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 0.5"])
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let watch = TreeWatch::start(me).unwrap();
        std::thread::sleep(WATCH_EVERY * 3);
        let seen = watch.finish();
        let _ = child.wait();
        assert!(seen.samples >= 1);
        assert!(
            seen.last.keys().any(|&(pid, _)| pid == child.id() as i32),
            "{:?}",
            seen.last.keys().collect::<Vec<_>>()
        );
    }
}
