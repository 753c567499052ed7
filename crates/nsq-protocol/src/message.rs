//! The NSQ message encoding: `[8-byte ns timestamp][2-byte attempts][16-byte hex ID][body]`.
//!
//! The same bytes are the payload of a message frame on the wire and of a diskqueue record.

use bytes::{BufMut, Bytes};

/// Length of the fixed message header (timestamp + attempts + ID).
pub const MESSAGE_HEADER_LEN: usize = 8 + 2 + 16;

/// A message ID as it travels on the wire: 16 ASCII lowercase hex characters.
///
/// Kept as the raw bytes (not parsed to an integer) because FIN/REQ/TOUCH compare the exact
/// bytes a client echoes; a value that is not hex simply is not in flight.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MessageId(pub [u8; 16]);

const HEX: &[u8; 16] = b"0123456789abcdef";

impl MessageId {
    /// Renders a 64-bit GUID as 16 lowercase hex digits of its big-endian bytes.
    pub fn from_u64(v: u64) -> Self {
        let mut out = [0u8; 16];
        for (i, b) in v.to_be_bytes().iter().enumerate() {
            out[i * 2] = HEX[(b >> 4) as usize];
            out[i * 2 + 1] = HEX[(b & 0xf) as usize];
        }
        MessageId(out)
    }

    /// Takes an ID parameter from a command; `None` unless it is exactly 16 bytes.
    pub fn from_slice(s: &[u8]) -> Option<Self> {
        <[u8; 16]>::try_from(s).ok().map(MessageId)
    }

    /// The 16 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl std::fmt::Debug for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MessageId({})", String::from_utf8_lossy(&self.0))
    }
}

impl std::fmt::Display for MessageId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

/// Writes the 26-byte header; the body follows it.
pub fn put_header(buf: &mut impl BufMut, timestamp_ns: i64, attempts: u16, id: &MessageId) {
    buf.put_i64(timestamp_ns);
    buf.put_u16(attempts);
    buf.put_slice(&id.0);
}

/// Encodes a whole message payload (header + body) into `buf`.
pub fn encode(
    buf: &mut impl BufMut,
    timestamp_ns: i64,
    attempts: u16,
    id: &MessageId,
    body: &[u8],
) {
    put_header(buf, timestamp_ns, attempts, id);
    buf.put_slice(body);
}

/// A decoded message payload. The body shares the input `Bytes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedMessage {
    pub timestamp_ns: i64,
    pub attempts: u16,
    pub id: MessageId,
    pub body: Bytes,
}

/// Error for a payload shorter than the header; the text is the reference's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidMessage(pub usize);

impl std::fmt::Display for InvalidMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid message buffer size ({})", self.0)
    }
}

impl std::error::Error for InvalidMessage {}

/// Decodes a message payload (as stored on disk or carried in a message frame).
pub fn decode(payload: Bytes) -> Result<DecodedMessage, InvalidMessage> {
    if payload.len() < MESSAGE_HEADER_LEN {
        return Err(InvalidMessage(payload.len()));
    }
    let timestamp_ns = i64::from_be_bytes(payload[0..8].try_into().expect("8 bytes"));
    let attempts = u16::from_be_bytes([payload[8], payload[9]]);
    let id = MessageId(payload[10..26].try_into().expect("16 bytes"));
    let body = payload.slice(MESSAGE_HEADER_LEN..);
    Ok(DecodedMessage {
        timestamp_ns,
        attempts,
        id,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hex_is_big_endian_lowercase() {
        assert_eq!(
            MessageId::from_u64(0x18acd669e6269000).as_bytes(),
            b"18acd669e6269000"
        );
        assert_eq!(MessageId::from_u64(0).as_bytes(), b"0000000000000000");
    }

    #[test]
    fn round_trip() {
        let id = MessageId::from_u64(42);
        let mut buf = Vec::new();
        encode(&mut buf, 0x18ec7e5c605602f0, 3, &id, b"hello1");
        assert_eq!(buf.len(), 32);
        let m = decode(Bytes::from(buf)).unwrap();
        assert_eq!(m.timestamp_ns, 0x18ec7e5c605602f0);
        assert_eq!(m.attempts, 3);
        assert_eq!(m.id, id);
        assert_eq!(&m.body[..], b"hello1");
    }

    #[test]
    fn short_payload_is_rejected() {
        assert_eq!(
            decode(Bytes::from_static(&[0; 25]))
                .unwrap_err()
                .to_string(),
            "invalid message buffer size (25)"
        );
    }
}
