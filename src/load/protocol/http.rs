//! HTTP/1.1 keep-alive requests and response framing.
