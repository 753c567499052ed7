//! What a backlog holds, without I/O: which messages are pending on which channels (or on
//! their topic), the topics and channels with their pause flags, where each live message was
//! first stored, and which segments can go.
//!
//! Events are [`Index::apply`] calls with a [`Record`] and its location; queries are plain
//! methods. The same index is built while frames arrive and when a store is replayed, so
//! replay must give exactly the state the appends gave: that is what the trimming rule
//! ([`Index::trimmable`]) guarantees and what the model test checks.
//!
//! A replica holds every unsettled message of its origins, so the per-message part is kept
//! small (issue 29; `examples/index_mem.rs` measures it): no ID or name strings, no
//! allocation per message, only what a takeover and the trimming rule need — the body's
//! record (segment and offset; its length is in the record's header, the timestamp in the
//! record) and where the message is pending, 24 bytes per usual message (`state.rs`).
//!
//! Files: the index's state, its checks and the dispatch of a record here; `apply.rs`, how
//! each kind of record changes the state; `query.rs`, trimming and the takeover's queries;
//! `topic.rs`, a topic's channels and messages; `ids.rs`, the sorted chunks of the messages
//! by GUID; `state.rs`, one message's state.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::Hasher;

use nsq_protocol::replication::{Admin, Fanout, Fin, Frame, Item, Pub, Req};
use nsq_protocol::MessageId;

use rustc_hash::FxHasher;

use super::record::Record;

mod apply;
mod ids;
mod query;
mod state;
mod topic;

use topic::TopicEntry;

/// Where a record is: segment number, byte offset in the segment, length with its header.
/// [`Index::unsettled`] answers with `len` 0: the index does not keep it (the record's
/// header has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Loc {
    pub segment: u64,
    pub offset: u64,
    pub len: u32,
}

/// A record that does not fit the index's state (refused before it is stored).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// A log frame whose seq is not the one after the last.
    #[error("out of sequence: expected seq {expected}, got {got}")]
    OutOfSequence { expected: u64, got: u64 },
    /// CATCHUP_BEGIN behind what the backlog already holds.
    #[error("catch-up at seq {got} behind the backlog's seq {last}")]
    CatchupBehind { last: u64, got: u64 },
    /// CATCHUP_END without a catch-up, or at another seq than the last.
    #[error("unexpected CATCHUP_END at seq {got} (last seq {last}, catching up: {catching_up})")]
    BadCatchupEnd {
        last: u64,
        got: u64,
        catching_up: bool,
    },
    /// A frame that is not part of a backlog (HELLO, ACK, …).
    #[error("frame type 0x{0:02x} is not a backlog record")]
    NotARecord(u8),
}

/// The hash of a message ID in the index's hash tables (wide states, IDs that are not
/// GUIDs; the GUIDs themselves are in sorted chunks, `ids.rs`): IDs are the origin's GUIDs as
/// 16 hex digits (`((time - epoch) << 22) | (node << 12) | sequence`, nsqd/guid.go,
/// `NewGUID`), made one after another. The IDs of one time unit get consecutive hashes from a
/// random start per unit, so a run of them touches consecutive buckets instead of one random
/// cache line each; the top bits (the table's tag) are mixed from the sequence. Anything else
/// (not 16 lowercase hex digits) is hashed with FxHash.
#[derive(Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let Some(v) = guid(bytes) else {
            let mut h = FxHasher::default();
            h.write(bytes);
            self.0 = h.finish();
            return;
        };
        let seq = v & 0xfff;
        let start = (v >> 12).wrapping_mul(K);
        self.0 = start.wrapping_add(seq) ^ (seq.wrapping_mul(K) & (0x7f << 57));
    }

    /// The length prefix of the ID's bytes (always 16).
    fn write_usize(&mut self, _: usize) {}

    fn finish(&self) -> u64 {
        self.0
    }
}

/// An ID's GUID: its 16 lowercase hex digits as a number (the inverse of
/// [`MessageId::from_u64`]); `None` for any other bytes.
pub(super) fn guid(bytes: &[u8]) -> Option<u64> {
    if bytes.len() != 16 {
        return None;
    }
    let mut v = 0u64;
    for &b in bytes {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            _ => return None,
        };
        v = (v << 4) | u64::from(d);
    }
    Some(v)
}

/// A message as a PUB or STATE record brings it (its timestamp stays in the record).
#[derive(Debug, Clone, Copy)]
struct NewMessage {
    id: MessageId,
    body_len: u32,
    loc: Loc,
}

/// The catch-up in progress: settlements of messages not seen yet, and deletions.
#[derive(Debug, Default, Clone)]
struct Catchup {
    /// `(topic, channel, id)`; an empty channel is the topic's own pending.
    settled: HashSet<(String, String, MessageId)>,
    /// `(topic, channel)` deleted during the catch-up; an empty channel is the topic.
    deleted: HashSet<(String, String)>,
}

