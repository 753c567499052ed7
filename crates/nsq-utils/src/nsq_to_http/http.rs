//! nsq_to_http's HTTP client: the requests of nsq's apps/nsq_to_http/http.go (`HTTPGet`,
//! `HTTPPost`) as Go's net/http sends them through internal/http_api's
//! `NewDeadlineTransport`. A client of its own on hyper, because the reqwest client the
//! daemons share (nsq-http) adds `Accept: */*` to every request and cannot leave it out,
//! where Go sends no `Accept`.
//!
//! * The head, in Go's order (net/http, request.go `Request.write` and header.go
//!   `writeSubset`; transport.go `persistConn.roundTrip`): `Host`, `User-Agent`,
//!   `Content-Length` (POST, 0 included; none for a GET), the request's other headers sorted
//!   by name (`Authorization: Basic …` from the URL's `user:password@` among them, unless a
//!   header sets it: client.go `send`), then `Accept-Encoding: gzip` unless the request names
//!   an encoding (`requestedGzip`). Names title-cased as Go canonicalizes them.
//! * Redirects as client.go `Client.do`: 301/302/303 go on as GET without a body (a HEAD stays
//!   HEAD), 307/308 repeat the method and the body; the first request's headers are copied to
//!   every hop (`Authorization` only to the same host or a subdomain of it) with a `Referer`
//!   (none from https to http); an answer without `Location` is the answer; the 10th redirect
//!   is `stopped after 10 redirects`.
//! * Timeouts: the connect timeout bounds each dial (`Dialer.Timeout`: `dial tcp …: i/o
//!   timeout`), the request timeout everything up to the last answer's headers
//!   (`Client.Timeout`: `context deadline exceeded (Client.Timeout exceeded while awaiting
//!   headers)`); the body is then read and dropped within what is left of it, its errors
//!   ignored as nsq_to_http.go ignores them. Zero is no timeout, as in Go.
//! * Connections are kept alive (idle ones closed after 90 s, `IdleConnTimeout`), with
//!   `TCP_NODELAY` and TCP keep-alive every 30 s as Go's dialer sets them. HTTPS servers are
//!   verified against the system CA bundle, as Go does on Linux.
//!
//! Errors are Go's `*url.Error` texts ([`HttpError::Request`]), built by nsq-http's
//! [`go_error_text_of`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use nsq_http::client::{go_error_text_of, parse_url, HttpError};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How many redirects Go's default `CheckRedirect` follows.
const MAX_REDIRECTS: usize = 10;

/// A client; cheap to clone (one connection pool).
#[derive(Clone)]
pub struct GoHttpClient {
    client: Client<Connector, Full<Bytes>>,
    request_timeout: Option<Duration>,
    user_agent: String,
}

impl std::fmt::Debug for GoHttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoHttpClient")
            .field("request_timeout", &self.request_timeout)
            .field("user_agent", &self.user_agent)
            .finish()
    }
}

