//! The client configuration: go-nsq's `Config` (config.go) as a plain Rust struct with the same
//! defaults, plus [`Config::set`], which takes go-nsq's option names (`max_in_flight`,
//! `tls_root_ca_file`, …) and applies go-nsq's bounds, so a tool's `--consumer-opt key,value`
//! maps straight onto it.
//!
//! Values reach [`Config::set`] already typed ([`OptionValue`]): go-nsq's `Set` coerces
//! strings with Go's `strconv`/`time.ParseDuration`, and the tool that reads them from flags
//! owns those Go parsers; [`Config::option_kind`] says which type an option wants.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use nsq_go::duration::SignedDuration;

/// TLS settings (go-nsq's `tls_v1` + `tls_config`, set through `tls_root_ca_file`,
/// `tls_insecure_skip_verify`, `tls_cert`, `tls_key`).
#[derive(Clone, Default)]
pub struct TlsOptions {
    /// PEM file with the CA certificate(s) that sign the server's certificate. Without it
    /// (and without `client_config`) the system's CA bundle is used, as Go does on Linux.
    pub root_ca_file: Option<PathBuf>,
    /// PEM client certificate chain, sent when the server asks for one (with `key_file`).
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate (tests only).
    pub insecure_skip_verify: bool,
    /// A complete rustls configuration; when set, the fields above are ignored.
    pub client_config: Option<Arc<rustls::ClientConfig>>,
}

impl std::fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsOptions")
            .field("root_ca_file", &self.root_ca_file)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("client_config", &self.client_config.is_some())
            .finish()
    }
}

/// Connection and consumer settings; `Config::default()` has go-nsq v1.1's defaults.
///
/// Fields may be assigned directly (no bounds are enforced then, which tests use for short
/// intervals); [`Config::set`] applies go-nsq's bounds.
#[derive(Debug, Clone)]
pub struct Config {
    /// `dial_timeout` (1s).
    pub dial_timeout: Duration,
    /// `read_timeout` (60s): a connection that receives nothing (not even a heartbeat) for
    /// this long is closed.
    pub read_timeout: Duration,
    /// `write_timeout` (1s): the deadline of one write to nsqd.
    pub write_timeout: Duration,
    /// `local_addr`: the local address to dial from.
    pub local_addr: Option<SocketAddr>,
    /// `lookupd_poll_interval` (60s); also the delay before reconnecting to an nsqd given by
    /// address when there is no lookupd (go-nsq consumer.go, onConnClose).
    pub lookupd_poll_interval: Duration,
    /// `lookupd_poll_jitter` (0.3): fraction of the interval waited at random before polling.
    pub lookupd_poll_jitter: f64,
    /// `lookupd_poll_timeout` (1m): HTTP timeout of one lookupd query.
    pub lookupd_poll_timeout: Duration,
    /// `lookupd_authorization` (true): send `auth_secret` to lookupd as a Bearer token.
    pub lookupd_authorization: bool,
    /// `max_requeue_delay` (15m): bound of the automatic requeue delay.
    pub max_requeue_delay: Duration,
    /// `default_requeue_delay` (90s): the automatic requeue delay is this × attempts.
    pub default_requeue_delay: Duration,
    /// `backoff_multiplier` (1s): backoff level n waits `multiplier × 2^n`.
    pub backoff_multiplier: Duration,
    /// `max_backoff_duration` (2m); zero disables backoff.
    pub max_backoff_duration: Duration,
    /// `max_attempts` (5): a message delivered more often is given up (FIN + hook); 0 = never.
    pub max_attempts: u16,
    /// `low_rdy_idle_timeout` (10s): in RDY redistribution, a connection without a message
    /// for this long gives its RDY back.
    pub low_rdy_idle_timeout: Duration,
    /// `low_rdy_timeout` (30s): in RDY redistribution, a connection holding RDY this long
    /// gives it back.
    pub low_rdy_timeout: Duration,
    /// `rdy_redistribute_interval` (5s).
    pub rdy_redistribute_interval: Duration,
    /// `client_id` (short hostname).
    pub client_id: String,
    /// `hostname`.
    pub hostname: String,
    /// `user_agent` (`nsq-client/<version>`).
    pub user_agent: String,
    /// `heartbeat_interval` (30s), a Go `time.Duration` (signed nanoseconds): IDENTIFY
    /// carries it in whole milliseconds, truncated toward zero, except [`Config::DISABLED`]
    /// (-1 ns), sent as -1, which nsqd takes as "no heartbeats" (go-nsq conn.go, `identify`).
    /// So `-1ms` is sent as -1 too, while `-1s` is sent as -1000, which nsqd refuses.
    pub heartbeat_interval: SignedDuration,
    /// `sample_rate` (0, max 99): percentage of the channel's messages delivered.
    pub sample_rate: i32,
    /// `tls_v1`: ask for TLS.
    pub tls_v1: bool,
    /// TLS details.
    pub tls: TlsOptions,
    /// `deflate`: ask for deflate compression.
    pub deflate: bool,
    /// `deflate_level` (6, 1..=9).
    pub deflate_level: u32,
    /// `snappy`: ask for snappy compression.
    pub snappy: bool,
    /// `output_buffer_size` (16384); -1 disables nsqd's output buffering.
    pub output_buffer_size: i64,
    /// `output_buffer_timeout` (250ms), sent in IDENTIFY as `heartbeat_interval` is;
    /// [`Config::DISABLED`] (-1, flush at once).
    pub output_buffer_timeout: SignedDuration,
    /// `max_in_flight` (1): the consumer's total RDY over all connections.
    pub max_in_flight: usize,
    /// `msg_timeout` (0 = nsqd's default).
    pub msg_timeout: Duration,
    /// `auth_secret`: sent with AUTH when nsqd requires it.
    pub auth_secret: Option<String>,
    /// How long a consumer's graceful stop waits for in-flight messages before closing
    /// anyway (30s, hard-coded in go-nsq's `Consumer.Stop`; not a go-nsq option).
    pub stop_timeout: Duration,
    /// go-nsq's own log lines (its `SetLogger(l, lvl)`): `None`, the default, prints none.
    pub logger: Option<crate::golog::GoLogger>,
}

