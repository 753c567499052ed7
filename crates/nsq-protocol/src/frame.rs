//! Server → client frames: `[4-byte size][4-byte frame type][data]`, size = 4 + len(data).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::message::{put_header, MessageId, MESSAGE_HEADER_LEN};

/// The frame type field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum FrameType {
    Response = 0,
    Error = 1,
    Message = 2,
}

impl FrameType {
    pub fn from_i32(v: i32) -> Option<Self> {
        match v {
            0 => Some(FrameType::Response),
            1 => Some(FrameType::Error),
            2 => Some(FrameType::Message),
            _ => None,
        }
    }
}

/// Data of the heartbeat response frame.
pub const HEARTBEAT: &[u8] = b"_heartbeat_";
/// Data of the usual success response.
pub const OK: &[u8] = b"OK";
/// Data of the CLS response.
pub const CLOSE_WAIT: &[u8] = b"CLOSE_WAIT";

/// Appends one frame of any type.
pub fn put_frame(buf: &mut impl BufMut, frame_type: FrameType, data: &[u8]) {
    buf.put_u32(4 + data.len() as u32);
    buf.put_i32(frame_type as i32);
    buf.put_slice(data);
}

/// Appends a response frame (type 0).
pub fn put_response(buf: &mut impl BufMut, data: &[u8]) {
    put_frame(buf, FrameType::Response, data)
}

/// Appends an error frame (type 1).
pub fn put_error(buf: &mut impl BufMut, data: &[u8]) {
    put_frame(buf, FrameType::Error, data)
}

/// Appends the size, type and 26-byte message header of a message frame whose body
/// (`body_len` bytes) the caller writes next — by copy or as its own `IoSlice`.
pub fn put_message_header(
    buf: &mut impl BufMut,
    timestamp_ns: i64,
    attempts: u16,
    id: &MessageId,
    body_len: usize,
) {
    buf.put_u32((4 + MESSAGE_HEADER_LEN + body_len) as u32);
    buf.put_i32(FrameType::Message as i32);
    put_header(buf, timestamp_ns, attempts, id);
}

/// Appends a whole message frame.
pub fn put_message(
    buf: &mut impl BufMut,
    timestamp_ns: i64,
    attempts: u16,
    id: &MessageId,
    body: &[u8],
) {
    put_message_header(buf, timestamp_ns, attempts, id, body.len());
    buf.put_slice(body);
}

/// A frame as a client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub frame_type: i32,
    pub data: Bytes,
}

/// Why [`take_frame`] refused the bytes at the front of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The size field is below 4: no room for the frame type.
    #[error("invalid frame size {0}")]
    InvalidSize(usize),
}

/// For callers that carry errors as text (`?` into a `Result<_, String>`).
impl From<FrameError> for String {
    fn from(e: FrameError) -> String {
        e.to_string()
    }
}

/// Client side: takes one whole frame off the front of `buf`, or `None` if more bytes are needed.
/// Returns `Err` for a size below 4 (no room for the type field).
pub fn take_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    if size < 4 {
        return Err(FrameError::InvalidSize(size));
    }
    if buf.len() < 4 + size {
        return Ok(None);
    }
    buf.advance(4);
    let frame_type = buf.get_i32();
    let data = buf.split_to(size - 4).freeze();
    Ok(Some(Frame { frame_type, data }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_frame_bytes() {
        let mut b = Vec::new();
        put_response(&mut b, OK);
        assert_eq!(b, [0, 0, 0, 6, 0, 0, 0, 0, b'O', b'K']);
    }

    #[test]
    fn heartbeat_and_close_wait_bytes() {
        let mut b = Vec::new();
        put_response(&mut b, HEARTBEAT);
        assert_eq!(&b[..8], &[0, 0, 0, 0x0f, 0, 0, 0, 0]);
        let mut b = Vec::new();
        put_response(&mut b, CLOSE_WAIT);
        assert_eq!(&b[..8], &[0, 0, 0, 0x0e, 0, 0, 0, 0]);
    }

    #[test]
    fn error_frame_size() {
        let mut b = Vec::new();
        put_error(&mut b, b"E_INVALID invalid command FOO");
        assert_eq!(&b[..8], &[0, 0, 0, 0x21, 0, 0, 0, 1]);
    }

    #[test]
    fn size_below_four_is_refused_and_partial_frames_wait() {
        let mut b = BytesMut::from(&[0u8, 0, 0][..]);
        assert_eq!(take_frame(&mut b), Ok(None));
        b.extend_from_slice(&[3, 0, 0, 0]);
        let e = take_frame(&mut b).unwrap_err();
        assert_eq!(e, FrameError::InvalidSize(3));
        assert_eq!(e.to_string(), "invalid frame size 3");
        assert_eq!(String::from(e), "invalid frame size 3");
        let mut b = BytesMut::from(&[0u8, 0, 0, 6, 0, 0, 0, 0, b'O'][..]);
        assert_eq!(take_frame(&mut b), Ok(None));
        assert_eq!(b.len(), 9);
    }

    #[test]
    fn message_frame_round_trip() {
        let id = MessageId(*b"18acd669e6269000");
        let mut b = BytesMut::new();
        put_message(&mut b, 7, 1, &id, b"m1");
        assert_eq!(&b[..4], &[0, 0, 0, 0x20]);
        let f = take_frame(&mut b).unwrap().unwrap();
        assert_eq!(f.frame_type, 2);
        let m = crate::message::decode(f.data).unwrap();
        assert_eq!(
            (m.timestamp_ns, m.attempts, m.id, &m.body[..]),
            (7, 1, id, &b"m1"[..])
        );
        assert!(b.is_empty());
    }
}
