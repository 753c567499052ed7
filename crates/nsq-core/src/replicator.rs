//! The engine's side of replication (issue 22, docs/replication.md "Settlement streaming"):
//! what the topic and channel drivers tell a [`Replicator`] as it happens, so that the daemon
//! can stream publishes and settlements to the node's replicas in the order they took effect,
//! and the snapshot a catch-up sends (items of `nsq_protocol::replication`), read in bounded
//! chunks by [`CatchupScan`].
//!
//! The calls are made by the drivers (`Topic`, `Channel`), never by the sans-I/O states, at
//! points that order them with what they describe: a publish while the topic lock still holds
//! the decision (before any consumer can see the message), a fan-out before the channels get
//! the batch, a FIN or REQ under the channel lock. Ephemeral topics and channels have no
//! replicator; without replication nothing has one, and each hook site is one `None` test.
//! NSQ has nothing like it (nsqd/topic.go and nsqd/channel.go keep a message on one node).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use nsq_protocol::replication::{AdminOp, Item, ReqEntry};
use nsq_protocol::MessageId;

use crate::backend::{BackendError, RecordPos};
use crate::channel::Channel;
use crate::engine::Engine;
use crate::message::Message;
use crate::topic::{Topic, TopicDisk};

/// Receives the engine's replicated events (see the module comment). Implementations must be
/// cheap and must not call back into the engine: they are called under topic and channel
/// locks.
pub trait Replicator: Send + Sync + 'static {
    /// Encodes the messages of a publish for its PUB frame, before any lock is taken.
    fn encode_messages(&self, msgs: &[Message]) -> Bytes;
    /// A publish of the messages `encode_messages` returned: pending on `channels` (the
    /// topic's channels it was handed to directly; ephemeral ones are skipped) or, with
    /// `None`, on the topic. `defer_until` is Unix ns (0: not deferred). Returns the log seq
    /// the publisher's acknowledgement waits for (0: nothing to wait for).
    fn publish(
        &self,
        topic: &str,
        defer_until: i64,
        channels: Option<&[Arc<Channel>]>,
        messages: Bytes,
    ) -> u64;
    /// The topic's pump is about to hand `msgs` to `channels`: they leave the topic.
    fn fanout(&self, topic: &str, channels: &[Arc<Channel>], msgs: &[Message]);
    /// A channel finished these messages.
    fn finish(&self, topic: &str, channel: &str, ids: &[MessageId]);
    /// A channel requeued (`due` 0) or deferred a message.
    fn requeue(&self, topic: &str, channel: &str, entry: ReqEntry);
    /// Topic or channel (empty `channel`: the topic) administration.
    fn admin(&self, op: AdminOp, topic: &str, channel: &str);
    /// A topic's or channel's (empty `channel`: the topic) queue settings changed; `settings`
    /// are all of them after the change (`QueueSettings::to_pairs`, empty: all cleared).
    fn settings(&self, topic: &str, channel: &str, settings: nsq_protocol::replication::Settings);
}

/// Why a catch-up snapshot could not be taken: the session that wanted it must end without
/// CATCHUP_END (the replica's copy stays incomplete) and a new session catch up again.
#[derive(Debug)]
pub enum CatchupError {
    /// A diskqueue's unread part could not be read (empty `channel`: the topic's own).
    Backend {
        topic: String,
        channel: String,
        err: BackendError,
    },
    /// A channel's backend writes stayed outstanding (a stuck disk): its messages being
    /// written are in no queue, a snapshot would miss them.
    Unsettled { topic: String, channel: String },
}

impl std::fmt::Display for CatchupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CatchupError::Backend {
                topic,
                channel,
                err,
            } if channel.is_empty() => write!(f, "topic {topic}: cannot read its backend - {err}"),
            CatchupError::Backend {
                topic,
                channel,
                err,
            } => write!(
                f,
                "channel {topic}:{channel}: cannot read its backend - {err}"
            ),
            CatchupError::Unsettled { topic, channel } => write!(
                f,
                "channel {topic}:{channel}: backend writes still outstanding"
            ),
        }
    }
}

impl std::error::Error for CatchupError {}

