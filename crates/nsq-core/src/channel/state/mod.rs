//! `ChannelState`: every rule of a channel's delivery and crash safety, as a synchronous state
//! machine with no lock, no I/O and no clock of its own.
//!
//! Events come in as method calls — a put, a take of an RDY window, FIN, REQ (with or without
//! a delay), TOUCH, the timeout and deferred-due ticks, a backend read or write reported back,
//! a sync reported durable, recovery on start — and the effects come out as return values:
//! records to write to the backend, journal entries to add or delete, the read watermark to
//! hand to the backend ([`ChannelState::watermark_change`]), the consumers whose messages
//! timed out, a publish refused. The driver (`Channel` in `mod.rs`) applies one event under
//! its lock and carries the effects out; the model check (`model/`) applies the same events
//! against a simulated disk, crashes included.
//!
//! A backend write is two events: a put that must go to disk returns the records to write
//! ([`Put::Write`]) and the state counts the write as outstanding until
//! [`ChannelState::put_done`] (likewise a [`Restore`]); other events may arrive in between —
//! the model check interleaves them — and the state keeps the channel FIFO meanwhile.
//!
//! A backend read is not split: the driver performs the read that [`Taken::read`] asks for
//! and reports it with [`ChannelState::take_backend`] under the same lock, with no event in
//! between. The diskqueue sets its watermark to the first record a read takes when none is
//! set; with reads outside the lock, a second reader's records could move the watermark past
//! those of a first reader that had not reported yet, and a sync then persisted a read
//! position past messages in flight (a crash lost them). The model check found that in the
//! previous design, which counted outstanding reads.
//!
//! The reference keeps none of this: nsqd/channel.go (`put`, `StartInFlightTimeout`,
//! `FinishMessage`, `RequeueMessage`, `processInFlightQueue`, `processDeferredQueue`) moves
//! messages between a Go channel, the diskqueue and two priority queues, and a message read
//! from disk is gone from it once read.

use std::time::{Duration, Instant};

use bytes::Bytes;
use nsq_protocol::MessageId;

mod settle;
mod types;

pub(in crate::channel) use types::{
    After, Awaiting, Config, Now, Put, Queued, Requeued, Restore, Taken, Verdict,
};

use super::journal::{JournalBook, JournalRef};
use super::reads::ReadTracker;
use super::RequeueError;
use crate::backend::{RecordPos, WriteTicket};
use crate::deferred::DeferredQueue;
use crate::deferred_store::StoreTicket;
use crate::inflight::{FinishError, InFlightQueue};
use crate::memqueue::{MemQueue, Weigh};
use crate::message::Message;

/// A channel's state (see the module docs).
pub(super) struct ChannelState {
    cfg: Config,
    mem: MemQueue<Queued>,
    /// The backend holds messages newer than everything in `mem`; new puts go behind them so
    /// the channel stays FIFO. Cleared when a read finds the backend empty with no write
    /// outstanding.
    spill: bool,
    /// Backend writes decided and not yet reported.
    writing: usize,
    in_flight: InFlightQueue,
    deferred: DeferredQueue,
    reads: ReadTracker,
    /// Settlements waiting for a sync, in the order they were registered.
    awaiting: Vec<Awaiting>,
    /// The deferred journal's live entries (see `journal.rs`).
    journal: JournalBook,
    /// Closed or being deleted: puts and requeues are refused.
    closing: bool,
}

impl ChannelState {
    /// Recovery on start: `backend_depth` records wait on disk from a previous run (read them
    /// before anything new), `replayed` are the journal's deferred messages with their due
    /// times (Unix nanoseconds).
    pub(super) fn recover(
        cfg: Config,
        backend_depth: i64,
        replayed: Vec<(i64, Message)>,
        now: Now,
    ) -> Self {
        let mut deferred = DeferredQueue::new();
        let mut journal = JournalBook::default();
        for (due_wall, m) in replayed {
            journal.add(m.id, false);
            let wait = u64::try_from(due_wall.saturating_sub(now.wall)).unwrap_or(0);
            // A duplicate ID is dropped, as the reference's pushDeferredMessage does.
            let _ = deferred.insert(now.mono + Duration::from_nanos(wait), m);
        }
        ChannelState {
            spill: cfg.durable && backend_depth > 0,
            cfg,
            mem: MemQueue::new(),
            writing: 0,
            in_flight: InFlightQueue::new(),
            deferred,
            reads: ReadTracker::default(),
            awaiting: Vec::new(),
            journal,
            closing: false,
        }
    }

