//! nsq_to_file's leveled log lines (nsq's internal/lg/lg.go, `Logf`, over the Go logger that
//! apps/nsq_to_file/nsq_to_file.go, `main`, builds with prefix `--log-prefix` and flags
//! `Ldate|Ltime|Lmicroseconds`): `[nsq_to_file] 2026/11/30 21:12:28.123456 INFO: <message>`
//! on stderr, local time, lines below `--log-level` dropped. Argument validation errors use
//! Go's standard logger instead ([`nsq_utils::fatal`]).

use std::io::Write;
use std::sync::OnceLock;

use nsq_go::lg::LogLevel;

struct Logger {
    prefix: String,
    level: LogLevel,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Sets the prefix and the lowest level shown; called once at startup (later calls are ignored).
pub(crate) fn init(prefix: String, level: LogLevel) {
    let _ = LOGGER.set(Logger { prefix, level });
}

/// `2006/01/02 15:04:05.000000` in local time.
pub(crate) fn stamp() -> String {
    let now = jiff::ZonedDateTime::now();
    format!(
        "{:04}/{:02}/{:02} {:02}:{:02}:{:02}.{:06}",
        now.year(),
        now.month(),
        now.day(),
        now.hour(),
        now.minute(),
        now.second(),
        now.subsec_nanosecond() / 1000
    )
}

/// One line at `level` (dropped below the configured level).
pub(crate) fn log(level: LogLevel, msg: std::fmt::Arguments<'_>) {
    let (prefix, min) = match LOGGER.get() {
        Some(l) => (l.prefix.as_str(), l.level),
        None => ("[nsq_to_file] ", LogLevel::Info),
    };
    if level < min {
        return;
    }
    let line = format!("{prefix}{} {}: {msg}\n", stamp(), level.as_str());
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

/// `logf(lg.FATAL, …)` followed by `os.Exit(1)`, as the reference does on write, sync, open
/// and rename errors.
pub(crate) fn fatal(msg: std::fmt::Arguments<'_>) -> ! {
    log(LogLevel::Fatal, msg);
    std::process::exit(1)
}

/// `logf!(Info, "… {x}")`.
#[macro_export]
macro_rules! logf {
    ($level:ident, $($arg:tt)*) => {
        $crate::logger::log(nsq_go::lg::LogLevel::$level, format_args!($($arg)*))
    };
}

/// `fatalf!("… {x}")`: a FATAL line, then exit status 1.
#[macro_export]
macro_rules! fatalf {
    ($($arg:tt)*) => {
        $crate::logger::fatal(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    #[test]
    fn stamp_shape() {
        let s: String = super::stamp()
            .chars()
            .map(|c| if c.is_ascii_digit() { '9' } else { c })
            .collect();
        assert_eq!(s, "9999/99/99 99:99:99.999999");
    }
}
