//! Raw size-prefixed framing on a Tokio TCP stream, for in-process tests that assert exact
//! bytes: nsqd's V2 frames (`[size][type][data]`, nsqd/protocol_v2.go) and nsqlookupd's V1
//! replies (`[size][data]`, nsqlookupd/lookup_protocol_v1.go).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use nsq_protocol::frame::{take_frame, Frame, HEARTBEAT};
use nsq_protocol::message::DecodedMessage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a read waits for the server.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// `<cmd>[4-byte BE size][body]`: a command with a body (`PUB t\n`, `IDENTIFY\n`, …).
pub fn sized(cmd: &str, body: &[u8]) -> Vec<u8> {
    let mut v = cmd.as_bytes().to_vec();
    v.extend_from_slice(&(body.len() as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

/// `[4-byte BE size][data]`: one V1 reply as nsqlookupd writes it.
pub fn frame(data: &[u8]) -> Vec<u8> {
    sized("", data)
}

/// The bytes of a V2 frame of `frame_type` (0 response, 1 error, 2 message).
pub fn v2_frame(frame_type: i32, data: &[u8]) -> Vec<u8> {
    let mut v = frame_type.to_be_bytes().to_vec();
    v.extend_from_slice(data);
    frame(&v)
}

/// A TCP connection read through a buffer, so whole frames and the bytes after them can be
/// taken in any order.
pub struct FrameConn {
    pub s: TcpStream,
    buf: BytesMut,
}

impl FrameConn {
    /// Connects and sends `magic` (`b"  V2"`, `b"  V1"`, or nothing).
    pub async fn connect(addr: SocketAddr, magic: &[u8]) -> FrameConn {
        let mut s = TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        s.write_all(magic).await.unwrap();
        FrameConn::new(s)
    }

    /// Reads an already connected stream.
    pub fn new(s: TcpStream) -> FrameConn {
        FrameConn {
            s,
            buf: BytesMut::new(),
        }
    }

    pub async fn send(&mut self, b: &[u8]) {
        self.s.write_all(b).await.unwrap();
    }

    /// A command line (`\n` added) with an optional size-prefixed body.
    pub async fn cmd(&mut self, line: &str, body: Option<&[u8]>) {
        let mut b = format!("{line}\n").into_bytes();
        if let Some(body) = body {
            b = sized(&format!("{line}\n"), body);
        }
        self.send(&b).await;
    }

    /// Reads more bytes into the buffer; false at EOF (or a reset).
    async fn fill(&mut self) -> bool {
        let n = tokio::time::timeout(READ_TIMEOUT, self.s.read_buf(&mut self.buf))
            .await
            .expect("data within 10s")
            .unwrap_or(0);
        n > 0
    }

    /// One size-prefixed frame's data (V1); `None` at EOF.
    pub async fn data_frame(&mut self) -> Option<Vec<u8>> {
        loop {
            if self.buf.len() >= 4 {
                let n = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                if self.buf.len() >= 4 + n {
                    self.buf.advance(4);
                    return Some(self.buf.split_to(n).to_vec());
                }
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// A whole V2 frame already read into the buffer, without reading the socket again.
    pub fn buffered_frame(&mut self) -> Option<Frame> {
        take_frame(&mut self.buf).unwrap()
    }

    /// The next V2 frame, heartbeats included; `None` at EOF.
    pub async fn any_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(f) = take_frame(&mut self.buf).unwrap() {
                return Some(f);
            }
            if !self.fill().await {
                return None;
            }
        }
    }

    /// The next V2 frame that is not a heartbeat; `None` at EOF.
    pub async fn frame(&mut self) -> Option<Frame> {
        loop {
            let f = self.any_frame().await?;
            if !(f.frame_type == 0 && f.data == HEARTBEAT) {
                return Some(f);
            }
        }
    }

    /// Everything until the server closes (at most 10 s).
    pub async fn rest(&mut self) -> Vec<u8> {
        let mut out = self.buf.split().to_vec();
        tokio::time::timeout(READ_TIMEOUT, self.s.read_to_end(&mut out))
            .await
            .expect("server closes within 10s")
            .ok();
        out
    }

    /// Sends `b` (one or more commands) and expects the response `OK`.
    pub async fn send_ok(&mut self, b: &[u8]) {
        self.send(b).await;
        self.expect_response(b"OK").await;
    }

    /// The next frame is a response with exactly `data`.
    pub async fn expect_response(&mut self, data: &[u8]) {
        self.expect_frame(0, data).await;
    }

    /// The next frame is an error with exactly `text`.
    pub async fn expect_error(&mut self, text: &str) {
        self.expect_frame(1, text.as_bytes()).await;
    }

    async fn expect_frame(&mut self, frame_type: i32, data: &[u8]) {
        let f = self.frame().await.expect("a frame");
        assert_eq!(
            (f.frame_type, String::from_utf8_lossy(&f.data).to_string()),
            (frame_type, String::from_utf8_lossy(data).to_string())
        );
    }

    /// A fatal error: the error frame, then the server closes.
    pub async fn expect_fatal(&mut self, text: &str) {
        self.expect_error(text).await;
        self.expect_closed().await;
    }

    /// The server closes without sending another frame.
    pub async fn expect_closed(&mut self) {
        let f = self.frame().await;
        assert!(f.is_none(), "connection must be closed, got {f:?}");
    }

    /// The next frame is a message.
    pub async fn message(&mut self) -> DecodedMessage {
        let f = self.frame().await.expect("a message frame");
        assert_eq!(f.frame_type, 2, "expected message, got {f:?}");
        nsq_protocol::message::decode(f.data).unwrap()
    }
}
