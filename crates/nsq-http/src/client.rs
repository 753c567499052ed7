//! The one outgoing HTTP client of every NSQ binary (nsq's internal/http_api/api_request.go,
//! `Client`): nsqd asking nsqlookupd for channels and auth servers for permissions, nsqadmin
//! asking nsqlookupd and nsqd for everything, posting notifications and proxying Graphite.
//!
//! Built on reqwest with rustls (ring, as nsqd's own TLS): connect and request timeouts,
//! HTTPS verified against a custom root CA (no built-in roots: like `--tls-root-ca-file`, the
//! CA is the operator's), a client certificate, or no verification at all
//! (`--http-client-tls-insecure-skip-verify`). Header names go out title-cased as Go writes
//! them. Redirects are followed (Go's default, up to 10).
//!
//! The reference's APIs put the client's error texts into their answers (nsqadmin's
//! `message` field, nsqd's log), so every failure is a [`HttpError`] whose `Display` is Go's
//! text, built in one place: [`go_error_text`].
//!
//! [`HttpClient::get_v1`] and [`HttpClient::post_v1`] are the reference's `GETV1`/`POSTV1`:
//! a `403` from a plain-HTTP URL whose body carries `https_port` (an nsqd with
//! `--tls-required`) is retried once over HTTPS on that port.

use std::time::Duration;

use nsq_go::quote::go_quote;

/// TLS settings of the client (nsqadmin's `--http-client-tls-*`, nsqd's `--tls-root-ca-file`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of the CAs that sign the servers' certificates (`""`: none, so HTTPS works
    /// only with `insecure_skip_verify`).
    pub root_ca_file: String,
    /// PEM certificate (chain) presented to servers that ask for one (`""`: none).
    pub cert_file: String,
    /// PEM private key of `cert_file`.
    pub key_file: String,
    /// Accept any server certificate.
    pub insecure_skip_verify: bool,
}

/// How to build an [`HttpClient`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientOptions {
    pub connect_timeout: Duration,
    /// The whole exchange, from connecting to the last byte of the body.
    pub request_timeout: Duration,
    /// `User-Agent` unless a request sets its own.
    pub user_agent: String,
    pub tls: TlsOptions,
    /// Follow redirects (Go's default, up to 10). Tests of a server's own redirects turn it
    /// off to see them.
    pub follow_redirects: bool,
}

/// Why the client could not be built (unreadable or invalid certificate files).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("failed to read TLS root CA file {path} - {reason}")]
    RootCa { path: String, reason: String },
    #[error("failed to LoadX509KeyPair {cert}, {key} - {reason}")]
    KeyPair {
        cert: String,
        key: String,
        reason: String,
    },
    #[error("failed to build HTTP client - {0}")]
    Client(String),
}

/// A failed request; `Display` is Go's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// Go's `*url.Error`: `Get "http://h:1/x": dial tcp h:1: connect: connection refused`.
    #[error("{method} {}: {cause}", go_quote(.url.as_bytes()))]
    Request {
        /// `Get`, `Post`, … (Go's spelling in `*url.Error`).
        method: String,
        url: String,
        /// From [`go_error_text`].
        cause: String,
    },
    /// A V1 call answered with another status than 200:
    /// `got response 404 Not Found "{\"message\":\"TOPIC_NOT_FOUND\"}"`.
    #[error("got response {status_line} {}", go_quote(.body))]
    Status {
        status: u16,
        /// Go's `resp.Status` (`404 Not Found`).
        status_line: String,
        body: Vec<u8>,
    },
    /// The `403` of a V1 call could not be turned into an HTTPS URL.
    #[error("{0}")]
    Redirect(String),
}

