//! Delivery and what consumers do with it: take (an RDY window), FIN, REQ, TOUCH, and the
//! queue scanner's timeout and deferred-due ticks.

use std::sync::atomic::Ordering;
use std::time::Duration;

use nsq_protocol::replication::ReqEntry;
use nsq_protocol::MessageId;
use rand::Rng;
use tokio::time::Instant;

use super::skips::{Returning, TakeSkips};
use super::state::{Requeued, Verdict};
use super::{now, Channel, FinishError, RequeueError};
use crate::message::{now_nanos, Message};
use crate::topic::dead_letters::DeadLetterOrigin;

/// How many backend reads one take makes while every record it reads is dropped (taken
/// over by a peer, or sampled out) — each read asks for what is still free of the window.
const DROPPED_READ_ROUNDS: usize = 16;

impl Channel {
    // ---- delivery -------------------------------------------------------------------------

    /// Takes up to `max` messages for delivery to consumer `client_id`, records them in flight
    /// (attempts incremented, deadline now + `msg_timeout`) and appends them to `out`.
    ///
    /// With `sample_rate` in 1..=99 each message is kept with probability ~(rate+1)%; the others
    /// are consumed and dropped, as the reference does. Returns how many were appended.
    pub fn take(
        &self,
        client_id: u64,
        max: usize,
        msg_timeout: Duration,
        sample_rate: i32,
        out: &mut Vec<Message>,
    ) -> usize {
        self.take_with(client_id, max, msg_timeout, sample_rate, &mut |m| {
            out.push(m.clone())
        })
    }

    /// [`Channel::take`] handing each taken message to `emit` (under the channel lock: it
    /// must be cheap, e.g. encoding the frame into the connection's output buffer) instead of
    /// cloning it into a vector: a delivery then moves the message into flight without a
    /// reference-count round trip on its body.
    pub fn take_with(
        &self,
        client_id: u64,
        max: usize,
        msg_timeout: Duration,
        sample_rate: i32,
        emit: &mut dyn FnMut(&Message),
    ) -> usize {
        if max == 0 || self.is_paused() || self.is_exiting() {
            return 0;
        }
        let ret = self.returning();
        if ret.is_some_and(|r| r.is_holding()) {
            // A returning origin waits for its peers' manifests (`returning.rs`).
            return 0;
        }
        if self.repl.is_some() && ret.is_some_and(|r| r.is_fenced()) {
            // A fenced origin: a peer may be taking these messages over (`returning.rs`).
            return 0;
        }
        let now = Instant::now().into_std();
        let mut rng = (sample_rate > 0).then(rand::thread_rng);
        // A TTL (crate::queue_settings): a message older than it when it would be delivered
        // is dropped as a sampled-out one is — consumed, its record settled — and counted.
        let ttl = i64::try_from(self.ttl_ns.load(Ordering::Acquire)).unwrap_or(i64::MAX);
        let wall = if ttl > 0 { now_nanos() } else { 0 };
        let mut expired: Vec<MessageId> = Vec::new();
        // `max_attempts` (crate::queue_settings): a message delivered that many times that
        // comes back (requeued, timed out) is not delivered again: dropped likewise, counted.
        let max_attempts = self.max_attempts.load(Ordering::Acquire);
        let mut dead: Vec<(MessageId, u16)> = Vec::new();
        // With a dead-letter topic such a message — and an expired one — is held instead
        // (`Verdict::Hold`), and published there once the lock is released.
        let dead_letter = if max_attempts > 0 || ttl > 0 {
            self.dead_letter_topic.read().clone()
        } else {
            None
        };
        // Held messages, each with `Some(attempts)` at its max attempts, `None` expired.
        let mut held: Vec<(Message, Option<u16>)> = Vec::new();
        let mut g = self.lock();
        // After the channel lock (the order `apply_skips` takes them in).
        let mut skips = ret.and_then(|r| TakeSkips::new(r, &self.topic_name, &self.name));
        // A message taken over by a peer is dropped as a sampled-out one is: consumed, its
        // record settled, not delivered.
        let mut keep = |m: &Message| {
            if skips.as_mut().is_some_and(|s| s.skip(m)) {
                return Verdict::Drop;
            }
            if ttl > 0 && wall.saturating_sub(m.timestamp) > ttl {
                if dead_letter.is_some() {
                    held.push((m.clone(), None));
                    return Verdict::Hold;
                }
                expired.push(m.id);
                return Verdict::Drop;
            }
            if max_attempts > 0 && u32::from(m.attempts) >= max_attempts {
                if dead_letter.is_some() {
                    held.push((m.clone(), Some(m.attempts)));
                    return Verdict::Hold;
                }
                dead.push((m.id, m.attempts));
                return Verdict::Drop;
            }
            match rng.as_mut().map(|r| r.gen_range(0..100) <= sample_rate) {
                Some(false) => Verdict::Drop,
                _ => Verdict::Deliver,
            }
        };
        let taken = g
            .state
            .take_memory(client_id, max, now, msg_timeout, &mut keep, emit);
        let Some(mut asked) = taken.read else {
            self.expired(&expired);
            self.dead_lettered(&dead, max_attempts);
            self.skipped(skips, ret);
            drop(g);
            self.to_dead_letter(dead_letter, held);
            return taken.n;
        };
        let (mut n, mut bad) = (taken.n, 0);
        // Messages dropped by `keep` (taken over by a peer, sampled out) leave room in the
        // consumer's window: read on, as the reference's messagePump goes on to the next
        // message after a sampled-out one (nsqd/protocol_v2.go, `messagePump`), for a
        // bounded number of reads under the lock. Without it a run of dropped records
        // stalled delivery until the next wake-up.
        let mut more = false;
        for round in 0..DROPPED_READ_ROUNDS {
            // Read under the lock (see `state`'s module docs: the watermark needs it).
            let mut raw = Vec::with_capacity(asked);
            self.backend.read_batch_pos(asked, &mut raw);
            let got = raw.len();
            let empty = got < asked && self.backend.depth() <= 0;
            let (kept, undecodable) = g.state.take_backend(
                raw,
                asked,
                empty,
                client_id,
                now,
                msg_timeout,
                &mut keep,
                emit,
            );
            n += kept;
            bad += undecodable;
            let dropped = got - kept - undecodable;
            if dropped == 0 || got < asked {
                break;
            }
            asked -= kept;
            more = round + 1 == DROPPED_READ_ROUNDS;
        }
        self.expired(&expired);
        self.dead_lettered(&dead, max_attempts);
        self.skipped(skips, ret);
        drop(g);
        self.to_dead_letter(dead_letter, held);
        if more {
            // Still only dropped records after the last read: the consumers try again.
            self.wake_consumers();
        }
        if bad > 0 {
            tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to decode {bad} messages read from the backend, dropped");
        }
        n
    }

