//! The in-flight queue of a channel: messages delivered to a consumer and not yet FINed,
//! requeued or timed out (the reference's `inFlightMessages` map plus `inFlightPQ`, see
//! nsqd/channel.go, `pushInFlightMessage` / `popInFlightMessage` / `processInFlightQueue`).
//!
//! The entries live in a slab (`slab::Slab`: the last freed slot is reused first) and a map
//! from message ID to slot number. Beside it, the timeout order for the scan:
//! a FIFO for deadlines that arrive in order (the common case — a connection's messages all
//! get its one msg_timeout, so they time out in delivery order: an O(1) push, no heap) and a
//! min-heap for the rest (a shorter timeout after a longer one, TOUCH). Their items name a
//! slot and the slot's generation, which moves on whenever the slot's entry leaves or its
//! deadline changes, so FIN and TOUCH invalidate them lazily: an item whose generation no
//! longer matches is stale. Stale items at the FIFO's front are dropped as they pile up (FINs
//! mostly arrive in delivery order) and both are rebuilt only when stale ones dominate. The
//! type owns no lock; the channel keeps it under its own mutex.
//!
//! Why this shape: a message's FIN comes thousands of deliveries after the message went out,
//! by which time what it touched at delivery has left the CPU cache. An entry-per-bucket map
//! (~150 bytes a bucket) and a timeout order checked by ID lookups missed the cache several
//! times per message: a third of the daemon's CPU in a drain by two NSQ bench_readers
//! (bench/README.md, "Summary against NSQ v1.3"). Here a delivery and its FIN each do one
//! lookup in a map of 20-byte items and one access to the slot; staleness is a look at a
//! 4-byte generation (a dense array that stays cached), and [`InFlightQueue::prefetch`] lets
//! a batch of FINs start all their lookups at once.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use nsq_protocol::MessageId;
use rustc_hash::FxHashMap;
use slab::Slab;
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
    /// The slot of each ID in flight.
    index: FxHashMap<MessageId, u32>,
    /// The entries.
    slots: Slab<InFlightEntry>,
    /// Each slot's generation: moves on when its entry leaves or its deadline changes.
    gens: Vec<u32>,
    /// Timeouts in non-decreasing deadline order, lazily invalidated (see the module comment).
    fifo: VecDeque<Timeout>,
    /// Min-heap of the timeouts that arrived out of order, lazily invalidated.
    by_deadline: BinaryHeap<Reverse<Timeout>>,
    /// Record size of the entries that came from memory (`pos` is `None`): what a shutdown
    /// must find room for on disk (see [`crate::reserve`]).
    volatile: u64,
}

