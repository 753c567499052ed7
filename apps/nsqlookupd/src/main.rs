//! The `nsqlookupd` binary: parses flags (Go-style `-flag` and `--flag`) and the config file,
//! starts the daemon, and shuts it down cleanly on SIGINT/SIGTERM (`nsq_http::daemon` does the
//! sequence).

use std::process::ExitCode;

use nsq_http::daemon::{run, FatalFlagStyle, RunOptions, Workers};

fn main() -> ExitCode {
    run::<nsqlookupd::NsqlookupdHandle>(RunOptions {
        fatal_flag_style: FatalFlagStyle::Prefixed,
        workers: Workers::Fixed(2),
        start_error_prefix: "failed to instantiate nsqlookupd - ",
    })
}
