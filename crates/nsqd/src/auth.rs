//! The AUTH client: nsqd asks an HTTP(S) auth server whether a client may publish or subscribe
//! (nsq's internal/auth/authorizations.go, `QueryAnyAuthd`; nsqd/protocol_v2.go, `AUTH`).
//! [`query`] sends the reference's
//! `GET /auth?common_name=…&remote_ip=…&secret=…&tls=…` to the configured servers in turn
//! (random start) and turns the first good answer into an [`AuthState`]; the connection code
//! keeps that state, asks [`AuthState::allows`] before SUB/PUB/MPUB/DPUB and re-queries with
//! the stored secret once [`AuthState::is_expired`].
//!
//! The answer is decoded with Go `encoding/json` rules (keys matched case-insensitively,
//! unknown keys ignored, `null` = absent, any type mismatch or non-integer `ttl` rejects the
//! whole answer) and validated like the reference: every permission must be `subscribe` or
//! `publish`, every regex must compile, `ttl` must be positive.
//!
//! The request goes through the daemon's one [`HttpClient`] (`nsq_http::client`), which
//! verifies `https://` servers against `--tls-root-ca-file`, follows redirects, sends
//! `user:password@` as Basic auth, and retries a `403` carrying `https_port` over HTTPS, as
//! the reference's `GETV1` does.
//!
//! Known differences from the reference, all on the failure side:
//! * regexes are compiled by the `regex` crate, whose syntax is RE2's with small differences
//!   (no `\Q…\E`, and Unicode general-category classes such as `\pL` are not compiled in);
//! * a key that appears twice under different case (`"ttl"` and `"TTL"`) resolves in sorted
//!   order instead of document order.

use std::time::Duration;

use rand::Rng;
use regex::Regex;
use serde_json::{Map, Value};
use tokio::time::Instant;

use nsq_go::url::query_escape;
use nsq_http::client::HttpClient;

/// What an authorization entry permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Permission {
    Subscribe,
    Publish,
}

impl Permission {
    /// The wire name (`subscribe` / `publish`); anything else is rejected by [`query`].
    pub fn parse(s: &str) -> Option<Permission> {
        match s {
            "subscribe" => Some(Permission::Subscribe),
            "publish" => Some(Permission::Publish),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Subscribe => "subscribe",
            Permission::Publish => "publish",
        }
    }
}

/// A compiled, unanchored regex that compares by its source text (so [`Authorization`] can be
/// `Eq`).
#[derive(Debug, Clone)]
pub struct Pattern(Regex);

impl Pattern {
    pub fn new(source: &str) -> Result<Pattern, regex::Error> {
        Regex::new(source).map(Pattern)
    }

    /// The pattern as the auth server sent it.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// A match anywhere in `s` counts (Go's `MatchString`).
    pub fn is_match(&self, s: &str) -> bool {
        self.0.is_match(s)
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Pattern) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Pattern {}

/// One entry of the auth server's `authorizations` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    /// Must match the topic name.
    pub topic: Pattern,
    /// At least one must match the channel name (`""` for publish commands); empty permits
    /// nothing.
    pub channels: Vec<Pattern>,
    pub permissions: Vec<Permission>,
}

impl Authorization {
    /// The reference's `Authorization.IsAllowed`.
    pub fn allows(&self, topic: &str, channel: &str, subscribe: bool) -> bool {
        let needed = if subscribe {
            Permission::Subscribe
        } else {
            Permission::Publish
        };
        self.permissions.contains(&needed)
            && self.topic.is_match(topic)
            && self.channels.iter().any(|c| c.is_match(channel))
    }
}

/// A client's authorization as of its last successful query, valid until `expires`.
#[derive(Debug, Clone)]
pub struct AuthState {
    /// Shown in the AUTH response and `/stats` (`auth_identity`); `""` if the server sent none.
    pub identity: String,
    /// Shown in the AUTH response and `/stats` (`auth_identity_url`).
    pub identity_url: String,
    pub authorizations: Vec<Authorization>,
    /// Query time + `ttl` seconds.
    pub expires: Instant,
}

