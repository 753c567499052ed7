//! One message → one HTTP request per chosen destination (nsq's apps/nsq_to_http
//! nsq_to_http.go, `PublishHandler.HandleMessage`, `PostPublisher`/`GetPublisher`, and
//! http.go, `HTTPGet`/`HTTPPost`).
//!
//! * `--post`: `POST <url>` with the body, `Content-Type: --content-type`; success is any
//!   2xx status.
//! * `--get`: the URL template's `%s` replaced by the query-escaped body (Go's
//!   `fmt.Sprintf(addr, url.QueryEscape(body))`); success is exactly 200.
//! * `User-Agent: nsq_to_http v1.3.0` on every request, then the `--header`s, which replace a
//!   header of the same name (Go's `Header.Set`), and `Accept-Encoding: gzip` unless a
//!   `--header` names one (Go's transport adds it); nothing else (no `Accept`): the request
//!   head is Go's, sent by [`GoHttpClient`].
//! * The answer's body is read and dropped; a transport error or another status
//!   (`got status code <n>`) fails the message, which the consumer then requeues.
//! * Destinations: `round-robin` (a shared counter, incremented before use, modulo the
//!   address count), `hostpool` / `epsilon-greedy` ([`HostPool`]), and any other `--mode`
//!   value sends to every address in order, stopping at the first failure.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nsq_http::client::HttpError;

use super::hostpool::HostPool;
use super::http::GoHttpClient;
use super::timer_metrics::TimerMetrics;

/// The HTTP `User-Agent` of nsq_to_http's requests (http.go, `init`).
pub fn http_user_agent() -> String {
    format!("nsq_to_http v{}", crate::VERSION)
}

/// `--get` or `--post`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

/// How a message's destinations are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every address in order (the reference's `ModeAll`, for any unknown `--mode`).
    All,
    RoundRobin,
    HostPool,
}

impl Mode {
    /// `--mode`'s value as nsq_to_http.go's `switch *mode` reads it.
    pub fn from_flag(mode: &str) -> Mode {
        match mode {
            "round-robin" => Mode::RoundRobin,
            "hostpool" | "epsilon-greedy" => Mode::HostPool,
            _ => Mode::All,
        }
    }
}

/// Why a request did not count as delivered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    /// No answer: Go's `*url.Error` text (`Post "http://…": dial tcp …: connection refused`).
    #[error("{0}")]
    Http(#[from] HttpError),
    /// An answer that is not a success for the method.
    #[error("got status code {0}")]
    Status(u16),
}

/// A `--header` that is not `name: value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The reference's text, which names `=` although `:` is the separator.
    #[error("--header value format should be 'key=value'")]
    Format { header: String },
}

/// `parseCustomHeaders`: each value split at the first `:` into a trimmed, non-empty name
/// and value. A repeated name (ignoring case, as Go's canonical header keys do) keeps its
/// last value.
pub fn parse_headers(values: &[String]) -> Result<Vec<(String, String)>, HeaderError> {
    let mut out: Vec<(String, String)> = Vec::new();
    for v in values {
        let bad = || HeaderError::Format { header: v.clone() };
        let (name, value) = v.split_once(':').ok_or_else(bad)?;
        let (name, value) = (name.trim(), value.trim());
        if name.is_empty() || value.is_empty() {
            return Err(bad());
        }
        set_header(&mut out, name, value);
    }
    Ok(out)
}

/// Go's `Header.Set`: replaces a header of the same name (case-insensitive) or appends.
fn set_header(headers: &mut Vec<(String, String)>, name: &str, value: &str) {
    match headers
        .iter_mut()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
    {
        Some(h) => h.1 = value.to_string(),
        None => headers.push((name.to_string(), value.to_string())),
    }
}

/// A `--get` template is valid with exactly one `%s` (`strings.Count(get, "%s") != 1` is
/// fatal).
pub fn valid_get_template(template: &str) -> bool {
    template.matches("%s").count() == 1
}

