//! A channel: one subscriber group's copy of a topic's stream.
//!
//! The in-flight and deferred sets live in [`crate::inflight`] and [`crate::deferred`]; the
//! durable deferred journal in [`crate::deferred_store`]. docs/durability.md explains the
//! crash-safety design this file implements.
//!
//! State changes go through a narrow API — [`Channel::receive`]/[`Channel::put`] (from the
//! topic), [`Channel::take`] (delivery → in flight), [`Channel::finish`], [`Channel::requeue`],
//! [`Channel::touch`], and the scanner's [`Channel::process_in_flight`] /
//! [`Channel::process_deferred`].
//!
//! Crash safety of what was read from the backend: every record taken from the backend is
//! *unsettled* until its message is FINed or stored again durably (a requeue written back to
//! the backend and synced, or a deferral journaled and synced). The channel keeps the
//! backend's read watermark ([`BackendQueue::set_read_watermark`]) at the oldest unsettled
//! record, so after a SIGKILL reading resumes there and in-flight messages come back
//! (at-least-once; FINed ones after the watermark may be delivered again).
//!
//! Locking: one `parking_lot::Mutex` guards the memory queue, the in-flight and deferred sets,
//! the unsettled-record set and the consumer list. It is never held across backend I/O or an
//! `.await`; critical sections are a few pointer moves per message (plus the backend's cheap
//! `set_read_watermark`, so watermark updates reach the backend in state order). The backend
//! and the deferred store have their own locks.

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

use crate::backend::{BackendError, BackendQueue, RecordPos, WriteTicket};
use crate::client_stats::ClientStats;
use crate::deferred::DeferredQueue;
use crate::deferred_store::DeferredStore;
use crate::e2e::E2eLatency;
pub use crate::inflight::FinishError;
use crate::inflight::InFlightQueue;
use crate::memqueue::{MemQueue, Weigh};
use crate::message::{now_nanos, Message};
use crate::options::{Health, Options};
use crate::receipt::{Pending, PutReceipt};
use crate::reserve::Reserve;
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
    /// This consumer's `/stats` snapshot (nsqd/channel.go, `Consumer.Stats`).
    fn stats(&self) -> ClientStats;
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

/// A message waiting in the memory queue, with the backend record it was read from while that
/// record is unsettled (a requeued or timed-out message keeps its record until re-stored).
struct Queued {
    msg: Message,
    pos: Option<RecordPos>,
}

impl Queued {
    fn new(msg: Message) -> Self {
        Queued { msg, pos: None }
    }
}

impl Weigh for Queued {
    /// Only a message with no record on disk needs room at shutdown.
    fn weight(&self) -> u64 {
        if self.pos.is_none() {
            self.msg.record_len()
        } else {
            0
        }
    }
}

/// The backend records read and not yet settled, and the watermark derived from them.
///
/// The backend hands records out in position order, so the set is a window: a deque of
/// `(position, live copies)` in ascending order whose front is the oldest unsettled record.
/// Settling finds its entry by binary search and zeroes it; zeroed entries at the front are
/// dropped. Memory is the span between the oldest unsettled record and the newest read (normally
/// about the in-flight window), and a read or settle allocates nothing in the steady state — a
/// `BTreeMap` here cost a node allocation and free per message.
#[derive(Default)]
struct ReadTracker {
    /// Ascending positions with the number of live copies referring to each (normally 1; 0
    /// for a settled record not yet at the front).
    window: std::collections::VecDeque<(RecordPos, u32)>,
    /// Backend reads in progress (outside the lock). While one runs, the watermark is not
    /// cleared: the backend set it to the first record that read took, and the channel has
    /// not registered those records yet.
    readers: usize,
    /// The value last given to the backend.
    published: Option<RecordPos>,
}

impl ReadTracker {
    fn read(&mut self, pos: RecordPos) {
        match self.window.back_mut() {
            Some((p, n)) if *p == pos => *n += 1,
            Some((p, _)) if *p > pos => {
                // Out of order (not seen from a diskqueue): keep the window sorted.
                match self.window.binary_search_by(|(q, _)| q.cmp(&pos)) {
                    Ok(i) => self.window[i].1 += 1,
                    Err(i) => self.window.insert(i, (pos, 1)),
                }
            }
            _ => self.window.push_back((pos, 1)),
        }
    }