impl GoHttpClient {
    /// `connect_timeout` and `request_timeout` as Go's: zero is none.
    pub fn new(connect_timeout: Duration, request_timeout: Duration, user_agent: &str) -> Self {
        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_connect_timeout((!connect_timeout.is_zero()).then_some(connect_timeout));
        tcp.set_nodelay(true);
        tcp.set_keepalive(Some(Duration::from_secs(30)));
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        let pem = nsq_tls::system_roots_pem();
        roots.add_parsable_certificates(CertificateDer::pem_slice_iter(&pem).map_while(Result::ok));
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(roots).with_no_client_auth())
            .map(|c| tokio_rustls::TlsConnector::from(Arc::new(c)))
            .map_err(|e| e.to_string());
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .http1_title_case_headers(true)
            .build(Connector {
                tcp,
                tls: Arc::new(tls),
            });
        GoHttpClient {
            client,
            request_timeout: (!request_timeout.is_zero()).then_some(request_timeout),
            user_agent: user_agent.to_string(),
        }
    }

    /// Sends `method url` with `headers` (set in order: a later one replaces an earlier one of
    /// the same name, as Go's `Header.Set`) and `body`, follows redirects, reads and drops
    /// the answer's body; returns the last answer's status.
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<u16, HttpError> {
        let op = go_method(method);
        let fail = |url: &str, cause: String| HttpError::Request {
            method: op.clone(),
            url: url.to_string(),
            cause,
        };
        let first = parse_url(url).map_err(|e| fail(url, e.to_string()))?;
        let deadline = self.request_timeout.map(|d| Instant::now() + d);
        let body = Bytes::copy_from_slice(body);
        let mut method = method.to_string();
        let mut cur = first.clone();
        let mut cur_text = url.to_string();
        let mut with_body = true;
        let mut referer: Option<String> = None;
        let mut sent = 0;
        loop {
            let req = self
                .build(
                    &method,
                    (&first, &cur),
                    headers,
                    referer.as_deref(),
                    with_body.then(|| body.clone()),
                )
                .map_err(|e| fail(&cur_text, e))?;
            sent += 1;
            let host_port = host_port(&cur);
            let answer =
                match deadline {
                    Some(at) => match tokio::time::timeout_at(at, self.client.request(req)).await {
                        Ok(r) => r,
                        Err(_) => return Err(fail(
                            &cur_text,
                            "context deadline exceeded (Client.Timeout exceeded while awaiting \
                             headers)"
                                .to_string(),
                        )),
                    },
                    None => self.client.request(req).await,
                };
            let resp = answer.map_err(|e| {
                let text = if e.is_connect() {
                    go_error_text_of(&e, true, false, &host_port)
                } else if hyper_closed_early(&e) {
                    // The server closed the connection before answering.
                    "EOF".to_string()
                } else {
                    go_error_text_of(&e, false, false, &host_port)
                };
                fail(&cur_text, text)
            })?;
            let status = resp.status().as_u16();
            // client.go, `redirectBehavior`.
            let (next_method, include_body) = match status {
                301..=303 if method == "GET" || method == "HEAD" => (method.clone(), false),
                301..=303 => ("GET".to_string(), false),
                307 | 308 => (method.clone(), true),
                _ => {
                    drain(resp, deadline).await;
                    return Ok(status);
                }
            };
            let location = resp
                .headers()
                .get(header::LOCATION)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
            let Some(location) = location else {
                drain(resp, deadline).await;
                return Ok(status);
            };
            let next = cur.join(&location).map_err(|e| {
                fail(
                    &cur_text,
                    format!(
                        "failed to parse Location header {}: {e}",
                        nsq_go::quote::go_quote(location.as_bytes())
                    ),
                )
            })?;
            drain(resp, deadline).await;
            if sent >= MAX_REDIRECTS {
                return Err(fail(&location, "stopped after 10 redirects".to_string()));
            }
            referer = referer_for(&cur, &next);
            method = next_method;
            with_body = include_body;
            cur_text = next.to_string();
            cur = next;
        }
    }

    /// One hop's request: `url`'s origin-form target, the head in Go's order (module doc).
    fn build(
        &self,
        method: &str,
        (first, url): (&url::Url, &url::Url),
        headers: &[(&str, &str)],
        referer: Option<&str>,
        body: Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>, String> {
        let mut target = url.clone();
        let user = percent_decode(target.username());
        let password = target.password().map(percent_decode);
        let _ = target.set_username("");
        let _ = target.set_password(None);
        target.set_fragment(None);
        let uri: Uri = target.as_str().parse().map_err(|e| format!("{e}"))?;
        let mut host = url.host_str().unwrap_or_default().to_string();
        if let Some(port) = url.port() {
            host = format!("{host}:{port}");
        }
        // The request's own headers: Go's `Header.Set` per pair, then sorted by name.
        let mut own: Vec<(String, String)> = Vec::new();
        for (k, v) in headers {
            let key = canonical_key(k);
            match own.iter_mut().find(|(n, _)| *n == key) {
                Some(e) => e.1 = v.to_string(),
                None => own.push((key, v.to_string())),
            }
        }
        // The first request's headers go to every hop; the sensitive ones only to the same
        // host or a subdomain (client.go, `shouldCopyHeaderOnRedirect`).
        if !same_or_subdomain(url, first) {
            own.retain(|(k, _)| {
                !matches!(
                    k.as_str(),
                    "Authorization" | "Www-Authenticate" | "Cookie" | "Cookie2"
                )
            });
        }
        // A redirect's `Referer` replaces the request's own (client.go, `Client.do`).
        if let Some(r) = referer {
            own.retain(|(k, _)| k != "Referer");
            own.push(("Referer".to_string(), r.to_string()));
        }
        if !user.is_empty() && !own.iter().any(|(k, _)| k == "Authorization") {
            let secret = format!("{user}:{}", password.unwrap_or_default());
            let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
            own.push(("Authorization".to_string(), format!("Basic {b64}")));
        }
        let user_agent = match own.iter().position(|(k, _)| k == "User-Agent") {
            Some(i) => own.remove(i).1,
            None => self.user_agent.clone(),
        };
        own.sort_by(|a, b| a.0.cmp(&b.0));
        let mut head = HeaderMap::new();
        let mut put = |name: &str, value: &str| -> Result<(), String> {
            let name = HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
            let value = HeaderValue::from_str(value).map_err(|e| e.to_string())?;
            head.insert(name, value);
            Ok(())
        };
        put("Host", &host)?;
        if !user_agent.is_empty() {
            put("User-Agent", &user_agent)?;
        }
        let body = body.unwrap_or_default();
        if method == "POST" || method == "PUT" || method == "PATCH" || !body.is_empty() {
            put("Content-Length", &body.len().to_string())?;
        }
        let mut encoding = false;
        for (k, v) in &own {
            encoding |= k == "Accept-Encoding";
            put(k, v)?;
        }
        if !encoding && method != "HEAD" {
            put("Accept-Encoding", "gzip")?;
        }
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .body(Full::new(body))
            .map_err(|e| e.to_string())?;
        *req.headers_mut() = head;
        Ok(req)
    }
}

