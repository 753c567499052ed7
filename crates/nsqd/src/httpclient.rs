//! A minimal HTTP/1.1 client for nsqd's own outgoing calls (lookupd `/channels`, auth servers):
//! one request per connection, `Connection: close`, bounded by connect and total timeouts.
//! Small and dependency-free on purpose: these calls are rare and simple.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A response: status code and body (headers are not needed by our callers).
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// `GET http://<host_port><path_and_query>` with the given timeouts.
pub async fn get(
    host_port: &str,
    path_and_query: &str,
    connect_timeout: Duration,
    request_timeout: Duration,
) -> Result<Response, String> {
    let mut stream = timeout(connect_timeout, TcpStream::connect(host_port))
        .await
        .map_err(|_| format!("dial {host_port}: i/o timeout"))?
        .map_err(|e| format!("dial {host_port}: {e}"))?;
    let req = format!(
        "GET {path_and_query} HTTP/1.1\r\nHost: {host_port}\r\nUser-Agent: nsqd/{}\r\nAccept: application/vnd.nsq; version=1.0\r\nConnection: close\r\n\r\n",
        nsq_protocol::VERSION
    );
    let exchange = async {
        stream.write_all(req.as_bytes()).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = timeout(request_timeout, exchange)
        .await
        .map_err(|_| format!("GET {host_port}{path_and_query}: timeout"))?
        .map_err(|e| format!("GET {host_port}{path_and_query}: {e}"))?;
    parse_response(&raw)
}

/// Parses a whole `Connection: close` response (Content-Length or chunked body).
fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let head_end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("malformed HTTP response")?;
    let head = std::str::from_utf8(&raw[..head_end]).map_err(|_| "malformed HTTP response")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("malformed HTTP status line")?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let body = &raw[head_end + 4..];
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Ok(Response { status, body })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n").ok_or("bad chunk")?;
        let size_str = std::str::from_utf8(&b[..eol]).map_err(|_| "bad chunk")?;
        let size = usize::from_str_radix(size_str.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| "bad chunk size")?;
        b = &b[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// Percent-encodes a query value (Go `url.QueryEscape`).
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &c in s.as_bytes() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(c as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{c:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK").unwrap();
        assert_eq!((r.status, &r.body[..]), (200, &b"OK"[..]));
        let r = parse_response(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!((r.status, &r.body[..]), (404, &b"abcde"[..]));
    }

    #[test]
    fn escapes_like_go() {
        assert_eq!(query_escape("t#ephemeral a"), "t%23ephemeral+a");
    }
}
