//! NSQ's log levels (nsq's internal/lg/lg.go, `LogLevel`): the `--log-level` flag value shared
//! by every daemon, its names in log lines and its number in `/config/log_level`.

use std::fmt;

/// `--log-level`; the numbers are what `/config/log_level` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
    Fatal = 5,
}

/// A `--log-level` that names no level; `Display` is the reference's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid log level '{0}' (debug, info, warn, error, fatal)")]
pub struct InvalidLogLevel(pub String);

impl LogLevel {
    /// Parses a level name case-insensitively (no trimming), as `lg.ParseLogLevel`.
    pub fn parse(s: &str) -> Result<LogLevel, InvalidLogLevel> {
        match s.to_ascii_lowercase().as_str() {
            "debug" => Ok(LogLevel::Debug),
            "info" => Ok(LogLevel::Info),
            "warn" => Ok(LogLevel::Warn),
            "error" => Ok(LogLevel::Error),
            "fatal" => Ok(LogLevel::Fatal),
            _ => Err(InvalidLogLevel(s.to_string())),
        }
    }

    /// 1 (debug) … 5 (fatal).
    pub fn code(self) -> i64 {
        self as i64
    }

    /// The upper-case name used in log lines (`INFO`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "DEBUG",
            LogLevel::Info => "INFO",
            LogLevel::Warn => "WARNING",
            LogLevel::Error => "ERROR",
            LogLevel::Fatal => "FATAL",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl crate::flag::Value for LogLevel {
    fn set(&mut self, text: &str) -> Result<(), crate::flag::ValueError> {
        *self = LogLevel::parse(text)?;
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        Some(self.as_str().to_string())
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::from(self.code())
    }
}
