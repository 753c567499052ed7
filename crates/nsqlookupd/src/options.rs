//! nsqlookupd's command line and config file (nsqlookupd spec §1): the flags of the
//! reference v1.3.0 with Go `flag`-package parsing (same algorithm as nsqd's, see
//! `nsqd::options`), the TOML `--config` file with the reference's coercions, and precedence
//! flag > config file > default.
//!
//! The scalar parsers (`parse_go_bool`, `parse_go_duration`), [`LogLevel`] and the host name
//! lookup are nsqd's; only the flag table, which is nsqlookupd's own, lives here.

use std::collections::HashSet;
use std::time::Duration;

use nsq_protocol::quote::go_quote;
use nsqd::options::{go_format_float, parse_go_bool, parse_go_duration, DurationError};

pub use nsqd::options::{hostname, LogLevel};

/// The version nsqlookupd reports (`-version`, `/info`, IDENTIFY).
pub const VERSION: &str = nsq_protocol::VERSION;

/// `nsqlookupd v1.3.0 (built w/rustc1.95.0)`: nsqd's string (which carries the compiler
/// version recorded by nsqd's build script) with the program name swapped.
pub fn version_string() -> String {
    nsqd::options::version_string_for("nsqlookupd")
}

/// Every nsqlookupd option (spec §1.1), resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsqlookupdOptions {
    /// `-config`: the TOML file that was loaded (`""` = none).
    pub config: String,
    pub log_level: LogLevel,
    pub log_prefix: String,
    /// `-verbose`: deprecated, no effect.
    pub verbose: bool,
    pub tcp_address: String,
    pub http_address: String,
    /// Reported about ourselves in the IDENTIFY reply.
    pub broadcast_address: String,
    /// A producer silent for longer is hidden from `/lookup` and `/nodes`.
    pub inactive_producer_timeout: Duration,
    /// How long `/topic/tombstone` hides a producer from `/lookup`.
    pub tombstone_lifetime: Duration,
}

impl Default for NsqlookupdOptions {
    fn default() -> Self {
        NsqlookupdOptions::with_hostname(&hostname())
    }
}

impl NsqlookupdOptions {
    /// The reference defaults with `hostname` as broadcast address.
    pub fn with_hostname(hostname: &str) -> Self {
        NsqlookupdOptions {
            config: String::new(),
            log_level: LogLevel::Info,
            log_prefix: "[nsqlookupd] ".to_string(),
            verbose: false,
            tcp_address: "0.0.0.0:4160".to_string(),
            http_address: "0.0.0.0:4161".to_string(),
            broadcast_address: hostname.to_string(),
            inactive_producer_timeout: Duration::from_secs(300),
            tombstone_lifetime: Duration::from_secs(45),
        }
    }

