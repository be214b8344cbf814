//! A sans-I/O HTTP/2 client connection (RFC 9113), driven by the mio loop as TLS is: the
//! loop hands it the bytes a read brought and writes what it queued in [`H2Conn::out`].
//!
//! What it does: the connection preface and SETTINGS (and their ACKs), HEADERS (+
//! CONTINUATION) and DATA in both directions, WINDOW_UPDATE for the connection and each
//! stream (sent when half a window is used, so flow control never stalls a response; the
//! server's windows are kept to for request bodies), PING acks, RST_STREAM, GOAWAY with its
//! last stream id, and the server's SETTINGS_MAX_CONCURRENT_STREAMS. HPACK is
//! [`crate::wire::hpack`]'s: every response header block is decoded, in order, so the
//! decoder's table stays right; request blocks come encoded (once per request template)
//! without indexing, so they do not depend on any table state and are re-sent as they are.
//!
//! A server that breaks the protocol ends its connection with a [`ConnError`] of a named kind
//! (sent to it in a GOAWAY): a header block that does not decode (`h2_compression`), a frame
//! where none may be (`h2_protocol`), a frame of a wrong length (`h2_frame_size`), more
//! DATA than our windows allow (`h2_flow_control`), a frame on a stream that ended
//! (`h2_stream_closed`), a header block over 64 KiB or of endless CONTINUATION frames
//! (`h2_headers_too_large`), and a flood of frames that end no stream (`h2_flood`). What a
//! connection holds of the server's bytes ([`H2Conn::held_bytes`]: a frame cut by a read, a
//! header block being collected) is charged by its thread to the thread's reply budget; a
//! connection over its share when nothing is left to lend ends as
//! [`ConnError::over_budget`].
//!
//! Each stream carries a caller's tag (its request's times); how a stream ended comes back
//! as an [`Event`]. Streams are few (`--depth`), so they are found by a scan of a small
//! vector, not a map.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::record::load::RequestError;
use crate::wire::grpc::{self, ReplyReader};
use crate::wire::hpack::{self, Decoder};

/// What a client sends first.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PUSH_PROMISE: u8 = 0x5;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const WINDOW_UPDATE: u8 = 0x8;
const CONTINUATION: u8 = 0x9;

const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

const NO_ERROR: u32 = 0x0;
const PROTOCOL_ERROR: u32 = 0x1;
const FLOW_CONTROL_ERROR: u32 = 0x3;
const STREAM_CLOSED: u32 = 0x5;
const FRAME_SIZE_ERROR: u32 = 0x6;
const REFUSED_STREAM: u32 = 0x7;
const CANCEL: u32 = 0x8;
const COMPRESSION_ERROR: u32 = 0x9;
const ENHANCE_YOUR_CALM: u32 = 0xb;

const SETTINGS_ENABLE_PUSH: u16 = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

const FRAME_HEAD: usize = 9;
/// The largest frame we accept: SETTINGS_MAX_FRAME_SIZE's default, which we keep.
const MAX_FRAME: usize = 16_384;
/// The largest header block we collect over CONTINUATION frames (as an HTTP/1.1 head).
const MAX_HEADER_BLOCK: usize = 64 << 10;
/// The most a connection holds of the server's bytes ([`H2Conn::held_bytes`]): a header
/// block being collected and a frame cut short.
pub(super) const MAX_HELD_BYTES: usize = MAX_HEADER_BLOCK + FRAME_HEAD + MAX_FRAME;
/// The most CONTINUATION frames one header block may take (empty ones never fill it).
const MAX_CONTINUATIONS: u32 = 64;
/// Frames that end no stream (pings, settings, resets of closed streams, empty DATA, ...)
/// allowed between two streams' ends: past it the server floods.
const MAX_IDLE_FRAMES: u32 = 10_000;
/// The last stream id a client may use.
const MAX_STREAM_ID: u32 = (1 << 31) - 1;
/// Both sides' windows before any SETTINGS.
const DEFAULT_WINDOW: i64 = 65_535;
/// Receive windows large enough that flow control never paces a benchmark (h2load's are
/// 1 GiB; these are what a browser announces). Responses are read and dropped at once, so
/// the window only bounds what the server may send ahead.
pub(super) const STREAM_WINDOW: u32 = 4 << 20;
pub(super) const CONNECTION_WINDOW: u32 = 16 << 20;

/// How a stream ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event<T> {
    /// Its response ended, with this status.
    Done(T, u16),
    /// Refused unprocessed (REFUSED_STREAM before any answer, or above a GOAWAY's last
    /// stream id): the server did not process it, so it may be sent again.
    Refused(T),
    /// Failed, by kind (`h2_reset`, `h2_no_status`; gRPC: `grpc_no_status`, `grpc_framing`...).
    Failed(T, RequestError),
    /// gRPC: the call ended with a non-zero `grpc-status`, its code and `grpc-message`.
    GrpcStatus(T, u32, String),
    /// gRPC, a streamed reply: the call ended well, with this many messages, the first
    /// whole at this time (the `now` of [`H2Conn::receive_at`]; 0 without a message).
    Streamed(T, u32, u64),
}

/// A connection error: the connection is unusable; its streams fail with `kind`, and the
/// server is told `code` in a GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ConnError {
    /// The error kind the streams in flight count as.
    pub kind: RequestError,
    /// The HTTP/2 error code of our GOAWAY.
    pub code: u32,
}

impl ConnError {
    const PROTOCOL: Self = ConnError::new(RequestError::H2Protocol, PROTOCOL_ERROR);
    const COMPRESSION: Self = ConnError::new(RequestError::H2Compression, COMPRESSION_ERROR);
    const FRAME_SIZE: Self = ConnError::new(RequestError::H2FrameSize, FRAME_SIZE_ERROR);
    const FLOW_CONTROL: Self = ConnError::new(RequestError::H2FlowControl, FLOW_CONTROL_ERROR);
    const STREAM_CLOSED: Self = ConnError::new(RequestError::H2StreamClosed, STREAM_CLOSED);
    const HEADERS_TOO_LARGE: Self =
        ConnError::new(RequestError::H2HeadersTooLarge, ENHANCE_YOUR_CALM);
    const FLOOD: Self = ConnError::new(RequestError::H2Flood, ENHANCE_YOUR_CALM);

    const fn new(kind: RequestError, code: u32) -> Self {
        ConnError { kind, code }
    }

    /// What the connection holds is more than the thread's reply budget lets it hold
    /// (`kind` is the budget's: `reply_over_budget`).
    pub fn over_budget(kind: RequestError) -> Self {
        ConnError::new(kind, ENHANCE_YOUR_CALM)
    }
}

/// One stream in flight.
struct Slot<T> {
    /// 0 when the slot is free.
    id: u32,
    tag: T,
    /// The final response status; 0 until its headers came.
    status: u16,
    /// DATA bytes received since the stream's last WINDOW_UPDATE.
    unacked: u32,
    /// What our WINDOW_UPDATEs queued but not written yet gave it: the server cannot know.
    unwritten: u32,
    /// What the server's window lets us send on it.
    send_window: i64,
    /// The part of the request body not sent yet.
    body: Option<Bytes>,
    /// gRPC: the response's framing and status so far.
    grpc: ReplyReader,
    /// gRPC, a streamed reply: when its first message was whole (0: not yet).
    first_ns: u64,
}