/// `fmt.Sprintf(template, url.QueryEscape(body))`. Go's verbs as they apply to one string
/// argument: `%%` is `%`, `%s`/`%v` the argument (width and precision honoured), another
/// verb `%!<verb>(string=<arg>)`, a verb without argument `%!<verb>(MISSING)`, a trailing
/// `%` `%!(NOVERB)`, and an unused argument `%!(EXTRA string=<arg>)`.
pub fn get_url(template: &str, body: &[u8]) -> String {
    let arg = nsq_go::url::query_escape_bytes(body);
    let mut out = String::with_capacity(template.len() + arg.len());
    let mut used = false;
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        // Flags, width, precision.
        let mut minus = false;
        while let Some(&f) = chars.peek() {
            if !matches!(f, '+' | '-' | '#' | ' ' | '0') {
                break;
            }
            minus |= f == '-';
            chars.next();
        }
        let number = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
            let mut n: Option<usize> = None;
            while let Some(d) = chars.peek().and_then(|d| d.to_digit(10)) {
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize));
                chars.next();
            }
            n
        };
        let width = number(&mut chars);
        let precision = if chars.peek() == Some(&'.') {
            chars.next();
            Some(number(&mut chars).unwrap_or(0))
        } else {
            None
        };
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        match verb {
            '%' => out.push('%'),
            _ if used => out.push_str(&format!("%!{verb}(MISSING)")),
            's' | 'v' => {
                used = true;
                let mut s: String = match precision {
                    Some(p) => arg.chars().take(p).collect(),
                    None => arg.clone(),
                };
                let pad = width.unwrap_or(0).saturating_sub(s.chars().count());
                if minus {
                    s.push_str(&" ".repeat(pad));
                } else {
                    s.insert_str(0, &" ".repeat(pad));
                }
                out.push_str(&s);
            }
            _ => {
                used = true;
                out.push_str(&format!("%!{verb}(string={arg})"));
            }
        }
    }
    if !used {
        out.push_str(&format!("%!(EXTRA string={arg})"));
    }
    out
}

/// What the forwarder needs from the command line.
#[derive(Debug, Clone)]
pub struct Settings {
    pub method: Method,
    /// The `--get` or `--post` values, in order (duplicates kept, as Go's `StringArray`).
    pub addresses: Vec<String>,
    /// `--mode` as given.
    pub mode: String,
    pub sample: f64,
    pub status_every: i64,
    pub content_type: String,
    /// From [`parse_headers`].
    pub headers: Vec<(String, String)>,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

/// The message handler's state, shared by the `-n` concurrent handlers.
pub struct Forwarder {
    client: GoHttpClient,
    method: Method,
    addresses: Vec<String>,
    mode: Mode,
    sample: f64,
    /// Per request: `Content-Type` (POST) then the `--header`s (the client adds
    /// `Accept-Encoding`).
    headers: Vec<(String, String)>,
    /// The round-robin counter.
    counter: AtomicU64,
    /// Taken twice per message, to pick and to mark a host; never across an `.await`.
    pool: Mutex<HostPool>,
    per_address: HashMap<String, TimerMetrics>,
    aggregate: TimerMetrics,
    /// The dial deadline has always passed (a negative `--http-client-connect-timeout`,
    /// given as 1 ns): every request fails without a connection, as in Go.
    dial_expired: bool,
}

impl Forwarder {
    /// The client, the pool and the timing series (which log their warning for a small
    /// `--status-every`: one per address when there are several, then the aggregate).
    pub fn new(s: Settings) -> Forwarder {
        let client = GoHttpClient::new(s.connect_timeout, s.request_timeout, &http_user_agent());
        let mut headers = Vec::new();
        if s.method == Method::Post {
            headers.push(("Content-Type".to_string(), s.content_type.clone()));
        }
        for (k, v) in &s.headers {
            set_header(&mut headers, k, v);
        }
        let mut per_address = HashMap::new();
        if s.addresses.len() == 1 {
            // One address: its series would repeat the aggregate, so it is off.
            per_address.insert(s.addresses[0].clone(), TimerMetrics::new(0, ""));
        } else {
            for a in &s.addresses {
                per_address.insert(
                    a.clone(),
                    TimerMetrics::new(s.status_every, format!("[{a}]:")),
                );
            }
        }
        let now = Instant::now();
        let pool = if s.mode == "epsilon-greedy" {
            HostPool::epsilon_greedy(s.addresses.len(), now)
        } else {
            HostPool::new(s.addresses.len(), now)
        };
        Forwarder {
            client,
            method: s.method,
            mode: Mode::from_flag(&s.mode),
            sample: s.sample,
            headers,
            counter: AtomicU64::new(0),
            pool: Mutex::new(pool),
            per_address,
            aggregate: TimerMetrics::new(s.status_every, "[aggregate]:"),
            addresses: s.addresses,
            dial_expired: !s.connect_timeout.is_zero()
                && s.connect_timeout < Duration::from_micros(1),
        }
    }

