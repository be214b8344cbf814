//! Naming the other end of a socket a thread waits on: socket inode → its TCP endpoints
//! (sock_diag over netlink, in this process's network namespace) → the local socket that is
//! the other end (or, for a connection not yet accepted, the listener of its port) → the
//! process holding it (a scan of /proc/*/fd, once, at the window's end).
//!
//! A socket of another network namespace, a unix socket, or a table sock_diag refused is left
//! unnamed (its inode only): naming it is not needed to classify the wait as a socket wait.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::path::Path;

/// TCP state of a listening socket.
const LISTEN: u8 = 10;
/// TCP state of a socket in TIME_WAIT (no inode, and thousands of them on a busy server).
const TIME_WAIT: u8 = 6;

/// One TCP socket: its two addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Its own address.
    pub local: SocketAddr,
    /// The other end's address (unspecified for a listener).
    pub remote: SocketAddr,
    /// A listening socket.
    pub listening: bool,
}

/// Every TCP socket seen by the window's dumps, merged.
#[derive(Debug, Default, Clone)]
pub struct Table {
    /// Each socket with an inode, by inode.
    pub by_inode: BTreeMap<u64, Endpoint>,
    /// Each connection end, by (local, remote) address: its inode (0 when not yet accepted).
    pub by_pair: BTreeMap<(SocketAddr, SocketAddr), u64>,
    /// Listening sockets by port: (address, inode).
    pub listeners: BTreeMap<u16, Vec<(IpAddr, u64)>>,
}

impl Table {
    /// The connection `inode` is one a listener of this table accepted (its local port is a
    /// listening port on its address or the wildcard): the other end is a client of ours.
    pub fn accepted(&self, inode: u64) -> bool {
        let Some(e) = self.by_inode.get(&inode) else {
            return false;
        };
        !e.listening
            && self.listeners.get(&e.local.port()).is_some_and(|ls| {
                ls.iter()
                    .any(|(ip, _)| ip.is_unspecified() || *ip == e.local.ip())
            })
    }

    /// The inode of the socket at the other end of `inode`, when it is on this machine: the
    /// accepted (or connecting) end, else the listener that holds it in its accept queue.
    pub fn peer_inode(&self, inode: u64) -> Option<u64> {
        let e = self.by_inode.get(&inode)?;
        if let Some(&peer) = self.by_pair.get(&(e.remote, e.local)) {
            if peer != 0 {
                return Some(peer);
            }
        }
        let ls = self.listeners.get(&e.remote.port())?;
        ls.iter()
            .find(|(ip, _)| *ip == e.remote.ip() || ip.is_unspecified())
            .map(|&(_, ino)| ino)
    }

    fn add(&mut self, state: u8, e: Endpoint, inode: u64) {
        if state == LISTEN {
            self.listeners
                .entry(e.local.port())
                .or_default()
                .push((e.local.ip(), inode));
        } else {
            // A later dump may see the end closed (inode 0): the inode seen before stays.
            let known = self.by_pair.entry((e.local, e.remote)).or_insert(inode);
            if inode != 0 {
                *known = inode;
            }
        }
        if inode != 0 {
            self.by_inode.insert(inode, e);
        }
    }
}

pub use crate::observe::fds::socket_inode;
pub use crate::observe::sockets::diag::open;
use crate::observe::sockets::diag::{dump_each, parse_msg, walk};

/// Adds every TCP socket of both families (but TIME_WAIT's) to `table`.
pub fn dump(sock: &OwnedFd, table: &mut Table) -> io::Result<()> {
    let states: u32 = 0xFFF & !(1 << TIME_WAIT);
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        dump_each(sock, family, states, |msg| add(table, msg))?;
    }
    Ok(())
}

/// Parses one datagram of a dump into `table`; true at the dump's end.
pub fn parse(buf: &[u8], table: &mut Table) -> io::Result<bool> {
    walk(buf, &mut |msg: &[u8]| add(table, msg))
}

/// One `inet_diag_msg` into `table`: its two ends, its state and its inode.
fn add(table: &mut Table, msg: &[u8]) {
    let s = parse_msg(msg);
    let e = Endpoint {
        local: s.local,
        remote: s.remote,
        listening: s.state == LISTEN,
    };
    table.add(s.state, e, s.inode);
}

/// The process holding each of `inodes` open, from every process's fd table; it stops once
/// all are found.
pub fn owners(proc_root: &Path, inodes: &BTreeSet<u64>) -> BTreeMap<u64, i32> {
    let mut found = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return found;
    };
    for entry in entries.flatten() {
        if found.len() == inodes.len() {
            break;
        }
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Some(ino) = std::fs::read_link(fd.path())
                .ok()
                .and_then(|t| socket_inode(&t.to_string_lossy()))
            else {
                continue;
            };
            if inodes.contains(&ino) {
                found.entry(ino).or_insert(pid);
            }
        }
    }
    found
}

/// Adds the socket inodes process `pid` holds open to `into` (inode → pid).
pub fn socket_inodes_of(proc_root: &Path, pid: i32, into: &mut BTreeMap<u64, i32>) {
    let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else {
        return;
    };
    for fd in fds.flatten() {
        if let Some(ino) = std::fs::read_link(fd.path())
            .ok()
            .and_then(|t| socket_inode(&t.to_string_lossy()))
        {
            into.insert(ino, pid);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_connection_names_its_accepted_end_or_its_listener() {
        let mut t = Table::default();
        let conn = |l: &str, r: &str| Endpoint {
            local: addr(l),
            remote: addr(r),
            listening: false,
        };
        let listener = Endpoint {
            local: addr("0.0.0.0:80"),
            remote: addr("0.0.0.0:0"),
            listening: true,
        };
        t.add(LISTEN, listener, 1);
        t.add(1, conn("127.0.0.1:5000", "127.0.0.1:80"), 2);
        t.add(1, conn("127.0.0.1:80", "127.0.0.1:5000"), 3);
        // Connected, still in the accept queue: no inode at the server's end.
        t.add(1, conn("127.0.0.1:5001", "127.0.0.1:80"), 4);
        t.add(1, conn("127.0.0.1:80", "127.0.0.1:5001"), 0);
        assert_eq!(t.peer_inode(2), Some(3));
        assert_eq!(t.peer_inode(3), Some(2));
        assert_eq!(t.peer_inode(4), Some(1), "the listener holds it");
        assert!(t.accepted(3), "the server's end came through its listener");
        assert!(
            !t.accepted(2) && !t.accepted(4),
            "the client's ends did not"
        );
        assert!(!t.accepted(99));
    }

    #[test]
    fn this_processs_own_connection_is_found_and_its_owner_named() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        let mut t = Table::default();
        dump(&open().unwrap(), &mut t).unwrap();
        let local = client.local_addr().unwrap();
        let (&ino, _) = t.by_inode.iter().find(|(_, e)| e.local == local).unwrap();
        assert!(!t.accepted(ino));
        let peer = t.peer_inode(ino).unwrap();
        assert!(t.accepted(peer));
        let own = owners(Path::new("/proc"), &BTreeSet::from([peer]));
        assert_eq!(own.get(&peer), Some(&(std::process::id() as i32)));
    }
}
