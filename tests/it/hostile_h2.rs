//! `stairbench load h2c://` against HTTP/2 servers that break the protocol (raw frames written
//! by the test, on loopback): each server misbehaves on its first connections and answers
//! well on the next ones, so each run shows the error under its kind, the connection
//! replaced (requests succeed after it), the window kept, our GOAWAY's error code, and no
//! panic.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;

const PREFACE_LEN: usize = 24;
/// HPACK: `:status 200` (static index 8).
const STATUS_200: u8 = 0x88;
const DURATION_S: u64 = 2;
/// A run this long is hung: killed so the test fails rather than hangs.
const KILL_AFTER: Duration = Duration::from_secs(30);

pub(crate) fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = (payload.len() as u32).to_be_bytes();
    let mut f = vec![len[1], len[2], len[3], ty, flags];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// One server connection: frames read one at a time.
pub(crate) struct Conn {
    s: TcpStream,
}

impl Conn {
    /// Reads the client's preface and sends our (empty) SETTINGS.
    pub(crate) fn start(mut s: TcpStream) -> Option<Conn> {
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let mut preface = [0u8; PREFACE_LEN];
        s.read_exact(&mut preface).ok()?;
        s.write_all(&frame(SETTINGS, 0, 0, &[])).ok()?;
        Some(Conn { s })
    }

    /// The next frame: (type, flags, stream, payload).
    fn next(&mut self) -> Option<(u8, u8, u32, Vec<u8>)> {
        let mut h = [0u8; 9];
        self.s.read_exact(&mut h).ok()?;
        let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
        let mut payload = vec![0; len];
        self.s.read_exact(&mut payload).ok()?;
        let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        Some((h[3], h[4], id, payload))
    }

    /// Acks SETTINGS until a request's HEADERS: its stream id. A GOAWAY's code is recorded.
    pub(crate) fn request(&mut self, goaways: &Mutex<Vec<u32>>) -> Option<u32> {
        loop {
            let (ty, flags, id, payload) = self.next()?;
            match ty {
                SETTINGS if flags & ACK == 0 => self.send(&frame(SETTINGS, ACK, 0, &[]))?,
                HEADERS => return Some(id),
                GOAWAY => {
                    let code = u32::from_be_bytes(payload[4..8].try_into().unwrap());
                    goaways.lock().unwrap().push(code);
                    return None;
                }
                _ => {}
            }
        }
    }

    pub(crate) fn send(&mut self, bytes: &[u8]) -> Option<()> {
        self.s.write_all(bytes).ok()
    }

    /// Answers every request with `:status 200` and no body, until the client goes.
    fn serve_well(&mut self, goaways: &Mutex<Vec<u32>>) {
        while let Some(id) = self.request(goaways) {
            if self
                .send(&frame(HEADERS, END_HEADERS | END_STREAM, id, &[STATUS_200]))
                .is_none()
            {
                return;
            }
        }
    }
}

/// What a misbehaving connection does: handed the connection and the stream id of its first
/// request, and the connection's number (0 first).
type Misbehaviour = fn(&mut Conn, u32, usize);

/// A server whose first `bad` connections do `misbehave` after their first request, then
/// wait for the client's GOAWAY; the others answer well. The port, and the GOAWAY codes the
/// client sent.
fn serve(bad: usize, misbehave: Misbehaviour) -> (u16, Arc<Mutex<Vec<u32>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let goaways = Arc::new(Mutex::new(Vec::new()));
    let seen = AtomicUsize::new(0);
    let codes = goaways.clone();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let n = seen.fetch_add(1, Ordering::Relaxed);
            let codes = codes.clone();
            thread::spawn(move || {
                let Some(mut c) = Conn::start(stream) else {
                    return;
                };
                if n < bad {
                    let Some(id) = c.request(&codes) else { return };
                    misbehave(&mut c, id, n);
                    // Until the client's GOAWAY (recorded) or its close.
                    while c.request(&codes).is_some() {}
                } else {
                    c.serve_well(&codes);
                }
            });
        }
    });
    (port, goaways)
}

