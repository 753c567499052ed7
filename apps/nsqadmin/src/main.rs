//! The `nsqadmin` binary: parses flags (Go-style `-flag` and `--flag`, `--config`), starts the
//! web UI/API server and stops it on SIGINT/SIGTERM.

use std::process::ExitCode;

use nsqadmin::options::{parse_args, usage, version_string, ParseOutcome};

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
            if e.exit_code() == 2 {
                eprintln!("{e}");
                eprint!("{}", usage());
            } else {
                nsqd::logging::init("[nsqadmin] ", "info");
                tracing::error!("FATAL: {e}");
            }
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    nsqd::logging::init(&opts.log_prefix, opts.log_level.as_str());
    let rt = match tokio::runtime::Builder::new_multi_thread()
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
        let handle = match nsqadmin::start(opts).await {
            Ok(h) => h,
            Err(e) => {
                tracing::error!("FATAL: failed to instantiate nsqadmin - {e}");
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
