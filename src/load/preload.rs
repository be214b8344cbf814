//! `--preload`: stores every key of a redis or memcached key space before the load, so that
//! its GETs measure lookups that find something (on an empty server every GET is a miss).

use std::io::{self, Read, Write};
use std::net::TcpStream;

use super::protocol::{Preload, Reply};
use super::target::Target;
use super::{LoadConfig, LoadError};

/// SETs pipelined per write: enough to amortise the round trip, bounded in memory.
const BATCH: u64 = 1000;

/// Preloads the target when asked; returns the SETs written (they count in `sent`).
pub(super) fn run(config: &LoadConfig, target: &Target) -> Result<u64, LoadError> {
    if !config.proto.preload {
        return Ok(0);
    }
    let (Some(space), Some(mut proto)) = (target.redis_keys(), target.preloader(&config.proto))
    else {
        return Ok(0);
    };
    let mut stream =
        TcpStream::connect_timeout(&target.addr, config.timeout).map_err(|source| {
            LoadError::Connect {
                addr: target.addr.to_string(),
                error: source,
            }
        })?;
    stream
        .set_read_timeout(Some(config.timeout))
        .map_err(failed)?;
    let mut from = 0;
    while from < space.keys() {
        let to = (from + BATCH).min(space.keys());
        let mut batch = Vec::new();
        for key in from..to {
            batch.extend_from_slice(proto.set_of(key));
        }
        stream.write_all(&batch).map_err(failed)?;
        read_replies(&mut stream, proto.as_mut(), to - from)?;
        from = to;
    }
    Ok(space.keys())
}

/// Reads `n` replies, each of which must be a success.
fn read_replies(stream: &mut TcpStream, proto: &mut dyn Preload, n: u64) -> Result<(), LoadError> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let (mut start, mut done) = (0, 0);
    while done < n {
        match proto.parse_reply(&buf[start..]) {
            Reply::Done {
                len, error: None, ..
            } => {
                start += len;
                done += 1;
            }
            Reply::Done { len, .. } => {
                let text = String::from_utf8_lossy(&buf[start..start + len]);
                return Err(failed(io::Error::other(format!(
                    "the server refused a SET: {}",
                    text.trim()
                ))));
            }
            Reply::Invalid(kind) => return Err(failed(io::Error::other(kind.as_str()))),
            Reply::Incomplete => {
                buf.drain(..start);
                start = 0;
                let k = stream.read(&mut chunk).map_err(failed)?;
                if k == 0 {
                    return Err(failed(io::ErrorKind::UnexpectedEof.into()));
                }
                buf.extend_from_slice(&chunk[..k]);
            }
        }
    }
    Ok(())
}

fn failed(source: io::Error) -> LoadError {
    LoadError::Io {
        context: "preloading the key space (--preload)".into(),
        source,
    }
}
