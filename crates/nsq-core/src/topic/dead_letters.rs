//! Where a dead-letter topic's messages came from (crate::queue_settings: a channel's
//! `dead_letter_topic`): the original message's ID, topic, channel and attempts, and why it
//! was given up on, kept by the dead-letter topic per message it received, so that peek can
//! show them and a redrive can send each message back to the channel it left.
//!
//! NSQ's message format has no headers (a message is ID, timestamp, attempts and body,
//! nsqd/message.go), and a dead letter keeps its body unchanged, so the origin cannot travel
//! with the message: it is kept beside it, in memory, bounded ([`MAX_ORIGINS`] per topic,
//! the oldest forgotten first). A restart forgets them (a redrive then names its target).

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use nsq_protocol::MessageId;
use rustc_hash::FxHashMap;

use super::{PutError, Topic};
use crate::receipt::PutReceipt;

/// The most origins a topic keeps; past it the oldest is forgotten.
pub const MAX_ORIGINS: usize = 100_000;

/// Where a dead letter came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterOrigin {
    /// The original message's ID (on `topic`).
    pub id: MessageId,
    pub topic: String,
    pub channel: String,
    /// Its attempts when it was given up on.
    pub attempts: u16,
    /// Given up on because it expired (`ttl`), not at its max attempts.
    pub expired: bool,
}

/// A topic's dead-letter origins by the ID of the message it holds.
#[derive(Debug, Default)]
pub(crate) struct Origins {
    by_id: FxHashMap<MessageId, DeadLetterOrigin>,
    /// Insertion order, for the bound (IDs already forgotten are skipped).
    order: VecDeque<MessageId>,
}

impl Origins {
    fn insert(&mut self, id: MessageId, origin: DeadLetterOrigin) {
        if self.by_id.insert(id, origin).is_none() {
            self.order.push_back(id);
        }
        while self.by_id.len() > MAX_ORIGINS {
            match self.order.pop_front() {
                Some(old) => {
                    self.by_id.remove(&old);
                }
                None => break,
            }
        }
        // Forgotten IDs left in `order` (by `remove`) are dropped once they are half of it.
        if self.order.len() > 2 * self.by_id.len() + 64 {
            let by_id = &self.by_id;
            self.order.retain(|id| by_id.contains_key(id));
        }
    }

    fn remove(&mut self, id: &MessageId) -> Option<DeadLetterOrigin> {
        self.by_id.remove(id)
    }

    fn get(&self, id: &MessageId) -> Option<&DeadLetterOrigin> {
        self.by_id.get(id)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_id.len()
    }
}

impl Topic {
    /// Publishes dead letters — each body with where it came from — as one publish: new IDs,
    /// the bounds of this topic checked as for any publish; the origins are kept (before a
    /// consumer can see the messages) and forgotten again if the publish is refused.
    pub(crate) fn put_dead_letters(
        self: &Arc<Self>,
        items: Vec<(Bytes, DeadLetterOrigin)>,
    ) -> Result<PutReceipt, PutError> {
        let (bodies, origins): (Vec<Bytes>, Vec<DeadLetterOrigin>) = items.into_iter().unzip();
        let msgs = self.mint(bodies, 0);
        let ids: Vec<MessageId> = msgs.iter().map(|m| m.id).collect();
        {
            let mut o = self.dead_letter_origins.lock();
            for (id, origin) in ids.iter().zip(origins) {
                o.insert(*id, origin);
            }
        }
        let r = self.put_minted(msgs);
        if r.is_err() {
            let mut o = self.dead_letter_origins.lock();
            for id in &ids {
                o.remove(id);
            }
        }
        r
    }

    /// Where message `id` of this topic came from, if it is a dead letter this node knows.
    pub fn dead_letter_origin(&self, id: &MessageId) -> Option<DeadLetterOrigin> {
        self.dead_letter_origins.lock().get(id).cloned()
    }

    /// Forgets where message `id` came from (it was redriven); returns what was known.
    pub fn forget_dead_letter_origin(&self, id: &MessageId) -> Option<DeadLetterOrigin> {
        self.dead_letter_origins.lock().remove(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(n: u8) -> DeadLetterOrigin {
        DeadLetterOrigin {
            id: MessageId([n; 16]),
            topic: "t".into(),
            channel: "c".into(),
            attempts: 3,
            expired: false,
        }
    }

    #[test]
    fn origins_are_bounded_oldest_first() {
        let mut o = Origins::default();
        for i in 0..(MAX_ORIGINS + 10) {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(i as u64).to_be_bytes());
            o.insert(MessageId(id), origin(1));
        }
        assert_eq!(o.len(), MAX_ORIGINS);
        assert!(
            o.get(&MessageId([0; 16])).is_none(),
            "the oldest is forgotten"
        );
        let mut newest = [0u8; 16];
        newest[..8].copy_from_slice(&((MAX_ORIGINS + 9) as u64).to_be_bytes());
        assert_eq!(o.get(&MessageId(newest)), Some(&origin(1)));
    }

    #[test]
    fn removed_ids_do_not_grow_the_order_without_bound() {
        let mut o = Origins::default();
        for i in 0..10_000u64 {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&i.to_be_bytes());
            o.insert(MessageId(id), origin(2));
            assert_eq!(o.remove(&MessageId(id)), Some(origin(2)));
        }
        assert_eq!(o.len(), 0);
        assert!(o.order.len() <= 64 + 1, "{}", o.order.len());
    }
}