/// Reads and drops an answer's body, within the request's deadline; errors are ignored
/// (nsq_to_http.go: `io.Copy(ioutil.Discard, resp.Body)`).
async fn drain(resp: hyper::Response<hyper::body::Incoming>, deadline: Option<Instant>) {
    let read = resp.into_body().collect();
    match deadline {
        Some(at) => {
            let _ = tokio::time::timeout_at(at, read).await;
        }
        None => {
            let _ = read.await;
        }
    }
}

/// hyper's "connection closed before message completed": Go reads `EOF` there.
fn hyper_closed_early(e: &hyper_util::client::legacy::Error) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = cur {
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message();
        }
        cur = s.source();
    }
    false
}

/// Go's `Referer` for a redirect from `last` to `next` (client.go, `refererForURL`): the last
/// URL without its user info, none from https to http.
fn referer_for(last: &url::Url, next: &url::Url) -> Option<String> {
    if last.scheme() == "https" && next.scheme() == "http" {
        return None;
    }
    let mut r = last.clone();
    let _ = r.set_username("");
    let _ = r.set_password(None);
    Some(r.to_string())
}

/// `dest`'s host is `initial`'s or a subdomain of it (client.go, `isDomainOrSubdomain` of the
/// canonical `host:port`s).
fn same_or_subdomain(dest: &url::Url, initial: &url::Url) -> bool {
    let d = host_port(dest);
    let i = host_port(initial);
    d == i || (d.ends_with(&i) && d.as_bytes()[d.len() - i.len() - 1] == b'.')
}

/// Go's `CanonicalHeaderKey`: the first letter and every letter after a `-` upper case, the
/// rest lower case; a key with a byte that is not a token character stays as it is.
fn canonical_key(k: &str) -> String {
    let token = |c: u8| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c);
    if !k.bytes().all(token) {
        return k.to_string();
    }
    let mut up = true;
    k.bytes()
        .map(|c| {
            let c = if up {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            up = c == b'-';
            c as char
        })
        .collect()
}

/// Go's spelling of a method in `*url.Error` (`Get`, `Post`).
fn go_method(m: &str) -> String {
    let mut s = m.to_ascii_lowercase();
    if let Some(f) = s.get_mut(..1) {
        f.make_ascii_uppercase();
    }
    s
}

fn percent_decode(s: &str) -> String {
    nsq_go::url::unescape(s, false)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|| s.to_string())
}

/// `host:port` as Go's dialer names it.
fn host_port(u: &url::Url) -> String {
    let host = u.host_str().unwrap_or_default();
    format!("{host}:{}", u.port_or_known_default().unwrap_or(80))
}

/// Dials TCP (hyper-util's connector: timeout, `TCP_NODELAY`, keep-alive) and, for https,
/// runs the TLS handshake.
#[derive(Clone)]
struct Connector {
    tcp: HttpConnector,
    tls: Arc<Result<tokio_rustls::TlsConnector, String>>,
}

