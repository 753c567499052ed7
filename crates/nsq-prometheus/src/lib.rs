//! The Prometheus text exposition format (version 0.0.4), written by hand: every daemon
//! renders `/metrics` from a stats snapshot it already takes for `/stats`, so there is no
//! registry of live metric objects to keep, only families and samples to print. [`Exposition`]
//! prints `# HELP`/`# TYPE` once per family and escapes label values and help text as the
//! format requires; [`process`] reads the standard `process_*` metrics from `/proc/self`.
//!
//! The format: <https://prometheus.io/docs/instrumenting/exposition_formats/>; the naming rules
//! it follows (base units, `_total` on counters) are those `promtool check metrics` lints.

pub mod process;

use std::fmt::Write as _;

/// The `Content-Type` of a text exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A metric family's type (the `# TYPE` line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Summary,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Summary => "summary",
        }
    }
}

/// One rendering of `/metrics`. Families must be written whole (all samples of a family right
/// after its [`Exposition::family`] call): the format forbids interleaving.
#[derive(Debug, Default)]
pub struct Exposition {
    out: String,
    /// The family whose samples are being written, to check sample names in debug builds.
    current: String,
}

impl Exposition {
    pub fn new() -> Self {
        Exposition::default()
    }

    /// Starts a family: its `# HELP` and `# TYPE` lines.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        debug_assert!(is_valid_name(name), "bad metric name {name:?}");
        debug_assert_eq!(
            kind == Kind::Counter,
            name.ends_with("_total"),
            "counters, and only counters, end in _total: {name}"
        );
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {}", kind.as_str());
        self.current = name.to_string();
        self
    }

    /// One sample of the current family, `name` being the family's name or (for a summary)
    /// its `_sum`/`_count` series.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        debug_assert!(
            name.starts_with(self.current.as_str()),
            "sample {name} outside its family {}",
            self.current
        );
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                debug_assert!(is_valid_label_name(k), "bad label name {k:?}");
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label_value_into(&mut self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
        push_value(&mut self.out, value);
        self.out.push('\n');
        self
    }

    /// A family with a single unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) -> &mut Self {
        self.family(name, kind, help).sample(name, &[], value)
    }

    /// The exposition text.
    pub fn finish(self) -> String {
        self.out
    }
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`
fn is_valid_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// `[a-zA-Z_][a-zA-Z0-9_]*`
fn is_valid_label_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Help text escapes backslash and line feed.
fn escape_help(s: &str) -> String {
    s.replace('\\', r"\\").replace('\n', r"\n")
}

/// Label values escape backslash, double quote and line feed.
pub fn escape_label_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    escape_label_value_into(&mut out, s);
    out
}

fn escape_label_value_into(out: &mut String, s: &str) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str(r"\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str(r"\n"),
            c => out.push(c),
        }
    }
}

/// Integers without a fraction, everything else as Rust's shortest round-trip form, and the
/// format's spellings of the special values.
fn push_value(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        let _ = write!(out, "{}", v as i64);
    } else {
        let _ = write!(out, "{v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_escaping() {
        let mut e = Exposition::new();
        e.family(
            "nsq_channel_depth",
            Kind::Gauge,
            "Messages \\ queued\nin memory.",
        )
        .sample(
            "nsq_channel_depth",
            &[("topic", "t"), ("channel", "a\"b\\c\nd")],
            5.0,
        );
        e.single("nsq_x_total", Kind::Counter, "X.", 1.5);
        e.family("nsq_lat_seconds", Kind::Summary, "L.")
            .sample("nsq_lat_seconds", &[("quantile", "0.99")], f64::NAN)
            .sample("nsq_lat_seconds_count", &[], 3.0);
        assert_eq!(
            e.finish(),
            "# HELP nsq_channel_depth Messages \\\\ queued\\nin memory.\n\
             # TYPE nsq_channel_depth gauge\n\
             nsq_channel_depth{topic=\"t\",channel=\"a\\\"b\\\\c\\nd\"} 5\n\
             # HELP nsq_x_total X.\n\
             # TYPE nsq_x_total counter\n\
             nsq_x_total 1.5\n\
             # HELP nsq_lat_seconds L.\n\
             # TYPE nsq_lat_seconds summary\n\
             nsq_lat_seconds{quantile=\"0.99\"} NaN\n\
             nsq_lat_seconds_count 3\n"
        );
    }

    #[test]
    fn values() {
        let f = |v: f64| {
            let mut s = String::new();
            push_value(&mut s, v);
            s
        };
        assert_eq!(f(0.0), "0");
        assert_eq!(f(-3.0), "-3");
        assert_eq!(f(0.25), "0.25");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(f64::INFINITY), "+Inf");
        assert_eq!(f(f64::NEG_INFINITY), "-Inf");
        assert_eq!(f(1_795_949_307.0), "1795949307");
    }

    #[test]
    fn names() {
        assert!(is_valid_name("nsq_topic_depth"));
        assert!(is_valid_name("a:b"));
        assert!(!is_valid_name("1a"));
        assert!(!is_valid_name("a-b"));
        assert!(is_valid_label_name("_x1"));
        assert!(!is_valid_label_name("a:b"));
        assert_eq!(escape_label_value("plain"), "plain");
    }
}
