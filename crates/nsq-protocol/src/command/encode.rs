//! The client side of the V2 command protocol: [`encode_command`] for a whole [`Command`], and
//! `put_*` helpers that append one command straight from borrowed parts without building a
//! `Command` (no allocation beyond the buffer's growth), as go-nsq's command.go builds them.

use bytes::{BufMut, BytesMut};

use super::Command;
use crate::message::MessageId;

/// Appends the wire encoding of `cmd` (client side). Numbers are written in decimal as
/// given; MPUB's total size is `4 + Σ(4 + len)`.
pub fn encode_command(buf: &mut BytesMut, cmd: &Command) {
    match cmd {
        Command::Identify { body } => put_identify(buf, body),
        Command::Auth { body } => put_auth(buf, body),
        Command::Sub { topic, channel } => put_sub(buf, topic, channel),
        Command::Pub { topic, body } => put_pub(buf, topic, body),
        Command::Mpub { topic, bodies } => put_mpub(buf, topic, bodies),
        Command::Dpub {
            topic,
            defer_ms,
            body,
        } => put_dpub(buf, topic, *defer_ms, body),
        Command::Rdy { count } => put_rdy(buf, *count),
        Command::Fin { id } => put_fin(buf, id),
        Command::Touch { id } => put_touch(buf, id),
        Command::Req { id, timeout_ms } => put_req(buf, id, *timeout_ms),
        Command::Cls => put_cls(buf),
        Command::Nop => put_nop(buf),
    }
}

/// `[4-byte size][body]`.
fn sized(buf: &mut BytesMut, body: &[u8]) {
    buf.put_u32(body.len() as u32);
    buf.put_slice(body);
}

/// Appends `n` in decimal without going through `fmt`.
fn put_decimal(buf: &mut BytesMut, n: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut v = n.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        buf.put_u8(b'-');
    }
    buf.put_slice(&digits[at..]);
}

/// `IDENTIFY\n[size][json]`.
pub fn put_identify(buf: &mut BytesMut, json: &[u8]) {
    buf.put_slice(b"IDENTIFY\n");
    sized(buf, json);
}

/// `AUTH\n[size][secret]`.
pub fn put_auth(buf: &mut BytesMut, secret: &[u8]) {
    buf.put_slice(b"AUTH\n");
    sized(buf, secret);
}

/// `SUB <topic> <channel>\n`.
pub fn put_sub(buf: &mut BytesMut, topic: &str, channel: &str) {
    buf.put_slice(b"SUB ");
    buf.put_slice(topic.as_bytes());
    buf.put_u8(b' ');
    buf.put_slice(channel.as_bytes());
    buf.put_u8(b'\n');
}

/// `PUB <topic>\n[size][body]`.
pub fn put_pub(buf: &mut BytesMut, topic: &str, body: &[u8]) {
    buf.reserve(9 + topic.len() + body.len());
    buf.put_slice(b"PUB ");
    buf.put_slice(topic.as_bytes());
    buf.put_u8(b'\n');
    sized(buf, body);
}

/// `DPUB <topic> <defer_ms>\n[size][body]`.
pub fn put_dpub(buf: &mut BytesMut, topic: &str, defer_ms: i64, body: &[u8]) {
    buf.reserve(31 + topic.len() + body.len());
    buf.put_slice(b"DPUB ");
    buf.put_slice(topic.as_bytes());
    buf.put_u8(b' ');
    put_decimal(buf, defer_ms);
    buf.put_u8(b'\n');
    sized(buf, body);
}

/// `MPUB <topic>\n[total size][count]([size][body])*`; the total is `4 + Σ(4 + len)`.
pub fn put_mpub<B: AsRef<[u8]>>(buf: &mut BytesMut, topic: &str, bodies: &[B]) {
    let total: usize = 4 + bodies.iter().map(|b| 4 + b.as_ref().len()).sum::<usize>();
    buf.reserve(6 + topic.len() + 4 + total);
    buf.put_slice(b"MPUB ");
    buf.put_slice(topic.as_bytes());
    buf.put_u8(b'\n');
    buf.put_u32(total as u32);
    buf.put_u32(bodies.len() as u32);
    for b in bodies {
        sized(buf, b.as_ref());
    }
}

/// `RDY <count>\n`.
pub fn put_rdy(buf: &mut BytesMut, count: i64) {
    buf.put_slice(b"RDY ");
    put_decimal(buf, count);
    buf.put_u8(b'\n');
}

/// `FIN <id>\n`.
pub fn put_fin(buf: &mut BytesMut, id: &MessageId) {
    id_line(buf, b"FIN ", id);
}

/// `TOUCH <id>\n`.
pub fn put_touch(buf: &mut BytesMut, id: &MessageId) {
    id_line(buf, b"TOUCH ", id);
}

/// `REQ <id> <timeout_ms>\n`.
pub fn put_req(buf: &mut BytesMut, id: &MessageId, timeout_ms: i64) {
    buf.put_slice(b"REQ ");
    buf.put_slice(id.as_bytes());
    buf.put_u8(b' ');
    put_decimal(buf, timeout_ms);
    buf.put_u8(b'\n');
}

/// `NOP\n`: the answer to a heartbeat.
pub fn put_nop(buf: &mut BytesMut) {
    buf.put_slice(b"NOP\n");
}

/// `CLS\n`: starts a graceful close.
pub fn put_cls(buf: &mut BytesMut) {
    buf.put_slice(b"CLS\n");
}

fn id_line(buf: &mut BytesMut, prefix: &[u8], id: &MessageId) {
    buf.reserve(prefix.len() + 17);
    buf.put_slice(prefix);
    buf.put_slice(id.as_bytes());
    buf.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn decimals() {
        for n in [0i64, 7, 10, 99, 1234567, i64::MAX, -1, i64::MIN] {
            let mut b = BytesMut::new();
            put_decimal(&mut b, n);
            assert_eq!(&b[..], n.to_string().as_bytes());
        }
    }

    #[test]
    fn encoded_bytes() {
        let mut b = BytesMut::new();
        let bodies = vec![Bytes::from_static(b"m1"), Bytes::from_static(b"m22")];
        encode_command(
            &mut b,
            &Command::Mpub {
                topic: "t".into(),
                bodies,
            },
        );
        let mut want = b"MPUB t\n".to_vec();
        want.extend_from_slice(&[0, 0, 0, 17, 0, 0, 0, 2, 0, 0, 0, 2, b'm', b'1']);
        want.extend_from_slice(&[0, 0, 0, 3, b'm', b'2', b'2']);
        assert_eq!(&b[..], &want[..]);

        let id = MessageId(*b"18acd669e6269000");
        let mut b = BytesMut::new();
        encode_command(&mut b, &Command::Req { id, timeout_ms: 5 });
        encode_command(
            &mut b,
            &Command::Dpub {
                topic: "t".into(),
                defer_ms: 7,
                body: Bytes::from_static(b"x"),
            },
        );
        encode_command(
            &mut b,
            &Command::Sub {
                topic: "t".into(),
                channel: "c".into(),
            },
        );
        encode_command(&mut b, &Command::Rdy { count: 3 });
        encode_command(
            &mut b,
            &Command::Identify {
                body: Bytes::from_static(b"{}"),
            },
        );
        assert_eq!(
            &b[..],
            &b"REQ 18acd669e6269000 5\nDPUB t 7\n\0\0\0\x01xSUB t c\nRDY 3\nIDENTIFY\n\0\0\0\x02{}"
                [..]
        );
    }
}