impl Default for Config {
    fn default() -> Self {
        let hostname = hostname();
        Config {
            dial_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(1),
            local_addr: None,
            lookupd_poll_interval: Duration::from_secs(60),
            lookupd_poll_jitter: 0.3,
            lookupd_poll_timeout: Duration::from_secs(60),
            lookupd_authorization: true,
            max_requeue_delay: Duration::from_secs(15 * 60),
            default_requeue_delay: Duration::from_secs(90),
            backoff_multiplier: Duration::from_secs(1),
            max_backoff_duration: Duration::from_secs(120),
            max_attempts: 5,
            low_rdy_idle_timeout: Duration::from_secs(10),
            low_rdy_timeout: Duration::from_secs(30),
            rdy_redistribute_interval: Duration::from_secs(5),
            client_id: hostname.split('.').next().unwrap_or("").to_string(),
            hostname,
            user_agent: format!("nsq-client/{}", env!("CARGO_PKG_VERSION")),
            heartbeat_interval: SignedDuration::from_std(Duration::from_secs(30)),
            sample_rate: 0,
            tls_v1: false,
            tls: TlsOptions::default(),
            deflate: false,
            deflate_level: 6,
            snappy: false,
            output_buffer_size: 16384,
            output_buffer_timeout: SignedDuration::from_std(Duration::from_millis(250)),
            max_in_flight: 1,
            msg_timeout: Duration::ZERO,
            auth_secret: None,
            stop_timeout: Duration::from_secs(30),
            logger: None,
        }
    }
}

/// The machine's host name (`/proc/sys/kernel/hostname`, then `$HOSTNAME`).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_string())
}

/// The type an option takes (go-nsq coerces to the field's Go type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A `time.Duration` (parse with Go's `time.ParseDuration`).
    Duration,
    /// An integer (Go `strconv.ParseInt`, base 10).
    Int,
    /// A float (`strconv.ParseFloat`).
    Float,
    /// A bool (`strconv.ParseBool`).
    Bool,
    /// A string (a path for the TLS file options).
    Str,
}

/// A typed option value for [`Config::set`].
#[derive(Debug, Clone, PartialEq)]
pub enum OptionValue {
    Duration(Duration),
    /// A Go `time.Duration` in signed nanoseconds: go-nsq's `coerceDuration` takes `-1s` too,
    /// and then the option's `min` tag (if any) refuses it.
    Nanos(i64),
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
}

impl std::fmt::Display for OptionValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OptionValue::Duration(d) => f.write_str(&nsq_go::duration::format(*d)),
            OptionValue::Nanos(n) => f.write_str(&nsq_go::duration::format_nanos(i128::from(*n))),
            OptionValue::Int(n) => write!(f, "{n}"),
            OptionValue::Float(x) => write!(f, "{x}"),
            OptionValue::Bool(b) => write!(f, "{b}"),
            OptionValue::Str(s) => f.write_str(s),
        }
    }
}

