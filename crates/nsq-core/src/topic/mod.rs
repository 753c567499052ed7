//! A topic: accepts published messages and fans each one out to every channel.
//!
//! Fast path: when the topic has channels, is not paused and has no backlog, a publish hands
//! its batch straight to every channel (a shared-`Bytes` clone per channel, no copy, no task).
//! Otherwise messages queue in the topic (memory, then backend) and a pump task drains the
//! backlog once there is somewhere to send it — the reference's "depth accumulates in the
//! topic until a channel exists / the topic is unpaused".
//!
//! [`state::TopicState`] makes those decisions without locks or I/O; `Topic` (this file)
//! applies them under its lock and carries out the effects. A topic must be used inside a
//! Tokio runtime: its pump is a task.

mod catchup;
mod state;

pub(crate) use catchup::TopicDisk;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::backend::{BackendError, BackendQueue, RecordPos};
use crate::channel::Channel;
use crate::engine::Engine;
use crate::message::{now_nanos, GuidFactory, Message};
use crate::options::{Health, Options};
use crate::receipt::PutReceipt;
use crate::replicate::Replicator;
use crate::reserve::Reserve;
use nsq_protocol::replication::AdminOp;
use state::{Batch, Gate, Publish, Pump, TopicState};

/// How long the pump waits before retrying a channel that refused a batch.
const PUMP_RETRY: Duration = Duration::from_millis(250);

