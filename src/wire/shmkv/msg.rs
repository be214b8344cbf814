//! The request and response records both designs place in shared memory. How a server
//! answers one is the server's business (`serve::shmkv::table::serve`).

/// Longest key a request may carry, bytes.
pub const MAX_KEY: usize = 64;
/// Longest value a request or response may carry, bytes.
pub const MAX_VALUE: usize = 4096;

/// Operation codes.
pub const OP_GET: u32 = 1;
/// Stores a value.
pub const OP_SET: u32 = 2;

/// Status codes.
pub const ST_OK: u32 = 0;
/// GET of a key never set.
pub const ST_NOT_FOUND: u32 = 1;
/// Unknown operation or lengths out of range (only a broken or foreign client sends one).
pub const ST_BAD_REQUEST: u32 = 2;

/// One request, as written by a client.
#[repr(C)]
pub struct Request {
    pub op: u32,
    pub key_len: u32,
    pub value_len: u32,
    /// The client's number (the `single` design routes the response by it).
    pub client: u32,
    /// The client's request number.
    pub seq: u64,
    pub key: [u8; MAX_KEY],
    pub value: [u8; MAX_VALUE],
}

/// One response, as written by a server.
#[repr(C)]
pub struct Response {
    pub status: u32,
    pub value_len: u32,
    pub client: u32,
    pub _pad: u32,
    pub seq: u64,
    pub value: [u8; MAX_VALUE],
}

impl Request {
    /// Fills in a request (only the bytes in use are written).
    pub fn fill(&mut self, op: u32, key: &[u8], value: &[u8], client: u32, seq: u64) {
        self.op = op;
        self.key_len = key.len() as u32;
        self.value_len = value.len() as u32;
        self.client = client;
        self.seq = seq;
        self.key[..key.len()].copy_from_slice(key);
        self.value[..value.len()].copy_from_slice(value);
    }

    /// The key, or `None` when the lengths are out of range.
    pub fn key(&self) -> Option<&[u8]> {
        let k = self.key_len as usize;
        (k <= MAX_KEY && self.value_len as usize <= MAX_VALUE).then(|| &self.key[..k])
    }
}

/// Copies a request out of shared memory (the used bytes only, lengths clamped).
pub fn copy_request(dst: &mut Request, src: &Request) {
    let (k, v) = (
        (src.key_len as usize).min(MAX_KEY),
        (src.value_len as usize).min(MAX_VALUE),
    );
    dst.op = src.op;
    dst.key_len = src.key_len;
    dst.value_len = src.value_len;
    dst.client = src.client;
    dst.seq = src.seq;
    dst.key[..k].copy_from_slice(&src.key[..k]);
    dst.value[..v].copy_from_slice(&src.value[..v]);
}

/// Copies a response (the used bytes only, length clamped).
pub fn copy_response(dst: &mut Response, src: &Response) {
    let v = (src.value_len as usize).min(MAX_VALUE);
    dst.status = src.status;
    dst.value_len = v as u32;
    dst.client = src.client;
    dst.seq = src.seq;
    dst.value[..v].copy_from_slice(&src.value[..v]);
}

/// A zeroed record on the heap (both records are integers and bytes: all-zero is valid).
pub fn boxed<T: Record>() -> Box<T> {
    // SAFETY: `Record` is only implemented by the two plain records above.
    unsafe { Box::new(std::mem::zeroed()) }
}

/// Marks the plain-data records that may be zero-initialised.
pub trait Record {}
impl Record for Request {}
impl Record for Response {}

/// Checks what a caller wants to send before it touches shared memory.
pub fn check_sizes(key: &[u8], value: &[u8]) -> Result<(), super::ShmkvError> {
    if key.is_empty() || key.len() > MAX_KEY || value.len() > MAX_VALUE {
        return Err(super::ShmkvError::TooLarge {
            key_len: key.len(),
            value_len: value.len(),
        });
    }
    Ok(())
}
