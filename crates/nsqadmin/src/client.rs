//! The upstream HTTP/1.1 client nsqadmin uses to talk to nsqlookupd, nsqd, Graphite and the
//! notification endpoint (nsqadmin.md §3): one request per connection (`Connection: close`),
//! bounded by the connect timeout and the request timeout, with Go-shaped error texts
//! (`Get "http://127.0.0.1:1/topics": dial tcp 127.0.0.1:1: connect: connection refused`,
//! `got response 404 Not Found "{\"message\":\"TOPIC_NOT_FOUND\"}"`).
//!
//! Hand-written over `TcpStream` rather than hyper's client: requests are few and small, the
//! error texts are part of the API answers, and this keeps them exact.

use std::time::Duration;

use nsq_protocol::quote::go_quote;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// The most we read from an upstream answer (a `/stats` with many clients is a few MiB).
const MAX_RESPONSE: usize = 64 << 20;

/// An `http://` URL split into what a request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub scheme: String,
    /// `user:password` before `@`, if any.
    pub userinfo: Option<String>,
    /// `host:port` as written (IPv6 bracketed); the port defaults to 80/443.
    pub host_port: String,
    /// Path plus `?query`, at least `/`.
    pub path_query: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, String> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("parse {}: missing protocol scheme", go_quote(s.as_bytes())))?;
        let scheme = scheme.to_ascii_lowercase();
        if scheme != "http" && scheme != "https" {
            return Err(format!(
                "unsupported protocol scheme {}",
                go_quote(scheme.as_bytes())
            ));
        }
        let (authority, path) = match rest.find(['/', '?']) {
            Some(p) => (&rest[..p], &rest[p..]),
            None => (rest, ""),
        };
        let (userinfo, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        if host.is_empty() {
            return Err(format!("parse {}: missing host", go_quote(s.as_bytes())));
        }
        let has_port = match host.rfind(':') {
            Some(p) => !host[p..].contains(']'),
            None => false,
        };
        let host_port = if has_port {
            host.to_string()
        } else {
            format!("{host}:{}", if scheme == "https" { 443 } else { 80 })
        };
        let path_query = if path.starts_with('?') {
            format!("/{path}")
        } else if path.is_empty() {
            "/".to_string()
        } else {
            path.to_string()
        };
        Ok(Url {
            scheme,
            userinfo,
            host_port,
            path_query,
        })
    }
}

/// An upstream answer.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Go's `resp.Status`: `404 Not Found`.
    pub status_line: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Connect and request timeouts (`--http-client-connect-timeout`, `--http-client-request-timeout`).
#[derive(Debug, Clone, Copy)]
pub struct HttpClient {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
}

impl HttpClient {
    /// Sends one request; transport errors come back in Go's `<Method> "<url>": <err>` form.
    /// Counted for `/metrics` (crate::metrics).
    pub async fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, String> {
        crate::metrics::request_sent(url);
        let r = self.send(method, url, headers, body).await;
        if r.is_err() {
            crate::metrics::request_failed(url, crate::metrics::Failure::Transport);
        }
        r
    }

    async fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, String> {
        let go_method = {
            let mut m = method.to_ascii_lowercase();
            if let Some(f) = m.get_mut(..1) {
                f.make_ascii_uppercase();
            }
            m
        };
        let wrap = |e: String| format!("{go_method} {}: {e}", go_quote(url.as_bytes()));
        let u = Url::parse(url).map_err(wrap)?;
        if u.scheme != "http" {
            return Err(wrap("https is not supported by this nsqadmin".to_string()));
        }
        let hp = u.host_port.clone();
        let mut stream = match timeout(self.connect_timeout, TcpStream::connect(&hp)).await {
            Err(_) => return Err(wrap(format!("dial tcp {hp}: i/o timeout"))),
            Ok(Err(e)) => return Err(wrap(dial_error(&hp, &e))),
            Ok(Ok(s)) => s,
        };
        let mut req = format!(
            "{method} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            u.path_query, u.host_port
        );
        if !headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case("user-agent"))
        {
            req.push_str(&format!(
                "User-Agent: nsqadmin/v{}\r\n",
                crate::options::VERSION
            ));
        }
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(ui) = &u.userinfo {
            req.push_str(&format!(
                "Authorization: Basic {}\r\n",
                base64(ui.as_bytes())
            ));
        }
        if !body.is_empty() || method == "POST" || method == "PUT" {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let exchange = async {
            stream.write_all(req.as_bytes()).await?;
            stream.write_all(body).await?;
            let mut raw = Vec::new();
            let mut chunk = [0u8; 16 * 1024];
            loop {
                let n = stream.read(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&chunk[..n]);
                if raw.len() > MAX_RESPONSE {
                    return Err(std::io::Error::other("response too large"));
                }
            }
            Ok::<_, std::io::Error>(raw)
        };
        let raw =
            match timeout(self.request_timeout, exchange).await {
                Err(_) => return Err(wrap(
                    "context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
                        .to_string(),
                )),
                Ok(Err(e)) => return Err(wrap(io_text(&e))),
                Ok(Ok(raw)) => raw,
            };
        parse_response(&raw, method == "HEAD").map_err(wrap)
    }

