//! What the NSQ utilities share (nsq's apps/*/main.go all follow one pattern): the
//! `--consumer-opt` / `--producer-opt` flag value ([`ConfigFlag`], go-nsq's `ConfigFlag`), the
//! consumer flags of the four consuming tools ([`consumer_flags`](mod@consumer_flags)), the
//! Go standard-logger lines their fatal errors use ([`log`], [`fatal`]), the command-line
//! outcome handling ([`parse_or_exit`]) and the user agent / version texts.

pub mod configflag;
pub mod consumer_flags;
pub mod golog;
pub mod hostpool;
pub mod nsq_to_http;
pub mod nsq_to_nsq;
pub mod timer_metrics;

use std::process::exit;

use nsq_go::flag::{FlagError, FlagSet, ParseOutcome};

/// For [`consumer_flags!`], which expands to `nsq_go::flags!` in the tools' crates.
#[doc(hidden)]
pub use nsq_go as __nsq_go;

pub use configflag::ConfigFlag;
pub use consumer_flags::ConsumerFlags;
pub use golog::{fatal, log};

/// The release the tools report (`nsq_tail v1.3.0`).
pub const VERSION: &str = nsq_http::version::VERSION;

/// The go-nsq release the reference tools are built on; part of their user agent.
pub const GO_NSQ_VERSION: &str = "1.1.0";

/// `<tool>/1.3.0 go-nsq/1.1.0`, as every tool sets `cfg.UserAgent`.
pub fn user_agent(tool: &str) -> String {
    format!("{tool}/{VERSION} go-nsq/{GO_NSQ_VERSION}")
}

/// The logger go-nsq gives every `NewConsumer` / `NewProducer` and none of the tools
/// replaces (consumer.go / producer.go: `log.New(os.Stderr, "", log.Flags())` at
/// `LogLevelInfo`): go-nsq's lines on stderr behind the standard logger's timestamp.
pub fn go_nsq_logger() -> nsq_client::GoLogger {
    nsq_client::GoLogger::new(nsq_client::LogLevel::Info, log)
}

/// Parses `args` (program name first) with Go `flag.Parse` semantics and handles every
/// outcome but "run": `--version` prints `<tool> v1.3.0` and exits 0 (or, for a tool without
/// that flag, is an undefined flag), `-h` prints the usage and exits 0, a command-line error
/// prints the message and usage and exits 2 (Go's `flag.ExitOnError`).
///
/// These tools declare their flags on Go's global `flag.CommandLine`, so the usage is headed
/// `Usage of <argv[0]>:` (the path the tool was started as), not the set's program name.
pub fn parse_or_exit<O: Clone>(
    set: &FlagSet<O>,
    defaults: O,
    args: Vec<String>,
    has_version: bool,
) -> O {
    let version_usage = has_version.then_some("print version string");
    parse_or_exit_with(set, defaults, args, version_usage)
}

/// [`parse_or_exit`] for a tool whose `-version` flag has its own usage text
/// (`Some("print version")`: nsq_stat.go's), or none at all (`None`: no `-version` flag).
pub fn parse_or_exit_with<O: Clone>(
    set: &FlagSet<O>,
    defaults: O,
    args: Vec<String>,
    version_usage: Option<&str>,
) -> O {
    let has_version = version_usage.is_some();
    let argv0 = args.first().cloned().unwrap_or_default();
    let usage = || {
        let text = set.usage_named(&argv0, &defaults);
        let line = "  -version\n    \tprint version string\n";
        match version_usage {
            Some(u) => text.replace(line, &format!("  -version\n    \t{u}\n")),
            None => text.replace(line, ""),
        }
    };
    match set.parse(args, defaults.clone()) {
        Ok(ParseOutcome::Run(o)) => o,
        Ok(ParseOutcome::Version) if has_version => {
            println!("{} v{VERSION}", set.program);
            exit(0)
        }
        Ok(ParseOutcome::Version) => {
            eprintln!("flag provided but not defined: -version");
            eprint!("{}", usage());
            exit(2)
        }
        Ok(ParseOutcome::Help) => {
            eprint!("{}", usage());
            exit(0)
        }
        Err(e @ FlagError::Usage(_)) => {
            eprintln!("{e}");
            eprint!("{}", usage());
            exit(2)
        }
        Err(e) => fatal(e.message()),
    }
}

/// SIGINT or SIGTERM (the tools' `signal.Notify(termChan, syscall.SIGINT, syscall.SIGTERM)`):
/// the handlers are installed when this is called, inside a tokio runtime, so a signal that
/// arrives before the future is awaited is not lost; the future resolves on the first one.
pub fn termination() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{signal, SignalKind};
    let int = signal(SignalKind::interrupt());
    let term = signal(SignalKind::terminate());
    async move {
        let (Ok(mut int), Ok(mut term)) = (int, term) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    }
}

/// Go's `StringArray` flags hold duplicates; tools that key producers by address (to_nsq's
/// `map[string]*nsq.Producer`) keep one per address. Order of first appearance.
pub fn dedup(addrs: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for a in addrs {
        if !out.contains(a) {
            out.push(a.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agent_names_tool_and_go_nsq() {
        assert_eq!(user_agent("nsq_tail"), "nsq_tail/1.3.0 go-nsq/1.1.0");
    }

    #[test]
    fn dedup_keeps_first_order() {
        let v: Vec<String> = ["b", "a", "b"].iter().map(|s| s.to_string()).collect();
        assert_eq!(dedup(&v), vec!["b".to_string(), "a".to_string()]);
    }
}
