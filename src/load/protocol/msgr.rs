//! The load engine's side of the messenger protocol: one pre-encoded request, a reply parser.
//! The frame format itself is [`crate::wire::msgr`], which the server uses too.

use super::{Protocol, Reply};
use crate::record::load::RequestError;
use crate::wire::msgr::{FrameHeader, DEFAULT_MAX_FRAME, HEADER_LEN};

/// The load engine's side: one pre-encoded request of `msg_size` bytes asking for a reply of
/// `msg_size` bytes, and a reply parser that never waits on an impossible length.
#[derive(Debug, Clone)]
pub struct MsgrProto {
    request: Vec<u8>,
    msg_size: u32,
    max_frame: u32,
}

impl MsgrProto {
    /// A connection's protocol for payloads of `msg_size` bytes each way.
    pub fn new(msg_size: usize) -> MsgrProto {
        let msg_size = u32::try_from(msg_size).unwrap_or(u32::MAX);
        let header = FrameHeader {
            payload_len: msg_size,
            reply_len: msg_size,
        };
        let mut request = Vec::with_capacity(HEADER_LEN + msg_size as usize);
        request.extend_from_slice(&header.encode());
        request.resize(HEADER_LEN + msg_size as usize, 0x5a);
        MsgrProto {
            request,
            msg_size,
            max_frame: DEFAULT_MAX_FRAME.max(msg_size),
        }
    }
}

impl Protocol for MsgrProto {
    fn next_request(&mut self) -> &[u8] {
        &self.request
    }

    fn parse_reply(&mut self, buf: &[u8]) -> Reply {
        let Some(header) = FrameHeader::decode(buf) else {
            return Reply::Incomplete;
        };
        if header.reply_len != 0 || header.payload_len > self.max_frame {
            return Reply::Invalid(RequestError::BadFrame);
        }
        let len = HEADER_LEN + header.payload_len as usize;
        if buf.len() < len {
            return Reply::Incomplete;
        }
        let error = (header.payload_len != self.msg_size).then_some(RequestError::ShortBody);
        Reply::Done {
            len,
            error,
            close: false,
            found: None,
            status: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::msgr::encode_reply;

    fn reply(len: u32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_reply(&mut out, len);
        out
    }

    fn done(len: usize, error: Option<RequestError>) -> Reply {
        Reply::Done {
            len,
            error,
            close: false,
            found: None,
            status: None,
        }
    }

    #[test]
    fn request_is_encoded_once_with_both_lengths() {
        let mut proto = MsgrProto::new(64);
        let req = proto.next_request().to_vec();
        assert_eq!(req.len(), HEADER_LEN + 64);
        let h = FrameHeader::decode(&req).unwrap();
        assert_eq!((h.payload_len, h.reply_len), (64, 64));
        assert_eq!(proto.next_request(), &req[..]);
    }

    #[test]
    fn partial_reply_is_incomplete_at_every_cut() {
        let mut proto = MsgrProto::new(16);
        let whole = reply(16);
        for cut in 0..whole.len() {
            assert_eq!(
                proto.parse_reply(&whole[..cut]),
                Reply::Incomplete,
                "cut {cut}"
            );
        }
        assert_eq!(proto.parse_reply(&whole), done(24, None));
    }

    #[test]
    fn several_replies_in_one_buffer_parse_one_at_a_time() {
        let mut proto = MsgrProto::new(4);
        let mut buf = reply(4);
        buf.extend(reply(4));
        buf.extend(&reply(4)[..5]);
        let mut at = 0;
        let mut whole = 0;
        while let Reply::Done { len, error, .. } = proto.parse_reply(&buf[at..]) {
            assert_eq!(error, None);
            at += len;
            whole += 1;
        }
        assert_eq!((whole, at), (2, 24));
        assert_eq!(proto.parse_reply(&buf[at..]), Reply::Incomplete);
    }

    #[test]
    fn wrong_reply_size_is_short_body() {
        let mut proto = MsgrProto::new(64);
        assert_eq!(
            proto.parse_reply(&reply(10)),
            done(18, Some(RequestError::ShortBody))
        );
    }

    #[test]
    fn hostile_lengths_are_invalid_without_waiting() {
        let mut proto = MsgrProto::new(64);
        let four_gb = FrameHeader {
            payload_len: u32::MAX,
            reply_len: 0,
        };
        assert_eq!(
            proto.parse_reply(&four_gb.encode()),
            Reply::Invalid(RequestError::BadFrame)
        );
        let nonzero_second = FrameHeader {
            payload_len: 4,
            reply_len: 1,
        };
        assert_eq!(
            proto.parse_reply(&nonzero_second.encode()),
            Reply::Invalid(RequestError::BadFrame)
        );
    }
}
