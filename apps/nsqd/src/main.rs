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
    raise_nofile_limit();
    run::<nsqd::NsqdHandle>(RunOptions {
        fatal_flag_style: FatalFlagStyle::Plain,
        workers: Workers::AllButOneCore,
        start_error_prefix: "",
    })
}

/// Raises the soft open-files limit to the hard one, as every Go program does at start-up (Go
/// 1.19+, os/rlimit.go) — so NSQ does — and nsqd needs: each TCP connection holds one
/// descriptor (crates/nsqd/src/transport.rs), each diskqueue file open another. Best effort:
/// on failure the limit stays as it was.
fn raise_nofile_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        );
    }
}
