//! The kvd wire: what `stairbench serve kvd` daemons say to each other over TCP, the rank
//! record in their shared-memory region, and which rank owns a key.
//!
//! Clients reach their local daemon through the shmkv region (an [`Arch::Kvd`] region is
//! one per-worker block whose worker is the daemon thread, then a [`KvdInfo`]). Daemons talk
//! over one persistent TCP connection per pair of ranks, both directions on it:
//!
//! - at connect, each side sends a hello: `SBKVD001`, its rank (u32), the byte length of
//!   its rank list (u32), the list as written (`host:port,host:port`); a list that differs
//!   from the receiver's is refused;
//! - then frames: `u32 body length`, `u8 kind` (1 request, 2 response), `u8 op or status`,
//!   `u16 key length`, `u32 id` (the sender's in-flight slot), key, value; little-endian.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wire::shmkv::msg::{MAX_KEY, MAX_VALUE};
use crate::wire::shmkv::per_worker::block_size;
use crate::wire::shmkv::region::Region;
use crate::wire::shmkv::sync::pid_alive;
pub use crate::wire::shmkv::{Arch, ShmkvError};

/// First bytes of a hello.
pub const HELLO_MAGIC: [u8; 8] = *b"SBKVD001";
/// Longest rank list a hello may carry, bytes.
pub const MAX_RANK_LIST: usize = 16 * 1024;
/// Bytes of a frame's header, its length word included.
pub const FRAME_HEADER: usize = 12;
/// Largest frame body (after the length word).
pub const MAX_BODY: usize = FRAME_HEADER - 4 + MAX_KEY + MAX_VALUE;
/// A request frame.
pub const KIND_REQUEST: u8 = 1;
/// A response frame.
pub const KIND_RESPONSE: u8 = 2;
/// Status a daemon writes back to its client when the key's owner is unreachable.
pub const ST_PEER_DOWN: u32 = 3;

/// The daemon's rank record, after the region's block.
#[repr(C)]
pub struct KvdInfo {
    /// This daemon's rank.
    pub rank: AtomicU32,
    /// How many ranks there are.
    pub ranks: AtomicU32,
    /// Keys each rank holds.
    pub keys_per_rank: AtomicU64,
}

/// The rank record of a kvd region.
pub fn info(region: &Region) -> &KvdInfo {
    // SAFETY: a kvd region has KVD_INFO_BYTES after its one block; the record is atomics.
    unsafe { region.body::<KvdInfo>(block_size()) }
}

/// Writes the rank record (before the region is published).
pub fn set_info(region: &Region, rank: u32, ranks: u32, keys_per_rank: u64) {
    let i = info(region);
    i.rank.store(rank, Ordering::Relaxed);
    i.ranks.store(ranks, Ordering::Relaxed);
    i.keys_per_rank.store(keys_per_rank, Ordering::Relaxed);
}

/// What is wrong with bytes a peer sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The hello does not start with [`HELLO_MAGIC`].
    #[error("not a kvd hello (first bytes {0:02x?})")]
    BadMagic(Vec<u8>),
    /// A length out of range.
    #[error("{what} of {len} bytes is out of range (at most {max})")]
    TooLong {
        /// Which length.
        what: &'static str,
        /// The length read.
        len: usize,
        /// The largest allowed.
        max: usize,
    },
    /// A frame kind other than request or response.
    #[error("unknown frame kind {0}")]
    BadKind(u8),
    /// The rank list is not UTF-8.
    #[error("the rank list is not text")]
    NotText,
}

/// One decoded frame, borrowing the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A request for a key the receiver owns.
    Request {
        /// The sender's in-flight slot, echoed in the response.
        id: u32,
        /// `msg::OP_GET` or `msg::OP_SET`.
        op: u8,
        /// The key.
        key: &'a [u8],
        /// The value (SET).
        value: &'a [u8],
    },
    /// The answer to a request this side sent.
    Response {
        /// The id of the request.
        id: u32,
        /// A `msg::ST_*` status.
        status: u8,
        /// The value (GET hit).
        value: &'a [u8],
    },
}

