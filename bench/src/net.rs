//! Connection helpers: dial nsqd (1 s timeout, like the Go tools' `net.DialTimeout`), send the
//! V2 magic, and wait for a command's response frame while answering `_heartbeat_` with `NOP`.

use std::time::Duration;

use bytes::BytesMut;
use nsq_protocol::frame::{take_frame, FrameType, HEARTBEAT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::wire::{MAGIC_V2, NOP};

/// Connects to `addr`, disables Nagle and sends the V2 magic.
pub async fn connect(addr: &str) -> Result<TcpStream, String> {
    let mut stream = tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr))
        .await
        .map_err(|_| format!("dial tcp {addr}: i/o timeout"))?
        .map_err(|e| format!("dial tcp {addr}: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("set TCP_NODELAY: {e}"))?;
    stream
        .write_all(MAGIC_V2)
        .await
        .map_err(|e| format!("write magic: {e}"))?;
    Ok(stream)
}

/// Reads frames from `stream` (buffered in `rbuf`) until a response frame other than
/// `_heartbeat_` arrives and returns its data. Heartbeats are answered with `NOP`; an error
/// frame, a message frame, EOF or an I/O error are returned as `Err`.
pub async fn read_response(stream: &mut TcpStream, rbuf: &mut BytesMut) -> Result<Vec<u8>, String> {
    loop {
        while let Some(frame) = take_frame(rbuf)? {
            match FrameType::from_i32(frame.frame_type) {
                Some(FrameType::Response) if frame.data[..] == *HEARTBEAT => {
                    stream
                        .write_all(NOP)
                        .await
                        .map_err(|e| format!("write NOP: {e}"))?;
                }
                Some(FrameType::Response) => return Ok(frame.data.to_vec()),
                Some(FrameType::Error) => {
                    return Err(String::from_utf8_lossy(&frame.data).into_owned())
                }
                Some(FrameType::Message) => return Err("unexpected message frame".to_string()),
                None => return Err(format!("unknown frame type {}", frame.frame_type)),
            }
        }
        if rbuf.capacity() - rbuf.len() < 512 {
            rbuf.reserve(4096);
        }
        let n = stream
            .read_buf(rbuf)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err("connection closed by nsqd".to_string());
        }
    }
}

/// Reads the response to a command and insists that it is `OK`.
pub async fn expect_ok(
    stream: &mut TcpStream,
    rbuf: &mut BytesMut,
    what: &str,
) -> Result<(), String> {
    let resp = read_response(stream, rbuf)
        .await
        .map_err(|e| format!("{what}: {e}"))?;
    if resp == b"OK" {
        Ok(())
    } else {
        Err(format!(
            "{what}: unexpected response {:?}",
            String::from_utf8_lossy(&resp)
        ))
    }
}
