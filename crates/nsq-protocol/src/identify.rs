//! IDENTIFY: the request body (decoded with Go `encoding/json` leniency), its validation
//! against the server's bounds, feature negotiation and the JSON response (nsqd/protocol_v2.go, `IDENTIFY`).
//!
//! Go's decoder matches keys case-insensitively, lets the last duplicate win, ignores unknown
//! keys, treats `null` as "leave unchanged", and rejects type mismatches, fractional or
//! exponent numbers for integers, out-of-range integers and trailing data. `serde_json`'s
//! derive does not do that, so [`decode_go_object`] walks the object entries itself.

use std::fmt;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Serialize;

use crate::error::{ErrorCode, NsqError};

/// The IDENTIFY body as the client sent it (zero values for absent fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IdentifyRequest {
    pub client_id: String,
    pub hostname: String,
    pub user_agent: String,
    pub feature_negotiation: bool,
    pub tls_v1: bool,
    pub snappy: bool,
    pub deflate: bool,
    pub heartbeat_interval: i64,
    pub output_buffer_size: i64,
    pub output_buffer_timeout: i64,
    pub msg_timeout: i64,
    pub deflate_level: i64,
    pub sample_rate: i32,
}

const IDENTIFY_FIELDS: &[(&str, GoType)] = &[
    ("client_id", GoType::Str),
    ("hostname", GoType::Str),
    ("user_agent", GoType::Str),
    ("feature_negotiation", GoType::Bool),
    ("tls_v1", GoType::Bool),
    ("snappy", GoType::Bool),
    ("deflate", GoType::Bool),
    ("heartbeat_interval", GoType::I64),
    ("output_buffer_size", GoType::I64),
    ("output_buffer_timeout", GoType::I64),
    ("msg_timeout", GoType::I64),
    ("deflate_level", GoType::I64),
    ("sample_rate", GoType::I32),
];

/// Decodes an IDENTIFY body; any decode failure is
/// `E_BAD_BODY IDENTIFY failed to decode JSON body`.
pub fn parse_identify(body: &[u8]) -> Result<IdentifyRequest, NsqError> {
    let mut r = IdentifyRequest::default();
    decode_go_object(body, IDENTIFY_FIELDS, &mut |i, v| match (i, v) {
        (0, GoValue::Str(s)) => r.client_id = s,
        (1, GoValue::Str(s)) => r.hostname = s,
        (2, GoValue::Str(s)) => r.user_agent = s,
        (3, GoValue::Bool(b)) => r.feature_negotiation = b,
        (4, GoValue::Bool(b)) => r.tls_v1 = b,
        (5, GoValue::Bool(b)) => r.snappy = b,
        (6, GoValue::Bool(b)) => r.deflate = b,
        (7, GoValue::Int(n)) => r.heartbeat_interval = n,
        (8, GoValue::Int(n)) => r.output_buffer_size = n,
        (9, GoValue::Int(n)) => r.output_buffer_timeout = n,
        (10, GoValue::Int(n)) => r.msg_timeout = n,
        (11, GoValue::Int(n)) => r.deflate_level = n,
        (12, GoValue::Int(n)) => r.sample_rate = n as i32,
        _ => unreachable!("value type follows IDENTIFY_FIELDS"),
    })
    .map_err(|_| NsqError::new(ErrorCode::BadBody, "IDENTIFY failed to decode JSON body"))?;
    Ok(r)
}

/// The server options IDENTIFY values are checked against (all durations in ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdentifyLimits {
    /// Heartbeat interval without IDENTIFY (half the fixed 60 s client timeout).
    pub default_heartbeat_ms: i64,
    /// `--max-heartbeat-interval`.
    pub max_heartbeat_ms: i64,
    /// Output buffer size without IDENTIFY.
    pub default_output_buffer_size: i64,
    /// `--max-output-buffer-size`.
    pub max_output_buffer_size: i64,
    /// `--output-buffer-timeout`.
    pub default_output_buffer_timeout_ms: i64,
    /// `--min-output-buffer-timeout`.
    pub min_output_buffer_timeout_ms: i64,
    /// `--max-output-buffer-timeout`.
    pub max_output_buffer_timeout_ms: i64,
    /// `--msg-timeout`.
    pub default_msg_timeout_ms: i64,
    /// `--max-msg-timeout`.
    pub max_msg_timeout_ms: i64,
}

