//! The `nsqd` binary: parses flags (Go-style `-flag` and `--flag`), starts the daemon, and
//! shuts it down gracefully on SIGINT/SIGTERM (`nsq_http::daemon` does the sequence).

use std::process::ExitCode;

use nsq_http::daemon::{run, FatalFlagStyle, RunOptions, Workers};

fn main() -> ExitCode {
    run::<nsqd::NsqdHandle>(RunOptions {
        fatal_flag_style: FatalFlagStyle::Plain,
        workers: Workers::AllButOneCore,
        start_error_prefix: "",
    })
}
