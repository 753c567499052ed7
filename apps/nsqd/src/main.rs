//! The `nsqd` binary: parses flags (Go-style `-flag` and `--flag`), starts the daemon, and
//! shuts it down gracefully on SIGINT/SIGTERM.

use std::process::ExitCode;

use nsqd::options::{parse_args, usage, version_string, ParseOutcome};

/// jemalloc instead of glibc's malloc: glibc keeps freed memory in per-thread arenas, so after
/// a burst of 10,000 connections RSS stayed hundreds of MB above what was in use; jemalloc's
/// background thread gives dirty pages back after ~1 s (decay settings in .cargo/config.toml).
/// Figures in bench/README.md, "Memory".
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args()) {
        Ok(ParseOutcome::Run(opts)) => opts,
        Ok(ParseOutcome::Version) => {
            println!("{}", version_string());
            return ExitCode::SUCCESS;
        }
        Ok(ParseOutcome::Help) => {
            eprint!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{e}");
            if e.exit_code() == 2 {
                eprint!("{}", usage());
            }
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    nsqd::logging::init(&opts.log_prefix, opts.log_level.as_str());
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    // One worker per core but one: the cross-thread wake-ups of a fully used worker pool cost
    // more than they give on small machines (2 cores: 1 worker does ~1.3x the messages per
    // CPU second of 2, see bench/README.md), and the spare core serves the diskqueue syncer,
    // blocking I/O and the clients. `TOKIO_WORKER_THREADS` overrides it.
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        builder.worker_threads(cores.saturating_sub(1).max(1));
    }
    let rt = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("failed to start runtime - {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let handle = match nsqd::start(opts).await {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("FATAL: {e}");
                return ExitCode::FAILURE;
            }
        };
        wait_for_signal().await;
        handle.shutdown().await;
        ExitCode::SUCCESS
    })
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
