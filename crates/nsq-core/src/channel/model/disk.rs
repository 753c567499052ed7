//! The simulated disk of the model check: the channel's diskqueue (records, read cursor,
//! watermark, metadata persisted at a sync) and its deferred journal (ADD/DEL replayed by ID),
//! with crashes that keep what a process kill or a power loss would.

use std::collections::BTreeMap;

use bytes::Bytes;
use nsq_protocol::MessageId;
use proptest::prelude::*;

use super::super::state::Queued;
use crate::backend::{RecordPos, WriteTicket};
use crate::deferred_store::StoreTicket;
use crate::message::Message;

/// Records per simulated data file (positions are `(file, offset)` as the diskqueue's).
const PER_FILE: usize = 5;

pub(super) fn pos_of(i: usize) -> RecordPos {
    RecordPos {
        file_num: (i / PER_FILE) as i64,
        offset: (i % PER_FILE) as i64 * 64,
    }
}

pub(super) fn index_of(p: RecordPos) -> usize {
    p.file_num as usize * PER_FILE + p.offset as usize / 64
}

/// The simulated disk: the channel's diskqueue and its deferred journal.
#[derive(Default)]
pub(super) struct Disk {
    pub(super) records: Vec<Bytes>,
    /// The next record a read takes.
    pub(super) read: usize,
    /// The furthest any read got, over every run.
    pub(super) read_high: usize,
    /// Set by the channel; set by a read to its first record when none is.
    pub(super) watermark: Option<usize>,
    /// The read position in the metadata (written at a sync).
    pub(super) persisted_read: usize,
    /// Records up to here are on stable storage.
    pub(super) synced: usize,
    pub(super) fail_writes: bool,
    pub(super) journal: Vec<Entry>,
    /// Entries up to here are on stable storage.
    pub(super) journal_synced: usize,
    /// Appends so far (the journal's tickets), and the newest synced.
    pub(super) journal_ticket: u64,
    pub(super) journal_synced_ticket: u64,
}

#[derive(Clone)]
pub(super) enum Entry {
    Add(i64, Message),
    Del(MessageId),
}

impl Disk {
    pub(super) fn write(&mut self, msgs: &[Queued]) -> Option<WriteTicket> {
        if self.fail_writes {
            return None;
        }
        for q in msgs {
            let mut v = Vec::new();
            q.msg.encode_into(&mut v);
            self.records.push(Bytes::from(v));
        }
        Some(WriteTicket(self.records.len() as u64))
    }

    pub(super) fn read(&mut self, max: usize) -> Vec<(Bytes, RecordPos)> {
        let end = (self.read + max).min(self.records.len());
        let out: Vec<_> = (self.read..end)
            .map(|i| (self.records[i].clone(), pos_of(i)))
            .collect();
        if !out.is_empty() && self.watermark.is_none() {
            self.watermark = Some(self.read);
        }
        self.read = end;
        self.read_high = self.read_high.max(end);
        out
    }

    pub(super) fn depth(&self) -> usize {
        self.records.len() - self.read
    }

    /// A sync: data and journal to stable storage, metadata written.
    pub(super) fn sync(&mut self) -> Result<(), TestCaseError> {
        let persisted = self.watermark.unwrap_or(self.read);
        prop_assert!(
            persisted >= self.persisted_read,
            "persisted read position moved back: {} -> {persisted}",
            self.persisted_read
        );
        self.persisted_read = persisted;
        self.synced = self.records.len();
        self.journal_synced = self.journal.len();
        self.journal_synced_ticket = self.journal_ticket;
        Ok(())
    }

    pub(super) fn journal_add(&mut self, due_wall: i64, m: &Message) -> StoreTicket {
        self.journal.push(Entry::Add(due_wall, m.clone()));
        self.journal_ticket += 1;
        StoreTicket(self.journal_ticket)
    }

    pub(super) fn journal_del(&mut self, ids: Vec<MessageId>) {
        if !ids.is_empty() {
            self.journal.extend(ids.into_iter().map(Entry::Del));
            self.journal_ticket += 1;
        }
    }

    /// The journal rewritten with exactly `live`, and synced (`DeferredStore::compact`).
    pub(super) fn journal_compact(&mut self, live: Vec<(i64, Message)>) {
        self.journal = live.into_iter().map(|(d, m)| Entry::Add(d, m)).collect();
        self.journal_synced = self.journal.len();
        self.journal_synced_ticket = self.journal_ticket;
    }

    pub(super) fn journal_live(&self) -> BTreeMap<MessageId, (i64, Message)> {
        let mut live = BTreeMap::new();
        for e in &self.journal {
            match e {
                Entry::Add(due, m) => {
                    live.insert(m.id, (*due, m.clone()));
                }
                Entry::Del(id) => {
                    live.remove(id);
                }
            }
        }
        live
    }

    /// A crash: a power loss drops what was not synced; the read position comes from the
    /// metadata either way.
    pub(super) fn crash(&mut self, power: bool) {
        if power {
            self.records.truncate(self.synced);
            self.journal.truncate(self.journal_synced);
        }
        self.read = self.persisted_read.min(self.records.len());
        self.watermark = None;
    }
}
