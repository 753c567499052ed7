//! The `nsqadmin` binary: parses flags (Go-style `-flag` and `--flag`, `--config`), starts the
//! web UI/API server and stops it on SIGINT/SIGTERM (`nsq_http::daemon` does the sequence).

use std::process::ExitCode;

use nsq_http::daemon::{run, FatalFlagStyle, RunOptions, Workers};

fn main() -> ExitCode {
    run::<nsqadmin::AdminHandle>(RunOptions {
        fatal_flag_style: FatalFlagStyle::Logged,
        workers: Workers::Default,
        start_error_prefix: "failed to instantiate nsqadmin - ",
    })
}