/// Why [`Config::set`] refused an option; the texts follow go-nsq's config.go.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid option {0}")]
    UnknownOption(String),
    #[error("failed to coerce option {option} ({value}) - invalid value type")]
    WrongType { option: String, value: String },
    /// A text that does not parse as the option's type; `reason` is Go's parser error
    /// (`time: missing unit in duration "-1"`, `strconv.ParseInt: parsing "x": invalid
    /// syntax`), as config.go's `Set` wraps `coerce`'s error.
    #[error("failed to coerce option {option} ({value}) - {reason}")]
    Coerce {
        option: String,
        value: String,
        reason: String,
    },
    /// An option's own error, as go-nsq returns it (`ERROR: tls9 is not a tls version`).
    #[error("{0}")]
    Invalid(String),
    #[error("invalid {option} ! {value} < {bound}")]
    BelowMin {
        option: String,
        value: String,
        bound: String,
    },
    #[error("invalid {option} ! {value} > {bound}")]
    AboveMax {
        option: String,
        value: String,
        bound: String,
    },
    /// config.go, `Validate`, with Go's `%v` of both durations (`1m30s`, `1m0s`).
    #[error(
        "HeartbeatInterval {heartbeat} must be less than ReadTimeout {}",
        nsq_go::duration::format(*.read)
    )]
    HeartbeatAboveReadTimeout {
        heartbeat: SignedDuration,
        read: Duration,
    },
}

/// Every option [`Config::set`] knows, with its kind (go-nsq v1.1's `opt:` tags and the TLS
/// pseudo-options).
const OPTIONS: &[(&str, OptionKind)] = &[
    ("dial_timeout", OptionKind::Duration),
    ("read_timeout", OptionKind::Duration),
    ("write_timeout", OptionKind::Duration),
    ("local_addr", OptionKind::Str),
    ("lookupd_poll_interval", OptionKind::Duration),
    ("lookupd_poll_jitter", OptionKind::Float),
    ("lookupd_poll_timeout", OptionKind::Duration),
    ("lookupd_authorization", OptionKind::Bool),
    ("max_requeue_delay", OptionKind::Duration),
    ("default_requeue_delay", OptionKind::Duration),
    ("backoff_multiplier", OptionKind::Duration),
    ("max_backoff_duration", OptionKind::Duration),
    ("max_attempts", OptionKind::Int),
    ("low_rdy_idle_timeout", OptionKind::Duration),
    ("low_rdy_timeout", OptionKind::Duration),
    ("rdy_redistribute_interval", OptionKind::Duration),
    ("client_id", OptionKind::Str),
    ("hostname", OptionKind::Str),
    ("user_agent", OptionKind::Str),
    ("heartbeat_interval", OptionKind::Duration),
    ("sample_rate", OptionKind::Int),
    ("tls_v1", OptionKind::Bool),
    ("tls_root_ca_file", OptionKind::Str),
    ("tls_insecure_skip_verify", OptionKind::Bool),
    ("tls_cert", OptionKind::Str),
    ("tls_key", OptionKind::Str),
    ("deflate", OptionKind::Bool),
    ("deflate_level", OptionKind::Int),
    ("snappy", OptionKind::Bool),
    ("output_buffer_size", OptionKind::Int),
    ("output_buffer_timeout", OptionKind::Duration),
    ("max_in_flight", OptionKind::Int),
    ("msg_timeout", OptionKind::Duration),
    ("auth_secret", OptionKind::Str),
];

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

impl Config {
    /// The kind of value option `name` takes (`-` and `_` are the same, as in go-nsq), or
    /// `None` for an unknown option.
    pub fn option_kind(name: &str) -> Option<OptionKind> {
        let name = name.replace('-', "_");
        OPTIONS.iter().find(|(n, _)| *n == name).map(|(_, k)| *k)
    }

