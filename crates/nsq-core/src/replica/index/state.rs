//! One message's state in the index: where it is pending and where its body is.
//!
//! The usual message — its ID a GUID, pending on its topic and/or on channels in the first
//! 14 slots of its topic's channel table, all with one due time (0, or its deferred
//! publish's), never requeued with attempts, stored below 4 GiB of segment numbers and
//! offsets — is a [`Val`] of 16 bytes: segment, offset, body length and a word of bits
//! (pending on the topic, on each of the channels; deferred; and, during a catch-up, which
//! pendings are not confirmed yet). A deferred one has its due time in its topic's table of
//! due times, 16 bytes more (`ids.rs`). Any other message is *wide*: its [`Val`] holds
//! [`WIDE`] and its state is a [`Wide`] in its topic's side table, with per-channel due
//! times and attempts; it turns back into a [`Val`] as soon as it fits one again. Rules that
//! change a state are written once for [`Wide`]; [`MsgMut`] takes the fast path on the bits
//! when the outcome fits them and widens the message otherwise.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use nsq_protocol::MessageId;

use super::ids::{IdMap, Value};
use super::IdHasher;

/// A narrow message's state: bit 0 pending on the topic, bit `1 + slot` pending on the
/// channel in `slot` (< [`NARROW_SLOTS`]), bit 15 [`DEFERRED`]; bits 16 to 30, bits 0 to
/// 14 not confirmed (during a catch-up). 0: settled (or a tombstone). [`WIDE`]: see the
/// module comment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Val {
    pub(super) seg: u32,
    pub(super) off: u32,
    pub(super) body_len: u32,
    pub(super) bits: u32,
}

impl Value for Val {
    fn live(&self) -> bool {
        self.bits != 0
    }
}

impl Val {
    /// A narrow message due at the time in the due table.
    pub(super) fn deferred(&self) -> bool {
        self.bits != WIDE && self.bits & DEFERRED != 0
    }
}

pub(super) const TOPIC: u32 = 1;
/// Channel slots a [`Val`] has bits for.
pub(super) const NARROW_SLOTS: u32 = 14;
/// Every pending is due at the message's time in the due table (otherwise at once).
const DEFERRED: u32 = 1 << 15;
const PENDING: u32 = 0x7fff;
const UNCONFIRMED: u32 = 16;
/// Bit 31, never set in a narrow state.
pub(super) const WIDE: u32 = 0xffff_0000;

fn slot_bit(slot: u32) -> u32 {
    if slot < NARROW_SLOTS {
        1 << (slot + 1)
    } else {
        0
    }
}

/// A wide message (see the module comment).
#[derive(Debug, Clone)]
pub(super) struct Wide {
    seg: u64,
    off: u64,
    body_len: u32,
    /// Pending on the topic, due at this time once fanned out; and confirmed.
    topic: Option<(i64, bool)>,
    chans: Vec<WideChan>,
}

#[derive(Debug, Clone, Copy)]
struct WideChan {
    slot: u32,
    due: i64,
    attempts: u16,
    confirmed: bool,
}

impl Wide {
    pub(super) fn new(seg: u64, off: u64, body_len: u32) -> Self {
        Wide {
            seg,
            off,
            body_len,
            topic: None,
            chans: Vec::new(),
        }
    }

    /// Narrow state `v` (its [`DEFERRED`] bit aside), every pending due at `due`.
    fn from_narrow(v: Val, due: i64) -> Self {
        let confirmed = |bit: u32| v.bits & (bit << UNCONFIRMED) == 0;
        Wide {
            seg: v.seg.into(),
            off: v.off.into(),
            body_len: v.body_len,
            topic: (v.bits & TOPIC != 0).then(|| (due, confirmed(TOPIC))),
            chans: (0..NARROW_SLOTS)
                .filter(|s| v.bits & slot_bit(*s) != 0)
                .map(|slot| WideChan {
                    slot,
                    due,
                    attempts: 0,
                    confirmed: confirmed(slot_bit(slot)),
                })
                .collect(),
        }
    }

