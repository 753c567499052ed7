//! `--consumer-opt` / `--producer-opt key,value` (go-nsq's config_flag.go, `ConfigFlag.Set`,
//! over config.go's `Config.Set`): the value is split at the first `,`; a bare `key` sets the
//! option to boolean true; the text is coerced to the option's type and checked against
//! go-nsq's bounds by [`nsq_client::Config::set`]. An unknown key is refused with
//! `invalid option <key>`, which the flag parser shows as
//! `invalid value "bogus,1" for flag -consumer-opt: invalid option bogus`.

use nsq_client::{Config, ConfigError, OptionKind, OptionValue};
use nsq_go::flag::Value;
use nsq_go::quote::go_quote;

/// A go-nsq config that `key,value` flags write into.
#[derive(Debug, Clone, Default)]
pub struct ConfigFlag(pub Config);

/// The options go-nsq v1.1 takes that [`Config`] has no field for, or names differently.
enum Extra {
    /// Handled by [`Config::set`] under this name.
    Rename(&'static str),
    /// Validated and accepted; the client's behaviour does not depend on it.
    Ignore(fn(&str) -> bool),
}

fn extra(key: &str) -> Option<Extra> {
    match key {
        // go-nsq v1.1 config.go: `LookupdAuthorization bool opt:"skip_lookupd_authorization"
        // default:"true"` — despite its name the option is the "send it" switch.
        "skip_lookupd_authorization" => Some(Extra::Rename("lookupd_authorization")),
        // config.go, `BackoffStrategy`: "exponential" or "full_jitter"; nsq-client always
        // uses the exponential strategy.
        "backoff_strategy" => Some(Extra::Ignore(|v| {
            matches!(v, "exponential" | "full_jitter" | "true")
        })),
        // config.go, tlsConfig `tls_min_version`: rustls negotiates TLS 1.2 or newer anyway.
        "tls_min_version" => Some(Extra::Ignore(|v| {
            matches!(v, "ssl3.0" | "tls1.0" | "tls1.1" | "tls1.2" | "tls1.3")
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
            Some(Extra::Ignore(valid)) => {
                let v = value.unwrap_or("true");
                return if valid(v) {
                    Ok(())
                } else {
                    Err(ConfigError::WrongType {
                        option: norm.clone(),
                        value: v.to_string(),
                    })
                };
            }
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
        let wrong = || ConfigError::WrongType {
            option: norm.clone(),
            value: v.to_string(),
        };
        let typed = match kind {
            OptionKind::Duration => {
                // go-nsq's coerceDuration: a Go duration string, negative ones included (the
                // option's bounds are checked by `Config::set`).
                OptionValue::Nanos(nsq_go::duration::parse_nanos(v).map_err(|_| wrong())?)
            }
            OptionKind::Int => OptionValue::Int(v.parse::<i64>().map_err(|_| wrong())?),
            OptionKind::Float => {
                OptionValue::Float(nsq_go::strconv::parse_float(v).ok_or_else(wrong)?)
            }
            OptionKind::Bool => {
                OptionValue::Bool(nsq_go::strconv::parse_bool(v).ok_or_else(wrong)?)
            }
            OptionKind::Str => OptionValue::Str(v.to_string()),
        };
        self.0.set(name, typed)
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
        assert!(c.set("backoff_strategy,full_jitter").is_ok());
        assert!(c.set("skip_lookupd_authorization,false").is_ok());
        assert!(!c.0.lookupd_authorization);
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
