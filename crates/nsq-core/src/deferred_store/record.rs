//! The deferred journal's record format (see the module comment of `deferred_store`):
//! encoding one ADD or DEL, and parsing one record back; no I/O.

use bytes::Bytes;
use nsq_protocol::MessageId;

use crate::message::Message;

pub(super) const ADD: u8 = 1;
pub(super) const DEL: u8 = 2;
/// Largest record body accepted on replay (a corrupt length must not allocate gigabytes).
pub(super) const MAX_RECORD: usize = 1 << 30;
/// Record header: `[u32 len][u32 crc32]`.
pub(super) const HEADER: usize = 8;
/// Body of a DEL: kind and ID.
pub(super) const DEL_LEN: usize = 1 + 16;
/// Smallest ADD body: kind, ID, due time and a message with an empty payload.
pub(super) const MIN_ADD_LEN: usize = 1 + 16 + 8 + nsq_protocol::MESSAGE_HEADER_LEN;

pub(super) fn begin_record(buf: &mut Vec<u8>) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&[0; 8]);
    start
}

pub(super) fn end_record(buf: &mut [u8], start: usize) {
    let body = &buf[start + 8..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    buf[start..start + 4].copy_from_slice(&len.to_be_bytes());
    buf[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

pub(super) fn encode_add(buf: &mut Vec<u8>, due: i64, m: &Message) {
    let start = begin_record(buf);
    buf.push(ADD);
    buf.extend_from_slice(&m.id.0);
    buf.extend_from_slice(&due.to_be_bytes());
    m.encode_into(buf);
    end_record(buf, start);
}

pub(super) fn encode_del(buf: &mut Vec<u8>, id: MessageId) {
    let start = begin_record(buf);
    buf.push(DEL);
    buf.extend_from_slice(&id.0);
    end_record(buf, start);
}

/// One record as decoded.
pub(super) enum Record {
    Add(i64, Message),
    Del(MessageId),
}

/// The whole record starting at `pos`, and its size with the header, if one is there: the
/// length fits its kind (a DEL exactly [`DEL_LEN`], an ADD between [`MIN_ADD_LEN`] and
/// [`MAX_RECORD`]) and the file, the ADD's ID equals the ID inside its message, and the body's
/// CRC-32 matches. The cheap checks come first, so scanning a damaged stretch byte by byte
/// computes a checksum only where a record plausibly starts.
pub(super) fn parse_at(data: &[u8], pos: usize) -> Option<(Record, usize)> {
    let rest = data.get(pos..)?;
    let header = rest.get(..HEADER)?;
    let len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(header[4..].try_into().expect("4 bytes"));
    if !(len == DEL_LEN || (MIN_ADD_LEN..=MAX_RECORD).contains(&len)) {
        return None;
    }
    let body = rest.get(HEADER..HEADER + len)?;
    let record = match body[0] {
        DEL if len == DEL_LEN => Record::Del(MessageId(body[1..17].try_into().expect("16 bytes"))),
        ADD if len >= MIN_ADD_LEN => {
            // The message's own ID sits after its timestamp (8) and attempts (2).
            if body[1..17] != body[25 + 10..25 + 26] || crc32fast::hash(body) != crc {
                return None;
            }
            let due = i64::from_be_bytes(body[17..25].try_into().expect("8 bytes"));
            let m = Message::decode(Bytes::copy_from_slice(&body[25..])).ok()?;
            return Some((Record::Add(due, m), HEADER + len));
        }
        _ => return None,
    };
    (crc32fast::hash(body) == crc).then_some((record, HEADER + len))
}

/// True if `tail` (bytes with no valid record after them) reads as the start of one record
/// cut short — what a crash leaves after a torn write — rather than damage: shorter than a
/// header, or a header whose length fits the kind byte (if present) and runs past the end.
pub(super) fn is_torn_tail(tail: &[u8]) -> bool {
    let Some(header) = tail.get(..HEADER) else {
        return true;
    };
    let len = u32::from_be_bytes(header[..4].try_into().expect("4 bytes")) as usize;
    let sane = match tail.get(HEADER) {
        None => len == DEL_LEN || (MIN_ADD_LEN..=MAX_RECORD).contains(&len),
        Some(&DEL) => len == DEL_LEN,
        Some(&ADD) => (MIN_ADD_LEN..=MAX_RECORD).contains(&len),
        Some(_) => false,
    };
    sane && HEADER + len > tail.len()
}
