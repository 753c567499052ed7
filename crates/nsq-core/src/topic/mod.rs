//! A topic: accepts published messages and fans each one out to every channel.
//!
//! Fast path: when the topic has channels, is not paused and has no backlog, a publish hands
//! its batch straight to every channel (a shared-`Bytes` clone per channel, no copy, no task).
//! Otherwise messages queue in the topic (memory, then backend) and a pump task drains the
//! backlog once there is somewhere to send it — the reference's "depth accumulates in the
//! topic until a channel exists / the topic is unpaused".
//!
//! [`state::TopicState`] makes those decisions without locks or I/O; `Topic` applies them
//! under its lock and carries out the effects: publishing here, the pump and fan-out in
//! `pump.rs`, channels, administration and stats in `admin.rs`, adopting taken-over
//! messages in `adopt.rs`, its part of a replication catch-up in `catchup.rs`. A topic must
//! be used inside a Tokio runtime: its pump is a task.

mod admin;
mod adopt;
mod catchup;
pub mod dead_letters;
mod pump;
mod state;

pub(crate) use catchup::TopicDisk;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::backend::{BackendError, BackendQueue};
use crate::channel::{Bound, Bounds, Channel};
use crate::engine::Engine;
use crate::message::{now_nanos, GuidFactory, Message};
use crate::options::{Health, Options};
use crate::queue_settings::QueueSettings;
use crate::receipt::PutReceipt;
use crate::replicator::Replicator;
use crate::reserve::Reserve;
use pump::fan_out_owned;
use state::{Gate, Publish, TopicState};

/// Everything the topic lock protects.
struct State {
    channels: BTreeMap<String, Arc<Channel>>,
    /// Snapshot of `channels` for fan-out without holding the lock.
    fanout: Arc<[Arc<Channel>]>,
    queue: TopicState<Arc<Channel>>,
}

/// Why a publish was refused (`E_PUB_FAILED PUB failed <reason>`).
pub type PutError = BackendError;

/// A point-in-time view of a topic for `/stats`.
#[derive(Clone)]
pub struct TopicStats {
    pub name: String,
    pub depth: i64,
    pub backend_depth: i64,
    pub message_count: u64,
    pub message_bytes: u64,
    pub paused: bool,
    /// Ours: messages of the topic's own queue dropped by `overflow=drop_oldest`
    /// (crate::queue_settings).
    pub dropped_count: u64,
    pub channels: Vec<Arc<Channel>>,
}

/// One topic.
pub struct Topic {
    name: String,
    ephemeral: bool,
    engine: Weak<Engine>,
    opts: Arc<Options>,
    health: Arc<Health>,
    backend: Arc<dyn BackendQueue>,
    /// Disk space memory must fit in, shared by the engine's topics and channels.
    reserve: Option<Arc<Reserve>>,
    state: Mutex<State>,
    guid: Mutex<GuidFactory>,
    message_count: AtomicU64,
    message_bytes: AtomicU64,
    paused: AtomicBool,
    /// False while metadata is loading: nothing leaves the topic until all its channels exist
    /// (the reference's "start" step), so a persisted backlog reaches every channel.
    started: AtomicBool,
    exiting: AtomicBool,
    /// Read-held by the pump and by direct fan-out while a batch is between the topic and its
    /// channels; close/delete/empty write-lock it, so no acknowledged batch is half delivered
    /// when the channels close.
    pub(crate) pump_lock: Arc<RwLock<()>>,
    /// Replication (crate::replicator); `None` when off and for an ephemeral topic.
    repl: Option<Arc<dyn Replicator>>,
    /// This topic's own queue settings (crate::queue_settings).
    settings: RwLock<QueueSettings>,
    /// A `max_depth` or `max_bytes` with `overflow=refuse` applies to this topic or one of
    /// its channels (its own or the node's default): publishes check the bounds
    /// (`Topic::refresh_settings`). False costs nothing.
    bounded: AtomicBool,
    /// Where this topic's dead letters came from (`dead_letters.rs`).
    dead_letter_origins: Mutex<dead_letters::Origins>,
    /// This topic's own effective `max_depth` and `max_bytes` (`channel/bound.rs`).
    bounds: Bounds,
    /// Messages of the topic's own queue dropped by `overflow=drop_oldest`.
    dropped_count: AtomicU64,
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic").field("name", &self.name).finish()
    }
}