/// A catch-up snapshot (docs/replication.md, "Who holds which origin's messages"), read in
/// bounded chunks: topic by topic, its STATE TOPIC item, its memory queue and stalled batch,
/// the unread records of its diskqueue; then channel by channel the unread records of the
/// channel's diskqueue and, with the last of them, its memory queue, in-flight and deferred
/// messages. Each step holds the topic's pump lock or the channel's lock for itself only,
/// and reads about the chunk's bytes of bodies from disk, so neither memory nor a lock is
/// held for a whole scan; the caller asks for the next chunk when it has sent the last one.
///
/// # Why chunks taken at different times make a correct snapshot
///
/// The replica applies a STATE item as "pending (again) as stated": it only adds. So two
/// things must hold, each at the replica's CATCHUP_END.
///
/// **Nothing stale.** A STATE item is true when it is read (each step reads under the lock
/// that orders it with the events it describes: the pump lock for the topic, the channel
/// lock — with no backend write outstanding — for a channel; a disk step hands over only
/// records at or after the read position, i.e. still unread). It may stop being true
/// later: a FIN, a FANOUT, a deletion. Those events are frames of the live log, produced
/// after the read, so with seqs above the log's last seq *before* the chunk was read. The
/// link therefore sends a chunk before any live frame above that seq (the caller records
/// `OriginLog::last_seq()` before calling [`CatchupScan::next_chunk`] and holds later
/// frames back until the chunk is sent): every settlement of a STATE's message follows the
/// STATE on the wire and undoes it, or — for a message the replica did not know — leaves a
/// tombstone the STATE then respects. Live frames produced *before* the read may be sent
/// after the chunk: they only replay history the STATE already reflects (a PUB re-adds what
/// the STATE says is pending; a FIN, FANOUT or deletion of before the read concerns a place
/// the STATE does not list).
///
/// **Nothing missing.** Every message unsettled at CATCHUP_END that no live frame of the
/// catch-up announced (a PUB after CATCHUP_BEGIN adds it; a FANOUT or REQ moves or
/// confirms a place of a message the replica knows) was pending since before the catch-up,
/// and a message only moves forward: topic memory or topic disk → channels (FANOUT, before
/// the channels have it); channel disk → in flight → channel memory, channel disk (appended
/// at its end) or deferred → … until settled. The topic is read before its channels, and
/// the channels read are those that exist when the topic's scan ends: a message the topic
/// scan missed because the pump moved it meanwhile is in one of them when it is read (the
/// pump finished the move under the pump lock, the channel's write under its lock; a FANOUT
/// of a message the replica does not know carries no body, so the channel's STATE is what
/// brings it). Within a channel, the
/// disk steps follow the write position until one reaches it, and that step's lock also
/// covers the memory sets: a message pending here then is in memory (read now), or on disk
/// at or after the read position — every such record was read by a step while it was
/// unread (a record's position never moves back before the read position, and records
/// appended meanwhile are read by the later steps). Each step catches up with what was
/// appended since the last at the link's speed; records appended to a channel's disk are
/// live publishes or requeues carried by the same link, so the scan ends unless the link
/// cannot keep up with the live frames either (then the outbox drops the session anyway).
///
/// Memory: the bodies read from disk per chunk (about `max_bytes`, at least one record);
/// memory-resident messages are handed over as shared `Bytes` (no copy).
pub struct CatchupScan {
    topics: VecDeque<Arc<Topic>>,
    at: Step,
}

/// Where a [`CatchupScan`] stands.
enum Step {
    /// The next topic's head.
    Head,
    /// The topic's diskqueue from a position (then its channels).
    TopicDisk {
        topic: Arc<Topic>,
        from: Option<RecordPos>,
    },
    /// The front channel's diskqueue from a position (then its memory), then the others.
    Channel {
        channels: VecDeque<Arc<Channel>>,
        from: Option<RecordPos>,
    },
}

impl CatchupScan {
    /// A snapshot of the engine's replicated topics (as they are now: a topic created later
    /// is streamed from its creation).
    pub fn new(engine: &Engine) -> Self {
        CatchupScan {
            topics: engine
                .topics()
                .into_iter()
                .filter(|t| t.replicator().is_some())
                .collect(),
            at: Step::Head,
        }
    }

    /// Appends the next items to `out`: steps are taken until about `max_bytes` of bodies
    /// were appended. `Ok(true)`: the snapshot is complete (nothing more to read). Blocking.
    pub fn next_chunk(
        &mut self,
        max_bytes: usize,
        out: &mut Vec<Item>,
    ) -> Result<bool, CatchupError> {
        let mut bytes = 0;
        loop {
            if bytes >= max_bytes.max(1) {
                return Ok(false);
            }
            let before = out.len();
            let left = max_bytes.saturating_sub(bytes);
            self.at = match std::mem::replace(&mut self.at, Step::Head) {
                Step::Head => {
                    let Some(topic) = self.topics.pop_front() else {
                        return Ok(true);
                    };
                    if topic.catchup_head(out) {
                        Step::TopicDisk { topic, from: None }
                    } else {
                        Step::Head
                    }
                }
                Step::TopicDisk { topic, from } => match topic.catchup_disk(from, left, out)? {
                    TopicDisk::More(next) => Step::TopicDisk {
                        topic,
                        from: Some(next),
                    },
                    TopicDisk::Done(channels) => Step::Channel {
                        channels: channels.into(),
                        from: None,
                    },
                },
                Step::Channel { mut channels, from } => match channels.front() {
                    None => Step::Head,
                    Some(ch) => match ch.catchup_step(from, left, out)? {
                        Some(next) => Step::Channel {
                            channels,
                            from: Some(next),
                        },
                        None => {
                            channels.pop_front();
                            Step::Channel {
                                channels,
                                from: None,
                            }
                        }
                    },
                },
            };
            bytes += out[before..].iter().map(item_bytes).sum::<usize>();
        }
    }
}

/// The body bytes of an item (what a chunk's bound counts).
fn item_bytes(i: &Item) -> usize {
    match i {
        Item::Message(m) => m.body.len(),
        Item::Topic(_) => 0,
    }
}
