//! HTTP/2 generator threads (`h2c://`, `--http2` on `http://` or, over TLS with `h2` chosen by
//! ALPN, on `https://`).
//!
//! They run on the same mio loop as HTTP/1.1 ([`super::worker`], with an [`H2Session`] per
//! connection: [`session`]), each socket (plain or TLS, the
//! sans-I/O rustls of [`super::transport`]) carrying a sans-I/O HTTP/2 client connection
//! ([`conn`]): framing, flow control, stream limits, RST_STREAM and GOAWAY written here, HPACK
//! by [`crate::wire::hpack`]. They record through the same recorder as every other
//! thread: one HdrHistogram per thread, the per-second intervals, the window,
//! `sent`/`resent` and errors by kind. The cost per request is measured against h2load by
//! `bench/vs_h2load.sh`.
//!
//! Why not the `h2` crate (used until 2026-11): it needs tokio's I/O, so each HTTP/2 thread
//! ran a tokio runtime of its own, and its per-frame allocations, locks and tasks cost
//! 1.3-1.4x h2load's CPU per request; half of stairbench's CPU was in `h2`, tokio and `bytes`.

mod conn;
pub mod probe;
mod session;

pub(super) use session::H2Session;

use super::target::Target;
use super::LoadError;

/// HTTP/2's ALPN protocol name.
const H2_ALPN: &[u8] = b"h2";

/// The sentence for a TLS server that chose `alpn` rather than `h2`.
fn not_h2(host: &str, alpn: Option<&[u8]>) -> String {
    let chose = match alpn {
        Some(p) => format!("chose {} by ALPN", String::from_utf8_lossy(p)),
        None => "chose no protocol by ALPN".to_string(),
    };
    format!("{host} does not speak HTTP/2 over TLS (the server {chose}): drop --http2 for HTTP/1.1")
}

/// After the probe's handshake: the server must have chosen `h2`.
pub(super) fn check_alpn(target: &Target, alpn: Option<&[u8]>) -> Result<(), LoadError> {
    match &target.tls {
        Some(tls) if alpn != Some(H2_ALPN) => Err(LoadError::BadInput(not_h2(tls.host(), alpn))),
        _ => Ok(()),
    }
}

/// For the `h2_conn` fuzz target: a client connection (depth 8) fed `input` as all a server
/// sent, in reads of 1-64 bytes (sized by the first byte, whose top bit makes it a gRPC
/// connection: every response's framing and status read), opening streams whenever it may
/// and cancelling the oldest now and then. Checks its stream accounting and that it holds
/// at most [`conn::MAX_HELD_BYTES`] of the server's bytes after each read;
/// the connection error it ended with, if any.
#[doc(hidden)]
pub fn fuzz_client_connection(input: &[u8]) -> Result<(), crate::record::load::RequestError> {
    const DEPTH: usize = 8;
    let Some((&first, input)) = input.split_first() else {
        return Ok(());
    };
    let read = (first as usize % 64) + 1;
    let mut c = conn::H2Conn::<u64>::new(DEPTH);
    // Half the inputs as gRPC connections, half of those with streamed replies.
    c = match (first & 0x80 != 0, first & 0x40 != 0) {
        (false, _) => c,
        (true, false) => c.grpc(),
        (true, true) => c.grpc_streamed(),
    };
    let mut block = Vec::new();
    let request = http::Request::get("http://fuzz/")
        .body(())
        .expect("a request");
    conn::encode_request(&request, &mut block);
    let (mut opened, mut ended) = (0u64, 0u64);
    let mut events = Vec::new();
    let mut cancelled = Vec::new();
    for (n, chunk) in input.chunks(read).enumerate() {
        while c.can_open(DEPTH) {
            c.open(&block, None, opened);
            opened += 1;
        }
        if n % 7 == 6 {
            c.cancel_where(|&tag| tag + 4 < opened, &mut cancelled);
        }
        let result = c.receive_at(chunk, n as u64 + 1, &mut events);
        ended += events.drain(..).count() as u64 + cancelled.drain(..).count() as u64;
        assert_eq!(opened, ended + c.active() as u64, "streams lost track of");
        assert!(c.active() <= DEPTH);
        assert!(
            c.held_bytes() <= conn::MAX_HELD_BYTES,
            "held {}",
            c.held_bytes()
        );
        c.written(c.out.len());
        c.out.clear();
        result.map_err(|e| e.kind)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// The fuzz target's own checks (no stream lost track of, what is held bounded) on 20,000
    /// seeded mutations of a server's answer to a streamed gRPC call, in each of the three
    /// modes: a panic or a lost stream fails here (`bench/fuzz.sh` runs the same for millions).
    #[test]
    fn mutated_streamed_replies_keep_the_connections_invariants() {
        let frame = |ty: u8, flags: u8, id: u32, payload: &[u8]| {
            let len = (payload.len() as u32).to_be_bytes();
            let mut f = vec![len[1], len[2], len[3], ty, flags];
            f.extend_from_slice(&id.to_be_bytes());
            f.extend_from_slice(payload);
            f
        };
        let message = crate::wire::grpc::frame(b"hello");
        let mut story = frame(4, 0, 0, &[]);
        for id in [1u32, 3, 5] {
            story.extend(frame(1, 4, id, &[0x88]));
            story.extend(frame(
                0,
                0,
                id,
                &[message.clone(), message.clone()].concat(),
            ));
            // grpc-status: 0, a literal without indexing.
            let trailers = [&[0x00, 11][..], b"grpc-status", &[1], b"0"].concat();
            story.extend(frame(1, 4 | 1, id, &trailers));
        }
        let mut seed = 0x5eed_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut input = story.clone();
            for _ in 0..next() % 4 {
                let at = next() as usize % input.len();
                input[at] = next() as u8;
            }
            let mode = [0x07, 0x87, 0xc7][next() as usize % 3];
            input.insert(0, mode);
            let _ = super::fuzz_client_connection(&input);
        }
        let ok = [&[0xc7][..], &story].concat();
        assert_eq!(super::fuzz_client_connection(&ok), Ok(()));
    }
}