/// Appends a hello.
pub fn encode_hello(out: &mut Vec<u8>, rank: u32, ranks: &str) {
    out.extend_from_slice(&HELLO_MAGIC);
    out.extend_from_slice(&rank.to_le_bytes());
    out.extend_from_slice(&(ranks.len() as u32).to_le_bytes());
    out.extend_from_slice(ranks.as_bytes());
}

/// Bytes of a hello's fixed part (magic, rank, list length).
pub const HELLO_HEADER: usize = 16;

/// Reads a hello's fixed part: (rank, rank list length).
pub fn decode_hello_header(head: &[u8; HELLO_HEADER]) -> Result<(u32, usize), FrameError> {
    if head[..8] != HELLO_MAGIC {
        return Err(FrameError::BadMagic(head[..8].to_vec()));
    }
    let rank = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
    let len = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes")) as usize;
    if len > MAX_RANK_LIST {
        return Err(FrameError::TooLong {
            what: "rank list",
            len,
            max: MAX_RANK_LIST,
        });
    }
    Ok((rank, len))
}

/// A peer's hello, borrowing the bytes it came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello<'a> {
    /// The rank it says it is.
    pub rank: u32,
    /// Its rank list, as it wrote it.
    pub list: &'a str,
}

/// The hello at the start of `buf` and its length in bytes; `None` while it is incomplete.
/// Bytes that cannot begin a hello are refused at once (a stranger's `GET /` is not waited
/// on until the whole fixed part has come).
pub fn decode_hello(buf: &[u8]) -> Result<Option<(Hello<'_>, usize)>, FrameError> {
    let seen = buf.len().min(HELLO_MAGIC.len());
    if buf[..seen] != HELLO_MAGIC[..seen] {
        return Err(FrameError::BadMagic(buf[..seen].to_vec()));
    }
    let Some(head) = buf.get(..HELLO_HEADER) else {
        return Ok(None);
    };
    let (rank, len) = decode_hello_header(head.try_into().expect("HELLO_HEADER bytes"))?;
    let Some(text) = buf.get(HELLO_HEADER..HELLO_HEADER + len) else {
        return Ok(None);
    };
    let list = std::str::from_utf8(text).map_err(|_| FrameError::NotText)?;
    Ok(Some((Hello { rank, list }, HELLO_HEADER + len)))
}

/// How many more bytes the hello starting `buf` needs at least (0: it is whole or
/// malformed): a reader takes no byte past the hello, so nothing that follows it is lost.
pub fn hello_wants(buf: &[u8]) -> usize {
    if buf.len() < HELLO_HEADER {
        return HELLO_HEADER - buf.len();
    }
    let len = u32::from_le_bytes(buf[12..16].try_into().expect("4 bytes")) as usize;
    (HELLO_HEADER + len.min(MAX_RANK_LIST)).saturating_sub(buf.len())
}

fn header(out: &mut Vec<u8>, kind: u8, code: u8, key_len: usize, id: u32, value_len: usize) {
    let body = FRAME_HEADER - 4 + key_len + value_len;
    out.extend_from_slice(&(body as u32).to_le_bytes());
    out.push(kind);
    out.push(code);
    out.extend_from_slice(&(key_len as u16).to_le_bytes());
    out.extend_from_slice(&id.to_le_bytes());
}

/// Appends a request frame (key and value already checked against the record sizes).
pub fn encode_request(out: &mut Vec<u8>, id: u32, op: u8, key: &[u8], value: &[u8]) {
    header(out, KIND_REQUEST, op, key.len(), id, value.len());
    out.extend_from_slice(key);
    out.extend_from_slice(value);
}

