//! Log lines in the reference's shape (nsq's internal/lg/lg.go, `Logf`, over Go's `log` with
//! `Lmicroseconds`): `<prefix><YYYY/MM/DD HH:MM:SS.ffffff> <LEVEL>: <msg>`, on stderr. Clients'
//! test harnesses read `TCP: listening on ADDR` from here.
//!
//! Never any ANSI escape codes: Go's `log` writes plain text, and stderr is usually a file or
//! a pipe (tracing's default would italicise field names as `\x1b[3m…`).

use std::fmt;

use nsq_go::LogLevel;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// Formats events like Go's `log` package with nsqd's prefix.
pub struct NsqFormat {
    pub prefix: String,
}

impl<S, N> FormatEvent<S, N> for NsqFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "ERROR",
            Level::WARN => "WARNING",
            Level::INFO => "INFO",
            Level::DEBUG | Level::TRACE => "DEBUG",
        };
        write!(w, "{}{} {}: ", self.prefix, timestamp(), level)?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}

/// `YYYY/MM/DD HH:MM:SS.ffffff` in UTC.
fn timestamp() -> String {
    go_log_stamp(true)
}

/// Now as Go's `log` package stamps a line (`log.LstdFlags`, plus `log.Lmicroseconds` when
/// `micros`): `YYYY/MM/DD HH:MM:SS[.ffffff]`, in UTC.
pub fn go_log_stamp(micros: bool) -> String {
    let dt = jiff::Timestamp::now()
        .to_zoned_datetime(jiff::tz::TimeZone::UTC)
        .datetime();
    let mut s = format!(
        "{:04}/{:02}/{:02} {:02}:{:02}:{:02}",
        dt.year(),
        dt.month(),
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    );
    if micros {
        s.push_str(&format!(".{:06}", dt.subsec_nanosecond() / 1000));
    }
    s
}

/// The level filter of the installed subscriber, so `PUT /config/log_level` takes effect.
static RELOAD: std::sync::OnceLock<
    tracing_subscriber::reload::Handle<
        tracing::level_filters::LevelFilter,
        tracing_subscriber::Registry,
    >,
> = std::sync::OnceLock::new();

fn filter_for(level: LogLevel) -> tracing::level_filters::LevelFilter {
    use tracing::level_filters::LevelFilter;
    match level {
        LogLevel::Debug => LevelFilter::DEBUG,
        LogLevel::Info => LevelFilter::INFO,
        LogLevel::Warn => LevelFilter::WARN,
        LogLevel::Error | LogLevel::Fatal => LevelFilter::ERROR,
    }
}

/// The formatting layer, writing to `writer`, without ANSI escapes.
pub fn layer<S, W>(prefix: &str, writer: W) -> impl tracing_subscriber::Layer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + 'static,
{
    tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(writer)
        .event_format(NsqFormat {
            prefix: prefix.to_string(),
        })
}

/// Installs the global subscriber on stderr at `--log-level`.
pub fn init(prefix: &str, level: LogLevel) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter_for(level));
    if tracing_subscriber::registry()
        .with(filter)
        .with(layer(prefix, std::io::stderr))
        .try_init()
        .is_ok()
    {
        let _ = RELOAD.set(handle);
    }
}

/// Changes the level of the running logger (no-op when [`init`] was not called).
pub fn set_level(level: LogLevel) {
    if let Some(h) = RELOAD.get() {
        let _ = h.modify(|f| *f = filter_for(level));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A `MakeWriter` collecting everything written into one buffer.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    #[test]
    fn plain_lines_without_ansi_escapes() {
        use tracing_subscriber::layer::SubscriberExt;
        let buf = Buf::default();
        let sub = tracing_subscriber::registry().with(layer("[nsqd] ", buf.clone()));
        tracing::subscriber::with_default(sub, || {
            tracing::info!(topic = "t", "TCP: listening on {}", "127.0.0.1:1");
            tracing::warn!("slow");
        });
        let out = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert!(!out.contains('\x1b'), "{out:?}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out:?}");
        assert!(lines[0].starts_with("[nsqd] 20"), "{out:?}");
        assert!(
            lines[0].ends_with(" INFO: TCP: listening on 127.0.0.1:1 topic=\"t\""),
            "{out:?}"
        );
        assert!(lines[1].ends_with(" WARNING: slow"), "{out:?}");
        // `<prefix>YYYY/MM/DD HH:MM:SS.ffffff `
        let ts = &lines[1]["[nsqd] ".len().."[nsqd] ".len() + 27];
        assert_eq!(ts.as_bytes()[4], b'/');
        assert_eq!(ts.as_bytes()[19], b'.');
    }

    #[test]
    fn go_log_stamps() {
        let s = go_log_stamp(false);
        assert_eq!(s.len(), "2026/12/01 15:37:13".len(), "{s}");
        assert_eq!((&s[4..5], &s[7..8], &s[13..14]), ("/", "/", ":"));
        let m = go_log_stamp(true);
        assert_eq!(m.len(), "2026/12/01 15:37:13.123456".len(), "{m}");
        assert_eq!(&m[19..20], ".");
    }
}
