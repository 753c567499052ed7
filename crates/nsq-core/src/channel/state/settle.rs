//! [`ChannelState`]'s durability events, administration and queries.

use std::time::Instant;

use nsq_protocol::MessageId;

use super::{After, Awaiting, ChannelState};
use crate::backend::{RecordPos, WriteTicket};
use crate::deferred::DeferredQueue;
use crate::deferred_store::StoreTicket;
use crate::inflight::InFlightQueue;
use crate::message::Message;

impl ChannelState {
    // ---- durability -------------------------------------------------------------------------

    /// The newest backend and journal tickets a settlement waits for, if any: the driver
    /// waits until both are synced, then reports with [`ChannelState::synced`].
    pub(in crate::channel) fn awaited(&self) -> (Option<WriteTicket>, Option<StoreTicket>) {
        let mut b = None;
        let mut j = None;
        for a in &self.awaiting {
            match a.after {
                After::Backend(t) => b = b.max(Some(t)),
                After::Journal(t) => j = j.max(Some(t)),
            }
        }
        (b, j)
    }

    /// The backend is synced up to `backend` and the journal up to `journal` (`ok`), or the
    /// sync covering them failed (`!ok`: those records stay unsettled and are read again
    /// after a crash). Returns journal entries to delete.
    pub(in crate::channel) fn synced(
        &mut self,
        ok: bool,
        backend: Option<WriteTicket>,
        journal: Option<StoreTicket>,
    ) -> Vec<MessageId> {
        let covered = |a: &Awaiting| match a.after {
            After::Backend(t) => backend.is_some_and(|b| t <= b),
            After::Journal(t) => journal.is_some_and(|j| t <= j),
        };
        let mut ok_refs = Vec::new();
        let mut i = 0;
        while i < self.awaiting.len() {
            if !covered(&self.awaiting[i]) {
                i += 1;
                continue;
            }
            let a = self.awaiting.swap_remove(i);
            if ok {
                for p in a.positions {
                    self.reads.settle(p);
                }
                ok_refs.extend(a.journal_del);
            }
        }
        self.delete_journal(ok_refs)
    }

    /// The watermark to hand to the backend if it changed since last handed (the effect the
    /// driver carries out after every event, before releasing its lock, so watermarks reach
    /// the backend in the order the state produced them).
    pub(in crate::channel) fn watermark_change(&mut self) -> Option<Option<RecordPos>> {
        self.reads.watermark_change()
    }

    // ---- administration ---------------------------------------------------------------------

    /// Discards everything queued, in flight and deferred (`/channel/empty`).
    pub(in crate::channel) fn clear(&mut self) {
        self.mem.clear();
        self.in_flight = InFlightQueue::new();
        self.deferred = DeferredQueue::new();
        self.spill = false;
        self.reads.clear();
        self.awaiting.clear();
        self.journal.clear();
    }

    /// Stops accepting puts and requeues (close, delete).
    pub(in crate::channel) fn set_closing(&mut self) {
        self.closing = true;
    }

    /// Shutdown: everything the channel holds, split into what is on disk nowhere else (the
    /// memory queue and in-flight messages that came from memory; deferred ones unless
    /// journaled) and what also has a copy on disk. Write the first, then the second, then
    /// report [`ChannelState::flushed`].
    pub(in crate::channel) fn drain_for_close(&mut self) -> (Vec<Message>, Vec<Message>) {
        self.closing = true;
        let mut volatile = Vec::new();
        let mut backed = Vec::new();
        for q in self.mem.take_all() {
            match q.pos {
                None => volatile.push(q.msg),
                Some(_) => backed.push(q.msg),
            }
        }
        for f in self.in_flight.drain() {
            match f.pos {
                None => volatile.push(f.msg),
                Some(_) => backed.push(f.msg),
            }
        }
        let deferred = self.deferred.drain().map(|(_, m)| m);
        if self.cfg.journaled {
            backed.extend(deferred);
        } else {
            volatile.extend(deferred);
        }
        (volatile, backed)
    }

