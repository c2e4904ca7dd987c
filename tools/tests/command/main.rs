//! The `fntrace` command's tests: it records, reads, reports and exports
//! traces of real programs (C built with `gcc -pg`, Rust built by
//! `fntrace cargo`) and of traces written by uftrace. Gathered in one test
//! binary: one link instead of 27, and libtest runs two tests at a
//! time, one's waits beside the other's work.
//!
//! `cargo test -p fntrace-tools --test command MODULE::` runs one file's
//! tests. Every file here must be a module of this binary (checked by
//! tests/programs/main.rs).

#[path = "../common/mod.rs"]
mod common;
#[path = "../instrumented/mod.rs"]
mod instrumented;
#[path = "../perfetto_trace/mod.rs"]
mod perfetto_trace;
#[path = "../profile_program/mod.rs"]
mod profile_program;
#[path = "../prometheus_server/mod.rs"]
mod prometheus_server;

mod async_flight;
mod async_futures;
mod async_hand_written;
mod async_live;
mod async_metrics;
mod async_prometheus;
mod async_record_pid;
mod async_state_loads;
mod async_tokio_metrics;
mod async_wrapped;
mod cargo_build;
mod chrome_select;
mod cli;
mod cli_uftrace;
mod cpp_names;
mod ctl;
mod golden;
mod hist;
mod kv_service;
mod openmetrics;
mod perfetto;
mod pprof;
mod profile_cli;
mod profile_live;
mod profile_prometheus;
mod report_vs_uftrace;
mod stream_listing;
mod top_off_cpu;
mod top_wall_time;
mod trace_dir_safety;
