//! A step on other hosts: the `[hosts]` a spec's targets and client groups name, connected
//! once per run (binary, topology, clock offset), targets started there, client groups run
//! there with their windows started together, and remote targets observed where they run.
//! Each host is reached through its `crate::remote::Engine` (ssh, local).

pub mod groups;
pub mod observer;
pub mod remote_group;
pub mod server;
pub mod server_health;
pub mod session;
