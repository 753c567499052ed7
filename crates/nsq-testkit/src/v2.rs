//! A blocking raw V2 TCP client (nsqd/protocol_v2.go) built on the frame and command codecs
//! of `nsq-protocol`: [`V2Conn`] sends commands and reads frames with deadlines, answering
//! nothing on its own (heartbeats are skipped where a method says so).

use std::collections::HashSet;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use nsq_protocol::command::{encode_command, Command};
use nsq_protocol::frame::{take_frame, Frame, HEARTBEAT};
use nsq_protocol::message::{decode, DecodedMessage};
use nsq_protocol::MessageId;

/// Why a frame read did not produce a frame.
#[derive(Debug)]
pub enum ReadError {
    /// The server closed the connection (EOF or reset).
    Closed,
    /// Nothing complete arrived in time.
    Timeout,
    Io(std::io::Error),
    /// Undecodable bytes.
    Protocol(String),
}

/// A frame with a readable Debug.
pub fn describe(f: &Frame) -> String {
    let kind = match f.frame_type {
        0 => "response",
        1 => "error",
        2 => "message",
        _ => "unknown",
    };
    format!("{kind} frame {:?}", String::from_utf8_lossy(&f.data))
}

/// A blocking raw V2 protocol connection.
pub struct V2Conn {
    stream: TcpStream,
    buf: BytesMut,
    /// Answer `_heartbeat_` with `NOP` automatically while waiting for something else.
    pub auto_nop: bool,
}

impl V2Conn {
    /// Connects and sends the `"  V2"` magic.
    pub fn connect(addr: SocketAddr) -> V2Conn {
        let mut c = V2Conn::connect_raw(addr);
        c.write_raw(nsq_protocol::MAGIC_V2).expect("send magic");
        c
    }