/// Bytes counted per live message besides its body, for the compaction estimate.
pub const MESSAGE_OVERHEAD: u64 = 64;

/// The live messages counted.
#[derive(Debug, Default, Clone)]
struct Live {
    messages: u64,
    /// Bodies plus [`MESSAGE_OVERHEAD`] each.
    bytes: u64,
    /// Per segment, the live messages whose first record is in it.
    per_segment: BTreeMap<u64, u64>,
}

/// The index of one backlog (see the module comment).
#[derive(Debug, Default, Clone)]
pub struct Index {
    topics: BTreeMap<String, TopicEntry>,
    live: Live,
    /// Per topic, the segment from which its records define its metadata (channels, pause
    /// flags): where it was created, or its last full STATE TOPIC.
    meta_seg: HashMap<String, u64>,
    /// The segment of the CATCHUP_BEGIN of the catch-up in progress.
    catchup_seg: Option<u64>,
    /// The segment of the record being applied.
    cur_seg: u64,
    last_seq: u64,
    catchup: Option<Catchup>,
}

impl Index {
    /// An empty index.
    pub fn new() -> Self {
        Index::default()
    }

    /// The last log seq applied.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// A catch-up has begun and not ended.
    pub fn catching_up(&self) -> bool {
        self.catchup.is_some()
    }

    /// Live (unsettled) messages.
    pub fn messages(&self) -> u64 {
        self.live.messages
    }

    /// Bodies of live messages plus [`MESSAGE_OVERHEAD`] each: what a compaction would keep.
    pub fn live_bytes(&self) -> u64 {
        self.live.bytes
    }

    /// Whether `records`, applied in order, would be accepted (seq continuity and catch-up
    /// markers); nothing is changed.
    pub fn check<'a>(
        &self,
        records: impl IntoIterator<Item = &'a Record>,
    ) -> Result<(), IndexError> {
        let mut last = self.last_seq;
        let mut catching_up = self.catchup.is_some();
        for r in records {
            match r {
                Record::Reset { last_seq } => {
                    last = *last_seq;
                    catching_up = false;
                }
                // The seq where a segment starts: after damage in the segment before it,
                // replay resumes from here.
                Record::Base { last_seq } => last = *last_seq,
                Record::Frame(f) => match f {
                    Frame::Pub(Pub { seq, .. })
                    | Frame::Fin(Fin { seq, .. })
                    | Frame::Req(Req { seq, .. })
                    | Frame::Fanout(Fanout { seq, .. })
                    | Frame::Admin(Admin { seq, .. }) => {
                        if *seq != last.wrapping_add(1) {
                            return Err(IndexError::OutOfSequence {
                                expected: last.wrapping_add(1),
                                got: *seq,
                            });
                        }
                        last = *seq;
                    }
                    Frame::CatchupBegin { seq } => {
                        if *seq < last {
                            return Err(IndexError::CatchupBehind { last, got: *seq });
                        }
                        last = *seq;
                        catching_up = true;
                    }
                    Frame::CatchupEnd { seq } => {
                        if !catching_up || *seq != last {
                            return Err(IndexError::BadCatchupEnd {
                                last,
                                got: *seq,
                                catching_up,
                            });
                        }
                        catching_up = false;
                    }
                    Frame::State(_) => {}
                    other => return Err(IndexError::NotARecord(other.frame_type())),
                },
            }
        }
        Ok(())
    }

    /// Applies one record stored at `loc`. Call [`Index::check`] first: a record it refuses is
    /// applied as well as it can be (seq taken as is).
    pub fn apply(&mut self, record: &Record, loc: Loc) {
        self.cur_seg = loc.segment;
        match record {
            Record::Reset { last_seq } => {
                *self = Index {
                    last_seq: *last_seq,
                    cur_seg: loc.segment,
                    ..Index::default()
                };
            }
            Record::Base { last_seq } => self.last_seq = *last_seq,
            Record::Frame(f) => match f {
                Frame::Pub(p) => {
                    self.last_seq = p.seq;
                    self.apply_pub(p, loc);
                }
                Frame::State(Item::Topic(t)) => self.apply_topic_item(t),
                Frame::State(Item::Message(m)) => self.apply_message_item(m, loc),
                Frame::Fin(fin) => {
                    self.last_seq = fin.seq;
                    self.apply_fin(fin);
                }
                Frame::Req(req) => {
                    self.last_seq = req.seq;
                    self.apply_req(req);
                }
                Frame::Fanout(fo) => {
                    self.last_seq = fo.seq;
                    self.apply_fanout(fo);
                }
                Frame::Admin(a) => {
                    self.last_seq = a.seq;
                    self.apply_admin(a);
                }
                Frame::CatchupBegin { seq } => {
                    self.last_seq = *seq;
                    self.begin_catchup();
                }
                Frame::CatchupEnd { .. } => self.end_catchup(),
                _ => {}
            },
        }
    }
}

#[cfg(test)]
mod tests;