    /// All option names [`Config::set`] accepts.
    pub fn option_names() -> impl Iterator<Item = &'static str> {
        OPTIONS.iter().map(|(n, _)| *n)
    }

    /// Sets one option by its go-nsq name, with go-nsq's bounds (config.go's `min`/`max`
    /// tags). Integers are accepted where a duration is expected and mean milliseconds, as in
    /// go-nsq's `coerceDuration`.
    pub fn set(&mut self, option: &str, value: OptionValue) -> Result<(), ConfigError> {
        let option = option.replace('-', "_");
        let Some(kind) = Config::option_kind(&option) else {
            return Err(ConfigError::UnknownOption(option));
        };
        let wrong = |option: &str, value: &OptionValue| ConfigError::WrongType {
            option: option.to_string(),
            value: value.to_string(),
        };
        // Signed nanoseconds, as go-nsq holds a `time.Duration`.
        let nanos = |v: &OptionValue| match v {
            OptionValue::Duration(d) => Some(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            OptionValue::Nanos(n) => Some(*n),
            OptionValue::Int(n) => Some(n.saturating_mul(1_000_000)),
            _ => None,
        };
        let go = |n: i64| nsq_go::duration::format_nanos(i128::from(n));
        let go_d = |d: Duration| nsq_go::duration::format(d);
        // config.go, `Set`: `invalid <opt> ! <v> < <min>` with Go's `%v` of both durations.
        let check_d = |n: i64, min: Option<Duration>, max: Option<Duration>| {
            let d = Duration::from_nanos(u64::try_from(n).unwrap_or(0));
            if let Some(min) = min.filter(|m| n < 0 || d < *m) {
                return Err(ConfigError::BelowMin {
                    option: option.clone(),
                    value: go(n),
                    bound: go_d(min),
                });
            }
            if let Some(max) = max.filter(|m| d > *m) {
                return Err(ConfigError::AboveMax {
                    option: option.clone(),
                    value: go(n),
                    bound: go_d(max),
                });
            }
            Ok(d)
        };
        let check_i = |n: i64, min: Option<i64>, max: Option<i64>| {
            if let Some(min) = min.filter(|m| n < *m) {
                return Err(ConfigError::BelowMin {
                    option: option.clone(),
                    value: n.to_string(),
                    bound: min.to_string(),
                });
            }
            if let Some(max) = max.filter(|m| n > *m) {
                return Err(ConfigError::AboveMax {
                    option: option.clone(),
                    value: n.to_string(),
                    bound: max.to_string(),
                });
            }
            Ok(n)
        };
        match kind {
            OptionKind::Duration => {
                let n = nanos(&value).ok_or_else(|| wrong(&option, &value))?;
                let d = Duration::from_nanos(u64::try_from(n).unwrap_or(0));
                // A negative timeout without a `min` is a deadline already passed in Go's
                // dialer (every dial fails with `i/o timeout`): 1 ns here, which the dialer
                // treats the same way (conn.rs, `dial`).
                let deadline = if n < 0 { Duration::from_nanos(1) } else { d };
                let m = |min, max| check_d(n, min, max);
                match option.as_str() {
                    "dial_timeout" => self.dial_timeout = deadline,
                    "read_timeout" => self.read_timeout = m(Some(ms(100)), Some(secs(300)))?,
                    "write_timeout" => self.write_timeout = m(Some(ms(100)), Some(secs(300)))?,
                    "lookupd_poll_interval" => {
                        self.lookupd_poll_interval = m(Some(ms(10)), Some(secs(300)))?
                    }
                    "lookupd_poll_timeout" => self.lookupd_poll_timeout = deadline,
                    "max_requeue_delay" => {
                        self.max_requeue_delay = m(Some(Duration::ZERO), Some(secs(3600)))?
                    }
                    "default_requeue_delay" => {
                        self.default_requeue_delay = m(Some(Duration::ZERO), Some(secs(3600)))?
                    }
                    "backoff_multiplier" => {
                        self.backoff_multiplier = m(Some(Duration::ZERO), Some(secs(3600)))?
                    }
                    "max_backoff_duration" => {
                        self.max_backoff_duration = m(Some(Duration::ZERO), Some(secs(3600)))?
                    }
                    "low_rdy_idle_timeout" => {
                        self.low_rdy_idle_timeout = m(Some(secs(1)), Some(secs(300)))?
                    }
                    "low_rdy_timeout" => self.low_rdy_timeout = m(Some(secs(1)), Some(secs(300)))?,
                    "rdy_redistribute_interval" => {
                        self.rdy_redistribute_interval = m(Some(ms(1)), Some(secs(5)))?
                    }
                    // No bounds: the value goes to nsqd as it is (see `identify_json`).
                    "heartbeat_interval" => self.heartbeat_interval = SignedDuration(n),
                    "output_buffer_timeout" => self.output_buffer_timeout = SignedDuration(n),
                    "msg_timeout" => self.msg_timeout = m(Some(Duration::ZERO), None)?,
                    _ => unreachable!("every duration option is listed"),
                }
            }
            OptionKind::Int => {
                let OptionValue::Int(n) = value else {
                    return Err(wrong(&option, &value));
                };
                // config.go, `valueTypeCoerce`: the parsed 64-bit value is stored into the
                // field's own type (truncating, as reflect's SetUint/SetInt do) before the
                // bounds are checked: `max_attempts,65536` is 0, `sample_rate,4294967297` 1.
                match option.as_str() {
                    "max_attempts" => self.max_attempts = n as u16,
                    "sample_rate" => {
                        self.sample_rate = check_i(i64::from(n as i32), Some(0), Some(99))? as i32
                    }
                    "deflate_level" => self.deflate_level = check_i(n, Some(1), Some(9))? as u32,
                    "output_buffer_size" => self.output_buffer_size = n,
                    "max_in_flight" => self.max_in_flight = check_i(n, Some(0), None)? as usize,
                    _ => unreachable!("every int option is listed"),
                }
            }
            OptionKind::Float => {
                let x = match value {
                    OptionValue::Float(x) => x,
                    OptionValue::Int(n) => n as f64,
                    _ => return Err(wrong(&option, &value)),
                };
                if x < 0.0 {
                    return Err(ConfigError::BelowMin {
                        option,
                        value: x.to_string(),
                        bound: "0".into(),
                    });
                }
                if x > 1.0 {
                    return Err(ConfigError::AboveMax {
                        option,
                        value: x.to_string(),
                        bound: "1".into(),
                    });
                }
                self.lookupd_poll_jitter = x;
            }
            OptionKind::Bool => {
                let b = match value {
                    OptionValue::Bool(b) => b,
                    OptionValue::Int(n) => n != 0,
                    _ => return Err(wrong(&option, &value)),
                };
                match option.as_str() {
                    "tls_v1" => self.tls_v1 = b,
                    "lookupd_authorization" => self.lookupd_authorization = b,
                    "tls_insecure_skip_verify" => self.tls.insecure_skip_verify = b,
                    "deflate" => self.deflate = b,
                    "snappy" => self.snappy = b,
                    _ => unreachable!("every bool option is listed"),
                }
            }
            OptionKind::Str => {
                let OptionValue::Str(s) = value else {
                    return Err(wrong(&option, &value));
                };
                match option.as_str() {
                    "local_addr" => {
                        self.local_addr = Some(s.parse().map_err(|_| ConfigError::WrongType {
                            option: option.clone(),
                            value: s.clone(),
                        })?)
                    }
                    "client_id" => self.client_id = s,
                    "hostname" => self.hostname = s,
                    "user_agent" => self.user_agent = s,
                    "tls_root_ca_file" => self.tls.root_ca_file = Some(s.into()),
                    "tls_cert" => self.tls.cert_file = Some(s.into()),
                    "tls_key" => self.tls.key_file = Some(s.into()),
                    "auth_secret" => self.auth_secret = Some(s),
                    _ => unreachable!("every string option is listed"),
                }
            }
        }
        Ok(())
    }

    /// A signed in-flight count (a tool's `--max-in-flight` is a Go `int`) checked as
    /// go-nsq's `Config.Validate` checks the `MaxInFlight` field's `min:"0"` tag before
    /// `NewConsumer` accepts the config (config.go, `structTagsConfig.Validate`): the error
    /// names the Go field, `invalid MaxInFlight ! -1 < 0`.
    pub fn max_in_flight_from(n: i64) -> Result<usize, ConfigError> {
        usize::try_from(n).map_err(|_| ConfigError::BelowMin {
            option: "MaxInFlight".into(),
            value: n.to_string(),
            bound: "0".into(),
        })
    }

    /// `heartbeat_interval` / `output_buffer_timeout` value that IDENTIFY sends as -1: Go's
    /// `-1`, one negative nanosecond.
    pub const DISABLED: SignedDuration = SignedDuration(-1);

    /// The checks go-nsq's `Config.Validate` makes across fields.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.heartbeat_interval > SignedDuration::from_std(self.read_timeout) {
            return Err(ConfigError::HeartbeatAboveReadTimeout {
                heartbeat: self.heartbeat_interval,
                read: self.read_timeout,
            });
        }
        Ok(())
    }

    /// The IDENTIFY body (go-nsq conn.go, identify: every field, `feature_negotiation` on).
    pub(crate) fn identify_json(&self) -> Vec<u8> {
        // conn.go, `identify`: `-1` as -1, any other value `d / time.Millisecond` (Go's
        // integer division truncates toward zero, as Rust's does): -1ms is -1, -1s is
        // -1000, 500us is 0 (nsqd's default).
        let ms = |d: SignedDuration| {
            if d == Config::DISABLED {
                -1
            } else {
                d.0 / 1_000_000
            }
        };
        serde_json::to_vec(&serde_json::json!({
            "client_id": self.client_id,
            "hostname": self.hostname,
            "user_agent": self.user_agent,
            "short_id": self.client_id,
            "long_id": self.hostname,
            "tls_v1": self.tls_v1,
            "deflate": self.deflate,
            "deflate_level": self.deflate_level,
            "snappy": self.snappy,
            "feature_negotiation": true,
            "heartbeat_interval": ms(self.heartbeat_interval),
            "sample_rate": self.sample_rate,
            "output_buffer_size": self.output_buffer_size,
            "output_buffer_timeout": ms(self.output_buffer_timeout),
            "msg_timeout": self.msg_timeout.as_millis() as i64,
        }))
        .expect("a JSON object always serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_by_go_names_with_bounds() {
        let mut c = Config::default();
        c.set("max-in-flight", OptionValue::Int(250)).unwrap();
        assert_eq!(c.max_in_flight, 250);
        c.set("lookupd_poll_interval", OptionValue::Int(15_000))
            .unwrap();
        assert_eq!(c.lookupd_poll_interval, secs(15));
        assert_eq!(
            c.set("deflate_level", OptionValue::Int(10))
                .unwrap_err()
                .to_string(),
            "invalid deflate_level ! 10 > 9"
        );
        assert_eq!(
            c.set("nope", OptionValue::Int(1)).unwrap_err().to_string(),
            "invalid option nope"
        );
        assert!(matches!(
            c.set("snappy", OptionValue::Str("x".into())),
            Err(ConfigError::WrongType { .. })
        ));
        c.set("tls_root_ca_file", OptionValue::Str("/ca.pem".into()))
            .unwrap();
        assert_eq!(c.tls.root_ca_file.as_deref(), Some("/ca.pem".as_ref()));
        assert_eq!(
            Config::option_kind("msg_timeout"),
            Some(OptionKind::Duration)
        );
    }

    /// go-nsq conn.go, `identify`: the interval in whole milliseconds as set, only Go's `-1`
    /// (one negative nanosecond) as -1. Before, every negative value was sent as -1, so
    /// `-1s` reached SUB (`E_INVALID cannot SUB with heartbeats disabled`) where nsqd
    /// refuses go-nsq's -1000 at IDENTIFY.
    #[test]
    fn identify_intervals_are_gos_milliseconds() {
        let sent = |opt: &str, nanos: i64| {
            let mut c = Config::default();
            c.set(opt, OptionValue::Nanos(nanos)).unwrap();
            let v: serde_json::Value = serde_json::from_slice(&c.identify_json()).unwrap();
            v[opt].as_i64().unwrap()
        };
        for opt in ["heartbeat_interval", "output_buffer_timeout"] {
            assert_eq!(sent(opt, -1), -1, "{opt}");
            assert_eq!(sent(opt, -1_000_000), -1, "{opt}");
            assert_eq!(sent(opt, -1_000_000_000), -1000, "{opt}");
            assert_eq!(sent(opt, -1_500_000), -1, "{opt}");
            assert_eq!(sent(opt, 500_000), 0, "{opt}");
            assert_eq!(sent(opt, 2_000_000_000), 2000, "{opt}");
        }
        let c = Config {
            heartbeat_interval: SignedDuration(90_000_000_000),
            ..Config::default()
        };
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "HeartbeatInterval 1m30s must be less than ReadTimeout 1m0s"
        );
    }

    #[test]
    fn identify_body_has_every_field() {
        let c = Config {
            heartbeat_interval: Config::DISABLED,
            ..Config::default()
        };
        let v: serde_json::Value = serde_json::from_slice(&c.identify_json()).unwrap();
        for k in [
            "client_id",
            "hostname",
            "user_agent",
            "feature_negotiation",
            "tls_v1",
            "snappy",
            "deflate",
            "deflate_level",
            "heartbeat_interval",
            "output_buffer_size",
            "output_buffer_timeout",
            "msg_timeout",
            "sample_rate",
        ] {
            assert!(v.get(k).is_some(), "{k}");
        }
        assert_eq!(v["heartbeat_interval"], -1);
        assert_eq!(v["output_buffer_timeout"], 250);
    }
}
