//! The in-memory message and the per-topic message-ID (GUID) factory.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use nsq_protocol::message::{self, DecodedMessage, InvalidMessage};
use nsq_protocol::MessageId;

/// One message as a topic or channel holds it.
///
/// Cloning is cheap: the body is a shared `Bytes`, so fan-out to N channels costs N reference
/// count increments, never a copy of the body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub id: MessageId,
    /// Publish time, nanoseconds since the Unix epoch; preserved across requeues and restarts.
    pub timestamp: i64,
    /// Deliveries so far on this channel (incremented just before each delivery).
    pub attempts: u16,
    pub body: Bytes,
    /// Deferral in milliseconds requested by DPUB / `/pub?defer`; applied per channel at
    /// fan-out, never stored on disk (the format has no field for it). A `u32` (not a
    /// `Duration`) keeps `Message` at 64 bytes: millions of them sit in memory queues.
    pub defer_ms: u32,
}

impl Message {
    pub fn new(id: MessageId, body: Bytes) -> Self {
        Message {
            id,
            timestamp: now_nanos(),
            attempts: 0,
            body,
            defer_ms: 0,
        }
    }

    /// The requested deferral.
    pub fn defer(&self) -> Duration {
        Duration::from_millis(u64::from(self.defer_ms))
    }

    /// Length of the encoded payload (header + body).
    pub fn encoded_len(&self) -> usize {
        nsq_protocol::MESSAGE_HEADER_LEN + self.body.len()
    }

    /// Appends the diskqueue/wire payload encoding.
    /// The size of this message's diskqueue record: length prefix, 26-byte header, body.
    pub fn record_len(&self) -> u64 {
        4 + 26 + self.body.len() as u64
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        message::encode(out, self.timestamp, self.attempts, &self.id, &self.body);
    }

    /// Decodes a payload read back from a backend.
    pub fn decode(payload: Bytes) -> Result<Self, InvalidMessage> {
        let DecodedMessage {
            timestamp_ns,
            attempts,
            id,
            body,
        } = message::decode(payload)?;
        Ok(Message {
            id,
            timestamp: timestamp_ns,
            attempts,
            body,
            defer_ms: 0,
        })
    }
}

/// Wall-clock nanoseconds since the Unix epoch.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Twitter-snowflake-like epoch of the reference's GUIDs (ms-ish units of 2^20 ns).
const TWEPOCH: i64 = 1288834974288;
const NODE_ID_BITS: u32 = 10;
const SEQUENCE_BITS: u32 = 12;
const SEQUENCE_MASK: i64 = (1 << SEQUENCE_BITS) - 1;

/// Generates strictly increasing 64-bit IDs per topic, in the reference's layout:
/// `((ts - TWEPOCH) << 22) | (node_id << 12) | sequence` with `ts = unix_nanos >> 20`.
#[derive(Debug)]
pub struct GuidFactory {
    node_id: i64,
    sequence: i64,
    last_ts: i64,
    last_id: i64,
}

impl GuidFactory {
    pub fn new(node_id: i64) -> Self {
        GuidFactory {
            node_id: node_id & ((1 << NODE_ID_BITS) - 1),
            sequence: 0,
            last_ts: -1,
            last_id: 0,
        }
    }

    /// Tries to make one ID at wall time `now_ns`; `None` when the clock went backwards or the
    /// 4096 IDs of this time unit are used up.
    pub fn try_new_id(&mut self, now_ns: i64) -> Option<MessageId> {
        let ts = now_ns >> 20;
        if ts < self.last_ts {
            return None;
        }
        if ts == self.last_ts {
            self.sequence = (self.sequence + 1) & SEQUENCE_MASK;
            if self.sequence == 0 {
                return None;
            }
        } else {
            self.sequence = 0;
        }
        self.last_ts = ts;
        let id = ((ts - TWEPOCH) << (NODE_ID_BITS + SEQUENCE_BITS))
            | (self.node_id << SEQUENCE_BITS)
            | self.sequence;
        if id <= self.last_id {
            return None;
        }
        self.last_id = id;
        Some(MessageId::from_u64(id as u64))
    }

    /// Makes one ID for wall time `now_ns` (a batch's shared timestamp), reading the clock
    /// again only if that time unit is used up.
    pub fn new_id_at(&mut self, now_ns: i64) -> MessageId {
        match self.try_new_id(now_ns) {
            Some(id) => id,
            None => self.new_id(),
        }
    }

    /// Makes one ID, waiting for the clock when a time unit is exhausted (as the reference
    /// does, but spinning on the clock rather than sleeping a whole millisecond).
    pub fn new_id(&mut self) -> MessageId {
        loop {
            if let Some(id) = self.try_new_id(now_nanos()) {
                return id;
            }
            std::thread::yield_now();
        }
    }
}

/// The reference's default node id: CRC-32/IEEE of the MD5 digest of the hostname, mod 1024.
pub fn default_node_id(hostname: &str) -> i64 {
    use md5::{Digest, Md5};
    let digest = Md5::digest(hostname.as_bytes());
    (crc32fast::hash(&digest) % 1024) as i64
}

impl crate::memqueue::Weigh for Message {
    fn weight(&self) -> u64 {
        self.record_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_layout_matches_reference_example() {
        // 18acd691ede69003 → ts-part 423915833271, node 617, sequence 3 (nsqd/guid.go, NewGUID).
        let v = u64::from_str_radix("18acd691ede69003", 16).unwrap() as i64;
        assert_eq!(v >> 22, 423915833271);
        assert_eq!((v >> 12) & 1023, 617);
        assert_eq!(v & 4095, 3);
        let mut g = GuidFactory::new(617);
        let now = (423915833271 + TWEPOCH) << 20;
        for _ in 0..3 {
            g.try_new_id(now).unwrap();
        }
        assert_eq!(g.try_new_id(now).unwrap().as_bytes(), b"18acd691ede69003");
    }

    #[test]
    fn ids_increase_and_sequence_exhausts() {
        let mut g = GuidFactory::new(1);
        let now = 1_700_000_000_000_000_000;
        let mut last = String::new();
        for _ in 0..4096 {
            let id = g.try_new_id(now).unwrap().to_string();
            assert!(id > last);
            last = id;
        }
        assert!(
            g.try_new_id(now).is_none(),
            "4097th id in one unit must wait"
        );
        assert!(
            g.try_new_id(now - (1 << 20)).is_none(),
            "clock going backwards must wait"
        );
        assert!(g.try_new_id(now + (1 << 20)).is_some());
    }

    #[test]
    fn default_node_id_of_vm_is_617() {
        assert_eq!(default_node_id("vm"), 617);
    }

    #[test]
    fn message_is_compact() {
        assert!(
            std::mem::size_of::<Message>() <= 64,
            "{}",
            std::mem::size_of::<Message>()
        );
    }

    #[test]
    fn message_round_trip() {
        let m = Message::new(MessageId::from_u64(5), Bytes::from_static(b"abc"));
        let mut buf = Vec::new();
        m.encode_into(&mut buf);
        assert_eq!(buf.len(), m.encoded_len());
        assert_eq!(Message::decode(Bytes::from(buf)).unwrap(), m);
    }
}
