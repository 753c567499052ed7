//! Log lines in the reference's shape: `<prefix><YYYY/MM/DD HH:MM:SS.ffffff> <LEVEL>: <msg>`,
//! on stderr. Clients' test harnesses read `TCP: listening on ADDR` from here.

use std::fmt;

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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}/{m:02}/{d:02} {:02}:{:02}:{:02}.{:06}",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
        now.subsec_micros()
    )
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The level filter of the installed subscriber, so `PUT /config/log_level` takes effect.
static RELOAD: std::sync::OnceLock<
    tracing_subscriber::reload::Handle<
        tracing::level_filters::LevelFilter,
        tracing_subscriber::Registry,
    >,
> = std::sync::OnceLock::new();

fn filter_for(level: &str) -> tracing::level_filters::LevelFilter {
    use tracing::level_filters::LevelFilter;
    match level.to_ascii_lowercase().as_str() {
        "debug" => LevelFilter::DEBUG,
        "warn" | "warning" => LevelFilter::WARN,
        "error" | "fatal" => LevelFilter::ERROR,
        _ => LevelFilter::INFO,
    }
}

/// Installs the global subscriber: `level` is the `--log-level` (debug/info/warn/error/fatal).
pub fn init(prefix: &str, level: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter_for(level));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .event_format(NsqFormat {
            prefix: prefix.to_string(),
        });
    if tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init()
        .is_ok()
    {
        let _ = RELOAD.set(handle);
    }
}

/// Changes the level of the running logger (no-op when [`init`] was not called).
pub fn set_level(level: &str) {
    if let Some(h) = RELOAD.get() {
        let _ = h.modify(|f| *f = filter_for(level));
    }
}

#[cfg(test)]
mod tests {
    use super::civil_from_days;

    #[test]
    fn civil_dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_423), (2025, 12, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
    }
}