impl Default for IdentifyLimits {
    fn default() -> Self {
        IdentifyLimits {
            default_heartbeat_ms: 30_000,
            max_heartbeat_ms: 60_000,
            default_output_buffer_size: 16_384,
            max_output_buffer_size: 65_536,
            default_output_buffer_timeout_ms: 250,
            min_output_buffer_timeout_ms: 25,
            max_output_buffer_timeout_ms: 30_000,
            default_msg_timeout_ms: 60_000,
            max_msg_timeout_ms: 900_000,
        }
    }
}

/// The effective per-connection settings after a valid IDENTIFY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientSettings {
    /// `None`: heartbeats (and read/write deadlines) disabled; SUB is refused.
    pub heartbeat: Option<Duration>,
    /// Output buffer size in bytes (1 after `-1`: effectively unbuffered).
    pub output_buffer_size: i64,
    /// Timed-flush interval; `Duration::ZERO` means no timed flush.
    pub output_buffer_timeout: Duration,
    /// 0 = deliver everything, 1..=99 = sample.
    pub sample_rate: i32,
    /// In-flight timeout for messages delivered to this connection.
    pub msg_timeout: Duration,
}

impl ClientSettings {
    /// The settings of a connection that never sent IDENTIFY.
    pub fn defaults(limits: &IdentifyLimits) -> Self {
        ClientSettings {
            heartbeat: Some(ms(limits.default_heartbeat_ms)),
            output_buffer_size: limits.default_output_buffer_size,
            output_buffer_timeout: ms(limits.default_output_buffer_timeout_ms),
            sample_rate: 0,
            msg_timeout: ms(limits.default_msg_timeout_ms),
        }
    }
}

fn ms(v: i64) -> Duration {
    Duration::from_millis(v.max(0) as u64)
}

fn bad_identify(what: &str, v: i64) -> NsqError {
    NsqError::new(
        ErrorCode::BadBody,
        format!("IDENTIFY {what} ({v}) is invalid"),
    )
}

impl IdentifyRequest {
    /// Validates the requested values in the reference's order (heartbeat, output buffer
    /// timeout, output buffer size, sample rate, msg timeout) and returns the settings.
    pub fn validate(&self, limits: &IdentifyLimits) -> Result<ClientSettings, NsqError> {
        let mut s = ClientSettings::defaults(limits);

        match self.heartbeat_interval {
            -1 => s.heartbeat = None,
            0 => {}
            v if (1000..=limits.max_heartbeat_ms).contains(&v) => s.heartbeat = Some(ms(v)),
            v => return Err(bad_identify("heartbeat interval", v)),
        }

        match self.output_buffer_timeout {
            -1 => s.output_buffer_timeout = Duration::ZERO,
            0 => {}
            v if (limits.min_output_buffer_timeout_ms..=limits.max_output_buffer_timeout_ms)
                .contains(&v) =>
            {
                s.output_buffer_timeout = ms(v)
            }
            v => return Err(bad_identify("output buffer timeout", v)),
        }

        match self.output_buffer_size {
            -1 => {
                s.output_buffer_size = 1;
                s.output_buffer_timeout = Duration::ZERO;
            }
            0 => {}
            v if (64..=limits.max_output_buffer_size).contains(&v) => s.output_buffer_size = v,
            v => return Err(bad_identify("output buffer size", v)),
        }

        match self.sample_rate {
            v @ 0..=99 => s.sample_rate = v,
            v => return Err(bad_identify("sample rate", i64::from(v))),
        }

        match self.msg_timeout {
            0 => {}
            v if (1000..=limits.max_msg_timeout_ms).contains(&v) => s.msg_timeout = ms(v),
            v => return Err(bad_identify("msg timeout", v)),
        }

        Ok(s)
    }
}

/// What the server offers for negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerFeatures {
    /// A TLS certificate is configured.
    pub tls_available: bool,
    /// `--deflate`.
    pub deflate_enabled: bool,
    /// `--snappy`.
    pub snappy_enabled: bool,
    /// `--max-deflate-level`.
    pub max_deflate_level: i64,
}

impl Default for ServerFeatures {
    fn default() -> Self {
        ServerFeatures {
            tls_available: false,
            deflate_enabled: true,
            snappy_enabled: true,
            max_deflate_level: 6,
        }
    }
}

/// The outcome of feature negotiation (nsqd/protocol_v2.go, `IDENTIFY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub tls_v1: bool,
    pub deflate: bool,
    pub deflate_level: i64,
    pub snappy: bool,
}