/// What one pump step did.
enum PumpStep {
    /// Nothing to do (or nowhere to send it): `pumping` was cleared.
    Stop,
    /// A batch reached every channel; `receipt` holds the writes to wait for (durable mode).
    Moved(PutReceipt),
    /// A channel refused the batch; it is kept for a retry.
    Stalled,
}

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
    pub(crate) pump_lock: RwLock<()>,
    /// Replication (crate::replicate); `None` when off and for an ephemeral topic.
    repl: Option<Arc<dyn Replicator>>,
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
        Arc::new(Topic {
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
            pump_lock: RwLock::new(()),
            repl,
        })
    }

    /// The engine, while it exists.
    pub(crate) fn engine(&self) -> Option<Arc<Engine>> {
        self.engine.upgrade()
    }

    /// The IDs pending on the topic itself (its memory queue, a stalled batch, the unread
    /// records of its diskqueue), read under the pump lock as a catch-up does; `Err` if the
    /// diskqueue could not be read. Blocking. (Replication's Return, `channel/returning.rs`.)
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
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let defer_ms = u32::try_from(defer.as_millis()).unwrap_or(u32::MAX);
        let msgs: Vec<Message> = {
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
        };
        if msgs.is_empty() {
            return Ok(PutReceipt::default());
        }
        let ts = msgs[0].timestamp;
        let due = if defer_ms == 0 {
            0
        } else {
            ts.saturating_add(i64::from(defer_ms) * 1_000_000)
        };
        self.put_built(msgs, due)
    }

    /// Adopts messages taken over from another node's replica backlog (docs/replication.md,
    /// "Takeover", "Delivering"): each keeps its ID, timestamp and attempts, and waits its own
    /// `defer_ms` (what was left of its deferral). With `channel` they go straight into that
    /// channel of this topic (created if needed) — they were pending there at the origin;
    /// without, into the topic, to be fanned out to its channels like a publish.
    ///
    /// Replicated like a publish (one PUB frame per distinct deferral; the PUB lists the
    /// channel), so this node's own replicas hold what it adopted: the receipt's replication
    /// seq is the last frame's. Attempts are not in a PUB frame, so this node's replicas
    /// start them over. NSQ has no counterpart (a message never changes node there).
    pub fn adopt(
        self: &Arc<Self>,
        channel: Option<&str>,
        msgs: Vec<Message>,
    ) -> Result<PutReceipt, PutError> {
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let mut receipt = PutReceipt::default();
        for group in by_defer(msgs) {
            let defer_ms = group[0].defer_ms;
            let due = if defer_ms == 0 {
                0
            } else {
                now_nanos().saturating_add(i64::from(defer_ms) * 1_000_000)
            };
            let mut r = match channel {
                None => self.put_built(group, due)?,
                Some(name) => self.adopt_into_channel(name, group, due)?,
            };
            receipt.absorb(&mut r);
        }
        Ok(receipt)
    }

    fn adopt_into_channel(
        self: &Arc<Self>,
        name: &str,
        msgs: Vec<Message>,
        due: i64,
    ) -> Result<PutReceipt, PutError> {
        let (ch, _) = self.get_or_create_channel(name)?;
        let mut receipt = PutReceipt::default();
        if let (Some(r), false) = (&self.repl, ch.is_ephemeral()) {
            let encoded = r.encode_messages(&msgs);
            // Under the topic lock, as a direct publish: the PUB frame (listing the channel)
            // is in the log before a consumer can see the messages, so a FIN can only follow.
            let _st = self.state.lock();
            let seq = r.publish(&self.name, due, Some(std::slice::from_ref(&ch)), encoded);
            receipt.set_replication_seq(seq);
        }
        ch.receive(&msgs, &mut receipt)?;
        Ok(receipt)
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

    // ---- the pump -----------------------------------------------------------------------

    /// Starts the pump if there is a backlog (or a stalled batch) and somewhere to send it.
    fn ensure_pump(self: &Arc<Self>) {
        let start = {
            let mut st = self.state.lock();
            let gate = self.gate(&st);
            st.queue.start_pump(gate)
        };
        if start {
            tokio::spawn(self.clone().pump());
        }
    }

    async fn pump(self: Arc<Self>) {
        loop {
            match self.pump_batch() {
                PumpStep::Stop => return,
                PumpStep::Moved(receipt) => {
                    // Durable mode: the batch must be on disk in every channel before the
                    // topic's read watermark may pass it.
                    match receipt.durable().await {
                        Ok(()) => self.backend.set_read_watermark(None),
                        Err(e) => {
                            tracing::error!(topic = %self.name, "failed to sync messages moved to channels - {e}");
                            tokio::time::sleep(PUMP_RETRY).await;
                        }
                    }
                    tokio::task::yield_now().await;
                }
                PumpStep::Stalled => tokio::time::sleep(PUMP_RETRY).await,
            }
        }
    }

    /// One pump step (see [`TopicState::pump`]) and its effects.
    fn pump_batch(&self) -> PumpStep {
        let _guard = self.pump_lock.read();
        let step = {
            let mut st = self.state.lock();
            let gate = self.gate(&st);
            let fanout = st.fanout.clone();
            st.queue.pump(gate, &fanout)
        };
        let step = match step {
            Pump::Read(max) => {
                let mut raw: Vec<(Bytes, RecordPos)> = Vec::with_capacity(max);
                let got = self.backend.read_batch_pos(max, &mut raw);
                if let Some((_, first)) = raw.first() {
                    // Until the batch is in every channel, a crash re-reads from it on (the
                    // backend set this already when none was set; this also moves it past a
                    // batch whose sync failed).
                    self.backend.set_read_watermark(Some(*first));
                }
                let mut msgs = Vec::with_capacity(raw.len());
                for (payload, _) in raw {
                    match Message::decode(payload) {
                        Ok(m) => msgs.push(m),
                        Err(e) => {
                            tracing::error!(topic = %self.name, "failed to decode message - {e}")
                        }
                    }
                }
                let mut st = self.state.lock();
                let empty = got == 0 && self.backend.depth() <= 0;
                let fanout = st.fanout.clone();
                st.queue.pump_read(msgs, got, empty, &fanout)
            }
            other => other,
        };
        match step {
            Pump::Stop => PumpStep::Stop,
            Pump::Again => PumpStep::Moved(PutReceipt::default()),
            Pump::Deliver(b) => self.deliver(b),
            Pump::Read(_) => unreachable!("a read is reported before the next step"),
        }
    }

    /// Hands a batch to the channels still to get it; keeps it for a retry if one refuses.
    fn deliver(&self, b: Batch<Arc<Channel>>) -> PumpStep {
        if let Some(r) = &self.repl {
            // Before the channels have them: a FIN can only follow.
            r.fanout(&self.name, &b.todo, &b.msgs);
        }
        let mut receipt = PutReceipt::default();
        let failed = fan_out(&b.todo, &b.msgs, &mut receipt);
        let refused = failed.into_iter().map(|(c, _)| c).collect();
        if self.state.lock().queue.delivered(b.msgs, refused) {
            PumpStep::Stalled
        } else {
            PumpStep::Moved(receipt)
        }
    }

    // ---- channels -----------------------------------------------------------------------

    /// Gets or creates a channel; `true` when it was created by this call.
    pub fn get_or_create_channel(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<(Arc<Channel>, bool), BackendError> {
        let mut st = self.state.lock();
        if let Some(c) = st.channels.get(name) {
            return Ok((c.clone(), false));
        }
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let engine = self.engine.upgrade().ok_or(BackendError::Exiting)?;
        let queue_name = format!("{}:{}", self.name, name);
        let durable = !nsq_protocol::names::is_ephemeral(name);
        let backend = engine.make_backend(&queue_name, durable)?;
        let repl = self.repl.clone().filter(|_| durable);
        let ch = Channel::new(
            Arc::downgrade(self),
            &self.name,
            name,
            self.opts.clone(),
            self.health.clone(),
            backend,
            self.reserve.clone(),
            repl,
        );
        st.channels.insert(name.to_string(), ch.clone());
        st.fanout = st.channels.values().cloned().collect();
        if let (Some(r), true) = (&self.repl, durable) {
            // Under the lock: before any PUB that lists the channel.
            r.admin(AdminOp::Create, &self.name, name);
        }
        drop(st);
        engine.channels_changed();
        engine.hooks().channel_created(&self.name, name);
        self.ensure_pump();
        Ok((ch, true))
    }

    pub fn get_channel(&self, name: &str) -> Option<Arc<Channel>> {
        self.state.lock().channels.get(name).cloned()
    }

    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.state.lock().channels.values().cloned().collect()
    }

    /// Deletes a channel (closing its consumers and removing its files). `false` if unknown.
    pub fn delete_channel(&self, name: &str) -> bool {
        self.delete_channel_matching(name, None)
    }

    /// Ephemeral self-deletion: only if `name` still maps to this very channel.
    pub(crate) fn delete_channel_if(&self, name: &str, ch: &Channel) {
        self.delete_channel_matching(name, Some(ch));
    }

    fn delete_channel_matching(&self, name: &str, only: Option<&Channel>) -> bool {
        let (ch, now_empty) = {
            let mut st = self.state.lock();
            match st.channels.get(name) {
                None => return false,
                Some(c) if only.is_some_and(|o| !std::ptr::eq(Arc::as_ptr(c), o)) => return false,
                Some(_) => {}
            }
            let ch = st.channels.remove(name).expect("checked above");
            st.fanout = st.channels.values().cloned().collect();
            if let (Some(r), false) = (&self.repl, ch.is_ephemeral()) {
                r.admin(AdminOp::Delete, &self.name, name);
            }
            (ch, st.channels.is_empty())
        };
        ch.delete();
        let engine = self.engine.upgrade();
        if let Some(e) = &engine {
            e.channels_changed();
            e.hooks().channel_deleted(&self.name, name);
        }
        if now_empty && self.ephemeral {
            if let Some(e) = engine {
                e.delete_topic_if(&self.name, self);
            }
        }
        true
    }

    // ---- administration -----------------------------------------------------------------

    pub fn pause(&self) {
        self.paused.store(true, Ordering::Release);
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Pause, &self.name, "");
        }
    }

    pub fn unpause(self: &Arc<Self>) {
        self.paused.store(false, Ordering::Release);
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Unpause, &self.name, "");
        }
        self.ensure_pump();
    }

    /// Discards the topic's own queue (channels keep theirs).
    pub fn empty(&self) -> Result<(), BackendError> {
        let _guard = self.pump_lock.write();
        {
            let mut st = self.state.lock();
            st.queue.clear();
            if let Some(r) = &self.repl {
                r.admin(AdminOp::Empty, &self.name, "");
            }
        }
        self.backend.set_read_watermark(None);
        self.backend.empty()
    }

    /// Deletion: refuse puts, delete every channel, discard the queue and its files.
    pub(crate) fn delete(&self) {
        self.exiting.store(true, Ordering::Release);
        let _guard = self.pump_lock.write();
        if let Some(r) = &self.repl {
            r.admin(AdminOp::Delete, &self.name, "");
        }
        let channels: Vec<Arc<Channel>> = {
            let mut st = self.state.lock();
            st.fanout = Arc::from(Vec::new());
            std::mem::take(&mut st.channels).into_values().collect()
        };
        let engine = self.engine.upgrade();
        for ch in channels {
            ch.delete();
            if let Some(e) = &engine {
                e.hooks().channel_deleted(&self.name, ch.name());
            }
        }
        self.state.lock().queue.clear();
        self.backend.set_read_watermark(None);
        if let Err(e) = self.backend.empty() {
            tracing::error!(topic = %self.name, "failed to empty topic backend - {e}");
        }
        if let Err(e) = self.backend.delete() {
            tracing::error!(topic = %self.name, "failed to delete topic backend - {e}");
        }
    }

    /// Shutdown: hand a stalled batch to its channels, close every channel (flushing them to
    /// disk), then flush the topic's memory queue to its backend and close it. The read
    /// watermark is cleared (the data dir is then what the reference leaves) unless a stalled
    /// batch could not be stored, in which case it is read again after the restart.
    pub(crate) fn close(&self) -> Result<(), BackendError> {
        self.exiting.store(true, Ordering::Release);
        let _guard = self.pump_lock.write();
        let mut settled = true;
        let (stalled, msgs, channels) = {
            let mut st = self.state.lock();
            let (stalled, msgs) = st.queue.drain();
            (
                stalled,
                msgs,
                st.channels.values().cloned().collect::<Vec<_>>(),
            )
        };
        if let Some(b) = stalled {
            for ch in &b.todo {
                if let Err(e) = ch.receive(&b.msgs, &mut PutReceipt::default()) {
                    tracing::error!(topic = %self.name, channel = %ch.name(), "failed to put message to channel - {e}");
                    settled = false;
                }
            }
        }
        for ch in channels {
            if let Err(e) = ch.close() {
                tracing::error!(topic = %self.name, channel = %ch.name(), "failed to close channel - {e}");
            }
        }
        let r = if msgs.is_empty() || self.ephemeral {
            Ok(())
        } else {
            self.backend
                .put_batch(msgs.len(), &mut |i, out| msgs[i].encode_into(out))
                .map(drop)
        };
        if settled {
            self.backend.set_read_watermark(None);
        }
        self.backend.close()?;
        r
    }

    /// What a shutdown would have to write for this topic and its channels that is on disk
    /// nowhere else (see [`crate::reserve`]).
    pub(crate) fn held_bytes(&self) -> u64 {
        let (mine, channels) = {
            let st = self.state.lock();
            (st.queue.held_bytes(), st.fanout.clone())
        };
        mine + channels.iter().map(|c| c.held_bytes()).sum::<u64>()
    }

    // ---- stats --------------------------------------------------------------------------

    pub fn depth(&self) -> i64 {
        self.state.lock().queue.mem_len() as i64 + self.backend.depth()
    }

    pub fn stats(&self) -> TopicStats {
        let (mem, channels) = {
            let st = self.state.lock();
            (st.queue.mem_len(), st.channels.values().cloned().collect())
        };
        let backend_depth = self.backend.depth();
        TopicStats {
            name: self.name.clone(),
            depth: mem as i64 + backend_depth,
            backend_depth,
            message_count: self.message_count.load(Ordering::Relaxed),
            message_bytes: self.message_bytes.load(Ordering::Relaxed),
            paused: self.is_paused(),
            channels,
        }
    }
}