    /// `GETV1`: a 200 body, or `got response …` for any other status. A 403 carrying an
    /// `https_port` (nsqd with `--tls-required`) is reported as such: this build has no TLS
    /// client for the reference's HTTPS upgrade.
    pub async fn get_v1(&self, url: &str) -> Result<Vec<u8>, String> {
        let r = self
            .request(
                "GET",
                url,
                &[("Accept", "application/vnd.nsq; version=1.0")],
                b"",
            )
            .await?;
        check_status(url, r)
    }

    /// `POSTV1`: success is a 200 (body ignored).
    pub async fn post_v1(&self, url: &str) -> Result<(), String> {
        let r = self
            .request(
                "POST",
                url,
                &[("Accept", "application/vnd.nsq; version=1.0")],
                b"",
            )
            .await?;
        check_status(url, r).map(|_| ())
    }
}

fn check_status(url: &str, r: Response) -> Result<Vec<u8>, String> {
    if r.status == 200 {
        return Ok(r.body);
    }
    crate::metrics::request_failed(url, crate::metrics::Failure::Status);
    if r.status == 403 {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&r.body) {
            if let Some(port) = v.get("https_port").and_then(serde_json::Value::as_i64) {
                return Err(format!(
                    "{url} requires HTTPS (https_port {port}); TLS upstreams are not supported by this nsqadmin"
                ));
            }
        }
    }
    Err(format!(
        "got response {} {}",
        r.status_line,
        go_quote(&r.body)
    ))
}

/// Go's `net.OpError` text for a failed dial.
fn dial_error(hp: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {hp}: connect: connection refused")
        }
        _ => format!("dial tcp {hp}: {}", io_text(e)),
    }
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

/// Splits a raw HTTP/1.x answer into status, headers and (de-chunked) body.
fn parse_response(raw: &[u8], head_only: bool) -> Result<Response, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "malformed HTTP response".to_string())?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(2, ' ');
    let _version = parts.next();
    let status_text = parts.next().unwrap_or("").trim().to_string();
    let status: u16 = status_text
        .split(' ')
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            format!(
                "malformed HTTP status code {}",
                go_quote(status_text.as_bytes())
            )
        })?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = if head_only {
        Vec::new()
    } else {
        raw[end + 4..].to_vec()
    };
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.to_ascii_lowercase().contains("chunked")
    });
    if head_only {
        // A HEAD answer announces a length but carries no body.
    } else if chunked {
        body = dechunk(&body)?;
    } else if let Some(len) = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse::<usize>().ok())
    {
        if body.len() < len {
            return Err("unexpected EOF".to_string());
        }
        body.truncate(len);
    }
    Ok(Response {
        status,
        status_line: status_text,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(b.len());
    loop {
        let nl = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("unexpected EOF")?;
        let size_text = String::from_utf8_lossy(&b[..nl]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| "malformed chunked encoding")?;
        b = &b[nl + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("unexpected EOF".to_string());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Standard base64 (for Basic auth from URL user info).
pub fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for c in input.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if c.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// Decodes standard base64 (Basic auth headers); `None` if malformed.
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    for c in s.chunks(4) {
        let mut n = 0u32;
        for (i, &b) in c.iter().enumerate() {
            n |= val(b)? << (18 - 6 * i);
        }
        match c.len() {
            4 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]),
            3 => out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8]),
            2 => out.push((n >> 16) as u8),
            _ => return None,
        }
    }
    Some(out)
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~') {
            out.push(c as char);
        } else if c == b' ' {
            out.push('+');
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://u:p@h:1/render?x=1").unwrap();
        assert_eq!(u.userinfo.as_deref(), Some("u:p"));
        assert_eq!(u.host_port, "h:1");
        assert_eq!(u.path_query, "/render?x=1");
        assert_eq!(Url::parse("http://[::1]").unwrap().host_port, "[::1]:80");
        assert_eq!(Url::parse("https://g").unwrap().host_port, "g:443");
        assert!(Url::parse("nope").is_err());
    }

    #[test]
    fn responses() {
        let r = parse_response(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 5\r\n\r\nhello--",
            false,
        )
        .unwrap();
        assert_eq!((r.status, r.status_line.as_str()), (404, "404 Not Found"));
        assert_eq!(r.body, b"hello");
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            false,
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
        let e = check_status("u", r_with(404, b"{\"message\":\"TOPIC_NOT_FOUND\"}")).unwrap_err();
        assert_eq!(
            e,
            "got response 404 Not Found \"{\\\"message\\\":\\\"TOPIC_NOT_FOUND\\\"}\""
        );
    }

    fn r_with(status: u16, body: &[u8]) -> Response {
        Response {
            status,
            status_line: format!("{status} Not Found"),
            headers: vec![],
            body: body.to_vec(),
        }
    }

    #[test]
    fn encodings() {
        assert_eq!(base64(b"alice:pw"), "YWxpY2U6cHc=");
        assert_eq!(base64_decode("YWxpY2U6cHc=").unwrap(), b"alice:pw");
        assert_eq!(base64_decode("YQ").unwrap(), b"a");
        assert_eq!(query_escape("a b/#c"), "a+b%2F%23c");
    }

    #[tokio::test]
    async fn refused() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let c = HttpClient {
            connect_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(1),
        };
        let url = format!("http://{addr}/topics");
        let e = c.get_v1(&url).await.unwrap_err();
        assert_eq!(
            e,
            format!("Get \"{url}\": dial tcp {addr}: connect: connection refused")
        );
    }
}
