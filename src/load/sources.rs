//! Source addresses and connection pacing: `--source-addrs` and `--connect-rate`.
//!
//! One source address can hold at most one connection per local port to a given destination,
//! so a load of more connections than the ephemeral port range
//! (`/proc/sys/net/ipv4/ip_local_port_range`, 28,232 ports by default) needs several source
//! addresses. Each connection's socket is bound to its source before it connects, with
//! `IP_BIND_ADDRESS_NO_PORT` so the kernel picks the port at connect time per (source,
//! destination) rather than at bind time per source alone. Connections take the sources
//! round-robin. When the destination is IPv4 loopback and no source is given, the sources
//! are spread over 127.0.0.0/8 (127.0.0.1, .2, ...) as many as the connections need.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::socket::{
    self, setsockopt, sockopt, AddressFamily, SockFlag, SockType, SockaddrStorage,
};

use super::LoadError;

/// Most addresses one `--source-addrs` range may name.
const MAX_RANGE: u128 = 1 << 16;

/// Share of the ephemeral port range one source is planned to fill (per mille): the rest is
/// left to the machine's other connections (and to ports in TIME_WAIT).
const PORT_SHARE_PERMILLE: u64 = 900;

/// How the load's connections are opened.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConnectOptions {
    /// Local addresses to connect from, taken round-robin (empty: the kernel's choice, or
    /// 127.0.0.0/8 spread automatically when loopback needs it).
    pub source_addrs: Vec<IpAddr>,
    /// Connections opened per second in total (paced, spread over the threads); `None` opens
    /// them all at once.
    pub connect_rate: Option<f64>,
}

impl ConnectOptions {
    /// Per thread of `threads`: the gap between two connection opens, if paced.
    pub fn gap_per_thread(&self, threads: usize) -> Option<Duration> {
        self.connect_rate
            .map(|r| Duration::from_secs_f64(threads.max(1) as f64 / r))
    }
}

/// `--source-addrs` as given on the command line.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceAddrs(pub Vec<IpAddr>);

/// A `--source-addrs` item that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bad source address {item:?} in {list:?}: {why}")]
pub struct SourceAddrError {
    /// The item (an address or a range `A-B`).
    item: String,
    /// The whole list it stands in.
    list: String,
    /// What is wrong with it.
    why: BadRange,
}

/// What is wrong with one item of `--source-addrs`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadRange {
    /// Not an IPv4 or IPv6 address.
    #[error("not an IP address")]
    NotAnAddress,
    /// An IPv4 end and an IPv6 end.
    #[error("a range's ends must be of one family")]
    MixedFamilies,
    /// `B` below `A`.
    #[error("the range ends before it starts")]
    Backwards,
    /// More addresses than [`MAX_RANGE`].
    #[error("a range holds at most {max} addresses", max = MAX_RANGE)]
    TooLarge,
}

impl std::str::FromStr for SourceAddrs {
    type Err = SourceAddrError;

    fn from_str(s: &str) -> Result<Self, SourceAddrError> {
        parse_source_addrs(s).map(SourceAddrs)
    }
}

/// Parses `--source-addrs`: addresses and ranges `A-B` (inclusive, one family), separated by
/// commas, e.g. `127.0.0.2-127.0.0.9` or `10.0.0.1,10.0.0.5`.
pub fn parse_source_addrs(s: &str) -> Result<Vec<IpAddr>, SourceAddrError> {
    let mut addrs = Vec::new();
    for item in s.split(',').map(str::trim) {
        let bad = |why: BadRange| SourceAddrError {
            item: item.to_string(),
            list: s.to_string(),
            why,
        };
        let ip = |t: &str| {
            t.trim()
                .parse::<IpAddr>()
                .map_err(|_| bad(BadRange::NotAnAddress))
        };
        match item.split_once('-') {
            None => addrs.push(ip(item)?),
            Some((a, b)) => addrs.extend(range(ip(a)?, ip(b)?).map_err(bad)?),
        }
    }
    Ok(addrs)
}