impl Topic {
    // The engine's shared pieces, one argument each; both callers are in this crate.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        name: &str,
        engine: Weak<Engine>,
        opts: Arc<Options>,
        health: Arc<Health>,
        backend: Arc<dyn BackendQueue>,
        started: bool,
        reserve: Option<Arc<Reserve>>,
        repl: Option<Arc<dyn Replicator>>,
    ) -> Arc<Self> {
        // A backlog left on disk by a previous run must be pumped before new messages.
        let ephemeral = nsq_protocol::names::is_ephemeral(name);
        let queue = TopicState::new(opts.mem_queue_size, !ephemeral, backend.depth());
        let defaults = &opts.queue_defaults;
        let bounded_default = defaults.max_depth.is_some() || defaults.max_bytes.is_some();
        let topic = Arc::new(Topic {
            name: name.to_string(),
            ephemeral,
            engine,
            guid: Mutex::new(GuidFactory::new(opts.node_id)),
            opts,
            health,
            backend,
            reserve,
            state: Mutex::new(State {
                channels: BTreeMap::new(),
                fanout: Arc::from(Vec::new()),
                queue,
            }),
            message_count: AtomicU64::new(0),
            message_bytes: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            started: AtomicBool::new(started),
            exiting: AtomicBool::new(false),
            pump_lock: Arc::new(RwLock::new(())),
            repl,
            settings: RwLock::new(QueueSettings::default()),
            bounded: AtomicBool::new(bounded_default),
            dead_letter_origins: Mutex::default(),
            bounds: Bounds::default(),
            dropped_count: AtomicU64::new(0),
        });
        topic.apply_own_settings();
        topic
    }

    /// The IDs pending on the topic itself (its memory queue, a stalled batch, the unread
    /// records of its diskqueue), read under the pump lock as a catch-up does; `Err` if the
    /// diskqueue could not be read. Blocking. (Replication's Return, `channel/skips.rs`.)
    pub(crate) fn pending_ids(
        &self,
    ) -> Result<rustc_hash::FxHashSet<nsq_protocol::MessageId>, BackendError> {
        let _guard = self.pump_lock.write();
        let mut ids = rustc_hash::FxHashSet::default();
        {
            let st = self.state.lock();
            let (mem, stalled) = st.queue.queued();
            ids.extend(mem.map(|m| m.id));
            if let Some(b) = stalled {
                ids.extend(b.msgs.iter().map(|m| m.id));
            }
        }
        self.backend.scan_unread(&mut |payload| {
            if let Ok(m) = Message::decode(payload) {
                ids.insert(m.id);
            }
        })?;
        Ok(ids)
    }

    /// The replicator, when this topic is replicated.
    pub(crate) fn replicator(&self) -> Option<&Arc<dyn Replicator>> {
        self.repl.as_ref()
    }

    pub fn name(&self) -> &str {
        &self.name
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

    // ---- publishing ---------------------------------------------------------------------

    /// Publishes one message (PUB, `/pub`); `defer` zero for an immediate one.
    pub fn put(self: &Arc<Self>, body: Bytes, defer: Duration) -> Result<PutReceipt, PutError> {
        self.put_many(std::iter::once(body), defer)
    }

    /// Publishes a batch in order (MPUB, `/mpub`): each message gets its own ID and timestamp.
    ///
    /// `Ok` means every message is stored: in the topic's queue, or (fast path) in every
    /// channel. With `Options::durable` the receipt lists the writes to await before the OK.
    /// `Err` means the publish is refused; nothing of it is stored in the topic, though a
    /// channel may already hold a copy (at-least-once: the publisher retries).
    pub fn put_many(
        self: &Arc<Self>,
        bodies: impl IntoIterator<Item = Bytes>,
        defer: Duration,
    ) -> Result<PutReceipt, PutError> {
        let defer_ms = u32::try_from(defer.as_millis()).unwrap_or(u32::MAX);
        let msgs = self.mint(bodies, defer_ms);
        self.put_minted(msgs)
    }

    /// New messages of this topic: a new ID each, one timestamp (now), attempts 0.
    pub fn mint(&self, bodies: impl IntoIterator<Item = Bytes>, defer_ms: u32) -> Vec<Message> {
        let mut g = self.guid.lock();
        let ts = now_nanos();
        bodies
            .into_iter()
            .map(|body| Message {
                id: g.new_id_at(ts),
                timestamp: ts,
                attempts: 0,
                body,
                defer_ms,
            })
            .collect()
    }

    /// Publishes messages made by [`Topic::mint`] (one deferral), as [`Topic::put_many`].
    fn put_minted(self: &Arc<Self>, msgs: Vec<Message>) -> Result<PutReceipt, PutError> {
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        if msgs.is_empty() {
            return Ok(PutReceipt::default());
        }
        let defer_ms = msgs[0].defer_ms;
        // A client's publish only: messages adopted in a takeover (`adopt.rs`) were
        // acknowledged elsewhere and are never refused.
        if self.bounded.load(Ordering::Acquire) {
            let bytes = msgs.iter().map(Message::record_len).sum();
            self.check_bounds(msgs.len(), bytes)?;
        }
        let ts = msgs[0].timestamp;
        let due = if defer_ms == 0 {
            0
        } else {
            ts.saturating_add(i64::from(defer_ms) * 1_000_000)
        };
        self.put_built(msgs, due)
    }

    /// Stores built messages (one deferral, `due` its Unix ns, 0 for none) as a publish does.
    fn put_built(self: &Arc<Self>, msgs: Vec<Message>, due: i64) -> Result<PutReceipt, PutError> {
        let mut receipt = PutReceipt::default();
        if msgs.is_empty() {
            return Ok(receipt);
        }
        let bytes: u64 = msgs.iter().map(|m| m.body.len() as u64).sum();
        let total = msgs.len();
        // Replicated: the PUB frame's messages are encoded before the lock is taken.
        let encoded = self.repl.as_ref().map(|r| r.encode_messages(&msgs));

        let _fanout_guard = self.pump_lock.read();
        let reserve = self.reserve.as_deref();
        let mut admit = |m: &[Message]| {
            reserve.is_none_or(|r| r.admit(m.iter().map(Message::record_len).sum()))
        };
        let (publish, chans) = {
            let mut st = self.state.lock();
            if self.is_exiting() {
                return Err(BackendError::Exiting);
            }
            let gate = self.gate(&st);
            let publish = st.queue.publish(msgs, gate, &mut admit);
            if let (Some(r), Some(enc)) = (&self.repl, encoded) {
                // Under the lock: the PUB frame is in the log before the pump or a consumer
                // can act on these messages.
                let direct = matches!(publish, Publish::Direct(_)).then_some(&st.fanout[..]);
                receipt.set_replication_seq(r.publish(&self.name, due, direct, enc));
            }
            (publish, st.fanout.clone())
        };
        match publish {
            Publish::Direct(msgs) => {
                let failed = fan_out_owned(&chans, msgs, &mut receipt);
                if let Some((_, e)) = failed.into_iter().next() {
                    return Err(e);
                }
                self.count(total, bytes);
                return Ok(receipt);
            }
            Publish::Memory => {}
            Publish::Write { mem, disk } => {
                let result = self
                    .backend
                    .put_batch(disk.len(), &mut |i, out| disk[i].encode_into(out));
                self.health.record(&result);
                {
                    let mut st = self.state.lock();
                    let empty = result.is_err() && self.backend.depth() <= 0;
                    st.queue.write_done(mem, result.is_ok(), empty);
                }
                match result {
                    Ok(t) if self.opts.durable => receipt.backend(&self.backend, t),
                    Ok(_) => {}
                    Err(e) => {
                        drop(_fanout_guard);
                        tracing::error!(topic = %self.name, "failed to write message to backend - {e}");
                        self.ensure_pump();
                        return Err(e);
                    }
                }
            }
        }
        drop(_fanout_guard);
        self.count(total, bytes);
        self.trim_to_bound();
        self.ensure_pump();
        Ok(receipt)
    }

    /// The facts the state decides with, read under the lock.
    fn gate(&self, st: &State) -> Gate {
        Gate {
            paused: self.is_paused(),
            started: self.started.load(Ordering::Acquire),
            exiting: self.is_exiting(),
            has_channels: !st.fanout.is_empty(),
        }
    }

    fn count(&self, n: usize, bytes: u64) {
        self.message_count.fetch_add(n as u64, Ordering::Relaxed);
        self.message_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Lets messages flow to channels (after metadata loading created them all).
    pub fn start(self: &Arc<Self>) {
        self.started.store(true, Ordering::Release);
        self.ensure_pump();
    }
}

// ---- queue settings (crate::queue_settings) ----------------------------------------------

impl Topic {
    /// This topic's own settings (not the node's defaults).
    pub fn settings(&self) -> QueueSettings {
        self.settings.read().clone()
    }

    /// Replaces this topic's own settings; a change is replicated (ADMIN op 6), so that a
    /// takeover of this topic's messages carries them.
    pub fn set_settings(&self, s: QueueSettings) {
        let pairs = s.to_pairs();
        let changed = std::mem::replace(&mut *self.settings.write(), s).to_pairs() != pairs;
        if let (Some(r), true) = (&self.repl, changed) {
            r.settings(&self.name, "", pairs);
        }
        self.refresh_settings();
    }

    /// Recomputes what follows from the settings of this topic, its channels and the node:
    /// this topic's bounds and memory queue size, whether publishes check bounds, and each
    /// channel's effective TTL, bounds and memory queue size. Call after a channel's settings
    /// change.
    pub fn refresh_settings(&self) {
        let channels: Vec<Arc<Channel>> = self.state.lock().channels.values().cloned().collect();
        for c in &channels {
            self.apply_channel_settings(c);
        }
        let own = self.apply_own_settings();
        let bounded = own || channels.iter().any(|c| c.refuse_bound().is_some());
        self.bounded.store(bounded, Ordering::Release);
    }

    /// Gives this topic its effective bounds and memory queue size; returns whether it has a
    /// bound that refuses.
    fn apply_own_settings(&self) -> bool {
        let own = self.settings.read().clone();
        let get = |key| {
            crate::queue_settings::effective(key, &self.name, &own, None, &self.opts.queue_defaults)
                .0
        };
        let (refuse, drop) = bounds(get);
        self.bounds.set(refuse, drop);
        let mem = mem_queue_size(&self.opts, own.mem_queue_size);
        self.state.lock().queue.set_mem_queue_size(mem);
        !refuse.is_none()
    }

    /// Gives channel `c` of this topic its effective TTL, max attempts and dead-letter topic
    /// (its own, its topic's where a key is passed down, the node's).
    pub(crate) fn apply_channel_settings(&self, c: &Channel) {
        use crate::queue_settings::{effective, Key, Value};
        let own = c.settings();
        let topic_own = self.settings.read().clone();
        let get = |key| {
            effective(
                key,
                &self.name,
                &topic_own,
                Some(&own),
                &self.opts.queue_defaults,
            )
            .0
        };
        c.set_ttl(match get(Key::Ttl) {
            Some(Value::Ttl(d)) => Some(d),
            _ => None,
        });
        c.set_max_attempts(match get(Key::MaxAttempts) {
            Some(Value::MaxAttempts(n)) => Some(n),
            _ => None,
        });
        c.set_dead_letter_topic(match get(Key::DeadLetterTopic) {
            Some(Value::DeadLetterTopic(t)) => Some(t),
            _ => None,
        });
        let (refuse, drop) = bounds(get);
        c.set_bound(refuse, drop);
        c.set_mem_queue_size(mem_queue_size(&self.opts, own.mem_queue_size));
    }

    /// Refuses a publish of `n` messages of `bytes` record bytes that would pass the
    /// `max_depth` or `max_bytes` (with `overflow=refuse`) of this topic or of one of its
    /// channels (a channel's depth and bytes count what waits in the topic too: the pump
    /// hands it to every channel). Checked before the publish takes the topic's lock, so
    /// publishes running at once can each pass it: a queue exceeds its bound by at most what
    /// was being published concurrently.
    fn check_bounds(&self, n: usize, bytes: u64) -> Result<(), BackendError> {
        let n = n as u64;
        // One lock for the topic's memory queue and its channels.
        let (mem, mem_bytes, chans) = {
            let st = self.state.lock();
            (st.queue.mem_len(), st.queue.mem_bytes(), st.fanout.clone())
        };
        let topic_depth = mem as u64 + u64::try_from(self.backend.depth()).unwrap_or(0);
        let topic_bytes = mem_bytes + self.backend.unread_bytes();
        let own = self.bounds.refuse().unwrap_or_default();
        let full = || Err(BackendError::Full(self.name.clone()));
        if own.passed(topic_depth + n, topic_bytes + bytes) {
            return full();
        }
        for c in chans.iter() {
            if let Some(b) = c.refuse_bound() {
                let (depth, queued) = c.queued();
                if b.passed(depth + topic_depth + n, queued + topic_bytes + bytes) {
                    return full();
                }
            }
        }
        Ok(())
    }

    /// Messages dropped from this topic's own queue by `overflow=drop_oldest`.
    pub fn dropped_count(&self) -> u64 {
        self.dropped_count.load(Ordering::Relaxed)
    }

    /// After a publish that queued in the topic: with `overflow=drop_oldest`, drops what the
    /// topic's own queue holds past its `max_depth` or `max_bytes`, oldest first (memory,
    /// then the unread disk records; a batch already on its way to the channels is not
    /// touched), until both hold, counted and logged. A topic queues only while it has no
    /// channel, is paused, or has a backlog its pump is moving. Returns how many.
    fn trim_to_bound(&self) -> usize {
        let Some(bound) = self.bounds.drop_bound() else {
            return 0;
        };
        // No pump step meanwhile: it reads the backend and hands batches over under this.
        let _pump = self.pump_lock.write();
        let mut st = self.state.lock();
        let depth = st.queue.mem_len() as u64 + u64::try_from(self.backend.depth()).unwrap_or(0);
        let bytes = st.queue.mem_bytes() + self.backend.unread_bytes();
        let Some((want_n, want_b)) = bound.excess(depth, bytes) else {
            return 0;
        };
        let (mut dropped, mut dropped_b, mut more) = st.queue.discard_front(want_n, want_b);
        let mut count = dropped.len();
        // The rest from the backend: by count in one read, by bytes one record at a time.
        while more && (count < want_n || dropped_b < want_b) {
            let asked = if dropped_b < want_b {
                1
            } else {
                want_n - count
            };
            let mut raw = Vec::with_capacity(asked);
            let got = self.backend.read_batch(asked, &mut raw);
            count += got;
            for payload in raw {
                dropped_b += 4 + payload.len() as u64;
                if let Ok(m) = Message::decode(payload) {
                    dropped.push(m);
                }
            }
            more = got == asked;
        }
        if let (Some(r), false) = (&self.repl, dropped.is_empty()) {
            // They leave the topic for no channel: the replicas drop their copies.
            r.fanout(&self.name, &[], &dropped);
        }
        drop(st);
        if count > 0 {
            self.dropped_count
                .fetch_add(count as u64, Ordering::Relaxed);
            tracing::info!(
                "TOPIC({}): dropped the {count} oldest messages ({}, overflow drop_oldest)",
                self.name,
                bound.describe()
            );
        }
        count
    }
}

/// The bounds that refuse and the bounds that drop, from a queue's effective settings.
fn bounds(
    get: impl Fn(crate::queue_settings::Key) -> Option<crate::queue_settings::Value>,
) -> (Bound, Bound) {
    use crate::queue_settings::{Key, Overflow, Value};
    let b = Bound {
        depth: match get(Key::MaxDepth) {
            Some(Value::MaxDepth(n)) => n,
            _ => 0,
        },
        bytes: match get(Key::MaxBytes) {
            Some(Value::MaxBytes(n)) => n,
            _ => 0,
        },
    };
    match get(Key::Overflow) {
        Some(Value::Overflow(Overflow::DropOldest)) => (Bound::default(), b),
        _ => (b, Bound::default()),
    }
}

/// A queue's memory queue size: its own `mem_queue_size`, else the node's
/// `--mem-queue-size`. A node whose is 0 (`--mem-queue-size=0`, `--durable`) keeps every
/// queue at 0: it promises that everything it holds is on disk.
fn mem_queue_size(opts: &Options, own: Option<u64>) -> usize {
    if opts.mem_queue_size == 0 {
        return 0;
    }
    own.map_or(opts.mem_queue_size, |n| {
        usize::try_from(n).unwrap_or(usize::MAX)
    })
}
