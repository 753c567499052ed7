//! go-nsq's own log lines (consumer.go / producer.go / conn.go, their `log` functions), for
//! programs that must print what a go-nsq program prints: a [`GoLogger`] in
//! [`Config::logger`](crate::Config::logger) receives each line at or above its level, already
//! formatted as go-nsq formats it — `INF    1 [topic/channel] (127.0.0.1:4150) connecting to
//! nsqd` for a consumer, `INF    1 (127.0.0.1:4150) connecting to nsqd` for a producer — without
//! the timestamp, which the sink adds as its Go `log.Logger` would. `None` (the default) prints
//! nothing; the client's `tracing` events are unaffected either way.
//!
//! Instance numbers count consumers and producers together from 1, per process, as go-nsq's
//! `instCount` does (bumped by every successful `NewConsumer` / `NewProducer`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// go-nsq's `LogLevel` (`LogLevelDebug` … `LogLevelError`), ordered by severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Warning,
    Error,
}

impl LogLevel {
    /// `LogLevel.String`: `DBG`, `INF`, `WRN`, `ERR`.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "DBG",
            LogLevel::Info => "INF",
            LogLevel::Warning => "WRN",
            LogLevel::Error => "ERR",
        }
    }
}

/// A go-nsq logger: the level set with `SetLogger(l, lvl)` and where the lines go.
#[derive(Clone)]
pub struct GoLogger {
    /// Lines below this level are dropped (go-nsq's default is `LogLevelInfo`).
    pub level: LogLevel,
    /// Receives one line (no timestamp, no newline) per event.
    pub sink: Arc<dyn Fn(&str) + Send + Sync>,
}

impl GoLogger {
    /// A logger at `level` writing to `sink`.
    pub fn new(level: LogLevel, sink: impl Fn(&str) + Send + Sync + 'static) -> GoLogger {
        GoLogger {
            level,
            sink: Arc::new(sink),
        }
    }
}

impl std::fmt::Debug for GoLogger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoLogger")
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

/// go-nsq's `instCount`.
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// The next instance number (1, 2, …).
pub(crate) fn next_instance() -> u64 {
    INSTANCES.fetch_add(1, Ordering::Relaxed) + 1
}

/// One consumer's or producer's log prefix: `%3d [topic/channel]` or `%3d`.
#[derive(Debug, Clone)]
pub(crate) struct GoLog {
    logger: Option<GoLogger>,
    prefix: String,
    /// Set when the owner is dropped: a Go program that abandons a consumer never stops it,
    /// so the cleanup that follows a drop prints nothing.
    muted: Arc<AtomicBool>,
}

impl GoLog {
    /// A consumer's (consumer.go, `log`: `%-4s %3d [%s/%s] %s`).
    pub(crate) fn consumer(logger: Option<GoLogger>, id: u64, topic: &str, channel: &str) -> Self {
        GoLog {
            logger,
            prefix: format!("{id:>3} [{topic}/{channel}]"),
            muted: Arc::default(),
        }
    }

    /// A producer's (producer.go, `log`: `%-4s %3d %s`).
    pub(crate) fn producer(logger: Option<GoLogger>, id: u64) -> Self {
        GoLog {
            logger,
            prefix: format!("{id:>3}"),
            muted: Arc::default(),
        }
    }

    /// No more lines from this instance (see `muted`).
    pub(crate) fn mute(&self) {
        self.muted.store(true, Ordering::Relaxed);
    }

    /// The instance's own line (`r.log` / `w.log`).
    pub(crate) fn log(&self, lvl: LogLevel, msg: impl FnOnce() -> String) {
        if self.muted.load(Ordering::Relaxed) {
            return;
        }
        if let Some(l) = self.logger.as_ref().filter(|l| lvl >= l.level) {
            (l.sink)(&format!("{:<4} {} {}", lvl.as_str(), self.prefix, msg()));
        }
    }

    /// A connection's line (conn.go, `log`: the instance's prefix then `(addr)`).
    pub(crate) fn conn(&self, lvl: LogLevel, addr: &str, msg: &str) {
        self.log(lvl, || format!("({addr}) {msg}"));
    }

    /// conn.go's lines for a connection that closes: `close` (`beginning close`), `readLoop`
    /// and `writeLoop` exiting, `cleanup` and `waitForCleanup` (in the order they usually
    /// interleave in go-nsq, whose goroutines race here).
    pub(crate) fn conn_closed(&self, addr: &str, cleanup: bool) {
        self.conn(LogLevel::Info, addr, "beginning close");
        self.conn(LogLevel::Info, addr, "readLoop exiting");
        self.conn(LogLevel::Info, addr, "breaking out of writeLoop");
        self.conn(LogLevel::Info, addr, "writeLoop exiting");
        if cleanup {
            self.conn(LogLevel::Info, addr, "finished draining, cleanup exiting");
            self.conn(LogLevel::Info, addr, "clean close complete");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    fn capture(level: LogLevel) -> (GoLogger, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        (
            GoLogger::new(level, move |s| l.lock().push(s.to_string())),
            lines,
        )
    }

    #[test]
    fn formats_like_go_nsq() {
        let (logger, lines) = capture(LogLevel::Info);
        let c = GoLog::consumer(Some(logger.clone()), 1, "t", "c");
        c.conn(LogLevel::Info, "127.0.0.1:4150", "connecting to nsqd");
        c.log(LogLevel::Warning, || {
            "there are 0 connections left alive".into()
        });
        c.log(LogLevel::Debug, || "dropped".into());
        let p = GoLog::producer(Some(logger), 12);
        p.log(LogLevel::Info, || "stopping".into());
        assert_eq!(
            *lines.lock(),
            [
                "INF    1 [t/c] (127.0.0.1:4150) connecting to nsqd",
                "WRN    1 [t/c] there are 0 connections left alive",
                "INF   12 stopping",
            ]
        );
    }

    #[test]
    fn muted_prints_nothing() {
        let (logger, lines) = capture(LogLevel::Debug);
        let c = GoLog::consumer(Some(logger), 3, "t", "c");
        c.clone().mute();
        c.log(LogLevel::Error, || unreachable!("not formatted"));
        assert!(lines.lock().is_empty());
    }

    #[test]
    fn no_logger_no_lines() {
        let c = GoLog::consumer(None, 1, "t", "c");
        c.log(LogLevel::Error, || unreachable!("not formatted"));
    }
}