    /// The same state as a [`Val`] (without its [`DEFERRED`] bit) and its one due time, if
    /// it fits.
    fn narrow(&self) -> Option<(Val, i64)> {
        let seg = u32::try_from(self.seg).ok()?;
        let off = u32::try_from(self.off).ok()?;
        let mut bits = 0;
        let mut due = None;
        let mut add = |bit: u32, d: i64, confirmed: bool| {
            bits |= bit;
            if !confirmed {
                bits |= bit << UNCONFIRMED;
            }
            due.is_none_or(|x| x == d).then(|| due = Some(d))
        };
        if let Some((d, confirmed)) = self.topic {
            add(TOPIC, d, confirmed)?;
        }
        for c in &self.chans {
            if c.slot >= NARROW_SLOTS || c.attempts != 0 {
                return None;
            }
            add(slot_bit(c.slot), c.due, c.confirmed)?;
        }
        let v = Val {
            seg,
            off,
            body_len: self.body_len,
            bits,
        };
        Some((v, due.unwrap_or(0)))
    }

    fn is_dead(&self) -> bool {
        self.topic.is_none() && self.chans.is_empty()
    }
}

pub(super) type WideMap = HashMap<MessageId, Wide, BuildHasherDefault<IdHasher>>;

/// A message that was settled: what the index's counters need.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gone {
    pub(super) segment: u64,
    pub(super) body_len: u32,
}

/// How a message is keyed: by its GUID as a number, or by its bytes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Key<'a> {
    Guid(u64),
    Bytes(&'a MessageId),
}

impl Key<'_> {
    pub(super) fn id(&self) -> MessageId {
        match self {
            Key::Guid(v) => MessageId::from_u64(*v),
            Key::Bytes(id) => **id,
        }
    }
}

/// A message being changed: its [`Val`], its topic's wide table and due table.
pub(super) struct MsgMut<'a> {
    pub(super) key: Key<'a>,
    pub(super) val: &'a mut Val,
    pub(super) wide: &'a mut WideMap,
    pub(super) dues: &'a mut IdMap<i64>,
}

