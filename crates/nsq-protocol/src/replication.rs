//! The replication link between nsqd (issue 22, docs/replication.md), sans-I/O.
//!
//! NSQ has no such link: an origin nsqd dials a peer's ordinary TCP port and sends
//! [`MAGIC_R1`] where a client sends `"  V2"`. A node with replication off answers it as
//! nsqd/tcp.go `Handle` answers any unknown magic (`E_BAD_PROTOCOL`, close), so this module
//! is only reached when replication is on.
//!
//! After the magic both sides exchange frames `[u32 size][u8 type][payload]`, big-endian,
//! `size = 1 + payload length`. [`encode`] appends one frame, [`decode`] takes one whole frame
//! off the front of a buffer (`Ok(None)`: need more bytes) and refuses malformed ones with a
//! typed [`FrameError`]. [`encode_payload`] / [`decode_payload`] are the same without the
//! size prefix: the replica store (`nsq-core`, `replica/`) keeps the frames it receives as
//! records of that form.
//!
//! Field encodings: `str8` = `u8` length + UTF-8, `str16` = `u16` length + UTF-8, `bytes` =
//! `u32` length + bytes, lists = a count (`u16` or `u32`) then the items. A count that could
//! not fit in the rest of the payload is refused before anything is allocated.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::message::MessageId;

/// The 4-byte magic an origin sends first on a replication link.
pub const MAGIC_R1: &[u8; 4] = b"  R1";
/// The link protocol version carried in HELLO and WELCOME. Version 2 added the membership
/// proof (HELLO's nonce, CHALLENGE, AUTH); version 3 the replication core's facts (PING and
/// PONG carrying the origin's clock, STATUS entries' `complete` flag, `echo` and state `gone`,
/// TAKEN_OVER's `last_seq`, DROP's taker). A HELLO of another version is decoded only as far
/// as its version and node ID (the first two fields of every version), so that it can be
/// refused as unsupported or as not in the group.
pub const LINK_VERSION: u16 = 3;
/// The bytes of a handshake nonce (HELLO, CHALLENGE).
pub const NONCE_LEN: usize = 16;
/// The most bytes of a membership proof (CHALLENGE, AUTH).
pub const MAX_PROOF_LEN: usize = 64;
/// The smallest frame limit a side announces (docs/replication.md: the larger of this and
/// twice `--max-body-size`).
pub const MIN_MAX_FRAME: u32 = 16 << 20;

/// Frame type bytes.
pub mod frame_type {
    pub const HELLO: u8 = 0x01;
    pub const PUB: u8 = 0x02;
    pub const STATE: u8 = 0x03;
    pub const FIN: u8 = 0x04;
    pub const REQ: u8 = 0x05;
    pub const FANOUT: u8 = 0x06;
    pub const ADMIN: u8 = 0x07;
    pub const CATCHUP_BEGIN: u8 = 0x08;
    pub const CATCHUP_END: u8 = 0x09;
    pub const GOODBYE: u8 = 0x0a;
    pub const DROP: u8 = 0x0b;
    pub const MANIFEST_APPLIED: u8 = 0x0c;
    pub const HANDOFF: u8 = 0x0d;
    pub const HANDOFF_END: u8 = 0x0e;
    pub const AUTH: u8 = 0x0f;
    pub const PING: u8 = 0x10;
    pub const HEARTBEAT: u8 = 0x40;
    pub const STATUS: u8 = 0x41;
    pub const ERROR: u8 = 0x42;
    pub const WELCOME: u8 = 0x81;
    pub const ACK: u8 = 0x82;
    pub const TAKEN_OVER: u8 = 0x83;
    pub const MANIFEST: u8 = 0x84;
    pub const MANIFEST_END: u8 = 0x85;
    pub const HANDOFF_DONE: u8 = 0x86;
    pub const CHALLENGE: u8 = 0x87;
    pub const PONG: u8 = 0x88;
}

use frame_type as ft;

/// Which side of a link sends a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The origin (the side that dialled).
    OriginToReplica,
    /// The replica (the side that accepted).
    ReplicaToOrigin,
    Either,
}

/// The origin's opening frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    /// The origin's stable replication node ID (`replication.dat`).
    pub node_id: u64,
    /// The origin's current epoch.
    pub epoch: u64,
    /// `resume_seq` is meaningful: the origin asks to continue after it.
    pub resume: bool,
    /// Acknowledge only what is fdatasync'd (the origin runs `--durable`/`--sync-every=1`).
    pub sync: bool,
    /// Epoch `previous_epoch` ended with an unclean stop: take it over now.
    pub previous_unclean: bool,
    pub resume_seq: u64,
    pub previous_epoch: u64,
    /// The origin's `--replicas`.
    pub replicas: u16,
    /// The largest frame the origin accepts.
    pub max_frame: u32,
    /// The origin's `--node-id` (the 10-bit part of its message IDs).
    pub nsqd_node_id: u16,
    pub broadcast_address: String,
    pub tcp_port: u16,
    pub http_port: u16,
    /// The origin's random challenge for this session (the replica's proof covers it).
    pub nonce: [u8; NONCE_LEN],
}

