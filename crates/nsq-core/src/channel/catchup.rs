//! The channel's part of a replication catch-up snapshot
//! ([`crate::replicator::CatchupScan`], docs/replication.md "Who holds which origin's
//! messages"): the unread records of its diskqueue one bounded step at a time, then —
//! under the same lock as the step that reached the write position — what it holds in
//! memory (queued, in flight, deferred).

use nsq_protocol::replication::{Item, MessageItem, PendingChannel};

use super::Channel;
use crate::backend::{BackendError, RecordPos};
use crate::message::Message;
use crate::replicator::CatchupError;

impl Channel {
    /// One step of this channel's snapshot, under the channel lock once no backend write of
    /// the channel is outstanding (so a message is either in a queue or on disk, never
    /// between): the records of the diskqueue from `from` (or the read position, when
    /// `None` or passed since) for about `max_bytes` of bodies — each unread, so pending
    /// here, at that moment. The step that reaches the write position also hands over the
    /// memory queue, the in-flight and the deferred messages (with their due time as Unix
    /// ns): at that moment every message pending here is in one of those places, or on
    /// disk from the read position on, which the earlier steps read while it was unread
    /// (see [`crate::replicator::CatchupScan`] for why that is enough).
    ///
    /// `Ok(Some(next))`: more to read; `Ok(None)`: done (also for a channel being deleted,
    /// whose deletion is streamed). Blocking: reads diskqueue files.
    pub(crate) fn catchup_step(
        &self,
        from: Option<RecordPos>,
        max_bytes: usize,
        out: &mut Vec<Item>,
    ) -> Result<Option<RecordPos>, CatchupError> {
        let failed = |err| CatchupError::Backend {
            topic: self.topic_name.clone(),
            channel: self.name.clone(),
            err,
        };
        let now = super::now();
        let Some(g) = self.lock_settled() else {
            return Err(CatchupError::Unsettled {
                topic: self.topic_name.clone(),
                channel: self.name.clone(),
            });
        };
        if self.is_exiting() {
            return Ok(None);
        }
        // Under the lock: no consumer reads the backend meanwhile.
        let r = self
            .backend
            .scan_step(from, max_bytes, &mut |payload| match Message::decode(payload) {
                Ok(m) => out.push(self.pending_here(&m, 0)),
                // A take drops it too ("failed to decode ... messages read from the backend").
                Err(e) => {
                    tracing::error!(channel = %self.name, topic = %self.topic_name, "catch-up: failed to decode a message of the backend - {e}")
                }
            });
        let step = match r {
            Ok(s) => s,
            Err(BackendError::Exiting) if self.is_exiting() => return Ok(None),
            Err(e) => return Err(failed(e)),
        };
        if !step.done {
            return Ok(Some(step.next));
        }
        for m in g.state.queued().chain(g.state.in_flight_messages()) {
            out.push(self.pending_here(m, 0));
        }
        for (due, m) in g.state.deferred_messages() {
            let wait = due.saturating_duration_since(now.mono).as_nanos() as i64;
            out.push(self.pending_here(m, now.wall.saturating_add(wait).max(1)));
        }
        Ok(None)
    }

    /// A STATE MESSAGE item for a message pending on this channel (`due`: Unix ns, 0 if
    /// not deferred).
    fn pending_here(&self, m: &Message, due: i64) -> Item {
        Item::Message(MessageItem {
            topic: self.topic_name.clone(),
            id: m.id,
            timestamp: m.timestamp,
            topic_pending: false,
            topic_due: 0,
            channels: vec![PendingChannel {
                name: self.name.clone(),
                due,
                attempts: m.attempts,
            }],
            body: m.body.clone(),
        })
    }
}