/// One item of the timeout order: the entry in `slot` times out at `deadline`, if the slot is
/// still at generation `generation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Timeout {
    deadline: Instant,
    slot: u32,
    generation: u32,
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
    /// Slots an emptied queue keeps allocated (a burst's larger slab is given back).
    const KEPT_SLOTS: usize = 1024;

    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
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
        let std::collections::hash_map::Entry::Vacant(e) = self.index.entry(msg.id) else {
            return Err(msg);
        };
        let f = InFlightEntry {
            msg,
            pos,
            client_id,
            delivered_at: now,
            deadline,
        };
        self.volatile += volatile(&f);
        let key = self.slots.insert(f);
        if key == self.gens.len() {
            self.gens.push(0);
        }
        let slot = u32::try_from(key).expect("fewer than 2^32 messages in flight on one channel");
        e.insert(slot);
        self.push_timeout(deadline, slot);
        self.compact();
        Ok(())
    }

    /// Starts the lookups of a batch of FINs before they are done one by one: each ID's map
    /// item and slot is read once, in a loop short enough for the CPU to have several of these
    /// cache misses outstanding at once, so the FINs that follow find them cached instead of
    /// waiting for each in turn. Changes nothing.
    pub fn prefetch(&self, ids: &[MessageId]) {
        let mut owners = 0u64;
        for id in ids {
            if let Some(&slot) = self.index.get(id) {
                owners = owners.wrapping_add(self.slots[slot as usize].client_id);
            }
        }
        std::hint::black_box(owners);
    }

    /// FIN/REQ: removes the entry if `client_id` owns it.
    pub fn remove_owned(
        &mut self,
        client_id: u64,
        id: &MessageId,
    ) -> Result<InFlightEntry, FinishError> {
        use std::collections::hash_map::Entry;
        match self.index.entry(*id) {
            Entry::Vacant(_) => Err(FinishError::NotInFlight),
            Entry::Occupied(e) => {
                let slot = *e.get();
                if self.slots[slot as usize].client_id != client_id {
                    return Err(FinishError::NotOwner);
                }
                e.remove();
                Ok(self.take_slot(slot))
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
        let slot = *self.index.get(id).ok_or(FinishError::NotInFlight)?;
        let f = &mut self.slots[slot as usize];
        if f.client_id != client_id {
            return Err(FinishError::NotOwner);
        }
        let deadline = (now + timeout).min(f.delivered_at + max_timeout);
        f.deadline = deadline;
        self.bump(slot);
        self.push_timeout(deadline, slot);
        self.compact();
        Ok(())
    }

    /// Removes and returns one entry whose deadline is `<= now` (earliest first), if any.
    pub fn pop_expired(&mut self, now: Instant) -> Option<InFlightEntry> {
        loop {
            let f = self.fifo.front().copied();
            let h = self.by_deadline.peek().map(|r| r.0);
            let t = match (f, h) {
                (Some(f), Some(h)) if h < f => {
                    if h.deadline > now {
                        return None;
                    }
                    self.by_deadline.pop();
                    h
                }
                (Some(f), _) => {
                    if f.deadline > now {
                        return None;
                    }
                    self.fifo.pop_front();
                    f
                }
                (None, Some(h)) => {
                    if h.deadline > now {
                        return None;
                    }
                    self.by_deadline.pop();
                    h
                }
                (None, None) => return None,
            };
            if self.is_live(&t) {
                self.index.remove(&self.slots[t.slot as usize].msg.id);
                return Some(self.take_slot(t.slot));
            }
        }
    }

    /// Removes every entry (shutdown, empty), in no particular order.
    pub fn drain(&mut self) -> impl Iterator<Item = InFlightEntry> + '_ {
        self.index.clear();
        self.clear_order();
        self.slots.drain()
    }

    /// The IDs in flight, in no particular order.
    pub fn ids(&self) -> Vec<MessageId> {
        self.index.keys().copied().collect()
    }

    /// The entry of `id`, if in flight.
    pub fn get(&self, id: &MessageId) -> Option<&InFlightEntry> {
        let slot = *self.index.get(id)?;
        self.slots.get(slot as usize)
    }

    /// Iterates over the entries in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &InFlightEntry> + '_ {
        self.slots.iter().map(|(_, f)| f)
    }

    /// Empties `slot` (already removed from the index) and returns its entry. When nothing is
    /// left in flight every timeout item is stale: the order is cleared and the slab reset,
    /// its memory given back if a burst had grown it.
    fn take_slot(&mut self, slot: u32) -> InFlightEntry {
        let f = self.slots.remove(slot as usize);
        self.volatile -= volatile(&f);
        if self.index.is_empty() {
            if self.slots.capacity() > Self::KEPT_SLOTS {
                self.slots = Slab::with_capacity(Self::KEPT_SLOTS);
            } else {
                self.slots.clear();
            }
            self.clear_order();
            self.gens.shrink_to(Self::KEPT_SLOTS);
            self.fifo.shrink_to(Self::KEPT_SLOTS);
            self.by_deadline.shrink_to(Self::KEPT_SLOTS);
        } else {
            self.bump(slot);
        }
        f
    }

    /// Forgets every slot's generation and every timeout item (nothing is in flight).
    fn clear_order(&mut self) {
        self.gens.clear();
        self.fifo.clear();
        self.by_deadline.clear();
        self.volatile = 0;
    }

    /// Makes the timeout items of `slot` stale.
    fn bump(&mut self, slot: u32) {
        let g = &mut self.gens[slot as usize];
        *g = g.wrapping_add(1);
    }

    fn push_timeout(&mut self, deadline: Instant, slot: u32) {
        let t = Timeout {
            deadline,
            slot,
            generation: self.gens[slot as usize],
        };
        if self.fifo.back().is_none_or(|b| b.deadline <= deadline) {
            self.fifo.push_back(t);
        } else {
            self.by_deadline.push(Reverse(t));
        }
    }

    fn is_live(&self, t: &Timeout) -> bool {
        self.gens.get(t.slot as usize) == Some(&t.generation)
    }

    /// Called on every insert and TOUCH, so the timeout order holds O(live) items.
    fn compact(&mut self) {
        let limit = 2 * self.index.len() + 1024;
        if self.fifo.len() + self.by_deadline.len() <= limit {
            return;
        }
        // Cheap first: FINs mostly come in delivery order, so the stale items are in front.
        while let Some(t) = self.fifo.front() {
            if self.is_live(t) {
                break;
            }
            self.fifo.pop_front();
        }
        if self.fifo.len() + self.by_deadline.len() > limit {
            let gens = &self.gens;
            let live = |t: &Timeout| gens.get(t.slot as usize) == Some(&t.generation);
            self.fifo.retain(live);
            let heap = std::mem::take(&mut self.by_deadline).into_vec();
            self.by_deadline = heap.into_iter().filter(|Reverse(t)| live(t)).collect();
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

    /// The `i`th of a run of distinct IDs.
    fn seq_id(i: u32) -> MessageId {
        let mut b = [b'0'; 16];
        b[12..].copy_from_slice(&i.to_be_bytes());
        MessageId(b)
    }

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
        let id = seq_id;
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

    #[test]
    fn slots_are_reused_and_an_emptied_queue_gives_its_memory_back() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        let id = seq_id;
        for i in 0..10_000u32 {
            q.insert(
                Message::new(id(i), Bytes::from_static(b"x")),
                None,
                1,
                t0,
                S,
            )
            .unwrap();
        }
        // FIN one, deliver one: the freed slot is taken again, the slab does not grow.
        q.remove_owned(1, &id(5)).unwrap();
        q.insert(
            Message::new(id(10_000), Bytes::from_static(b"x")),
            None,
            1,
            t0,
            2 * S,
        )
        .unwrap();
        assert_eq!(q.gens.len(), 10_000, "no slot was added");
        // The reused slot's old timeout item is stale: 5 never comes back, 10000 times out last.
        let expired: Vec<_> = std::iter::from_fn(|| q.pop_expired(t0 + S))
            .map(|f| f.msg.id)
            .collect();
        assert_eq!(expired.len(), 9_999);
        assert!(!expired.contains(&id(5)));
        assert_eq!(q.pop_expired(t0 + 2 * S).unwrap().msg.id, id(10_000));
        assert!(q.is_empty());
        assert!(q.slots.capacity() <= InFlightQueue::KEPT_SLOTS);
        assert!(q.fifo.is_empty() && q.by_deadline.is_empty() && q.gens.is_empty());
    }

    #[test]
    fn prefetch_changes_nothing() {
        let t0 = Instant::now();
        let mut q = InFlightQueue::new();
        q.insert(msg(1), None, 1, t0, S).unwrap();
        q.prefetch(&[msg(1).id, msg(2).id]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.remove_owned(1, &msg(1).id).unwrap().client_id, 1);
    }

    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::BTreeMap;

        #[derive(Debug, Clone)]
        enum Op {
            Insert { id: u8, client: u8, timeout_ms: u16 },
            Finish { id: u8, client: u8 },
            Touch { id: u8, client: u8, timeout_ms: u16 },
            Advance { ms: u16 },
            Expire,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u8..40, 0u8..3, 1u16..2000)
                    .prop_map(|(id, client, timeout_ms)| Op::Insert { id, client, timeout_ms }),
                3 => (0u8..40, 0u8..3).prop_map(|(id, client)| Op::Finish { id, client }),
                1 => (0u8..40, 0u8..3, 1u16..2000)
                    .prop_map(|(id, client, timeout_ms)| Op::Touch { id, client, timeout_ms }),
                1 => (0u16..500).prop_map(|ms| Op::Advance { ms }),
                1 => Just(Op::Expire),
            ]
        }

        proptest! {
            /// The slab, its generations and the lazily invalidated timeout order behave as a
            /// plain map from ID to (owner, delivered, deadline) expired by a full scan.
            #[test]
            fn behaves_like_a_plain_map(ops in proptest::collection::vec(op(), 1..400)) {
                let t0 = Instant::now();
                let max = Duration::from_millis(3000);
                let mut now = t0;
                let mut q = InFlightQueue::new();
                let mut m: BTreeMap<u8, (u64, Instant, Instant)> = BTreeMap::new();
                for op in ops {
                    match op {
                        Op::Insert { id, client, timeout_ms } => {
                            let t = Duration::from_millis(timeout_ms.into());
                            let r = q.insert(msg(id), None, client.into(), now, t);
                            prop_assert_eq!(r.is_ok(), !m.contains_key(&id));
                            m.entry(id).or_insert((client.into(), now, now + t));
                        }
                        Op::Finish { id, client } => {
                            let want = match m.get(&id) {
                                None => Err(FinishError::NotInFlight),
                                Some(e) if e.0 != u64::from(client) => Err(FinishError::NotOwner),
                                Some(_) => Ok(()),
                            };
                            q.prefetch(&[msg(id).id]);
                            let got = q.remove_owned(client.into(), &msg(id).id).map(|_| ());
                            prop_assert_eq!(got, want);
                            if want.is_ok() {
                                m.remove(&id);
                            }
                        }
                        Op::Touch { id, client, timeout_ms } => {
                            let t = Duration::from_millis(timeout_ms.into());
                            let got = q.touch(client.into(), &msg(id).id, now, t, max);
                            match m.get_mut(&id) {
                                None => prop_assert_eq!(got, Err(FinishError::NotInFlight)),
                                Some(e) if e.0 != u64::from(client) => {
                                    prop_assert_eq!(got, Err(FinishError::NotOwner))
                                }
                                Some(e) => {
                                    prop_assert_eq!(got, Ok(()));
                                    e.2 = (now + t).min(e.1 + max);
                                }
                            }
                        }
                        Op::Advance { ms } => now += Duration::from_millis(ms.into()),
                        Op::Expire => {
                            let mut got = Vec::new();
                            while let Some(f) = q.pop_expired(now) {
                                prop_assert!(f.deadline <= now);
                                got.push(f.msg.id.0[15]);
                            }
                            let mut want: Vec<u8> =
                                m.iter().filter(|(_, e)| e.2 <= now).map(|(id, _)| *id).collect();
                            m.retain(|_, e| e.2 > now);
                            got.sort();
                            want.sort();
                            prop_assert_eq!(got, want);
                        }
                    }
                    prop_assert_eq!(q.len(), m.len());
                    prop_assert_eq!(q.iter().count(), m.len());
                    for (id, e) in &m {
                        let f = q.get(&msg(*id).id).expect("in flight");
                        prop_assert_eq!((f.client_id, f.deadline), (e.0, e.2));
                    }
                }
            }
        }
    }
}
