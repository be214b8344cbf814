//! The machine's processes and their parents, listed once for all of a window's sampling
//! threads. The sockets, the tree watch, the next hop and the thread states each need the
//! server tree's processes as they come and go; listing them reads every process on the
//! machine (2-3 ms on a quiet one), and each thread listing on its own clock every half
//! second cost about 1.5% of a CPU between them. A listing younger than the asker's bound is
//! shared instead; each thread's first listing is its own, so that a process started just
//! before the window is in it, and the sockets thread lists afresh every half second (the
//! block-I/O delay of a process per connection is read there).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::machine::procfs;

/// Each process's parent (pid → ppid), as listed at one time.
pub type Parents = Arc<BTreeMap<i32, i32>>;

/// A listing: of which proc tree, begun when, and what it found.
type Listing = Option<(PathBuf, Instant, Parents)>;

/// The latest listing of this process's observers.
static LATEST: Mutex<Listing> = Mutex::new(None);

/// Every process's parent under `proc_root`: the latest listing when it began less than
/// `max_age` ago, else listed now (`Duration::ZERO` always lists).
pub fn parents(proc_root: &Path, max_age: Duration) -> Parents {
    parents_in(&LATEST, proc_root, max_age)
}

/// [`parents`], the latest listing kept in `latest`.
fn parents_in(latest: &Mutex<Listing>, proc_root: &Path, max_age: Duration) -> Parents {
    // A panic in another sampling thread while it listed leaves a listing as good as any.
    let mut latest = latest.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((root, at, parents)) = latest.as_ref() {
        if root == proc_root && at.elapsed() < max_age {
            return Arc::clone(parents);
        }
    }
    let began = Instant::now();
    let parents = Arc::new(procfs::parent_map(proc_root));
    *latest = Some((proc_root.to_path_buf(), began, Arc::clone(&parents)));
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
}