    /// The liveness settings of the registration DB.
    pub fn liveness(&self) -> crate::db::Liveness {
        crate::db::Liveness {
            inactive_producer_timeout: self.inactive_producer_timeout,
            tombstone_lifetime: self.tombstone_lifetime,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseOutcome {
    /// Start with these options.
    Run(NsqlookupdOptions),
    /// `-version`: print [`version_string`] to stdout, exit 0.
    Version,
    /// `-h`/`-help`: print [`usage`] to stderr, exit 0.
    Help,
}

/// Why the command line or config file was rejected (shared with nsqd: `Usage` → exit 2,
/// `Fatal` → exit 1).
pub use nsqd::options::FlagError;

/// How a flag's value is parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    Bool,
    Dur,
    Level,
}

/// One flag: name, type, config-file key (`None`: not settable from the file).
struct FlagSpec {
    name: &'static str,
    kind: Kind,
    cfg_key: Option<&'static str>,
}

/// Every flag except `-version` (handled by the parser), in config-resolution order.
const FLAGS: &[FlagSpec] = &[
    FlagSpec {
        name: "config",
        kind: Kind::Str,
        cfg_key: None,
    },
    FlagSpec {
        name: "log-level",
        kind: Kind::Level,
        cfg_key: Some("log_level"),
    },
    FlagSpec {
        name: "log-prefix",
        kind: Kind::Str,
        cfg_key: Some("log_prefix"),
    },
    FlagSpec {
        name: "verbose",
        kind: Kind::Bool,
        cfg_key: None,
    },
    FlagSpec {
        name: "tcp-address",
        kind: Kind::Str,
        cfg_key: Some("tcp_address"),
    },
    FlagSpec {
        name: "http-address",
        kind: Kind::Str,
        cfg_key: Some("http_address"),
    },
    FlagSpec {
        name: "broadcast-address",
        kind: Kind::Str,
        cfg_key: Some("broadcast_address"),
    },
    FlagSpec {
        name: "inactive-producer-timeout",
        kind: Kind::Dur,
        cfg_key: Some("inactive_producer_timeout"),
    },
    FlagSpec {
        name: "tombstone-lifetime",
        kind: Kind::Dur,
        cfg_key: Some("tombstone_lifetime"),
    },
];

/// A typed value ready to be stored in a field.
enum Value {
    Str(String),
    Bool(bool),
    Dur(Duration),
    Level(LogLevel),
}

impl NsqlookupdOptions {
    fn set(&mut self, flag: &str, v: Value) {
        match (flag, v) {
            ("config", Value::Str(s)) => self.config = s,
            ("log-level", Value::Level(l)) => self.log_level = l,
            ("log-prefix", Value::Str(s)) => self.log_prefix = s,
            ("verbose", Value::Bool(b)) => self.verbose = b,
            ("tcp-address", Value::Str(s)) => self.tcp_address = s,
            ("http-address", Value::Str(s)) => self.http_address = s,
            ("broadcast-address", Value::Str(s)) => self.broadcast_address = s,
            ("inactive-producer-timeout", Value::Dur(d)) => self.inactive_producer_timeout = d,
            ("tombstone-lifetime", Value::Dur(d)) => self.tombstone_lifetime = d,
            _ => unreachable!("flag table and setter disagree on {flag}"),
        }
    }
}

/// A flag's `Value.Set`: the error text goes after `invalid value "<v>" for flag -<name>: `.
fn parse_flag_value(kind: Kind, v: &str) -> Result<Value, String> {
    match kind {
        Kind::Str => Ok(Value::Str(v.to_string())),
        Kind::Bool => parse_go_bool(v)
            .map(Value::Bool)
            .ok_or_else(|| "parse error".to_string()),
        Kind::Dur => match parse_go_duration(v) {
            Ok(d) => Ok(Value::Dur(d)),
            Err(DurationError::Negative) => Err("negative durations are not supported".into()),
            Err(DurationError::Invalid(_)) => Err("parse error".into()),
        },
        Kind::Level => LogLevel::parse(v).map(Value::Level),
    }
}

/// Parses the command line **with the program name first** (`std::env::args()`), then the
/// `-config` file if any, resolving flag (if given) > config value > default.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<ParseOutcome, FlagError> {
    parse_args_with_defaults(args, NsqlookupdOptions::default())
}

/// [`parse_args`] from the given defaults (tests use a fixed host name).
pub fn parse_args_with_defaults<I: IntoIterator<Item = String>>(
    args: I,
    defaults: NsqlookupdOptions,
) -> Result<ParseOutcome, FlagError> {
    let args: Vec<String> = args.into_iter().skip(1).collect();
    let mut opts = defaults;
    let mut explicit: HashSet<&'static str> = HashSet::new();
    let mut version = false;

    // Go's FlagSet.parseOne, one flag per iteration.
    let mut i = 0;
    while i < args.len() {
        let s = args[i].as_str();
        if s.len() < 2 || !s.starts_with('-') {
            break; // first non-flag argument: stop, ignore the rest
        }
        let mut minuses = 1;
        if s.as_bytes()[1] == b'-' {
            minuses = 2;
            if s.len() == 2 {
                break; // "--" terminates the flags
            }
        }
        let body = &s[minuses..];
        if body.is_empty() || body.starts_with('-') || body.starts_with('=') {
            return Err(FlagError::Usage(format!("bad flag syntax: {s}")));
        }
        i += 1;
        let (name, mut value) = match body[1..].find('=') {
            Some(p) => (&body[..p + 1], Some(&body[p + 2..])),
            None => (body, None),
        };

        let kind = if name == "version" {
            Kind::Bool
        } else {
            match FLAGS.iter().find(|f| f.name == name) {
                Some(f) => f.kind,
                None if name == "help" || name == "h" => return Ok(ParseOutcome::Help),
                None => {
                    return Err(FlagError::Usage(format!(
                        "flag provided but not defined: -{name}"
                    )))
                }
            }
        };
        if kind == Kind::Bool {
            let v = value.unwrap_or("true");
            let Some(b) = parse_go_bool(v) else {
                return Err(FlagError::Usage(format!(
                    "invalid boolean value {} for -{name}: parse error",
                    go_quote(v.as_bytes())
                )));
            };
            if name == "version" {
                version = b;
                continue;
            }
            let spec = FLAGS.iter().find(|f| f.name == name).expect("known flag");
            opts.set(spec.name, Value::Bool(b));
            explicit.insert(spec.name);
            continue;
        }
        if value.is_none() && i < args.len() {
            value = Some(args[i].as_str());
            i += 1;
        }
        let Some(v) = value else {
            return Err(FlagError::Usage(format!("flag needs an argument: -{name}")));
        };
        let spec = FLAGS.iter().find(|f| f.name == name).expect("known flag");
        let parsed = parse_flag_value(kind, v).map_err(|e| {
            FlagError::Usage(format!(
                "invalid value {} for flag -{name}: {e}",
                go_quote(v.as_bytes())
            ))
        })?;
        opts.set(spec.name, parsed);
        explicit.insert(spec.name);
    }

    if version {
        return Ok(ParseOutcome::Version);
    }
    if !opts.config.is_empty() {
        let path = opts.config.clone();
        let table = load_config_file(&path)?;
        apply_config(&mut opts, &table, &explicit)?;
    }
    Ok(ParseOutcome::Run(opts))
}

/// Reads and parses the TOML file; errors are `failed to load config file <path> - <err>`.
fn load_config_file(path: &str) -> Result<toml::Table, FlagError> {
    let fail = |e: String| FlagError::Fatal(format!("failed to load config file {path} - {e}"));
    let bytes = std::fs::read(path).map_err(|e| fail(go_io_error("open", path, &e)))?;
    let text = String::from_utf8(bytes).map_err(|_| fail("toml: invalid UTF-8".to_string()))?;
    text.parse::<toml::Table>().map_err(|e| {
        let line = e
            .span()
            .map(|r| text[..r.start.min(text.len())].matches('\n').count() + 1);
        let msg = e.message().trim_end().to_string();
        fail(match line {
            Some(l) => format!("toml: line {l}: {msg}"),
            None => format!("toml: {msg}"),
        })
    })
}

/// `log_level` is validated first (even when the flag was given), then every key whose
/// flag was not given is coerced into its option; unknown keys are ignored.
fn apply_config(
    opts: &mut NsqlookupdOptions,
    table: &toml::Table,
    explicit: &HashSet<&'static str>,
) -> Result<(), FlagError> {
    let log_level = match table.get("log_level") {
        Some(v) => Some(LogLevel::parse(&go_format_value(v)).map_err(|_| {
            FlagError::Fatal(format!("failed parsing log_level {}", go_format_value(v)))
        })?),
        None => None,
    };
    for spec in FLAGS {
        let Some(key) = spec.cfg_key else { continue };
        if explicit.contains(spec.name) {
            continue;
        }
        let Some(v) = table.get(key) else { continue };
        let value = match spec.kind {
            Kind::Level => Ok(Value::Level(log_level.unwrap_or(opts.log_level))),
            Kind::Str => Ok(Value::Str(coerce_string(v))),
            Kind::Dur => coerce_duration(v).map(Value::Dur),
            Kind::Bool => unreachable!("no bool option has a config key"),
        };
        match value {
            Ok(value) => opts.set(spec.name, value),
            Err(e) => {
                return Err(FlagError::Fatal(format!(
                    "option resolution failed to coerce {} for {} - {e}",
                    go_format_value(v),
                    spec.name
                )))
            }
        }
    }
    Ok(())
}

/// go-options' string coercion: strings as-is, integers in decimal, floats with `%f`, anything
/// else through `%s` (which for a bool is Go's `%!s(bool=true)`).
fn coerce_string(v: &toml::Value) -> String {
    use toml::Value as T;
    match v {
        T::String(s) => s.clone(),
        T::Integer(i) => i.to_string(),
        T::Float(f) => format!("{f:.6}"),
        T::Boolean(b) => format!("%!s(bool={b})"),
        other => go_format_value(other),
    }
}

/// go-options' duration coercion: integers (and strings of digits) are milliseconds, other
/// strings Go durations.
fn coerce_duration(v: &toml::Value) -> Result<Duration, String> {
    use toml::Value as T;
    match v {
        T::Integer(ms) => u64::try_from(*ms)
            .map(Duration::from_millis)
            .map_err(|_| "negative durations are not supported".to_string()),
        T::String(x) if !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit()) => {
            x.parse::<u64>().map(Duration::from_millis).map_err(|_| {
                format!(
                    "strconv.Atoi: parsing {}: value out of range",
                    go_quote(x.as_bytes())
                )
            })
        }
        T::String(x) => parse_go_duration(x).map_err(|e| match e {
            DurationError::Invalid(m) => m,
            DurationError::Negative => "negative durations are not supported".to_string(),
        }),
        _ => Err("invalid value type".to_string()),
    }
}