    /// Connects without sending anything.
    pub fn connect_raw(addr: SocketAddr) -> V2Conn {
        let stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).expect("nodelay");
        V2Conn {
            stream,
            buf: BytesMut::with_capacity(64 * 1024),
            auto_nop: true,
        }
    }

    /// Writes bytes as they are.
    pub fn write_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Encodes and writes commands in one write.
    pub fn send(&mut self, cmds: &[Command]) {
        let mut out = BytesMut::new();
        for c in cmds {
            encode_command(&mut out, c);
        }
        self.write_raw(&out)
            .unwrap_or_else(|e| panic!("send {cmds:?}: {e}"));
    }

    /// Reads once (waiting up to `timeout`) and appends to the buffer.
    fn fill(&mut self, timeout: Duration) -> Result<(), ReadError> {
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))
            .map_err(ReadError::Io)?;
        let mut tmp = [0u8; 64 * 1024];
        match self.stream.read(&mut tmp) {
            Ok(0) => Err(ReadError::Closed),
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(())
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(ReadError::Timeout)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionReset
                        | ErrorKind::ConnectionAborted
                        | ErrorKind::BrokenPipe
                ) =>
            {
                Err(ReadError::Closed)
            }
            Err(e) => Err(ReadError::Io(e)),
        }
    }

    /// The next frame of any kind (heartbeats included), waiting up to `timeout`.
    pub fn read_frame(&mut self, timeout: Duration) -> Result<Frame, ReadError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(f) =
                take_frame(&mut self.buf).map_err(|e| ReadError::Protocol(e.to_string()))?
            {
                return Ok(f);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ReadError::Timeout);
            }
            self.fill(left)?;
        }
    }

    /// The next frame that is not a heartbeat (answering heartbeats with NOP if `auto_nop`).
    pub fn read_non_heartbeat(&mut self, timeout: Duration) -> Result<Frame, ReadError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let f = self.read_frame(left)?;
            if f.frame_type == 0 && f.data == HEARTBEAT {
                if self.auto_nop {
                    let _ = self.write_raw(b"NOP\n");
                }
                continue;
            }
            return Ok(f);
        }
    }

    /// Waits for any frames, then returns every complete frame already received (at least one
    /// unless the wait timed out). Heartbeats are answered and left out.
    pub fn read_batch(&mut self, timeout: Duration) -> Result<Vec<Frame>, ReadError> {
        let first = self.read_non_heartbeat(timeout)?;
        let mut out = vec![first];
        while let Some(f) =
            take_frame(&mut self.buf).map_err(|e| ReadError::Protocol(e.to_string()))?
        {
            if f.frame_type == 0 && f.data == HEARTBEAT {
                if self.auto_nop {
                    let _ = self.write_raw(b"NOP\n");
                }
                continue;
            }
            out.push(f);
        }
        Ok(out)
    }

    /// Expects a response frame with exactly `data` (skipping heartbeats).
    pub fn expect_response(&mut self, data: &[u8]) {
        match self.read_non_heartbeat(Duration::from_secs(15)) {
            Ok(f) if f.frame_type == 0 && f.data == data => {}
            Ok(f) => panic!(
                "expected response {:?}, got {}",
                String::from_utf8_lossy(data),
                describe(&f)
            ),
            Err(e) => panic!(
                "expected response {:?}, got {e:?}",
                String::from_utf8_lossy(data)
            ),
        }
    }

    pub fn expect_ok(&mut self) {
        self.expect_response(b"OK");
    }

    /// Expects an error frame with exactly `text` (skipping heartbeats).
    pub fn expect_error(&mut self, text: &[u8]) {
        match self.read_non_heartbeat(Duration::from_secs(15)) {
            Ok(f) if f.frame_type == 1 && f.data == text => {}
            Ok(f) => panic!(
                "expected error {:?}, got {}",
                String::from_utf8_lossy(text),
                describe(&f)
            ),
            Err(e) => panic!(
                "expected error {:?}, got {e:?}",
                String::from_utf8_lossy(text)
            ),
        }
    }

    /// Expects the server to close the connection within `timeout`, with no frame other than
    /// heartbeats before that.
    pub fn expect_closed(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_frame(left) {
                Err(ReadError::Closed) => return,
                Ok(f) if f.frame_type == 0 && f.data == HEARTBEAT => continue,
                Ok(f) => panic!("expected the connection to close, got {}", describe(&f)),
                Err(e) => panic!("expected the connection to close within {timeout:?}, got {e:?}"),
            }
        }
    }

    /// Expects an error frame with `text`, then the connection closing.
    pub fn expect_fatal(&mut self, text: &[u8]) {
        self.expect_error(text);
        self.expect_closed(Duration::from_secs(10));
    }

    /// IDENTIFY with a JSON body; returns the response frame (heartbeats skipped).
    pub fn identify(&mut self, json: &str) -> Frame {
        self.send(&[Command::Identify {
            body: Bytes::copy_from_slice(json.as_bytes()),
        }]);
        self.read_non_heartbeat(Duration::from_secs(15))
            .unwrap_or_else(|e| panic!("IDENTIFY {json}: {e:?}"))
    }

    /// SUB and expect OK.
    pub fn subscribe(&mut self, topic: &str, channel: &str) {
        self.send(&[Command::Sub {
            topic: topic.into(),
            channel: channel.into(),
        }]);
        self.expect_ok();
    }

    /// PUB and expect OK.
    pub fn publish(&mut self, topic: &str, body: &[u8]) {
        self.send(&[Command::Pub {
            topic: topic.into(),
            body: Bytes::copy_from_slice(body),
        }]);
        self.expect_ok();
    }

    /// MPUB and expect OK.
    pub fn mpublish(&mut self, topic: &str, bodies: Vec<Bytes>) {
        self.send(&[Command::Mpub {
            topic: topic.into(),
            bodies,
        }]);
        self.expect_ok();
    }

    /// DPUB and expect OK.
    pub fn dpublish(&mut self, topic: &str, defer_ms: i64, body: &[u8]) {
        self.send(&[Command::Dpub {
            topic: topic.into(),
            defer_ms,
            body: Bytes::copy_from_slice(body),
        }]);
        self.expect_ok();
    }

    pub fn rdy(&mut self, count: i64) {
        self.send(&[Command::Rdy { count }]);
    }

    pub fn fin(&mut self, id: &MessageId) {
        self.send(&[Command::Fin { id: *id }]);
    }

    pub fn req(&mut self, id: &MessageId, timeout_ms: i64) {
        self.send(&[Command::Req {
            id: *id,
            timeout_ms,
        }]);
    }

    pub fn touch(&mut self, id: &MessageId) {
        self.send(&[Command::Touch { id: *id }]);
    }

    /// The next message, or `None` if none arrives within `timeout`. Panics on any other
    /// frame or a closed connection.
    pub fn try_message(&mut self, timeout: Duration) -> Option<DecodedMessage> {
        match self.read_non_heartbeat(timeout) {
            Ok(f) if f.frame_type == 2 => Some(decode(f.data).expect("decodable message")),
            Ok(f) => panic!("expected a message, got {}", describe(&f)),
            Err(ReadError::Timeout) => None,
            Err(e) => panic!("expected a message, got {e:?}"),
        }
    }

    /// The next message; panics if none arrives within `timeout`.
    pub fn message(&mut self, timeout: Duration) -> DecodedMessage {
        self.try_message(timeout)
            .unwrap_or_else(|| panic!("no message within {timeout:?}"))
    }

    /// Waits up to `timeout` for messages and returns all that are already received. Empty on
    /// timeout; panics on a non-message frame or a closed connection.
    pub fn messages(&mut self, timeout: Duration) -> Vec<DecodedMessage> {
        match self.read_batch(timeout) {
            Ok(frames) => frames
                .into_iter()
                .map(|f| {
                    assert_eq!(f.frame_type, 2, "expected a message, got {}", describe(&f));
                    decode(f.data).expect("decodable message")
                })
                .collect(),
            Err(ReadError::Timeout) => Vec::new(),
            Err(e) => panic!("expected messages, got {e:?}"),
        }
    }

    /// Sends FIN for every ID in one write.
    pub fn fin_all<'a>(&mut self, ids: impl IntoIterator<Item = &'a MessageId>) {
        let cmds: Vec<Command> = ids.into_iter().map(|id| Command::Fin { id: *id }).collect();
        if !cmds.is_empty() {
            self.send(&cmds);
        }
    }

    /// The underlying socket (e.g. to shut it down abruptly).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }
}

/// A consumer that subscribes, then reads and FINs messages until `want` distinct bodies have
/// arrived or `timeout` passes. Returns every delivery as (body, attempts) in arrival order.
pub fn consume_all(
    addr: SocketAddr,
    topic: &str,
    channel: &str,
    rdy: i64,
    want: usize,
    timeout: Duration,
) -> Vec<(Bytes, u16)> {
    let mut c = V2Conn::connect(addr);
    c.subscribe(topic, channel);
    c.rdy(rdy);
    let mut seen: HashSet<Bytes> = HashSet::with_capacity(want);
    let mut out = Vec::with_capacity(want);
    let deadline = Instant::now() + timeout;
    while seen.len() < want {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let batch = c.messages(left.min(Duration::from_secs(1)));
        c.fin_all(batch.iter().map(|m| &m.id));
        for m in batch {
            seen.insert(m.body.clone());
            out.push((m.body, m.attempts));
        }
    }
    out
}
