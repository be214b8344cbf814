//! memcached's own counters as a target's metrics: its `stats` command on the port it is
//! loaded at, read at both edges of the window like any other metrics source. Counters
//! (`cmd_get`, `cmd_set`, `get_hits`, `get_misses`, `evictions`, `rusage_user`, ...) become the
//! window's differences; the values that are states, not counts (`threads`,
//! `curr_connections`, `curr_items`, ...), go under `gauges`, where the end's value is kept.
//! Each reading opens one connection of its own: `total_connections` grows by 1 and
//! `curr_connections` includes it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

/// The scheme of a memcached metrics source (the target's own url).
pub const SCHEME: &str = "memcache://";

/// Largest `stats` answer read (memcached's is about 4 KB).
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// Longest a reading may take in all.
const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// The `stats` values that are states at the moment asked, not counts since the start.
const GAUGES: &[&str] = &[
    "pid",
    "pointer_size",
    "version",
    "libevent",
    "max_connections",
    "curr_connections",
    "connection_structures",
    "reserved_fds",
    "threads",
    "curr_items",
    "bytes",
    "limit_maxbytes",
    "accepting_conns",
    "hash_power_level",
    "hash_bytes",
    "hash_is_expanding",
    "malloc_fails",
    "slab_global_page_pool",
    "slab_reassign_running",
    "lru_crawler_running",
    "total_malloced",
    "response_obj_count",
    "response_obj_bytes",
    "read_buf_count",
    "read_buf_bytes",
    "read_buf_bytes_free",
];

/// A memcached's `stats` that could not be read; the message names its URL.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// Connecting, asking or reading failed.
    #[error("{doing} {url}{what}: {source}")]
    Io {
        /// "cannot connect to", "asking", "reading".
        doing: &'static str,
        /// Its URL.
        url: String,
        /// " for its stats", "'s stats".
        what: &'static str,
        /// What the OS said.
        source: std::io::Error,
    },
    /// No whole answer in time or within the size bound.
    #[error("{url}: no whole stats answer within {} s and {} KiB ({bytes} bytes came)", ANSWER_WAIT.as_secs(), MAX_ANSWER_BYTES >> 10)]
    Incomplete {
        /// Its URL.
        url: String,
        /// Bytes read.
        bytes: usize,
    },
    /// It closed mid-answer.
    #[error("{0} closed during its stats answer")]
    Closed(String),
    /// The answer is not `STAT` lines.
    #[error("{url}'s stats: {why}")]
    Answer {
        /// Its URL.
        url: String,
        /// What is wrong with the answer.
        why: BadStats,
    },
}

/// An answer to `stats` that is not `STAT name value` lines up to `END`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BadStats {
    /// Not UTF-8.
    #[error("not text")]
    NotText,
    /// A line that is not a STAT line.
    #[error("{0:?} is not a STAT line")]
    Line(String),
    /// No STAT line at all.
    #[error("no STAT line")]
    Empty,
}

/// `stats` of the memcached at `addr` (its `url`, `memcache://HOST:PORT`, names it in errors)
/// as a metrics document.
pub fn stats(addr: SocketAddr, url: &str) -> Result<Value, StatsError> {
    let io = |doing, what| {
        move |source| StatsError::Io {
            doing,
            url: url.into(),
            what,
            source,
        }
    };
    let until = Instant::now() + ANSWER_WAIT;
    let mut stream = TcpStream::connect_timeout(&addr, ANSWER_WAIT)
        .map_err(io("cannot connect to", " for its stats"))?;
    let _ = stream.set_write_timeout(Some(ANSWER_WAIT));
    stream
        .write_all(b"stats\r\n")
        .map_err(io("asking", " for its stats"))?;
    let answer = read_answer(url, &mut stream, until)?;
    parse_stats(&answer).map_err(|why| StatsError::Answer {
        url: url.into(),
        why,
    })
}

/// Reads until the `END` line, bounded in bytes and time.
fn read_answer(url: &str, stream: &mut TcpStream, until: Instant) -> Result<Vec<u8>, StatsError> {
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    while !answer.ends_with(b"END\r\n") {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || answer.len() > MAX_ANSWER_BYTES {
            return Err(StatsError::Incomplete {
                url: url.into(),
                bytes: answer.len(),
            });
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => return Err(StatsError::Closed(url.into())),
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(StatsError::Io {
                    doing: "reading",
                    url: url.into(),
                    what: "'s stats",
                    source: e,
                })
            }
        }
    }
    Ok(answer)
}

/// `STAT name value` lines up to `END` as `{name: value, ..., "gauges": {...}}`: numbers as
/// numbers, other values as strings.
pub fn parse_stats(answer: &[u8]) -> Result<Value, BadStats> {
    let text = std::str::from_utf8(answer).map_err(|_| BadStats::NotText)?;
    let (mut counters, mut gauges) = (Map::new(), Map::new());
    for line in text.split("\r\n").take_while(|l| *l != "END") {
        let mut words = line.splitn(3, ' ');
        let (Some("STAT"), Some(name), Some(value)) = (words.next(), words.next(), words.next())
        else {
            return Err(BadStats::Line(line.to_string()));
        };
        let value = value_of(value);
        if GAUGES.contains(&name) {
            gauges.insert(name.to_string(), value);
        } else {
            counters.insert(name.to_string(), value);
        }
    }
    if counters.is_empty() {
        return Err(BadStats::Empty);
    }
    counters.insert("gauges".into(), Value::Object(gauges));
    Ok(Value::Object(counters))
}

fn value_of(text: &str) -> Value {
    if let Ok(n) = text.parse::<u64>() {
        return Value::from(n);
    }
    match text.parse::<f64>() {
        Ok(x) if x.is_finite() => Value::from(x),
        _ => Value::from(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_become_counters_and_gauges() {
        let answer = b"STAT pid 7\r\nSTAT uptime 12\r\nSTAT rusage_user 0.250000\r\nSTAT version 1.6.18\r\nSTAT threads 4\r\nSTAT curr_connections 3\r\nSTAT cmd_get 100\r\nSTAT get_hits 90\r\nEND\r\n";
        let v = parse_stats(answer).unwrap();
        assert_eq!(v["cmd_get"], 100);
        assert_eq!(v["rusage_user"], 0.25);
        assert_eq!(v["gauges"]["threads"], 4);
        assert_eq!(v["gauges"]["version"], "1.6.18");
        assert!(v.get("threads").is_none());
        assert!(parse_stats(b"ERROR\r\n").is_err());
        assert!(parse_stats(b"END\r\n").is_err());
    }
}
