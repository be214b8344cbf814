//! Formats both sides of a connection speak: the messenger frame codec (`msgr`) and the
//! shared-memory key-value region (`shmkv`), and the kvd daemons' peer protocol (`kvd`). The load generator and the servers import these;
//! neither imports the other.

pub mod kvd;
pub mod msgr;
pub mod shmkv;
