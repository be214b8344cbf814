//! The socket inodes a set of processes holds open, kept from one sample to the next.
//!
//! Listing a process's fds costs a tenth of reading where each one links to (1,031 fds:
//! 0.85 ms to list, 7.3 ms to read every link, measured on this project's 2-CPU machine), and
//! at a thousand connections those reads were most of a socket sample's cost. So a link is
//! read again only where it may have changed: an fd not seen before, an fd whose socket the
//! caller's latest dump no longer lists (closed, its number perhaps taken by a new one), and
//! every fd at least every [`FULL_EVERY`] reads (a socket still open elsewhere, after the fd
//! that held it was closed and its number reused, keeps the dump listing it). Counted in
//! reads, not time: a sampler spaced by its cost would otherwise read every link each time.

use std::collections::BTreeMap;
use std::path::Path;

/// The inode of an fd link's target `socket:[N]`.
pub fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// Every link is read again at least once in this many reads.
pub const FULL_EVERY: u32 = 16;

/// The socket inode behind each fd of the processes read, as last read.
#[derive(Debug, Default)]
pub struct SocketFds {
    /// The socket inode of each (pid, fd) that was a socket when read.
    by_fd: BTreeMap<(i32, i32), u64>,
    /// Reads since every link was last read.
    since_full: u32,
}

impl SocketFds {
    /// Nothing read yet: the first [`SocketFds::read`] reads every link.
    pub fn new() -> SocketFds {
        SocketFds::default()
    }

    /// The socket inodes `pids` hold now (inode → pid). An fd read before keeps its inode while
    /// `live(inode)` says the caller's latest dump lists it; other fds' links are read.
    pub fn read(
        &mut self,
        proc_root: &Path,
        pids: &[i32],
        live: impl Fn(u64) -> bool,
    ) -> BTreeMap<u64, i32> {
        let full = self.since_full == 0;
        self.since_full = (self.since_full + 1) % FULL_EVERY;
        let mut by_fd = BTreeMap::new();
        let mut held = BTreeMap::new();
        for &pid in pids {
            let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
                continue;
            };
            for fd in fds.flatten() {
                let Some(n) = fd.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                    continue;
                };
                let kept = (!full)
                    .then(|| self.by_fd.get(&(pid, n)).copied())
                    .flatten()
                    .filter(|&inode| live(inode));
                let inode = kept.or_else(|| {
                    let target = std::fs::read_link(fd.path()).ok()?;
                    socket_inode(&target.to_string_lossy())
                });
                if let Some(inode) = inode {
                    by_fd.insert((pid, n), inode);
                    held.insert(inode, pid);
                }
            }
        }
        self.by_fd = by_fd;
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A fake /proc with process 7's fds linking to `links` (fd number, target).
    fn fake_proc(dir: &Path, links: &[(i32, &str)]) {
        let fd_dir = dir.join("7/fd");
        let _ = std::fs::remove_dir_all(&fd_dir);
        std::fs::create_dir_all(&fd_dir).unwrap();
        for (n, target) in links {
            symlink(target, fd_dir.join(n.to_string())).unwrap();
        }
    }

    #[test]
    fn a_reused_fd_is_read_again_once_its_old_socket_is_gone_from_the_dump() {
        let dir = tempfile::tempdir().unwrap();
        let mut fds = SocketFds::new();
        fake_proc(
            dir.path(),
            &[(3, "socket:[100]"), (4, "/var/log/x"), (5, "socket:[101]")],
        );
        let held = fds.read(dir.path(), &[7], |_| true);
        assert_eq!(held, BTreeMap::from([(100, 7), (101, 7)]));
        // fd 5 now holds socket 102, fd 6 is new: with 101 still listed, fd 5 keeps it (its
        // link is not read); once the dump no longer lists 101, fd 5 is read again.
        fake_proc(
            dir.path(),
            &[
                (3, "socket:[100]"),
                (5, "socket:[102]"),
                (6, "socket:[103]"),
            ],
        );
        let held = fds.read(dir.path(), &[7], |_| true);
        assert_eq!(held, BTreeMap::from([(100, 7), (101, 7), (103, 7)]));
        let held = fds.read(dir.path(), &[7], |i| i != 101);
        assert_eq!(held, BTreeMap::from([(100, 7), (102, 7), (103, 7)]));
    }

    #[test]
    fn every_link_is_read_again_every_full_every_reads() {
        let dir = tempfile::tempdir().unwrap();
        let mut fds = SocketFds::new();
        fake_proc(dir.path(), &[(3, "socket:[100]")]);
        fds.read(dir.path(), &[7], |_| true);
        fake_proc(dir.path(), &[(3, "socket:[200]")]);
        for _ in 1..FULL_EVERY {
            assert_eq!(
                fds.read(dir.path(), &[7], |_| true),
                BTreeMap::from([(100, 7)])
            );
        }
        assert_eq!(
            fds.read(dir.path(), &[7], |_| true),
            BTreeMap::from([(200, 7)])
        );
    }
}
