//! The messenger frame codec, shared by the load engine (`load::protocol::msgr`) and
//! `stairbench serve msgr`.
//!
//! ```text
//! request frame = u32 LE payload_len | u32 LE reply_len | payload_len bytes
//! reply frame   = u32 LE payload_len | u32 LE 0         | payload_len bytes (== the request's reply_len)
//! ```
//!
//! The format carries no content the server must understand, so the only malformed frame
//! is one whose lengths cannot be honoured: both sides check them against a maximum before
//! waiting for (or allocating) a single payload byte, which keeps memory bounded against
//! a hostile 4 GB length.

use thiserror::Error;

/// Bytes of a frame header: two little-endian u32 words.
pub const HEADER_LEN: usize = 8;

/// Default bound on `payload_len` and `reply_len` (the server's `--max-frame`).
pub const DEFAULT_MAX_FRAME: u32 = 16 << 20;

/// The two words at the front of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload bytes that follow the header.
    pub payload_len: u32,
    /// Request: the reply payload size asked for. Reply: always 0.
    pub reply_len: u32,
}

impl FrameHeader {
    /// The header's wire bytes.
    pub fn encode(self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..4].copy_from_slice(&self.payload_len.to_le_bytes());
        out[4..].copy_from_slice(&self.reply_len.to_le_bytes());
        out
    }

    /// Reads a header from the front of `buf`; `None` while fewer than 8 bytes are there.
    pub fn decode(buf: &[u8]) -> Option<FrameHeader> {
        let word = |i: usize| u32::from_le_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
        (buf.len() >= HEADER_LEN).then(|| FrameHeader {
            payload_len: word(0),
            reply_len: word(4),
        })
    }

    /// Checks a request header against the frame bound.
    pub fn check_request(self, max_frame: u32) -> Result<(), FrameError> {
        if self.payload_len > max_frame {
            return Err(FrameError::TooLarge {
                field: "payload_len",
                len: self.payload_len,
                max: max_frame,
            });
        }
        if self.reply_len > max_frame {
            return Err(FrameError::TooLarge {
                field: "reply_len",
                len: self.reply_len,
                max: max_frame,
            });
        }
        Ok(())
    }
}

/// Appends one whole reply frame (header and a zero payload of `reply_len` bytes) to `out`.
pub fn encode_reply(out: &mut Vec<u8>, reply_len: u32) {
    let header = FrameHeader {
        payload_len: reply_len,
        reply_len: 0,
    };
    out.extend_from_slice(&header.encode());
    out.resize(out.len() + reply_len as usize, 0);
}

/// A frame the peer should not have sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// A length over the frame bound (garbage bytes read as a header land here too).
    #[error("frame {field} of {len} bytes is over the {max}-byte limit (raise --max-frame if it is genuine)")]
    TooLarge {
        /// Which header word was too large.
        field: &'static str,
        /// The length the header announced.
        len: u32,
        /// The bound in force.
        max: u32,
    },
}

/// Streaming decoder of request frames for the server side.
///
/// It keeps at most a partial header: payload bytes are counted and skipped, never stored,
/// because the reply depends only on `reply_len`. Memory per connection is constant.
#[derive(Debug, Default, Clone)]
pub struct RequestDecoder {
    header: [u8; HEADER_LEN],
    header_len: usize,
    /// Payload bytes of the current frame still to skip.
    skip: u32,
    /// The current frame's reply_len, once its header is read.
    reply_len: Option<u32>,
}

impl RequestDecoder {
    /// Consumes `data`, calling `on_request(reply_len)` for every request whose payload is
    /// complete; stops early, right after a request, when `on_request` returns false (the
    /// caller's output is full). Returns the bytes consumed. Fails at the first frame that
    /// breaks the bound, before any of its payload is awaited.
    pub fn feed(
        &mut self,
        data: &[u8],
        max_frame: u32,
        mut on_request: impl FnMut(u32) -> bool,
    ) -> Result<usize, FrameError> {
        let mut at = 0;
        loop {
            if let Some(reply_len) = self.reply_len {
                let take = (self.skip as usize).min(data.len() - at);
                self.skip -= take as u32;
                at += take;
                if self.skip > 0 {
                    return Ok(at);
                }
                self.reply_len = None;
                if !on_request(reply_len) {
                    return Ok(at);
                }
            }
            if at == data.len() {
                return Ok(at);
            }
            at += self.read_header(&data[at..], max_frame)?;
        }
    }