/// A header block being collected over HEADERS and CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    /// CONTINUATION frames so far.
    continuations: u32,
}

/// One HTTP/2 client connection's protocol state.
pub(super) struct H2Conn<T> {
    slots: Vec<Slot<T>>,
    active: usize,
    next_id: u32,
    /// The server's settings (defaults until its SETTINGS frame).
    peer_max_streams: usize,
    peer_initial_window: i64,
    peer_max_frame: usize,
    conn_send_window: i64,
    /// DATA bytes received since the connection's last WINDOW_UPDATE.
    conn_unacked: u32,
    /// What our connection WINDOW_UPDATE queued but not written yet gave.
    conn_unwritten: u32,
    /// Some WINDOW_UPDATE is queued and not written.
    updates_unwritten: bool,
    /// Where in `out` the last WINDOW_UPDATE queued ends.
    updates_end: usize,
    /// The server's first SETTINGS came: its stream limit is known, requests may go.
    ready: bool,
    /// The server's GOAWAY: its last stream id and error code.
    goaway: Option<(u32, u32)>,
    decoder: Decoder,
    /// The header block being collected, and its bytes.
    block: Option<Block>,
    block_bytes: Vec<u8>,
    /// The streams we reset lately (RST_STREAM CANCEL): the server may still send on them
    /// until it reads our reset, and that is not its fault.
    cancelled: VecDeque<u32>,
    /// Frames that ended no stream since a stream last ended.
    idle_frames: u32,
    /// The start of a frame a read cut short.
    partial: Vec<u8>,
    /// Streams whose request body is not all sent.
    bodies: usize,
    /// Responses are gRPC calls': their framing is checked and their status read.
    grpc: bool,
    /// gRPC replies are streams (server-streaming or bidirectional calls): any number of
    /// messages, each counted, the first one timed.
    streamed: bool,
    /// The time of the bytes being taken (set by [`H2Conn::receive_at`]).
    now_ns: u64,
    /// gRPC: reply messages read whole, of any stream, since [`H2Conn::take_messages`].
    messages_read: u64,
    /// Bytes to write, in order.
    pub out: Vec<u8>,
    /// Every DATA payload received is also appended to `kept` (a one-call probe shows the
    /// reply; the load never keeps them).
    keep_data: bool,
    /// The DATA payloads received, with `keep_data`.
    pub kept: Vec<u8>,
}

impl<T: Copy> H2Conn<T> {
    /// A new connection, its preface, SETTINGS and connection WINDOW_UPDATE queued.
    pub fn new(depth: usize) -> Self {
        let mut out = Vec::with_capacity(4096);
        out.extend_from_slice(PREFACE);
        head(&mut out, 12, SETTINGS, 0, 0);
        setting(&mut out, SETTINGS_ENABLE_PUSH, 0);
        setting(&mut out, SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW);
        window_update(&mut out, 0, CONNECTION_WINDOW - DEFAULT_WINDOW as u32);
        H2Conn {
            slots: Vec::with_capacity(depth),
            active: 0,
            next_id: 1,
            peer_max_streams: usize::MAX,
            peer_initial_window: DEFAULT_WINDOW,
            peer_max_frame: MAX_FRAME,
            conn_send_window: DEFAULT_WINDOW,
            conn_unacked: 0,
            conn_unwritten: 0,
            updates_unwritten: false,
            updates_end: 0,
            ready: false,
            goaway: None,
            // We announce no SETTINGS_HEADER_TABLE_SIZE: the default holds.
            decoder: Decoder::new(hpack::DEFAULT_TABLE_SIZE),
            block: None,
            block_bytes: Vec::new(),
            cancelled: VecDeque::new(),
            idle_frames: 0,
            partial: Vec::new(),
            bodies: 0,
            grpc: false,
            streamed: false,
            now_ns: 0,
            messages_read: 0,
            out,
            keep_data: false,
            kept: Vec::new(),
        }
    }

    /// Reads every response as a unary gRPC call's (see [`crate::wire::grpc`]).
    pub fn grpc(mut self) -> Self {
        self.grpc = true;
        self
    }

    /// Reads every response as a gRPC call's streamed reply.
    pub fn grpc_streamed(mut self) -> Self {
        self.streamed = true;
        self.grpc()
    }

    /// The reply messages read whole since the last call (every stream's, whatever its end).
    pub fn take_messages(&mut self) -> u64 {
        std::mem::take(&mut self.messages_read)
    }

    /// Keeps every DATA payload in [`H2Conn::kept`] (for one call, not for a load).
    pub fn keep_data(mut self) -> Self {
        self.keep_data = true;
        self
    }

    /// Streams in flight.
    pub fn active(&self) -> usize {
        self.active
    }

    /// Whether the server's SETTINGS came.
    pub fn ready(&self) -> bool {
        self.ready
    }

    /// The server sent GOAWAY (or the stream ids ran out): no new stream, and once none is
    /// in flight the connection is to be replaced.
    pub fn going_away(&self) -> bool {
        self.goaway.is_some() || self.next_id > MAX_STREAM_ID
    }

    /// The server's GOAWAY carried an error code.
    pub fn goaway_error(&self) -> bool {
        self.goaway.is_some_and(|(_, code)| code != NO_ERROR)
    }

    /// Whether a new stream may open: the server's settings came, it is not going away, and
    /// fewer than `depth` and the server's limit are in flight.
    pub fn can_open(&self, depth: usize) -> bool {
        self.ready && !self.going_away() && self.active < depth.min(self.peer_max_streams)
    }

    /// Opens a stream sending `block` (an HPACK header block) and `body`.
    pub fn open(&mut self, block: &[u8], body: Option<Bytes>, tag: T) {
        let id = self.next_id;
        self.next_id += 2;
        let body = body.filter(|b| !b.is_empty());
        self.headers(id, block, body.is_none());
        let slot = Slot {
            id,
            tag,
            status: 0,
            unacked: 0,
            unwritten: 0,
            send_window: self.peer_initial_window,
            body,
            grpc: match self.streamed {
                true => ReplyReader::streamed(),
                false => ReplyReader::default(),
            },
            first_ns: 0,
        };
        if slot.body.is_some() {
            self.bodies += 1;
        }
        match self.slots.iter_mut().find(|s| s.id == 0) {
            Some(free) => *free = slot,
            None => self.slots.push(slot),
        }
        self.active += 1;
        if self.bodies > 0 {
            self.send_bodies();
        }
    }

    /// HEADERS, and CONTINUATION frames when the block is larger than the server's frame.
    fn headers(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let max = self.peer_max_frame;
        let mut chunks = block.chunks(max).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let end = if end_stream { END_STREAM } else { 0 };
        let last = chunks.peek().is_none();
        head(
            &mut self.out,
            first.len(),
            HEADERS,
            end | if last { END_HEADERS } else { 0 },
            id,
        );
        self.out.extend_from_slice(first);
        while let Some(chunk) = chunks.next() {
            let last = chunks.peek().is_none();
            let flags = if last { END_HEADERS } else { 0 };
            head(&mut self.out, chunk.len(), CONTINUATION, flags, id);
            self.out.extend_from_slice(chunk);
        }
    }