impl tower_service::Service<Uri> for Connector {
    type Response = Stream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        tower_service::Service::<Uri>::poll_ready(&mut self.tcp, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let https = uri.scheme_str() == Some("https");
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let connecting = tower_service::Service::<Uri>::call(&mut self.tcp, uri);
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting.await?;
            if !https {
                return Ok(Stream::Plain(tcp));
            }
            let connector = tls.as_ref().as_ref().map_err(|e| e.clone())?;
            let name = ServerName::try_from(host)?;
            let stream = connector.connect(name, TokioIo::new(tcp)).await?;
            Ok(Stream::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

type TlsStream = tokio_rustls::client::TlsStream<TokioIo<TokioIo<TcpStream>>>;

/// A connection: plain TCP or TLS over it.
enum Stream {
    Plain(TokioIo<TcpStream>),
    Tls(Box<TokioIo<TlsStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        match self {
            Stream::Plain(s) => s.connected(),
            Stream::Tls(_) => Connected::new(),
        }
    }
}

impl hyper::rt::Read for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server that answers the n-th request with `answers[n]` (raw bytes; empty: close
    /// without answering) and returns every request head and body it read.
    async fn server(answers: Vec<&'static str>) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            let mut seen = Vec::new();
            for answer in answers {
                let (mut s, _) = l.accept().await.unwrap();
                let mut req = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = s.read(&mut buf).await.unwrap();
                    req.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&req).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let len = text[..end]
                            .lines()
                            .find_map(|l| l.strip_prefix("Content-Length: "))
                            .map_or(0, |v| v.parse::<usize>().unwrap());
                        if req.len() >= end + 4 + len {
                            break;
                        }
                    }
                    assert!(n > 0, "closed mid-request");
                }
                seen.push(String::from_utf8_lossy(&req).into_owned());
                if !answer.is_empty() {
                    s.write_all(answer.as_bytes()).await.unwrap();
                }
                // One request per connection: the server closes it (`Connection: close`).
            }
            seen
        });
        (addr, task)
    }

    fn client() -> GoHttpClient {
        GoHttpClient::new(Duration::from_secs(2), Duration::from_secs(2), "ua/1")
    }

    #[tokio::test]
    async fn go_error_texts() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let url = format!("http://{addr}/x");
        let e = client().request("POST", &url, &[], b"b").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("Post \"{url}\": dial tcp {addr}: connect: connection refused")
        );
        // Closed without an answer: Go reads EOF.
        let (addr, srv) = server(vec![""]).await;
        let url = format!("http://{addr}/x");
        let e = client().request("POST", &url, &[], b"b").await.unwrap_err();
        assert_eq!(e.to_string(), format!("Post \"{url}\": EOF"));
        srv.await.unwrap();
        // No answer within the request timeout.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x", l.local_addr().unwrap());
        let c = GoHttpClient::new(Duration::from_secs(2), Duration::from_millis(200), "ua/1");
        let e = c.request("GET", &url, &[], b"").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "Get \"{url}\": context deadline exceeded (Client.Timeout exceeded while \
                 awaiting headers)"
            )
        );
        drop(l);
    }

    /// client.go, `Client.do`: a 302 turns a POST into a GET without a body, keeping the
    /// headers and adding a Referer; a 307 then repeats the method (GET) with the first
    /// request's body (`redirectBehavior` takes the body from `reqs[0].GetBody`).
    #[tokio::test]
    async fn redirects_as_go_follows_them() {
        let (addr, srv) = server(vec![
            "HTTP/1.1 302 Found\r\nLocation: /two\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 307 Temporary Redirect\r\nLocation: /three\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n",
        ])
        .await;
        let url = format!("http://u:p@{addr}/one");
        let status = client()
            .request("POST", &url, &[("Content-Type", "text/plain")], b"hello")
            .await
            .unwrap();
        assert_eq!(status, 204);
        let seen = srv.await.unwrap();
        assert_eq!(
            seen[0],
            format!(
                "POST /one HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: ua/1\r\nContent-Length: 5\r\n\
                 Authorization: Basic dTpw\r\nContent-Type: text/plain\r\n\
                 Accept-Encoding: gzip\r\n\r\nhello"
            )
        );
        assert_eq!(
            seen[1],
            format!(
                "GET /two HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: ua/1\r\n\
                 Authorization: Basic dTpw\r\nContent-Type: text/plain\r\n\
                 Referer: http://{addr}/one\r\nAccept-Encoding: gzip\r\n\r\n"
            )
        );
        assert_eq!(
            seen[2],
            format!(
                "GET /three HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: ua/1\r\nContent-Length: 5\r\n\
                 Authorization: Basic dTpw\r\nContent-Type: text/plain\r\n\
                 Referer: http://{addr}/two\r\nAccept-Encoding: gzip\r\n\r\nhello"
            )
        );
    }

    #[tokio::test]
    async fn the_tenth_redirect_is_an_error() {
        let loop_answer = "HTTP/1.1 302 Found\r\nLocation: /again\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        let (addr, srv) = server(vec![loop_answer; 10]).await;
        let url = format!("http://{addr}/start");
        let e = client().request("GET", &url, &[], b"").await.unwrap_err();
        assert_eq!(e.to_string(), "Get \"/again\": stopped after 10 redirects");
        assert_eq!(srv.await.unwrap().len(), 10);
    }

    #[test]
    fn canonical_keys_as_go() {
        assert_eq!(canonical_key("x-api-KEY"), "X-Api-Key");
        assert_eq!(canonical_key("content-type"), "Content-Type");
        assert_eq!(canonical_key("a b"), "a b");
    }
}