    /// `HandleMessage`: `Ok` finishes the message, `Err` requeues it.
    pub async fn forward(&self, body: &[u8]) -> Result<(), ForwardError> {
        if self.sample < 1.0 && rand::random::<f64>() > self.sample {
            return Ok(());
        }
        let start = Instant::now();
        match self.mode {
            Mode::All => {
                for addr in &self.addresses {
                    let st = Instant::now();
                    self.publish(addr, body).await?;
                    self.per_address[addr].status(st);
                }
            }
            Mode::RoundRobin => {
                let n = self.counter.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
                let addr = &self.addresses[(n % self.addresses.len() as u64) as usize];
                self.publish(addr, body).await?;
                self.per_address[addr].status(start);
            }
            Mode::HostPool => {
                let i = self.lock_pool().get(
                    Instant::now(),
                    rand::random::<f32>(),
                    rand::random::<f64>(),
                );
                let picked = Instant::now();
                let addr = &self.addresses[i];
                let result = self.publish(addr, body).await;
                let now = Instant::now();
                self.lock_pool()
                    .mark(i, result.is_ok(), now.duration_since(picked), now);
                result?;
                self.per_address[addr].status(start);
            }
        }
        self.aggregate.status(start);
        Ok(())
    }

    fn lock_pool(&self) -> std::sync::MutexGuard<'_, HostPool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One request to `addr` (`PostPublisher.Publish` / `GetPublisher.Publish`).
    async fn publish(&self, addr: &str, body: &[u8]) -> Result<(), ForwardError> {
        if self.dial_expired {
            let (method, url) = match self.method {
                Method::Post => ("Post", addr.to_string()),
                Method::Get => ("Get", get_url(addr, body)),
            };
            return Err(expired_dial(method, &url).into());
        }
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        match self.method {
            Method::Post => {
                let status = self.client.request("POST", addr, &headers, body).await?;
                if !(200..300).contains(&status) {
                    return Err(ForwardError::Status(status));
                }
            }
            Method::Get => {
                let url = get_url(addr, body);
                let status = self.client.request("GET", &url, &headers, b"").await?;
                if status != 200 {
                    return Err(ForwardError::Status(status));
                }
            }
        }
        Ok(())
    }
}

/// Go's `*url.Error` for a dial whose deadline had passed before it started (net.Dialer with a
/// negative `Timeout`): `Post "<url>": dial tcp <host:port>: i/o timeout`. A URL that does not
/// parse keeps the client's own error.
fn expired_dial(method: &str, url: &str) -> HttpError {
    let cause = match nsq_http::client::parse_url(url) {
        Ok(u) => format!(
            "dial tcp {}:{}: i/o timeout",
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or(80)
        ),
        Err(e) => e.to_string(),
    };
    HttpError::Request {
        method: method.to_string(),
        url: url.to_string(),
        cause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expired_dial_is_gos_timeout() {
        assert_eq!(
            expired_dial("Post", "http://127.0.0.1:9/x").to_string(),
            "Post \"http://127.0.0.1:9/x\": dial tcp 127.0.0.1:9: i/o timeout"
        );
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn headers_split_at_first_colon_and_trimmed() {
        let h = parse_headers(&strings(&["X-A: 1", " X-Url :http://x:1/ ", "x-a: 2"])).unwrap();
        assert_eq!(
            h,
            [
                ("X-A".to_string(), "2".to_string()),
                ("X-Url".to_string(), "http://x:1/".to_string())
            ]
        );
        for bad in ["novalue", "X-A:", ": v", " : "] {
            let e = parse_headers(&strings(&[bad])).unwrap_err();
            assert_eq!(e.to_string(), "--header value format should be 'key=value'");
        }
    }

    #[test]
    fn get_templates() {
        assert!(valid_get_template("http://h/x?d=%s"));
        assert!(!valid_get_template("http://h/x"));
        assert!(!valid_get_template("http://h/%s?d=%s"));
        assert_eq!(
            get_url("http://h/x?d=%s&t=1", b"a b&c=d/\xc3\xa9\x00"),
            "http://h/x?d=a+b%26c%3Dd%2F%C3%A9%00&t=1"
        );
        assert_eq!(get_url("http://h/%%41?d=%s", b"x"), "http://h/%41?d=x");
        assert_eq!(
            get_url("http://h/?d=%5s|%-3s", b"ab"),
            "http://h/?d=   ab|%!s(MISSING)"
        );
        assert_eq!(
            get_url("http://h/%2F?d=%s", b"ab"),
            "http://h/%!F(string=ab)?d=%!s(MISSING)"
        );
        assert_eq!(
            get_url("http://h/%%s", b"ab"),
            "http://h/%s%!(EXTRA string=ab)"
        );
        assert_eq!(get_url("http://h/%s%", b"ab"), "http://h/ab%!(NOVERB)");
    }

    #[test]
    fn modes() {
        assert_eq!(Mode::from_flag("round-robin"), Mode::RoundRobin);
        assert_eq!(Mode::from_flag("hostpool"), Mode::HostPool);
        assert_eq!(Mode::from_flag("epsilon-greedy"), Mode::HostPool);
        assert_eq!(Mode::from_flag("multicast"), Mode::All);
        assert_eq!(Mode::from_flag(""), Mode::All);
    }
}
