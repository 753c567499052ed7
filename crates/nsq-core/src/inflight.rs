//! The in-flight queue of a channel: messages delivered to a consumer and not yet FINed,
//! requeued or timed out (the reference's `inFlightMessages` map plus `inFlightPQ`, see
//! nsqd/channel.go, `pushInFlightMessage` / `popInFlightMessage` / `processInFlightQueue`).
//!
//! A map from message ID to its entry, and the `(deadline, id)` timeout order for the scan:
//! a FIFO for deadlines that arrive in order (the common case — a connection's messages all
//! get its one msg_timeout, so they time out in delivery order: an O(1) push, no heap) and a
//! min-heap for the rest (a shorter timeout after a longer one, TOUCH). Both are invalidated
//! lazily: FIN and TOUCH leave stale entries behind, recognised by a deadline that no longer
//! matches the map; stale entries at the FIFO's front are dropped as they pile up (FINs
//! mostly arrive in delivery order), and both are rebuilt only when stale ones dominate. The
//! type owns no lock; the channel keeps it under its own mutex.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use nsq_protocol::MessageId;
use rustc_hash::FxHashMap;
use std::time::Instant;

use crate::backend::RecordPos;
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
    /// Where the message was read from the channel's backend, while that record is unsettled
    /// (see `Channel`): `None` for a message that came from memory.
    pub pos: Option<RecordPos>,
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
    /// (deadline, id) in non-decreasing deadline order, lazily invalidated (see the module
    /// comment).
    fifo: VecDeque<(Instant, MessageId)>,
    /// Min-heap of the (deadline, id) that arrived out of order, lazily invalidated.
    by_deadline: BinaryHeap<Reverse<(Instant, MessageId)>>,
    /// Record size of the entries that came from memory (`pos` is `None`): what a shutdown
    /// must find room for on disk (see [`crate::reserve`]).
    volatile: u64,
}