/// An answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Go's `resp.Status`: `404 Not Found` (the server's own reason phrase when it sent one).
    pub status_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header (name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A client; cheap to clone (one connection pool).
#[derive(Debug, Clone)]
pub struct HttpClient {
    inner: reqwest::Client,
}

/// The `Accept` header of V1 calls.
const ACCEPT_V1: &str = "application/vnd.nsq; version=1.0";

impl HttpClient {
    pub fn new(o: &ClientOptions) -> Result<HttpClient, BuildError> {
        let mut b = reqwest::Client::builder()
            .connect_timeout(o.connect_timeout)
            .timeout(o.request_timeout)
            .user_agent(o.user_agent.clone())
            .http1_title_case_headers()
            .tls_built_in_root_certs(false);
        if !o.follow_redirects {
            b = b.redirect(reqwest::redirect::Policy::none());
        }
        let tls = &o.tls;
        if !tls.root_ca_file.is_empty() {
            let fail = |reason: String| BuildError::RootCa {
                path: tls.root_ca_file.clone(),
                reason,
            };
            let pem = std::fs::read(&tls.root_ca_file).map_err(|e| fail(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| fail(e.to_string()))?;
            if certs.is_empty() {
                return Err(fail("no certificates found".to_string()));
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        if !tls.cert_file.is_empty() || !tls.key_file.is_empty() {
            let fail = |reason: String| BuildError::KeyPair {
                cert: tls.cert_file.clone(),
                key: tls.key_file.clone(),
                reason,
            };
            let mut pem = std::fs::read(&tls.cert_file).map_err(|e| fail(e.to_string()))?;
            pem.push(b'\n');
            pem.extend(std::fs::read(&tls.key_file).map_err(|e| fail(e.to_string()))?);
            let id = reqwest::Identity::from_pem(&pem).map_err(|e| fail(e.to_string()))?;
            b = b.identity(id);
        }
        if tls.insecure_skip_verify {
            b = b.danger_accept_invalid_certs(true);
        }
        let inner = b.build().map_err(|e| BuildError::Client(e.to_string()))?;
        Ok(HttpClient { inner })
    }

    /// A plain-HTTP client with these timeouts and user agent (no TLS settings).
    pub fn plain(connect_timeout: Duration, request_timeout: Duration, user_agent: &str) -> Self {
        HttpClient::new(&ClientOptions {
            connect_timeout,
            request_timeout,
            user_agent: user_agent.to_string(),
            tls: TlsOptions::default(),
            follow_redirects: true,
        })
        .expect("a client without TLS files always builds")
    }

    /// Sends one request. `user:password@` in the URL becomes Basic auth, as Go does.
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, HttpError> {
        let fail = |cause: String| HttpError::Request {
            method: go_method(method),
            url: url.to_string(),
            cause,
        };
        let mut parsed = parse_url(url).map_err(|e| fail(e.to_string()))?;
        let m = reqwest::Method::from_bytes(method.as_bytes()).map_err(|_| {
            fail(format!(
                "net/http: invalid method {}",
                go_quote(method.as_bytes())
            ))
        })?;
        let auth = (!parsed.username().is_empty()).then(|| {
            let user = percent_decode(parsed.username());
            let pass = parsed.password().map(percent_decode);
            (user, pass)
        });
        if auth.is_some() {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
        }
        let mut req = self.inner.request(m.clone(), parsed.clone());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        if let Some((user, pass)) = auth {
            req = req.basic_auth(user, pass);
        }
        if !body.is_empty() || m == reqwest::Method::POST || m == reqwest::Method::PUT {
            req = req.body(body.to_vec());
        }
        let host_port = host_port(&parsed);
        let resp = req
            .send()
            .await
            .map_err(|e| fail(go_error_text(&e, &host_port)))?;
        let status = resp.status();
        let status_line = format!(
            "{} {}",
            status.as_u16(),
            status.canonical_reason().unwrap_or("status code")
        );
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = resp
            .bytes()
            .await
            .map_err(|e| fail(go_error_text(&e, &host_port)))?;
        Ok(Response {
            status: status.as_u16(),
            status_line,
            headers,
            body: body.to_vec(),
        })
    }

    /// `GETV1`: the body of a 200 answer.
    pub async fn get_v1(&self, url: &str) -> Result<Vec<u8>, HttpError> {
        self.v1("GET", url).await
    }

    /// `POSTV1`: success is a 200 (body ignored).
    pub async fn post_v1(&self, url: &str) -> Result<(), HttpError> {
        self.v1("POST", url).await.map(|_| ())
    }

    async fn v1(&self, method: &str, url: &str) -> Result<Vec<u8>, HttpError> {
        let mut url = url.to_string();
        loop {
            let r = self
                .request(method, &url, &[("Accept", ACCEPT_V1)], b"")
                .await?;
            if r.status == 200 {
                return Ok(r.body);
            }
            if r.status == 403 && !url.starts_with("https") {
                url = https_endpoint(&url, &r.body)?;
                continue;
            }
            return Err(HttpError::Status {
                status: r.status,
                status_line: r.status_line,
                body: r.body,
            });
        }
    }
}

/// `httpsEndpoint`: the same URL over HTTPS on the `https_port` of a `403` body.
fn https_endpoint(url: &str, body: &[u8]) -> Result<String, HttpError> {
    #[derive(serde::Deserialize)]
    struct Forbidden {
        #[serde(default)]
        https_port: u16,
    }
    let f: Forbidden =
        serde_json::from_slice(body).map_err(|e| HttpError::Redirect(e.to_string()))?;
    let mut u = reqwest::Url::parse(url).map_err(|e| HttpError::Redirect(e.to_string()))?;
    u.set_scheme("https")
        .and_then(|()| u.set_port(Some(f.https_port)))
        .map_err(|()| HttpError::Redirect(format!("cannot switch {url} to https")))?;
    Ok(u.to_string())
}

/// Go's spelling of a method in `*url.Error` (`Get`, `Post`).
fn go_method(m: &str) -> String {
    let mut s = m.to_ascii_lowercase();
    if let Some(f) = s.get_mut(..1) {
        f.make_ascii_uppercase();
    }
    s
}

/// Why an URL was refused (`url.Parse` and the client's scheme check), in Go's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("parse {}: missing protocol scheme", go_quote(.0.as_bytes()))]
    MissingScheme(String),
    #[error("parse {}: {reason}", go_quote(.url.as_bytes()))]
    Parse { url: String, reason: String },
    #[error("unsupported protocol scheme {}", go_quote(.0.as_bytes()))]
    UnsupportedScheme(String),
}

/// `url.Parse` plus the client's scheme check (`http`/`https`), with Go's texts.
pub fn parse_url(url: &str) -> Result<reqwest::Url, UrlError> {
    if !url.contains("://") {
        return Err(UrlError::MissingScheme(url.to_string()));
    }
    let u = reqwest::Url::parse(url).map_err(|e| UrlError::Parse {
        url: url.to_string(),
        reason: e.to_string(),
    })?;
    match u.scheme() {
        "http" | "https" => Ok(u),
        other => Err(UrlError::UnsupportedScheme(other.to_string())),
    }
}

fn percent_decode(s: &str) -> String {
    nsq_go::url::unescape(s, false)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|| s.to_string())
}

/// `host:port` as Go's dialer names it (`dial tcp <host:port>`).
fn host_port(u: &reqwest::Url) -> String {
    // `host_str` keeps IPv6 brackets.
    let host = u.host_str().unwrap_or_default();
    format!("{host}:{}", u.port_or_known_default().unwrap_or(80))
}

/// Go's text for a failed exchange with `host_port` (what follows `Get "<url>": `):
/// `dial tcp <hp>: connect: connection refused`, `dial tcp <hp>: i/o timeout`,
/// `context deadline exceeded (Client.Timeout exceeded while awaiting headers)`,
/// `tls: failed to verify certificate: x509: certificate signed by unknown authority`, …
pub fn go_error_text(e: &reqwest::Error, host_port: &str) -> String {
    go_error_text_of(e, e.is_connect(), e.is_timeout(), host_port)
}

/// [`go_error_text`] of any client's error: `is_connect` when establishing the connection
/// failed, `is_timeout` when a deadline passed; the rest is read from the source chain of `e`.
pub fn go_error_text_of(
    e: &(dyn std::error::Error + 'static),
    is_connect: bool,
    is_timeout: bool,
    host_port: &str,
) -> String {
    let io = io_source(e);
    let chain = error_chain(e);
    if is_connect {
        // rustls reports a refused certificate as an io error of the handshake.
        if let Some(tls) = tls_text(&chain) {
            return tls;
        }
        if let Some(io) = io {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => {
                    format!("dial tcp {host_port}: connect: connection refused")
                }
                std::io::ErrorKind::TimedOut => format!("dial tcp {host_port}: i/o timeout"),
                _ => format!("dial tcp {host_port}: {}", io_text(io)),
            };
        }
        if is_timeout || chain.contains("timed out") {
            return format!("dial tcp {host_port}: i/o timeout");
        }
        if chain.contains("dns error") || chain.contains("failed to lookup") {
            let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
            return format!("dial tcp: lookup {host}: no such host");
        }
        return format!("dial tcp {host_port}: {chain}");
    }
    if is_timeout {
        return "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            .to_string();
    }
    if let Some(tls) = tls_text(&chain) {
        return tls;
    }
    if let Some(io) = io {
        return io_text(io);
    }
    chain
}

/// rustls' certificate complaints in Go's words.
fn tls_text(chain: &str) -> Option<String> {
    let verify = "tls: failed to verify certificate: x509: ";
    if chain.contains("UnknownIssuer") {
        return Some(format!("{verify}certificate signed by unknown authority"));
    }
    if chain.contains("NotValidForName") {
        return Some(format!("{verify}certificate is not valid for this host"));
    }
    if chain.contains("Expired") {
        return Some(format!(
            "{verify}certificate has expired or is not yet valid"
        ));
    }
    if chain.contains("invalid peer certificate") || chain.contains("received fatal alert") {
        return Some(format!(
            "tls: {}",
            chain.rsplit(": ").next().unwrap_or(chain)
        ));
    }
    None
}

/// The innermost `io::Error` of the source chain.
fn io_source<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a std::io::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = e.source();
    let mut found = None;
    while let Some(s) = cur {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            found = Some(io);
        }
        cur = s.source();
    }
    found
}