/// Why authentication failed (logged by the server; the client gets `E_AUTH_FAILED`).
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("no auth servers configured")]
    NoServers,
    /// The request failed or was answered with an error status (Go's `http_api` texts).
    #[error(transparent)]
    Http(#[from] nsq_http::client::HttpError),
    #[error("bad JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// Go's `json.UnmarshalTypeError`: a value of the wrong JSON type for `target`.
    #[error("cannot unmarshal {kind} into {target}")]
    Unmarshal { kind: &'static str, target: String },
    #[error("unknown permission {0}")]
    UnknownPermission(String),
    /// A topic or channel pattern that is not a valid regular expression.
    #[error("unable to compile {what} {pattern:?} {source}")]
    BadPattern {
        what: &'static str,
        pattern: String,
        source: regex::Error,
    },
    #[error("invalid TTL {0} (must be >0)")]
    InvalidTtl(i64),
}

impl AuthError {
    fn unmarshal(v: &Value, target: impl Into<String>) -> AuthError {
        AuthError::Unmarshal {
            kind: nsq_go::json::kind(v),
            target: target.into(),
        }
    }
}

impl AuthState {
    /// Decodes and validates an auth server's 200 body; the state expires `ttl` seconds from
    /// now. The error text says what was wrong (for the server log only).
    pub fn from_response(body: &[u8]) -> Result<AuthState, AuthError> {
        let raw = decode(body)?;
        let mut authorizations = Vec::with_capacity(raw.authorizations.len());
        for a in raw.authorizations {
            let permissions = a
                .permissions
                .iter()
                .map(|p| {
                    Permission::parse(p).ok_or_else(|| AuthError::UnknownPermission(p.clone()))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let topic = Pattern::new(&a.topic).map_err(|source| AuthError::BadPattern {
                what: "topic",
                pattern: a.topic.clone(),
                source,
            })?;
            let channels = a
                .channels
                .iter()
                .map(|c| {
                    Pattern::new(c).map_err(|source| AuthError::BadPattern {
                        what: "channel",
                        pattern: c.clone(),
                        source,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            authorizations.push(Authorization {
                topic,
                channels,
                permissions,
            });
        }
        if raw.ttl <= 0 {
            return Err(AuthError::InvalidTtl(raw.ttl));
        }
        let ttl = Duration::from_secs(raw.ttl as u64);
        let now = Instant::now();
        Ok(AuthState {
            identity: raw.identity,
            identity_url: raw.identity_url,
            authorizations,
            expires: now
                .checked_add(ttl)
                .unwrap_or(now + Duration::from_secs(1 << 40)),
        })
    }

    /// The number of authorization entries (not of individual permissions).
    pub fn permission_count(&self) -> usize {
        self.authorizations.len()
    }

    /// True once `expires` is in the past (Go's `Expires.Before(time.Now())`).
    pub fn is_expired(&self) -> bool {
        self.expires < Instant::now()
    }

    /// nsqd/protocol_v2.go, `CheckAuth` and auth/authorizations.go, `IsAllowed`: SUB needs `subscribe`, publish commands need `publish` and a channel
    /// pattern that matches `channel` = `""`; any one entry suffices.
    pub fn allows(&self, topic: &str, channel: &str, subscribe: bool) -> bool {
        self.authorizations
            .iter()
            .any(|a| a.allows(topic, channel, subscribe))
    }

    /// The AUTH response body: `{"identity":…,"identity_url":…,"permission_count":N}`.
    pub fn response_json(&self) -> Vec<u8> {
        let mut out = String::with_capacity(64 + self.identity.len() + self.identity_url.len());
        out.push_str("{\"identity\":");
        push_go_json_string(&mut out, &self.identity);
        out.push_str(",\"identity_url\":");
        push_go_json_string(&mut out, &self.identity_url);
        out.push_str(",\"permission_count\":");
        out.push_str(&self.permission_count().to_string());
        out.push('}');
        out.into_bytes()
    }
}

/// Queries the configured auth servers (random start index, then each in turn until one
/// succeeds). `Ok` with no authorizations means "authenticated but allowed nothing"
/// (`E_UNAUTHORIZED AUTH no authorizations found`); `Err` is `E_AUTH_FAILED AUTH failed`, its
/// text the last server's failure.
pub async fn query(
    client: &HttpClient,
    addresses: &[String],
    secret: &[u8],
    remote_ip: &str,
    tls: bool,
    common_name: &str,
) -> Result<AuthState, AuthError> {
    if addresses.is_empty() {
        return Err(AuthError::NoServers);
    }
    let query = request_query(secret, remote_ip, tls, common_name);
    let start = rand::thread_rng().gen_range(0..addresses.len());
    let mut last_err = AuthError::NoServers;
    for i in 0..addresses.len() {
        let address = &addresses[(start + i) % addresses.len()];
        match query_one(client, address, &query).await {
            Ok(state) => return Ok(state),
            Err(e) => {
                tracing::error!("failed auth against {address} {e}");
                last_err = e;
            }
        }
    }
    Err(last_err)
}

/// Go's `url.Values.Encode` of the four parameters: keys sorted, values `QueryEscape`d.
fn request_query(secret: &[u8], remote_ip: &str, tls: bool, common_name: &str) -> String {
    format!(
        "common_name={}&remote_ip={}&secret={}&tls={}",
        query_escape(common_name),
        query_escape(remote_ip),
        query_escape_bytes(secret),
        if tls { "true" } else { "false" }
    )
}

/// [`query_escape`] for a secret that need not be UTF-8.
fn query_escape_bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => query_escape(s),
        Err(_) => {
            let mut out = String::with_capacity(b.len() * 3);
            for &c in b {
                if c.is_ascii() {
                    out.push_str(&query_escape(&(c as char).to_string()));
                } else {
                    out.push_str(&format!("%{c:02X}"));
                }
            }
            out
        }
    }
}

async fn query_one(
    client: &HttpClient,
    address: &str,
    query: &str,
) -> Result<AuthState, AuthError> {
    let body = client.get_v1(&endpoint(address, query)).await?;
    AuthState::from_response(&body)
}

/// Where to send the request: `host:port` → `http://host:port/auth?<query>`; an address
/// containing `://` is the full URL, to which `?<query>` is appended verbatim as the reference
/// does (so a URL that already has a query gets a second `?`, and a `#fragment` swallows it).
fn endpoint(address: &str, query: &str) -> String {
    if address.contains("://") {
        format!("{address}?{query}")
    } else {
        format!("http://{address}/auth?{query}")
    }
}

/// The auth server's answer as Go decodes it into the reference's `State`.
#[derive(Default)]
struct RawState {
    ttl: i64,
    identity: String,
    identity_url: String,
    authorizations: Vec<RawAuthorization>,
}

#[derive(Default)]
struct RawAuthorization {
    topic: String,
    channels: Vec<String>,
    permissions: Vec<String>,
}

fn decode(body: &[u8]) -> Result<RawState, AuthError> {
    let v: Value = serde_json::from_slice(body)?;
    let mut st = RawState::default();
    let obj = match v {
        Value::Null => return Ok(st),
        Value::Object(m) => m,
        other => return Err(AuthError::unmarshal(&other, "State")),
    };
    if let Some(v) = field(&obj, "ttl") {
        st.ttl = v
            .as_i64()
            .ok_or_else(|| AuthError::unmarshal(v, "State.ttl of type int"))?;
    }
    if let Some(v) = field(&obj, "identity") {
        st.identity = string(v, "identity")?;
    }
    if let Some(v) = field(&obj, "identity_url") {
        st.identity_url = string(v, "identity_url")?;
    }
    if let Some(v) = field(&obj, "authorizations") {
        let items = v
            .as_array()
            .ok_or_else(|| AuthError::unmarshal(v, "State.authorizations"))?;
        for item in items {
            let mut a = RawAuthorization::default();
            match item {
                Value::Null => {}
                Value::Object(m) => {
                    if let Some(v) = field(m, "topic") {
                        a.topic = string(v, "topic")?;
                    }
                    if let Some(v) = field(m, "channels") {
                        a.channels = strings(v, "channels")?;
                    }
                    if let Some(v) = field(m, "permissions") {
                        a.permissions = strings(v, "permissions")?;
                    }
                }
                other => return Err(AuthError::unmarshal(other, "an authorization")),
            }
            st.authorizations.push(a);
        }
    }
    Ok(st)
}

/// Go's field lookup: keys equal to `name` under case folding, the last one winning (in the
/// map's sorted order; Go uses document order); `null` counts as absent.
fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.iter()
        .rev()
        .find(|(k, _)| fold_eq(k, name))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

/// Case-insensitive comparison as Go's `EqualFold` (simple Unicode folding, `K` = Kelvin sign).
fn fold_eq(a: &str, b: &str) -> bool {
    fn fold(c: char) -> char {
        match c {
            '\u{212A}' => 'k',
            '\u{017F}' => 's',
            _ => {
                let mut l = c.to_lowercase();
                match (l.next(), l.next()) {
                    (Some(x), None) => x,
                    _ => c,
                }
            }
        }
    }
    a.chars().count() == b.chars().count()
        && a.chars().zip(b.chars()).all(|(x, y)| fold(x) == fold(y))
}

fn string(v: &Value, what: &str) -> Result<String, AuthError> {
    v.as_str()
        .map(str::to_string)
        .ok_or_else(|| AuthError::unmarshal(v, format!("{what} of type string")))
}

fn strings(v: &Value, what: &str) -> Result<Vec<String>, AuthError> {
    let items = v
        .as_array()
        .ok_or_else(|| AuthError::unmarshal(v, format!("{what} of type []string")))?;
    items
        .iter()
        .map(|i| match i {
            Value::Null => Ok(String::new()),
            other => string(other, what),
        })
        .collect()
}

/// A JSON string as Go's `json.Marshal` writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped
/// as `\u…`, control characters other than `\n`, `\r`, `\t` as `\u00XX`.
fn push_go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint("127.0.0.1:4181", "q=1"),
            "http://127.0.0.1:4181/auth?q=1"
        );
        assert_eq!(
            endpoint("https://h:1/v1/nsq", "q=1"),
            "https://h:1/v1/nsq?q=1"
        );
    }

    #[test]
    fn query_is_sorted_and_escaped() {
        assert_eq!(
            request_query(b"a b&c", "127.0.0.1", true, "CN=x"),
            "common_name=CN%3Dx&remote_ip=127.0.0.1&secret=a+b%26c&tls=true"
        );
        assert_eq!(query_escape_bytes(b"\xff a"), "%FF+a");
    }

    #[test]
    fn go_json_strings() {
        let mut s = String::new();
        push_go_json_string(&mut s, "<a&b>\"\\\n\u{1}");
        assert_eq!(s, r#""\u003ca\u0026b\u003e\"\\\n\u0001""#);
    }

    #[test]
    fn fold() {
        assert!(fold_eq("TTL", "ttl"));
        assert!(fold_eq("\u{212A}ey", "key"));
        assert!(!fold_eq("ttl2", "ttl"));
    }
}
