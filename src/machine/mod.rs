//! What the running machine is: its CPU topology from /sys (`topology`) and the parsers of
//! /proc's files (`procfs`, per thread in `threads`). Readers only; nothing here decides what to do with the answers.

pub mod procfs;
pub mod threads;
pub mod topology;