    /// Sends what the windows allow of the request bodies not all sent.
    fn send_bodies(&mut self) {
        for s in self.slots.iter_mut().filter(|s| s.id != 0) {
            let Some(body) = s.body.as_mut() else {
                continue;
            };
            while !body.is_empty() {
                let room = self.conn_send_window.min(s.send_window);
                let n = body
                    .len()
                    .min(self.peer_max_frame)
                    .min(room.max(0) as usize);
                if n == 0 {
                    break;
                }
                let end = if n == body.len() { END_STREAM } else { 0 };
                head(&mut self.out, n, DATA, end, s.id);
                self.out.extend_from_slice(&body.split_to(n));
                self.conn_send_window -= n as i64;
                s.send_window -= n as i64;
            }
            if body.is_empty() {
                s.body = None;
                self.bodies -= 1;
            }
        }
    }

    /// Takes the bytes a read brought: whole frames are acted on, the start of a cut one
    /// kept. How streams ended is pushed to `events`.
    pub fn receive(&mut self, input: &[u8], events: &mut Vec<Event<T>>) -> Result<(), ConnError> {
        self.receive_at(input, 0, events)
    }

    /// [`H2Conn::receive`] of bytes read at `now_ns` (when a streamed reply's first
    /// message is whole).
    pub fn receive_at(
        &mut self,
        input: &[u8],
        now_ns: u64,
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        self.now_ns = now_ns;
        let mut input = input;
        if !self.partial.is_empty() {
            input = self.complete_cut_frame(input, events)?;
            if !self.partial.is_empty() {
                return Ok(());
            }
        }
        // The common case: whole frames straight from the read buffer, no copy.
        let used = self.frames(input, events)?;
        let rest = &input[used..];
        if !rest.is_empty() {
            // Room for the whole frame (its head was checked), so `held_bytes` is what it
            // will hold; a head cut short gets room for itself first.
            let want = frame_size(rest).unwrap_or(FRAME_HEAD);
            self.partial = Vec::with_capacity(want);
            self.partial.extend_from_slice(rest);
        }
        Ok(())
    }

    /// Adds to `partial` what its frame lacks from `input`, acts on the frame once whole
    /// (and frees it): the rest of `input`. Only one frame is ever copied, not the read.
    fn complete_cut_frame<'a>(
        &mut self,
        input: &'a [u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<&'a [u8], ConnError> {
        let mut input = input;
        if self.partial.len() < FRAME_HEAD {
            let n = (FRAME_HEAD - self.partial.len()).min(input.len());
            self.partial.extend_from_slice(&input[..n]);
            input = &input[n..];
        }
        let Some(size) = frame_size(&self.partial) else {
            return Ok(input);
        };
        if size > FRAME_HEAD + MAX_FRAME {
            return Err(ConnError::FRAME_SIZE);
        }
        let n = (size - self.partial.len()).min(input.len());
        self.partial.reserve_exact(size - self.partial.len());
        self.partial.extend_from_slice(&input[..n]);
        if self.partial.len() == size {
            let frame = std::mem::take(&mut self.partial);
            self.frames(&frame, events)?;
        }
        Ok(&input[n..])
    }

    /// What this connection holds of the server's bytes, allocated: a frame a read cut
    /// short and a header block being collected (at most 16 KiB + 64 KiB). The generator
    /// thread charges it to its reply budget after each read.
    pub fn held_bytes(&self) -> usize {
        self.partial.capacity() + self.block_bytes.capacity()
    }

    /// Acts on the whole frames at the front of `buf`; the bytes they used.
    fn frames(&mut self, buf: &[u8], events: &mut Vec<Event<T>>) -> Result<usize, ConnError> {
        let mut at = 0;
        while buf.len() - at >= FRAME_HEAD {
            let h = &buf[at..at + FRAME_HEAD];
            let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
            if len > MAX_FRAME {
                return Err(ConnError::FRAME_SIZE);
            }
            if buf.len() - at < FRAME_HEAD + len {
                break;
            }
            let (ty, flags) = (h[3], h[4]);
            let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
            let payload = &buf[at + FRAME_HEAD..at + FRAME_HEAD + len];
            at += FRAME_HEAD + len;
            let ended = events.len();
            self.frame(ty, flags, id, payload, events)?;
            if events.len() > ended {
                self.idle_frames = 0;
            }
        }
        Ok(at)
    }

    fn frame(
        &mut self,
        ty: u8,
        flags: u8,
        id: u32,
        payload: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        if self.block.is_some() && ty != CONTINUATION {
            return Err(ConnError::PROTOCOL);
        }
        match ty {
            DATA => self.data(flags, id, payload, events),
            HEADERS => self.headers_frame(flags, id, payload, events),
            CONTINUATION => self.continuation(flags, id, payload, events),
            RST_STREAM => self.rst_stream(id, payload, events),
            SETTINGS => self.settings(flags, id, payload),
            PING => self.ping(flags, id, payload),
            GOAWAY => self.goaway_frame(id, payload, events),
            WINDOW_UPDATE => self.window_update_frame(id, payload),
            // Push was disabled in our SETTINGS.
            PUSH_PROMISE => Err(ConnError::PROTOCOL),
            // PRIORITY, unknown types.
            _ => self.idle_frame(),
        }
    }

    /// Counts a frame that ended no stream: a flood of them is an error.
    fn idle_frame(&mut self) -> Result<(), ConnError> {
        self.idle_frames += 1;
        if self.idle_frames > MAX_IDLE_FRAMES {
            return Err(ConnError::FLOOD);
        }
        Ok(())
    }

    fn slot(&mut self, id: u32) -> Option<&mut Slot<T>> {
        if id == 0 {
            return None;
        }
        self.slots.iter_mut().find(|s| s.id == id)
    }

    /// Whether stream `id` is one we never opened (a server's own streams are even: push,
    /// which we refused).
    fn idle(&self, id: u32) -> bool {
        id.is_multiple_of(2) || id >= self.next_id
    }

    /// A frame came on stream `id`, which has no slot: fine on a stream we reset lately (an
    /// idle frame), an error on one the server ended or never opened.
    fn untracked(&mut self, id: u32) -> Result<(), ConnError> {
        if self.idle(id) {
            return Err(ConnError::PROTOCOL);
        }
        if !self.cancelled.contains(&id) && self.goaway.is_none_or(|(last, _)| id <= last) {
            return Err(ConnError::STREAM_CLOSED);
        }
        self.idle_frame()
    }

    /// Frees stream `id`'s slot and says how it ended.
    fn end(
        &mut self,
        id: u32,
        events: &mut Vec<Event<T>>,
        how: impl FnOnce(&mut Slot<T>) -> Event<T>,
    ) {
        if let Some(s) = self.slots.iter_mut().find(|s| s.id == id && id != 0) {
            s.id = 0;
            if s.body.take().is_some() {
                self.bodies -= 1;
            }
            self.active -= 1;
            events.push(how(s));
        }
    }

