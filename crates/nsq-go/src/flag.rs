//! Go's `flag` package as the NSQ binaries use it, plus go-options' `--config` resolution.
//!
//! Each binary declares its flags once, as a [`FlagSet`] over its options struct: a flag's name,
//! its config-file key, its usage line, and a function that points at the field it sets (a
//! [`Slot`]). From that one table come the command-line parser, the `-h` text, the TOML config
//! resolution (flag > config file > default) and the `/config/<key>` lookups.
//!
//! # Why not clap
//!
//! Scripts written for the reference pass Go-style flags, and Go's `flag` package differs from
//! clap in ways they can see: `-name` and `--name` are the same; bool flags never consume the
//! next argument (`-verbose foo` stops parsing at `foo`) but take `=false`; any other flag
//! consumes the next argument even when it starts with `-`; parsing stops at the first
//! non-flag argument and ignores the rest; integers take Go's base prefixes and durations Go's
//! syntax; the error texts (`flag provided but not defined: -bogus`,
//! `invalid value "x" for flag -y: parse error`) and the usage layout are part of the contract.
//! The parser is a transcription of `FlagSet.parseOne` (Go's flag/flag.go), the usage text of
//! `FlagSet.PrintDefaults`, and the config resolution of go-options' `Resolve` and `coerce`
//! (github.com/mreiferson/go-options, options.go), which nsqd/nsqlookupd/nsqadmin's `main.go`
//! call.

use std::collections::HashSet;
use std::time::Duration;

use crate::duration::{self, DurationError};
use crate::quote::go_quote;
use crate::strconv::{self, IntError};

mod config;

pub use config::format_value;
use config::load_config_file;

/// Why the command line or config file was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagError {
    /// A command-line error (Go `flag` semantics): print the message and then the usage text
    /// to stderr, exit status 2.
    #[error("{0}")]
    Usage(String),
    /// A fatal startup error (config file, value coercion, unparsable percentile): exit
    /// status 1.
    #[error("{0}")]
    Fatal(String),
}

impl FlagError {
    pub fn message(&self) -> &str {
        match self {
            FlagError::Usage(m) | FlagError::Fatal(m) => m,
        }
    }

    /// 2 for command-line errors, 1 for fatal ones.
    pub fn exit_code(&self) -> i32 {
        match self {
            FlagError::Usage(_) => 2,
            FlagError::Fatal(_) => 1,
        }
    }
}

/// What the command line asks for.
// Built once at startup and consumed at once; boxing the big variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum ParseOutcome<O> {
    /// Start with these (resolved, not yet validated) options.
    Run(O),
    /// `-version`: print the version string to stdout, exit 0.
    Version,
    /// `-h`/`-help`: print the usage text to stderr, exit 0.
    Help,
}

/// Why [`Value::set`] refused a value: the implementation's own error type, whose `Display` is
/// the text shown after `invalid value "<v>" for flag -<name>: ` (boxed, as flags of different
/// types share one table).
pub type ValueError = Box<dyn std::error::Error + Send + Sync>;

/// What [`FlagSet::parse_all`] found on a command line without `-h`.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed<O> {
    /// The options (config file applied unless `-version` was given).
    pub opts: O,
    /// `-version` was given (and true).
    pub version: bool,
    /// Go's `FlagSet.Args()`: what follows the flags (after a `--`, or from the first
    /// argument that is not a flag).
    pub args: Vec<String>,
}

/// A flag type of its own (Go's `flag.Value`): log levels, TLS versions, …
pub trait Value {
    /// Go's `IsBoolFlag`: `-name` alone sets it, and it never consumes the next argument.
    fn is_bool_flag(&self) -> bool {
        false
    }

    /// `Value.Set`. The error text follows `invalid value "<v>" for flag -<name>: `. The same
    /// function reads the config-file value (as Go's `%v` of it).
    fn set(&mut self, text: &str) -> Result<(), ValueError>;

    /// The `(default …)` text of the usage line; `None` where Go omits it (the zero value).
    fn usage_default(&self) -> Option<String>;

    /// The value as `GET /config/<key>` shows it.
    fn to_json(&self) -> serde_json::Value;

    /// The type word of the usage line (Go's `UnquoteUsage`): `value` for a `flag.Value`;
    /// a stand-in for a built-in Go type returns that type's word (`float` for `Float64`).
    fn type_name(&self) -> &'static str {
        "value"
    }
}