/// `stairbench load h2c://127.0.0.1:PORT/ -c 1 -d 2s --timeout 1s`: the report and stderr,
/// after checking it ran its window, exited 0 or 3 and did not panic.
fn load(port: u16) -> (Value, String) {
    let run = load_with(port, 1, &[]);
    (run.doc, run.stderr)
}

/// What one run showed.
struct Loaded {
    doc: Value,
    stderr: String,
    /// The process's peak resident set, sampled until it exited.
    peak_rss_kb: u64,
}

/// [`load`] with `conns` connections (one thread) and more arguments.
fn load_with(port: u16, conns: usize, args: &[&str]) -> Loaded {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let started = Instant::now();
    let mut child = common::cli_cmd()
        .args([
            "load",
            &format!("h2c://127.0.0.1:{port}/"),
            "-c",
            &conns.to_string(),
            "-t",
            "1",
        ])
        .args(["-d", &format!("{DURATION_S}s"), "--timeout", "1s"])
        .args(["--max-error-ratio", "1", "--json"])
        .arg(&json)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().unwrap();
    let reader = thread::spawn(move || {
        let _ = pipe.read_to_string(&mut stderr);
        stderr
    });
    let mut peak_rss_kb = 0;
    let status = loop {
        if let Some(kb) = crate::hostile::peak_rss_kb(child.id()) {
            peak_rss_kb = peak_rss_kb.max(kb);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > KILL_AFTER {
            let _ = child.kill();
            panic!("load still running after {KILL_AFTER:?}: hung");
        }
        thread::sleep(Duration::from_millis(20));
    };
    let stderr = reader.join().unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(matches!(status.code(), Some(0 | 3)), "{status:?}: {stderr}");
    let doc: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let window = doc["duration_s"].as_f64().unwrap_or(0.0);
    assert!(
        (DURATION_S as f64 * 0.9..DURATION_S as f64 * 1.5).contains(&window),
        "window {window} s: {doc:#}"
    );
    Loaded {
        doc,
        stderr,
        peak_rss_kb,
    }
}

fn errors(doc: &Value, kind: &str) -> u64 {
    doc["errors"][kind].as_u64().unwrap_or(0)
}

/// The run counted exactly `count` errors, all of `kind`, then succeeded on the connections
/// that followed; the client told each bad connection `code` in a GOAWAY.
#[track_caller]
fn assert_replaced(port: u16, goaways: &Mutex<Vec<u32>>, kind: &str, count: u64, code: u32) {
    let (doc, stderr) = load(port);
    assert_eq!(errors(&doc, kind), count, "{kind}: {doc:#}\n{stderr}");
    let all: u64 = doc["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(all, count, "only {kind}: {doc:#}");
    assert!(doc["requests"].as_u64().unwrap() > 0, "{doc:#}");
    let codes = goaways.lock().unwrap().clone();
    assert_eq!(codes, vec![code; count as usize], "our GOAWAYs' codes");
}

const PROTOCOL_ERROR: u32 = 0x1;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

/// Header blocks that are not HPACK: truncated (the three that panicked httlib-hpack),
/// an index past the table, a table-size update above 4,096 or after a field, Huffman
/// padding of 8 bits, EOS.
const BAD_BLOCKS: &[&[u8]] = &[
    &[0x00],
    &[0x0f],
    &[0xff, 0x80],
    &[0xbe],
    &[0x3f, 0xe2, 0x1f],
    &[STATUS_200, 0x20],
    &[0x00, 0x81, 0xff, 0x01, b'a'],
    &[0x00, 0x84, 0xff, 0xff, 0xff, 0xff, 0x01, b'a'],
];

#[test]
fn malformed_hpack_is_a_compression_error_and_a_new_connection() {
    let (port, goaways) = serve(BAD_BLOCKS.len(), |c, id, n| {
        let _ = c.send(&frame(HEADERS, END_HEADERS | END_STREAM, id, BAD_BLOCKS[n]));
    });
    let count = BAD_BLOCKS.len() as u64;
    assert_replaced(port, &goaways, "h2_compression", count, COMPRESSION_ERROR);
}

#[test]
fn a_header_block_over_64_kib_is_too_large() {
    let (port, goaways) = serve(1, |c, id, _| {
        let mut f = frame(HEADERS, 0, id, &[STATUS_200]);
        for _ in 0..5 {
            f.extend(frame(CONTINUATION, 0, id, &[STATUS_200; 16_384]));
        }
        let _ = c.send(&f);
    });
    assert_replaced(port, &goaways, "h2_headers_too_large", 1, ENHANCE_YOUR_CALM);
}

#[test]
fn an_endless_continuation_chain_is_too_large() {
    let (port, goaways) = serve(1, |c, id, _| {
        let _ = c.send(&frame(HEADERS, 0, id, &[STATUS_200]));
        // Empty frames never fill the block: until the client gives up on them.
        let empty = frame(CONTINUATION, 0, id, &[]).repeat(1000);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline && c.send(&empty).is_some() {}
    });
    assert_replaced(port, &goaways, "h2_headers_too_large", 1, ENHANCE_YOUR_CALM);
}

#[test]
fn data_on_an_idle_stream_is_a_protocol_error() {
    let (port, goaways) = serve(1, |c, id, _| {
        let _ = c.send(&frame(DATA, 0, id + 2000, b"nobody asked"));
    });
    assert_replaced(port, &goaways, "h2_protocol", 1, PROTOCOL_ERROR);
}

#[test]
fn data_on_a_closed_stream_is_a_stream_closed_error() {
    let (port, goaways) = serve(1, |c, id, _| {
        let mut f = frame(HEADERS, END_HEADERS | END_STREAM, id, &[STATUS_200]);
        f.extend(frame(DATA, 0, id, b"after the end"));
        let _ = c.send(&f);
    });
    assert_replaced(port, &goaways, "h2_stream_closed", 1, STREAM_CLOSED);
}

#[test]
fn settings_or_ping_on_a_stream_are_protocol_errors() {
    let (port, goaways) = serve(2, |c, id, n| {
        let f = match n {
            0 => frame(SETTINGS, 0, id, &[]),
            _ => frame(PING, 0, id, b"12345678"),
        };
        let _ = c.send(&f);
    });
    assert_replaced(port, &goaways, "h2_protocol", 2, PROTOCOL_ERROR);
}

#[test]
fn settings_of_a_bad_length_are_a_frame_size_error() {
    let (port, goaways) = serve(1, |c, _, _| {
        let _ = c.send(&frame(SETTINGS, 0, 0, &[0, 3, 0, 0, 0]));
    });
    assert_replaced(port, &goaways, "h2_frame_size", 1, FRAME_SIZE_ERROR);
}

#[test]
fn continuation_without_headers_is_a_protocol_error() {
    let (port, goaways) = serve(1, |c, id, _| {
        let _ = c.send(&frame(CONTINUATION, END_HEADERS, id, &[STATUS_200]));
    });
    assert_replaced(port, &goaways, "h2_protocol", 1, PROTOCOL_ERROR);
}

#[test]
fn a_storm_of_resets_is_a_flood() {
    let (port, goaways) = serve(1, |c, id, _| {
        // The stream answered, then reset again and again.
        let mut f = frame(HEADERS, END_HEADERS | END_STREAM, id, &[STATUS_200]);
        f.extend(frame(RST_STREAM, 0, id, &0u32.to_be_bytes()).repeat(20_000));
        let _ = c.send(&f);
    });
    assert_replaced(port, &goaways, "h2_flood", 1, ENHANCE_YOUR_CALM);
}

#[test]
fn streams_above_a_goaways_last_id_are_sent_again() {
    let (port, goaways) = serve(3, |c, _, _| {
        // Nothing processed: last stream id 0.
        let mut payload = 0u32.to_be_bytes().to_vec();
        payload.extend(0u32.to_be_bytes());
        let _ = c.send(&frame(GOAWAY, 0, 0, &payload));
    });
    let (doc, stderr) = load(port);
    assert_eq!(doc["errors"], serde_json::json!({}), "{doc:#}\n{stderr}");
    assert_eq!(doc["resent"].as_u64(), Some(3), "{doc:#}");
    assert!(doc["requests"].as_u64().unwrap() > 0, "{doc:#}");
    assert!(goaways.lock().unwrap().is_empty(), "no GOAWAY of ours");
}

/// Connections of one thread that each hold 80 KiB once their server stops sending (a 64-KiB
/// header block begun and a frame cut short): 40 MiB together, 40 times a 1-MiB budget.
const HOLDING_CONNS: usize = 512;

/// Begins a header block of 64 KiB less one byte (each frame within the limits) that never
/// ends, and the start of the next frame, all but its last byte.
fn begin_an_endless_block(c: &mut Conn, id: u32, _: usize) {
    let mut f = frame(HEADERS, 0, id, &[STATUS_200; 16_384]);
    f.extend(frame(CONTINUATION, 0, id, &[STATUS_200; 16_384]).repeat(2));
    f.extend(frame(CONTINUATION, 0, id, &[STATUS_200; 16_383]));
    let cut = frame(CONTINUATION, 0, id, &[STATUS_200; 16_384]);
    f.extend_from_slice(&cut[..cut.len() - 1]);
    let _ = c.send(&f);
}

#[test]
fn header_blocks_that_never_end_on_many_connections_stay_within_the_budget() {
    // Every connection begins a block it never ends: with a 1-MiB budget the thread holds
    // what it may lend (half of it) and the rest of the connections end with
    // reply_over_budget, again and again as they are replaced.
    let (port, goaways) = serve(usize::MAX, begin_an_endless_block);
    // Paced: the test's listener has a backlog of 128.
    let paced = ["--connect-rate", "2000"];
    let budgeted = load_with(
        port,
        HOLDING_CONNS,
        &[&paced[..], &["--reply-budget-mib", "1"]].concat(),
    );
    let doc = &budgeted.doc;
    let over = errors(doc, "reply_over_budget");
    assert!(over >= HOLDING_CONNS as u64 / 2, "{doc:#}");
    // No stream was answered, and the figures say so.
    assert_eq!(doc["requests"].as_u64(), Some(0), "{doc:#}");
    assert!(doc["sent"].as_u64().unwrap() >= over, "{doc:#}");
    // Our GOAWAYs that the server read before our close (a close with its bytes unread
    // may reset the connection first).
    let codes = std::mem::take(&mut *goaways.lock().unwrap());
    assert!(
        !codes.is_empty() && codes.iter().all(|&c| c == ENHANCE_YOUR_CALM),
        "our GOAWAYs' codes: {codes:?}"
    );
    // The default budget (256 MiB, a share of 256 KiB each) holds them all: their streams
    // time out instead.
    let unbudgeted = load_with(port, HOLDING_CONNS, &paced);
    let doc = &unbudgeted.doc;
    assert_eq!(errors(doc, "reply_over_budget"), 0, "{doc:#}");
    assert_eq!(doc["requests"].as_u64(), Some(0), "{doc:#}");
    assert!(errors(doc, "timeout") >= HOLDING_CONNS as u64, "{doc:#}");
    // What the budget saved is most of the 40 MiB the blocks hold (measured: 13 MB with the
    // budget, 53 MB without; 61 MB before the HTTP/2 threads had one).
    let (with_kb, without_kb) = (budgeted.peak_rss_kb, unbudgeted.peak_rss_kb);
    eprintln!("peak RSS: {with_kb} KB with a 1-MiB budget, {without_kb} KB without");
    assert!(with_kb > 0 && with_kb < 32 * 1024, "{with_kb} KB");
    assert!(
        without_kb > with_kb + 24 * 1024,
        "{without_kb} KB without the budget, {with_kb} KB with it"
    );
}