    /// True when the decoder is between frames (a close here truncates nothing).
    pub fn at_frame_boundary(&self) -> bool {
        self.header_len == 0 && self.reply_len.is_none()
    }

    /// Takes header bytes from the front of `data`; returns how many.
    fn read_header(&mut self, data: &[u8], max_frame: u32) -> Result<usize, FrameError> {
        let take = (HEADER_LEN - self.header_len).min(data.len());
        self.header[self.header_len..self.header_len + take].copy_from_slice(&data[..take]);
        self.header_len += take;
        if self.header_len == HEADER_LEN {
            let header = FrameHeader::decode(&self.header).expect("whole header");
            header.check_request(max_frame)?;
            self.header_len = 0;
            self.skip = header.payload_len;
            self.reply_len = Some(header.reply_len);
        }
        Ok(take)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let h = FrameHeader {
            payload_len: 0x0102_0304,
            reply_len: 7,
        };
        assert_eq!(h.encode(), [4, 3, 2, 1, 7, 0, 0, 0]);
        assert_eq!(FrameHeader::decode(&h.encode()), Some(h));
        assert_eq!(FrameHeader::decode(&[1, 2, 3]), None);
    }

    fn request(payload: u32, reply_len: u32) -> Vec<u8> {
        let mut out = FrameHeader {
            payload_len: payload,
            reply_len,
        }
        .encode()
        .to_vec();
        out.resize(out.len() + payload as usize, 1);
        out
    }

    #[test]
    fn decoder_finds_pipelined_requests_split_anywhere() {
        let mut stream = request(5, 100);
        stream.extend(request(0, 3));
        stream.extend(request(70, 0));
        for chunk in 1..stream.len() {
            let mut dec = RequestDecoder::default();
            let mut got = Vec::new();
            for piece in stream.chunks(chunk) {
                let used = dec.feed(piece, 1024, |r| {
                    got.push(r);
                    true
                });
                assert_eq!(used.unwrap(), piece.len());
            }
            assert_eq!(got, vec![100, 3, 0], "chunk {chunk}");
            assert!(dec.at_frame_boundary());
        }
    }

    #[test]
    fn decoder_refuses_oversize_and_garbage_before_reading_payload() {
        let mut dec = RequestDecoder::default();
        let err = dec.feed(&request(0, 2048), 1024, |_| true).unwrap_err();
        assert!(matches!(
            err,
            FrameError::TooLarge {
                field: "reply_len",
                len: 2048,
                ..
            }
        ));
        let mut dec = RequestDecoder::default();
        let err = dec.feed(b"GET / HTTP/1.1\r\n", DEFAULT_MAX_FRAME, |_| true);
        assert!(matches!(
            err,
            Err(FrameError::TooLarge {
                field: "payload_len",
                ..
            })
        ));
        let mut dec = RequestDecoder::default();
        assert!(dec.feed(&[0xff; 8], DEFAULT_MAX_FRAME, |_| true).is_err());
    }

    #[test]
    fn decoder_stops_after_the_request_the_caller_refuses() {
        let mut stream = request(3, 10);
        stream.extend(request(2, 20));
        stream.extend(request(1, 30));
        let mut dec = RequestDecoder::default();
        let mut got = Vec::new();
        let used = dec
            .feed(&stream, 64, |r| {
                got.push(r);
                r < 20
            })
            .unwrap();
        assert_eq!((got.as_slice(), used), (&[10, 20][..], 11 + 10));
        assert!(dec.at_frame_boundary());
        let rest = dec.feed(&stream[used..], 64, |r| {
            got.push(r);
            true
        });
        let rest = rest.unwrap();
        assert_eq!((got, rest), (vec![10, 20, 30], 9));
    }

    #[test]
    fn decoder_tracks_frame_boundary() {
        let mut dec = RequestDecoder::default();
        dec.feed(&request(4, 1)[..6], 64, |_| true).unwrap();
        assert!(!dec.at_frame_boundary());
        dec.feed(&request(4, 1)[6..], 64, |_| true).unwrap();
        assert!(dec.at_frame_boundary());
    }
}
