//! A channel: one subscriber group's copy of a topic's stream.
//!
//! Two layers:
//! - [`state::ChannelState`] decides everything — where a message goes (memory queue, backend,
//!   in flight, deferred), when a record read from the backend is settled, what the read
//!   watermark is — as a synchronous state machine without locks, I/O or tokio; `model/`
//!   checks it against a reference model through random interleavings and crashes.
//! - [`Channel`] (this file) is its driver: it applies one event to the state under one
//!   `parking_lot::Mutex`, then carries out the effects the state returned — backend writes,
//!   journal entries, waking consumers. A take's backend read is done under the lock (the
//!   watermark's contract needs it, see `state/mod.rs`). The one effect carried out before the lock
//!   is released is handing the read watermark to the backend (cheap, no I/O), so watermarks
//!   reach the backend in the order the state produced them ([`Locked`]).
//!
//! docs/durability.md explains the crash-safety design; [`crate::inflight`],
//! [`crate::deferred`] and [`crate::deferred_store`] hold the in-flight set, the deferred set
//! and the durable deferred journal. The reference's counterpart is nsqd/channel.go.

mod admin;
mod bound;
mod catchup;
mod deliver;
mod enter;
mod journal;
mod peek;
mod reads;
mod skips;
mod state;

pub use bound::Bound;
pub(crate) use bound::Bounds;
pub use peek::{PeekState, Peeked};
pub use skips::Returning;

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::BackendQueue;
use crate::client_stats::ClientStats;
use crate::deferred_store::DeferredStore;
use crate::e2e::E2eLatency;
pub use crate::inflight::FinishError;
use crate::message::now_nanos;
use crate::options::{Health, Options};
use crate::replicator::Replicator;
use crate::reserve::Reserve;
use state::{ChannelState, Config, Now};

/// The consumer ID a message at its max attempts is in flight for while its copy goes to the
/// dead-letter topic (no client gets this ID: nsqd numbers them from 1).
pub const DEAD_LETTER_CLIENT: u64 = u64::MAX;

/// The consumer ID a message is in flight for while a redrive (nsqd's `POST
/// /channel/redrive`) moves it to another queue: FINed once it is stored there.
pub const REDRIVE_CLIENT: u64 = u64::MAX - 1;

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

/// How long [`Channel::lock_settled`] waits for the channel's outstanding backend writes
/// (a write is one `write` syscall of a batch: far longer means a stuck disk).
const SETTLE_WAIT: std::time::Duration = if cfg!(test) {
    std::time::Duration::from_millis(300)
} else {
    std::time::Duration::from_secs(10)
};

/// Everything the channel lock protects.
struct Inner {
    state: ChannelState,
    consumers: Vec<Arc<dyn Consumer>>,
}

/// The channel lock held: on release, a changed read watermark is handed to the backend.
struct Locked<'a> {
    guard: MutexGuard<'a, Inner>,
    backend: &'a dyn BackendQueue,
}

impl std::ops::Deref for Locked<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Some(wm) = self.guard.state.watermark_change() {
            self.backend.set_read_watermark(wm);
        }
    }
}

/// Counters that `/stats` reads without taking the lock.
#[derive(Default)]
struct Counters {
    message_count: AtomicU64,
    requeue_count: AtomicU64,
    timeout_count: AtomicU64,
    /// Messages not delivered because they were older than the channel's TTL.
    expired_count: AtomicU64,
    /// Messages not delivered again because they reached the channel's max attempts.
    dead_lettered_count: AtomicU64,
    /// Queued messages dropped by `overflow=drop_oldest`.
    dropped_count: AtomicU64,
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
    /// Ours: messages that expired (crate::queue_settings, `ttl`).
    pub expired_count: u64,
    /// Ours: messages that reached `max_attempts` (crate::queue_settings).
    pub dead_lettered_count: u64,
    /// Ours: queued messages dropped by `overflow=drop_oldest` (crate::queue_settings).
    pub dropped_count: u64,
    pub paused: bool,
    pub consumers: Vec<Arc<dyn Consumer>>,
}