/// Splits messages into runs of equal `defer_ms` (each run is one PUB frame), in order.
fn by_defer(msgs: Vec<Message>) -> Vec<Vec<Message>> {
    let mut out: Vec<Vec<Message>> = Vec::new();
    for m in msgs {
        match out.last_mut() {
            Some(run) if run[0].defer_ms == m.defer_ms => run.push(m),
            _ => out.push(vec![m]),
        }
    }
    out
}

/// Hands a batch to every channel; returns the channels that refused it, with why. A channel
/// that is being deleted counts as served.
fn fan_out(
    chans: &[Arc<Channel>],
    msgs: &[Message],
    receipt: &mut PutReceipt,
) -> Vec<(Arc<Channel>, BackendError)> {
    let mut failed = Vec::new();
    for ch in chans {
        channel_result(ch, ch.receive(msgs, receipt), &mut failed);
    }
    failed
}

/// [`fan_out`] for a batch nobody needs afterwards: the last channel keeps the messages
/// instead of cloning them (nsqd/topic.go `messagePump` likewise gives one channel, the first,
/// the original message and the others copies).
fn fan_out_owned(
    chans: &[Arc<Channel>],
    msgs: Vec<Message>,
    receipt: &mut PutReceipt,
) -> Vec<(Arc<Channel>, BackendError)> {
    let mut failed = Vec::new();
    let Some((last, rest)) = chans.split_last() else {
        return failed;
    };
    for ch in rest {
        channel_result(ch, ch.receive(&msgs, receipt), &mut failed);
    }
    channel_result(last, last.receive_owned(msgs, receipt), &mut failed);
    failed
}

fn channel_result(
    ch: &Arc<Channel>,
    r: Result<(), BackendError>,
    failed: &mut Vec<(Arc<Channel>, BackendError)>,
) {
    match r {
        Ok(()) => {}
        Err(BackendError::Exiting) if ch.is_exiting() => {}
        Err(e) => {
            tracing::error!(topic = %ch.topic_name(), channel = %ch.name(), "failed to put message to channel - {e}");
            failed.push((ch.clone(), e));
        }
    }
}
