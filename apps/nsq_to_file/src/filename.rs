//! File names (nsq's apps/nsq_to_file/file_logger.go, `computeFilenameFormat` and
//! `currentFilename`, and apps/nsq_to_file/strftime.go): the per-topic template with
//! `<TOPIC>`, `<HOST>`, `<PID>` filled in once, `<DATETIME>` filled in at each open from the
//! local time and `--datetime-format`, and `<REV>` (`-000000`) at each open attempt.
//!
//! `--datetime-format` takes `%Y %y %m %d %H %I %M %S %p %B %b %A %a %Z %z %%`; any other
//! `%x` is kept as written. The reference translates the format into a Go time layout, so
//! literal text that happens to look like a layout token (`1`, `2006`, `Jan`, `PM`, …) is
//! replaced with date parts; here literal text stays literal.

/// Why a topic's file name template cannot be used (logged as
/// `couldn't create logger for new topic <t>: <err>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NameError {
    #[error("missing <REV> in --filename-format when gzip, rotation, or work dir enabled")]
    MissingRev,
}

/// What the template depends on besides the topic.
#[derive(Debug, Clone)]
pub(crate) struct NameOptions<'a> {
    pub(crate) filename_format: &'a str,
    pub(crate) host_identifier: &'a str,
    pub(crate) hostname: &'a str,
    pub(crate) pid: u32,
    pub(crate) gzip: bool,
    /// `--gzip`, `--rotate-size > 0`, `--rotate-interval > 0` or a work dir other than the
    /// output dir: then every file needs its own revision.
    pub(crate) needs_rev: bool,
}

/// `computeFilenameFormat`: the topic's template, still holding `<DATETIME>` and (when
/// revisions are needed) `<REV>`.
pub(crate) fn compute_template(o: &NameOptions<'_>, topic: &str) -> Result<String, NameError> {
    let short = o.hostname.split('.').next().unwrap_or_default();
    let identifier = if o.host_identifier.is_empty() {
        short.to_string()
    } else {
        o.host_identifier
            .replace("<SHORT_HOST>", short)
            .replace("<HOSTNAME>", o.hostname)
    };
    let mut t = o.filename_format.to_string();
    if o.needs_rev {
        if !t.contains("<REV>") {
            return Err(NameError::MissingRev);
        }
    } else {
        t = t.replace("<REV>", "");
    }
    t = t
        .replace("<TOPIC>", topic)
        .replace("<HOST>", &identifier)
        .replace("<PID>", &o.pid.to_string());
    if o.gzip && !t.ends_with(".gz") {
        t.push_str(".gz");
    }
    Ok(t)
}

/// `<REV>` for revision `rev`: `-000042`.
pub(crate) fn with_rev(name: &str, rev: u64) -> String {
    name.replace("<REV>", &format!("-{rev:06}"))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `strftime` (strftime.go) of `t`.
pub(crate) fn strftime(format: &str, t: &jiff::ZonedDateTime) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(format.len() + 16);
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let Some(&k) = chars.peek() else {
            out.push('%');
            break;
        };
        let month = MONTHS[(t.month() as usize).saturating_sub(1) % 12];
        let weekday = WEEKDAYS[t.weekday().to_sunday_zero_offset() as usize % 7];
        let hour12 = match t.hour() % 12 {
            0 => 12,
            h => h,
        };
        let _ = match k {
            'B' => write!(out, "{month}"),
            'b' => write!(out, "{}", &month[..3]),
            'm' => write!(out, "{:02}", t.month()),
            'A' => write!(out, "{weekday}"),
            'a' => write!(out, "{}", &weekday[..3]),
            'd' => write!(out, "{:02}", t.day()),
            'H' => write!(out, "{:02}", t.hour()),
            'I' => write!(out, "{hour12:02}"),
            'M' => write!(out, "{:02}", t.minute()),
            'S' => write!(out, "{:02}", t.second()),
            'Y' => write!(out, "{:04}", t.year()),
            'y' => write!(out, "{:02}", i32::from(t.year()).rem_euclid(100)),
            'p' => write!(out, "{}", if t.hour() < 12 { "AM" } else { "PM" }),
            'Z' => write!(out, "{}", zone_abbreviation(t)),
            'z' => write!(out, "{}", numeric_offset(t.offset().seconds())),
            '%' => write!(out, "%"),
            _ => {
                out.push('%');
                continue;
            }
        };
        chars.next();
    }
    out
}