impl Hello {
    /// A HELLO of a version this codec does not know: only `version` (and `node_id`, when the
    /// decoder found it) is meaningful.
    pub fn other_version(version: u16) -> Hello {
        Hello {
            version,
            node_id: 0,
            epoch: 0,
            resume: false,
            sync: false,
            previous_unclean: false,
            resume_seq: 0,
            previous_epoch: 0,
            replicas: 0,
            max_frame: 0,
            nsqd_node_id: 0,
            broadcast_address: String::new(),
            tcp_port: 0,
            http_port: 0,
            nonce: [0; NONCE_LEN],
        }
    }
}

/// The replica's answer to HELLO before anything else: who and where it is, its own
/// challenge, and its proof of membership (empty when the group has no secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    pub node_id: u64,
    pub nonce: [u8; NONCE_LEN],
    /// The replica's broadcast address and TCP port (as its own HELLO carries them).
    pub broadcast_address: String,
    pub tcp_port: u16,
    pub proof: Bytes,
}

const HELLO_RESUME: u8 = 1;
const HELLO_SYNC: u8 = 2;
const HELLO_PREVIOUS_UNCLEAN: u8 = 4;

/// The replica's answer to HELLO when it has not taken the origin over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    pub version: u16,
    pub node_id: u64,
    pub answer: WelcomeAnswer,
    /// The highest seq the replica holds of the origin's epoch (0: none).
    pub last_seq: u64,
    pub max_frame: u32,
}

/// How the session continues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WelcomeAnswer {
    /// Send from `last_seq + 1`.
    Resume = 1,
    /// Start with CATCHUP_BEGIN.
    Catchup = 2,
}

/// One publish: pending on `channels`, or on the topic itself when that list is empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pub {
    pub seq: u64,
    pub topic: String,
    /// Unix ns; 0 = not deferred.
    pub defer_until: i64,
    pub channels: Vec<String>,
    pub messages: Vec<PubMessage>,
}

/// A message of a [`Pub`] (attempts 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubMessage {
    pub id: MessageId,
    pub timestamp: i64,
    pub body: Bytes,
}

/// One backlog item: a catch-up (STATE), a handoff (HANDOFF) or a compacted store record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Topic(TopicItem),
    Message(MessageItem),
}

const ITEM_TOPIC: u8 = 1;
const ITEM_MESSAGE: u8 = 2;

/// A topic, its pause flag and its channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicItem {
    pub topic: String,
    pub paused: bool,
    pub channels: Vec<ChannelItem>,
}

/// A channel of a [`TopicItem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelItem {
    pub name: String,
    pub paused: bool,
}

/// An unsettled message with where it is pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageItem {
    pub topic: String,
    pub id: MessageId,
    pub timestamp: i64,
    /// Pending on the topic (not yet fanned out to its channels).
    pub topic_pending: bool,
    /// When it is due on the channels it will be fanned out to (Unix ns, 0 = now).
    pub topic_due: i64,
    pub channels: Vec<PendingChannel>,
    pub body: Bytes,
}

/// A channel a message is pending on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingChannel {
    pub name: String,
    /// Unix ns; 0 = not deferred.
    pub due: i64,
    pub attempts: u16,
}

/// Messages a channel finished.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fin {
    pub seq: u64,
    pub topic: String,
    pub channel: String,
    pub ids: Vec<MessageId>,
}

/// Messages requeued (due 0) or deferred on a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub seq: u64,
    pub topic: String,
    pub channel: String,
    pub entries: Vec<ReqEntry>,
}

/// One message of a [`Req`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReqEntry {
    pub id: MessageId,
    pub due: i64,
    pub attempts: u16,
}

/// The topic's pump moved messages to channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fanout {
    pub seq: u64,
    pub topic: String,
    /// Some channels still need these messages: they stay pending on the topic.
    pub more: bool,
    pub channels: Vec<String>,
    pub ids: Vec<MessageId>,
}

/// Topic and channel administration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admin {
    pub seq: u64,
    pub op: AdminOp,
    pub topic: String,
    /// Empty: the operation is on the topic.
    pub channel: String,
}

/// What an [`Admin`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOp {
    Create = 1,
    Delete = 2,
    Empty = 3,
    Pause = 4,
    Unpause = 5,
}

/// What was taken over of one channel (or, with an empty channel, of the topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    pub epoch: u64,
    pub topic: String,
    pub channel: String,
    pub ids: Vec<MessageId>,
}

/// One backlog the sender of a STATUS holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusEntry {
    pub origin: u64,
    pub epoch: u64,
    pub state: BacklogState,
    pub last_seq: u64,
    pub messages: u64,
    pub bytes: u64,
    /// The backlog's catch-up ended: it holds every message of the epoch unsettled at
    /// `last_seq` (flag bit 1 on the wire).
    pub complete: bool,
    /// While `Replicating`: the stamp of the newest PING the sender received from the origin
    /// (the origin's clock, nanoseconds), its proof that a member heard it then; 0 otherwise.
    pub echo: u64,
}