    // ---- entering the channel ----------------------------------------------------------

    /// Appends messages to the queue: memory while there is room, nothing older waits on disk
    /// and `admit` accepts their weight (`bytes`, see [`crate::reserve`]); the rest to the
    /// backend. All or nothing: the part for memory enters only once the backend write
    /// succeeded ([`ChannelState::put_done`]), so a refused put leaves no trace. (A consumer
    /// may read the disk part of such a batch before its memory part arrives: order holds
    /// between batches, not inside one that straddles the memory limit. The reference, which
    /// places each message on its own, promises no order at all.)
    pub(super) fn put(
        &mut self,
        msgs: impl ExactSizeIterator<Item = Queued>,
        bytes: u64,
        admit: &mut dyn FnMut(u64) -> bool,
    ) -> Put {
        if self.closing {
            return Put::Exiting;
        }
        let mut room = if self.spill {
            0
        } else {
            self.cfg.mem_queue_size.saturating_sub(self.mem.len())
        };
        if msgs.len() <= room {
            if admit(bytes) {
                // All of it fits: straight into the memory queue, no intermediate vector.
                self.mem.extend(msgs);
                return Put::Memory;
            }
            room = 0;
        }
        let mut mem: Vec<Queued> = msgs.collect();
        let mut disk = mem.split_off(room.min(mem.len()));
        if !mem.is_empty() && !admit(mem.iter().map(Weigh::weight).sum()) {
            // Memory refused: all of it goes to the backend, in order.
            mem.append(&mut disk);
            disk = std::mem::take(&mut mem);
        }
        self.start_write();
        Put::Write { mem, disk }
    }

    fn start_write(&mut self) {
        if self.cfg.durable {
            self.spill = true;
        }
        self.writing += 1;
    }

    /// The backend write of a [`Put::Write`] finished: on success `mem` enters the memory
    /// queue. `backend_empty`: the backend's depth is 0 now.
    pub(super) fn put_done(&mut self, mem: Vec<Queued>, ok: bool, backend_empty: bool) {
        self.writing -= 1;
        if ok {
            self.mem.extend(mem);
        } else {
            self.end_spill_if_drained(backend_empty);
        }
    }

    fn end_spill_if_drained(&mut self, backend_empty: bool) {
        if self.writing == 0 && backend_empty {
            self.spill = false;
        }
    }

    /// A deferred message enters the channel (DPUB; journaled by the caller first when the
    /// channel is). Returns false for a duplicate ID, dropped as the reference's
    /// `pushDeferredMessage` does.
    pub(super) fn defer_new(&mut self, due: Instant, msg: Message) -> bool {
        if self.cfg.journaled {
            self.journal.add(msg.id, false);
        }
        self.deferred.insert(due, msg).is_ok()
    }

    /// Puts messages that already belong to the channel back in the queue: memory while
    /// there is room and nothing older waits on disk, the rest to the backend. Nothing is
    /// dropped (see [`ChannelState::restore_done`]).
    fn restore(&mut self, msgs: Vec<Queued>, journal_del: Vec<JournalRef>) -> Restore {
        let mut write = Vec::new();
        for q in msgs {
            if !self.spill && self.mem.len() < self.cfg.mem_queue_size {
                self.mem.push_back(q);
            } else {
                if self.cfg.durable {
                    self.spill = true;
                }
                write.push(q);
            }
        }
        if write.is_empty() {
            // Everything went to memory (only possible without a journal, whose channels have
            // a memory queue of 0): no journal entry to delete.
            return Restore {
                write,
                journal_del: Vec::new(),
            };
        }
        self.writing += 1;
        Restore { write, journal_del }
    }