/// Go's `MST`: the zone's abbreviation, or `-0700` when it has none.
fn zone_abbreviation(t: &jiff::ZonedDateTime) -> String {
    let info = t.time_zone().to_offset_info(t.timestamp());
    let abbr = info.abbreviation();
    if abbr.is_empty() {
        numeric_offset(t.offset().seconds())
    } else {
        abbr.to_string()
    }
}

/// Go's `-0700`.
fn numeric_offset(seconds: i32) -> String {
    let sign = if seconds < 0 { '-' } else { '+' };
    let s = seconds.unsigned_abs();
    format!("{sign}{:02}{:02}", s / 3600, (s % 3600) / 60)
}

/// Go's `path.Join` of two parts: joined with `/` and cleaned (`path.Clean`); `""` parts are
/// skipped.
pub(crate) fn join(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => String::new(),
        (true, false) => clean(b),
        (false, true) => clean(a),
        (false, false) => clean(&format!("{a}/{b}")),
    }
}

/// Go's `path.Clean`.
pub(crate) fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_string();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".to_string(),
        (false, false) => body,
    }
}

/// The directory part of a path as Go's `filepath.Split` gives it (up to and including the
/// last `/`).
pub(crate) fn dir_of(p: &str) -> &str {
    match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    }
}

/// The file part of a path (`filepath.Split`'s second half).
pub(crate) fn base_of(p: &str) -> &str {
    match p.rfind('/') {
        Some(i) => &p[i + 1..],
        None => p,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(format: &str, needs_rev: bool, gzip: bool) -> NameOptions<'_> {
        NameOptions {
            filename_format: format,
            host_identifier: "",
            hostname: "host1.example.com",
            pid: 4242,
            gzip,
            needs_rev,
        }
    }

    #[test]
    fn template_placeholders() {
        let d = "<TOPIC>.<HOST><REV>.<DATETIME>.log";
        assert_eq!(
            compute_template(&opts(d, false, false), "orders").unwrap(),
            "orders.host1.<DATETIME>.log"
        );
        assert_eq!(
            compute_template(&opts(d, true, true), "orders").unwrap(),
            "orders.host1<REV>.<DATETIME>.log.gz"
        );
        assert_eq!(
            compute_template(&opts("<TOPIC>/<PID><REV>.gz", true, true), "t").unwrap(),
            "t/4242<REV>.gz"
        );
        assert_eq!(
            compute_template(&opts("<TOPIC>.log", true, false), "t"),
            Err(NameError::MissingRev)
        );
        let mut o = opts(d, false, false);
        o.host_identifier = "<SHORT_HOST>-<HOSTNAME>";
        assert_eq!(
            compute_template(&o, "t").unwrap(),
            "t.host1-host1.example.com.<DATETIME>.log"
        );
        assert_eq!(with_rev("a<REV>.log", 7), "a-000007.log");
        assert_eq!(
            NameError::MissingRev.to_string(),
            "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
        );
    }

    #[test]
    fn strftime_conversions() {
        let t: jiff::ZonedDateTime = "2026-03-01T15:04:05+00:00[UTC]".parse().unwrap();
        assert_eq!(strftime("%Y-%m-%d_%H", &t), "2026-03-01_15");
        assert_eq!(
            strftime("%y %b %B %a %A %I %M %S %p %Z %z %% %q %", &t),
            "26 Mar March Sun Sunday 03 04 05 PM UTC +0000 % %q %"
        );
        // Literal text stays literal (the reference would turn `2006` and `Jan` into dates).
        assert_eq!(strftime("2006-Jan-%Y", &t), "2006-Jan-2026");
        let t: jiff::ZonedDateTime = "2026-03-01T00:30:00-05:00[-05:00]".parse().unwrap();
        assert_eq!(strftime("%I%p %z", &t), "12AM -0500");
    }

    #[test]
    fn go_path_helpers() {
        assert_eq!(join("/tmp", "a.log"), "/tmp/a.log");
        assert_eq!(join("/tmp/", "x/../b/./c.log"), "/tmp/b/c.log");
        assert_eq!(join("", "a"), "a");
        assert_eq!(join("out", "a"), "out/a");
        assert_eq!(clean("/../a"), "/a");
        assert_eq!(dir_of("/tmp/x/a.log"), "/tmp/x/");
        assert_eq!(base_of("/tmp/x/a.log"), "a.log");
        assert_eq!(dir_of("a.log"), "");
    }
}
