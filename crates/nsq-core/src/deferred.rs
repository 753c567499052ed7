//! The deferred queue of a channel: messages held back until a due time by DPUB, `/pub?defer`
//! or REQ with a delay (the reference's `deferredMessages` map plus `deferredPQ`, see
//! nsqd/channel.go, `pushDeferredMessage` / `popDeferredMessage` / `processDeferredQueue`).
//!
//! A map from message ID to `(due, message)` and a min-heap of `(due, id)`. The type owns no
//! lock; the channel keeps it under its own mutex.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use nsq_protocol::MessageId;
use rustc_hash::FxHashMap;
use std::time::Instant;

use crate::message::Message;

/// The deferred set and its due order.
#[derive(Debug, Default)]
pub struct DeferredQueue {
    entries: FxHashMap<MessageId, (Instant, Message)>,
    /// Min-heap of (due, id); an entry whose due time no longer matches the map is stale.
    by_due: BinaryHeap<Reverse<(Instant, MessageId)>>,
    /// Record size of the deferred messages (see [`crate::reserve`]).
    bytes: u64,
}

impl DeferredQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether a message with this ID is deferred.
    pub fn contains(&self, id: &MessageId) -> bool {
        self.entries.contains_key(id)
    }

    /// Record size of the deferred messages.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Holds `msg` until `due`. Returns it back when its ID is already deferred (the first
    /// one is kept, as the reference's `pushDeferredMessage` refuses a duplicate).
    pub fn insert(&mut self, due: Instant, msg: Message) -> Result<(), Message> {
        let id = msg.id;
        match self.entries.entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => Err(msg),
            std::collections::hash_map::Entry::Vacant(e) => {
                self.bytes += msg.record_len();
                e.insert((due, msg));
                self.by_due.push(Reverse((due, id)));
                Ok(())
            }
        }
    }

    /// Removes and returns one message due at `now` (earliest first), if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<Message> {
        while let Some(Reverse((due, id))) = self.by_due.peek().copied() {
            if due > now {
                return None;
            }
            self.by_due.pop();
            if matches!(self.entries.get(&id), Some((d, _)) if *d == due) {
                let (_, m) = self.entries.remove(&id)?;
                self.bytes -= m.record_len();
                return Some(m);
            }
        }
        None
    }

    /// Removes the message with this ID, if deferred (its heap entry turns stale and is
    /// skipped by [`DeferredQueue::pop_due`]).
    pub fn remove(&mut self, id: &MessageId) -> Option<Message> {
        let (_, m) = self.entries.remove(id)?;
        self.bytes -= m.record_len();
        Some(m)
    }

    /// Iterates over the deferred messages with their due times, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Instant, &Message)> + '_ {
        self.entries.values().map(|(due, m)| (*due, m))
    }

    /// Removes every message (shutdown, empty) with its due time, in no particular order.
    pub fn drain(&mut self) -> impl Iterator<Item = (Instant, Message)> + '_ {
        self.by_due.clear();
        self.bytes = 0;
        self.entries.drain().map(|(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::time::Duration;

    fn msg(n: u8) -> Message {
        let mut id = [b'0'; 16];
        id[15] = n;
        Message::new(MessageId(id), Bytes::from(vec![n]))
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn due_order_and_not_before_time() {
        let t0 = Instant::now();
        let mut q = DeferredQueue::new();
        q.insert(t0 + 3 * S, msg(1)).unwrap();
        q.insert(t0 + S, msg(2)).unwrap();
        q.insert(t0 + 2 * S, msg(3)).unwrap();
        assert_eq!(q.len(), 3);
        assert!(q.pop_due(t0).is_none());
        assert_eq!(q.pop_due(t0 + 2 * S).unwrap().id, msg(2).id);
        assert_eq!(q.pop_due(t0 + 2 * S).unwrap().id, msg(3).id);
        assert!(q.pop_due(t0 + 2 * S).is_none());
        assert_eq!(q.pop_due(t0 + 3 * S).unwrap().id, msg(1).id);
        assert!(q.is_empty());
    }

    #[test]
    fn duplicate_id_is_refused() {
        let t0 = Instant::now();
        let mut q = DeferredQueue::new();
        q.insert(t0 + S, msg(1)).unwrap();
        let back = q.insert(t0, msg(1)).unwrap_err();
        assert_eq!(back.id, msg(1).id);
        assert_eq!(q.len(), 1);
        assert!(q.pop_due(t0).is_none());
    }

    #[test]
    fn drain_empties_both_structures() {
        let t0 = Instant::now();
        let mut q = DeferredQueue::new();
        q.insert(t0, msg(1)).unwrap();
        q.insert(t0 + S, msg(2)).unwrap();
        assert_eq!(q.drain().count(), 2);
        assert!(q.is_empty());
        assert!(q.pop_due(t0 + 10 * S).is_none());
    }
}
