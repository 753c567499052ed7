//! Shared test harness: nsqlookupd in-process on 127.0.0.1:0, a raw V1 TCP client that
//! reads size-prefixed frames, and a tiny raw HTTP/1.1 client (as nsqd's HTTP tests).

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use nsqlookupd::{NsqlookupdHandle, NsqlookupdOptions};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The broadcast address the test daemons report in IDENTIFY.
pub const BROADCAST: &str = "lookup1.example";

pub struct Lookupd {
    pub h: NsqlookupdHandle,
}

impl Lookupd {
    pub async fn start() -> Lookupd {
        Self::start_with(|_| {}).await
    }

    pub async fn start_with(f: impl FnOnce(&mut NsqlookupdOptions)) -> Lookupd {
        let mut o = NsqlookupdOptions::with_hostname(BROADCAST);
        o.tcp_address = "127.0.0.1:0".into();
        o.http_address = "127.0.0.1:0".into();
        f(&mut o);
        Lookupd {
            h: nsqlookupd::start(o).await.unwrap(),
        }
    }

    pub async fn connect(&self) -> Client {
        Client {
            s: TcpStream::connect(self.h.tcp_addr()).await.unwrap(),
        }
    }

    /// A connected client that sent the magic and IDENTIFYed with `body`.
    pub async fn identified(&self, body: &str) -> Client {
        let mut c = self.connect().await;
        c.send(b"  V1").await;
        c.identify(body.as_bytes()).await;
        let reply = c.frame().await.expect("IDENTIFY reply");
        assert!(
            reply.starts_with(b"{"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        c
    }

    pub async fn req(&self, method: &str, target: &str) -> Resp {
        request(self.h.http_addr(), method, target, &[], b"").await
    }

    pub async fn get(&self, target: &str) -> Resp {
        self.req("GET", target).await
    }

    pub async fn post(&self, target: &str) -> Resp {
        self.req("POST", target).await
    }

    /// GET and parse a JSON 200.
    pub async fn json(&self, target: &str) -> Value {
        let r = self.get(target).await;
        assert_eq!(r.status, 200, "{target}: {}", r.text());
        serde_json::from_slice(&r.body).unwrap()
    }
}

/// An nsqd-like IDENTIFY body.
pub fn nsqd_body(addr: &str, tcp: u16, http: u16) -> String {
    format!(
        r#"{{"broadcast_address":"{addr}","hostname":"{addr}-host","http_port":{http},"tcp_port":{tcp},"version":"1.3.0"}}"#
    )
}

pub struct Client {
    pub s: TcpStream,
}

impl Client {
    pub async fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).await.unwrap();
    }

    /// `IDENTIFY\n[size][body]`.
    pub async fn identify(&mut self, body: &[u8]) {
        let mut b = b"IDENTIFY\n".to_vec();
        b.extend_from_slice(&(body.len() as u32).to_be_bytes());
        b.extend_from_slice(body);
        self.send(&b).await;
    }

    /// One response frame's data; `None` at EOF.
    pub async fn frame(&mut self) -> Option<Vec<u8>> {
        let read = async {
            let mut size = [0u8; 4];
            self.s.read_exact(&mut size).await.ok()?;
            let mut data = vec![0u8; u32::from_be_bytes(size) as usize];
            self.s.read_exact(&mut data).await.ok()?;
            Some(data)
        };
        tokio::time::timeout(Duration::from_secs(5), read)
            .await
            .expect("a frame or EOF within 5s")
    }

    /// Sends `cmd` and returns the response data as text.
    pub async fn cmd(&mut self, cmd: &str) -> String {
        self.send(cmd.as_bytes()).await;
        let f = self.frame().await.expect("a response");
        String::from_utf8(f).unwrap()
    }

    /// Reads raw bytes until EOF (asserting the server closes).
    pub async fn rest(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), self.s.read_to_end(&mut out))
            .await
            .expect("server closes within 5s")
            .ok();
        out
    }

    /// Asserts the next bytes are exactly one error frame with `text`, then EOF.
    pub async fn expect_fatal(&mut self, text: &str) {
        let raw = self.rest().await;
        assert_eq!(
            String::from_utf8_lossy(&raw),
            String::from_utf8_lossy(&frame(text.as_bytes()))
        );
    }
}

/// `[4-byte BE size][data]`.
pub fn frame(data: &[u8]) -> Vec<u8> {
    let mut b = (data.len() as u32).to_be_bytes().to_vec();
    b.extend_from_slice(data);
    b
}

#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A "v1" error: status, JSON headers, `{"message":…}`.
    #[track_caller]
    pub fn assert_err(&self, status: u16, msg: &str) {
        assert_eq!(
            (self.status, self.text()),
            (status, format!("{{\"message\":\"{msg}\"}}"))
        );
        assert_eq!(
            self.header("content-type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(self.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    }

    /// A "v1" success with no data.
    #[track_caller]
    pub fn assert_empty_ok(&self) {
        assert_eq!((self.status, self.text()), (200, String::new()));
        assert_eq!(self.header("content-length"), Some("0"));
        assert_eq!(self.header("content-type"), None);
        assert_eq!(self.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    }

    /// A "v1" JSON success with exactly `body`.
    #[track_caller]
    pub fn assert_json(&self, body: &str) {
        assert_eq!((self.status, self.text()), (200, body.to_string()));
        assert_eq!(
            self.header("content-type"),
            Some("application/json; charset=utf-8")
        );
        assert_eq!(self.header("x-nsq-content-type"), Some("nsq; version=1.0"));
    }
}

/// Sends one request (`Connection: close`) and reads the whole response.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Resp {
    let mut head =
        format!("{method} {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("response within 10s")
        .ok();
    parse_response(&raw, method == "HEAD")
}

fn parse_response(raw: &[u8], head: bool) -> Resp {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head_text = String::from_utf8(raw[..end].to_vec()).unwrap();
    let mut lines = head_text.split("\r\n");
    let status_line = lines.next().unwrap();
    let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let rest = &raw[end + 4..];
    let mut resp = Resp {
        status,
        headers,
        body: Vec::new(),
    };
    if head {
        return resp;
    }
    if resp.header("transfer-encoding") == Some("chunked") {
        let mut rest = rest;
        loop {
            let nl = rest.windows(2).position(|w| w == b"\r\n").unwrap();
            let n = usize::from_str_radix(std::str::from_utf8(&rest[..nl]).unwrap(), 16).unwrap();
            rest = &rest[nl + 2..];
            if n == 0 {
                break;
            }
            resp.body.extend_from_slice(&rest[..n]);
            rest = &rest[n + 2..];
        }
    } else if let Some(cl) = resp.header("content-length") {
        let n: usize = cl.parse().unwrap();
        resp.body = rest[..n].to_vec();
    } else {
        resp.body = rest.to_vec();
    }
    resp
}

/// Polls `f` every 20 ms until it is true (at most 5 s).
pub async fn eventually(mut f: impl AsyncFnMut() -> bool) {
    for _ in 0..250 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("condition not reached within 5s");
}
