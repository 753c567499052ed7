//! What the channel state knows of its deferred journal (`crate::deferred_store`): for each
//! message ID with a live ADD, the generation of its newest ADD, how many ADDs of it are still
//! being written, and — once it left the deferred set for the queue — the message, until its
//! DEL is written.
//!
//! The journal replays by ID (an ADD enters, a DEL removes every ADD of that ID). Three rules
//! follow, each found by the model check (`model/`):
//! - a DEL is written only for the newest generation: a message deferred again (a new ADD)
//!   before the DEL of its previous release was due would otherwise lose its new entry too;
//! - a DEL waits until every ADD of its ID is written: written before one, it would leave
//!   that ADD live (delivered again after a restart);
//! - compaction keeps released messages whose DEL is not written yet: their ADD is still
//!   their durable copy until their queue copy is synced.

use nsq_protocol::MessageId;
use rustc_hash::FxHashMap;

use crate::message::Message;

/// A journal entry the channel asked to delete: the ID and the generation of the ADD.
pub(super) type JournalRef = (MessageId, u64);

struct Entry {
    gen: u64,
    /// ADDs of this ID being written.
    writing: u32,
    /// Its DEL is due and waits for `writing` to reach 0.
    del_waiting: bool,
    /// The message, while released to the queue and its DEL not yet written.
    released: Option<Message>,
}

/// The journal's live entries as the state sees them.
#[derive(Default)]
pub(super) struct JournalBook {
    entries: FxHashMap<MessageId, Entry>,
    next_gen: u64,
}

impl JournalBook {
    /// An ADD of `id`: `writing` while the driver writes it. Returns its generation.
    pub(super) fn add(&mut self, id: MessageId, writing: bool) -> u64 {
        self.next_gen += 1;
        let gen = self.next_gen;
        let e = self.entries.entry(id).or_insert(Entry {
            gen,
            writing: 0,
            del_waiting: false,
            released: None,
        });
        e.gen = gen;
        e.del_waiting = false;
        e.released = None;
        if writing {
            e.writing += 1;
        }
        gen
    }

    /// An ADD of `id` was written (or failed). True: the DEL it held back is to be written now.
    pub(super) fn added(&mut self, id: MessageId) -> bool {
        let Some(e) = self.entries.get_mut(&id) else {
            return false;
        };
        e.writing = e.writing.saturating_sub(1);
        if e.writing == 0 && e.del_waiting {
            self.entries.remove(&id);
            return true;
        }
        false
    }

    /// `msg` left the deferred set for the queue; returns the reference to delete once its
    /// queue copy is stored.
    pub(super) fn released(&mut self, msg: &Message) -> JournalRef {
        let gen = match self.entries.get_mut(&msg.id) {
            Some(e) => {
                e.released = Some(msg.clone());
                e.gen
            }
            None => {
                let gen = self.add(msg.id, false);
                if let Some(e) = self.entries.get_mut(&msg.id) {
                    e.released = Some(msg.clone());
                }
                gen
            }
        };
        (msg.id, gen)
    }

    /// A released message went back to the deferred set (its queue write failed).
    pub(super) fn unreleased(&mut self, id: &MessageId) {
        if let Some(e) = self.entries.get_mut(id) {
            e.released = None;
        }
    }

    /// The queue copy of a released message is stored: true if its DEL is to be written now
    /// (not if a newer ADD of the ID exists, or while an ADD of it is being written).
    pub(super) fn delete(&mut self, (id, gen): JournalRef) -> bool {
        let Some(e) = self.entries.get_mut(&id) else {
            return false;
        };
        if e.gen != gen {
            return false;
        }
        e.released = None;
        if e.writing > 0 {
            e.del_waiting = true;
            return false;
        }
        self.entries.remove(&id);
        true
    }

    /// Released messages whose DEL is not written yet (for compaction).
    pub(super) fn released_messages(&self) -> impl Iterator<Item = &Message> + '_ {
        self.entries.values().filter_map(|e| e.released.as_ref())
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }
}