    /// Everything read is stored again (the shutdown flush succeeded): nothing is unsettled.
    pub(in crate::channel) fn flushed(&mut self) {
        self.reads.clear();
        self.awaiting.clear();
    }

    // ---- queries ----------------------------------------------------------------------------

    /// What a shutdown would have to write that is on disk nowhere else (see
    /// [`ChannelState::drain_for_close`]).
    pub(in crate::channel) fn held_bytes(&self) -> u64 {
        let deferred = if self.cfg.journaled {
            0
        } else {
            self.deferred.bytes()
        };
        self.mem.bytes() + self.in_flight.volatile_bytes() + deferred
    }

    pub(in crate::channel) fn mem_len(&self) -> usize {
        self.mem.len()
    }

    /// The memory queue's messages' record sizes (a queue's `max_bytes`).
    pub(in crate::channel) fn mem_bytes(&self) -> u64 {
        self.mem.queued_bytes()
    }

    pub(in crate::channel) fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    pub(in crate::channel) fn deferred_len(&self) -> usize {
        self.deferred.len()
    }

    pub(in crate::channel) fn in_flight_ids(&self) -> Vec<MessageId> {
        self.in_flight.ids()
    }

    pub(in crate::channel) fn queued(&self) -> impl Iterator<Item = &Message> + '_ {
        self.mem.iter().map(|q| &q.msg)
    }

    /// The messages in flight (a replication catch-up's snapshot).
    pub(in crate::channel) fn in_flight_messages(&self) -> impl Iterator<Item = &Message> + '_ {
        self.in_flight.iter().map(|f| &f.msg)
    }

    /// The in-flight entries (peek).
    pub(in crate::channel) fn in_flight_entries(
        &self,
    ) -> impl Iterator<Item = &crate::inflight::InFlightEntry> + '_ {
        self.in_flight.iter()
    }

    /// The deferred messages with their due times (a replication catch-up's snapshot).
    pub(in crate::channel) fn deferred_messages(
        &self,
    ) -> impl Iterator<Item = (Instant, &Message)> + '_ {
        self.deferred.iter()
    }

    /// Backend writes decided and not yet reported: their messages are in none of the
    /// queues meanwhile.
    pub(in crate::channel) fn writes_outstanding(&self) -> bool {
        self.writing > 0
    }

    /// The attempts of message `id` in flight (what a streamed REQ carries).
    pub(in crate::channel) fn in_flight_attempts(&self, id: &MessageId) -> Option<u16> {
        self.in_flight.get(id).map(|f| f.msg.attempts)
    }

    /// The consumer holding message `id` in flight.
    pub(in crate::channel) fn in_flight_owner(&self, id: &MessageId) -> Option<u64> {
        self.in_flight.get(id).map(|f| f.client_id)
    }

    /// Whether message `id` is deferred.
    #[cfg(test)]
    pub(in crate::channel) fn is_deferred(&self, id: &MessageId) -> bool {
        self.deferred.contains(id)
    }

    /// What a rewritten journal must hold, with due times: the deferred messages, and the
    /// released ones whose queue copy is not stored yet (due at once, should they be replayed).
    pub(in crate::channel) fn journal_live(&self, now: Instant) -> Vec<(Instant, Message)> {
        let mut live: Vec<(Instant, Message)> =
            self.deferred.iter().map(|(d, m)| (d, m.clone())).collect();
        live.extend(self.journal.released_messages().map(|m| (now, m.clone())));
        live
    }

    #[cfg(test)]
    pub(in crate::channel) fn unsettled(&self) -> usize {
        self.reads.unsettled()
    }

    #[cfg(test)]
    pub(in crate::channel) fn in_flight_of(&self, client_id: u64) -> Vec<MessageId> {
        self.in_flight
            .iter()
            .filter(|f| f.client_id == client_id)
            .map(|f| f.msg.id)
            .collect()
    }
}
