//! Consumers joining and leaving, administration (pause, empty, delete), shutdown, stats.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use nsq_protocol::replication::AdminOp;
use nsq_protocol::MessageId;

use super::{Channel, ChannelStats, Consumer, SubscribeError};
use crate::backend::BackendError;
use crate::e2e::E2eLatency;
use crate::message::Message;
use crate::replicator::Replicator;

impl Channel {
    // ---- consumers --------------------------------------------------------------------------

    /// SUB: adds a consumer, enforcing `--max-channel-consumers`.
    pub fn add_consumer(&self, c: Arc<dyn Consumer>) -> Result<(), SubscribeError> {
        let mut g = self.lock();
        if self.is_exiting() {
            return Err(SubscribeError::Exiting);
        }
        if g.consumers.iter().any(|x| x.id() == c.id()) {
            return Ok(());
        }
        let max = self.opts.max_channel_consumers;
        if max > 0 && g.consumers.len() >= max {
            return Err(SubscribeError::TooManyConsumers(max));
        }
        g.consumers.push(c);
        Ok(())
    }

    /// A consumer's connection ended. Its in-flight messages stay until they time out. An
    /// ephemeral channel left without consumers deletes itself.
    pub fn remove_consumer(&self, client_id: u64) {
        let now_empty = {
            let mut g = self.lock();
            let before = g.consumers.len();
            g.consumers.retain(|c| c.id() != client_id);
            before != g.consumers.len() && g.consumers.is_empty()
        };
        if now_empty && self.ephemeral && !self.deleting.swap(true, Ordering::AcqRel) {
            (self.parent.delete)(self);
        }
    }

    pub fn consumer_count(&self) -> usize {
        self.lock().consumers.len()
    }

    // ---- administration ---------------------------------------------------------------------

