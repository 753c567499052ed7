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
use std::io::Read;
use std::time::Duration;

use crate::duration::{self, DurationError};
use crate::quote::go_quote;
use crate::strconv::{self, IntError};

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

/// Why a config-file value could not be coerced into its option's type (go-options'
/// `coerce`); `Display` is the reference's text after `… for <flag> - `.
#[derive(Debug, thiserror::Error)]
enum CoerceError {
    /// A TOML type the option cannot take.
    #[error("invalid value type")]
    Type,
    #[error(transparent)]
    Num(#[from] strconv::NumError),
    #[error(transparent)]
    Duration(#[from] DurationError),
    /// A [`Slot::Custom`] value refused it.
    #[error("{0}")]
    Value(ValueError),
}

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

    /// The checks of [`FlagSet::config_checks`], then go-options' `Resolve` for every key
    /// whose flag was not given.
    fn apply_config(
        &self,
        opts: &mut O,
        table: &toml::Table,
        explicit: &HashSet<&'static str>,
    ) -> Result<(), FlagError> {
        for key in self.config_checks {
            let (Some(v), Some(flag)) = (table.get(*key), self.by_config_key(key)) else {
                continue;
            };
            let mut scratch = opts.clone();
            let text = format_value(v);
            if let Slot::Custom(c) = (flag.slot)(&mut scratch) {
                c.set(&text)
                    .map_err(|_| FlagError::Fatal(format!("failed parsing {key} {text}")))?;
            }
        }
        for flag in self.flags {
            let Some(key) = flag.config_key else { continue };
            if explicit.contains(flag.name) {
                continue;
            }
            let Some(v) = table.get(key) else { continue };
            (flag.slot)(opts).set_config(v).map_err(|e| {
                FlagError::Fatal(format!(
                    "option resolution failed to coerce {} for {} - {e}",
                    format_value(v),
                    flag.name
                ))
            })?;
        }
        Ok(())
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

    /// go-options' `coerce` of a config-file value into this field's type.
    fn set_config(self, v: &toml::Value) -> Result<(), CoerceError> {
        use toml::Value as T;
        let bad_type = || CoerceError::Type;
        match self {
            Slot::Str(s) => {
                *s = match v {
                    T::String(x) => x.clone(),
                    T::Integer(i) => i.to_string(),
                    T::Float(f) => format!("{f:.6}"),
                    // Go's `fmt.Sprintf("%s", v)` of a bool.
                    T::Boolean(b) => format!("%!s(bool={b})"),
                    other => format_value(other),
                }
            }
            Slot::Bool(b) => {
                *b = match v {
                    T::Boolean(x) => *x,
                    T::Integer(i) => *i != 0,
                    T::String(x) => strconv::parse_bool(x)
                        .ok_or_else(|| strconv::NumError::syntax("ParseBool", x))?,
                    _ => return Err(bad_type()),
                }
            }
            Slot::Int(i) => {
                *i = match v {
                    T::Integer(x) => *x,
                    T::String(x) => x.parse::<i64>().map_err(|e| {
                        let why = match e.kind() {
                            std::num::IntErrorKind::PosOverflow
                            | std::num::IntErrorKind::NegOverflow => "value out of range",
                            _ => "invalid syntax",
                        };
                        strconv::NumError::new("ParseInt", x, why)
                    })?,
                    _ => return Err(bad_type()),
                }
            }
            Slot::Dur(d) => {
                *d = match v {
                    // Integers (and strings of digits) are milliseconds.
                    T::Integer(ms) => u64::try_from(*ms)
                        .map(Duration::from_millis)
                        .map_err(|_| DurationError::Negative)?,
                    T::String(x) if !x.is_empty() && x.bytes().all(|c| c.is_ascii_digit()) => {
                        let ms = x
                            .parse::<u64>()
                            .map_err(|_| strconv::NumError::range("Atoi", x))?;
                        Duration::from_millis(ms)
                    }
                    T::String(x) => duration::parse(x)?,
                    _ => return Err(bad_type()),
                }
            }
            Slot::StrList(l) => {
                *l = match v {
                    // The reference splits on ','; an empty string is taken as an empty list
                    // (the reference would produce one empty address).
                    T::String(x) if x.is_empty() => Vec::new(),
                    T::String(x) => x.split(',').map(str::to_string).collect(),
                    T::Array(items) => items
                        .iter()
                        .map(|i| match i {
                            T::String(s) => Ok(s.clone()),
                            _ => Err(bad_type()),
                        })
                        .collect::<Result<_, _>>()?,
                    _ => return Err(bad_type()),
                }
            }
            Slot::FloatList(l) => {
                // Kept in the written order (no sorting), as the reference does.
                *l = match v {
                    T::String(x) => x
                        .split(',')
                        .map(|p| {
                            strconv::parse_float(p)
                                .ok_or_else(|| strconv::NumError::syntax("ParseFloat", p))
                        })
                        .collect::<Result<_, _>>()?,
                    // Integer elements crash the reference; they are accepted here.
                    T::Array(items) => items
                        .iter()
                        .map(|i| match i {
                            T::Float(f) => Ok(*f),
                            T::Integer(n) => Ok(*n as f64),
                            _ => Err(bad_type()),
                        })
                        .collect::<Result<_, _>>()?,
                    T::Float(f) => vec![*f],
                    _ => return Err(bad_type()),
                }
            }
            // Custom values read Go's `%v` of the decoded value.
            Slot::Custom(c) => c.set(&format_value(v)).map_err(CoerceError::Value)?,
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

/// Reads and parses the TOML file; errors are `failed to load config file <path> - <err>`.
fn load_config_file(path: &str) -> Result<toml::Table, FlagError> {
    let fail = |e: String| FlagError::Fatal(format!("failed to load config file {path} - {e}"));
    let mut file =
        std::fs::File::open(path).map_err(|e| fail(crate::os::path_error("open", path, &e)))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| fail(crate::os::path_error("read", path, &e)))?;
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

/// A TOML value as Go's `%v` prints the decoded value (for error messages and for the values
/// the reference re-parses from their `%v` text).
pub fn format_value(v: &toml::Value) -> String {
    use toml::Value as T;
    match v {
        T::String(s) => s.clone(),
        T::Integer(i) => i.to_string(),
        T::Float(f) => strconv::format_float(*f),
        T::Boolean(b) => b.to_string(),
        T::Datetime(d) => d.to_string(),
        T::Array(a) => format!(
            "[{}]",
            a.iter().map(format_value).collect::<Vec<_>>().join(" ")
        ),
        T::Table(t) => format!(
            "map[{}]",
            t.iter()
                .map(|(k, v)| format!("{k}:{}", format_value(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lg::LogLevel;

    #[derive(Debug, Clone, PartialEq)]
    struct Opts {
        config: String,
        name: String,
        count: i64,
        on: bool,
        wait: Duration,
        list: Vec<String>,
        level: LogLevel,
    }

    fn defaults() -> Opts {
        Opts {
            config: String::new(),
            name: "x".into(),
            count: 3,
            on: true,
            wait: Duration::from_secs(90),
            list: Vec::new(),
            level: LogLevel::Info,
        }
    }

    const SET: FlagSet<Opts> = FlagSet {
        program: "demo",
        flags: crate::flags![Opts;
            "config" => config: Str, None, "path to config file";
            "name" => name: Str, Some("name"), "a name";
            "count" => count: Int, Some("count"), "how many";
            "on" => on: Bool, Some("on"), "switch";
            "wait" => wait: Dur, Some("wait"), "how long";
            "item" => list: StrList, Some("items"), "an item (may be given multiple times)";
            "log-level" => level: Custom, Some("log_level"), "set log verbosity";
        ],
        config_checks: &["log_level"],
    };

    fn parse(args: &[&str]) -> Result<ParseOutcome<Opts>, FlagError> {
        let mut v = vec!["demo".to_string()];
        v.extend(args.iter().map(|s| s.to_string()));
        SET.parse(v, defaults())
    }

    fn run(args: &[&str]) -> Opts {
        match parse(args).unwrap() {
            ParseOutcome::Run(o) => o,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn usage_names_the_argument_in_back_quotes() {
        let line = usage_line(
            "rotate-size",
            &Slot::Int(&mut 0),
            "rotate at `rotate-size` bytes",
        );
        assert_eq!(
            line,
            "  -rotate-size rotate-size\n    \trotate at rotate-size bytes\n"
        );
        let line = usage_line("n", &Slot::Int(&mut 0), "no quotes");
        assert_eq!(line, "  -n int\n    \tno quotes\n");
    }

    #[test]
    fn parse_all_keeps_arguments_and_options_with_version() {
        let all = |a: &[&str]| {
            let mut v = vec!["demo".to_string()];
            v.extend(a.iter().map(|s| s.to_string()));
            SET.parse_all(v, defaults()).unwrap()
        };
        let p = all(&["-count=1", "x", "-on"]).unwrap();
        assert_eq!((p.opts.count, p.version), (1, false));
        assert_eq!(p.args, ["x", "-on"]);
        let p = all(&["-on", "--", "-count=1"]).unwrap();
        assert!(p.opts.on);
        assert_eq!(p.args, ["-count=1"]);
        let p = all(&["-version", "-count=2"]).unwrap();
        assert_eq!((p.opts.count, p.version), (2, true));
        assert!(p.args.is_empty());
        assert_eq!(all(&["-h"]), None);
    }

    #[test]
    fn go_flag_syntax() {
        let o = run(&[
            "-name",
            "-y",
            "--count=0x10",
            "-on=false",
            "-item",
            "a",
            "--item=b",
        ]);
        assert_eq!(o.name, "-y");
        assert_eq!(o.count, 16);
        assert!(!o.on);
        assert_eq!(o.list, ["a", "b"]);
        // Bools never take the next argument; parsing stops at the first non-flag.
        let o = run(&["-on", "false", "-count=1"]);
        assert!(o.on);
        assert_eq!(o.count, 3);
        let o = run(&["--", "-count=1"]);
        assert_eq!(o.count, 3);
        assert_eq!(parse(&["-h"]).unwrap(), ParseOutcome::Help);
        assert_eq!(parse(&["--version"]).unwrap(), ParseOutcome::Version);
        let e = |a: &[&str]| parse(a).unwrap_err().to_string();
        assert_eq!(e(&["-bogus"]), "flag provided but not defined: -bogus");
        assert_eq!(e(&["---x"]), "bad flag syntax: ---x");
        assert_eq!(e(&["-count"]), "flag needs an argument: -count");
        assert_eq!(
            e(&["-count=9223372036854775808"]),
            "invalid value \"9223372036854775808\" for flag -count: value out of range"
        );
        assert_eq!(
            e(&["-on=yes"]),
            "invalid boolean value \"yes\" for -on: parse error"
        );
        assert_eq!(
            e(&["-log-level=loud"]),
            "invalid value \"loud\" for flag -log-level: invalid log level 'loud' (debug, info, warn, error, fatal)"
        );
        assert_eq!(parse(&["-count=x"]).unwrap_err().exit_code(), 2);
    }

    #[test]
    fn usage_like_print_defaults() {
        assert_eq!(
            SET.usage(&defaults()),
            "Usage of demo:
  -config string
    \tpath to config file
  -count int
    \thow many (default 3)
  -item value
    \tan item (may be given multiple times)
  -log-level value
    \tset log verbosity (default INFO)
  -name string
    \ta name (default \"x\")
  -on
    \tswitch (default true)
  -version
    \tprint version string
  -wait duration
    \thow long (default 1m30s)
"
        );
    }

    #[test]
    fn config_file_coercion_and_precedence() {
        let dir = std::env::temp_dir().join(format!("nsq-go-flag-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.toml");
        std::fs::write(
            &p,
            "name = true\ncount = \"12\"\nwait = 2000\nitems = \"a,b\"\nlog_level = \"debug\"\n",
        )
        .unwrap();
        let cfg = format!("--config={}", p.display());
        let o = run(&[&cfg, "-count=1"]);
        assert_eq!(o.name, "%!s(bool=true)");
        assert_eq!(o.count, 1);
        assert_eq!(o.wait, Duration::from_secs(2));
        assert_eq!(o.list, ["a", "b"]);
        assert_eq!(o.level, LogLevel::Debug);
        std::fs::write(&p, "log_level = \"nope\"\n").unwrap();
        let e = parse(&[&cfg, "-log-level=warn"]).unwrap_err();
        assert_eq!(e, FlagError::Fatal("failed parsing log_level nope".into()));
        assert_eq!(e.exit_code(), 1);
        std::fs::write(&p, "wait = 1.5\n").unwrap();
        assert_eq!(
            parse(&[&cfg]).unwrap_err().to_string(),
            "option resolution failed to coerce 1.5 for wait - invalid value type"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        let missing = parse(&["--config=/nonexistent/x.toml"]).unwrap_err();
        assert_eq!(
            missing.to_string(),
            "failed to load config file /nonexistent/x.toml - open /nonexistent/x.toml: no such file or directory"
        );
    }
}
