//! `--consumer-opt` / `--producer-opt key,value` (go-nsq's config_flag.go, `ConfigFlag.Set`,
//! over config.go's `Config.Set`): the value is split at the first `,`; a bare `key` sets the
//! option to boolean true; the text is coerced to the option's type and checked against
//! go-nsq's bounds by [`nsq_client::Config::set`]. An unknown key is refused with
//! `invalid option <key>`, which the flag parser shows as
//! `invalid value "bogus,1" for flag -consumer-opt: invalid option bogus`.

use nsq_client::{Config, ConfigError, OptionKind, OptionValue};
use nsq_go::flag::Value;
use nsq_go::quote::go_quote;
use nsq_go::strconv::NumError;

/// A go-nsq config that `key,value` flags write into.
#[derive(Debug, Clone, Default)]
pub struct ConfigFlag(pub Config);

/// The options go-nsq v1.1 takes that [`Config`] has no field for, or names differently.
enum Extra {
    /// Handled by [`Config::set`] under this name.
    Rename(&'static str),
    /// Validated and accepted; the client's behaviour does not depend on it. The check gets
    /// the value (`None` for a bare key, which go-nsq sets to the bool `true`).
    Ignore(fn(Option<&str>) -> Result<(), ConfigError>),
}

fn extra(key: &str) -> Option<Extra> {
    match key {
        // go-nsq v1.1 config.go: `LookupdAuthorization bool opt:"skip_lookupd_authorization"
        // default:"true"` — despite its name the option is the "send it" switch.
        "skip_lookupd_authorization" => Some(Extra::Rename("lookupd_authorization")),
        // config.go, `coerceBackoffStrategy`: "" or "exponential", or "full_jitter"; anything
        // else, the bare key's bool included, is "invalid value type". nsq-client always uses
        // the exponential strategy.
        "backoff_strategy" => Some(Extra::Ignore(|v| match v {
            Some("" | "exponential" | "full_jitter") => Ok(()),
            v => Err(ConfigError::WrongType {
                option: "backoff_strategy".into(),
                value: v.unwrap_or("true").into(),
            }),
        })),
        // config.go, tlsConfig `Set` of `tls_min_version` (its errors are returned as they
        // are): rustls negotiates TLS 1.2 or newer anyway; `tls1.3` is taken as well.
        "tls_min_version" => Some(Extra::Ignore(|v| match v {
            Some("ssl3.0" | "tls1.0" | "tls1.1" | "tls1.2" | "tls1.3") => Ok(()),
            Some(v) => Err(ConfigError::Invalid(format!(
                "ERROR: {v} is not a tls version"
            ))),
            None => Err(ConfigError::Invalid("ERROR: true is not a string".into())),
        })),
        // go-nsq has no option of this name (it is `skip_lookupd_authorization` there).
        "lookupd_authorization" => None,
        _ => None,
    }
}

impl ConfigFlag {
    /// Applies one `key[,value]` flag value.
    pub fn apply(&mut self, text: &str) -> Result<(), ConfigError> {
        let (key, value) = match text.split_once(',') {
            Some((k, v)) => (k, Some(v)),
            None => (text, None),
        };
        let norm = key.replace('-', "_");
        let mut name = norm.as_str();
        match extra(name) {
            Some(Extra::Rename(to)) => name = to,
            Some(Extra::Ignore(check)) => return check(value),
            None if norm == "lookupd_authorization" => {
                return Err(ConfigError::UnknownOption(norm.clone()))
            }
            None => {}
        }
        let Some(kind) = Config::option_kind(name) else {
            return Err(ConfigError::UnknownOption(norm.clone()));
        };
        let Some(v) = value else {
            // config_flag.go: a bare key means `true`.
            return self.0.set(name, OptionValue::Bool(true));
        };
        // config.go, `coerce`: a string is parsed by Go's parser for the field's type, and
        // its error is the reason `Set` gives.
        let coerce = |reason: String| ConfigError::Coerce {
            option: norm.clone(),
            value: v.to_string(),
            reason,
        };
        let typed = match kind {
            OptionKind::Duration => {
                // `coerceDuration`: `time.ParseDuration`, negative values included (the
                // option's bounds are checked by `Config::set`); a bare number has no unit.
                OptionValue::Nanos(
                    nsq_go::duration::parse_nanos(v).map_err(|e| coerce(e.to_string()))?,
                )
            }
            // `coerceUint64` (`max_attempts` is a uint16): `strconv.ParseUint(v, 10, 64)`.
            OptionKind::Int if name == "max_attempts" => {
                OptionValue::Int(parse_base10("ParseUint", v, false).map_err(coerce)?)
            }
            // `coerceInt64`: `strconv.ParseInt(v, 10, 64)`.
            OptionKind::Int => OptionValue::Int(parse_base10("ParseInt", v, true).map_err(coerce)?),
            OptionKind::Float => OptionValue::Float(
                nsq_go::strconv::parse_float(v)
                    .ok_or_else(|| coerce(NumError::syntax("ParseFloat", v).to_string()))?,
            ),
            OptionKind::Bool => OptionValue::Bool(
                nsq_go::strconv::parse_bool(v)
                    .ok_or_else(|| coerce(NumError::syntax("ParseBool", v).to_string()))?,
            ),
            OptionKind::Str => OptionValue::Str(v.to_string()),
        };
        self.0.set(name, typed)
    }
}

/// Go's `strconv.ParseInt(v, 10, 64)` (`signed`) or `ParseUint(v, 10, 64)` for the values
/// go-nsq's config takes: digits with a sign only for `ParseInt`, a too large value is
/// `value out of range`; the error is Go's text. A `ParseUint` result above `i64::MAX` is
/// kept modulo 2^64, as the uint16 field it is stored in only keeps the low bits anyway.
fn parse_base10(func: &'static str, v: &str, signed: bool) -> Result<i64, String> {
    let digits = if signed {
        v.strip_prefix(['+', '-']).unwrap_or(v)
    } else {
        v
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return Err(NumError::syntax(func, v).to_string());
    }
    let range = || NumError::range(func, v).to_string();
    if signed {
        v.parse::<i64>().map_err(|_| range())
    } else {
        v.parse::<u64>().map(|n| n as i64).map_err(|_| range())
    }
}

impl Value for ConfigFlag {
    fn set(&mut self, text: &str) -> Result<(), nsq_go::flag::ValueError> {
        Ok(self.apply(text)?)
    }

