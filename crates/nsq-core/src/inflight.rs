//! The in-flight queue of a channel: messages delivered to a consumer and not yet FINed,
//! requeued or timed out (the reference's `inFlightMessages` map plus `inFlightPQ`, see
//! nsqd/channel.go, `pushInFlightMessage` / `popInFlightMessage` / `processInFlightQueue`).
//!
//! A map from message ID to its entry, and a min-heap of `(deadline, id)` for the timeout scan.
//! Heap entries are invalidated lazily: FIN and TOUCH leave stale ones behind, recognised by a
//! deadline that no longer matches the map, and the heap is rebuilt when they pile up. The type
//! owns no lock; the channel keeps it under its own mutex.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use nsq_protocol::MessageId;
use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::message::Message;

/// Why FIN/TOUCH failed (non-fatal `E_FIN_FAILED` / `E_TOUCH_FAILED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishError {
    NotInFlight,
    NotOwner,
}

impl std::fmt::Display for FinishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FinishError::NotInFlight => "ID not in flight",
            FinishError::NotOwner => "client does not own message",
        })
    }
}

impl std::error::Error for FinishError {}

/// One message in flight.
#[derive(Debug)]
pub struct InFlightEntry {
    pub msg: Message,
    /// The consumer it was delivered to: only that one may FIN/REQ/TOUCH it.
    pub client_id: u64,
    /// When it was delivered: TOUCH never extends past this + `--max-msg-timeout`.
    pub delivered_at: Instant,
    /// When it times out.
    pub deadline: Instant,
}

/// The in-flight set and its timeout order.
#[derive(Debug, Default)]
pub struct InFlightQueue {
    entries: FxHashMap<MessageId, InFlightEntry>,
    /// Min-heap of (deadline, id), lazily invalidated (see the module comment).
    by_deadline: BinaryHeap<Reverse<(Instant, MessageId)>>,
}

