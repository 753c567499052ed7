//! Messages entering a channel: fan-out from the topic (`receive`), puts, re-stores of
//! messages that already belong to it, and the durability event that settles them.

use std::sync::atomic::Ordering;

use nsq_protocol::MessageId;
use tokio::time::Instant;

use super::state::{Put, Queued, Restore};
use super::{now, Channel};
use crate::backend::{BackendError, WriteTicket};
use crate::memqueue::Weigh;
use crate::message::Message;
use crate::receipt::PutReceipt;

impl Channel {
    // ---- entering the channel ----------------------------------------------------------

    /// Messages fanned out by the topic: counted in `message_count`; deferred ones go to the
    /// deferred set (the defer clock starts now; journaled first when there is a store), the
    /// rest are queued. `Ok` means every message is stored (memory or backend/store write
    /// succeeded); with `Options::durable` the writes to wait for are added to `receipt`.
    pub(crate) fn receive(
        &self,
        msgs: &[Message],
        receipt: &mut PutReceipt,
    ) -> Result<(), BackendError> {
        if msgs.iter().all(|m| m.defer_ms == 0) {
            let bytes = msgs.iter().map(Message::record_len).sum();
            self.put_queued(msgs.iter().cloned().map(Queued::new), bytes, Some(receipt))?;
            self.count(msgs.len());
            return Ok(());
        }
        self.receive_deferred(msgs, receipt)
    }

    /// [`Channel::receive`] for the topic's last channel, which may keep the topic's copies
    /// instead of cloning them (saves a reference-count round trip per message body).
    pub(crate) fn receive_owned(
        &self,
        msgs: Vec<Message>,
        receipt: &mut PutReceipt,
    ) -> Result<(), BackendError> {
        if msgs.iter().all(|m| m.defer_ms == 0) {
            let n = msgs.len();
            let bytes = msgs.iter().map(Message::record_len).sum();
            self.put_queued(msgs.into_iter().map(Queued::new), bytes, Some(receipt))?;
            self.count(n);
            return Ok(());
        }
        self.receive_deferred(&msgs, receipt)
    }

    fn receive_deferred(
        &self,
        msgs: &[Message],
        receipt: &mut PutReceipt,
    ) -> Result<(), BackendError> {
        let now = now();
        let mut immediate = Vec::new();
        let mut later = Vec::new();
        for m in msgs {
            if m.defer_ms == 0 {
                immediate.push(Queued::new(m.clone()));
            } else {
                let mut m = m.clone();
                let defer = m.defer();
                m.defer_ms = 0;
                let due_wall = now.wall.saturating_add(defer.as_nanos() as i64);
                later.push((now.mono + defer, due_wall, m));
            }
        }
        if let Some(store) = &self.store {
            // Journal first: a message enters the deferred set only once its ADD is written.
            let t = store.add(later.iter().map(|(_, w, m)| (*w, m)));
            self.health.record(&t);
            let t = t.map_err(|e| {
                tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to write deferred message - {e}");
                BackendError::Io(e)
            })?;
            if self.opts.durable {
                receipt.store(store, t);
            }
        }
        let bytes = immediate.iter().map(Weigh::weight).sum();
        if let Err(e) = self.put_queued(immediate.into_iter(), bytes, Some(receipt)) {
            if let Some(store) = &self.store {
                // Refused as a whole: take the journal entries back (best effort; should
                // they survive a crash, the message was at least published, if refused).
                let _ = store.del(later.iter().map(|(_, _, m)| m.id));
            }
            return Err(e);
        }
        {
            let mut g = self.lock();
            for (due, _, m) in later {
                g.state.defer_new(due, m);
            }
        }
        self.count(msgs.len());
        Ok(())
    }

