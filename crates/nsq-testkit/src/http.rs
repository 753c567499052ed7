//! A raw HTTP/1.1 client for tests: one request per connection (`Connection: close`), the
//! response parsed byte for byte, so status lines, headers and bodies can be asserted
//! exactly. [`request`] is for tests on a Tokio runtime (in-process daemons), [`http_get`] /
//! [`http_post`] / [`http_request`] for blocking tests of the binaries; both build the request
//! with [`encode_request`] and read it with [`parse_response`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command as Process;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    /// Header names lowercased, in received order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.text()))
    }
}

impl HttpResponse {
    /// A "v1" error: status, JSON headers, `{"message":…}`.
    #[track_caller]
    pub fn assert_err(&self, status: u16, msg: &str) {
        assert_eq!(
            (self.status, self.text()),
            (status, format!("{{\"message\":\"{msg}\"}}"))
        );
        self.assert_v1_type(Some("application/json; charset=utf-8"));
    }

    /// A "v1" success with no data.
    #[track_caller]
    pub fn assert_empty_ok(&self) {
        assert_eq!((self.status, self.text()), (200, String::new()));
        assert_eq!(self.header("content-length"), Some("0"));
        self.assert_v1_type(None);
    }

    /// A "v1" text success (`OK`).
    #[track_caller]
    pub fn assert_text_ok(&self, text: &str) {
        assert_eq!((self.status, self.text()), (200, text.to_string()));
        self.assert_v1_type(Some("text/plain; charset=utf-8"));
    }

    /// A "v1" JSON success with exactly `body`.
    #[track_caller]
    pub fn assert_json(&self, body: &str) {
        assert_eq!((self.status, self.text()), (200, body.to_string()));
        self.assert_v1_type(Some("application/json; charset=utf-8"));
    }

    /// The `Content-Type` and the `X-NSQ-Content-Type` of a "v1" answer.
    #[track_caller]
    fn assert_v1_type(&self, content_type: Option<&str>) {
        assert_eq!(self.header("content-type"), content_type);
        assert_eq!(self.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    }
}

/// The bytes of one request with `Host` and `Connection: close`. A body gets a
/// `Content-Length` unless `headers` set one, or set `Transfer-Encoding: chunked`, in which
/// case it is sent in chunks of 7 bytes.
pub fn encode_request(
    method: &str,
    target: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    let has = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && *v == "chunked");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        if !chunked && !has("content-length") {
            head.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    let body = body.unwrap_or_default();
    if chunked {
        for c in body.chunks(7) {
            out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
            out.extend_from_slice(c);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"0\r\n\r\n");
    } else {
        out.extend_from_slice(body);
    }
    out
}

/// Sends one request on a Tokio runtime (always with a body, empty or not) and reads the whole
/// response (at most 10 s).
pub async fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.write_all(&encode_request(
        method,
        target,
        "localhost",
        headers,
        Some(body),
    ))
    .await
    .expect("write request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("response within 10s")
        .ok();
    parse_response(&raw, method == "HEAD").unwrap_or_else(|e| {
        panic!(
            "{method} {target}: bad response ({e}): {:?}",
            String::from_utf8_lossy(&raw)
        )
    })
}

/// `GET path` (path includes the query string).
pub fn http_get(addr: SocketAddr, path: &str) -> HttpResponse {
    http_request(addr, "GET", path, None)
}

/// `POST path` with `body`.
pub fn http_post(addr: SocketAddr, path: &str, body: &[u8]) -> HttpResponse {
    http_request(addr, "POST", path, Some(body))
}

/// One HTTP/1.1 request on a fresh connection with `Connection: close`; understands
/// `Content-Length`, chunked and read-to-close bodies.
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> HttpResponse {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let req = encode_request(method, path, &addr.to_string(), &[], body);
    s.write_all(&req).expect("write request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("{method} {path}: read response: {e}"));
    parse_response(&raw, method == "HEAD").unwrap_or_else(|e| {
        panic!(
            "{method} {path}: bad response ({e}): {:?}",
            String::from_utf8_lossy(&raw)
        )
    })
}

/// Why bytes read from a server are not one whole HTTP/1.1 response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadResponse {
    #[error("no end of headers")]
    NoHeaderEnd,
    #[error("headers are not UTF-8")]
    NotUtf8(#[from] std::str::Utf8Error),
    #[error("bad status line {0:?}")]
    StatusLine(String),
    #[error("bad content-length {0:?}")]
    ContentLength(String),
    #[error("bad chunk size {0:?}")]
    ChunkSize(String),
    #[error("body shorter than announced")]
    Short,
}

/// Parses a whole response read to EOF: status, headers, and the body by `Content-Length`,
/// chunked encoding or to the end (none after `HEAD`).
pub fn parse_response(raw: &[u8], head_only: bool) -> Result<HttpResponse, BadResponse> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(BadResponse::NoHeaderEnd)?;
    let head = std::str::from_utf8(&raw[..head_end])?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or(BadResponse::NoHeaderEnd)?;
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| BadResponse::StatusLine(status_line.to_string()))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_ascii_lowercase(), v.trim().to_string()))
        })
        .collect();
    let rest = &raw[head_end + 4..];
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let body = if head_only {
        Vec::new()
    } else if get("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        decode_chunked(rest)?
    } else if let Some(len) = get("content-length") {
        let len: usize = len
            .parse()
            .map_err(|_| BadResponse::ContentLength(len.to_string()))?;
        rest.get(..len).ok_or(BadResponse::Short)?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

fn decode_chunked(mut rest: &[u8]) -> Result<Vec<u8>, BadResponse> {
    let mut body = Vec::new();
    loop {
        let eol = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or(BadResponse::Short)?;
        let size_text = std::str::from_utf8(&rest[..eol])?;
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| BadResponse::ChunkSize(size_text.to_string()))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        body.extend_from_slice(rest.get(..size).ok_or(BadResponse::Short)?);
        rest = rest.get(size + 2..).ok_or(BadResponse::Short)?;
    }
}

/// Runs `curl -s <args>` (literally what users type) and returns its stdout.
pub fn curl(args: &[&str]) -> String {
    let out = Process::new("curl")
        .arg("-s")
        .args(args)
        .output()
        .expect("run curl (is it installed?)");
    assert!(out.status.success(), "curl {args:?} failed: {}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True if `prog` is found on `PATH`.
pub fn have_program(prog: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(prog).is_file()))
}