/// Every message of the source chain, joined by `: `.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = e.source();
    while let Some(s) = cur {
        parts.push(s.to_string());
        cur = s.source();
    }
    parts.join(": ")
}

/// An io error without Rust's ` (os error N)` suffix, lower-cased like Go's syscall texts.
fn io_text(e: &std::io::Error) -> String {
    let t = e.to_string();
    let t = t.split(" (os error").next().unwrap_or(&t).to_string();
    let mut c = t.chars();
    match c.next() {
        Some(f) => f.to_lowercase().collect::<String>() + c.as_str(),
        None => t,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> HttpClient {
        HttpClient::plain(Duration::from_secs(2), Duration::from_secs(5), "test")
    }

    #[tokio::test]
    async fn refused_is_gos_text() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let url = format!("http://{addr}/topics");
        let e = client().get_v1(&url).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("Get \"{url}\": dial tcp {addr}: connect: connection refused")
        );
        let e = client().get_v1("nope").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "Get \"nope\": parse \"nope\": missing protocol scheme"
        );
        let e = client().get_v1("ftp://x/").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "Get \"ftp://x/\": unsupported protocol scheme \"ftp\""
        );
    }

    #[test]
    fn status_error_text() {
        let e = HttpError::Status {
            status: 404,
            status_line: "404 Not Found".into(),
            body: br#"{"message":"TOPIC_NOT_FOUND"}"#.to_vec(),
        };
        assert_eq!(
            e.to_string(),
            r#"got response 404 Not Found "{\"message\":\"TOPIC_NOT_FOUND\"}""#
        );
        assert_eq!(
            https_endpoint(
                "http://127.0.0.1:4151/stats?format=json",
                br#"{"https_port":4152}"#
            )
            .unwrap(),
            "https://127.0.0.1:4152/stats?format=json"
        );
    }

    #[tokio::test]
    async fn title_case_headers_and_basic_auth() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let mut head = Vec::new();
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                head.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                .await
                .unwrap();
            String::from_utf8(head).unwrap()
        });
        let body = client()
            .get_v1(&format!("http://alice:pw@{addr}/x?a=1"))
            .await
            .unwrap();
        assert_eq!(body, b"ok");
        let head = server.await.unwrap();
        assert!(head.starts_with("GET /x?a=1 HTTP/1.1\r\n"), "{head}");
        assert!(
            head.contains("\r\nAccept: application/vnd.nsq; version=1.0\r\n"),
            "{head}"
        );
        assert!(head.contains("\r\nUser-Agent: test\r\n"), "{head}");
        assert!(
            head.contains("\r\nAuthorization: Basic YWxpY2U6cHc=\r\n"),
            "{head}"
        );
        assert!(head.contains(&format!("\r\nHost: {addr}\r\n")), "{head}");
    }
}