    fn count(&self, n: usize) {
        self.counters
            .message_count
            .fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Appends messages to the channel queue: memory while there is room (and nothing older
    /// waits on disk), then the backend. Does not touch `message_count`.
    pub fn put(&self, msgs: impl IntoIterator<Item = Message>) -> Result<(), BackendError> {
        let msgs: Vec<Queued> = msgs.into_iter().map(Queued::new).collect();
        let bytes = msgs.iter().map(Weigh::weight).sum();
        self.put_queued(msgs.into_iter(), bytes, None)
    }

    /// What a shutdown would have to write for this channel that is on disk nowhere else (see
    /// [`crate::reserve`]).
    pub(crate) fn held_bytes(&self) -> u64 {
        if self.reserve.is_none() {
            return 0;
        }
        self.lock().state.held_bytes()
    }

    /// The put event and its effect (see [`ChannelState::put`]).
    fn put_queued(
        &self,
        msgs: impl ExactSizeIterator<Item = Queued>,
        bytes: u64,
        receipt: Option<&mut PutReceipt>,
    ) -> Result<(), BackendError> {
        if msgs.len() == 0 {
            return Ok(());
        }
        let reserve = self.reserve.as_deref();
        let mut admit = |b: u64| reserve.is_none_or(|r| r.admit(b));
        let put = self.lock().state.put(msgs, bytes, &mut admit);
        match put {
            Put::Memory => {}
            Put::Exiting => return Err(BackendError::Exiting),
            Put::Write { mem, disk } => {
                let written = self.write_backend(&disk);
                {
                    let mut g = self.lock();
                    let empty = written.is_err() && self.backend.depth() <= 0;
                    g.state.put_done(mem, written.is_ok(), empty);
                }
                self.write_completed();
                let t = written?;
                if let (Some(receipt), true) = (receipt, self.opts.durable) {
                    receipt.backend(&self.backend, t);
                }
            }
        }
        self.notify.notify_waiters();
        self.trim_to_bound();
        Ok(())
    }

    fn write_backend(&self, msgs: &[Queued]) -> Result<WriteTicket, BackendError> {
        let r = self
            .backend
            .put_batch(msgs.len(), &mut |i, out| msgs[i].msg.encode_into(out));
        if !self.ephemeral {
            self.health.record(&r);
        }
        if let Err(e) = &r {
            tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to write message to backend - {e}");
        }
        r
    }

    /// Carries out a [`Restore`]: the backend write, then its report; journal deletions.
    pub(super) fn restore(&self, r: Restore) {
        if !r.write.is_empty() {
            let written = self.write_backend(&r.write).ok();
            let now = Instant::now().into_std();
            let del = self
                .lock()
                .state
                .restore_done(r.write, written, r.journal_del, now);
            self.write_completed();
            self.journal_del(del);
        }
        self.notify.notify_waiters();
    }

    pub(super) fn journal_del(&self, ids: Vec<MessageId>) {
        if let (Some(store), false) = (&self.store, ids.is_empty()) {
            if let Err(e) = store.del(ids) {
                // The entries come back after a restart (a duplicate), never lost.
                tracing::warn!(channel = %self.name, topic = %self.topic_name, "failed to journal deferred message removal - {e}");
            }
        }
    }

    /// The durability event: waits until the writes that settlements are waiting for are
    /// synced (starting those syncs at once), then settles their records. Called by the queue
    /// scanner after each visit; returns whether anything was waited for.
    pub async fn settle_durable(&self) -> bool {
        let (backend, journal) = self.lock().state.awaited();
        if backend.is_none() && journal.is_none() {
            return false;
        }
        let mut receipt = PutReceipt::default();
        if let Some(t) = backend {
            receipt.backend(&self.backend, t);
        }
        if let (Some(t), Some(store)) = (journal, &self.store) {
            receipt.store(store, t);
        }
        let r = receipt.durable().await;
        if let Err(e) = &r {
            tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to sync re-stored messages, they stay unsettled - {e}");
        }
        let del = self.lock().state.synced(r.is_ok(), backend, journal);
        self.journal_del(del);
        true
    }
}