    fn data(
        &mut self,
        flags: u8,
        id: u32,
        payload: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::PROTOCOL);
        }
        let mut content = payload;
        if flags & PADDED != 0 {
            let pad = *payload.first().ok_or(ConnError::FRAME_SIZE)? as usize;
            if pad + 1 > payload.len() {
                return Err(ConnError::PROTOCOL);
            }
            content = &payload[1..payload.len() - pad];
        }
        // Flow control counts the whole payload, padding included, on every stream, even
        // one we no longer track (cancelled). The server may send what our written updates
        // gave it, not those still queued.
        let len = payload.len() as u32;
        if self.conn_unacked + self.conn_unwritten + len > CONNECTION_WINDOW {
            return Err(ConnError::FLOW_CONTROL);
        }
        self.conn_unacked += len;
        if self.conn_unacked >= CONNECTION_WINDOW / 2 {
            window_update(&mut self.out, 0, self.conn_unacked);
            self.conn_unwritten += self.conn_unacked;
            self.conn_unacked = 0;
            self.updates_unwritten = true;
            self.updates_end = self.out.len();
        }
        if self.keep_data {
            self.kept.extend_from_slice(content);
        }
        let (grpc, now_ns) = (self.grpc, self.now_ns);
        let Some(s) = self.slot(id) else {
            return self.untracked(id);
        };
        if s.unacked + s.unwritten + len > STREAM_WINDOW {
            return Err(ConnError::FLOW_CONTROL);
        }
        let mut got = 0;
        if grpc {
            let before = s.grpc.whole();
            s.grpc.data(content);
            got = s.grpc.whole() - before;
            if got > 0 && s.first_ns == 0 {
                s.first_ns = now_ns.max(1);
            }
        }
        if flags & END_STREAM != 0 {
            self.messages_read += u64::from(got);
            self.end(id, events, |s| s.response_end(grpc));
            return Ok(());
        }
        s.unacked += len;
        if s.unacked >= STREAM_WINDOW / 2 {
            let n = s.unacked;
            s.unacked = 0;
            s.unwritten += n;
            window_update(&mut self.out, id, n);
            self.updates_unwritten = true;
            self.updates_end = self.out.len();
        }
        self.messages_read += u64::from(got);
        if len == 0 {
            return self.idle_frame();
        }
        Ok(())
    }

    fn headers_frame(
        &mut self,
        flags: u8,
        id: u32,
        payload: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::PROTOCOL);
        }
        let mut fragment = payload;
        if flags & PADDED != 0 {
            let pad = *fragment.first().ok_or(ConnError::FRAME_SIZE)? as usize;
            if pad + 1 > fragment.len() {
                return Err(ConnError::PROTOCOL);
            }
            fragment = &fragment[1..fragment.len() - pad];
        }
        if flags & PRIORITY != 0 {
            fragment = fragment.get(5..).ok_or(ConnError::FRAME_SIZE)?;
        }
        let block = Block {
            stream: id,
            end_stream: flags & END_STREAM != 0,
            continuations: 0,
        };
        if flags & END_HEADERS != 0 {
            // The common case: the whole block in this frame, decoded where it lies.
            return self.header_block(block, fragment, events);
        }
        // Freed when the block is whole (see `continuation`): none held between blocks.
        self.block_bytes = fragment.to_vec();
        self.block = Some(block);
        Ok(())
    }

    fn continuation(
        &mut self,
        flags: u8,
        id: u32,
        payload: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        let Some(block) = self.block.as_mut().filter(|b| b.stream == id) else {
            return Err(ConnError::PROTOCOL);
        };
        block.continuations += 1;
        if self.block_bytes.len() + payload.len() > MAX_HEADER_BLOCK
            || block.continuations > MAX_CONTINUATIONS
        {
            return Err(ConnError::HEADERS_TOO_LARGE);
        }
        let need = self.block_bytes.len() + payload.len();
        if need > self.block_bytes.capacity() {
            // Doubling, but never past the cap: what is held stays within 64 KiB.
            let cap = (self.block_bytes.capacity() * 2).clamp(need, MAX_HEADER_BLOCK);
            self.block_bytes.reserve_exact(cap - self.block_bytes.len());
        }
        self.block_bytes.extend_from_slice(payload);
        if flags & END_HEADERS != 0 {
            let block = self.block.take().expect("a header block");
            let bytes = std::mem::take(&mut self.block_bytes);
            return self.header_block(block, &bytes, events);
        }
        Ok(())
    }

    /// Decodes a whole header block (every one, for the decoder's table) and acts on its
    /// `:status` and END_STREAM.
    fn header_block(
        &mut self,
        block: Block,
        bytes: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        let Block {
            stream, end_stream, ..
        } = block;
        let mut status = None;
        let mut bad_status = false;
        // gRPC: the stream's reader sees every field (its status may be in any block).
        let mut grpc = match self.grpc && stream != 0 {
            true => self
                .slots
                .iter_mut()
                .find(|s| s.id == stream)
                .map(|s| &mut s.grpc),
            false => None,
        };
        self.decoder
            .decode(bytes, |name, value| {
                if name == b":status" {
                    status = parse_status(value);
                    bad_status |= status.is_none();
                } else if let Some(g) = grpc.as_mut() {
                    g.header(name, value);
                }
            })
            .map_err(|_| ConnError::COMPRESSION)?;
        if bad_status {
            return Err(ConnError::PROTOCOL);
        }
        let Some(s) = self.slot(stream) else {
            return self.untracked(stream);
        };
        match status {
            // Informational (100 Continue, 103 Early Hints): the final answer follows.
            Some(code) if code < 200 && !end_stream => return Ok(()),
            Some(code) if s.status == 0 => s.status = code,
            // Trailers carry no status.
            _ => {}
        }
        if end_stream {
            let grpc = self.grpc;
            self.end(stream, events, |s| s.response_end(grpc));
        }
        Ok(())
    }

    fn rst_stream(
        &mut self,
        id: u32,
        payload: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::PROTOCOL);
        }
        let code = u32_at(payload, 0)
            .filter(|_| payload.len() == 4)
            .ok_or(ConnError::FRAME_SIZE)?;
        if self.slot(id).is_none() {
            if self.idle(id) {
                return Err(ConnError::PROTOCOL);
            }
            // A stream that ended already (a server may reset one it answered).
            return self.idle_frame();
        }
        self.end(id, events, |s| {
            if code == REFUSED_STREAM && s.status == 0 {
                Event::Refused(s.tag)
            } else {
                Event::Failed(s.tag, RequestError::H2Reset)
            }
        });
        Ok(())
    }

    fn settings(&mut self, flags: u8, id: u32, payload: &[u8]) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError::PROTOCOL);
        }
        if flags & ACK != 0 {
            if !payload.is_empty() {
                return Err(ConnError::FRAME_SIZE);
            }
            return self.idle_frame();
        }
        if !payload.len().is_multiple_of(6) {
            return Err(ConnError::FRAME_SIZE);
        }
        for s in payload.chunks_exact(6) {
            let value = u32::from_be_bytes([s[2], s[3], s[4], s[5]]);
            match u16::from_be_bytes([s[0], s[1]]) {
                SETTINGS_MAX_CONCURRENT_STREAMS => self.peer_max_streams = value as usize,
                SETTINGS_INITIAL_WINDOW_SIZE if value > MAX_STREAM_ID => {
                    return Err(ConnError::FLOW_CONTROL)
                }
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    let delta = value as i64 - self.peer_initial_window;
                    self.peer_initial_window = value as i64;
                    for s in self.slots.iter_mut().filter(|s| s.id != 0) {
                        s.send_window += delta;
                    }
                }
                SETTINGS_MAX_FRAME_SIZE if !(16_384..=16_777_215).contains(&value) => {
                    return Err(ConnError::PROTOCOL)
                }
                SETTINGS_MAX_FRAME_SIZE => self.peer_max_frame = value as usize,
                // The header table size only matters to an encoder that indexes (ours does
                // not); push is ours to refuse; unknown settings are ignored.
                _ => {}
            }
        }
        head(&mut self.out, 0, SETTINGS, ACK, 0);
        self.ready = true;
        if self.bodies > 0 {
            self.send_bodies();
        }
        self.idle_frame()
    }

    fn ping(&mut self, flags: u8, id: u32, payload: &[u8]) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError::PROTOCOL);
        }
        if payload.len() != 8 {
            return Err(ConnError::FRAME_SIZE);
        }
        if flags & ACK == 0 {
            head(&mut self.out, 8, PING, ACK, 0);
            self.out.extend_from_slice(payload);
        }
        self.idle_frame()
    }

    fn goaway_frame(
        &mut self,
        id: u32,
        payload: &[u8],
        events: &mut Vec<Event<T>>,
    ) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError::PROTOCOL);
        }
        let (Some(last), Some(code)) = (u32_at(payload, 0), u32_at(payload, 4)) else {
            return Err(ConnError::FRAME_SIZE);
        };
        let last = last & MAX_STREAM_ID;
        // A later GOAWAY may only lower the last stream id.
        let last = self.goaway.map_or(last, |(before, _)| before.min(last));
        self.goaway = Some((last, code));
        // The streams above it were not processed (RFC 9113 §6.8): safe to send again.
        let refused: Vec<u32> = self
            .slots
            .iter()
            .filter(|s| s.id > last)
            .map(|s| s.id)
            .collect();
        for id in refused {
            self.end(id, events, |s| Event::Refused(s.tag));
        }
        Ok(())
    }

    fn window_update_frame(&mut self, id: u32, payload: &[u8]) -> Result<(), ConnError> {
        let n = u32_at(payload, 0)
            .filter(|_| payload.len() == 4)
            .ok_or(ConnError::FRAME_SIZE)?;
        let n = (n & MAX_STREAM_ID) as i64;
        if n == 0 {
            return Err(ConnError::PROTOCOL);
        }
        if id != 0 && self.idle(id) {
            return Err(ConnError::PROTOCOL);
        }
        // Updates while no body waits for them do nothing: a flood of them is counted.
        if self.bodies == 0 {
            self.idle_frame()?;
        }
        let window = if id == 0 {
            &mut self.conn_send_window
        } else if let Some(s) = self.slot(id) {
            &mut s.send_window
        } else {
            return Ok(());
        };
        *window += n;
        if *window > MAX_STREAM_ID as i64 {
            return Err(ConnError::FLOW_CONTROL);
        }
        if self.bodies > 0 {
            self.send_bodies();
        }
        Ok(())
    }

    /// Resets (RST_STREAM CANCEL) every stream whose tag `expired` says so; their tags go
    /// to `out`.
    pub fn cancel_where(&mut self, expired: impl Fn(&T) -> bool, cancelled: &mut Vec<T>) {
        // Remembered for as long as the server may take to read the resets.
        let keep = 64.max(4 * self.slots.len());
        for s in self.slots.iter_mut() {
            if s.id == 0 || !expired(&s.tag) {
                continue;
            }
            head(&mut self.out, 4, RST_STREAM, 0, s.id);
            self.out.extend_from_slice(&CANCEL.to_be_bytes());
            if self.cancelled.len() >= keep {
                self.cancelled.pop_front();
            }
            self.cancelled.push_back(s.id);
            s.id = 0;
            if s.body.take().is_some() {
                self.bodies -= 1;
            }
            self.active -= 1;
            cancelled.push(s.tag);
        }
    }

    /// The first `upto` bytes of `out` were written: the server may now use the updates
    /// among them.
    pub fn written(&mut self, upto: usize) {
        if self.updates_unwritten && upto >= self.updates_end {
            self.updates_unwritten = false;
            self.conn_unwritten = 0;
            for s in self.slots.iter_mut() {
                s.unwritten = 0;
            }
        }
    }

    /// The connection is dropped: the tags of the streams still in flight.
    pub fn abandon(&mut self, lost: &mut Vec<T>) {
        for s in self.slots.iter_mut().filter(|s| s.id != 0) {
            s.id = 0;
            lost.push(s.tag);
        }
        self.active = 0;
        self.bodies = 0;
    }

    /// Queues a GOAWAY saying why we end the connection (sent if the socket still takes it).
    pub fn goaway(&mut self, code: u32) {
        head(&mut self.out, 8, GOAWAY, 0, 0);
        self.out.extend_from_slice(&0u32.to_be_bytes());
        self.out.extend_from_slice(&code.to_be_bytes());
    }
}