/// What a channel is given of its topic and engine when the topic creates it. No reference
/// to the topic itself: as in NSQ, where a channel knows its topic only through the
/// `deleteCallback` the topic passes to `NewChannel` (nsqd/channel.go), so the channel code
/// does not depend on the topic's.
pub(crate) struct Parent {
    /// Removes this channel from its topic: an ephemeral channel left without consumers
    /// (NSQ's `deleteCallback`). Does nothing once the topic is gone.
    pub(crate) delete: Box<dyn Fn(&Channel) + Send + Sync>,
    /// The topic's pump lock (`Topic::pump_lock`): emptying a replicated channel holds it so
    /// that no batch of the topic reaches the channel meanwhile.
    pub(crate) pump_lock: Arc<RwLock<()>>,
    /// The engine's delivery hold and skip set (replication's Return, `returning.rs`).
    pub(crate) returning: Option<Arc<Returning>>,
    /// Publishes bodies to a topic by name (created if need be): a dead-letter topic, which
    /// keeps where each came from (`topic/dead_letters.rs`).
    pub(crate) publish: DeadLetterPublish,
}

/// How a channel publishes to its dead-letter topic (`Parent::publish`).
pub(crate) type DeadLetterPublish = Box<
    dyn Fn(
            &str,
            Vec<(bytes::Bytes, crate::topic::dead_letters::DeadLetterOrigin)>,
        ) -> Result<crate::receipt::PutReceipt, crate::BackendError>
        + Send
        + Sync,
>;

impl Parent {
    /// No topic: a channel made on its own (tests).
    #[cfg(test)]
    pub(crate) fn none() -> Parent {
        Parent {
            delete: Box::new(|_| {}),
            pump_lock: Arc::new(RwLock::new(())),
            returning: None,
            publish: Box::new(|_, _| Err(crate::BackendError::Exiting)),
        }
    }
}

/// One channel of a topic.
pub struct Channel {
    topic_name: String,
    name: String,
    ephemeral: bool,
    parent: Parent,
    opts: Arc<Options>,
    health: Arc<Health>,
    backend: Arc<dyn BackendQueue>,
    /// The durable deferred journal: present for a non-ephemeral channel with a memory queue of
    /// 0 (`--mem-queue-size=0` or `--durable`), where everything the channel holds is on disk.
    store: Option<Arc<DeferredStore>>,
    /// Disk space memory must fit in (see [`crate::reserve`]); `None`: memory is unbounded
    /// by it (tests, tools) or the channel is ephemeral.
    reserve: Option<Arc<Reserve>>,
    inner: Mutex<Inner>,
    counters: Counters,
    paused: AtomicBool,
    exiting: AtomicBool,
    /// Set once an ephemeral channel starts deleting itself.
    deleting: AtomicBool,
    /// Wakes consumer delivery loops: new messages, unpause.
    notify: Notify,
    /// Signalled when a backend write completes (see [`Channel::lock_settled`]).
    writes_done: Condvar,
    e2e: E2eLatency,
    /// Replication (crate::replicator); `None` when off and for an ephemeral channel.
    repl: Option<Arc<dyn Replicator>>,
    /// This channel's own queue settings (crate::queue_settings).
    settings: RwLock<crate::queue_settings::QueueSettings>,
    /// The effective TTL in nanoseconds (its own, its topic's or the node's; 0: none), set
    /// by the topic (`Topic::refresh_settings`).
    ttl_ns: AtomicU64,
    /// The effective `max_attempts` (its own or the node's; 0: none), set by the topic.
    max_attempts: std::sync::atomic::AtomicU32,
    /// The effective `dead_letter_topic` (its own or the node's, never its own topic), set
    /// by the topic.
    dead_letter_topic: RwLock<Option<String>>,
    /// Itself, for the task that finishes a dead-letter hand-off.
    me: std::sync::Weak<Channel>,
    /// The effective `max_depth` and `max_bytes` (`bound.rs`), set by the topic.
    bounds: bound::Bounds,
}

