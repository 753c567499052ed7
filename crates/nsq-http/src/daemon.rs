//! The life of a daemon process, shared by `apps/*/main.rs`: parse the flags, install the
//! logger, build the Tokio runtime, start the daemon, wait for SIGINT or SIGTERM, shut it down
//! and exit 0 — or print why not, with the reference's exit status (2 for a command-line
//! error, 1 for anything fatal, as Go's `flag.ExitOnError` and `log.Fatal` do).

use std::fmt::Display;
use std::future::Future;
use std::process::ExitCode;

use nsq_go::{FlagError, LogLevel, ParseOutcome};

/// A daemon the runner can drive: a library's handle type.
pub trait Daemon: Sized {
    type Options;
    type Error: Display;

    /// The program name (`nsqd`), for the version line.
    const NAME: &'static str;

    /// Parses `std::env::args()` (program name first).
    fn parse_args(args: Vec<String>) -> Result<ParseOutcome<Self::Options>, FlagError>;
    /// The `-h` text.
    fn usage() -> String;
    /// `--log-prefix` and `--log-level`.
    fn log_settings(opts: &Self::Options) -> (&str, LogLevel);
    /// Binds the listeners and spawns the daemon's tasks.
    fn start(opts: Self::Options) -> impl Future<Output = Result<Self, Self::Error>>;
    /// Stops accepting, drains and persists what must be persisted.
    fn shutdown(self) -> impl Future<Output = ()>;
    /// Serves until the process should exit, then shuts down: by default until the first
    /// SIGINT or SIGTERM. nsqd overrides it for drain mode (nsqd::drain). `signals` were
    /// installed before [`Daemon::start`], so a signal sent once the daemon listens is never
    /// the default action (death by signal) however soon it comes.
    fn serve(self, signals: Signals) -> impl Future<Output = ()> {
        async move {
            let mut signals = signals;
            signals.any().await;
            self.shutdown().await;
        }
    }
}

/// Implements [`Daemon`] for a daemon library's handle from the pieces every daemon crate
/// has: `crate::options::{parse_args, usage, ParseOutcome, FlagError, LogLevel}`, the options'
/// `log_prefix` and `log_level` fields, the crate's `start` function in scope and the handle's
/// own `shutdown`; `serve = path` overrides [`Daemon::serve`].
// `crate::` is meant to name the calling daemon crate.
#[allow(clippy::crate_in_macro_def)]
#[macro_export]
macro_rules! impl_daemon {
    ($handle:ident, $opts:ty, $err:ty, $name:literal $(, serve = $serve:path)?) => {
        impl $crate::daemon::Daemon for $handle {
            type Options = $opts;
            type Error = $err;
            const NAME: &'static str = $name;

            fn parse_args(
                args: Vec<String>,
            ) -> Result<crate::options::ParseOutcome, crate::options::FlagError> {
                crate::options::parse_args(args)
            }

            fn usage() -> String {
                crate::options::usage().to_string()
            }

            fn log_settings(opts: &$opts) -> (&str, crate::options::LogLevel) {
                (&opts.log_prefix, opts.log_level)
            }

            async fn start(opts: $opts) -> Result<Self, $err> {
                start(opts).await
            }

            async fn shutdown(self) {
                $handle::shutdown(self).await
            }

            $(
                async fn serve(self, signals: $crate::daemon::Signals) {
                    $serve(self, signals).await
                }
            )?
        }
    };
}

/// How a fatal (exit 1) flag or config-file error is printed; each daemon keeps the reference
/// layout its tests pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatalFlagStyle {
    /// The message alone on stderr.
    Plain,
    /// `FATAL: <message>` on stderr.
    Prefixed,
    /// Through the logger with the default prefix: `[app] <time> ERROR: FATAL: <message>`.
    Logged,
}

/// The Tokio worker-thread policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// Tokio's default (one per core, `TOKIO_WORKER_THREADS` overrides).
    Default,
    /// Exactly this many.
    Fixed(usize),
    /// One per core but one (at least one), unless `TOKIO_WORKER_THREADS` is set: the
    /// cross-thread wake-ups of a fully used worker pool cost more than they give on small
    /// machines, and the spare core serves blocking I/O (see bench/README.md).
    AllButOneCore,
}

/// How [`run`] behaves where the daemons differ.
#[derive(Debug, Clone, Copy)]
pub struct RunOptions {
    pub fatal_flag_style: FatalFlagStyle,
    pub workers: Workers,
    /// Written before the start error: `FATAL: <this><error>`.
    pub start_error_prefix: &'static str,
}

/// Runs daemon `D` to completion and returns the process exit status.
pub fn run<D: Daemon>(how: RunOptions) -> ExitCode {
    let opts = match D::parse_args(std::env::args().collect()) {
        Ok(ParseOutcome::Run(opts)) => opts,
        Ok(ParseOutcome::Version) => {
            println!("{}", crate::version::version_string(D::NAME));
            return ExitCode::SUCCESS;
        }
        Ok(ParseOutcome::Help) => {
            eprint!("{}", D::usage());
            return ExitCode::SUCCESS;
        }
        Err(e @ FlagError::Usage(_)) => {
            eprintln!("{e}");
            eprint!("{}", D::usage());
            return ExitCode::from(2);
        }
        Err(e) => {
            match how.fatal_flag_style {
                FatalFlagStyle::Plain => eprintln!("{e}"),
                FatalFlagStyle::Prefixed => eprintln!("FATAL: {e}"),
                FatalFlagStyle::Logged => {
                    crate::logging::init(&format!("[{}] ", D::NAME), LogLevel::Info);
                    tracing::error!("FATAL: {e}");
                }
            }
            return ExitCode::from(e.exit_code() as u8);
        }
    };
    let (prefix, level) = D::log_settings(&opts);
    crate::logging::init(prefix, level);

    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    match how.workers {
        Workers::Default => {}
        Workers::Fixed(n) => {
            builder.worker_threads(n);
        }
        Workers::AllButOneCore => {
            if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                builder.worker_threads(cores.saturating_sub(1).max(1));
            }
        }
    }
    let rt = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("failed to start runtime - {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        // Before the daemon listens: a SIGTERM right after its "listening" line is handled.
        let signals = match Signals::install() {
            Ok(s) => s,
            Err(e) => {
                tracing::error!("FATAL: failed to install signal handlers - {e}");
                return ExitCode::FAILURE;
            }
        };
        let daemon = match D::start(opts).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!("FATAL: {}{e}", how.start_error_prefix);
                return ExitCode::FAILURE;
            }
        };
        daemon.serve(signals).await;
        ExitCode::SUCCESS
    })
}

/// The SIGTERM and SIGINT handlers of a daemon, installed by [`run`] before the daemon
/// starts: from then on a signal is queued for [`Signals::term`]/[`Signals::int`] instead of
/// ending the process (a signal between the "listening" log line and a handler installed
/// later would kill it with the default action).
pub struct Signals {
    pub term: tokio::signal::unix::Signal,
    pub int: tokio::signal::unix::Signal,
}

impl Signals {
    /// Installs both handlers (inside a Tokio runtime).
    pub fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Resolves on the first SIGINT or SIGTERM.
    pub async fn any(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}