    pub fn pause(&self) {
        self.paused.store(true, Ordering::Release);
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Pause, &self.topic_name, &self.name);
        }
        self.notify.notify_waiters();
    }

    pub fn unpause(&self) {
        self.paused.store(false, Ordering::Release);
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Unpause, &self.topic_name, &self.name);
        }
        self.notify.notify_waiters();
    }

    /// Discards everything queued, in flight and deferred; consumers' in-flight counts reset.
    pub fn empty(&self) -> Result<(), BackendError> {
        match &self.repl {
            Some(r) => {
                // No batch of the topic between it and this channel meanwhile: what the
                // replicas drop is exactly what was cleared.
                let _g = self.parent.pump_lock.write();
                self.empty_inner(Some(r))
            }
            None => self.empty_inner(None),
        }
    }

    fn empty_inner(&self, repl: Option<&Arc<dyn Replicator>>) -> Result<(), BackendError> {
        let consumers = {
            let mut g = self.lock();
            g.state.clear();
            if let Some(r) = self.returning() {
                // Nothing of it is left to skip (replication's Return, `returning.rs`).
                r.forget_channel(&self.topic_name, &self.name);
            }
            if let Some(r) = repl {
                r.admin(AdminOp::Empty, &self.topic_name, &self.name);
            }
            g.consumers.clone()
        };
        for c in consumers {
            c.on_empty();
        }
        if let Some(store) = &self.store {
            if let Err(e) = store.compact(std::iter::empty()) {
                tracing::error!(channel = %self.name, "failed to empty deferred store - {e}");
            }
        }
        self.backend.empty()
    }

    /// Stops the channel: no more puts, requeues or subscriptions; consumers are closed.
    fn stop(&self) {
        self.exiting.store(true, Ordering::Release);
        let consumers = {
            let mut g = self.lock();
            g.state.set_closing();
            std::mem::take(&mut g.consumers)
        };
        for c in consumers {
            c.close();
        }
    }

    /// Deletion: stop, close consumers, discard everything, remove the backend's files.
    pub(crate) fn delete(&self) {
        self.stop();
        // The deletion itself is streamed by the topic.
        if let Err(e) = self.empty_inner(None) {
            tracing::error!(channel = %self.name, "failed to empty channel backend - {e}");
        }
        if let Some(store) = &self.store {
            if let Err(e) = store.remove() {
                tracing::error!(channel = %self.name, "failed to remove deferred store - {e}");
            }
        }
        if let Err(e) = self.backend.delete() {
            tracing::error!(channel = %self.name, "failed to delete channel backend - {e}");
        }
        self.notify.notify_waiters();
    }

    /// Shutdown: close consumers, then persist memory queue, in-flight and deferred messages
    /// to the backend and close it — the data dir is then exactly what the reference leaves
    /// (no watermark, no deferred journal).
    ///
    /// Two writes: first what is held only in memory (the reserve guarantees its room, see
    /// [`crate::reserve`]), then what also has a copy on disk (messages read from the backend,
    /// journaled deferred ones). If the second fails (a full disk), the watermark and the
    /// journal stay, so those are read again after the restart and nothing is lost.
    pub(crate) fn close(&self) -> Result<(), BackendError> {
        self.stop();
        let (volatile, backed) = self.lock().state.drain_for_close();
        let write = |msgs: &[Message]| -> Result<(), BackendError> {
            if msgs.is_empty() {
                return Ok(());
            }
            self.backend
                .put_batch(msgs.len(), &mut |i, out| msgs[i].encode_into(out))
                .map(drop)
        };
        let first = write(&volatile);
        if let Err(e) = &first {
            tracing::error!(channel = %self.name, "failed to flush channel to backend - {e}");
        }
        let second = write(&backed);
        match &second {
            Ok(()) => self.lock().state.flushed(),
            Err(e) => {
                tracing::error!(channel = %self.name, "failed to flush messages read from disk back to it, they stay where they were (read again after the restart) - {e}");
            }
        }
        self.backend.close()?;
        if second.is_ok() {
            if let Some(store) = &self.store {
                store.remove()?;
            }
        }
        first.and(second)
    }

    // ---- stats ------------------------------------------------------------------------------

    /// This channel's own queue settings (crate::queue_settings).
    pub fn settings(&self) -> crate::queue_settings::QueueSettings {
        self.settings.read().clone()
    }

    /// Replaces this channel's own settings; its topic's `refresh_settings` must follow. A
    /// change is replicated (ADMIN op 6) as the channel's pause is.
    pub fn set_settings(&self, s: crate::queue_settings::QueueSettings) {
        let pairs = s.to_pairs();
        let changed = std::mem::replace(&mut *self.settings.write(), s).to_pairs() != pairs;
        if let (Some(r), true) = (&self.repl, changed) {
            r.settings(&self.topic_name, &self.name, pairs);
        }
    }

    /// The effective TTL (see `Topic::refresh_settings`).
    pub(crate) fn set_ttl(&self, ttl: Option<std::time::Duration>) {
        let ns = ttl.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.ttl_ns.store(ns, Ordering::Release);
    }

    /// The effective `max_attempts` (see `Topic::refresh_settings`).
    pub(crate) fn set_max_attempts(&self, n: Option<u16>) {
        self.max_attempts
            .store(n.map_or(0, u32::from), Ordering::Release);
    }

    /// The effective dead-letter topic (see `Topic::refresh_settings`).
    pub(crate) fn set_dead_letter_topic(&self, t: Option<String>) {
        *self.dead_letter_topic.write() = t;
    }

    /// The effective dead-letter topic, if any.
    pub fn dead_letter_topic(&self) -> Option<String> {
        self.dead_letter_topic.read().clone()
    }

    /// The effective `max_attempts`, if any.
    pub fn max_attempts(&self) -> Option<u16> {
        u16::try_from(self.max_attempts.load(Ordering::Acquire))
            .ok()
            .filter(|&n| n > 0)
    }

    /// The effective TTL, if any.
    pub fn ttl(&self) -> Option<std::time::Duration> {
        match self.ttl_ns.load(Ordering::Acquire) {
            0 => None,
            ns => Some(std::time::Duration::from_nanos(ns)),
        }
    }

    pub fn depth(&self) -> i64 {
        self.lock().state.mem_len() as i64 + self.backend.depth()
    }

    pub fn stats(&self) -> ChannelStats {
        let (mem, in_flight, deferred, consumers) = {
            let g = self.lock();
            (
                g.state.mem_len(),
                g.state.in_flight_len(),
                g.state.deferred_len(),
                g.consumers.clone(),
            )
        };
        let backend_depth = self.backend.depth();
        ChannelStats {
            name: self.name.clone(),
            depth: mem as i64 + backend_depth,
            backend_depth,
            in_flight_count: in_flight,
            deferred_count: deferred,
            message_count: self.counters.message_count.load(Ordering::Relaxed),
            requeue_count: self.counters.requeue_count.load(Ordering::Relaxed),
            timeout_count: self.counters.timeout_count.load(Ordering::Relaxed),
            expired_count: self.counters.expired_count.load(Ordering::Relaxed),
            dead_lettered_count: self.counters.dead_lettered_count.load(Ordering::Relaxed),
            dropped_count: self.counters.dropped_count.load(Ordering::Relaxed),
            paused: self.is_paused(),
            consumers,
        }
    }

    /// The channel's e2e processing-latency window.
    pub fn e2e(&self) -> &E2eLatency {
        &self.e2e
    }

    /// IDs currently in flight (test helper and debugging aid).
    pub fn in_flight_ids(&self) -> Vec<MessageId> {
        self.lock().state.in_flight_ids()
    }

    #[doc(hidden)]
    pub fn peek_bodies(&self) -> Vec<Bytes> {
        self.lock().state.queued().map(|m| m.body.clone()).collect()
    }
}
