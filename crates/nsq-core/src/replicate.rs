//! The engine's side of replication (issue 22, docs/replication.md "Settlement streaming"):
//! what the topic and channel drivers tell a [`Replicator`] as it happens, so that the daemon
//! can stream publishes and settlements to the node's replicas in the order they took effect,
//! and the snapshot a catch-up sends (items of `nsq_protocol::replication`).
//!
//! The calls are made by the drivers (`Topic`, `Channel`), never by the sans-I/O states, at
//! points that order them with what they describe: a publish while the topic lock still holds
//! the decision (before any consumer can see the message), a fan-out before the channels get
//! the batch, a FIN or REQ under the channel lock. Ephemeral topics and channels have no
//! replicator; without replication nothing has one, and each hook site is one `None` test.
//! NSQ has nothing like it (nsqd/topic.go and nsqd/channel.go keep a message on one node).

use std::sync::Arc;

use bytes::Bytes;
use nsq_protocol::replication::{AdminOp, ReqEntry};
use nsq_protocol::MessageId;

use crate::channel::Channel;
use crate::message::Message;

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
}