impl<T: Copy> Slot<T> {
    /// How the stream ended, its response whole: its status (a final one, else
    /// `h2_no_status`), and for a gRPC call the call's result, read from its framing and
    /// trailers (an HTTP error status without a `grpc-status` stays the HTTP error).
    fn response_end(&mut self, grpc: bool) -> Event<T> {
        if self.status < 200 {
            return Event::Failed(self.tag, RequestError::H2NoStatus);
        }
        if !grpc {
            return Event::Done(self.tag, self.status);
        }
        let reader = std::mem::take(&mut self.grpc);
        let (streamed, messages) = (reader.is_streamed(), reader.whole());
        match reader.end() {
            // An HTTP error status stays the HTTP error, as for a unary call (below).
            grpc::End::Ok if streamed && (200..300).contains(&self.status) => {
                Event::Streamed(self.tag, messages, self.first_ns)
            }
            grpc::End::Ok => Event::Done(self.tag, self.status),
            grpc::End::Status(code, message) => Event::GrpcStatus(self.tag, code, message),
            grpc::End::NoStatus if self.status != 200 => Event::Done(self.tag, self.status),
            grpc::End::NoStatus => Event::Failed(self.tag, RequestError::GrpcNoStatus),
            grpc::End::Broken(how) => Event::Failed(self.tag, broken_kind(how)),
        }
    }
}