/// A mutable view of the field one flag sets, typed by how it is parsed.
pub enum Slot<'a> {
    Bool(&'a mut bool),
    Str(&'a mut String),
    /// Go `int`/`int64`: `strconv.ParseInt(s, 0, 64)`.
    Int(&'a mut i64),
    Dur(&'a mut Duration),
    /// A repeatable flag (`-lookupd-tcp-address a -lookupd-tcp-address b`); the config file
    /// gives an array or a comma-separated string.
    StrList(&'a mut Vec<String>),
    /// nsqd's `FloatArray` (`-e2e-processing-latency-percentile`): comma-separated, kept
    /// sorted descending; an unparsable item is fatal (`Could not parse: <item>`).
    FloatList(&'a mut Vec<f64>),
    Custom(&'a mut dyn Value),
}

/// One flag of a [`FlagSet`].
pub struct Flag<O> {
    /// Without the leading `-`.
    pub name: &'static str,
    /// The TOML key (`None`: not settable from the file and not readable at `/config`).
    pub config_key: Option<&'static str>,
    /// The usage line (`-h`).
    pub usage: &'static str,
    /// Where the value goes.
    pub slot: for<'a> fn(&'a mut O) -> Slot<'a>,
}

/// Declares a `&'static [Flag<O>]` table: `flags![O; "name" => field: Kind, Some("key"), "usage"; …]`
/// where `Kind` is a [`Slot`] variant. The field may be a path into a nested struct
/// (`consumer.channel`), so a block of flags several programs share can live in a struct of
/// its own and be declared once by a macro that expands to `flags!` (nsq-utils'
/// `consumer_flags!`).
///
/// A table that starts with `@daemon;` gets the four flags every NSQ daemon declares first
/// (apps/nsqd/options.go, apps/nsqlookupd/main.go, apps/nsqadmin/main.go): `-config`,
/// `-log-level`, `-log-prefix` and the deprecated `-verbose`, set into the fields `config`,
/// `log_level`, `log_prefix` and `verbose`.
#[macro_export]
macro_rules! flags {
    ($O:ty; @daemon; $($rest:tt)*) => {
        $crate::flags![$O;
            "config" => config: Str, None, "path to config file";
            "log-level" => log_level: Custom, Some("log_level"),
                "set log verbosity: debug, info, warn, error, or fatal";
            "log-prefix" => log_prefix: Str, Some("log_prefix"), "log message prefix";
            "verbose" => verbose: Bool, None, "[deprecated] has no effect, use --log-level";
            $($rest)*
        ]
    };
    ($O:ty; $( $name:literal => $($field:ident).+ : $kind:ident, $cfg:expr, $usage:expr; )*) => {
        &[ $( $crate::flag::Flag::<$O> {
            name: $name,
            config_key: $cfg,
            usage: $usage,
            slot: |o: &mut $O| $crate::flag::Slot::$kind(&mut o.$($field).+),
        } ),* ]
    };
}

/// A program's flags: the command line, `-h`, the `--config` file and `/config` lookups.
pub struct FlagSet<O: 'static> {
    /// The program name in `Usage of <program>:`.
    pub program: &'static str,
    /// Every flag except `-version` (built in), in config-resolution order.
    pub flags: &'static [Flag<O>],
    /// Config keys of [`Slot::Custom`] flags that are checked before anything is resolved,
    /// even when their flag was given (go-options' callers validate these first); a bad value
    /// is fatal with `failed parsing <key> <value>`.
    pub config_checks: &'static [&'static str],
}

impl<O: Clone> FlagSet<O> {
    /// The flag whose config key is `key`.
    pub fn by_config_key(&self, key: &str) -> Option<&Flag<O>> {
        self.flags.iter().find(|f| f.config_key == Some(key))
    }

    /// Parses the command line given **with the program name first** (`std::env::args()`; the
    /// first item is skipped) into `opts`, then loads the file named by the `config` flag if
    /// it is set, resolving every option as flag (if given, even equal to its default) >
    /// config-file value > default.
    pub fn parse<I: IntoIterator<Item = String>>(
        &self,
        args: I,
        opts: O,
    ) -> Result<ParseOutcome<O>, FlagError> {
        Ok(match self.parse_all(args, opts)? {
            None => ParseOutcome::Help,
            Some(p) if p.version => ParseOutcome::Version,
            Some(p) => ParseOutcome::Run(p.opts),
        })
    }

    /// Like [`FlagSet::parse`], for programs that look at more than the outcome (nsq's
    /// apps/nsq_to_file/nsq_to_file.go, `main`: `fs.Args()` is refused, and `-log-level` is
    /// checked before `-version` is honoured): the options as parsed even when `-version` was
    /// given, and the arguments after the flags. `None` is `-h`.
    pub fn parse_all<I: IntoIterator<Item = String>>(
        &self,
        args: I,
        mut opts: O,
    ) -> Result<Option<Parsed<O>>, FlagError> {
        let args: Vec<String> = args.into_iter().skip(1).collect();
        let mut rest: &[String] = &[];
        let mut explicit: HashSet<&'static str> = HashSet::new();
        let mut version = false;

        // Go's FlagSet.parseOne, one flag per iteration.
        let mut i = 0;
        while i < args.len() {
            let s = args[i].as_str();
            if s.len() < 2 || !s.starts_with('-') {
                rest = &args[i..];
                break; // first non-flag argument: stop, the rest are arguments
            }
            let mut minuses = 1;
            if s.as_bytes()[1] == b'-' {
                minuses = 2;
                if s.len() == 2 {
                    rest = &args[i + 1..];
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
            let bad_bool = |v: &str, e: &str| {
                FlagError::Usage(format!(
                    "invalid boolean value {} for -{name}: {e}",
                    go_quote(v.as_bytes())
                ))
            };

            if name == "version" {
                let v = value.unwrap_or("true");
                version = strconv::parse_bool(v).ok_or_else(|| bad_bool(v, "parse error"))?;
                continue;
            }
            let Some(flag) = self.flags.iter().find(|f| f.name == name) else {
                if name == "help" || name == "h" {
                    return Ok(None);
                }
                return Err(FlagError::Usage(format!(
                    "flag provided but not defined: -{name}"
                )));
            };
            let slot = (flag.slot)(&mut opts);
            if slot.is_bool_flag() {
                let v = value.unwrap_or("true");
                slot.set_flag(v).map_err(|e| bad_bool(v, &e.to_string()))?;
            } else {
                if value.is_none() && i < args.len() {
                    value = Some(args[i].as_str());
                    i += 1;
                }
                let Some(v) = value else {
                    return Err(FlagError::Usage(format!("flag needs an argument: -{name}")));
                };
                match slot.set_flag(v) {
                    Ok(()) => {}
                    Err(SetError::Fatal(m)) => return Err(FlagError::Fatal(m)),
                    Err(SetError::Invalid(e)) => {
                        return Err(FlagError::Usage(format!(
                            "invalid value {} for flag -{name}: {e}",
                            go_quote(v.as_bytes())
                        )))
                    }
                }
            }
            explicit.insert(flag.name);
        }

        let rest = rest.to_vec();
        if version {
            return Ok(Some(Parsed {
                opts,
                version,
                args: rest,
            }));
        }
        let config = self
            .flags
            .iter()
            .find(|f| f.name == "config")
            .and_then(|f| match (f.slot)(&mut opts) {
                Slot::Str(s) if !s.is_empty() => Some(s.clone()),
                _ => None,
            });
        if let Some(path) = config {
            let table = load_config_file(&path)?;
            self.apply_config(&mut opts, &table, &explicit)?;
        }
        Ok(Some(Parsed {
            opts,
            version,
            args: rest,
        }))
    }

    /// `FlagSet.PrintDefaults` after `Usage of <program>:`, with the values of `defaults` as
    /// the defaults shown.
    pub fn usage(&self, defaults: &O) -> String {
        self.usage_named(self.program, defaults)
    }

    /// [`FlagSet::usage`] under another name: a Go program that declares its flags on the
    /// global `flag.CommandLine` prints `Usage of <os.Args[0]>:` (flag.go, `CommandLine` is
    /// `NewFlagSet(os.Args[0], ExitOnError)`), the path it was started as.
    pub fn usage_named(&self, name: &str, defaults: &O) -> String {
        let mut scratch = defaults.clone();
        let mut lines: Vec<(&str, String)> = self
            .flags
            .iter()
            .map(|f| {
                let slot = (f.slot)(&mut scratch);
                (f.name, usage_line(f.name, &slot, f.usage))
            })
            .collect();
        lines.push((
            "version",
            usage_line("version", &Slot::Bool(&mut false), "print version string"),
        ));
        lines.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = format!("Usage of {name}:\n");
        for (_, l) in lines {
            out.push_str(&l);
        }
        out
    }
}

/// One entry of `PrintDefaults`.
fn usage_line(name: &str, slot: &Slot<'_>, usage: &str) -> String {
    let mut b = format!("  -{name}");
    let (type_name, usage) = match unquote_usage(usage) {
        Some((n, u)) => (n, u),
        None => (slot.type_name().to_string(), usage.to_string()),
    };
    if !type_name.is_empty() {
        b.push(' ');
        b.push_str(&type_name);
    }
    if b.len() <= 4 {
        b.push('\t');
    } else {
        b.push_str("\n    \t");
    }
    b.push_str(&usage.replace('\n', "\n    \t"));
    if let Some(d) = slot.usage_default() {
        b.push_str(&format!(" (default {d})"));
    }
    b.push('\n');
    b
}

/// Go's `UnquoteUsage`: a name in back quotes in the usage text (`` `bytes` ``) is the
/// argument name shown instead of the type, and the quotes are dropped from the text.
fn unquote_usage(usage: &str) -> Option<(String, String)> {
    let start = usage.find('`')?;
    let len = usage[start + 1..].find('`')?;
    let name = &usage[start + 1..start + 1 + len];
    let text = format!("{}{}{}", &usage[..start], name, &usage[start + 2 + len..]);
    Some((name.to_string(), text))
}

/// A flag value that did not parse.
#[derive(Debug)]
enum SetError {
    /// Shown after `invalid value "<v>" for flag -<name>: `.
    Invalid(String),
    /// Aborts at once (the reference's `log.Fatalf` inside the percentile flag).
    Fatal(String),
}

impl std::fmt::Display for SetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetError::Invalid(m) | SetError::Fatal(m) => f.write_str(m),
        }
    }
}

impl Slot<'_> {
    fn is_bool_flag(&self) -> bool {
        match self {
            Slot::Bool(_) => true,
            Slot::Custom(c) => c.is_bool_flag(),
            _ => false,
        }
    }

    /// Go's `UnquoteUsage` type name.
    fn type_name(&self) -> &'static str {
        match self {
            Slot::Bool(_) => "",
            Slot::Str(_) => "string",
            Slot::Int(_) => "int",
            Slot::Dur(_) => "duration",
            Slot::StrList(_) | Slot::FloatList(_) => "value",
            Slot::Custom(c) if c.is_bool_flag() => "",
            Slot::Custom(c) => c.type_name(),
        }
    }

    /// The `(default …)` text, `None` for Go's zero values.
    fn usage_default(&self) -> Option<String> {
        match self {
            Slot::Bool(b) => (**b).then(|| "true".to_string()),
            Slot::Str(s) => (!s.is_empty()).then(|| go_quote(s.as_bytes())),
            Slot::Int(i) => (**i != 0).then(|| i.to_string()),
            Slot::Dur(d) => (!d.is_zero()).then(|| duration::format(**d)),
            Slot::StrList(l) => (!l.is_empty()).then(|| l.join(",")),
            Slot::FloatList(l) => (!l.is_empty()).then(|| {
                l.iter()
                    .map(|f| strconv::format_float(*f))
                    .collect::<Vec<_>>()
                    .join(",")
            }),
            Slot::Custom(c) => c.usage_default(),
        }
    }

    /// The value as `GET /config/<key>` shows it: strings as [`serde_json::Value::String`]
    /// (nsqd and nsqadmin send those raw, not JSON-quoted), integers and bools as JSON,
    /// durations as integer nanoseconds, lists as arrays, custom values their own way.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Slot::Bool(b) => J::Bool(**b),
            Slot::Str(s) => J::String((*s).clone()),
            Slot::Int(i) => J::from(**i),
            Slot::Dur(d) => J::from(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            Slot::StrList(l) => J::Array(l.iter().cloned().map(J::String).collect()),
            Slot::FloatList(l) => J::Array(l.iter().map(|&f| json_float(f)).collect()),
            Slot::Custom(c) => c.to_json(),
        }
    }

    /// The flag's `Value.Set` as the reference defines it for each type.
    fn set_flag(self, v: &str) -> Result<(), SetError> {
        let parse_error = || SetError::Invalid("parse error".to_string());
        match self {
            Slot::Bool(b) => *b = strconv::parse_bool(v).ok_or_else(parse_error)?,
            Slot::Str(s) => *s = v.to_string(),
            Slot::Int(i) => {
                *i = strconv::parse_int(v).map_err(|e| {
                    SetError::Invalid(
                        match e {
                            IntError::Syntax => "parse error",
                            IntError::Range => "value out of range",
                        }
                        .to_string(),
                    )
                })?
            }
            Slot::Dur(d) => {
                *d = match duration::parse(v) {
                    Ok(d) => d,
                    Err(DurationError::Negative) => {
                        return Err(SetError::Invalid(
                            "negative durations are not supported".to_string(),
                        ))
                    }
                    Err(DurationError::Invalid(_)) => return Err(parse_error()),
                }
            }
            Slot::StrList(l) => l.push(v.to_string()),
            Slot::FloatList(l) => {
                for part in v.split(',') {
                    let f = strconv::parse_float(part)
                        .ok_or_else(|| SetError::Fatal(format!("Could not parse: {part}")))?;
                    l.push(f);
                }
                // Go's FloatArray sorts descending after every Set.
                l.sort_by(|a, b| b.partial_cmp(a).unwrap_or(std::cmp::Ordering::Equal));
            }
            Slot::Custom(c) => c.set(v).map_err(|e| SetError::Invalid(e.to_string()))?,
        }
        Ok(())
    }
}

/// A float as Go's `encoding/json` writes it: integral values without `.0`.
fn json_float(v: f64) -> serde_json::Value {
    if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
        return serde_json::Value::from(v as i64);
    }
    serde_json::Number::from_f64(v).map_or(serde_json::Value::Null, serde_json::Value::Number)
}

#[cfg(test)]
mod tests;