/// The addresses from `a` to `b` inclusive.
fn range(a: IpAddr, b: IpAddr) -> Result<Vec<IpAddr>, BadRange> {
    let (lo, hi) = match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u32::from(a) as u128, u32::from(b) as u128),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b)),
        _ => return Err(BadRange::MixedFamilies),
    };
    if hi < lo {
        return Err(BadRange::Backwards);
    }
    if hi - lo >= MAX_RANGE {
        return Err(BadRange::TooLarge);
    }
    Ok((lo..=hi)
        .map(|n| match a {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(n as u32)),
            IpAddr::V6(_) => IpAddr::V6(n.into()),
        })
        .collect())
}

/// The number of ports in `ip_local_port_range`'s text (`32768\t60999`).
pub fn ports_in_range(text: &str) -> Option<u64> {
    let mut it = text.split_whitespace().map(|p| p.parse::<u64>().ok());
    let (lo, hi) = (it.next()??, it.next()??);
    (hi >= lo).then(|| hi - lo + 1)
}

/// The ephemeral ports this machine gives one source per destination.
pub fn ephemeral_ports() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| ports_in_range(&t))
        .unwrap_or(28_232)
}

/// Connections one source address is planned to hold to one destination.
pub fn per_source(ports: u64) -> u64 {
    (ports * PORT_SHARE_PERMILLE / 1000).max(1)
}

/// The source addresses `connections` connections to `dest` take round-robin: `given` (checked
/// against the destination's family and the port range), or when none is given and `dest` is
/// IPv4 loopback with more connections than one source holds, 127.0.0.1 onwards as many as
/// needed; else none (the kernel picks).
pub fn plan(
    given: &[IpAddr],
    dest: SocketAddr,
    connections: usize,
    ports: u64,
) -> Result<Vec<IpAddr>, LoadError> {
    let each = per_source(ports);
    let needed = (connections as u64).div_ceil(each);
    if let Some(wrong) = given.iter().find(|a| a.is_ipv4() != dest.is_ipv4()) {
        return Err(LoadError::BadInput(format!(
            "--source-addrs: {wrong} cannot reach {dest} (another address family)"
        )));
    }
    if !given.is_empty() {
        if (given.len() as u64) < needed {
            return Err(LoadError::BadInput(format!(
                "--source-addrs: {connections} connections to one destination need {needed} source addresses ({each} each: 90% of the {ports} ephemeral ports), {} given",
                given.len()
            )));
        }
        return Ok(given.to_vec());
    }
    match dest.ip() {
        IpAddr::V4(ip) if ip.is_loopback() && needed > 1 => {
            if needed > (1 << 24) - 2 {
                return Err(LoadError::BadInput(format!(
                    "{connections} connections need more than 127.0.0.0/8's addresses"
                )));
            }
            let first = u32::from(Ipv4Addr::new(127, 0, 0, 1));
            Ok((0..needed as u32)
                .map(|k| IpAddr::V4(Ipv4Addr::from(first + k)))
                .collect())
        }
        _ => Ok(Vec::new()),
    }
}

/// The source of connection `index` (global over the threads), round-robin.
pub fn source_of(sources: &[IpAddr], index: usize) -> Option<IpAddr> {
    (!sources.is_empty()).then(|| sources[index % sources.len()])
}

/// Binds `sock` to `source` (port 0) without reserving a port: the connect picks it.
pub fn bind_source<S: AsFd>(sock: &S, source: IpAddr) -> io::Result<()> {
    if source.is_ipv4() {
        setsockopt(sock, sockopt::IpBindAddressNoPort, &true)?;
    }
    let addr = SockaddrStorage::from(SocketAddr::new(source, 0));
    socket::bind(sock.as_fd().as_raw_fd(), &addr)?;
    Ok(())
}