/// The error kind a broken gRPC response is counted under.
fn broken_kind(how: grpc::Broken) -> RequestError {
    match how {
        grpc::Broken::Framing => RequestError::GrpcFraming,
        grpc::Broken::BadStatus => RequestError::GrpcBadStatus,
        grpc::Broken::CompressedUnannounced => RequestError::GrpcCompressedUnannounced,
        grpc::Broken::MessageCount => RequestError::GrpcMessageCount,
    }
}

fn parse_status(v: &[u8]) -> Option<u16> {
    match v {
        [a @ b'1'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
            Some((*a - b'0') as u16 * 100 + (*b - b'0') as u16 * 10 + (*c - b'0') as u16)
        }
        _ => None,
    }
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
}

/// The size of the frame whose head starts `buf` (head included), once the head is there.
fn frame_size(buf: &[u8]) -> Option<usize> {
    let h = buf.get(..FRAME_HEAD)?;
    Some(FRAME_HEAD + u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize)
}

/// A frame's 9-byte head.
fn head(out: &mut Vec<u8>, len: usize, ty: u8, flags: u8, id: u32) {
    let l = (len as u32).to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], ty, flags]);
    out.extend_from_slice(&id.to_be_bytes());
}

fn setting(out: &mut Vec<u8>, id: u16, value: u32) {
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&value.to_be_bytes());
}

fn window_update(out: &mut Vec<u8>, id: u32, n: u32) {
    head(out, 4, WINDOW_UPDATE, 0, id);
    out.extend_from_slice(&n.to_be_bytes());
}

