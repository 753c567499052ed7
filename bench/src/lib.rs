//! Shared pieces of the `bench_writer` / `bench_reader` load generators for nsqd.
//!
//! * [`wire`]: the handful of V2 client commands the tools send (MPUB, SUB, RDY, FIN, NOP),
//!   encoded by hand so the tools depend only on the frame/message parts of `nsq-protocol`.
//! * `godur`: Go `time.Duration` flag parsing and `String()` formatting (nsq-go's
//!   `duration`), so the flags and the summary line look like the Go tools'.
//! * [`report`]: the summary output (Go `log` style line plus a machine-readable `RESULT` line).
//! * [`net`]: connecting, and waiting for a command's response while answering heartbeats.

pub use nsq_go::duration as godur;
pub mod net;
pub mod report;
pub mod wire;

/// Turns Go-style single-dash long flags (`-runfor=1s`) into clap's `--runfor=1s`, so the
/// tools accept the same command lines as the Go originals. `-h`, `--x` and `-` are untouched.
pub fn go_style_args(args: impl IntoIterator<Item = String>) -> Vec<String> {
    args.into_iter()
        .enumerate()
        .map(|(i, a)| {
            let b = a.as_bytes();
            if i > 0 && b.len() > 2 && b[0] == b'-' && b[1].is_ascii_alphabetic() {
                format!("-{a}")
            } else {
                a
            }
        })
        .collect()
}

/// Number of connections to open when `--connections` is not given: one per core, like the Go
/// tools' `runtime.GOMAXPROCS(0)` workers.
pub fn default_connections() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_style_args_doubles_single_dash_long_flags() {
        let v = go_style_args(
            [
                "prog",
                "-runfor=1s",
                "--size",
                "10",
                "-h",
                "-",
                "-batch-size",
                "5",
            ]
            .map(String::from),
        );
        assert_eq!(
            v,
            [
                "prog",
                "--runfor=1s",
                "--size",
                "10",
                "-h",
                "-",
                "--batch-size",
                "5"
            ]
        );
    }
}
