//! Formats both sides of a connection speak: the messenger frame codec (`msgr`) and the
//! shared-memory key-value region (`shmkv`), the kvd daemons' peer protocol (`kvd`), and
//! HTTP/2's header compression (`hpack`), gRPC's message framing and status (`grpc`), and
//! HTTP/1.1 reply framing (`http1`: the load's connections and the target-metrics reader parse
//! replies with it). The load generator and
//! the servers import these; neither imports the other.

pub mod grpc;
pub mod hpack;
pub mod http1;
pub mod kvd;
pub mod msgr;
pub mod shmkv;
