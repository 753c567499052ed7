//! A channel: one subscriber group's copy of a topic's stream.
//!
//! The in-flight and deferred sets live in [`crate::inflight`] and [`crate::deferred`].
//!
//! State changes go through a narrow API — [`Channel::put`] (from the topic or a requeue),
//! [`Channel::take`] (delivery → in flight), [`Channel::finish`], [`Channel::requeue`],
//! [`Channel::touch`], and the scanner's [`Channel::process_in_flight`] /
//! [`Channel::process_deferred`] — so a durable mode can later journal exactly these.
//!
//! Locking: one `parking_lot::Mutex` guards the memory queue, the in-flight and deferred sets and
//! the consumer list. It is never held across backend I/O or an `.await`; critical sections are
//! a few pointer moves per message. The backend has its own lock.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use nsq_protocol::MessageId;
use parking_lot::{Mutex, MutexGuard};
use rand::Rng;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::{BackendError, BackendQueue};
use crate::deferred::DeferredQueue;
use crate::e2e::E2eLatency;
pub use crate::inflight::FinishError;
use crate::inflight::InFlightQueue;
use crate::message::{now_nanos, Message};
use crate::options::{Health, Options};
use crate::topic::Topic;

/// What a channel needs from a subscribed connection. Implemented by nsqd's client type.
///
/// Callbacks are invoked without any channel lock held; they must only update the client's own
/// state and wake its tasks, never call back into the channel synchronously.
pub trait Consumer: Send + Sync + 'static {
    /// Unique per connection for the daemon's lifetime.
    fn id(&self) -> u64;
    /// A message delivered to this consumer timed out: its in-flight count drops by one.
    fn on_timeout(&self);
    /// The channel was emptied: this consumer's in-flight count is now 0.
    fn on_empty(&self);
    /// The channel is being deleted or closed: close the connection.
    fn close(&self);
    /// Lets the daemon reach its concrete client type (for `/stats`).
    fn as_any(&self) -> &dyn Any;
}

/// Why REQ failed (non-fatal `E_REQ_FAILED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequeueError {
    NotInFlight,
    NotOwner,
    Exiting,
}

impl std::fmt::Display for RequeueError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RequeueError::NotInFlight => "ID not in flight",
            RequeueError::NotOwner => "client does not own message",
            RequeueError::Exiting => "exiting",
        })
    }
}

impl From<FinishError> for RequeueError {
    fn from(e: FinishError) -> Self {
        match e {
            FinishError::NotInFlight => RequeueError::NotInFlight,
            FinishError::NotOwner => RequeueError::NotOwner,
        }
    }
}

/// Why SUB could not join the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscribeError {
    /// `--max-channel-consumers` reached.
    TooManyConsumers(usize),
    /// The channel is being deleted or closed.
    Exiting,
}

/// Everything the channel lock protects.
struct State {
    mem: VecDeque<Message>,
    /// The backend holds messages newer than everything in `mem`; new puts go behind them so the
    /// channel stays FIFO. Cleared when the backend drains.
    spill: bool,
    /// Backend writes started but not finished (they run outside the lock).
    backend_writers: usize,
    in_flight: InFlightQueue,
    deferred: DeferredQueue,
    consumers: Vec<Arc<dyn Consumer>>,
}

/// Counters that `/stats` reads without taking the lock.
#[derive(Default)]
struct Counters {
    message_count: AtomicU64,
    requeue_count: AtomicU64,
    timeout_count: AtomicU64,
}

/// A point-in-time view of a channel for `/stats` and statsd.
#[derive(Clone)]
pub struct ChannelStats {
    pub name: String,
    pub depth: i64,
    pub backend_depth: i64,
    pub in_flight_count: usize,
    pub deferred_count: usize,
    pub message_count: u64,
    pub requeue_count: u64,
    pub timeout_count: u64,
    pub paused: bool,
    pub consumers: Vec<Arc<dyn Consumer>>,
}

/// One channel of a topic.
pub struct Channel {
    topic_name: String,
    name: String,
    ephemeral: bool,
    /// False for the drop-sink backend of ephemeral channels: overflow is discarded, and the
    /// FIFO spill logic never engages.
    durable: bool,
    topic: Weak<Topic>,
    opts: Arc<Options>,
    health: Arc<Health>,
    backend: Arc<dyn BackendQueue>,
    state: Mutex<State>,
    counters: Counters,
    paused: AtomicBool,
    exiting: AtomicBool,
    /// Set once an ephemeral channel starts deleting itself.
    deleting: AtomicBool,
    /// Wakes consumer delivery loops: new messages, unpause.
    notify: Notify,
    e2e: E2eLatency,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("topic", &self.topic_name)
            .field("name", &self.name)
            .finish()
    }
}

