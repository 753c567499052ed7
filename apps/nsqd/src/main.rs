//! The `nsqd` binary: parses flags (Go-style `-flag` and `--flag`), starts the daemon, and
//! shuts it down gracefully on SIGINT/SIGTERM (`nsq_http::daemon` does the sequence).

use std::process::ExitCode;

use nsq_http::daemon::{run, FatalFlagStyle, RunOptions, Workers};

/// jemalloc instead of glibc's malloc: glibc keeps freed memory in per-thread arenas, so after
/// a burst of 10,000 connections RSS stayed hundreds of MB above what was in use; jemalloc's
/// background thread gives dirty pages back after ~1 s (decay settings in .cargo/config.toml).
/// Figures in bench/README.md, "Memory".
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    run::<nsqd::NsqdHandle>(RunOptions {
        fatal_flag_style: FatalFlagStyle::Plain,
        workers: Workers::AllButOneCore,
        start_error_prefix: "",
    })
}
