//! Length-prefixed messenger frames (placeholder until the serve branch lands).

use super::{Protocol, Reply};

/// Client side of the msgr protocol.
pub struct MsgrProto {
    request: Vec<u8>,
    msg_size: usize,
}

impl MsgrProto {
    /// Requests of `msg_size` bytes asking for replies of the same size.
    pub fn new(msg_size: usize) -> Self {
        let mut request = Vec::with_capacity(8 + msg_size);
        request.extend_from_slice(&(msg_size as u32).to_le_bytes());
        request.extend_from_slice(&(msg_size as u32).to_le_bytes());
        request.resize(8 + msg_size, 0);
        MsgrProto { request, msg_size }
    }
}

impl Protocol for MsgrProto {
    fn next_request(&mut self) -> &[u8] {
        &self.request
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        if buf.len() < 8 {
            return Reply::Incomplete;
        }
        let len = u32::from_le_bytes(buf[0..4].try_into().unwrap()) as usize;
        if len != self.msg_size {
            return Reply::Invalid("bad_frame");
        }
        if buf.len() < 8 + len {
            return Reply::Incomplete;
        }
        Reply::Done {
            len: 8 + len,
            error: None,
            close: false,
        }
    }
}