/// An entry's weight for [`InFlightQueue::volatile_bytes`].
fn volatile(f: &InFlightEntry) -> u64 {
    if f.pos.is_none() {
        f.msg.record_len()
    } else {
        0
    }
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

    /// Record size of the entries held only in memory.
    pub fn volatile_bytes(&self) -> u64 {
        self.volatile
    }

    /// Records a delivery to `client_id` timing out at `now + timeout`. Returns the message
    /// back when its ID is already in flight: like the reference, the first entry is kept.
    pub fn insert(
        &mut self,
        msg: Message,
        pos: Option<RecordPos>,
        client_id: u64,
        now: Instant,
        timeout: Duration,
    ) -> Result<(), Message> {
        let deadline = now + timeout;
        let id = msg.id;
        match self.entries.entry(id) {
            std::collections::hash_map::Entry::Occupied(_) => Err(msg),
            std::collections::hash_map::Entry::Vacant(e) => {
                let f = e.insert(InFlightEntry {
                    msg,
                    pos,
                    client_id,
                    delivered_at: now,
                    deadline,
                });
                self.volatile += volatile(f);
                self.push_deadline(deadline, id);
                self.compact();
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
        use std::collections::hash_map::Entry;
        match self.entries.entry(*id) {
            Entry::Vacant(_) => Err(FinishError::NotInFlight),
            Entry::Occupied(e) if e.get().client_id != client_id => Err(FinishError::NotOwner),
            Entry::Occupied(e) => {
                let f = e.remove();
                self.volatile -= volatile(&f);
                Ok(f)
            }
        }
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
        self.push_deadline(deadline, *id);
        self.compact();
        Ok(())
    }

    /// Removes and returns one entry whose deadline is `<= now` (earliest first), if any.
    pub fn pop_expired(&mut self, now: Instant) -> Option<InFlightEntry> {
        loop {
            let f = self.fifo.front().copied();
            let h = self.by_deadline.peek().map(|r| r.0);
            let (deadline, id) = match (f, h) {
                (Some(f), Some(h)) if h < f => {
                    if h.0 > now {
                        return None;
                    }
                    self.by_deadline.pop();
                    h
                }
                (Some(f), _) => {
                    if f.0 > now {
                        return None;
                    }
                    self.fifo.pop_front();
                    f
                }
                (None, Some(h)) => {
                    if h.0 > now {
                        return None;
                    }
                    self.by_deadline.pop();
                    h
                }
                (None, None) => return None,
            };
            if matches!(self.entries.get(&id), Some(f) if f.deadline == deadline) {
                let f = self.entries.remove(&id)?;
                self.volatile -= volatile(&f);
                return Some(f);
            }
        }
    }

    /// Removes every entry (shutdown, empty), in no particular order.
    pub fn drain(&mut self) -> impl Iterator<Item = InFlightEntry> + '_ {
        self.by_deadline.clear();
        self.fifo.clear();
        self.volatile = 0;
        self.entries.drain().map(|(_, f)| f)
    }

    /// The IDs in flight, in no particular order.
    pub fn ids(&self) -> Vec<MessageId> {
        self.entries.keys().copied().collect()
    }

    /// The entry of `id`, if in flight.
    pub fn get(&self, id: &MessageId) -> Option<&InFlightEntry> {
        self.entries.get(id)
    }

    /// Iterates over the entries in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &InFlightEntry> + '_ {
        self.entries.values()
    }

    fn push_deadline(&mut self, deadline: Instant, id: MessageId) {
        if self.fifo.back().is_none_or(|b| b.0 <= deadline) {
            self.fifo.push_back((deadline, id));
        } else {
            self.by_deadline.push(Reverse((deadline, id)));
        }
    }

    fn is_live(&self, deadline: Instant, id: &MessageId) -> bool {
        matches!(self.entries.get(id), Some(f) if f.deadline == deadline)
    }

    /// Called on every insert and TOUCH, so the timeout order holds O(live) entries.
    fn compact(&mut self) {
        let limit = 2 * self.entries.len() + 1024;
        if self.fifo.len() + self.by_deadline.len() <= limit {
            return;
        }
        // Cheap first: FINs mostly come in delivery order, so the stale entries are in front.
        while let Some(&(d, id)) = self.fifo.front() {
            if self.is_live(d, &id) {
                break;
            }
            self.fifo.pop_front();
        }
        if self.fifo.len() + self.by_deadline.len() > limit {
            let entries = &self.entries;
            let live =
                |d: Instant, id: &MessageId| matches!(entries.get(id), Some(f) if f.deadline == d);
            self.fifo.retain(|(d, id)| live(*d, id));
            let heap = std::mem::take(&mut self.by_deadline).into_vec();
            self.by_deadline = heap
                .into_iter()
                .filter(|Reverse((d, id))| live(*d, id))
                .collect();
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
        q.insert(msg(1), None, 7, t0, S).unwrap();
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
        q.insert(msg(1), None, 7, t0, S).unwrap();
        assert!(q.insert(msg(1), None, 8, t0, S).is_err());
        assert_eq!(q.len(), 1);
        assert_eq!(q.iter().next().unwrap().client_id, 7);
    }

    #[test]
    fn expiry_in_deadline_order_and_finished_ones_never_expire() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), None, 1, t0, 3 * S).unwrap();
        q.insert(msg(2), None, 1, t0, S).unwrap();
        q.insert(msg(3), None, 1, t0, 2 * S).unwrap();
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
        q.insert(msg(1), None, 1, t0, S).unwrap();
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
        q.insert(msg(1), None, 1, t0, S).unwrap();
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
        assert!(q.fifo.len() + q.by_deadline.len() <= 2 * q.len() + 1025);
        assert_eq!(q.drain().count(), 1);
        assert!(q.is_empty() && q.by_deadline.is_empty() && q.fifo.is_empty());
    }

    #[test]
    fn shorter_timeout_after_longer_still_expires_first() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), None, 1, t0, 10 * S).unwrap();
        q.insert(msg(2), None, 2, t0, S).unwrap();
        q.insert(msg(3), None, 1, t0, 10 * S).unwrap();
        q.insert(msg(4), None, 2, t0, 2 * S).unwrap();
        assert!(q.pop_expired(t0).is_none());
        assert_eq!(q.pop_expired(t0 + 3 * S).unwrap().msg.id, msg(2).id);
        assert_eq!(q.pop_expired(t0 + 3 * S).unwrap().msg.id, msg(4).id);
        assert!(q.pop_expired(t0 + 3 * S).is_none());
        let mut rest: Vec<_> = std::iter::from_fn(|| q.pop_expired(t0 + 10 * S))
            .map(|f| f.msg.id)
            .collect();
        rest.sort();
        assert_eq!(rest, vec![msg(1).id, msg(3).id]);
    }

    #[test]
    fn finished_in_order_keeps_the_timeout_order_small() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        let id = |i: u32| {
            let mut b = [b'0'; 16];
            b[12..].copy_from_slice(&i.to_be_bytes());
            MessageId(b)
        };
        for i in 0..100_000u32 {
            let m = Message::new(id(i), Bytes::from_static(b"x"));
            q.insert(m, None, 1, t0 + Duration::from_micros(i.into()), S)
                .unwrap();
            if i >= 100 {
                q.remove_owned(1, &id(i - 100)).unwrap();
            }
        }
        assert_eq!(q.len(), 100);
        assert!(q.fifo.len() + q.by_deadline.len() <= 2 * 100 + 1025);
        // The 100 live ones expire, in order; nothing stale comes back.
        let got: Vec<_> = std::iter::from_fn(|| q.pop_expired(t0 + 10 * S))
            .map(|f| f.msg.id)
            .collect();
        assert_eq!(got, (99_900..100_000).map(id).collect::<Vec<_>>());
    }
}
