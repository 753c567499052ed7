//! The record format of the replica store's segment files, without I/O.
//!
//! `[u32 len][u32 crc32][u8 kind][payload]`, big-endian; `len` counts kind and payload, the
//! CRC-32 (IEEE, as the deferred journal, `deferred_store.rs`) covers them. Kind and payload
//! are a replication link frame's type and payload (`nsq_protocol::replication`), so a
//! replica stores what it receives as it is; [`RESET`] is the store's own kind.

use bytes::Bytes;
use nsq_protocol::replication::{self, frame_type as ft, Frame, FrameError};

/// Store-only kind: "forget everything before me" (`u64 last_seq`), the first record of a
/// compacted segment.
pub const RESET: u8 = 0x70;
/// `[u32 len][u32 crc32]`.
pub const HEADER: usize = 8;
/// Store-only kind: "the log is at this seq here" (`u64 last_seq`), the first record of
/// every segment after the first, so a backlog whose older segments were deleted still knows
/// its seq.
pub const BASE: u8 = 0x71;
/// The largest record accepted on replay (a corrupt length must not allocate gigabytes).
pub const MAX_RECORD: usize = 1 << 30;

/// One record of a backlog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// PUB, STATE, FIN, REQ, FANOUT, ADMIN, CATCHUP_BEGIN or CATCHUP_END.
    Frame(Frame),
    Reset {
        last_seq: u64,
    },
    Base {
        last_seq: u64,
    },
}

impl Record {
    /// The kind byte.
    pub fn kind(&self) -> u8 {
        match self {
            Record::Frame(f) => f.frame_type(),
            Record::Reset { .. } => RESET,
            Record::Base { .. } => BASE,
        }
    }

    /// A record that holds message bodies (PUB, STATE): refused when the store is full.
    pub fn holds_messages(&self) -> bool {
        matches!(self, Record::Frame(Frame::Pub(_) | Frame::State(_)))
    }
}

/// Whether frames of this type are kept in a backlog.
pub fn is_record_kind(kind: u8) -> bool {
    matches!(
        kind,
        ft::PUB
            | ft::STATE
            | ft::FIN
            | ft::REQ
            | ft::FANOUT
            | ft::ADMIN
            | ft::CATCHUP_BEGIN
            | ft::CATCHUP_END
            | RESET
            | BASE
    )
}

/// Appends one record to `out`; returns its length with the header.
pub fn encode(record: &Record, out: &mut Vec<u8>) -> Result<usize, FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(record.kind());
    match record {
        Record::Frame(f) => replication::encode_payload(f, out)?,
        Record::Reset { last_seq } | Record::Base { last_seq } => {
            out.extend_from_slice(&last_seq.to_be_bytes())
        }
    }
    let body = &out[start + HEADER..];
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
    Ok(out.len() - start)
}

/// What is at an offset of a segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A whole valid record and its length with the header.
    Record(Record, usize),
    /// Nothing: the end of the data.
    End,
    /// The data ends inside a record (a write cut short, at the end of a file).
    Incomplete,
    /// A length, checksum, kind or payload that does not hold.
    Damaged,
}

/// Parses the record at `pos` of `data` (a whole segment read into memory).
pub fn parse(data: &Bytes, pos: usize) -> Parsed {
    let rest = &data[pos.min(data.len())..];
    if rest.is_empty() {
        return Parsed::End;
    }
    if rest.len() < HEADER {
        return Parsed::Incomplete;
    }
    let len = u32::from_be_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_be_bytes(rest[4..8].try_into().expect("4 bytes"));
    if len == 0 || len > MAX_RECORD {
        return Parsed::Damaged;
    }
    if rest.len() < HEADER + len {
        return Parsed::Incomplete;
    }
    let body = &rest[HEADER..HEADER + len];
    if crc32fast::hash(body) != crc {
        return Parsed::Damaged;
    }
    let kind = body[0];
    if !is_record_kind(kind) {
        return Parsed::Damaged;
    }
    let payload = data.slice(pos + HEADER + 1..pos + HEADER + len);
    let record = if kind == RESET || kind == BASE {
        match <[u8; 8]>::try_from(&payload[..]) {
            Ok(b) if kind == RESET => Record::Reset {
                last_seq: u64::from_be_bytes(b),
            },
            Ok(b) => Record::Base {
                last_seq: u64::from_be_bytes(b),
            },
            Err(_) => return Parsed::Damaged,
        }
    } else {
        match replication::decode_payload(kind, payload) {
            Ok(f) => Record::Frame(f),
            Err(_) => return Parsed::Damaged,
        }
    };
    Parsed::Record(record, HEADER + len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nsq_protocol::replication::Fin;
    use nsq_protocol::MessageId;

    fn fin() -> Record {
        Record::Frame(Frame::Fin(Fin {
            seq: 1,
            topic: "t".into(),
            channel: "c".into(),
            ids: vec![MessageId(*b"0123456789abcdef")],
        }))
    }

    #[test]
    fn round_trip_and_exact_header() {
        let mut out = Vec::new();
        let n = encode(&fin(), &mut out).unwrap();
        assert_eq!(n, out.len());
        // len = kind + seq + str8 t + str8 c + count + id = 1 + 8 + 2 + 2 + 4 + 16.
        assert_eq!(&out[..4], &33u32.to_be_bytes());
        assert_eq!(&out[4..8], &crc32fast::hash(&out[8..]).to_be_bytes());
        assert_eq!(out[8], 0x04);
        let data = Bytes::from(out);
        assert_eq!(parse(&data, 0), Parsed::Record(fin(), n));
        assert_eq!(parse(&data, n), Parsed::End);

        let mut out = Vec::new();
        encode(&Record::Reset { last_seq: 9 }, &mut out).unwrap();
        assert_eq!(
            parse(&Bytes::from(out), 0),
            Parsed::Record(Record::Reset { last_seq: 9 }, 17)
        );
    }

    #[test]
    fn torn_and_damaged_records() {
        let mut out = Vec::new();
        encode(&fin(), &mut out).unwrap();
        for cut in 1..out.len() {
            assert_eq!(
                parse(&Bytes::copy_from_slice(&out[..cut]), 0),
                Parsed::Incomplete,
                "cut at {cut}"
            );
        }
        let mut bad = out.clone();
        bad[20] ^= 1;
        assert_eq!(parse(&Bytes::from(bad), 0), Parsed::Damaged);
        let mut zero = out.clone();
        zero[..4].copy_from_slice(&[0; 4]);
        assert_eq!(parse(&Bytes::from(zero), 0), Parsed::Damaged);
        // A valid checksum over a kind that is not a record (a HEARTBEAT).
        let mut hb = vec![0, 0, 0, 1];
        hb.extend_from_slice(&crc32fast::hash(&[0x40]).to_be_bytes());
        hb.push(0x40);
        assert_eq!(parse(&Bytes::from(hb), 0), Parsed::Damaged);
    }
}
