//! go-options' config-file resolution (github.com/mreiferson/go-options, options.go,
//! `Resolve` and `coerce`), which nsqd/nsqlookupd/nsqadmin's `main.go` call after parsing
//! the command line: each option whose flag was not given takes its key's value from the TOML
//! file, coerced into the option's type, with the reference's error texts.

use std::collections::HashSet;
use std::io::Read;
use std::time::Duration;

use super::{FlagError, FlagSet, Slot, ValueError};
use crate::duration::{self, DurationError};
use crate::strconv;

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

impl<O: Clone> FlagSet<O> {
    /// The checks of [`FlagSet::config_checks`], then go-options' `Resolve` for every key
    /// whose flag was not given.
    pub(super) fn apply_config(
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
}

impl Slot<'_> {
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

/// Reads and parses the TOML file; errors are `failed to load config file <path> - <err>`.
pub(super) fn load_config_file(path: &str) -> Result<toml::Table, FlagError> {
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