const STATUS_COMPLETE: u8 = 1;

/// The state of a backlog in a STATUS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BacklogState {
    Replicating = 1,
    /// The origin's link is lost.
    Detached = 2,
    TakingOver = 3,
    /// Taken over; the manifest is kept until the origin applies it.
    TakenOver = 4,
    /// The origin is gone for the sender, which takes it over if it is the first candidate.
    Gone = 5,
}

/// The code of an ERROR frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkErrorCode {
    BadFrame = 1,
    /// The replica's backlog of this origin reached `--replication-max-backlog-bytes`.
    Full = 2,
    OutOfSequence = 3,
    /// Not a member of the group, or a link to oneself.
    NotInGroup = 4,
    Internal = 5,
    UnsupportedVersion = 6,
}

/// Every frame of the link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Pub(Pub),
    State(Item),
    Fin(Fin),
    Req(Req),
    Fanout(Fanout),
    Admin(Admin),
    CatchupBegin {
        seq: u64,
    },
    CatchupEnd {
        seq: u64,
    },
    Goodbye {
        seq: u64,
    },
    /// You are not my replica of epochs up to `epoch` (any more): `taker` took them over
    /// (0: none named), so a copy of them goes to `taker` as a handoff, never to a second
    /// takeover.
    Drop {
        epoch: u64,
        taker: u64,
    },
    ManifestApplied {
        epoch: u64,
    },
    Handoff {
        origin: u64,
        epoch: u64,
        item: Item,
    },
    HandoffEnd {
        origin: u64,
        epoch: u64,
        items: u64,
    },
    /// The origin's proof of membership (empty when the group has no secret).
    Auth {
        proof: Bytes,
    },
    Heartbeat,
    /// The origin's heartbeat carrying its monotonic clock (nanoseconds); answered with PONG.
    Ping {
        stamp: u64,
    },
    /// The replica's answer to PING, echoing its stamp.
    Pong {
        stamp: u64,
    },
    Status(Vec<StatusEntry>),
    Error {
        code: LinkErrorCode,
        text: String,
    },
    Welcome(Welcome),
    Ack {
        seq: u64,
    },
    TakenOver {
        epoch: u64,
        by_node: u64,
        entries: u64,
        /// The `last_seq` of the copy that was taken over: a listed message leaves the
        /// origin only if it took it in an earlier epoch or in `epoch` up to this seq.
        last_seq: u64,
    },
    Manifest(Manifest),
    ManifestEnd {
        epoch: u64,
    },
    HandoffDone {
        origin: u64,
        epoch: u64,
    },
    Challenge(Challenge),
}

impl Frame {
    /// The type byte.
    pub fn frame_type(&self) -> u8 {
        match self {
            Frame::Hello(_) => ft::HELLO,
            Frame::Pub(_) => ft::PUB,
            Frame::State(_) => ft::STATE,
            Frame::Fin(_) => ft::FIN,
            Frame::Req(_) => ft::REQ,
            Frame::Fanout(_) => ft::FANOUT,
            Frame::Admin(_) => ft::ADMIN,
            Frame::CatchupBegin { .. } => ft::CATCHUP_BEGIN,
            Frame::CatchupEnd { .. } => ft::CATCHUP_END,
            Frame::Goodbye { .. } => ft::GOODBYE,
            Frame::Drop { .. } => ft::DROP,
            Frame::ManifestApplied { .. } => ft::MANIFEST_APPLIED,
            Frame::Handoff { .. } => ft::HANDOFF,
            Frame::HandoffEnd { .. } => ft::HANDOFF_END,
            Frame::Auth { .. } => ft::AUTH,
            Frame::Heartbeat => ft::HEARTBEAT,
            Frame::Ping { .. } => ft::PING,
            Frame::Pong { .. } => ft::PONG,
            Frame::Status(_) => ft::STATUS,
            Frame::Error { .. } => ft::ERROR,
            Frame::Welcome(_) => ft::WELCOME,
            Frame::Ack { .. } => ft::ACK,
            Frame::TakenOver { .. } => ft::TAKEN_OVER,
            Frame::Manifest(_) => ft::MANIFEST,
            Frame::ManifestEnd { .. } => ft::MANIFEST_END,
            Frame::HandoffDone { .. } => ft::HANDOFF_DONE,
            Frame::Challenge(_) => ft::CHALLENGE,
        }
    }

    /// Which side sends it.
    pub fn direction(&self) -> Direction {
        match self.frame_type() {
            ft::HEARTBEAT | ft::STATUS | ft::ERROR => Direction::Either,
            t if t & 0x80 != 0 => Direction::ReplicaToOrigin,
            _ => Direction::OriginToReplica,
        }
    }

