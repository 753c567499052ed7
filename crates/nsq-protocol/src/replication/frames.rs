//! The frames of the link: [`Frame`] and the structs and enums its variants carry.

use std::fmt;

use bytes::Bytes;

use super::frame_type as ft;
use super::{LinkErrorCode, NONCE_LEN};
use crate::message::MessageId;

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

pub(super) const HELLO_RESUME: u8 = 1;
pub(super) const HELLO_SYNC: u8 = 2;
pub(super) const HELLO_PREVIOUS_UNCLEAN: u8 = 4;

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

pub(super) const ITEM_TOPIC: u8 = 1;
pub(super) const ITEM_MESSAGE: u8 = 2;
/// A TOPIC item's or channel's flag: settings follow the flags byte.
pub(super) const ITEM_SETTINGS: u8 = 2;

/// A topic, its pause flag, its queue settings and its channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicItem {
    pub topic: String,
    pub paused: bool,
    pub settings: Settings,
    pub channels: Vec<ChannelItem>,
}

/// A channel of a [`TopicItem`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelItem {
    pub name: String,
    pub paused: bool,
    pub settings: Settings,
}

/// A topic's or channel's queue settings as `(key, value)` text pairs (nsq-core's
/// `QueueSettings::to_pairs`); empty: none set. The link carries them as they are, so a key
/// added later needs no new frame layout.
pub type Settings = Vec<(String, String)>;

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
    /// [`AdminOp::Settings`]: the queue's whole settings after the change (empty: all
    /// cleared). Empty for every other op.
    pub settings: Settings,
}

/// What an [`Admin`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminOp {
    Create = 1,
    Delete = 2,
    Empty = 3,
    Pause = 4,
    Unpause = 5,
    /// The queue's settings changed (`POST /topic/config`, `/channel/config`).
    Settings = 6,
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

pub(super) const STATUS_COMPLETE: u8 = 1;

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
    /// You are outside my replica set of `epoch`, which holds every acknowledged message
    /// without you: delete your copy of `epoch`, keep the session (a catch-up follows on it
    /// if you join the set later).
    Standby {
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
            Frame::Standby { .. } => ft::STANDBY,
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

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::OriginToReplica => "origin to replica",
            Direction::ReplicaToOrigin => "replica to origin",
            Direction::Either => "either direction",
        })
    }
}
