//! nsqd's own flag types: `--tls-required`, `--tls-min-version` and `--sigterm` (the
//! reference's counterparts are in apps/nsqd/options.go: `tlsRequiredOption`,
//! `tlsMinVersionOption`; `--sigterm` is this implementation's).

use nsq_go::flag;

use nsq_go::strconv::parse_bool;
use serde_json::Value;

use super::OptionsError;

/// `--tls-required`: a bool flag that also accepts `tcp-https`. The numbers are what
/// `/config/tls_required` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TlsRequired {
    /// Plain TCP and HTTP allowed.
    #[default]
    False = 0,
    /// TCP clients must upgrade to TLS; plain HTTP is still served.
    TcpHttps = 1,
    /// TCP clients must upgrade; plain HTTP answers 403.
    True = 2,
}

impl TlsRequired {
    /// The reference's parsing: lower-case, `tcp-https`, else Go's `strconv.ParseBool`.
    pub fn parse(s: &str) -> Result<TlsRequired, OptionsError> {
        let s = s.to_ascii_lowercase();
        if s == "tcp-https" {
            return Ok(TlsRequired::TcpHttps);
        }
        match parse_bool(&s) {
            Some(true) => Ok(TlsRequired::True),
            Some(false) => Ok(TlsRequired::False),
            None => Err(OptionsError::TlsRequired(s)),
        }
    }

    pub fn code(self) -> i64 {
        self as i64
    }
}

/// `--tls-min-version`. The numbers are Go's `tls.VersionTLS1x` codes, shown by
/// `/config/tls_min_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum TlsVersion {
    #[default]
    Tls10 = 0x0301,
    Tls11 = 0x0302,
    Tls12 = 0x0303,
    Tls13 = 0x0304,
}

impl TlsVersion {
    /// `tls1.0` … `tls1.3`, case-insensitive. `Ok(None)` for `""` (keep the current value).
    pub fn parse(s: &str) -> Result<Option<TlsVersion>, OptionsError> {
        let lower = s.to_ascii_lowercase();
        match lower.as_str() {
            "" => Ok(None),
            "tls1.0" => Ok(Some(TlsVersion::Tls10)),
            "tls1.1" => Ok(Some(TlsVersion::Tls11)),
            "tls1.2" => Ok(Some(TlsVersion::Tls12)),
            "tls1.3" => Ok(Some(TlsVersion::Tls13)),
            _ => Err(OptionsError::TlsVersion(lower)),
        }
    }

    /// 769 (TLS 1.0) … 772 (TLS 1.3).
    pub fn code(self) -> u16 {
        self as u16
    }

    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::Tls10 => "tls1.0",
            TlsVersion::Tls11 => "tls1.1",
            TlsVersion::Tls12 => "tls1.2",
            TlsVersion::Tls13 => "tls1.3",
        }
    }
}

impl flag::Value for TlsRequired {
    fn is_bool_flag(&self) -> bool {
        true
    }

    fn set(&mut self, text: &str) -> Result<(), flag::ValueError> {
        *self = TlsRequired::parse(text)?;
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        None
    }

    fn to_json(&self) -> Value {
        Value::from(self.code())
    }
}

impl flag::Value for TlsVersion {
    fn set(&mut self, text: &str) -> Result<(), flag::ValueError> {
        if let Some(v) = TlsVersion::parse(text)? {
            *self = v;
        }
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        Some(self.name().to_string())
    }

    fn to_json(&self) -> Value {
        Value::from(self.code())
    }
}

/// `--sigterm`: what SIGTERM does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SigtermMode {
    /// A clean shutdown (the reference's behaviour).
    Shutdown,
    /// Start draining.
    Drain,
}

impl SigtermMode {
    /// Parses a `--sigterm` value; the error follows `invalid value "x" for flag -sigterm: `.
    pub fn parse(s: &str) -> Result<SigtermMode, BadSigtermMode> {
        match s {
            "shutdown" => Ok(SigtermMode::Shutdown),
            "drain" => Ok(SigtermMode::Drain),
            _ => Err(BadSigtermMode),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SigtermMode::Shutdown => "shutdown",
            SigtermMode::Drain => "drain",
        }
    }
}

/// A `--sigterm` value other than `shutdown` or `drain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be 'shutdown' or 'drain'")]
pub struct BadSigtermMode;

/// `--sigterm` on the command line and as `sigterm` in the config file.
impl flag::Value for SigtermMode {
    fn set(&mut self, text: &str) -> Result<(), flag::ValueError> {
        *self = SigtermMode::parse(text)?;
        Ok(())
    }

    fn usage_default(&self) -> Option<String> {
        Some(self.as_str().to_string())
    }

    fn to_json(&self) -> Value {
        Value::from(self.as_str())
    }
}