    /// The log position a frame carries: PUB, FIN, REQ, FANOUT and ADMIN their own seq (the
    /// one after the last); CATCHUP_BEGIN the seq the catch-up's state is as of, CATCHUP_END
    /// and GOODBYE the last seq sent before them. `None` for every other frame.
    pub fn seq(&self) -> Option<u64> {
        match self {
            Frame::Pub(p) => Some(p.seq),
            Frame::Fin(f) => Some(f.seq),
            Frame::Req(r) => Some(r.seq),
            Frame::Fanout(f) => Some(f.seq),
            Frame::Admin(a) => Some(a.seq),
            Frame::CatchupBegin { seq } | Frame::CatchupEnd { seq } | Frame::Goodbye { seq } => {
                Some(*seq)
            }
            _ => None,
        }
    }
}

/// Why bytes are not a valid frame. Every one ends the session (an ERROR frame, then close).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The size field is 0: no room for the type byte.
    #[error("replication frame of size 0")]
    EmptyFrame,
    /// The size field is above the limit.
    #[error("replication frame of {size} bytes is above the limit of {max}")]
    Oversize { size: u64, max: u64 },
    #[error("unknown replication frame type 0x{0:02x}")]
    UnknownType(u8),
    /// The payload ends inside a field.
    #[error("replication frame 0x{frame_type:02x} is truncated")]
    Truncated { frame_type: u8 },
    /// The payload has bytes after its last field.
    #[error("replication frame 0x{frame_type:02x} has {extra} trailing bytes")]
    TrailingBytes { frame_type: u8, extra: usize },
    /// A list count that cannot fit in the rest of the payload.
    #[error("replication frame 0x{frame_type:02x}: a count of {count} does not fit")]
    BadCount { frame_type: u8, count: u64 },
    #[error("replication frame 0x{frame_type:02x}: a name is not UTF-8")]
    BadUtf8 { frame_type: u8 },
    /// A value outside its enumeration (op, kind, state, answer, code, flag bits).
    #[error("replication frame 0x{frame_type:02x}: bad {what} {value}")]
    BadValue {
        frame_type: u8,
        what: &'static str,
        value: u64,
    },
    /// A string too long for its length field (encoding only).
    #[error("a string of {0} bytes is too long for its field")]
    StringTooLong(usize),
    /// A list longer than its `u16` count field (encoding only).
    #[error("a list of {0} items is too long for its count field")]
    ListTooLong(usize),
    /// A membership proof above [`MAX_PROOF_LEN`] bytes (encoding only).
    #[error("a proof of {0} bytes is too long")]
    ProofTooLong(usize),
}

// ---------------------------------------------------------------------------------------
// Encoding

/// Appends one whole frame (`[u32 size][u8 type][payload]`).
///
/// Panics if a name is longer than 255 bytes or an error text longer than 65535 (the caller
/// validates names as NSQ does, at most 64 bytes); use [`try_encode`] to get an error.
pub fn encode<B: BufMut + AsMut<[u8]>>(frame: &Frame, out: &mut B) {
    try_encode(frame, out).expect("replication frame fields within their length limits")
}

