//! The `nsqd` binary: parses flags (Go-style `-flag` and `--flag`), starts the daemon, and
//! shuts it down gracefully on SIGINT/SIGTERM (or drains first: `--sigterm=drain`, see
//! nsqd::drain).

use std::process::ExitCode;

use nsqd::options::{parse_args, usage, version_string, ParseOutcome};

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
        // Signals, drain mode and PUT /config/shutdown; returns after the clean shutdown.
        nsqd::drain::run(handle).await;
        ExitCode::SUCCESS
    })
}