impl InFlightQueue {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records a delivery to `client_id` timing out at `now + timeout`. Returns the message
    /// back when its ID is already in flight: like the reference, the first entry is kept.
    pub fn insert(
        &mut self,
        msg: Message,
        client_id: u64,
        now: Instant,
        timeout: Duration,
    ) -> Result<(), Message> {
        let deadline = now + timeout;
        let id = msg.id;
        match self.entries.entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => Err(msg),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(InFlightEntry {
                    msg,
                    client_id,
                    delivered_at: now,
                    deadline,
                });
                self.by_deadline.push(Reverse((deadline, id)));
                Ok(())
            }
        }
    }

    /// FIN/REQ: removes the entry if `client_id` owns it.
    pub fn remove_owned(
        &mut self,
        client_id: u64,
        id: &MessageId,
    ) -> Result<InFlightEntry, FinishError> {
        match self.entries.get(id) {
            None => return Err(FinishError::NotInFlight),
            Some(f) if f.client_id != client_id => return Err(FinishError::NotOwner),
            Some(_) => {}
        }
        let f = self.entries.remove(id).expect("checked above");
        self.compact();
        Ok(f)
    }

    /// TOUCH: the deadline becomes `now + timeout`, capped at delivery + `max_timeout`.
    pub fn touch(
        &mut self,
        client_id: u64,
        id: &MessageId,
        now: Instant,
        timeout: Duration,
        max_timeout: Duration,
    ) -> Result<(), FinishError> {
        let f = match self.entries.get_mut(id) {
            None => return Err(FinishError::NotInFlight),
            Some(f) if f.client_id != client_id => return Err(FinishError::NotOwner),
            Some(f) => f,
        };
        let deadline = (now + timeout).min(f.delivered_at + max_timeout);
        f.deadline = deadline;
        self.by_deadline.push(Reverse((deadline, *id)));
        self.compact();
        Ok(())
    }

    /// Removes and returns one entry whose deadline is `<= now` (earliest first), if any.
    pub fn pop_expired(&mut self, now: Instant) -> Option<InFlightEntry> {
        while let Some(Reverse((deadline, id))) = self.by_deadline.peek().copied() {
            if deadline > now {
                return None;
            }
            self.by_deadline.pop();
            if matches!(self.entries.get(&id), Some(f) if f.deadline == deadline) {
                return self.entries.remove(&id);
            }
        }
        None
    }

    /// Removes every entry (shutdown, empty), in no particular order.
    pub fn drain(&mut self) -> impl Iterator<Item = InFlightEntry> + '_ {
        self.by_deadline.clear();
        self.entries.drain().map(|(_, f)| f)
    }

    /// The IDs in flight, in no particular order.
    pub fn ids(&self) -> Vec<MessageId> {
        self.entries.keys().copied().collect()
    }

    /// Iterates over the entries in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &InFlightEntry> + '_ {
        self.entries.values()
    }

    fn compact(&mut self) {
        if self.by_deadline.len() > 2 * self.entries.len() + 1024 {
            let live: Vec<_> = self
                .entries
                .iter()
                .map(|(id, f)| Reverse((f.deadline, *id)))
                .collect();
            self.by_deadline = BinaryHeap::from(live);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(n: u8) -> Message {
        let mut id = [b'0'; 16];
        id[15] = n;
        Message::new(MessageId(id), Bytes::from(vec![n]))
    }

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn finish_requires_the_owner() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), 7, t0, S).unwrap();
        assert_eq!(
            q.remove_owned(8, &msg(1).id).unwrap_err(),
            FinishError::NotOwner
        );
        assert_eq!(
            q.remove_owned(7, &msg(2).id).unwrap_err(),
            FinishError::NotInFlight
        );
        assert_eq!(q.remove_owned(7, &msg(1).id).unwrap().client_id, 7);
        assert!(q.is_empty());
        assert_eq!(
            q.remove_owned(7, &msg(1).id).unwrap_err(),
            FinishError::NotInFlight
        );
    }

    #[test]
    fn duplicate_id_keeps_the_first_entry() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), 7, t0, S).unwrap();
        assert!(q.insert(msg(1), 8, t0, S).is_err());
        assert_eq!(q.len(), 1);
        assert_eq!(q.iter().next().unwrap().client_id, 7);
    }

    #[test]
    fn expiry_in_deadline_order_and_finished_ones_never_expire() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), 1, t0, 3 * S).unwrap();
        q.insert(msg(2), 1, t0, S).unwrap();
        q.insert(msg(3), 1, t0, 2 * S).unwrap();
        q.remove_owned(1, &msg(3).id).unwrap();
        assert!(q.pop_expired(t0).is_none());
        assert_eq!(q.pop_expired(t0 + 5 * S).unwrap().msg.id, msg(2).id);
        assert_eq!(q.pop_expired(t0 + 5 * S).unwrap().msg.id, msg(1).id);
        assert!(q.pop_expired(t0 + 5 * S).is_none());
        assert!(q.is_empty());
    }

    #[test]
    fn touch_moves_the_deadline_up_to_the_cap() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), 1, t0, S).unwrap();
        assert_eq!(
            q.touch(2, &msg(1).id, t0, S, 10 * S).unwrap_err(),
            FinishError::NotOwner
        );
        q.touch(1, &msg(1).id, t0 + S / 2, 5 * S, 3 * S).unwrap();
        // Capped at delivery + 3 s; the stale 1 s heap entry does not expire it.
        assert!(q.pop_expired(t0 + 2 * S).is_none());
        assert_eq!(q.pop_expired(t0 + 3 * S).unwrap().msg.id, msg(1).id);
    }

    #[test]
    fn stale_heap_entries_are_compacted() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), 1, t0, S).unwrap();
        for i in 0..5000u32 {
            q.touch(
                1,
                &msg(1).id,
                t0 + Duration::from_millis(i.into()),
                S,
                100 * S,
            )
            .unwrap();
        }
        assert!(q.by_deadline.len() <= 2 * q.len() + 1025);
        assert_eq!(q.drain().count(), 1);
        assert!(q.is_empty() && q.by_deadline.is_empty());
    }
}
