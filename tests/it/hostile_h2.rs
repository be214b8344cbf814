//! HTTP/2 servers that break the protocol (raw frames written by the test).