/// A TOML value as Go's `%v` prints the decoded value.
fn go_format_value(v: &toml::Value) -> String {
    use toml::Value as T;
    match v {
        T::String(s) => s.clone(),
        T::Integer(i) => i.to_string(),
        T::Float(f) => go_format_float(*f),
        T::Boolean(b) => b.to_string(),
        T::Datetime(d) => d.to_string(),
        T::Array(a) => format!(
            "[{}]",
            a.iter().map(go_format_value).collect::<Vec<_>>().join(" ")
        ),
        T::Table(t) => format!(
            "map[{}]",
            t.iter()
                .map(|(k, v)| format!("{k}:{}", go_format_value(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// An I/O error in Go's `*PathError` form: `open /x: no such file or directory`.
fn go_io_error(op: &str, path: &str, e: &std::io::Error) -> String {
    let text = e.to_string();
    let text = match text.find(" (os error") {
        Some(p) => &text[..p],
        None => &text,
    };
    let mut chars = text.chars();
    let lowered = match chars.next() {
        Some(c) => c.to_lowercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    };
    format!("{op} {path}: {lowered}")
}

/// The reference's `nsqlookupd -h` text for this machine's host name.
pub fn usage() -> String {
    usage_for_hostname(&hostname())
}

/// [`usage`] for a given host name (Go omits `(default …)` for an empty string).
pub fn usage_for_hostname(hostname: &str) -> String {
    let host_default = if hostname.is_empty() {
        String::new()
    } else {
        format!(" (default {})", go_quote(hostname.as_bytes()))
    };
    USAGE_TEMPLATE.replace("{HOST_DEFAULT}", &host_default)
}

const USAGE_TEMPLATE: &str = r#"Usage of nsqlookupd:
  -broadcast-address string
    	address of this lookupd node, (default to the OS hostname){HOST_DEFAULT}
  -config string
    	path to config file
  -http-address string
    	<addr>:<port> to listen on for HTTP clients (default "0.0.0.0:4161")
  -inactive-producer-timeout duration
    	duration of time a producer will remain in the active list since its last ping (default 5m0s)
  -log-level value
    	set log verbosity: debug, info, warn, error, or fatal (default INFO)
  -log-prefix string
    	log message prefix (default "[nsqlookupd] ")
  -tcp-address string
    	<addr>:<port> to listen on for TCP clients (default "0.0.0.0:4160")
  -tombstone-lifetime duration
    	duration of time a producer will remain tombstoned if registration remains (default 45s)
  -verbose
    	[deprecated] has no effect, use --log-level
  -version
    	print version string
"#;