/// Encodes one request's header block: the pseudo-headers, then `headers`, each a literal
/// without indexing (or a static-table index), so the block depends on no table state.
pub(super) fn encode_request(req: &http::Request<()>, block: &mut Vec<u8>) {
    let uri = req.uri();
    let pseudo: [(&[u8], &[u8]); 4] = [
        (b":method", req.method().as_str().as_bytes()),
        (b":scheme", uri.scheme_str().unwrap_or("http").as_bytes()),
        (
            b":authority",
            uri.authority().map_or("", |a| a.as_str()).as_bytes(),
        ),
        (
            b":path",
            uri.path_and_query().map_or("/", |p| p.as_str()).as_bytes(),
        ),
    ];
    let headers = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().as_bytes(), v.as_bytes()));
    for (name, value) in pseudo.into_iter().chain(headers) {
        hpack::encode_field(name, value, block);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_broken_grpc_response_is_counted_under_its_own_kind() {
        let all = [
            grpc::Broken::Framing,
            grpc::Broken::BadStatus,
            grpc::Broken::CompressedUnannounced,
            grpc::Broken::MessageCount,
        ];
        let kinds: std::collections::BTreeSet<RequestError> =
            all.iter().map(|&b| broken_kind(b)).collect();
        assert_eq!(kinds.len(), all.len(), "{kinds:?}");
        assert!(kinds.iter().all(|k| k.as_str().starts_with("grpc_")));
    }

    /// A server frame.
    fn frame(ty: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        head(&mut out, payload.len(), ty, flags, id);
        out.extend_from_slice(payload);
        out
    }

    fn ready_conn() -> H2Conn<u32> {
        let mut c = H2Conn::new(8);
        let mut events = Vec::new();
        let mut settings = Vec::new();
        setting(&mut settings, SETTINGS_MAX_CONCURRENT_STREAMS, 2);
        c.receive(&frame(SETTINGS, 0, 0, &settings), &mut events)
            .unwrap();
        assert!(events.is_empty() && c.ready());
        c
    }

    /// A header block of `fields`.
    fn block(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut b = Vec::new();
        for (n, v) in fields {
            hpack::encode_field(n.as_bytes(), v.as_bytes(), &mut b);
        }
        b
    }

    #[test]
    fn grpc_calls_end_with_their_trailers_status_or_framing_error() {
        let mut c = ready_conn().grpc();
        let headers = block(&[(":status", "200"), ("content-type", "application/grpc")]);
        let message = grpc::frame(b"hi");
        let ok = block(&[("grpc-status", "0")]);
        let not_found = block(&[("grpc-status", "5"), ("grpc-message", "gone%21")]);
        let mut events = Vec::new();
        c.open(&[0x82], None, 1);
        c.open(&[0x82], None, 2);
        let mut input = frame(HEADERS, END_HEADERS, 1, &headers);
        input.extend(frame(DATA, 0, 1, &message[..3]));
        input.extend(frame(
            DATA,
            PADDED,
            1,
            &[[2].as_slice(), &message[3..], &[0, 0]].concat(),
        ));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &ok));
        // Trailers-Only: the status in the only block.
        let only = [headers.clone(), not_found].concat();
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 3, &only));
        c.receive(&input, &mut events).unwrap();
        assert_eq!(
            events,
            vec![Event::Done(1, 200), Event::GrpcStatus(2, 5, "gone!".into())]
        );
        events.clear();
        c.open(&[0x82], None, 3);
        c.open(&[0x82], None, 4);
        // No trailers; then a prefix promising more than comes.
        let mut input = frame(HEADERS, END_HEADERS, 5, &headers);
        input.extend(frame(DATA, END_STREAM, 5, &message));
        input.extend(frame(HEADERS, END_HEADERS, 7, &headers));
        input.extend(frame(DATA, 0, 7, &message[..4]));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 7, &ok));
        c.receive(&input, &mut events).unwrap();
        assert_eq!(
            events,
            vec![
                Event::Failed(3, RequestError::GrpcNoStatus),
                Event::Failed(4, RequestError::GrpcFraming)
            ]
        );
    }

    /// A streamed reply's messages are counted as each is whole (`take_messages`, whatever
    /// the call's end) and its first is timed by the read that made it whole: a first time
    /// taken at the headers, at the end, or at a prefix fails here.
    #[test]
    fn a_streamed_reply_times_its_first_whole_message_and_counts_them_all() {
        let mut c = ready_conn().grpc_streamed();
        let headers = block(&[(":status", "200")]);
        let message = grpc::frame(b"hi");
        let ok = block(&[("grpc-status", "0")]);
        let mut events = Vec::new();
        c.open(&[0x82], None, 1);
        c.open(&[0x82], None, 2);
        let mut input = frame(HEADERS, END_HEADERS, 1, &headers);
        input.extend(frame(DATA, 0, 1, &message[..6]));
        c.receive_at(&input, 100, &mut events).unwrap();
        assert_eq!(c.take_messages(), 0, "a message without its last byte");
        let mut input = frame(DATA, 0, 1, &[&message[6..], &message[..]].concat());
        // Stream 3 fails: two messages read, then a status.
        input.extend(frame(HEADERS, END_HEADERS, 3, &headers));
        input.extend(frame(
            DATA,
            0,
            3,
            &[message.clone(), message.clone()].concat(),
        ));
        input.extend(frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            3,
            &block(&[("grpc-status", "14")]),
        ));
        c.receive_at(&input, 200, &mut events).unwrap();
        assert_eq!(c.take_messages(), 4);
        input = frame(HEADERS, END_HEADERS | END_STREAM, 1, &ok);
        c.receive_at(&input, 300, &mut events).unwrap();
        assert_eq!(
            events,
            vec![
                Event::GrpcStatus(2, 14, String::new()),
                Event::Streamed(1, 2, 200)
            ]
        );
        // A stream of no messages ends well, untimed.
        events.clear();
        c.open(&[0x82], None, 3);
        let only = [headers.clone(), ok.clone()].concat();
        c.receive_at(
            &frame(HEADERS, END_HEADERS | END_STREAM, 5, &only),
            400,
            &mut events,
        )
        .unwrap();
        assert_eq!(events, vec![Event::Streamed(3, 0, 0)]);
        // An HTTP error status stays the HTTP error, whatever the trailers say.
        events.clear();
        c.open(&[0x82], None, 4);
        let only = [block(&[(":status", "503")]), ok].concat();
        c.receive_at(
            &frame(HEADERS, END_HEADERS | END_STREAM, 7, &only),
            500,
            &mut events,
        )
        .unwrap();
        assert_eq!(events, vec![Event::Done(4, 503)]);
    }

    #[test]
    fn preface_settings_and_the_servers_limit() {
        let mut c = H2Conn::<u32>::new(8);
        assert!(c.out.starts_with(PREFACE));
        assert!(!c.can_open(8), "not before the server's SETTINGS");
        c.out.clear();
        let mut settings = Vec::new();
        setting(&mut settings, SETTINGS_MAX_CONCURRENT_STREAMS, 2);
        c.receive(&frame(SETTINGS, 0, 0, &settings), &mut Vec::new())
            .unwrap();
        assert_eq!(c.out, frame(SETTINGS, ACK, 0, &[]));
        c.open(&[0x82], None, 1);
        c.open(&[0x82], None, 2);
        assert!(!c.can_open(8), "the server allows 2 streams");
        assert!(c.can_open(8) == (c.active() < 2));
    }

    #[test]
    fn responses_complete_out_of_order_across_cut_reads() {
        // :status 200 (static index 8) on stream 3, :status 404 (index 13) on stream 1, in
        // reads of every size from one byte (cut heads) to the whole input.
        let mut input = frame(HEADERS, END_HEADERS, 3, &[0x88]);
        input.extend(frame(DATA, END_STREAM, 3, b"hello"));
        input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x8d]));
        for size in 1..=input.len() {
            let mut c = ready_conn();
            c.open(&[0x82, 0x84], None, 10);
            c.open(&[0x82, 0x84], None, 11);
            let mut events = Vec::new();
            for chunk in input.chunks(size) {
                c.receive(chunk, &mut events).unwrap();
            }
            assert_eq!(events, vec![Event::Done(11, 200), Event::Done(10, 404)]);
            assert_eq!((c.active(), c.held_bytes()), (0, 0), "reads of {size}");
        }
    }

    #[test]
    fn goaway_refuses_the_streams_above_its_last_id() {
        let mut c = ready_conn();
        c.open(&[0x82], None, 10);
        c.open(&[0x82], None, 11);
        let mut payload = 1u32.to_be_bytes().to_vec();
        payload.extend(NO_ERROR.to_be_bytes());
        let mut events = Vec::new();
        c.receive(&frame(GOAWAY, 0, 0, &payload), &mut events)
            .unwrap();
        assert_eq!(events, vec![Event::Refused(11)]);
        assert!(c.going_away() && !c.goaway_error() && !c.can_open(8));
        c.receive(&frame(RST_STREAM, 0, 1, &CANCEL.to_be_bytes()), &mut events)
            .unwrap();
        assert_eq!(events[1], Event::Failed(10, RequestError::H2Reset));
    }

    #[test]
    fn ping_is_acked_and_windows_are_updated() {
        let mut c = ready_conn();
        c.out.clear();
        c.receive(&frame(PING, 0, 0, b"12345678"), &mut Vec::new())
            .unwrap();
        assert_eq!(c.out, frame(PING, ACK, 0, b"12345678"));
        c.out.clear();
        c.open(&[0x82], None, 1);
        c.receive(&frame(HEADERS, END_HEADERS, 1, &[0x88]), &mut Vec::new())
            .unwrap();
        c.out.clear();
        let chunk = vec![0u8; MAX_FRAME];
        for _ in 0..(STREAM_WINDOW as usize / 2 / MAX_FRAME) {
            c.receive(&frame(DATA, 0, 1, &chunk), &mut Vec::new())
                .unwrap();
        }
        assert_eq!(c.out, {
            let mut w = Vec::new();
            window_update(&mut w, 1, STREAM_WINDOW / 2);
            w
        });
    }

    #[test]
    fn a_body_waits_for_the_servers_window() {
        let mut c = ready_conn();
        c.out.clear();
        c.open(&[0x83], Some(Bytes::from(vec![7u8; 70_000])), 1);
        // 65,535 bytes fit in the default windows: three full frames and the rest.
        let sent: usize = 65_535 + 4 * FRAME_HEAD;
        assert_eq!(c.out.len() - (FRAME_HEAD + 1), sent);
        c.out.clear();
        let mut more = Vec::new();
        window_update(&mut more, 0, 10_000);
        window_update(&mut more, 1, 10_000);
        c.receive(&more, &mut Vec::new()).unwrap();
        assert_eq!(c.out.len(), FRAME_HEAD + 70_000 - 65_535);
        assert_eq!(c.out[4], END_STREAM);
    }

    #[test]
    fn request_blocks_decode_back() {
        let req = http::Request::get("https://h:1/a?b")
            .header("x-k", "v")
            .body(())
            .unwrap();
        let mut block = Vec::new();
        encode_request(&req, &mut block);
        let mut dec = Decoder::new(hpack::DEFAULT_TABLE_SIZE);
        let decode = |dec: &mut Decoder| {
            let mut fields = Vec::new();
            dec.decode(&block, |n, v| fields.push((n.to_vec(), v.to_vec())))
                .unwrap();
            fields
        };
        let fields = decode(&mut dec);
        let want: Vec<(Vec<u8>, Vec<u8>)> = [
            (&b":method"[..], &b"GET"[..]),
            (b":scheme", b"https"),
            (b":authority", b"h:1"),
            (b":path", b"/a?b"),
            (b"x-k", b"v"),
        ]
        .iter()
        .map(|(n, v)| (n.to_vec(), v.to_vec()))
        .collect();
        assert_eq!(fields, want);
        // No indexing: the same block decodes the same a second time.
        assert_eq!(dec.table().entries(), 0);
        assert_eq!(decode(&mut dec), fields);
    }

    /// The connection error a ready connection with stream 1 open (and stream 3 when
    /// `two`) meets on `input`.
    fn error_on(input: &[u8], two: bool) -> Option<RequestError> {
        let mut c = ready_conn();
        c.open(&[0x82], None, 1);
        if two {
            c.open(&[0x82], None, 3);
        }
        c.receive(input, &mut Vec::new()).err().map(|e| e.kind)
    }

    fn frames(list: &[(u8, u8, u32, &[u8])]) -> Vec<u8> {
        list.iter()
            .flat_map(|(ty, flags, id, p)| frame(*ty, *flags, *id, p))
            .collect()
    }

    #[test]
    fn each_broken_rule_is_a_connection_error_of_its_kind() {
        let eh = END_HEADERS | END_STREAM;
        let cases: &[(&str, Vec<u8>, Option<RequestError>)] = &[
            (
                "hpack 00",
                frame(HEADERS, eh, 1, &[0x00]),
                Some(RequestError::H2Compression),
            ),
            (
                "hpack ff 80",
                frame(HEADERS, eh, 1, &[0xff, 0x80]),
                Some(RequestError::H2Compression),
            ),
            (
                "DATA on an idle stream",
                frame(DATA, 0, 5, b"x"),
                Some(RequestError::H2Protocol),
            ),
            (
                "DATA on a closed stream",
                frames(&[(HEADERS, eh, 1, &[0x88]), (DATA, 0, 1, b"x")]),
                Some(RequestError::H2StreamClosed),
            ),
            (
                "SETTINGS on stream 1",
                frame(SETTINGS, 0, 1, &[]),
                Some(RequestError::H2Protocol),
            ),
            (
                "PING on stream 1",
                frame(PING, 0, 1, b"12345678"),
                Some(RequestError::H2Protocol),
            ),
            (
                "SETTINGS of 7 bytes",
                frame(SETTINGS, 0, 0, &[0; 7]),
                Some(RequestError::H2FrameSize),
            ),
            (
                "CONTINUATION alone",
                frame(CONTINUATION, END_HEADERS, 1, &[0x88]),
                Some(RequestError::H2Protocol),
            ),
            (
                "RST_STREAM on an idle stream",
                frame(RST_STREAM, 0, 7, &[0, 0, 0, 8]),
                Some(RequestError::H2Protocol),
            ),
            (
                "an oversize frame",
                frame(DATA, 0, 1, &vec![0; MAX_FRAME + 1]),
                Some(RequestError::H2FrameSize),
            ),
            (
                "a 65-KiB header block",
                {
                    let mut f = frame(HEADERS, 0, 1, &[0x88]);
                    for _ in 0..4 {
                        f.extend(frame(CONTINUATION, 0, 1, &vec![0x88; MAX_FRAME]));
                    }
                    f
                },
                Some(RequestError::H2HeadersTooLarge),
            ),
            (
                "empty CONTINUATION frames",
                {
                    let mut f = frame(HEADERS, 0, 1, &[0x88]);
                    for _ in 0..=MAX_CONTINUATIONS {
                        f.extend(frame(CONTINUATION, 0, 1, &[]));
                    }
                    f
                },
                Some(RequestError::H2HeadersTooLarge),
            ),
            (
                "resets of a closed stream",
                {
                    let mut f = frame(HEADERS, eh, 1, &[0x88]);
                    for _ in 0..=MAX_IDLE_FRAMES {
                        f.extend(frame(RST_STREAM, 0, 1, &[0, 0, 0, 8]));
                    }
                    f
                },
                Some(RequestError::H2Flood),
            ),
            (
                "a reset of an answered stream",
                frames(&[(HEADERS, eh, 1, &[0x88]), (RST_STREAM, 0, 1, &[0, 0, 0, 0])]),
                None,
            ),
            (
                "a stream's window exceeded",
                {
                    let mut f = frame(HEADERS, END_HEADERS, 1, &[0x88]);
                    for _ in 0..=(STREAM_WINDOW as usize / MAX_FRAME) {
                        f.extend(frame(DATA, 0, 1, &vec![0; MAX_FRAME]));
                    }
                    f
                },
                Some(RequestError::H2FlowControl),
            ),
        ];
        for (what, input, want) in cases {
            assert_eq!(error_on(input, true), *want, "{what}");
        }
    }

    #[test]
    fn what_a_connection_holds_is_one_cut_frame_and_one_block_at_most() {
        let mut c = ready_conn();
        c.open(&[0x82], None, 1);
        let mut events = Vec::new();
        // A frame's head cut short: room for the head; then for the whole frame, exactly.
        let data = frame(DATA, 0, 1, &[0; MAX_FRAME]);
        c.receive(&frame(HEADERS, END_HEADERS, 1, &[0x88]), &mut events)
            .unwrap();
        c.receive(&data[..5], &mut events).unwrap();
        assert_eq!(c.held_bytes(), FRAME_HEAD);
        c.receive(&data[5..100], &mut events).unwrap();
        assert_eq!(c.held_bytes(), FRAME_HEAD + MAX_FRAME);
        // The frame made whole by a read that brings more: only the cut one was copied, and
        // the next cut one is held alone.
        let mut more = data[100..].to_vec();
        more.extend(frame(DATA, 0, 1, &[0; 10]));
        more.extend_from_slice(&frame(DATA, END_STREAM, 1, &[0; 100])[..20]);
        c.receive(&more, &mut events).unwrap();
        assert_eq!(c.held_bytes(), FRAME_HEAD + 100);
        c.receive(&[0; 89], &mut events).unwrap();
        assert_eq!(
            (c.held_bytes(), &events[..]),
            (0, &[Event::Done(1, 200)][..])
        );
        // A header block of 64 KiB less one byte, in 16-KiB frames: at most 64 KiB held for
        // it, and a cut frame beside it; nothing once it ends.
        c.open(&[0x82], None, 2);
        let mut block = frame(HEADERS, END_STREAM, 3, &[0x88; MAX_FRAME]);
        block.extend(frame(CONTINUATION, 0, 3, &[0x88; MAX_FRAME]).repeat(2));
        block.extend(frame(CONTINUATION, 0, 3, &[0x88; MAX_FRAME - 1]));
        let last = frame(CONTINUATION, END_HEADERS, 3, &[0x88]);
        block.extend_from_slice(&last[..3]);
        c.receive(&block, &mut events).unwrap();
        assert_eq!(c.held_bytes(), MAX_HEADER_BLOCK + FRAME_HEAD);
        c.receive(&last[3..], &mut events).unwrap();
        assert_eq!((c.held_bytes(), events.len()), (0, 2));
    }

    #[test]
    fn the_window_counts_our_updates_once_written() {
        let mut c = ready_conn();
        c.open(&[0x82], None, 1);
        let mut events = Vec::new();
        c.receive(&frame(HEADERS, END_HEADERS, 1, &[0x88]), &mut events)
            .unwrap();
        let chunk = vec![0u8; MAX_FRAME];
        // 4 MiB in two halves, our update for the first written in between: within the window.
        for _ in 0..2 {
            for _ in 0..(STREAM_WINDOW as usize / 2 / MAX_FRAME) {
                c.receive(&frame(DATA, 0, 1, &chunk), &mut events).unwrap();
            }
            c.out.clear();
            c.written(usize::MAX);
        }
        for _ in 0..(STREAM_WINDOW as usize / 2 / MAX_FRAME) {
            c.receive(&frame(DATA, 0, 1, &chunk), &mut events).unwrap();
        }
        c.receive(&frame(DATA, END_STREAM, 1, &[]), &mut events)
            .unwrap();
        assert_eq!(events, vec![Event::Done(1, 200)]);
    }
}