/// Appends a response frame.
pub fn encode_response(out: &mut Vec<u8>, id: u32, status: u8, value: &[u8]) {
    header(out, KIND_RESPONSE, status, 0, id, value.len());
    out.extend_from_slice(value);
}

/// The first frame of `buf` and its length in bytes, `None` while it is incomplete.
pub fn decode(buf: &[u8]) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let body = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if !(FRAME_HEADER - 4..=MAX_BODY).contains(&body) {
        return Err(FrameError::TooLong {
            what: "a frame",
            len: body,
            max: MAX_BODY,
        });
    }
    if buf.len() < 4 + body {
        return Ok(None);
    }
    let (kind, code) = (buf[4], buf[5]);
    let key_len = u16::from_le_bytes([buf[6], buf[7]]) as usize;
    let id = u32::from_le_bytes(buf[8..12].try_into().expect("4 bytes"));
    let payload = &buf[FRAME_HEADER..4 + body];
    if key_len > payload.len() || key_len > MAX_KEY {
        return Err(FrameError::TooLong {
            what: "a key",
            len: key_len,
            max: MAX_KEY.min(payload.len()),
        });
    }
    let (key, value) = payload.split_at(key_len);
    let frame = match kind {
        KIND_REQUEST => Frame::Request {
            id,
            op: code,
            key,
            value,
        },
        KIND_RESPONSE if key_len == 0 => Frame::Response {
            id,
            status: code,
            value,
        },
        KIND_RESPONSE => {
            return Err(FrameError::TooLong {
                what: "a response's key",
                len: key_len,
                max: 0,
            })
        }
        k => return Err(FrameError::BadKind(k)),
    };
    Ok(Some((frame, 4 + body)))
}

/// The key's number: its trailing decimal digits (`key:0042` is 42), `None` without any.
pub fn key_number(key: &[u8]) -> Option<u64> {
    let digits = key.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    std::str::from_utf8(&key[key.len() - digits..])
        .ok()?
        .parse()
        .ok()
}

/// (owning rank, slot in that rank's table) of key number `k`: rank k mod ranks.
pub fn owner(k: u64, ranks: u32) -> (u32, u64) {
    ((k % ranks as u64) as u32, k / ranks as u64)
}

/// A kvd daemon's region as a client sees it.
pub struct Attached {
    /// The region.
    pub region: Arc<Region>,
    /// Number of ranks.
    pub ranks: u32,
    /// Keys each rank holds.
    pub keys_per_rank: u64,
}

