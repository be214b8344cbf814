//! Tests that need the machine to themselves. Cargo runs one test binary after the other, so
//! nothing in `tests/it` runs beside these: the diagnosis demonstrations run their servers
//! under SCHED_FIFO (`chrt -f 5`), which beside other tests would starve them (a 0.5 s step of
//! another test once measured no request) and be disturbed by them in turn.

#[allow(dead_code)]
#[path = "../it/common.rs"]
mod common;
mod diagnosis;
mod limits_io;
mod tomcat;