    /// The backend write of a [`Restore`] finished (`Some(ticket)`) or failed (`None`); only
    /// called when it had something to write. Returns journal entries to delete now.
    ///
    /// Written: the old records of the re-stored messages are settled — once the write is
    /// synced when journaled (the new copy must survive a power loss before the old one may
    /// be passed), at once otherwise (nothing on disk is promised there beyond the backend's
    /// own syncs). Failed (disk full): the messages stay in memory beyond the memory-queue
    /// size with their records unsettled — except due deferred messages whose only durable
    /// copy is their journal entry: they go back to the deferred set, due again at `now`, so
    /// the entry stays theirs until a write succeeds (kept in memory, a FIN would leave the
    /// entry behind and a restart would deliver them again).
    pub(super) fn restore_done(
        &mut self,
        write: Vec<Queued>,
        written: Option<WriteTicket>,
        journal_del: Vec<JournalRef>,
        now: Instant,
    ) -> Vec<MessageId> {
        self.writing -= 1;
        let Some(ticket) = written else {
            // A set, not a scan per message: a full disk fails every release of a large due
            // batch at each scanner visit.
            let released: rustc_hash::FxHashSet<MessageId> =
                journal_del.iter().map(|(id, _)| *id).collect();
            for q in write {
                if released.contains(&q.msg.id) {
                    self.journal.unreleased(&q.msg.id);
                    let _ = self.deferred.insert(now, q.msg);
                } else {
                    self.mem.push_back(q);
                }
            }
            return Vec::new();
        };
        let positions: Vec<RecordPos> = write.iter().filter_map(|q| q.pos).collect();
        if self.cfg.journaled {
            if !positions.is_empty() || !journal_del.is_empty() {
                self.awaiting.push(Awaiting {
                    after: After::Backend(ticket),
                    positions,
                    journal_del,
                });
            }
            return Vec::new();
        }
        for p in positions {
            self.reads.settle(p);
        }
        self.delete_journal(journal_del)
    }

    /// The DELs to write for these released messages now (see `journal.rs`).
    fn delete_journal(&mut self, refs: Vec<JournalRef>) -> Vec<MessageId> {
        refs.into_iter()
            .filter(|r| self.journal.delete(*r))
            .map(|(id, _)| id)
            .collect()
    }

    // ---- delivery -------------------------------------------------------------------------

