//! A topic in the index: its flags, its channels (each name kept once, in a slot that the
//! messages' states refer to) and its messages (the origin's GUIDs in sorted chunks, any
//! other ID in a hash table; due times and wide states beside them).

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use nsq_protocol::replication::Settings;
use nsq_protocol::MessageId;

use super::ids::IdMap;
use super::state::{Gone, Key, MsgMut, Val, View, Wide, WideMap, WIDE};
use super::{guid, IdHasher, NewMessage};

/// A channel slot. `listed`: a channel of the topic (with its flags); otherwise a name that
/// messages are still pending on after their channel's metadata went (a catch-up did not
/// confirm the channel, only a REQ of one of its messages).
#[derive(Debug, Clone)]
pub(super) struct Chan {
    pub(super) name: Box<str>,
    pub(super) listed: bool,
    pub(super) paused: bool,
    /// Its queue settings (ADMIN op 6, STATE TOPIC), carried to a takeover.
    pub(super) settings: Settings,
    pub(super) confirmed: bool,
}

#[derive(Debug, Clone, Default)]
pub(super) struct TopicEntry {
    pub(super) paused: bool,
    pub(super) settings: Settings,
    pub(super) confirmed: bool,
    /// Slots; `None` is free (no channel, no message pending on it).
    chans: Vec<Option<Chan>>,
    pub(super) msgs: Messages,
}

impl TopicEntry {
    /// A topic just created (confirmed).
    pub(super) fn new() -> Self {
        TopicEntry {
            confirmed: true,
            ..TopicEntry::default()
        }
    }

    /// The slot of channel `name`, listed: an existing channel is confirmed when
    /// `catching_up`, a new one is created confirmed.
    pub(super) fn channel(&mut self, name: &str, catching_up: bool) -> u32 {
        if let Some(slot) = self.slot(name) {
            let c = self.chan_mut(slot);
            if c.listed {
                c.confirmed |= catching_up;
            } else {
                c.listed = true;
                c.paused = false;
                c.settings = Settings::new();
                c.confirmed = true;
            }
            return slot;
        }
        let c = Some(Chan {
            name: name.into(),
            listed: true,
            paused: false,
            settings: Settings::new(),
            confirmed: true,
        });
        match self.chans.iter().position(Option::is_none) {
            Some(i) => {
                self.chans[i] = c;
                i as u32
            }
            None => {
                self.chans.push(c);
                (self.chans.len() - 1) as u32
            }
        }
    }

    /// The slot named `name`, listed or not.
    pub(super) fn slot(&self, name: &str) -> Option<u32> {
        self.chans
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| *c.name == *name))
            .map(|i| i as u32)
    }

    pub(super) fn chan_mut(&mut self, slot: u32) -> &mut Chan {
        self.chans[slot as usize].as_mut().expect("a used slot")
    }

    /// The name in `slot` (one a message is pending on).
    pub(super) fn name(&self, slot: u32) -> &str {
        &self.chans[slot as usize]
            .as_ref()
            .expect("a used slot")
            .name
    }

    /// The topic's channels, by name.
    pub(super) fn listed(&self) -> Vec<&Chan> {
        let mut v: Vec<&Chan> = self.chans.iter().flatten().filter(|c| c.listed).collect();
        v.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Every slot, listed or not.
    pub(super) fn chans_mut(&mut self) -> impl Iterator<Item = &mut Chan> + '_ {
        self.chans.iter_mut().flatten()
    }

    /// Frees `slot`: no message is pending on it any more.
    pub(super) fn free(&mut self, slot: u32) {
        self.chans[slot as usize] = None;
    }

    /// Frees the slots that are not listed and that no message is pending on.
    pub(super) fn free_unused(&mut self) {
        let mut used = vec![false; self.chans.len()];
        for (_, v) in self.msgs.iter() {
            v.channels(|slot, _, _| used[slot as usize] = true);
        }
        for (c, used) in self.chans.iter_mut().zip(used) {
            if c.as_ref().is_some_and(|c| !c.listed) && !used {
                *c = None;
            }
        }
    }
}

/// A topic's messages (see the module comment).
#[derive(Debug, Clone, Default)]
pub(super) struct Messages {
    guids: IdMap<Val>,
    /// IDs that are not 16 lowercase hex digits (never the origin's own).
    others: HashMap<MessageId, Val, BuildHasherDefault<IdHasher>>,
    /// The due times of deferred narrow messages, by GUID.
    dues: IdMap<i64>,
    wide: WideMap,
}