impl MsgMut<'_> {
    fn is_wide(&self) -> bool {
        self.val.bits == WIDE
    }

    /// A narrow message's due time.
    fn due(&self) -> i64 {
        match self.key {
            Key::Guid(k) if self.val.deferred() => {
                *self.dues.get(k).expect("a deferred message's due time")
            }
            _ => 0,
        }
    }

    /// Sets a narrow message's due time (only a GUID's can be other than 0).
    fn set_due(&mut self, due: i64) {
        match self.key {
            Key::Guid(k) if due != 0 => {
                self.dues.upsert(k, |d, _| *d = due);
                self.val.bits |= DEFERRED;
            }
            Key::Guid(k) if self.val.deferred() => {
                self.dues.update(k, |d| *d = 0);
                self.val.bits &= !DEFERRED;
            }
            _ => debug_assert_eq!(due, 0, "a due time for an ID that is not a GUID"),
        }
    }

    /// The wide state, widening a narrow message first.
    fn wide(&mut self) -> &mut Wide {
        let id = self.key.id();
        if !self.is_wide() {
            let due = self.due();
            self.set_due(0);
            self.wide.insert(id, Wide::from_narrow(*self.val, due));
            self.val.bits = WIDE;
        }
        self.wide.get_mut(&id).expect("a wide message's state")
    }

    /// The one due time of pendings on the topic (due `topic`) and on `chans` if they keep a
    /// narrow message narrow: all due at once or all at the same time (the message's own if
    /// it is pending already), no attempts, narrow slots.
    fn shared_due(&self, topic: Option<i64>, chans: &[(u32, i64, Option<u16>)]) -> Option<i64> {
        if chans
            .iter()
            .any(|&(slot, _, attempts)| slot >= NARROW_SLOTS || attempts.unwrap_or(0) != 0)
        {
            return None;
        }
        let mut dues = topic.into_iter().chain(chans.iter().map(|c| c.1));
        let Some(due) = dues.next() else {
            return Some(self.due());
        };
        if dues.any(|d| d != due) {
            return None;
        }
        if self.val.bits & PENDING != 0 && due != self.due() {
            return None;
        }
        if due != 0 && !matches!(self.key, Key::Guid(_)) {
            return None;
        }
        Some(due)
    }

    /// Pending on the topic (due `topic`) and on `chans` (`(slot, due, attempts)`; attempts
    /// `None` keeps a known value), all confirmed.
    pub(super) fn upsert(&mut self, topic: Option<i64>, chans: &[(u32, i64, Option<u16>)]) {
        if !self.is_wide() {
            if let Some(due) = self.shared_due(topic, chans) {
                let mut set = if topic.is_some() { TOPIC } else { 0 };
                for &(slot, _, _) in chans {
                    set |= slot_bit(slot);
                }
                if set != 0 && self.val.bits & PENDING == 0 {
                    self.set_due(due);
                }
                self.val.bits = (self.val.bits | set) & !(set << UNCONFIRMED);
                return;
            }
        }
        let w = self.wide();
        if let Some(due) = topic {
            w.topic = Some((due, true));
        }
        for &(slot, due, attempts) in chans {
            match w.chans.iter_mut().find(|c| c.slot == slot) {
                Some(c) => {
                    c.due = due;
                    if let Some(a) = attempts {
                        c.attempts = a;
                    }
                    c.confirmed = true;
                }
                None => w.chans.push(WideChan {
                    slot,
                    due,
                    attempts: attempts.unwrap_or(0),
                    confirmed: true,
                }),
            }
        }
    }

    /// No longer pending on channel `slot` (FIN, EMPTY, DELETE); whether it was.
    pub(super) fn drop_channel(&mut self, slot: u32) -> bool {
        if !self.is_wide() {
            let bit = slot_bit(slot);
            let was = self.val.bits & bit != 0;
            self.val.bits &= !(bit | bit << UNCONFIRMED);
            return was;
        }
        let w = self.wide();
        match w.chans.iter().position(|c| c.slot == slot) {
            Some(i) => {
                w.chans.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// No longer pending on the topic (EMPTY of the topic); whether it was.
    pub(super) fn drop_topic(&mut self) -> bool {
        if !self.is_wide() {
            let was = self.val.bits & TOPIC != 0;
            self.val.bits &= !(TOPIC | TOPIC << UNCONFIRMED);
            return was;
        }
        self.wide().topic.take().is_some()
    }

    /// REQ: due time and attempts on channel `slot`, if pending there; confirmed.
    pub(super) fn requeue(&mut self, slot: u32, due: i64, attempts: u16) {
        let bit = slot_bit(slot);
        if !self.is_wide() {
            if self.val.bits & bit == 0 {
                return;
            }
            if attempts == 0 && due == self.due() {
                self.val.bits &= !(bit << UNCONFIRMED);
                return;
            }
        }
        if let Some(c) = self.wide().chans.iter_mut().find(|c| c.slot == slot) {
            c.due = due;
            c.attempts = attempts;
            c.confirmed = true;
        }
    }

    /// FANOUT: when pending on the topic, pending on each of `slots` it is not pending on
    /// yet (due as on the topic, confirmed); then, unless `more`, no longer on the topic.
    pub(super) fn fan_out(&mut self, slots: &[u32], more: bool) {
        if !self.is_wide() {
            if self.val.bits & TOPIC == 0 {
                return;
            }
            if slots.iter().all(|s| *s < NARROW_SLOTS) {
                for s in slots {
                    self.val.bits |= slot_bit(*s);
                }
                if !more {
                    self.val.bits &= !(TOPIC | TOPIC << UNCONFIRMED);
                }
                return;
            }
        }
        let w = self.wide();
        let Some((due, _)) = w.topic else {
            return;
        };
        for &slot in slots {
            if !w.chans.iter().any(|c| c.slot == slot) {
                w.chans.push(WideChan {
                    slot,
                    due,
                    attempts: 0,
                    confirmed: true,
                });
            }
        }
        if !more {
            w.topic = None;
        }
    }

    /// CATCHUP_BEGIN: nothing is confirmed.
    pub(super) fn unconfirm(&mut self) {
        if !self.is_wide() {
            self.val.bits |= (self.val.bits & PENDING) << UNCONFIRMED;
            return;
        }
        let w = self.wide();
        if let Some((_, c)) = w.topic.as_mut() {
            *c = false;
        }
        for c in &mut w.chans {
            c.confirmed = false;
        }
    }

    /// CATCHUP_END: what was not confirmed goes.
    pub(super) fn drop_unconfirmed(&mut self) {
        if !self.is_wide() {
            let b = self.val.bits;
            self.val.bits = (b & PENDING & !(b >> UNCONFIRMED)) | (b & DEFERRED);
            return;
        }
        let w = self.wide();
        if w.topic.is_some_and(|(_, c)| !c) {
            w.topic = None;
        }
        w.chans.retain(|c| c.confirmed);
    }

    /// After a change: the message if it is settled now (its due time and wide state
    /// leave their tables); a wide one that fits a [`Val`] again becomes narrow.
    pub(super) fn settle(&mut self) -> Option<Gone> {
        if !self.is_wide() {
            if self.val.bits & PENDING != 0 {
                return None;
            }
            self.set_due(0);
            self.val.bits = 0;
            return Some(Gone {
                segment: self.val.seg.into(),
                body_len: self.val.body_len,
            });
        }
        let id = self.key.id();
        let w = self.wide.get(&id).expect("a wide message's state");
        if w.is_dead() {
            let w = self.wide.remove(&id).expect("present");
            self.val.bits = 0;
            return Some(Gone {
                segment: w.seg,
                body_len: w.body_len,
            });
        }
        match w.narrow() {
            Some((v, due)) if due == 0 || matches!(self.key, Key::Guid(_)) => {
                *self.val = v;
                self.wide.remove(&id);
                self.set_due(due);
            }
            _ => {}
        }
        None
    }
}

/// A message as the queries see it.
#[derive(Debug, Clone, Copy)]
pub(super) enum View<'a> {
    /// With its due time.
    Narrow(Val, i64),
    Wide(&'a Wide),
}

impl View<'_> {
    pub(super) fn of<'a>(
        key: Key<'_>,
        val: &Val,
        wide: &'a WideMap,
        dues: &IdMap<i64>,
    ) -> View<'a> {
        match key {
            _ if val.bits == WIDE => {
                View::Wide(wide.get(&key.id()).expect("a wide message's state"))
            }
            Key::Guid(k) if val.deferred() => {
                View::Narrow(*val, *dues.get(k).expect("a deferred message's due time"))
            }
            _ => View::Narrow(*val, 0),
        }
    }

    /// `(segment, offset)` of the record with the body.
    pub(super) fn place(&self) -> (u64, u64) {
        match self {
            View::Narrow(v, _) => (v.seg.into(), v.off.into()),
            View::Wide(w) => (w.seg, w.off),
        }
    }

    pub(super) fn body_len(&self) -> u32 {
        match self {
            View::Narrow(v, _) => v.body_len,
            View::Wide(w) => w.body_len,
        }
    }

    /// Due on the topic, when pending there.
    pub(super) fn topic(&self) -> Option<i64> {
        match self {
            View::Narrow(v, due) => (v.bits & TOPIC != 0).then_some(*due),
            View::Wide(w) => w.topic.map(|(due, _)| due),
        }
    }

    /// Calls `f` with `(slot, due, attempts)` of each channel it is pending on.
    pub(super) fn channels(&self, mut f: impl FnMut(u32, i64, u16)) {
        match self {
            View::Narrow(v, due) => (0..NARROW_SLOTS)
                .filter(|s| v.bits & slot_bit(*s) != 0)
                .for_each(|s| f(s, *due, 0)),
            View::Wide(w) => w.chans.iter().for_each(|c| f(c.slot, c.due, c.attempts)),
        }
    }
}