/// [`encode`], returning [`FrameError::StringTooLong`] instead of panicking. On error `out`
/// may hold a partial frame; the caller discards it.
pub fn try_encode<B: BufMut + AsMut<[u8]>>(frame: &Frame, out: &mut B) -> Result<(), FrameError> {
    let start = out.as_mut().len();
    out.put_u32(0);
    out.put_u8(frame.frame_type());
    encode_payload(frame, out)?;
    let size = (out.as_mut().len() - start - 4) as u32;
    out.as_mut()[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Appends the payload of `frame` (without size and type).
pub fn encode_payload(frame: &Frame, out: &mut impl BufMut) -> Result<(), FrameError> {
    match frame {
        Frame::Hello(h) => {
            out.put_u16(h.version);
            out.put_u64(h.node_id);
            out.put_u64(h.epoch);
            let mut flags = 0;
            if h.resume {
                flags |= HELLO_RESUME;
            }
            if h.sync {
                flags |= HELLO_SYNC;
            }
            if h.previous_unclean {
                flags |= HELLO_PREVIOUS_UNCLEAN;
            }
            out.put_u8(flags);
            out.put_u64(h.resume_seq);
            out.put_u64(h.previous_epoch);
            out.put_u16(h.replicas);
            out.put_u32(h.max_frame);
            out.put_u16(h.nsqd_node_id);
            put_str8(out, &h.broadcast_address)?;
            out.put_u16(h.tcp_port);
            out.put_u16(h.http_port);
            out.put_slice(&h.nonce);
        }
        Frame::Pub(p) => {
            out.put_u64(p.seq);
            put_str8(out, &p.topic)?;
            out.put_i64(p.defer_until);
            put_names(out, &p.channels)?;
            out.put_u32(p.messages.len() as u32);
            for m in &p.messages {
                out.put_slice(&m.id.0);
                out.put_i64(m.timestamp);
                put_bytes(out, &m.body);
            }
        }
        Frame::State(item) => put_item(out, item)?,
        Frame::Fin(f) => {
            out.put_u64(f.seq);
            put_str8(out, &f.topic)?;
            put_str8(out, &f.channel)?;
            put_ids(out, &f.ids);
        }
        Frame::Req(r) => {
            out.put_u64(r.seq);
            put_str8(out, &r.topic)?;
            put_str8(out, &r.channel)?;
            out.put_u32(r.entries.len() as u32);
            for e in &r.entries {
                out.put_slice(&e.id.0);
                out.put_i64(e.due);
                out.put_u16(e.attempts);
            }
        }
        Frame::Fanout(f) => {
            out.put_u64(f.seq);
            put_str8(out, &f.topic)?;
            out.put_u8(u8::from(f.more));
            put_names(out, &f.channels)?;
            put_ids(out, &f.ids);
        }
        Frame::Admin(a) => {
            out.put_u64(a.seq);
            out.put_u8(a.op as u8);
            put_str8(out, &a.topic)?;
            put_str8(out, &a.channel)?;
        }
        Frame::CatchupBegin { seq }
        | Frame::CatchupEnd { seq }
        | Frame::Goodbye { seq }
        | Frame::Ack { seq } => out.put_u64(*seq),
        Frame::ManifestApplied { epoch } | Frame::ManifestEnd { epoch } => out.put_u64(*epoch),
        Frame::Drop { epoch, taker } => {
            out.put_u64(*epoch);
            out.put_u64(*taker);
        }
        Frame::Ping { stamp } | Frame::Pong { stamp } => out.put_u64(*stamp),
        Frame::Handoff {
            origin,
            epoch,
            item,
        } => {
            out.put_u64(*origin);
            out.put_u64(*epoch);
            put_item(out, item)?;
        }
        Frame::HandoffEnd {
            origin,
            epoch,
            items,
        } => {
            out.put_u64(*origin);
            out.put_u64(*epoch);
            out.put_u64(*items);
        }
        Frame::Auth { proof } => put_proof(out, proof)?,
        Frame::Heartbeat => {}
        Frame::Status(entries) => {
            put_count16(out, entries.len())?;
            for e in entries {
                out.put_u64(e.origin);
                out.put_u64(e.epoch);
                out.put_u8(e.state as u8);
                out.put_u64(e.last_seq);
                out.put_u64(e.messages);
                out.put_u64(e.bytes);
                out.put_u8(if e.complete { STATUS_COMPLETE } else { 0 });
                out.put_u64(e.echo);
            }
        }
        Frame::Error { code, text } => {
            out.put_u16(*code as u16);
            if text.len() > u16::MAX as usize {
                return Err(FrameError::StringTooLong(text.len()));
            }
            out.put_u16(text.len() as u16);
            out.put_slice(text.as_bytes());
        }
        Frame::Welcome(w) => {
            out.put_u16(w.version);
            out.put_u64(w.node_id);
            out.put_u8(w.answer as u8);
            out.put_u64(w.last_seq);
            out.put_u32(w.max_frame);
        }
        Frame::TakenOver {
            epoch,
            by_node,
            entries,
            last_seq,
        } => {
            out.put_u64(*epoch);
            out.put_u64(*by_node);
            out.put_u64(*entries);
            out.put_u64(*last_seq);
        }
        Frame::Manifest(m) => {
            out.put_u64(m.epoch);
            put_str8(out, &m.topic)?;
            put_str8(out, &m.channel)?;
            put_ids(out, &m.ids);
        }
        Frame::HandoffDone { origin, epoch } => {
            out.put_u64(*origin);
            out.put_u64(*epoch);
        }
        Frame::Challenge(c) => {
            out.put_u64(c.node_id);
            out.put_slice(&c.nonce);
            put_str8(out, &c.broadcast_address)?;
            out.put_u16(c.tcp_port);
            put_proof(out, &c.proof)?;
        }
    }
    Ok(())
}

/// A `u16` list count; a longer list is an error, not a wrapped count.
fn put_count16(out: &mut impl BufMut, n: usize) -> Result<(), FrameError> {
    let n = u16::try_from(n).map_err(|_| FrameError::ListTooLong(n))?;
    out.put_u16(n);
    Ok(())
}

fn put_proof(out: &mut impl BufMut, proof: &[u8]) -> Result<(), FrameError> {
    if proof.len() > MAX_PROOF_LEN {
        return Err(FrameError::ProofTooLong(proof.len()));
    }
    out.put_u8(proof.len() as u8);
    out.put_slice(proof);
    Ok(())
}

fn put_str8(out: &mut impl BufMut, s: &str) -> Result<(), FrameError> {
    if s.len() > u8::MAX as usize {
        return Err(FrameError::StringTooLong(s.len()));
    }
    out.put_u8(s.len() as u8);
    out.put_slice(s.as_bytes());
    Ok(())
}

fn put_names(out: &mut impl BufMut, names: &[String]) -> Result<(), FrameError> {
    put_count16(out, names.len())?;
    names.iter().try_for_each(|n| put_str8(out, n))
}

fn put_ids(out: &mut impl BufMut, ids: &[MessageId]) {
    out.put_u32(ids.len() as u32);
    for id in ids {
        out.put_slice(&id.0);
    }
}

fn put_bytes(out: &mut impl BufMut, b: &[u8]) {
    out.put_u32(b.len() as u32);
    out.put_slice(b);
}

fn put_item(out: &mut impl BufMut, item: &Item) -> Result<(), FrameError> {
    match item {
        Item::Topic(t) => {
            out.put_u8(ITEM_TOPIC);
            put_str8(out, &t.topic)?;
            out.put_u8(u8::from(t.paused));
            put_count16(out, t.channels.len())?;
            for c in &t.channels {
                put_str8(out, &c.name)?;
                out.put_u8(u8::from(c.paused));
            }
        }
        Item::Message(m) => {
            out.put_u8(ITEM_MESSAGE);
            put_str8(out, &m.topic)?;
            out.put_slice(&m.id.0);
            out.put_i64(m.timestamp);
            out.put_u8(u8::from(m.topic_pending));
            out.put_i64(m.topic_due);
            put_count16(out, m.channels.len())?;
            for c in &m.channels {
                put_str8(out, &c.name)?;
                out.put_i64(c.due);
                out.put_u16(c.attempts);
            }
            put_bytes(out, &m.body);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Takes one whole frame off the front of `buf`; `Ok(None)` = need more bytes (nothing is
/// consumed). A frame whose size is above `max_frame` is refused as soon as its size field
/// has arrived. Bodies share `buf`'s allocation.
pub fn decode(buf: &mut BytesMut, max_frame: u32) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes(buf[0..4].try_into().expect("4 bytes"));
    if size == 0 {
        return Err(FrameError::EmptyFrame);
    }
    if size > max_frame {
        return Err(FrameError::Oversize {
            size: u64::from(size),
            max: u64::from(max_frame),
        });
    }
    if buf.len() < 4 + size as usize {
        return Ok(None);
    }
    buf.advance(4);
    let mut frame = buf.split_to(size as usize).freeze();
    let ty = frame.get_u8();
    decode_payload(ty, frame).map(Some)
}

/// Decodes the payload of a frame of type `frame_type` (everything after the type byte).
pub fn decode_payload(frame_type: u8, payload: Bytes) -> Result<Frame, FrameError> {
    let mut r = Reader {
        ty: frame_type,
        buf: payload,
    };
    let frame = match frame_type {
        ft::HELLO => {
            let version = r.u16()?;
            if version != LINK_VERSION {
                // Another version's layout: only its version and node ID are read.
                let mut h = Hello::other_version(version);
                if r.buf.len() >= 8 {
                    h.node_id = r.u64()?;
                }
                return Ok(Frame::Hello(h));
            }
            let node_id = r.u64()?;
            let epoch = r.u64()?;
            let flags = r.u8()?;
            if flags & !(HELLO_RESUME | HELLO_SYNC | HELLO_PREVIOUS_UNCLEAN) != 0 {
                return Err(r.bad("HELLO flags", flags.into()));
            }
            Frame::Hello(Hello {
                version,
                node_id,
                epoch,
                resume: flags & HELLO_RESUME != 0,
                sync: flags & HELLO_SYNC != 0,
                previous_unclean: flags & HELLO_PREVIOUS_UNCLEAN != 0,
                resume_seq: r.u64()?,
                previous_epoch: r.u64()?,
                replicas: r.u16()?,
                max_frame: r.u32()?,
                nsqd_node_id: r.u16()?,
                broadcast_address: r.str8()?,
                tcp_port: r.u16()?,
                http_port: r.u16()?,
                nonce: r.nonce()?,
            })
        }
        ft::PUB => {
            let seq = r.u64()?;
            let topic = r.str8()?;
            let defer_until = r.i64()?;
            let channels = r.names()?;
            let n = r.count32(16 + 8 + 4)?;
            let mut messages = Vec::with_capacity(n);
            for _ in 0..n {
                messages.push(PubMessage {
                    id: r.id()?,
                    timestamp: r.i64()?,
                    body: r.bytes()?,
                });
            }
            Frame::Pub(Pub {
                seq,
                topic,
                defer_until,
                channels,
                messages,
            })
        }
        ft::STATE => Frame::State(r.item()?),
        ft::FIN => Frame::Fin(Fin {
            seq: r.u64()?,
            topic: r.str8()?,
            channel: r.str8()?,
            ids: r.ids()?,
        }),
        ft::REQ => {
            let seq = r.u64()?;
            let topic = r.str8()?;
            let channel = r.str8()?;
            let n = r.count32(16 + 8 + 2)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                entries.push(ReqEntry {
                    id: r.id()?,
                    due: r.i64()?,
                    attempts: r.u16()?,
                });
            }
            Frame::Req(Req {
                seq,
                topic,
                channel,
                entries,
            })
        }
        ft::FANOUT => {
            let seq = r.u64()?;
            let topic = r.str8()?;
            let more = r.flag("FANOUT flags")?;
            Frame::Fanout(Fanout {
                seq,
                topic,
                more,
                channels: r.names()?,
                ids: r.ids()?,
            })
        }
        ft::ADMIN => {
            let seq = r.u64()?;
            let op = match r.u8()? {
                1 => AdminOp::Create,
                2 => AdminOp::Delete,
                3 => AdminOp::Empty,
                4 => AdminOp::Pause,
                5 => AdminOp::Unpause,
                v => return Err(r.bad("ADMIN op", v.into())),
            };
            Frame::Admin(Admin {
                seq,
                op,
                topic: r.str8()?,
                channel: r.str8()?,
            })
        }
        ft::CATCHUP_BEGIN => Frame::CatchupBegin { seq: r.u64()? },
        ft::CATCHUP_END => Frame::CatchupEnd { seq: r.u64()? },
        ft::GOODBYE => Frame::Goodbye { seq: r.u64()? },
        ft::DROP => Frame::Drop {
            epoch: r.u64()?,
            taker: r.u64()?,
        },
        ft::PING => Frame::Ping { stamp: r.u64()? },
        ft::PONG => Frame::Pong { stamp: r.u64()? },
        ft::MANIFEST_APPLIED => Frame::ManifestApplied { epoch: r.u64()? },
        ft::HANDOFF => Frame::Handoff {
            origin: r.u64()?,
            epoch: r.u64()?,
            item: r.item()?,
        },
        ft::HANDOFF_END => Frame::HandoffEnd {
            origin: r.u64()?,
            epoch: r.u64()?,
            items: r.u64()?,
        },
        ft::AUTH => Frame::Auth { proof: r.proof()? },
        ft::HEARTBEAT => Frame::Heartbeat,
        ft::STATUS => {
            let n = r.count16(8 + 8 + 1 + 8 + 8 + 8 + 1 + 8)?;
            let mut entries = Vec::with_capacity(n);
            for _ in 0..n {
                let origin = r.u64()?;
                let epoch = r.u64()?;
                let state = match r.u8()? {
                    1 => BacklogState::Replicating,
                    2 => BacklogState::Detached,
                    3 => BacklogState::TakingOver,
                    4 => BacklogState::TakenOver,
                    5 => BacklogState::Gone,
                    v => return Err(r.bad("STATUS state", v.into())),
                };
                let (last_seq, messages, bytes) = (r.u64()?, r.u64()?, r.u64()?);
                let flags = r.u8()?;
                entries.push(StatusEntry {
                    origin,
                    epoch,
                    state,
                    last_seq,
                    messages,
                    bytes,
                    complete: flags & STATUS_COMPLETE != 0,
                    echo: r.u64()?,
                });
            }
            Frame::Status(entries)
        }
        ft::ERROR => {
            let code = match r.u16()? {
                1 => LinkErrorCode::BadFrame,
                2 => LinkErrorCode::Full,
                3 => LinkErrorCode::OutOfSequence,
                4 => LinkErrorCode::NotInGroup,
                5 => LinkErrorCode::Internal,
                6 => LinkErrorCode::UnsupportedVersion,
                v => return Err(r.bad("ERROR code", v.into())),
            };
            let len = r.u16()? as usize;
            let text = r.utf8(len)?;
            Frame::Error { code, text }
        }
        ft::WELCOME => {
            let version = r.u16()?;
            let node_id = r.u64()?;
            let answer = match r.u8()? {
                1 => WelcomeAnswer::Resume,
                2 => WelcomeAnswer::Catchup,
                v => return Err(r.bad("WELCOME answer", v.into())),
            };
            Frame::Welcome(Welcome {
                version,
                node_id,
                answer,
                last_seq: r.u64()?,
                max_frame: r.u32()?,
            })
        }
        ft::ACK => Frame::Ack { seq: r.u64()? },
        ft::TAKEN_OVER => Frame::TakenOver {
            epoch: r.u64()?,
            by_node: r.u64()?,
            entries: r.u64()?,
            last_seq: r.u64()?,
        },
        ft::MANIFEST => Frame::Manifest(Manifest {
            epoch: r.u64()?,
            topic: r.str8()?,
            channel: r.str8()?,
            ids: r.ids()?,
        }),
        ft::MANIFEST_END => Frame::ManifestEnd { epoch: r.u64()? },
        ft::HANDOFF_DONE => Frame::HandoffDone {
            origin: r.u64()?,
            epoch: r.u64()?,
        },
        ft::CHALLENGE => Frame::Challenge(Challenge {
            node_id: r.u64()?,
            nonce: r.nonce()?,
            broadcast_address: r.str8()?,
            tcp_port: r.u16()?,
            proof: r.proof()?,
        }),
        other => return Err(FrameError::UnknownType(other)),
    };
    if !r.buf.is_empty() {
        return Err(FrameError::TrailingBytes {
            frame_type,
            extra: r.buf.len(),
        });
    }
    Ok(frame)
}

/// Reads fields off a payload, every read checked.
struct Reader {
    ty: u8,
    buf: Bytes,
}

impl Reader {
    fn need(&self, n: usize) -> Result<(), FrameError> {
        if self.buf.len() < n {
            Err(FrameError::Truncated {
                frame_type: self.ty,
            })
        } else {
            Ok(())
        }
    }

    fn bad(&self, what: &'static str, value: u64) -> FrameError {
        FrameError::BadValue {
            frame_type: self.ty,
            what,
            value,
        }
    }

    fn u8(&mut self) -> Result<u8, FrameError> {
        self.need(1)?;
        Ok(self.buf.get_u8())
    }

    fn flag(&mut self, what: &'static str) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(self.bad(what, v.into())),
        }
    }

    fn u16(&mut self) -> Result<u16, FrameError> {
        self.need(2)?;
        Ok(self.buf.get_u16())
    }

    fn u32(&mut self) -> Result<u32, FrameError> {
        self.need(4)?;
        Ok(self.buf.get_u32())
    }

    fn u64(&mut self) -> Result<u64, FrameError> {
        self.need(8)?;
        Ok(self.buf.get_u64())
    }

    fn i64(&mut self) -> Result<i64, FrameError> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    fn id(&mut self) -> Result<MessageId, FrameError> {
        self.need(16)?;
        let mut id = [0u8; 16];
        self.buf.copy_to_slice(&mut id);
        Ok(MessageId(id))
    }

    fn utf8(&mut self, len: usize) -> Result<String, FrameError> {
        self.need(len)?;
        let raw = self.buf.split_to(len);
        String::from_utf8(raw.to_vec()).map_err(|_| FrameError::BadUtf8 {
            frame_type: self.ty,
        })
    }

    fn str8(&mut self) -> Result<String, FrameError> {
        let len = self.u8()? as usize;
        self.utf8(len)
    }

    fn nonce(&mut self) -> Result<[u8; NONCE_LEN], FrameError> {
        self.need(NONCE_LEN)?;
        let mut n = [0u8; NONCE_LEN];
        self.buf.copy_to_slice(&mut n);
        Ok(n)
    }

    /// `u8` length + bytes, at most [`MAX_PROOF_LEN`].
    fn proof(&mut self) -> Result<Bytes, FrameError> {
        let len = self.u8()? as usize;
        if len > MAX_PROOF_LEN {
            return Err(self.bad("proof length", len as u64));
        }
        self.need(len)?;
        Ok(self.buf.split_to(len))
    }

    fn bytes(&mut self) -> Result<Bytes, FrameError> {
        let len = self.u32()? as usize;
        self.need(len)?;
        Ok(self.buf.split_to(len))
    }

    /// A count of items of at least `min` bytes each, checked against what is left.
    fn check_count(&self, count: u64, min: usize) -> Result<usize, FrameError> {
        if count.saturating_mul(min as u64) > self.buf.len() as u64 {
            return Err(FrameError::BadCount {
                frame_type: self.ty,
                count,
            });
        }
        Ok(count as usize)
    }

    fn count16(&mut self, min: usize) -> Result<usize, FrameError> {
        let n = self.u16()?;
        self.check_count(n.into(), min)
    }

    fn count32(&mut self, min: usize) -> Result<usize, FrameError> {
        let n = self.u32()?;
        self.check_count(n.into(), min)
    }

    fn names(&mut self) -> Result<Vec<String>, FrameError> {
        let n = self.count16(1)?;
        (0..n).map(|_| self.str8()).collect()
    }

    fn ids(&mut self) -> Result<Vec<MessageId>, FrameError> {
        let n = self.count32(16)?;
        (0..n).map(|_| self.id()).collect()
    }

    fn item(&mut self) -> Result<Item, FrameError> {
        match self.u8()? {
            ITEM_TOPIC => {
                let topic = self.str8()?;
                let paused = self.flag("TOPIC flags")?;
                let n = self.count16(2)?;
                let mut channels = Vec::with_capacity(n);
                for _ in 0..n {
                    channels.push(ChannelItem {
                        name: self.str8()?,
                        paused: self.flag("channel flags")?,
                    });
                }
                Ok(Item::Topic(TopicItem {
                    topic,
                    paused,
                    channels,
                }))
            }
            ITEM_MESSAGE => {
                let topic = self.str8()?;
                let id = self.id()?;
                let timestamp = self.i64()?;
                let topic_pending = self.flag("MESSAGE flags")?;
                let topic_due = self.i64()?;
                let n = self.count16(1 + 8 + 2)?;
                let mut channels = Vec::with_capacity(n);
                for _ in 0..n {
                    channels.push(PendingChannel {
                        name: self.str8()?,
                        due: self.i64()?,
                        attempts: self.u16()?,
                    });
                }
                Ok(Item::Message(MessageItem {
                    topic,
                    id,
                    timestamp,
                    topic_pending,
                    topic_due,
                    channels,
                    body: self.bytes()?,
                }))
            }
            v => Err(self.bad("item kind", v.into())),
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::OriginToReplica => "origin to replica",
            Direction::ReplicaToOrigin => "replica to origin",
            Direction::Either => "either direction",
        })
    }
}

#[cfg(test)]
mod tests;