impl Messages {
    pub(super) fn len(&self) -> usize {
        self.guids.len() + self.others.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with message `id`, if live; the message if that settled it.
    pub(super) fn update<R>(
        &mut self,
        id: &MessageId,
        f: impl FnOnce(&mut MsgMut<'_>) -> R,
    ) -> Option<(R, Option<Gone>)> {
        let (wide, dues) = (&mut self.wide, &mut self.dues);
        if let Some(k) = guid(&id.0) {
            return self.guids.update(k, |val| {
                let mut m = MsgMut {
                    key: Key::Guid(k),
                    val,
                    wide,
                    dues,
                };
                let r = f(&mut m);
                (r, m.settle())
            });
        }
        let val = self.others.get_mut(id)?;
        let mut m = MsgMut {
            key: Key::Bytes(id),
            val,
            wide,
            dues,
        };
        let r = f(&mut m);
        let gone = m.settle();
        if gone.is_some() {
            self.others.remove(id);
        }
        Some((r, gone))
    }

    /// Adds message `new` unless it is there, then calls `f` with it; whether it was added
    /// (a new message that `f` leaves settled is not).
    pub(super) fn upsert(&mut self, new: &NewMessage, f: impl FnOnce(&mut MsgMut<'_>)) -> bool {
        let (wide, dues) = (&mut self.wide, &mut self.dues);
        if let Some(k) = guid(&new.id.0) {
            return self.guids.upsert(k, |val, created| {
                let key = Key::Guid(k);
                if created {
                    *val = fresh(new, key, wide);
                }
                let mut m = MsgMut {
                    key,
                    val,
                    wide,
                    dues,
                };
                f(&mut m);
                let gone = m.settle();
                debug_assert!(created || gone.is_none(), "an upsert settles nothing");
                created && gone.is_none()
            });
        }
        let key = Key::Bytes(&new.id);
        let created = !self.others.contains_key(&new.id);
        let val = self
            .others
            .entry(new.id)
            .or_insert_with(|| fresh(new, key, wide));
        let mut m = MsgMut {
            key,
            val,
            wide,
            dues,
        };
        f(&mut m);
        let gone = m.settle();
        if gone.is_some() {
            self.others.remove(&new.id);
        }
        created && gone.is_none()
    }

    /// Calls `f` with every live message; `gone` with each that this settled.
    pub(super) fn for_each(
        &mut self,
        mut f: impl FnMut(&mut MsgMut<'_>),
        mut gone: impl FnMut(Gone),
    ) {
        let (wide, dues) = (&mut self.wide, &mut self.dues);
        self.guids.for_each_mut(|k, val| {
            let mut m = MsgMut {
                key: Key::Guid(k),
                val,
                wide,
                dues,
            };
            f(&mut m);
            if let Some(g) = m.settle() {
                gone(g);
            }
        });
        self.others.retain(|id, val| {
            let mut m = MsgMut {
                key: Key::Bytes(id),
                val,
                wide,
                dues,
            };
            f(&mut m);
            m.settle().map(&mut gone).is_none()
        });
    }

    /// Every live message.
    pub(super) fn iter(&self) -> impl Iterator<Item = (MessageId, View<'_>)> + '_ {
        let (wide, dues) = (&self.wide, &self.dues);
        let guids = self.guids.iter().map(move |(k, v)| {
            (
                MessageId::from_u64(k),
                View::of(Key::Guid(k), v, wide, dues),
            )
        });
        let others = self
            .others
            .iter()
            .map(move |(id, v)| (*id, View::of(Key::Bytes(id), v, wide, dues)));
        guids.chain(others)
    }

    /// Chunks of the sorted part, wide states and due times, after checking them (tests).
    #[cfg(test)]
    pub(super) fn check(&self) -> (usize, usize, usize) {
        self.guids.check();
        self.dues.check();
        let deferred = self.guids.iter().filter(|(_, v)| v.deferred()).count();
        assert_eq!(deferred, self.dues.len(), "a due time per deferred message");
        for (k, v) in self.guids.iter().filter(|(_, v)| v.deferred()) {
            assert!(self.dues.get(k).is_some(), "{k:x} {v:?}");
        }
        let wide = self.guids.iter().filter(|(_, v)| v.bits == WIDE).count()
            + self.others.values().filter(|v| v.bits == WIDE).count();
        assert_eq!(wide, self.wide.len(), "a wide state per wide message");
        (self.guids.chunks(), self.wide.len(), self.dues.len())
    }
}

/// A new message's [`Val`], narrow when its place fits one.
fn fresh(new: &NewMessage, key: Key<'_>, wide: &mut WideMap) -> Val {
    match (
        u32::try_from(new.loc.segment),
        u32::try_from(new.loc.offset),
    ) {
        (Ok(seg), Ok(off)) => Val {
            seg,
            off,
            body_len: new.body_len,
            bits: 0,
        },
        _ => {
            let w = Wide::new(new.loc.segment, new.loc.offset, new.body_len);
            wide.insert(key.id(), w);
            Val {
                bits: WIDE,
                ..Val::default()
            }
        }
    }
}