impl Channel {
    pub(crate) fn new(
        topic: Weak<Topic>,
        topic_name: &str,
        name: &str,
        opts: Arc<Options>,
        health: Arc<Health>,
        backend: Arc<dyn BackendQueue>,
        durable: bool,
    ) -> Arc<Self> {
        let e2e = E2eLatency::new(&opts.e2e_percentiles, opts.e2e_window);
        // A backlog left on disk by a previous run is older than anything new: read it first.
        let spill = durable && backend.depth() > 0;
        Arc::new(Channel {
            topic_name: topic_name.to_string(),
            name: name.to_string(),
            ephemeral: nsq_protocol::names::is_ephemeral(name),
            durable,
            topic,
            opts,
            health,
            backend,
            state: Mutex::new(State {
                mem: VecDeque::new(),
                spill,
                backend_writers: 0,
                in_flight: InFlightQueue::new(),
                deferred: DeferredQueue::new(),
                consumers: Vec::new(),
            }),
            counters: Counters::default(),
            paused: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            deleting: AtomicBool::new(false),
            notify: Notify::new(),
            e2e,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn topic_name(&self) -> &str {
        &self.topic_name
    }

    pub fn is_ephemeral(&self) -> bool {
        self.ephemeral
    }

    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    pub fn is_exiting(&self) -> bool {
        self.exiting.load(Ordering::Acquire)
    }

    /// A future that completes at the next wake-up (messages arrived, unpaused). Call
    /// `enable()` on it (pinned) before checking [`Channel::take`] to avoid lost wake-ups.
    pub fn notified(&self) -> Notified<'_> {
        self.notify.notified()
    }

    /// Wakes every waiting consumer loop.
    pub fn wake_consumers(&self) {
        self.notify.notify_waiters();
    }

    // ---- entering the channel ----------------------------------------------------------

    /// Messages fanned out by the topic: counted in `message_count`; deferred ones go straight
    /// to the deferred set (the defer clock starts now), the rest are [`Channel::put`].
    pub(crate) fn receive(&self, msgs: &[Message]) -> Result<(), BackendError> {
        self.counters
            .message_count
            .fetch_add(msgs.len() as u64, Ordering::Relaxed);
        if msgs.iter().all(|m| m.defer_ms == 0) {
            return self.put(msgs.iter().cloned());
        }
        let now = Instant::now();
        let mut immediate = Vec::new();
        {
            let mut st = self.state.lock();
            for m in msgs {
                if m.defer_ms == 0 {
                    immediate.push(m.clone());
                } else {
                    let mut m = m.clone();
                    let due = now + m.defer();
                    m.defer_ms = 0;
                    // A duplicate ID is dropped, as the reference's pushDeferredMessage does.
                    let _ = st.deferred.insert(due, m);
                }
            }
        }
        self.put(immediate)
    }

    /// Appends messages to the channel queue: memory while there is room (and nothing older
    /// waits on disk), then the backend. Does not touch `message_count` (requeues and timeouts
    /// use it too).
    pub fn put(&self, msgs: impl IntoIterator<Item = Message>) -> Result<(), BackendError> {
        let mut msgs = msgs.into_iter().peekable();
        if msgs.peek().is_none() {
            return Ok(());
        }
        let st = self.state.lock();
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let overflow = self.fill_mem(st, &mut msgs);
        let r = match overflow {
            Some(rest) => self.write_backend(rest),
            None => Ok(()),
        };
        self.notify.notify_waiters();
        r
    }

    /// Moves what fits into the memory queue under the held lock; returns the rest (and
    /// registers a pending backend write) after releasing it.
    fn fill_mem(
        &self,
        mut st: MutexGuard<'_, State>,
        msgs: &mut dyn Iterator<Item = Message>,
    ) -> Option<Vec<Message>> {
        let cap = self.opts.mem_queue_size;
        let mut rest = Vec::new();
        for m in msgs {
            if !st.spill && st.mem.len() < cap {
                st.mem.push_back(m);
            } else {
                if self.durable {
                    st.spill = true;
                }
                rest.push(m);
            }
        }
        if rest.is_empty() {
            return None;
        }
        st.backend_writers += 1;
        Some(rest)
    }

    fn write_backend(&self, rest: Vec<Message>) -> Result<(), BackendError> {
        let r = self
            .backend
            .put_batch(rest.len(), &mut |i, out| rest[i].encode_into(out))
            .map(drop);
        if self.durable {
            self.health.record(&r);
        }
        self.state.lock().backend_writers -= 1;
        if let Err(e) = &r {
            tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to write message to backend - {e}");
        }
        r
    }

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
        if max == 0 || self.is_paused() || self.is_exiting() {
            return 0;
        }
        let now = Instant::now();
        let mut rng = (sample_rate > 0).then(rand::thread_rng);
        let mut keep = |_: &Message| match rng.as_mut() {
            Some(r) => r.gen_range(0..100) <= sample_rate,
            None => true,
        };
        let mut n = 0;
        let mut st = self.state.lock();
        while n < max {
            let Some(mut m) = st.mem.pop_front() else {
                break;
            };
            if !keep(&m) {
                continue;
            }
            m.attempts = m.attempts.wrapping_add(1);
            // A duplicate ID keeps the first entry and delivery proceeds, as the reference.
            let _ = st.in_flight.insert(m.clone(), client_id, now, msg_timeout);
            out.push(m);
            n += 1;
        }
        if n == max || !st.spill {
            return n;
        }
        drop(st);

        let mut raw = Vec::with_capacity(max - n);
        let got = self.backend.read_batch(max - n, &mut raw);
        let mut st = self.state.lock();
        for payload in raw {
            let mut m = match Message::decode(payload) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!(channel = %self.name, "failed to decode message - {e}");
                    continue;
                }
            };
            if !keep(&m) {
                continue;
            }
            m.attempts = m.attempts.wrapping_add(1);
            // A duplicate ID keeps the first entry and delivery proceeds, as the reference.
            let _ = st.in_flight.insert(m.clone(), client_id, now, msg_timeout);
            out.push(m);
            n += 1;
        }
        if got < max && st.backend_writers == 0 && self.backend.depth() <= 0 {
            st.spill = false;
        }
        n
    }

    /// FIN: removes the message from flight. Returns it (for e2e latency).
    pub fn finish(&self, client_id: u64, id: &MessageId) -> Result<(), FinishError> {
        let f = self.state.lock().in_flight.remove_owned(client_id, id)?;
        if self.e2e.enabled() {
            self.e2e.record(now_nanos() - f.msg.timestamp);
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
        let mut ok = 0;
        {
            let mut st = self.state.lock();
            for id in ids {
                match st.in_flight.remove_owned(client_id, id) {
                    Ok(f) => {
                        ok += 1;
                        if e2e {
                            stamps.push(f.msg.timestamp);
                        }
                    }
                    Err(e) => failed.push((*id, e)),
                }
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
        let mut st = self.state.lock();
        let f = st.in_flight.remove_owned(client_id, id)?;
        if self.is_exiting() {
            return Err(RequeueError::Exiting);
        }
        self.counters.requeue_count.fetch_add(1, Ordering::Relaxed);
        if delay.is_zero() {
            let overflow = self.fill_mem(st, &mut std::iter::once(f.msg));
            if let Some(rest) = overflow {
                // A failed backend write is logged and recorded in health; the REQ itself
                // succeeded (the message left flight), as in the reference.
                let _ = self.write_backend(rest);
            }
            self.notify.notify_waiters();
        } else {
            let due = Instant::now() + delay;
            let _ = st.deferred.insert(due, f.msg);
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
        self.state.lock().in_flight.touch(
            client_id,
            id,
            Instant::now(),
            msg_timeout,
            self.opts.max_msg_timeout,
        )
    }

    // ---- the queue scanner's work -----------------------------------------------------------

    /// Times out every in-flight message whose deadline is `<= now`; returns whether any did.
    pub fn process_in_flight(&self, now: Instant) -> bool {
        let mut timed_out = Vec::new();
        let mut owners = Vec::new();
        let mut st = self.state.lock();
        while let Some(f) = st.in_flight.pop_expired(now) {
            owners.push(f.client_id);
            timed_out.push(f.msg);
        }
        if timed_out.is_empty() {
            return false;
        }
        self.counters
            .timeout_count
            .fetch_add(timed_out.len() as u64, Ordering::Relaxed);
        let consumers: Vec<_> = owners
            .iter()
            .filter_map(|id| st.consumers.iter().find(|c| c.id() == *id).cloned())
            .collect();
        let overflow = self.fill_mem(st, &mut timed_out.into_iter());
        for c in consumers {
            c.on_timeout();
        }
        if let Some(rest) = overflow {
            let _ = self.write_backend(rest);
        }
        self.notify.notify_waiters();
        true
    }

    /// Moves every deferred message due at `now` to the queue; returns whether any was.
    pub fn process_deferred(&self, now: Instant) -> bool {
        let mut due = Vec::new();
        let mut st = self.state.lock();
        while let Some(m) = st.deferred.pop_due(now) {
            due.push(m);
        }
        if due.is_empty() {
            return false;
        }
        if let Some(rest) = self.fill_mem(st, &mut due.into_iter()) {
            let _ = self.write_backend(rest);
        }
        self.notify.notify_waiters();
        true
    }

    // ---- consumers --------------------------------------------------------------------------

    /// SUB: adds a consumer, enforcing `--max-channel-consumers`.
    pub fn add_consumer(&self, c: Arc<dyn Consumer>) -> Result<(), SubscribeError> {
        let mut st = self.state.lock();
        if self.is_exiting() {
            return Err(SubscribeError::Exiting);
        }
        if st.consumers.iter().any(|x| x.id() == c.id()) {
            return Ok(());
        }
        let max = self.opts.max_channel_consumers;
        if max > 0 && st.consumers.len() >= max {
            return Err(SubscribeError::TooManyConsumers(max));
        }
        st.consumers.push(c);
        Ok(())
    }

    /// A consumer's connection ended. Its in-flight messages stay until they time out. An
    /// ephemeral channel left without consumers deletes itself.
    pub fn remove_consumer(&self, client_id: u64) {
        let now_empty = {
            let mut st = self.state.lock();
            let before = st.consumers.len();
            st.consumers.retain(|c| c.id() != client_id);
            before != st.consumers.len() && st.consumers.is_empty()
        };
        if now_empty && self.ephemeral && !self.deleting.swap(true, Ordering::AcqRel) {
            if let Some(topic) = self.topic.upgrade() {
                topic.delete_channel_if(&self.name, self);
            }
        }
    }

    pub fn consumer_count(&self) -> usize {
        self.state.lock().consumers.len()
    }

    // ---- administration ---------------------------------------------------------------------

    pub fn pause(&self) {
        self.paused.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub fn unpause(&self) {
        self.paused.store(false, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Discards everything queued, in flight and deferred; consumers' in-flight counts reset.
    pub fn empty(&self) -> Result<(), BackendError> {
        let consumers = {
            let mut st = self.state.lock();
            st.mem.clear();
            st.in_flight = InFlightQueue::new();
            st.deferred = DeferredQueue::new();
            st.spill = false;
            st.consumers.clone()
        };
        for c in consumers {
            c.on_empty();
        }
        self.backend.empty()
    }

    fn close_consumers(&self) {
        let consumers = std::mem::take(&mut self.state.lock().consumers);
        for c in consumers {
            c.close();
        }
    }

    /// Deletion: stop, close consumers, discard everything, remove the backend's files.
    pub(crate) fn delete(&self) {
        self.exiting.store(true, Ordering::Release);
        self.close_consumers();
        if let Err(e) = self.empty() {
            tracing::error!(channel = %self.name, "failed to empty channel backend - {e}");
        }
        if let Err(e) = self.backend.delete() {
            tracing::error!(channel = %self.name, "failed to delete channel backend - {e}");
        }
        self.notify.notify_waiters();
    }

    /// Shutdown: close consumers, then persist memory queue, in-flight and deferred messages
    /// (in that order) to the backend and close it.
    pub(crate) fn close(&self) -> Result<(), BackendError> {
        self.exiting.store(true, Ordering::Release);
        self.close_consumers();
        let msgs: Vec<Message> = {
            let mut st = self.state.lock();
            let mut v: Vec<Message> = st.mem.drain(..).collect();
            v.extend(st.in_flight.drain().map(|f| f.msg));
            v.extend(st.deferred.drain().map(|(_, m)| m));
            v
        };
        let r = if msgs.is_empty() {
            Ok(())
        } else {
            self.backend
                .put_batch(msgs.len(), &mut |i, out| msgs[i].encode_into(out))
                .map(drop)
        };
        if let Err(e) = &r {
            tracing::error!(channel = %self.name, "failed to flush channel to backend - {e}");
        }
        self.backend.close()?;
        r
    }

    // ---- stats ------------------------------------------------------------------------------

    pub fn depth(&self) -> i64 {
        self.state.lock().mem.len() as i64 + self.backend.depth()
    }

    pub fn stats(&self) -> ChannelStats {
        let (mem, in_flight, deferred, consumers) = {
            let st = self.state.lock();
            (
                st.mem.len(),
                st.in_flight.len(),
                st.deferred.len(),
                st.consumers.clone(),
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
            paused: self.is_paused(),
            consumers,
        }
    }

    /// The channel's e2e processing-latency window.
    pub fn e2e(&self) -> &E2eLatency {
        &self.e2e
    }

    /// Bodies currently in flight (test helper and debugging aid).
    pub fn in_flight_ids(&self) -> Vec<MessageId> {
        self.state.lock().in_flight.ids()
    }

    #[doc(hidden)]
    pub fn peek_bodies(&self) -> Vec<Bytes> {
        self.state
            .lock()
            .mem
            .iter()
            .map(|m| m.body.clone())
            .collect()
    }
}