impl std::fmt::Debug for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("topic", &self.topic_name)
            .field("name", &self.name)
            .finish()
    }
}

/// The clocks the state is given: Tokio's (paused in tests) and the wall clock.
fn now() -> Now {
    Now {
        mono: Instant::now().into_std(),
        wall: now_nanos(),
    }
}

impl Channel {
    // The engine's shared pieces, one argument each; both callers are in this crate.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        parent: Parent,
        topic_name: &str,
        name: &str,
        opts: Arc<Options>,
        health: Arc<Health>,
        backend: Arc<dyn BackendQueue>,
        reserve: Option<Arc<Reserve>>,
        repl: Option<Arc<dyn Replicator>>,
    ) -> Arc<Self> {
        // An #ephemeral channel has the drop-sink backend (nsqd/channel.go, NewChannel).
        let durable = !nsq_protocol::names::is_ephemeral(name);
        let e2e = E2eLatency::new(&opts.e2e_percentiles, opts.e2e_window);
        let mut replayed = Vec::new();
        let store = if durable && opts.mem_queue_size == 0 {
            let path = DeferredStore::path_for(&opts.data_path, &format!("{topic_name}:{name}"));
            match DeferredStore::open(path) {
                Ok((store, r)) => {
                    if !r.is_empty() {
                        tracing::info!(topic = %topic_name, channel = %name, "restored {} deferred messages", r.len());
                    }
                    replayed = r;
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
        let cfg = Config {
            mem_queue_size: opts.mem_queue_size,
            durable,
            journaled: store.is_some(),
            max_msg_timeout: opts.max_msg_timeout,
        };
        // A backlog left on disk by a previous run is older than anything new: read it first.
        let state = ChannelState::recover(cfg, backend.depth(), replayed, now());
        Arc::new_cyclic(|me| Channel {
            topic_name: topic_name.to_string(),
            name: name.to_string(),
            ephemeral: !durable,
            parent,
            opts,
            health,
            backend,
            store,
            reserve: reserve.filter(|_| durable),
            inner: Mutex::new(Inner {
                state,
                consumers: Vec::new(),
            }),
            counters: Counters::default(),
            paused: AtomicBool::new(false),
            exiting: AtomicBool::new(false),
            deleting: AtomicBool::new(false),
            notify: Notify::new(),
            writes_done: Condvar::new(),
            e2e,
            repl,
            settings: RwLock::new(Default::default()),
            ttl_ns: AtomicU64::new(0),
            max_attempts: std::sync::atomic::AtomicU32::new(0),
            dead_letter_topic: RwLock::new(None),
            me: me.clone(),
            bounds: bound::Bounds::default(),
        })
    }

    /// Takes the channel lock (see [`Locked`]).
    fn lock(&self) -> Locked<'_> {
        Locked {
            guard: self.inner.lock(),
            backend: &*self.backend,
        }
    }

    /// The channel lock once no backend write of the channel is outstanding (a message being
    /// written is in no queue meanwhile): readers that must see every message in exactly
    /// one place (a replication catch-up, a returning origin's skip set) take it. Waits on
    /// [`Channel::writes_done`], signalled as each write completes, for at most
    /// [`SETTLE_WAIT`]; `None` if writes were still outstanding then (a stuck disk): the
    /// caller fails rather than read a view that misses messages. Blocking.
    fn lock_settled(&self) -> Option<Locked<'_>> {
        let deadline = std::time::Instant::now() + SETTLE_WAIT;
        let mut g = self.lock();
        while g.state.writes_outstanding() {
            if self
                .writes_done
                .wait_until(&mut g.guard, deadline)
                .timed_out()
            {
                return (!g.state.writes_outstanding()).then_some(g);
            }
        }
        Some(g)
    }

    /// A backend write of the channel completed (its state was told, under the lock just
    /// released): wakes [`Channel::lock_settled`].
    fn write_completed(&self) {
        self.writes_done.notify_all();
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
}