/// Attaches to the region of the daemon `name`, waiting up to `wait` for it to appear; a
/// region of another kind, or one whose daemon is gone (stale), is refused.
pub fn attach(name: &str, wait: Duration) -> Result<Attached, ShmkvError> {
    let until = Instant::now() + wait;
    let (region, arch) = loop {
        match Region::attach(name) {
            Err(ShmkvError::NotFound { .. } | ShmkvError::NotReady(_))
                if Instant::now() < until =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(ShmkvError::NotFound { path, .. }) => {
                return Err(ShmkvError::BadOption(format!(
                    "no region {path}: is `stairbench serve kvd --name {name}` running?"
                )))
            }
            other => break other?,
        }
    };
    let foreign = |why: String| ShmkvError::Foreign {
        path: region.path.clone(),
        why,
    };
    if arch != Arch::Kvd {
        return Err(foreign(format!(
            "it is a `serve shmkv --arch {}` region, not a kvd daemon's (use shm://{name})",
            arch.name()
        )));
    }
    let pid = region.header().server_pid.load(Ordering::Relaxed);
    if !pid_alive(pid) {
        return Err(foreign(format!(
            "its daemon (pid {pid}) is gone: the region is stale; restart `stairbench serve kvd --name {name}`"
        )));
    }
    let i = info(&region);
    let (ranks, keys_per_rank) = (
        i.ranks.load(Ordering::Relaxed),
        i.keys_per_rank.load(Ordering::Relaxed),
    );
    if ranks == 0 || i.rank.load(Ordering::Relaxed) >= ranks {
        return Err(foreign(format!(
            "its rank record is malformed ({ranks} ranks)"
        )));
    }
    Ok(Attached {
        region: Arc::new(region),
        ranks,
        keys_per_rank,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_wait_for_their_last_byte() {
        let mut buf = Vec::new();
        encode_request(&mut buf, 7, 2, b"key:0042", b"hello");
        encode_response(&mut buf, 9, 1, b"");
        let (f, n) = decode(&buf).unwrap().unwrap();
        assert_eq!(
            f,
            Frame::Request {
                id: 7,
                op: 2,
                key: b"key:0042",
                value: b"hello"
            }
        );
        let (g, m) = decode(&buf[n..]).unwrap().unwrap();
        assert_eq!(
            g,
            Frame::Response {
                id: 9,
                status: 1,
                value: b""
            }
        );
        assert_eq!(n + m, buf.len());
        assert_eq!(decode(&buf[..n - 1]).unwrap(), None);
    }

    #[test]
    fn malformed_frames_are_named() {
        let mut buf = vec![0u8; 16];
        buf[0..4].copy_from_slice(&(1_000_000u32).to_le_bytes());
        assert!(matches!(decode(&buf), Err(FrameError::TooLong { .. })));
        let mut bad = Vec::new();
        encode_request(&mut bad, 1, 1, b"k1", b"");
        bad[4] = 9;
        assert_eq!(decode(&bad), Err(FrameError::BadKind(9)));
        let mut long_key = Vec::new();
        encode_request(&mut long_key, 1, 1, b"k1", b"");
        long_key[6] = 200;
        assert!(matches!(decode(&long_key), Err(FrameError::TooLong { .. })));
    }

    #[test]
    fn keys_belong_to_rank_k_mod_ranks() {
        assert_eq!(key_number(b"key:0042"), Some(42));
        assert_eq!(key_number(b"abc"), None);
        assert_eq!(owner(42, 2), (0, 21));
        assert_eq!(owner(43, 2), (1, 21));
        assert_eq!(owner(5, 1), (0, 5));
    }

    #[test]
    fn hello_checks_its_magic() {
        let mut h = Vec::new();
        encode_hello(&mut h, 1, "a:1,b:2");
        let head: [u8; HELLO_HEADER] = h[..HELLO_HEADER].try_into().unwrap();
        assert_eq!(decode_hello_header(&head).unwrap(), (1, 7));
        let mut bad = head;
        bad[0] = b'X';
        assert!(decode_hello_header(&bad).is_err());
    }

    #[test]
    fn a_hello_is_read_whole_and_garbage_is_refused_at_its_first_byte() {
        let mut h = Vec::new();
        encode_hello(&mut h, 2, "a:1,b:2,c:3");
        for cut in 0..h.len() {
            assert_eq!(decode_hello(&h[..cut]), Ok(None), "{cut}");
            assert!(hello_wants(&h[..cut]) > 0, "{cut}");
        }
        let whole = decode_hello(&h).unwrap().unwrap();
        assert_eq!(
            whole.0,
            Hello {
                rank: 2,
                list: "a:1,b:2,c:3"
            }
        );
        assert_eq!((whole.1, hello_wants(&h)), (h.len(), 0));
        assert!(matches!(decode_hello(b"G"), Err(FrameError::BadMagic(_))));
        assert!(matches!(
            decode_hello(b"GET / HTTP/1.1\r\n"),
            Err(FrameError::BadMagic(_))
        ));
        let mut not_text = h.clone();
        not_text[HELLO_HEADER] = 0xff;
        assert_eq!(decode_hello(&not_text), Err(FrameError::NotText));
        let mut long = h[..HELLO_HEADER].to_vec();
        long[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            decode_hello(&long),
            Err(FrameError::TooLong { .. })
        ));
        assert_eq!(hello_wants(&long), MAX_RANK_LIST);
    }
}