    fn settle(&mut self, pos: RecordPos) {
        // Settles come mostly in read order: try the front first.
        let i = match self.window.front() {
            Some((p, _)) if *p == pos => 0,
            _ => match self.window.binary_search_by(|(q, _)| q.cmp(&pos)) {
                Ok(i) => i,
                Err(_) => return,
            },
        };
        let n = &mut self.window[i].1;
        *n = n.saturating_sub(1);
        while self.window.front().is_some_and(|(_, n)| *n == 0) {
            self.window.pop_front();
        }
    }

    /// The watermark to publish, or `None` to leave the backend's as it is.
    fn watermark(&self) -> Option<Option<RecordPos>> {
        match self.window.front() {
            Some((p, _)) => Some(Some(*p)),
            None if self.readers > 0 => None,
            None => Some(None),
        }
    }

    fn clear(&mut self) {
        self.window.clear();
    }
}

/// Everything the channel lock protects.
struct State {
    mem: MemQueue<Queued>,
    /// The backend holds messages newer than everything in `mem`; new puts go behind them so the
    /// channel stays FIFO. Cleared when the backend drains.
    spill: bool,
    /// Backend writes started but not finished (they run outside the lock).
    backend_writers: usize,
    in_flight: InFlightQueue,
    deferred: DeferredQueue,
    reads: ReadTracker,
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
    /// This channel, for tasks that settle records once a write is durable.
    me: Weak<Channel>,
    topic: Weak<Topic>,
    opts: Arc<Options>,
    health: Arc<Health>,
    backend: Arc<dyn BackendQueue>,
    /// The durable deferred journal: present for a non-ephemeral channel with a memory queue of
    /// 0 (`--mem-queue-size=0` or `--durable`), where everything the channel holds is on disk.
    store: Option<Arc<DeferredStore>>,
    /// Disk space memory must fit in (see [`crate::reserve`]); `None`: memory is unbounded
    /// by it (tests, tools) or the channel is ephemeral.
    reserve: Option<Arc<Reserve>>,
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
        reserve: Option<Arc<Reserve>>,
    ) -> Arc<Self> {
        // An #ephemeral channel has the drop-sink backend (nsqd/channel.go, NewChannel).
        let durable = !nsq_protocol::names::is_ephemeral(name);
        let e2e = E2eLatency::new(&opts.e2e_percentiles, opts.e2e_window);
        // A backlog left on disk by a previous run is older than anything new: read it first.
        let spill = durable && backend.depth() > 0;
        let mut deferred = DeferredQueue::new();
        let store = if durable && opts.mem_queue_size == 0 {
            let path = DeferredStore::path_for(&opts.data_path, &format!("{topic_name}:{name}"));
            match DeferredStore::open(path) {
                Ok((store, replayed)) => {
                    let (now, now_wall) = (Instant::now(), now_nanos());
                    for (due, m) in replayed {
                        let wait = u64::try_from(due.saturating_sub(now_wall)).unwrap_or(0);
                        let _ = deferred.insert(now + Duration::from_nanos(wait), m);
                    }
                    if !deferred.is_empty() {
                        tracing::info!(topic = %topic_name, channel = %name, "restored {} deferred messages", deferred.len());
                    }
                    Some(store)
                }
                Err(e) => {
                    tracing::error!(topic = %topic_name, channel = %name, "failed to open deferred store, deferred messages are kept in memory only - {e}");
                    None
                }
            }
        } else {
            None
        };
        Arc::new_cyclic(|me| Channel {
            topic_name: topic_name.to_string(),
            name: name.to_string(),
            ephemeral: !durable,
            durable,
            me: me.clone(),
            topic,
            opts,
            health,
            backend,
            store,
            reserve: reserve.filter(|_| durable),
            state: Mutex::new(State {
                mem: MemQueue::new(),
                spill,
                backend_writers: 0,
                in_flight: InFlightQueue::new(),
                deferred,
                reads: ReadTracker::default(),
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
        let (now, now_wall) = (Instant::now(), now_nanos());
        let mut immediate = Vec::new();
        let mut later = Vec::new();
        for m in msgs {
            if m.defer_ms == 0 {
                immediate.push(Queued::new(m.clone()));
            } else {
                let mut m = m.clone();
                let defer = m.defer();
                m.defer_ms = 0;
                let due_wall = now_wall.saturating_add(defer.as_nanos() as i64);
                later.push((now + defer, due_wall, m));
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
            let mut st = self.state.lock();
            for (due, _, m) in later {
                // A duplicate ID is dropped, as the reference's pushDeferredMessage does.
                let _ = st.deferred.insert(due, m);
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

    /// Whether memory may hold `bytes` more (see [`crate::reserve`]).
    fn admit(&self, bytes: u64) -> bool {
        self.reserve.as_ref().is_none_or(|r| r.admit(bytes))
    }

    /// What a shutdown would have to write for this channel that is on disk nowhere else: the
    /// memory queue and in-flight messages that came from memory, and deferred messages unless
    /// journaled.
    pub(crate) fn held_bytes(&self) -> u64 {
        if self.reserve.is_none() {
            return 0;
        }
        let st = self.state.lock();
        let deferred = if self.store.is_none() {
            st.deferred.bytes()
        } else {
            0
        };
        st.mem.bytes() + st.in_flight.volatile_bytes() + deferred
    }

    /// All or nothing: the part that does not fit in memory is written to the backend first,
    /// and only if that succeeds does the rest enter the memory queue, so a refused put leaves
    /// no trace (a retry by the topic's pump never duplicates). `bytes`: the messages' total
    /// [`Weigh::weight`]. Memory takes only what the reserve admits.
    fn put_queued(
        &self,
        msgs: impl ExactSizeIterator<Item = Queued>,
        bytes: u64,
        receipt: Option<&mut PutReceipt>,
    ) -> Result<(), BackendError> {
        if msgs.len() == 0 {
            return Ok(());
        }
        let mut st = self.state.lock();
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let mut room = if st.spill {
            0
        } else {
            self.opts.mem_queue_size.saturating_sub(st.mem.len())
        };
        if msgs.len() <= room {
            if self.admit(bytes) {
                // All of it fits: straight into the memory queue, no intermediate vector.
                st.mem.extend(msgs);
                drop(st);
                self.notify.notify_waiters();
                return Ok(());
            }
            room = 0;
        }
        // Memory takes what fits; the rest goes to the backend first.
        let mut msgs: Vec<Queued> = msgs.collect();
        let mut rest = msgs.split_off(room.min(msgs.len()));
        if !msgs.is_empty() && !self.admit(msgs.iter().map(Weigh::weight).sum()) {
            // Memory refused: all of it goes to the backend, in order.
            msgs.append(&mut rest);
            rest = std::mem::take(&mut msgs);
        }
        if self.durable {
            st.spill = true;
        }
        st.backend_writers += 1;
        drop(st);
        let t = match self.write_backend(&rest) {
            Ok(t) => t,
            Err(e) => {
                // Nothing went to disk: memory may take new puts again if it can.
                let mut st = self.state.lock();
                if st.backend_writers == 0 && self.backend.depth() <= 0 {
                    st.spill = false;
                }
                return Err(e);
            }
        };
        if let Some(receipt) = receipt {
            if self.opts.durable {
                receipt.backend(&self.backend, t);
            }
        }
        st = self.state.lock();
        st.mem.extend(msgs);
        drop(st);
        self.notify.notify_waiters();
        Ok(())
    }

    /// Moves what fits into the memory queue under the held lock; returns the rest (and
    /// registers a pending backend write) after releasing it.
    fn fill_mem(
        &self,
        mut st: MutexGuard<'_, State>,
        msgs: &mut dyn Iterator<Item = Queued>,
    ) -> Option<Vec<Queued>> {
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

    fn write_backend(&self, rest: &[Queued]) -> Result<WriteTicket, BackendError> {
        let r = self
            .backend
            .put_batch(rest.len(), &mut |i, out| rest[i].msg.encode_into(out));
        if self.durable {
            self.health.record(&r);
        }
        self.state.lock().backend_writers -= 1;
        if let Err(e) = &r {
            tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to write message to backend - {e}");
        }
        r
    }

    /// Puts messages that already belong to the channel (requeued, timed out, due) back in
    /// the queue. Nothing is dropped: what the backend refuses (disk full) stays in memory
    /// beyond the memory-queue size, its records unsettled. Records of messages re-stored in
    /// the backend are settled once the write is durable; `then` runs after that too.
    fn restore(
        &self,
        st: MutexGuard<'_, State>,
        msgs: Vec<Queued>,
        then: Option<Box<dyn FnOnce() + Send>>,
    ) {
        let overflow = self.fill_mem(st, &mut msgs.into_iter());
        if let Some(rest) = overflow {
            match self.write_backend(&rest) {
                Ok(t) => {
                    let positions: Vec<RecordPos> = rest.iter().filter_map(|q| q.pos).collect();
                    self.settle_after(Pending::Backend(self.backend.clone(), t), positions, then);
                }
                Err(_) => {
                    let mut st = self.state.lock();
                    st.mem.extend(rest);
                }
            }
        } else if let Some(f) = then {
            f();
        }
        self.notify.notify_waiters();
    }

    /// Settles `positions` (and runs `then`) once `after` is durable — at once when the
    /// channel is not journaled (nothing on disk is promised there beyond the backend's own
    /// syncs) or there is no runtime to wait on. A failed sync leaves them unsettled: after a
    /// crash those messages are read again.
    fn settle_after(
        &self,
        after: Pending,
        positions: Vec<RecordPos>,
        then: Option<Box<dyn FnOnce() + Send>>,
    ) {
        if positions.is_empty() && then.is_none() {
            return;
        }
        let journaled = self.store.is_some();
        let spawn = journaled
            .then(|| {
                Some((
                    tokio::runtime::Handle::try_current().ok()?,
                    self.me.upgrade()?,
                ))
            })
            .flatten();
        match spawn {
            Some((rt, me)) => {
                rt.spawn(async move {
                    let mut receipt = PutReceipt::default();
                    receipt.push(after);
                    match receipt.durable().await {
                        Ok(()) => {
                            me.settle(&positions);
                            if let Some(f) = then {
                                f();
                            }
                        }
                        Err(e) => {
                            tracing::error!(channel = %me.name, topic = %me.topic_name, "failed to sync re-stored messages, they stay unsettled - {e}");
                        }
                    }
                });
            }
            None => {
                self.settle(&positions);
                if let Some(f) = then {
                    f();
                }
            }
        }
    }

    fn settle(&self, positions: &[RecordPos]) {
        if positions.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        for p in positions {
            st.reads.settle(*p);
        }
        self.publish_watermark(&mut st);
    }

    /// Gives the backend the current watermark if it changed (cheap: no I/O).
    fn publish_watermark(&self, st: &mut State) {
        let Some(wm) = st.reads.watermark() else {
            return;
        };
        if wm != st.reads.published {
            st.reads.published = wm;
            self.backend.set_read_watermark(wm);
        }
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
        let now = Instant::now();
        let mut rng = (sample_rate > 0).then(rand::thread_rng);
        let mut keep = |_: &Message| match rng.as_mut() {
            Some(r) => r.gen_range(0..100) <= sample_rate,
            None => true,
        };
        let mut n = 0;
        let mut st = self.state.lock();
        let mut settled = false;
        while n < max {
            let Some(Queued { mut msg, pos }) = st.mem.pop_front() else {
                break;
            };
            if !keep(&msg) {
                if let Some(p) = pos {
                    st.reads.settle(p);
                    settled = true;
                }
                continue;
            }
            msg.attempts = msg.attempts.wrapping_add(1);
            emit(&msg);
            // A duplicate ID keeps the first entry and delivery proceeds, as the reference.
            if st
                .in_flight
                .insert(msg, pos, client_id, now, msg_timeout)
                .is_err()
            {
                if let Some(p) = pos {
                    st.reads.settle(p);
                    settled = true;
                }
            }
            n += 1;
        }
        if settled {
            self.publish_watermark(&mut st);
        }
        if n == max || !st.spill {
            return n;
        }
        st.reads.readers += 1;
        drop(st);

        let mut raw = Vec::with_capacity(max - n);
        let got = self.backend.read_batch_pos(max - n, &mut raw);
        let mut st = self.state.lock();
        st.reads.readers -= 1;
        if let Some((_, first)) = raw.first() {
            // The backend holds its watermark at the first record a read takes when none is
            // set; the published value must follow.
            if st.reads.published.is_none() {
                st.reads.published = Some(*first);
            }
        }
        for (payload, pos) in raw {
            st.reads.read(pos);
            let mut m = match Message::decode(payload) {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!(channel = %self.name, "failed to decode message - {e}");
                    st.reads.settle(pos);
                    continue;
                }
            };
            if !keep(&m) {
                st.reads.settle(pos);
                continue;
            }
            m.attempts = m.attempts.wrapping_add(1);
            emit(&m);
            if st
                .in_flight
                .insert(m, Some(pos), client_id, now, msg_timeout)
                .is_err()
            {
                st.reads.settle(pos);
            }
            n += 1;
        }
        self.publish_watermark(&mut st);
        if got < max && st.backend_writers == 0 && self.backend.depth() <= 0 {
            st.spill = false;
        }
        n
    }

    /// FIN: removes the message from flight and settles its record.
    pub fn finish(&self, client_id: u64, id: &MessageId) -> Result<(), FinishError> {
        let f = {
            let mut st = self.state.lock();
            let f = st.in_flight.remove_owned(client_id, id)?;
            if let Some(p) = f.pos {
                st.reads.settle(p);
                self.publish_watermark(&mut st);
            }
            f
        };
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
            let mut settled = false;
            for id in ids {
                match st.in_flight.remove_owned(client_id, id) {
                    Ok(f) => {
                        ok += 1;
                        if let Some(p) = f.pos {
                            st.reads.settle(p);
                            settled = true;
                        }
                        if e2e {
                            stamps.push(f.msg.timestamp);
                        }
                    }
                    Err(e) => failed.push((*id, e)),
                }
            }
            if settled {
                self.publish_watermark(&mut st);
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
            // Keep it in flight: the shutdown flush persists it.
            let _ = st
                .in_flight
                .insert(f.msg, f.pos, f.client_id, f.delivered_at, Duration::ZERO);
            return Err(RequeueError::Exiting);
        }
        self.counters.requeue_count.fetch_add(1, Ordering::Relaxed);
        if delay.is_zero() {
            // A failed backend write keeps the message in memory; the REQ itself succeeded
            // (the message left flight), as in the reference.
            self.restore(
                st,
                vec![Queued {
                    msg: f.msg,
                    pos: f.pos,
                }],
                None,
            );
        } else {
            self.defer(st, Instant::now() + delay, f.msg, f.pos);
        }
        Ok(())
    }

    /// Puts an in-flight message into the deferred set; journaled, its record is settled once
    /// the journal entry is durable.
    fn defer(
        &self,
        mut st: MutexGuard<'_, State>,
        due: Instant,
        msg: Message,
        pos: Option<RecordPos>,
    ) {
        let journal = self.store.as_ref().map(|s| {
            let wait = due.saturating_duration_since(Instant::now());
            (
                s.clone(),
                now_nanos().saturating_add(wait.as_nanos() as i64),
                msg.clone(),
            )
        });
        if st.deferred.insert(due, msg).is_err() {
            // The ID is already deferred (a duplicate): that copy stands for this one.
            if let Some(p) = pos {
                st.reads.settle(p);
                self.publish_watermark(&mut st);
            }
            return;
        }
        drop(st);
        match journal {
            Some((store, due_wall, msg)) => match store.add([(due_wall, &msg)]) {
                Ok(t) => {
                    self.settle_after(Pending::Store(store, t), pos.into_iter().collect(), None)
                }
                Err(e) => {
                    // Its record stays unsettled: after a crash it is read again.
                    tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to journal deferred message - {e}");
                }
            },
            None => {
                if let Some(p) = pos {
                    // Not journaled: a deferred message lives in memory, as in the reference.
                    self.settle(&[p]);
                }
            }
        }
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
        let st = {
            let mut st = self.state.lock();
            while let Some(f) = st.in_flight.pop_expired(now) {
                owners.push(f.client_id);
                timed_out.push(Queued {
                    msg: f.msg,
                    pos: f.pos,
                });
            }
            st
        };
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
        self.restore(st, timed_out, None);
        for c in consumers {
            c.on_timeout();
        }
        true
    }

    /// Moves every deferred message due at `now` to the queue; returns whether any was.
    /// Journaled, their journal entries are deleted once the queue's copy is durable; if the
    /// backend refuses them (disk full) they stay in memory and in the journal.
    pub fn process_deferred(&self, now: Instant) -> bool {
        let mut due = Vec::new();
        let mut st = self.state.lock();
        while let Some(m) = st.deferred.pop_due(now) {
            due.push(Queued::new(m));
        }
        if due.is_empty() {
            drop(st);
            self.maybe_compact_store();
            return false;
        }
        let then: Option<Box<dyn FnOnce() + Send>> = self.store.as_ref().map(|store| {
            let store = store.clone();
            let ids: Vec<MessageId> = due.iter().map(|q| q.msg.id).collect();
            let f: Box<dyn FnOnce() + Send> = Box::new(move || {
                if let Err(e) = store.del(ids) {
                    // The entries come back after a restart (a duplicate), never lost.
                    tracing::warn!("failed to journal deferred message removal - {e}");
                }
            });
            f
        });
        self.restore(st, due, then);
        true
    }

    /// Rewrites the deferred journal when mostly dead (called by the scanner).
    fn maybe_compact_store(&self) {
        let Some(store) = &self.store else {
            return;
        };
        if !store.wants_compaction() {
            return;
        }
        let (now, now_wall) = (Instant::now(), now_nanos());
        let live: Vec<(i64, Message)> = {
            let st = self.state.lock();
            st.deferred
                .iter()
                .map(|(due, m)| {
                    let wait = due.saturating_duration_since(now).as_nanos() as i64;
                    (now_wall.saturating_add(wait), m.clone())
                })
                .collect()
        };
        if let Err(e) = store.compact(live.iter().map(|(d, m)| (*d, m))) {
            tracing::error!(channel = %self.name, "failed to compact deferred store - {e}");
        }
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
            st.reads.clear();
            self.publish_watermark(&mut st);
            st.consumers.clone()
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
        self.exiting.store(true, Ordering::Release);
        self.close_consumers();
        let journaled = self.store.is_some();
        let (volatile, backed) = {
            let mut st = self.state.lock();
            let mut volatile: Vec<Message> = Vec::new();
            let mut backed: Vec<Message> = Vec::new();
            for q in st.mem.take_all() {
                match q.pos {
                    None => volatile.push(q.msg),
                    Some(_) => backed.push(q.msg),
                }
            }
            for f in st.in_flight.drain() {
                match f.pos {
                    None => volatile.push(f.msg),
                    Some(_) => backed.push(f.msg),
                }
            }
            let deferred = st.deferred.drain().map(|(_, m)| m);
            if journaled {
                backed.extend(deferred);
            } else {
                volatile.extend(deferred);
            }
            (volatile, backed)
        };
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
            Ok(()) => {
                let mut st = self.state.lock();
                st.reads.clear();
                self.publish_watermark(&mut st);
            }
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

    /// IDs currently in flight (test helper and debugging aid).
    pub fn in_flight_ids(&self) -> Vec<MessageId> {
        self.state.lock().in_flight.ids()
    }

    #[doc(hidden)]
    pub fn peek_bodies(&self) -> Vec<Bytes> {
        self.state
            .lock()
            .mem
            .iter()
            .map(|q| q.msg.body.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::DurableWait;

    /// An in-memory backend that numbers records, can be made to fail, and records the
    /// watermark it is given.
    #[derive(Default)]
    struct MockBackend {
        inner: Mutex<MockState>,
    }

    #[derive(Default)]
    struct MockState {
        records: std::collections::VecDeque<(Bytes, RecordPos)>,
        next: i64,
        fail: bool,
        watermark: Option<RecordPos>,
    }

    impl MockBackend {
        fn watermark(&self) -> Option<RecordPos> {
            self.inner.lock().watermark
        }
        fn set_fail(&self, fail: bool) {
            self.inner.lock().fail = fail;
        }
    }

    fn pos(offset: i64) -> RecordPos {
        RecordPos {
            file_num: 0,
            offset,
        }
    }

    impl BackendQueue for MockBackend {
        fn put_batch(
            &self,
            count: usize,
            encode: &mut dyn FnMut(usize, &mut Vec<u8>),
        ) -> Result<WriteTicket, BackendError> {
            let mut st = self.inner.lock();
            if st.fail {
                return Err(BackendError::Io(std::io::Error::from_raw_os_error(28)));
            }
            for i in 0..count {
                let mut v = Vec::new();
                encode(i, &mut v);
                let p = pos(st.next);
                st.next += 1;
                st.records.push_back((Bytes::from(v), p));
            }
            Ok(WriteTicket(st.next as u64))
        }
        fn wait_durable(&self, _ticket: WriteTicket) -> DurableWait {
            Box::pin(std::future::ready(Ok(())))
        }
        fn read_batch(&self, max: usize, out: &mut Vec<Bytes>) -> usize {
            let mut v = Vec::new();
            let n = self.read_batch_pos(max, &mut v);
            out.extend(v.into_iter().map(|(b, _)| b));
            n
        }
        fn read_batch_pos(&self, max: usize, out: &mut Vec<(Bytes, RecordPos)>) -> usize {
            let mut st = self.inner.lock();
            let n = max.min(st.records.len());
            // As the diskqueue does: with no watermark set, a read sets it to its first record.
            if n > 0 && st.watermark.is_none() {
                st.watermark = Some(st.records[0].1);
            }
            out.extend(st.records.drain(..n));
            n
        }
        fn set_read_watermark(&self, pos: Option<RecordPos>) {
            self.inner.lock().watermark = pos;
        }
        fn depth(&self) -> i64 {
            self.inner.lock().records.len() as i64
        }
        fn empty(&self) -> Result<(), BackendError> {
            self.inner.lock().records.clear();
            Ok(())
        }
        fn close(&self) -> Result<(), BackendError> {
            Ok(())
        }
        fn delete(&self) -> Result<(), BackendError> {
            Ok(())
        }
    }

    fn channel(dir: &std::path::Path, mem_queue_size: usize) -> (Arc<Channel>, Arc<MockBackend>) {
        let opts = Options {
            data_path: dir.to_path_buf(),
            mem_queue_size,
            ..Options::default()
        };
        let backend = Arc::new(MockBackend::default());
        let ch = Channel::new(
            Weak::new(),
            "t",
            "c",
            Arc::new(opts),
            Arc::new(Health::default()),
            backend.clone(),
            None,
        );
        (ch, backend)
    }

    fn msg(n: u8) -> Message {
        let mut id = [b'0'; 16];
        id[15] = n;
        Message::new(MessageId(id), Bytes::from(vec![n]))
    }

    const T: Duration = Duration::from_secs(60);

    fn take(ch: &Channel, max: usize) -> Vec<Message> {
        let mut out = Vec::new();
        ch.take(1, max, T, 0, &mut out);
        out
    }

    #[test]
    fn watermark_follows_the_oldest_unsettled_record() {
        let dir = tempfile::tempdir().unwrap();
        let (ch, be) = channel(dir.path(), 0);
        ch.put([msg(0), msg(1), msg(2)]).unwrap();
        assert_eq!(be.watermark(), None);
        let got = take(&ch, 3);
        assert_eq!(got.len(), 3);
        assert_eq!(be.watermark(), Some(pos(0)));
        ch.finish(1, &msg(1).id).unwrap();
        assert_eq!(be.watermark(), Some(pos(0)));
        ch.finish(1, &msg(0).id).unwrap();
        assert_eq!(be.watermark(), Some(pos(2)));
        ch.finish(1, &msg(2).id).unwrap();
        assert_eq!(be.watermark(), None, "everything settled");
    }

    proptest::proptest! {
        /// The window behaves as the map of unsettled records it replaced: same watermark
        /// after any sequence of in-order reads and settles in any order.
        #[test]
        fn read_tracker_matches_a_map(ops in proptest::collection::vec((proptest::bool::ANY, 0usize..64), 1..400)) {
            let mut t = ReadTracker::default();
            let mut model: std::collections::BTreeMap<RecordPos, u32> = Default::default();
            let mut next = 0i64;
            for (is_read, k) in ops {
                if is_read {
                    let p = RecordPos { file_num: next / 10, offset: next % 10 };
                    next += 1;
                    t.read(p);
                    *model.entry(p).or_insert(0) += 1;
                } else if !model.is_empty() {
                    let p = *model.keys().nth(k % model.len()).unwrap();
                    t.settle(p);
                    let n = model.get_mut(&p).unwrap();
                    *n -= 1;
                    if *n == 0 {
                        model.remove(&p);
                    }
                }
                let expect = model.keys().next().copied();
                proptest::prop_assert_eq!(t.watermark(), Some(expect));
                proptest::prop_assert!(t.window.len() <= (next as usize).max(1));
            }
        }
    }

    #[test]
    fn finish_many_settles_like_finish() {
        let dir = tempfile::tempdir().unwrap();
        let (ch, be) = channel(dir.path(), 0);
        ch.put([msg(0), msg(1), msg(2)]).unwrap();
        take(&ch, 3);
        let mut failed = Vec::new();
        assert_eq!(ch.finish_many(1, &[msg(1).id, msg(0).id], &mut failed), 2);
        assert!(failed.is_empty());
        assert_eq!(be.watermark(), Some(pos(2)));
        assert_eq!(ch.finish_many(1, &[msg(2).id], &mut failed), 1);
        assert_eq!(be.watermark(), None, "everything settled");
    }

    #[test]
    fn requeue_rewrites_then_settles_the_old_record() {
        let dir = tempfile::tempdir().unwrap();
        let (ch, be) = channel(dir.path(), 0);
        ch.put([msg(0), msg(1)]).unwrap();
        take(&ch, 2);
        ch.requeue(1, &msg(0).id, Duration::ZERO).unwrap();
        // msg(0) is on disk again as record 2; record 0 is settled, record 1 still in flight.
        assert_eq!(be.watermark(), Some(pos(1)));
        assert_eq!(be.depth(), 1);
        ch.finish(1, &msg(1).id).unwrap();
        let again = take(&ch, 1);
        assert_eq!(again[0].id, msg(0).id);
        assert_eq!(again[0].attempts, 2);
        assert_eq!(be.watermark(), Some(pos(2)));
    }

    #[test]
    fn a_failed_rewrite_keeps_the_message_and_its_record() {
        let dir = tempfile::tempdir().unwrap();
        let (ch, be) = channel(dir.path(), 0);
        ch.put([msg(0)]).unwrap();
        take(&ch, 1);
        be.set_fail(true);
        ch.requeue(1, &msg(0).id, Duration::ZERO).unwrap();
        // Kept in memory beyond the memory-queue size, record 0 still unsettled.
        assert_eq!(ch.depth(), 1);
        assert_eq!(be.watermark(), Some(pos(0)));
        let again = take(&ch, 1);
        assert_eq!(again[0].id, msg(0).id);
        ch.finish(1, &msg(0).id).unwrap();
        assert_eq!(be.watermark(), None);
        assert_eq!(ch.depth(), 0);
    }

    #[test]
    fn a_refused_put_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let (ch, be) = channel(dir.path(), 2);
        be.set_fail(true);
        assert!(ch.put([msg(0), msg(1), msg(2)]).is_err());
        assert_eq!(ch.depth(), 0, "not even the two that fit in memory");
        be.set_fail(false);
        ch.put([msg(0), msg(1), msg(2)]).unwrap();
        assert_eq!((ch.depth(), be.depth()), (3, 1));
    }

    #[test]
    fn deferred_messages_survive_a_crash_and_leave_no_journal_after_close() {
        let dir = tempfile::tempdir().unwrap();
        let journal = DeferredStore::path_for(dir.path(), "t:c");
        {
            let (ch, _be) = channel(dir.path(), 0);
            let mut m = msg(7);
            m.defer_ms = 3_600_000;
            ch.receive(&[m], &mut PutReceipt::default()).unwrap();
            ch.put([msg(1)]).unwrap();
            take(&ch, 1);
            ch.requeue(1, &msg(1).id, Duration::from_secs(3600))
                .unwrap();
            assert_eq!(ch.stats().deferred_count, 2);
            // Dropped without close: a crash.
        }
        let (ch, be) = channel(dir.path(), 0);
        assert_eq!(ch.stats().deferred_count, 2, "replayed from the journal");
        ch.close().unwrap();
        assert_eq!(be.depth(), 2, "flushed into the backend");
        assert!(!journal.exists(), "journal removed after a clean close");
    }

    #[test]
    fn a_due_deferred_message_is_removed_from_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (ch, be) = channel(dir.path(), 0);
            let mut m = msg(7);
            m.defer_ms = 1;
            ch.receive(&[m], &mut PutReceipt::default()).unwrap();
            assert!(ch.process_deferred(Instant::now() + Duration::from_secs(1)));
            assert_eq!(be.depth(), 1);
        }
        let (ch, _) = channel(dir.path(), 0);
        assert_eq!(ch.stats().deferred_count, 0);
    }
}