/// Negotiates TLS/compression for a request with `feature_negotiation: true`.
pub fn negotiate(req: &IdentifyRequest, server: &ServerFeatures) -> Result<Negotiated, NsqError> {
    let tls_v1 = server.tls_available && req.tls_v1;
    let deflate = server.deflate_enabled && req.deflate;
    let mut deflate_level = 6;
    if deflate && req.deflate_level > 0 {
        deflate_level = req.deflate_level;
    }
    deflate_level = deflate_level.min(server.max_deflate_level);
    let snappy = server.snappy_enabled && req.snappy;
    if deflate && snappy {
        return Err(NsqError::identify_both_compressions());
    }
    Ok(Negotiated {
        tls_v1,
        deflate,
        deflate_level,
        snappy,
    })
}

/// The JSON response to IDENTIFY with feature negotiation. Field order is the wire key order.
/// nsqd serializes it; a client (nsq-client) deserializes it, with defaults for missing keys.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct IdentifyResponse {
    pub max_rdy_count: i64,
    pub version: String,
    pub max_msg_timeout: i64,
    pub msg_timeout: i64,
    pub tls_v1: bool,
    pub deflate: bool,
    pub deflate_level: i64,
    pub max_deflate_level: i64,
    pub snappy: bool,
    pub sample_rate: i32,
    pub auth_required: bool,
    pub output_buffer_size: i64,
    pub output_buffer_timeout: i64,
}

impl IdentifyResponse {
    /// Assembles the response from the connection's settings and the negotiation result.
    pub fn new(
        max_rdy_count: i64,
        max_msg_timeout_ms: i64,
        settings: &ClientSettings,
        negotiated: &Negotiated,
        max_deflate_level: i64,
        auth_required: bool,
    ) -> Self {
        IdentifyResponse {
            max_rdy_count,
            version: crate::VERSION.to_string(),
            max_msg_timeout: max_msg_timeout_ms,
            msg_timeout: settings.msg_timeout.as_millis() as i64,
            tls_v1: negotiated.tls_v1,
            deflate: negotiated.deflate,
            deflate_level: negotiated.deflate_level,
            max_deflate_level,
            snappy: negotiated.snappy,
            sample_rate: settings.sample_rate,
            auth_required,
            output_buffer_size: settings.output_buffer_size,
            output_buffer_timeout: settings.output_buffer_timeout.as_millis() as i64,
        }
    }

    /// Compact JSON, keys in wire order.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain struct serializes")
    }
}

// ---------------------------------------------------------------------------------------
// Go encoding/json emulation for flat objects of strings, bools and integers.
// ---------------------------------------------------------------------------------------

/// The Go type of a struct field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GoType {
    Str,
    Bool,
    I64,
    I32,
}

/// A decoded field value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GoValue {
    Str(String),
    Bool(bool),
    Int(i64),
}

/// Decodes `body` like Go's `json.Unmarshal` into a struct whose JSON field names and types
/// are `fields`: calls `set(index, value)` for each matching entry in document order (so the
/// last duplicate wins); `null` values and unknown keys are skipped.
pub(crate) fn decode_go_object(
    body: &[u8],
    fields: &[(&'static str, GoType)],
    set: &mut dyn FnMut(usize, GoValue),
) -> Result<(), serde_json::Error> {
    // Syntax pass: string contents are taken as bytes below (so that invalid UTF-8 and lone
    // surrogates can be replaced like Go does), and that path does not reject raw control
    // characters inside strings, which Go's scanner does.
    let mut de = serde_json::Deserializer::from_slice(body);
    <IgnoredAny as de::Deserialize>::deserialize(&mut de)?;
    de.end()?;

    let mut de = serde_json::Deserializer::from_slice(body);
    ObjectSeed { fields, set }.deserialize(&mut de)?;
    de.end()
}

struct ObjectSeed<'a, 'f> {
    fields: &'a [(&'static str, GoType)],
    set: &'f mut dyn FnMut(usize, GoValue),
}