/// Starts a non-blocking connection to `dest` from `source` (see [`bind_source`]).
pub fn connect_from(dest: SocketAddr, source: IpAddr) -> io::Result<std::net::TcpStream> {
    let family = match dest {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    let fd = socket::socket(family, SockType::Stream, flags, None)?;
    bind_source(&fd, source)?;
    match socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(dest)) {
        Ok(()) | Err(Errno::EINPROGRESS) => Ok(std::net::TcpStream::from(fd)),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ranges_and_lists_parse() {
        let a = parse_source_addrs("127.0.0.2-127.0.0.9").unwrap();
        assert_eq!(a.len(), 8);
        assert_eq!((a[0], a[7]), (v4("127.0.0.2"), v4("127.0.0.9")));
        let a = parse_source_addrs("10.0.0.1, 10.0.0.5,127.0.0.255-127.0.1.1").unwrap();
        assert_eq!(
            a,
            [
                "10.0.0.1",
                "10.0.0.5",
                "127.0.0.255",
                "127.0.1.0",
                "127.0.1.1"
            ]
            .map(v4)
        );
        assert_eq!(parse_source_addrs("::1-::3").unwrap().len(), 3);
        for bad in [
            "",
            "127.0.0.9-127.0.0.2",
            "127.0.0.1-::1",
            "1.2.3",
            "10.0.0.0-10.1.0.0",
        ] {
            let e = parse_source_addrs(bad).unwrap_err().to_string();
            assert!(e.starts_with("bad source address"), "{bad}: {e}");
        }
    }

    #[test]
    fn port_range_arithmetic() {
        assert_eq!(ports_in_range("32768\t60999\n"), Some(28_232));
        assert_eq!(ports_in_range("40000 40000"), Some(1));
        assert_eq!(ports_in_range("6 5"), None);
        assert_eq!(ports_in_range("x"), None);
        assert_eq!(per_source(28_232), 25_408);
        assert_eq!(per_source(1), 1);
    }

    #[test]
    fn loopback_spreads_only_when_one_source_is_not_enough() {
        let dest: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        assert!(plan(&[], dest, 25_408, 28_232).unwrap().is_empty());
        let s = plan(&[], dest, 100_000, 28_232).unwrap();
        assert_eq!(
            s,
            ["127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"].map(v4)
        );
        // 100 ports: 90 a source.
        assert_eq!(plan(&[], dest, 181, 100).unwrap().len(), 3);
        // Not loopback, or IPv6: the kernel's choice (a connect error names the port range).
        let remote: SocketAddr = "10.1.2.3:80".parse().unwrap();
        assert!(plan(&[], remote, 100_000, 28_232).unwrap().is_empty());
        let v6: SocketAddr = "[::1]:80".parse().unwrap();
        assert!(plan(&[], v6, 100_000, 28_232).unwrap().is_empty());
    }

    #[test]
    fn given_sources_are_checked() {
        let dest: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let two = [v4("127.0.0.2"), v4("127.0.0.3")];
        assert_eq!(plan(&two, dest, 10, 28_232).unwrap(), two);
        let e = plan(&two, dest, 60_000, 28_232).unwrap_err().to_string();
        assert!(
            e.contains("need 3 source addresses") && e.contains("2 given"),
            "{e}"
        );
        let e = plan(&[v4("::1")], dest, 1, 28_232).unwrap_err().to_string();
        assert!(e.contains("another address family"), "{e}");
    }

    #[test]
    fn round_robin_and_pacing() {
        let s = [v4("127.0.0.2"), v4("127.0.0.3")];
        let got: Vec<_> = (0..4).map(|i| source_of(&s, i).unwrap()).collect();
        assert_eq!(got, [s[0], s[1], s[0], s[1]]);
        assert_eq!(source_of(&[], 3), None);
        let o = ConnectOptions {
            connect_rate: Some(1000.0),
            ..Default::default()
        };
        assert_eq!(o.gap_per_thread(2), Some(Duration::from_millis(2)));
        assert_eq!(ConnectOptions::default().gap_per_thread(2), None);
    }
}
