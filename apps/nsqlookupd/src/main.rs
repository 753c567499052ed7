//! The `nsqlookupd` binary: parses flags (Go-style `-flag` and `--flag`) and the config file,
//! starts the daemon, and shuts it down cleanly on SIGINT/SIGTERM.

use std::process::ExitCode;

use nsqlookupd::options::{parse_args, usage, version_string, FlagError, ParseOutcome};

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
        Err(e @ FlagError::Usage(_)) => {
            eprintln!("{e}");
            eprint!("{}", usage());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("FATAL: {e}");
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    nsqd::logging::init(&opts.log_prefix, opts.log_level.as_str());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("failed to start runtime - {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let handle = match nsqlookupd::start(opts).await {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("FATAL: failed to instantiate nsqlookupd - {e}");
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
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("failed to install signal handlers");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
