//! The topic's part of a replication catch-up snapshot ([`crate::replicator::CatchupScan`],
//! docs/replication.md "Who holds which origin's messages"): its STATE TOPIC item and what is
//! pending on the topic itself, read one bounded step at a time under the pump lock.

use std::sync::Arc;

use nsq_protocol::replication::{ChannelItem, Item, MessageItem, PendingChannel, TopicItem};

use super::Topic;
use crate::backend::{BackendError, RecordPos};
use crate::channel::Channel;
use crate::message::Message;
use crate::replicator::CatchupError;

/// Where [`Topic::catchup_disk`] stopped.
pub(crate) enum TopicDisk {
    /// More to read from this position.
    More(RecordPos),
    /// The topic's part is done; these channels' snapshots follow.
    Done(Vec<Arc<Channel>>),
}

impl Topic {
    /// The first step: the STATE TOPIC item, the messages of the memory queue (pending on
    /// the topic) and of a stalled batch (pending on the channels still to get it), taken
    /// under the pump lock — no batch between the topic and its channels, no write to the
    /// backend in progress. `false` for a topic being deleted (its deletion is streamed).
    pub(crate) fn catchup_head(&self, out: &mut Vec<Item>) -> bool {
        let _guard = self.pump_lock.write();
        if self.is_exiting() {
            return false;
        }
        let st = self.state.lock();
        out.push(Item::Topic(TopicItem {
            topic: self.name.clone(),
            paused: self.is_paused(),
            settings: self.settings.read().to_pairs(),
            channels: st
                .channels
                .values()
                .filter(|c| !c.is_ephemeral())
                .map(|c| ChannelItem {
                    name: c.name().to_string(),
                    paused: c.is_paused(),
                    settings: c.settings().to_pairs(),
                })
                .collect(),
        }));
        let (mem, stalled) = st.queue.queued();
        for m in mem {
            let due = if m.defer_ms == 0 {
                0
            } else {
                m.timestamp
                    .saturating_add(i64::from(m.defer_ms) * 1_000_000)
            };
            out.push(self.pending_here(m, due));
        }
        // A stalled batch was streamed as fanned out to the channels still to get it.
        if let Some(b) = stalled {
            let names: Vec<PendingChannel> = b
                .todo
                .iter()
                .filter(|c| !c.is_ephemeral())
                .map(|c| PendingChannel {
                    name: c.name().to_string(),
                    due: 0,
                    attempts: 0,
                })
                .collect();
            for m in &b.msgs {
                out.push(Item::Message(MessageItem {
                    topic: self.name.clone(),
                    id: m.id,
                    timestamp: m.timestamp,
                    topic_pending: false,
                    topic_due: 0,
                    channels: names.clone(),
                    body: m.body.clone(),
                }));
            }
        }
        true
    }

    /// One step through the unread records of the topic's diskqueue (pending on the topic),
    /// from `from` (the read position when `None` or passed since), about `max_bytes` of
    /// bodies, under the pump lock: the pump does not read and no publish writes during the
    /// step, so every record handed over is unread — pending on the topic — at that
    /// moment.
    ///
    /// The step that reaches the write position returns the channels whose snapshot follows
    /// (not ephemeral ones), as they are *now*, not as at the head: a channel created
    /// meanwhile may hold messages the pump fanned out before this scan read them — a
    /// replica that did not know such a message learns its places only from the channels'
    /// snapshots (a FANOUT carries no body). A channel created later gets only messages
    /// that were pending on the topic when this step ended, which the topic's snapshot
    /// listed, or published after it: their FANOUT or PUB frame lists it.
    pub(crate) fn catchup_disk(
        &self,
        from: Option<RecordPos>,
        max_bytes: usize,
        out: &mut Vec<Item>,
    ) -> Result<TopicDisk, CatchupError> {
        let _guard = self.pump_lock.write();
        if self.is_exiting() {
            return Ok(TopicDisk::Done(Vec::new()));
        }
        let r = self
            .backend
            .scan_step(from, max_bytes, &mut |payload| match Message::decode(payload) {
                Ok(m) => out.push(self.pending_here(&m, 0)),
                // The pump drops it too ("failed to decode message").
                Err(e) => {
                    tracing::error!(topic = %self.name, "catch-up: failed to decode a message of the backend - {e}")
                }
            });
        match r {
            Ok(s) if s.done => Ok(TopicDisk::Done(
                self.state
                    .lock()
                    .channels
                    .values()
                    .filter(|c| !c.is_ephemeral())
                    .cloned()
                    .collect(),
            )),
            Ok(s) => Ok(TopicDisk::More(s.next)),
            Err(BackendError::Exiting) if self.is_exiting() => Ok(TopicDisk::Done(Vec::new())),
            Err(err) => Err(CatchupError::Backend {
                topic: self.name.clone(),
                channel: String::new(),
                err,
            }),
        }
    }

    /// A STATE MESSAGE item for a message pending on this topic (`due`: its deferral).
    fn pending_here(&self, m: &Message, due: i64) -> Item {
        Item::Message(MessageItem {
            topic: self.name.clone(),
            id: m.id,
            timestamp: m.timestamp,
            topic_pending: true,
            topic_due: due,
            channels: Vec::new(),
            body: m.body.clone(),
        })
    }
}
