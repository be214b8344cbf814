//! The one integration test binary (`cargo test --test it`), one module per area, as ripgrep
//! does: one link of the library instead of one per file. Run one area with a filter, e.g.
//! `cargo test --release --test it sweep::`.
//!
//! Shared support: [`certs`] (test certificates, nginx over TLS), [`common`] (servers on
//! loopback, running the CLI, blessing golden files, generated mock /sys trees), [`netns`]
//! (ssh hosts in network namespaces), [`slurm_lab`] (a Slurm cluster on them) and [`schema`] (the JSON-Schema checker for the files
//! stairbench writes).

mod certs;
mod common;
mod netns;
mod schema;
mod slurm_lab;

mod accounting;
mod analyze;
mod arrivals;
mod cli;
mod code_health;
mod compare;
mod demo;
mod docs;
mod external_load;
mod external_servers;
mod flame;
mod gaps;
mod gates;
mod grpc;
mod grpc_json;
mod grpc_reflection;
mod grpc_streams;
mod h2;
mod help;
mod history;
mod hostile;
mod hostile_h2;
mod hosts;
mod hpack_conformance;
mod instances;
mod kvd;
mod kvd_hosts;
mod launchers;
mod layering;
mod live;
mod load_engine;
mod many_hosts;
mod memcache;
mod nginx_example;
mod observe;
mod parsers;
mod profiling;
mod remote;
mod report_html;
mod running;
mod serve_msgr;
mod shmkv;
mod skips;
mod slurm;
mod slurm_cost;
mod soak;
mod sources;
mod stop_signal;
mod sweep;
mod syscalls;
mod templates;
mod thread_states;
mod threads;
mod tls;
mod topology;
mod windows;