    /// Takes up to `max` messages from memory for consumer `client_id`: each one `keep`
    /// accepts (sampling) gets its attempts incremented, is handed to `emit` and goes in
    /// flight until `now + timeout`; the others are consumed and dropped, as the reference's
    /// sampling does. Asks for a backend read when the memory queue ran out before `max` and
    /// the backend holds more.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_memory(
        &mut self,
        client_id: u64,
        max: usize,
        now: Instant,
        timeout: Duration,
        keep: &mut dyn FnMut(&Message) -> Verdict,
        emit: &mut dyn FnMut(&Message),
    ) -> Taken {
        let mut n = 0;
        while n < max {
            let Some(Queued { msg, pos }) = self.mem.pop_front() else {
                break;
            };
            if self.deliver(msg, pos, client_id, now, timeout, keep, emit) {
                n += 1;
            }
        }
        let read = (n < max && self.spill).then_some(max - n);
        Taken { n, read }
    }

    /// Drops the oldest queued messages from memory until at least `k` of them and `bytes`
    /// of them ([`Message::record_len`]) are dropped (`overflow=drop_oldest`,
    /// crate::queue_settings), their records settled as a sampled-out message's are. Returns
    /// their IDs, the bytes dropped, and whether the backend may hold more when memory ran
    /// out first: the driver then reads the rest there and drops it (reported with
    /// [`ChannelState::take_backend`] and a keep that drops everything).
    pub(super) fn discard_front(&mut self, k: usize, bytes: u64) -> (Vec<MessageId>, u64, bool) {
        let mut ids = Vec::new();
        let mut dropped = 0u64;
        while ids.len() < k || dropped < bytes {
            let Some(Queued { msg, pos }) = self.mem.pop_front() else {
                return (ids, dropped, self.spill);
            };
            if let Some(p) = pos {
                self.reads.settle(p);
            }
            dropped += msg.record_len();
            ids.push(msg.id);
        }
        (ids, dropped, false)
    }

    /// The size of the memory queue from now on (a queue's `mem_queue_size`,
    /// crate::queue_settings): later puts and restores use it; what memory holds stays.
    pub(super) fn set_mem_queue_size(&mut self, n: usize) {
        self.cfg.mem_queue_size = n;
    }

    /// The backend read asked for by [`Taken::read`] returned `raw` (`asked` were asked for):
    /// the records are registered as unsettled and delivered as in
    /// [`ChannelState::take_memory`]. Returns how many were handed to `emit`, and how many
    /// records could not be decoded (dropped, settled).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn take_backend(
        &mut self,
        raw: Vec<(Bytes, RecordPos)>,
        asked: usize,
        backend_empty: bool,
        client_id: u64,
        now: Instant,
        timeout: Duration,
        keep: &mut dyn FnMut(&Message) -> Verdict,
        emit: &mut dyn FnMut(&Message),
    ) -> (usize, usize) {
        if let Some((_, first)) = raw.first() {
            self.reads.backend_set(*first);
        }
        let got = raw.len();
        let (mut n, mut bad) = (0, 0);
        for (payload, pos) in raw {
            self.reads.read(pos);
            match Message::decode(payload) {
                Ok(m) => {
                    if self.deliver(m, Some(pos), client_id, now, timeout, keep, emit) {
                        n += 1;
                    }
                }
                Err(_) => {
                    self.reads.settle(pos);
                    bad += 1;
                }
            }
        }
        if got < asked {
            self.end_spill_if_drained(backend_empty);
        }
        (n, bad)
    }

    /// One message to one consumer; false if it was dropped or held (`Verdict`).
    #[allow(clippy::too_many_arguments)]
    fn deliver(
        &mut self,
        mut msg: Message,
        pos: Option<RecordPos>,
        client_id: u64,
        now: Instant,
        timeout: Duration,
        keep: &mut dyn FnMut(&Message) -> Verdict,
        emit: &mut dyn FnMut(&Message),
    ) -> bool {
        match keep(&msg) {
            Verdict::Deliver => {}
            Verdict::Drop => {
                if let Some(p) = pos {
                    self.reads.settle(p);
                }
                return false;
            }
            Verdict::Hold => {
                if self
                    .in_flight
                    .insert(msg, pos, super::DEAD_LETTER_CLIENT, now, timeout)
                    .is_err()
                {
                    if let Some(p) = pos {
                        self.reads.settle(p);
                    }
                }
                return false;
            }
        }
        msg.attempts = msg.attempts.wrapping_add(1);
        emit(&msg);
        // A duplicate ID keeps the first entry and delivery proceeds, as the reference.
        if self
            .in_flight
            .insert(msg, pos, client_id, now, timeout)
            .is_err()
        {
            if let Some(p) = pos {
                self.reads.settle(p);
            }
        }
        true
    }

    /// Starts the in-flight lookups of a batch of FINs (see [`InFlightQueue::prefetch`]).
    pub(super) fn prefetch_finishes(&self, ids: &[MessageId]) {
        self.in_flight.prefetch(ids);
    }

    /// FIN: the message leaves flight and its record is settled. Returns its publish time.
    pub(super) fn finish(&mut self, client_id: u64, id: &MessageId) -> Result<i64, FinishError> {
        let f = self.in_flight.remove_owned(client_id, id)?;
        if let Some(p) = f.pos {
            self.reads.settle(p);
        }
        Ok(f.msg.timestamp)
    }

    /// REQ: back to the queue now (`delay` zero) or into the deferred set until `now + delay`.
    pub(super) fn requeue(
        &mut self,
        client_id: u64,
        id: &MessageId,
        delay: Duration,
        now: Now,
    ) -> Result<Requeued, RequeueError> {
        let f = self.in_flight.remove_owned(client_id, id)?;
        if self.closing {
            // Keep it in flight: the shutdown flush persists it.
            let _ =
                self.in_flight
                    .insert(f.msg, f.pos, f.client_id, f.delivered_at, Duration::ZERO);
            return Err(RequeueError::Exiting);
        }
        let (msg, pos) = (f.msg, f.pos);
        if delay.is_zero() {
            return Ok(Requeued::Restore(
                self.restore(vec![Queued { msg, pos }], Vec::new()),
            ));
        }
        let journal = self.cfg.journaled.then(|| {
            (
                now.wall.saturating_add(delay.as_nanos() as i64),
                msg.clone(),
            )
        });
        if self.deferred.insert(now.mono + delay, msg).is_err() {
            // The ID is already deferred (a duplicate): that copy stands for this one.
            if let Some(p) = pos {
                self.reads.settle(p);
            }
            return Ok(Requeued::Deferred { journal: None, pos });
        }
        match &journal {
            Some((_, m)) => {
                self.journal.add(m.id, true);
            }
            None => {
                // Not journaled: a deferred message lives in memory, as in the reference.
                if let Some(p) = pos {
                    self.reads.settle(p);
                }
            }
        }
        Ok(Requeued::Deferred { journal, pos })
    }

    /// The journal ADD of deferral `id` was written (`Some(ticket)`) or failed (`None`: the
    /// record stays unsettled, read again after a crash). Its record is settled once the
    /// entry is synced. Returns journal entries to delete now: the DEL of this very entry if
    /// the message was released and re-stored while the ADD was being written.
    pub(super) fn journal_added(
        &mut self,
        id: MessageId,
        ticket: Option<StoreTicket>,
        pos: Option<RecordPos>,
    ) -> Vec<MessageId> {
        let del_now = self.journal.added(id);
        if let (Some(t), Some(p)) = (ticket, pos) {
            self.awaiting.push(Awaiting {
                after: After::Journal(t),
                positions: vec![p],
                journal_del: Vec::new(),
            });
        }
        if del_now {
            vec![id]
        } else {
            Vec::new()
        }
    }

    /// A deferred message is dropped as if delivered and FINed (a returning origin's
    /// manifest lists it as taken over by a peer, docs/replication.md "Return"). Its record,
    /// if any, was settled when it was deferred, or is settled once its journal ADD is synced
    /// (as for any deferral); when journaled its entry is deleted as a released message's is
    /// once its queue copy is stored. Returns the journal entries to delete now, or `None`
    /// if `id` is not deferred.
    pub(super) fn drop_deferred(&mut self, id: &MessageId) -> Option<Vec<MessageId>> {
        let msg = self.deferred.remove(id)?;
        if !self.cfg.journaled {
            return Some(Vec::new());
        }
        let r = self.journal.released(&msg);
        Some(self.delete_journal(vec![r]))
    }

    /// TOUCH: the deadline moves to `now + timeout`, capped at delivery + max-msg-timeout.
    pub(super) fn touch(
        &mut self,
        client_id: u64,
        id: &MessageId,
        now: Instant,
        timeout: Duration,
    ) -> Result<(), FinishError> {
        self.in_flight
            .touch(client_id, id, now, timeout, self.cfg.max_msg_timeout)
    }

    // ---- ticks ------------------------------------------------------------------------------

    /// The timeout tick: every in-flight message whose deadline is `<= now` goes back to the
    /// queue. Returns their owners (one entry per message) and what to write.
    pub(super) fn expire(&mut self, now: Instant) -> Option<(Vec<u64>, Restore)> {
        let mut owners = Vec::new();
        let mut back = Vec::new();
        while let Some(f) = self.in_flight.pop_expired(now) {
            owners.push(f.client_id);
            back.push(Queued {
                msg: f.msg,
                pos: f.pos,
            });
        }
        if back.is_empty() {
            return None;
        }
        Some((owners, self.restore(back, Vec::new())))
    }

    /// The deferred-due tick: every deferred message due at `now` goes to the queue; when
    /// journaled, their entries are deleted once the queue's copy is stored.
    pub(super) fn release_due(&mut self, now: Instant) -> Option<Restore> {
        let mut due = Vec::new();
        while let Some(m) = self.deferred.pop_due(now) {
            due.push(Queued::new(m));
        }
        if due.is_empty() {
            return None;
        }
        let refs = if self.cfg.journaled {
            due.iter().map(|q| self.journal.released(&q.msg)).collect()
        } else {
            Vec::new()
        };
        Some(self.restore(due, refs))
    }
}
