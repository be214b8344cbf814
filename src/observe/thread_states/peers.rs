//! Naming the other end of a socket a thread waits on: socket inode → its TCP endpoints
//! (sock_diag over netlink, in this process's network namespace) → the local socket that is
//! the other end (or, for a connection not yet accepted, the listener of its port) → the
//! process holding it (a scan of /proc/*/fd, once, at the window's end).
//!
//! A socket of another network namespace, a unix socket, or a table sock_diag refused is left
//! unnamed (its inode only): naming it is not needed to classify the wait as a socket wait.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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

/// A netlink sock_diag socket in this thread's network namespace.
pub fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// struct nlmsghdr.
const HDR: usize = 16;
/// struct inet_diag_req_v2.
const REQ: usize = 56;
/// struct inet_diag_msg.
const MSG: usize = 72;

/// Adds every TCP socket of both families (but TIME_WAIT's) to `table`.
pub fn dump(sock: &OwnedFd, table: &mut Table) -> io::Result<()> {
    for family in [libc::AF_INET as u8, libc::AF_INET6 as u8] {
        dump_family(sock, family, table)?;
    }
    Ok(())
}

fn dump_family(sock: &OwnedFd, family: u8, table: &mut Table) -> io::Result<()> {
    let mut req = [0u8; HDR + REQ];
    req[0..4].copy_from_slice(&((HDR + REQ) as u32).to_ne_bytes());
    req[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[HDR] = family;
    req[HDR + 1] = libc::IPPROTO_TCP as u8;
    let states: u32 = 0xFFF & !(1 << TIME_WAIT);
    req[HDR + 4..HDR + 8].copy_from_slice(&states.to_ne_bytes());
    // SAFETY: sockaddr_nl is plain data; zero is the kernel's address.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: sendto(2) with a buffer and an address that outlive the call.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            std::ptr::addr_of!(kernel).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: recv(2) into a buffer we own, at most its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if parse(&buf[..n as usize], table)? {
            return Ok(());
        }
    }
}

/// Parses one datagram of a dump into `table`; true at the dump's end.
pub fn parse(mut buf: &[u8], table: &mut Table) -> io::Result<bool> {
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while buf.len() >= HDR {
        let len = u32_at(buf, 0) as usize;
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        if len < HDR || len > buf.len() {
            return Err(io::Error::other("sock_diag: a truncated message"));
        }
        match kind {
            NLMSG_DONE => return Ok(true),
            NLMSG_ERROR => return Err(io::Error::other("sock_diag: the kernel refused the dump")),
            _ => {}
        }
        let msg = &buf[HDR..len];
        if msg.len() >= MSG {
            let port = |i: usize| u16::from_be_bytes([msg[i], msg[i + 1]]);
            let e = Endpoint {
                local: SocketAddr::new(ip(msg[0], &msg[8..24]), port(4)),
                remote: SocketAddr::new(ip(msg[0], &msg[24..40]), port(6)),
                listening: msg[1] == LISTEN,
            };
            table.add(msg[1], e, u64::from(u32_at(msg, 68)));
        }
        buf = &buf[((len + 3) & !3).min(buf.len())..];
    }
    Ok(false)
}

/// An address of `family` from sock_diag's 16 bytes; an IPv4-mapped IPv6 address as IPv4, so
/// both ends of a connection compare equal.
fn ip(family: u8, b: &[u8]) -> IpAddr {
    if family == libc::AF_INET as u8 {
        return IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]));
    }
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[..16]);
    let v6 = Ipv6Addr::from(a);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
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

/// The inode of an fd link's target `socket:[N]`.
pub fn socket_inode(target: &str) -> Option<u64> {
    target
        .strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
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