    fn usage_default(&self) -> Option<String> {
        None
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::Value::String(go_quote(b"<go-nsq config>"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn key_value_and_bare_key() {
        let mut c = ConfigFlag::default();
        c.apply("dial_timeout,5s").unwrap();
        c.apply("max_attempts,7").unwrap();
        c.apply("snappy").unwrap();
        c.apply("client_id,a,b").unwrap();
        assert_eq!(c.0.dial_timeout, Duration::from_secs(5));
        assert_eq!(c.0.max_attempts, 7);
        assert!(c.0.snappy);
        assert_eq!(c.0.client_id, "a,b");
    }

    #[test]
    fn unknown_and_invalid_are_refused() {
        let mut c = ConfigFlag::default();
        assert_eq!(
            c.set("bogus,1").unwrap_err().to_string(),
            "invalid option bogus"
        );
        assert!(c.set("max_attempts,x").is_err());
        assert!(c.set("dial_timeout,5").is_err());
        assert!(c.set("backoff_strategy,nope").is_err());
        assert_eq!(
            c.set("backoff_strategy").unwrap_err().to_string(),
            "failed to coerce option backoff_strategy (true) - invalid value type"
        );
        assert!(c.set("backoff_strategy,").is_ok());
        assert_eq!(
            c.set("tls_min_version,tls9").unwrap_err().to_string(),
            "ERROR: tls9 is not a tls version"
        );
        assert!(c.set("backoff_strategy,full_jitter").is_ok());
        assert!(c.set("skip_lookupd_authorization,false").is_ok());
        assert!(!c.0.lookupd_authorization);
    }

    /// config.go, `Set`: a value that does not parse is `failed to coerce option <opt>
    /// (<value>) - <Go's parser error>` (before: `- invalid value type` for all of them).
    #[test]
    fn unparsable_values_give_gos_parser_errors() {
        let mut c = ConfigFlag::default();
        let err = |c: &mut ConfigFlag, v: &str| c.set(v).unwrap_err().to_string();
        for (flag, want) in [
            (
                "read_timeout,-1",
                r#"failed to coerce option read_timeout (-1) - time: missing unit in duration "-1""#,
            ),
            (
                "dial_timeout,5",
                r#"failed to coerce option dial_timeout (5) - time: missing unit in duration "5""#,
            ),
            (
                "heartbeat_interval,1x",
                r#"failed to coerce option heartbeat_interval (1x) - time: unknown unit "x" in duration "1x""#,
            ),
            (
                "msg_timeout,abc",
                r#"failed to coerce option msg_timeout (abc) - time: invalid duration "abc""#,
            ),
            (
                "lookupd_poll_interval,",
                r#"failed to coerce option lookupd_poll_interval () - time: invalid duration """#,
            ),
            (
                "max_in_flight,x",
                r#"failed to coerce option max_in_flight (x) - strconv.ParseInt: parsing "x": invalid syntax"#,
            ),
            (
                "output_buffer_size,99999999999999999999",
                r#"failed to coerce option output_buffer_size (99999999999999999999) - strconv.ParseInt: parsing "99999999999999999999": value out of range"#,
            ),
            (
                "max_attempts,-1",
                r#"failed to coerce option max_attempts (-1) - strconv.ParseUint: parsing "-1": invalid syntax"#,
            ),
            (
                "lookupd_poll_jitter,x",
                r#"failed to coerce option lookupd_poll_jitter (x) - strconv.ParseFloat: parsing "x": invalid syntax"#,
            ),
            (
                "snappy,yes",
                r#"failed to coerce option snappy (yes) - strconv.ParseBool: parsing "yes": invalid syntax"#,
            ),
            // A bare key is the bool `true`, which a duration does not take.
            (
                "read_timeout",
                "failed to coerce option read_timeout (true) - invalid value type",
            ),
        ] {
            assert_eq!(err(&mut c, flag), want, "{flag}");
        }
        // The parsed value is stored in the field's type before the bounds are checked.
        c.apply("max_attempts,65537").unwrap();
        assert_eq!(c.0.max_attempts, 1);
    }

    #[test]
    fn negative_durations_parse_and_meet_the_bounds() {
        let mut c = ConfigFlag::default();
        // No `min` tag: accepted (a deadline already passed).
        c.apply("dial_timeout,-1s").unwrap();
        assert_eq!(c.0.dial_timeout, Duration::from_nanos(1));
        assert_eq!(
            c.set("read_timeout,-1s").unwrap_err().to_string(),
            "invalid read_timeout ! -1s < 100ms"
        );
        assert_eq!(
            c.set("default_requeue_delay,-1.5s")
                .unwrap_err()
                .to_string(),
            "invalid default_requeue_delay ! -1.5s < 0s"
        );
        assert_eq!(
            c.set("max_requeue_delay,90m").unwrap_err().to_string(),
            "invalid max_requeue_delay ! 1h30m0s > 1h0m0s"
        );
    }
}
