//! SO_REUSEPORT listeners: one per event loop on the same port, so the kernel spreads
//! connections over the loops and no loop hands a connection to another.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sys::socket::{self, sockopt, AddressFamily, SockFlag, SockType};

/// Opens `count` listeners on `addr` with SO_REUSEPORT. Port 0 picks a free port for the
/// first one, and the others join it.
pub fn reuseport_listeners(
    addr: SocketAddr,
    count: usize,
) -> std::io::Result<Vec<mio::net::TcpListener>> {
    let mut addr = addr;
    let mut listeners = Vec::with_capacity(count);
    for _ in 0..count {
        let listener = reuseport_listener(addr)?;
        addr = listener.local_addr()?;
        listeners.push(listener);
    }
    Ok(listeners)
}

fn reuseport_listener(addr: SocketAddr) -> std::io::Result<mio::net::TcpListener> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let fd: OwnedFd = socket::socket(family, SockType::Stream, flags, None)?;
    socket::setsockopt(&fd, sockopt::ReuseAddr, &true)?;
    // Set before bind: the kernel only groups sockets that all asked for it.
    socket::setsockopt(&fd, sockopt::ReusePort, &true)?;
    bind(&fd, addr)?;
    // The largest backlog: a staircase opens hundreds of connections at once.
    socket::listen(&fd, socket::Backlog::MAXCONN)?;
    let std_listener = std::net::TcpListener::from(fd);
    Ok(mio::net::TcpListener::from_std(std_listener))
}

/// bind(2) on a std address (nix converts addresses only with its `net` feature, unused here).
fn bind(fd: &OwnedFd, addr: SocketAddr) -> std::io::Result<()> {
    // SAFETY: both sockaddr structs are plain data, zero is a valid start, and the length
    // passed matches the struct given.
    let rc = unsafe {
        match addr {
            SocketAddr::V4(a) => {
                let mut sa: libc::sockaddr_in = std::mem::zeroed();
                sa.sin_family = libc::AF_INET as libc::sa_family_t;
                sa.sin_port = a.port().to_be();
                sa.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
                let len = std::mem::size_of_val(&sa) as libc::socklen_t;
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in).cast(),
                    len,
                )
            }
            SocketAddr::V6(a) => {
                let mut sa: libc::sockaddr_in6 = std::mem::zeroed();
                sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sa.sin6_port = a.port().to_be();
                sa.sin6_addr.s6_addr = a.ip().octets();
                sa.sin6_flowinfo = a.flowinfo();
                sa.sin6_scope_id = a.scope_id();
                let len = std::mem::size_of_val(&sa) as libc::socklen_t;
                libc::bind(
                    fd.as_raw_fd(),
                    (&sa as *const libc::sockaddr_in6).cast(),
                    len,
                )
            }
        }
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listeners_share_one_port() {
        let ls = reuseport_listeners("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let port = ls[0].local_addr().unwrap().port();
        assert_ne!(port, 0);
        for l in &ls {
            assert_eq!(l.local_addr().unwrap().port(), port);
        }
        let ip = ls[0].local_addr().unwrap().ip();
        assert_eq!(ip, std::net::Ipv4Addr::LOCALHOST);
    }

    #[test]
    fn busy_port_is_an_error() {
        let plain = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(reuseport_listeners(plain.local_addr().unwrap(), 1).is_err());
    }
}
