//! Reading curves: knee, Universal Scalability Law, Little's law, latency modes.

pub mod cli;