    /// After a take under the channel lock: the messages it dropped as expired are counted
    /// and streamed as FINed (the replicas drop them too).
    fn expired(&self, ids: &[MessageId]) {
        if ids.is_empty() {
            return;
        }
        self.counters
            .expired_count
            .fetch_add(ids.len() as u64, Ordering::Relaxed);
        if let Some(r) = &self.repl {
            r.finish(&self.topic_name, &self.name, ids);
        }
    }

    /// After a take, outside the channel lock: the held messages (at their max attempts or
    /// expired, with a dead-letter topic) are published there — same bodies, new IDs — and FINed
    /// once that publish is stored (synced when the node is durable). Until then they are in
    /// flight for [`super::DEAD_LETTER_CLIENT`]: a crash brings them back (a duplicate in the
    /// dead-letter topic at worst, never a loss), a publish that fails leaves them to time
    /// out and be held again.
    fn to_dead_letter(&self, topic: Option<String>, held: Vec<(Message, Option<u16>)>) {
        let Some(topic) = topic.filter(|_| !held.is_empty()) else {
            return;
        };
        let ids: Vec<(MessageId, Option<u16>)> = held.iter().map(|(m, a)| (m.id, *a)).collect();
        let items = held
            .into_iter()
            .map(|(m, a)| {
                let origin = DeadLetterOrigin {
                    id: m.id,
                    topic: self.topic_name.clone(),
                    channel: self.name.clone(),
                    attempts: a.unwrap_or(m.attempts),
                    expired: a.is_none(),
                };
                (m.body, origin)
            })
            .collect();
        let receipt = match (self.parent.publish)(&topic, items) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(
                    "CHANNEL({}:{}): failed to publish {} messages to dead-letter topic {topic} - {e} (held until they time out, then tried again)",
                    self.topic_name,
                    self.name,
                    ids.len()
                );
                return;
            }
        };
        let me = self.me.clone();
        let done = move |stored: bool| {
            if let Some(ch) = me.upgrade() {
                ch.dead_letter_stored(&topic, &ids, stored);
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) if !receipt.is_empty() => {
                rt.spawn(async move {
                    let stored = receipt.durable().await.is_ok();
                    done(stored);
                });
            }
            _ => done(true),
        }
    }

    /// A dead-letter publish is stored (or failed to sync: `stored` false): its messages are
    /// FINed here, counted and logged; those no longer held (timed out meanwhile) are left.
    fn dead_letter_stored(&self, topic: &str, ids: &[(MessageId, Option<u16>)], stored: bool) {
        if !stored {
            tracing::warn!(
                "CHANNEL({}:{}): dead-letter topic {topic} failed to store {} messages (held until they time out, then tried again)",
                self.topic_name,
                self.name,
                ids.len()
            );
            return;
        }
        let mut done = Vec::new();
        let mut finished = Vec::with_capacity(ids.len());
        {
            let mut g = self.lock();
            for (id, _) in ids {
                let ok = g.state.finish(super::DEAD_LETTER_CLIENT, id).is_ok();
                if ok {
                    done.push(*id);
                }
                finished.push(ok);
            }
            if let (Some(r), false) = (&self.repl, done.is_empty()) {
                r.finish(&self.topic_name, &self.name, &done);
            }
        }
        for ((id, attempts), _) in ids.iter().zip(finished).filter(|(_, ok)| *ok) {
            let id_text = String::from_utf8_lossy(id.as_bytes());
            match attempts {
                Some(attempts) => {
                    self.counters
                        .dead_lettered_count
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        "CHANNEL({}:{}): moved message {id_text} to dead-letter topic {topic} after {attempts} attempts",
                        self.topic_name,
                        self.name
                    );
                }
                None => {
                    self.counters.expired_count.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        "CHANNEL({}:{}): moved expired message {id_text} to dead-letter topic {topic}",
                        self.topic_name,
                        self.name
                    );
                }
            }
        }
    }

    /// After a take under the channel lock: the messages it dropped at their max attempts
    /// are counted, logged once each and streamed as FINed.
    fn dead_lettered(&self, dead: &[(MessageId, u16)], max: u32) {
        if dead.is_empty() {
            return;
        }
        self.counters
            .dead_lettered_count
            .fetch_add(dead.len() as u64, Ordering::Relaxed);
        for (id, attempts) in dead {
            tracing::info!(
                "CHANNEL({}:{}): dropping message {} after {attempts} attempts (max_attempts {max})",
                self.topic_name,
                self.name,
                String::from_utf8_lossy(id.as_bytes())
            );
        }
        if let Some(r) = &self.repl {
            let ids: Vec<MessageId> = dead.iter().map(|(id, _)| *id).collect();
            r.finish(&self.topic_name, &self.name, &ids);
        }
    }

    /// After a take under the channel lock: the messages it dropped as taken over are
    /// streamed as FINed (the replicas of this epoch drop them too).
    fn skipped(&self, skips: Option<TakeSkips<'_>>, ret: Option<&std::sync::Arc<Returning>>) {
        let (Some(s), Some(ret)) = (skips, ret) else {
            return;
        };
        let dropped = s.finish(ret);
        if let (Some(r), false) = (&self.repl, dropped.is_empty()) {
            r.finish(&self.topic_name, &self.name, &dropped);
        }
    }

    /// FIN: removes the message from flight and settles its record.
    pub fn finish(&self, client_id: u64, id: &MessageId) -> Result<(), FinishError> {
        let ts = {
            let mut g = self.lock();
            let ts = g.state.finish(client_id, id)?;
            if let Some(r) = &self.repl {
                // Under the lock: ordered with a REQ or redelivery of the same message.
                r.finish(&self.topic_name, &self.name, std::slice::from_ref(id));
            }
            ts
        };
        if self.e2e.enabled() {
            self.e2e.record(now_nanos() - ts);
        }
        Ok(())
    }

    /// FIN of several messages under one lock acquisition: what a connection's reader does with
    /// every FIN parsed from one socket read (one lock round instead of one per FIN). Behaves
    /// exactly like [`Channel::finish`] called for each ID in order; the failures are appended
    /// to `failed` in order. Returns how many succeeded.
    pub fn finish_many(
        &self,
        client_id: u64,
        ids: &[MessageId],
        failed: &mut Vec<(MessageId, FinishError)>,
    ) -> usize {
        let e2e = self.e2e.enabled();
        // Publish timestamps of the finished messages, recorded after the lock is released.
        let mut stamps = Vec::new();
        // Replicated: the finished IDs, streamed as one FIN frame (allocated only then).
        let mut done = Vec::new();
        let mut ok = 0;
        {
            let mut g = self.lock();
            if ids.len() > 1 {
                g.state.prefetch_finishes(ids);
            }
            for id in ids {
                match g.state.finish(client_id, id) {
                    Ok(ts) => {
                        ok += 1;
                        if e2e {
                            stamps.push(ts);
                        }
                        if self.repl.is_some() {
                            done.push(*id);
                        }
                    }
                    Err(e) => failed.push((*id, e)),
                }
            }
            if let (Some(r), false) = (&self.repl, done.is_empty()) {
                r.finish(&self.topic_name, &self.name, &done);
            }
        }
        if e2e {
            let now = now_nanos();
            for ts in stamps {
                self.e2e.record(now - ts);
            }
        }
        ok
    }

    /// REQ: back to the queue now (`delay` zero) or into the deferred set.
    pub fn requeue(
        &self,
        client_id: u64,
        id: &MessageId,
        delay: Duration,
    ) -> Result<(), RequeueError> {
        let r = {
            let mut g = self.lock();
            let now = now();
            let attempts = if self.repl.is_some() {
                g.state.in_flight_attempts(id)
            } else {
                None
            };
            let r = g.state.requeue(client_id, id, delay, now)?;
            if let (Some(r), Some(attempts)) = (&self.repl, attempts) {
                // Under the lock: before another consumer can get the message again.
                let due = if delay.is_zero() {
                    0
                } else {
                    now.wall.saturating_add(delay.as_nanos() as i64)
                };
                let entry = ReqEntry {
                    id: *id,
                    due,
                    attempts,
                };
                r.requeue(&self.topic_name, &self.name, entry);
            }
            r
        };
        self.counters.requeue_count.fetch_add(1, Ordering::Relaxed);
        match r {
            // A failed backend write keeps the message in memory; the REQ itself succeeded
            // (the message left flight), as in the reference.
            Requeued::Restore(r) => self.restore(r),
            Requeued::Deferred {
                journal: Some((due_wall, msg)),
                pos,
            } => {
                let store = self.store.as_ref().expect("journaled means a store");
                let t = match store.add([(due_wall, &msg)]) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        // Its record stays unsettled: after a crash it is read again.
                        tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to journal deferred message - {e}");
                        None
                    }
                };
                let del = self.lock().state.journal_added(msg.id, t, pos);
                self.journal_del(del);
            }
            Requeued::Deferred { journal: None, .. } => {}
        }
        Ok(())
    }

    /// TOUCH: pushes the deadline to now + `msg_timeout`, capped at delivery + max-msg-timeout.
    pub fn touch(
        &self,
        client_id: u64,
        id: &MessageId,
        msg_timeout: Duration,
    ) -> Result<(), FinishError> {
        let now = Instant::now().into_std();
        self.lock().state.touch(client_id, id, now, msg_timeout)
    }

    // ---- the queue scanner's work -----------------------------------------------------------

    /// Times out every in-flight message whose deadline is `<= now`; returns whether any did.
    pub fn process_in_flight(&self, now: Instant) -> bool {
        let (restore, consumers, n) = {
            let mut g = self.lock();
            let Some((owners, r)) = g.state.expire(now.into_std()) else {
                return false;
            };
            let consumers: Vec<_> = owners
                .iter()
                .filter_map(|id| g.consumers.iter().find(|c| c.id() == *id).cloned())
                .collect();
            (r, consumers, owners.len())
        };
        self.counters
            .timeout_count
            .fetch_add(n as u64, Ordering::Relaxed);
        self.restore(restore);
        for c in consumers {
            c.on_timeout();
        }
        true
    }

    /// Moves every deferred message due at `now` to the queue; returns whether any was.
    /// Journaled, their journal entries are deleted once the queue's copy is durable; if the
    /// backend refuses them (disk full) they stay in memory and in the journal.
    pub fn process_deferred(&self, now: Instant) -> bool {
        let due = self.lock().state.release_due(now.into_std());
        match due {
            Some(r) => {
                self.restore(r);
                true
            }
            None => {
                self.maybe_compact_store();
                false
            }
        }
    }

    /// Rewrites the deferred journal when mostly dead (called by the scanner).
    fn maybe_compact_store(&self) {
        let Some(store) = &self.store else {
            return;
        };
        if !store.wants_compaction() {
            return;
        }
        let now = now();
        let live: Vec<(i64, Message)> = self
            .lock()
            .state
            .journal_live(now.mono)
            .into_iter()
            .map(|(due, m)| {
                let wait = due.saturating_duration_since(now.mono).as_nanos() as i64;
                (now.wall.saturating_add(wait), m)
            })
            .collect();
        if let Err(e) = store.compact(live.iter().map(|(d, m)| (*d, m))) {
            tracing::error!(channel = %self.name, "failed to compact deferred store - {e}");
        }
    }
}
