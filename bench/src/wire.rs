//! Encoding of the few V2 client commands the benchmark tools send.
//!
//! Formats (nsqd TCP protocol spec §2, §9.4–9.9): `MPUB <topic>\n<sz total><u32 count>(<sz><body>)*`,
//! `SUB <topic> <channel>\n`, `RDY <n>\n`, `FIN <16-byte id>\n`, `NOP\n`; all integers big-endian.

pub use nsq_protocol::MAGIC_V2;

/// `NOP\n`, the answer to a `_heartbeat_`.
pub const NOP: &[u8] = b"NOP\n";

/// Length of a message ID as carried in message frames and echoed in FIN.
pub const ID_LEN: usize = 16;

/// Offset of the message ID inside a message frame's payload (after timestamp and attempts).
pub const ID_OFFSET: usize = 8 + 2;

/// Bytes one `FIN <id>\n` command takes.
pub const FIN_LEN: usize = 4 + ID_LEN + 1;

/// Size of the MPUB body (the value of its total-size field) for `count` messages of `size` bytes.
pub fn mpub_body_len(count: usize, size: usize) -> usize {
    4 + count * (4 + size)
}

/// Builds one complete MPUB command carrying `count` copies of `body`.
///
/// The benchmark writes this same buffer over and over, so it is built once.
pub fn encode_mpub(topic: &str, count: usize, body: &[u8]) -> Vec<u8> {
    let body_len = mpub_body_len(count, body.len());
    let mut buf = Vec::with_capacity(6 + topic.len() + 4 + body_len);
    buf.extend_from_slice(b"MPUB ");
    buf.extend_from_slice(topic.as_bytes());
    buf.push(b'\n');
    buf.extend_from_slice(&(body_len as u32).to_be_bytes());
    buf.extend_from_slice(&(count as u32).to_be_bytes());
    let size = (body.len() as u32).to_be_bytes();
    for _ in 0..count {
        buf.extend_from_slice(&size);
        buf.extend_from_slice(body);
    }
    buf
}

/// Appends one `PUB <topic>\n<u32 size><body>` command to `buf`.
pub fn put_pub(buf: &mut Vec<u8>, topic: &str, body: &[u8]) {
    buf.extend_from_slice(b"PUB ");
    buf.extend_from_slice(topic.as_bytes());
    buf.push(b'\n');
    buf.extend_from_slice(&(body.len() as u32).to_be_bytes());
    buf.extend_from_slice(body);
}

/// Offset of the body inside a message frame's payload (timestamp, attempts, ID).
pub const BODY_OFFSET: usize = ID_OFFSET + ID_LEN;

/// Unix time in nanoseconds, as stamped into latency-mode message bodies.
pub fn unix_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The send time a latency-mode producer stamped into the first 8 bytes of a message body
/// (big-endian Unix nanoseconds), if the payload is long enough to carry one.
pub fn stamped_nanos(payload: &[u8]) -> Option<u64> {
    let b = payload.get(BODY_OFFSET..BODY_OFFSET + 8)?;
    Some(u64::from_be_bytes(b.try_into().ok()?))
}

/// `SUB <topic> <channel>\n`.
pub fn encode_sub(topic: &str, channel: &str) -> Vec<u8> {
    format!("SUB {topic} {channel}\n").into_bytes()
}

/// `RDY <n>\n`.
pub fn encode_rdy(count: u64) -> Vec<u8> {
    format!("RDY {count}\n").into_bytes()
}

/// Appends `FIN <id>\n` to `buf`.
pub fn put_fin(buf: &mut Vec<u8>, id: &[u8; ID_LEN]) {
    buf.extend_from_slice(b"FIN ");
    buf.extend_from_slice(id);
    buf.push(b'\n');
}

/// The message ID inside a message frame's payload, or `None` if the payload is too short to
/// be a message.
pub fn message_id(payload: &[u8]) -> Option<&[u8; ID_LEN]> {
    payload.get(ID_OFFSET..ID_OFFSET + ID_LEN)?.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use nsq_protocol::frame::{put_message, take_frame};
    use nsq_protocol::MessageId;

    #[test]
    fn mpub_layout() {
        let b = encode_mpub("t", 2, b"abc");
        let mut want = b"MPUB t\n".to_vec();
        want.extend_from_slice(&[0, 0, 0, 18]); // 4 + 2 * (4 + 3)
        want.extend_from_slice(&[0, 0, 0, 2]);
        want.extend_from_slice(&[0, 0, 0, 3]);
        want.extend_from_slice(b"abc");
        want.extend_from_slice(&[0, 0, 0, 3]);
        want.extend_from_slice(b"abc");
        assert_eq!(b, want);
        assert_eq!(b.capacity(), b.len());
    }

    #[test]
    fn mpub_default_sizes() {
        let b = encode_mpub("sub_bench", 200, &[b'x'; 200]);
        assert_eq!(mpub_body_len(200, 200), 40804);
        assert_eq!(b.len(), "MPUB sub_bench\n".len() + 4 + 40804);
        assert_eq!(&b[15..19], &40804u32.to_be_bytes());
        assert_eq!(&b[19..23], &200u32.to_be_bytes());
    }

    #[test]
    fn simple_commands() {
        assert_eq!(encode_sub("sub_bench", "ch"), b"SUB sub_bench ch\n");
        assert_eq!(encode_rdy(2500), b"RDY 2500\n");
        assert_eq!(NOP, b"NOP\n");
        assert_eq!(MAGIC_V2, b"  V2");
        let mut v = Vec::new();
        put_fin(&mut v, b"0123456789abcdef");
        assert_eq!(v, b"FIN 0123456789abcdef\n");
        assert_eq!(v.len(), FIN_LEN);
    }

    #[test]
    fn pub_layout_and_stamp() {
        let mut v = Vec::new();
        put_pub(&mut v, "t", &42u64.to_be_bytes());
        let mut want = b"PUB t\n".to_vec();
        want.extend_from_slice(&[0, 0, 0, 8]);
        want.extend_from_slice(&42u64.to_be_bytes());
        assert_eq!(v, want);

        let id = MessageId(*b"18acd669e6269000");
        let mut b = BytesMut::new();
        put_message(&mut b, 7, 1, &id, &4242u64.to_be_bytes());
        let f = take_frame(&mut b).unwrap().unwrap();
        assert_eq!(stamped_nanos(&f.data), Some(4242));
        assert_eq!(stamped_nanos(&f.data[..30]), None);
    }

    #[test]
    fn id_from_message_frame() {
        let id = MessageId(*b"18acd669e6269000");
        let mut b = BytesMut::new();
        put_message(&mut b, 7, 1, &id, b"body");
        let f = take_frame(&mut b).unwrap().unwrap();
        assert_eq!(f.frame_type, 2);
        assert_eq!(message_id(&f.data), Some(b"18acd669e6269000"));
        assert_eq!(message_id(&f.data[..25]), None);
    }
}