impl<'de> DeserializeSeed<'de> for ObjectSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ObjectSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<GoString>()? {
            match self
                .fields
                .iter()
                .position(|(name, _)| go_fold_eq(&key.0, name))
            {
                Some(i) => {
                    if let Some(v) = map.next_value_seed(ValueSeed(self.fields[i].1))? {
                        (self.set)(i, v);
                    }
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
}

/// Go's field-name matching: `bytes.EqualFold`-style, via `ToUpper(ToLower(r))` per rune.
fn go_fold_eq(key: &str, field: &str) -> bool {
    fn single(mut it: impl Iterator<Item = char>, orig: char) -> char {
        match (it.next(), it.next()) {
            (Some(x), None) => x,
            _ => orig,
        }
    }
    fn fold(c: char) -> char {
        if c.is_ascii() {
            return c.to_ascii_uppercase();
        }
        let lower = single(c.to_lowercase(), c);
        single(lower.to_uppercase(), lower)
    }
    let mut k = key.chars();
    let mut f = field.chars();
    loop {
        match (k.next(), f.next()) {
            (None, None) => return true,
            (Some(a), Some(b)) if fold(a) == fold(b) => {}
            _ => return false,
        }
    }
}

/// A JSON string decoded the Go way: invalid UTF-8 bytes and lone surrogate escapes become
/// U+FFFD.
struct GoString(String);

impl<'de> de::Deserialize<'de> for GoString {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = GoString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<GoString, E> {
                Ok(GoString(s.to_owned()))
            }
            fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<GoString, E> {
                Ok(GoString(go_lossy_utf8(b)))
            }
        }
        d.deserialize_bytes(V)
    }
}

/// UTF-8 decoding with Go's replacement rules. `serde_json` hands string contents over as
/// bytes with lone surrogate escapes encoded as 3-byte WTF-8 (`ED A0..BF xx`), which Go turns
/// into one U+FFFD; every other invalid byte becomes one U+FFFD.
fn go_lossy_utf8(b: &[u8]) -> String {
    if let Ok(s) = std::str::from_utf8(b) {
        return s.to_owned();
    }
    let mut out = Vec::with_capacity(b.len() + 8);
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let n = utf8_seq_len(rest);
        if n > 0 {
            out.extend_from_slice(&rest[..n]);
            i += n;
            continue;
        }
        out.extend_from_slice("\u{fffd}".as_bytes());
        let surrogate = rest.len() >= 3
            && rest[0] == 0xED
            && (0xA0..=0xBF).contains(&rest[1])
            && (0x80..=0xBF).contains(&rest[2]);
        i += if surrogate { 3 } else { 1 };
    }
    String::from_utf8(out).expect("only valid sequences and U+FFFD were copied")
}

/// Length of the valid UTF-8 sequence at the start of `b` (non-empty), or 0 if invalid.
fn utf8_seq_len(b: &[u8]) -> usize {
    let (n, lo, hi) = match b[0] {
        0x00..=0x7F => return 1,
        0xC2..=0xDF => (2, 0x80, 0xBF),
        0xE0 => (3, 0xA0, 0xBF),
        0xE1..=0xEC | 0xEE..=0xEF => (3, 0x80, 0xBF),
        0xED => (3, 0x80, 0x9F),
        0xF0 => (4, 0x90, 0xBF),
        0xF1..=0xF3 => (4, 0x80, 0xBF),
        0xF4 => (4, 0x80, 0x8F),
        _ => return 0,
    };
    if b.len() < n
        || !(lo..=hi).contains(&b[1])
        || b[2..n].iter().any(|&c| !(0x80..=0xBF).contains(&c))
    {
        return 0;
    }
    n
}

struct ValueSeed(GoType);

impl<'de> DeserializeSeed<'de> for ValueSeed {
    type Value = Option<GoValue>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ValueSeed {
    type Value = Option<GoValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a {:?} or null", self.0)
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.0 {
            GoType::Str => {
                let s: GoString = de::Deserialize::deserialize(d)?;
                Ok(Some(GoValue::Str(s.0)))
            }
            GoType::Bool => d.deserialize_bool(self),
            GoType::I64 | GoType::I32 => d.deserialize_i64(self),
        }
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        match self.0 {
            GoType::Bool => Ok(Some(GoValue::Bool(v))),
            _ => Err(E::invalid_type(de::Unexpected::Bool(v), &self)),
        }
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        match self.0 {
            GoType::I64 => Ok(Some(GoValue::Int(v))),
            GoType::I32 if i32::try_from(v).is_ok() => Ok(Some(GoValue::Int(v))),
            _ => Err(E::invalid_value(de::Unexpected::Signed(v), &self)),
        }
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        match i64::try_from(v) {
            Ok(v) => self.visit_i64(v),
            Err(_) => Err(E::invalid_value(de::Unexpected::Unsigned(v), &self)),
        }
    }
}
