//! The machine's processes and their parents, listed once for all of a window's sampling
//! threads. The sockets, the tree watch, the next hop and the thread states each need the
//! server tree's processes as they come and go; listing them reads every process on the
//! machine (2-3 ms on a quiet one), and each thread listing on its own clock every half
//! second cost about 1.5% of a CPU between them. A listing younger than the asker's bound is
//! shared instead; each thread's first listing is its own, so that a process started just
//! before the window is in it, and the sockets thread lists afresh every half second (the
//! block-I/O delay of a process per connection is read there).
//!
//! "Afresh" costs one small read while nothing on the machine began or ended: a listing is
//! the machine's for as long as /proc/loadavg's last pid and task count stay as they were
//! when it began (a new task takes a pid; an ended one lowers the count, and only an ended
//! parent moves its children to another). A machine that runs only the benchmark lists
//! once a window instead of twice a second.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::machine::procfs;

/// Each process's parent (pid → ppid), as listed at one time.
pub type Parents = Arc<BTreeMap<i32, i32>>;

/// A listing: of which proc tree, begun when, the process table's [`mark`] then, and what
/// it found.
type Listing = Option<(PathBuf, Instant, Option<Mark>, Parents)>;

/// /proc/loadavg's last pid allocated and count of tasks (threads) that exist.
type Mark = (u64, u64);

/// The process table's mark under `proc_root` (None where loadavg cannot be read).
fn mark(proc_root: &Path) -> Option<Mark> {
    let text = std::fs::read_to_string(proc_root.join("loadavg")).ok()?;
    let f: Vec<&str> = text.split_whitespace().collect();
    let tasks = f.get(3)?.split_once('/')?.1.parse().ok()?;
    Some((f.get(4)?.parse().ok()?, tasks))
}

/// The latest listing of this process's observers.
static LATEST: Mutex<Listing> = Mutex::new(None);

/// Every process's parent under `proc_root`: the latest listing when it began less than
/// `max_age` ago or nothing began or ended since, else listed now.
pub fn parents(proc_root: &Path, max_age: Duration) -> Parents {
    parents_in(&LATEST, proc_root, max_age)
}

/// [`parents`], the latest listing kept in `latest`.
fn parents_in(latest: &Mutex<Listing>, proc_root: &Path, max_age: Duration) -> Parents {
    // A panic in another sampling thread while it listed leaves a listing as good as any.
    let mut latest = latest.lock().unwrap_or_else(|e| e.into_inner());
    // Read before listing: a task that begins while the listing runs changes the next mark.
    let now = mark(proc_root);
    if let Some((root, at, then, parents)) = latest.as_ref() {
        let unchanged = now.is_some() && *then == now;
        if root == proc_root && (at.elapsed() < max_age || unchanged) {
            return Arc::clone(parents);
        }
    }
    let began = Instant::now();
    let parents = Arc::new(procfs::parent_map(proc_root));
    *latest = Some((proc_root.to_path_buf(), began, now, Arc::clone(&parents)));
    parents
}

/// The processes of the tree rooted at `root` (itself first), from [`parents`].
pub fn tree(proc_root: &Path, root: i32, max_age: Duration) -> Vec<i32> {
    procfs::descendants(root, &parents(proc_root, max_age))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc holding one process `pid` whose parent is `ppid`.
    fn fake_proc(dir: &Path, pid: i32, ppid: i32) {
        std::fs::create_dir_all(dir.join(pid.to_string())).unwrap();
        let stat =
            format!("{pid} (x) S {ppid} {pid} {pid} 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 100 0 0");
        std::fs::write(dir.join(format!("{pid}/stat")), stat).unwrap();
    }

    #[test]
    fn a_listing_younger_than_the_bound_is_shared_and_an_older_one_is_listed_again() {
        let dir = tempfile::tempdir().unwrap();
        let latest = Mutex::new(None);
        let tree = |max_age| procfs::descendants(10, &parents_in(&latest, dir.path(), max_age));
        fake_proc(dir.path(), 10, 1);
        assert_eq!(tree(Duration::ZERO), vec![10]);
        fake_proc(dir.path(), 11, 10);
        assert_eq!(tree(Duration::from_secs(3600)), vec![10], "shared");
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            tree(Duration::from_millis(10)),
            vec![10, 11],
            "listed again"
        );
        // Another proc tree's listing is never shared.
        let other = tempfile::tempdir().unwrap();
        fake_proc(other.path(), 10, 1);
        let theirs = parents_in(&latest, other.path(), Duration::from_secs(3600));
        assert!(!theirs.contains_key(&11));
    }

    #[test]
    fn a_listing_is_kept_while_no_task_began_or_ended() {
        let dir = tempfile::tempdir().unwrap();
        let latest = Mutex::new(None);
        let tree = || procfs::descendants(10, &parents_in(&latest, dir.path(), Duration::ZERO));
        let loadavg = |last_pid: u32, tasks: u32| {
            let text = format!("0.50 0.40 0.30 1/{tasks} {last_pid}\n");
            std::fs::write(dir.path().join("loadavg"), text).unwrap();
        };
        fake_proc(dir.path(), 10, 1);
        loadavg(10, 1);
        assert_eq!(tree(), vec![10]);
        // Nothing began or ended by the marks: the listing stands, even asked afresh.
        fake_proc(dir.path(), 11, 10);
        assert_eq!(tree(), vec![10]);
        // A task began (the last pid moved): listed again.
        loadavg(11, 2);
        assert_eq!(tree(), vec![10, 11]);
        // A task ended and another began with the count unchanged: the pid moved.
        fake_proc(dir.path(), 12, 11);
        loadavg(12, 2);
        assert_eq!(tree(), vec![10, 11, 12]);
        // One ended (the count fell): listed again, its child now init's.
        std::fs::remove_dir_all(dir.path().join("11")).unwrap();
        fake_proc(dir.path(), 12, 1);
        loadavg(12, 1);
        assert_eq!(tree(), vec![10]);
    }
}
