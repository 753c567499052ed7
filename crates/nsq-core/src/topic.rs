//! A topic: accepts published messages and fans each one out to every channel.
//!
//! Fast path: when the topic has channels, is not paused and has no backlog, a publish hands
//! its batch straight to every channel (a shared-`Bytes` clone per channel, no copy, no task).
//! Otherwise messages queue in the topic (memory, then backend) and a pump task drains the
//! backlog once there is somewhere to send it — the reference's "depth accumulates in the
//! topic until a channel exists / the topic is unpaused".

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

use crate::backend::{BackendError, BackendQueue, RecordPos};
use crate::channel::Channel;
use crate::engine::Engine;
use crate::memqueue::MemQueue;
use crate::message::{now_nanos, GuidFactory, Message};
use crate::options::{Health, Options};
use crate::receipt::PutReceipt;
use crate::reserve::Reserve;

/// Messages the pump moves per batch.
const PUMP_BATCH: usize = 1024;
/// How long the pump waits before retrying a channel that refused a batch.
const PUMP_RETRY: Duration = Duration::from_millis(250);

/// A batch the pump took from the topic and has not yet stored in every channel.
struct PumpBatch {
    msgs: Vec<Message>,
    /// The channels still to receive it.
    todo: Vec<Arc<Channel>>,
}

/// What one pump step did.
enum PumpStep {
    /// Nothing to do (or nowhere to send it): `pumping` was cleared.
    Stop,
    /// A batch reached every channel; `receipt` holds the writes to wait for (durable mode).
    Moved(PutReceipt),
    /// A channel refused the batch; it is kept for a retry.
    Stalled,
}

struct State {
    channels: BTreeMap<String, Arc<Channel>>,
    /// Snapshot of `channels` for fan-out without holding the lock.
    fanout: Arc<[Arc<Channel>]>,
    mem: MemQueue<Message>,
    /// The backend holds messages newer than `mem` (FIFO), see `Channel`.
    spill: bool,
    backend_writers: usize,
    /// A pump task is draining the backlog; new publishes queue behind it.
    pumping: bool,
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
    /// The pump's batch that a channel refused, kept for a retry. Only the pump (one at a time,
    /// see `State::pumping`) and `close` touch it.
    stalled: Mutex<Option<PumpBatch>>,
    /// Read-held by the pump and by direct fan-out while a batch is between the topic and its
    /// channels; close/delete/empty write-lock it, so no acknowledged batch is half delivered
    /// when the channels close.
    pump_lock: RwLock<()>,
}

impl std::fmt::Debug for Topic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topic").field("name", &self.name).finish()
    }
}

impl Topic {
    pub(crate) fn new(
        name: &str,
        engine: Weak<Engine>,
        opts: Arc<Options>,
        health: Arc<Health>,
        backend: Arc<dyn BackendQueue>,
        started: bool,
        reserve: Option<Arc<Reserve>>,
    ) -> Arc<Self> {
        // A backlog left on disk by a previous run must be pumped before new messages.
        let spill = backend.depth() > 0;
        Arc::new(Topic {
            name: name.to_string(),
            ephemeral: nsq_protocol::names::is_ephemeral(name),
            engine,
            guid: Mutex::new(GuidFactory::new(opts.node_id)),
            opts,
            health,
            backend,
            reserve,
            state: Mutex::new(State {
                channels: BTreeMap::new(),
                fanout: Arc::from(Vec::new()),
                mem: MemQueue::new(),
                spill,
                backend_writers: 0,
                pumping: false,
            }),
            message_count: AtomicU64::new(0),
            message_bytes: AtomicU64::new(0),
            paused: AtomicBool::new(false),
            started: AtomicBool::new(started),
            exiting: AtomicBool::new(false),
            stalled: Mutex::new(None),
            pump_lock: RwLock::new(()),
        })
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
        let mut msgs: Vec<Message> = {
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
        let mut receipt = PutReceipt::default();
        if msgs.is_empty() {
            return Ok(receipt);
        }
        let bytes: u64 = msgs.iter().map(|m| m.body.len() as u64).sum();
        let total = msgs.len();

        let _fanout_guard = self.pump_lock.read();
        let mut st = self.state.lock();
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        if !self.is_paused()
            && self.started.load(Ordering::Acquire)
            && !st.fanout.is_empty()
            && st.mem.is_empty()
            && !st.spill
            && !st.pumping
        {
            let chans = st.fanout.clone();
            drop(st);
            let failed = fan_out_owned(&chans, msgs, &mut receipt);
            return match failed.into_iter().next() {
                None => {
                    self.count(total, bytes);
                    Ok(receipt)
                }
                Some((_, e)) => Err(e),
            };
        }

        // Queue in the topic: memory first, the rest to the backend. All or nothing: the
        // backend part is written before anything enters memory (ephemeral topics silently
        // drop overflow, as the reference).
        let mut room = if st.spill {
            0
        } else {
            self.opts.mem_queue_size.saturating_sub(st.mem.len())
        };
        let fit = room.min(msgs.len());
        if fit > 0 && !self.ephemeral {
            if let Some(r) = &self.reserve {
                if !r.admit(msgs[..fit].iter().map(Message::record_len).sum()) {
                    room = 0;
                }
            }
        }
        if msgs.len() > room {
            let rest = msgs.split_off(room);
            if !self.ephemeral {
                st.spill = true;
                st.backend_writers += 1;
                drop(st);
                let result = self
                    .backend
                    .put_batch(rest.len(), &mut |i, out| rest[i].encode_into(out));
                self.health.record(&result);
                st = self.state.lock();
                st.backend_writers -= 1;
                match result {
                    Ok(t) => {
                        if self.opts.durable {
                            receipt.backend(&self.backend, t);
                        }
                    }
                    Err(e) => {
                        // Nothing went to disk: memory may take new puts again if it can.
                        if st.backend_writers == 0 && self.backend.depth() <= 0 {
                            st.spill = false;
                        }
                        drop(st);
                        tracing::error!(topic = %self.name, "failed to write message to backend - {e}");
                        self.ensure_pump();
                        return Err(e);
                    }
                }
            }
        }
        st.mem.extend(msgs);
        drop(st);
        drop(_fanout_guard);
        self.count(total, bytes);
        self.ensure_pump();
        Ok(receipt)
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
        let mut st = self.state.lock();
        if st.pumping
            || self.is_paused()
            || self.is_exiting()
            || !self.started.load(Ordering::Acquire)
            || st.fanout.is_empty()
        {
            return;
        }
        if st.mem.is_empty() && !st.spill && self.stalled.lock().is_none() {
            return;
        }
        st.pumping = true;
        drop(st);
        let me = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(h) => {
                h.spawn(async move { me.pump().await });
            }
            Err(_) => {
                // No runtime (a synchronous caller such as a unit test): drain inline; a
                // stalled batch waits for the next publish or channel to try again.
                loop {
                    match me.pump_batch() {
                        PumpStep::Stop => break,
                        PumpStep::Moved(_) => me.backend.set_read_watermark(None),
                        PumpStep::Stalled => {
                            me.state.lock().pumping = false;
                            break;
                        }
                    }
                }
            }
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

    /// Moves one batch from the topic queues to every channel (a stalled batch first).
    fn pump_batch(&self) -> PumpStep {
        let _guard = self.pump_lock.read();
        let mut st = self.state.lock();
        if self.is_paused() || self.is_exiting() || st.fanout.is_empty() {
            st.pumping = false;
            return PumpStep::Stop;
        }
        let chans = st.fanout.clone();
        let stalled = self.stalled.lock().take();
        if let Some(b) = stalled {
            drop(st);
            return self.deliver(b);
        }
        let n = st.mem.len().min(PUMP_BATCH);
        let mut batch: Vec<Message> = Vec::with_capacity(n);
        st.mem.pop_front_into(n, &mut batch);
        if batch.is_empty() {
            if !st.spill {
                st.pumping = false;
                return PumpStep::Stop;
            }
            drop(st);
            let mut raw: Vec<(Bytes, RecordPos)> = Vec::with_capacity(PUMP_BATCH);
            let got = self.backend.read_batch_pos(PUMP_BATCH, &mut raw);
            if let Some((_, first)) = raw.first() {
                // Until the batch is in every channel, a crash re-reads from it on (the
                // backend set this already when none was set; this also moves it past a
                // batch whose sync failed).
                self.backend.set_read_watermark(Some(*first));
            }
            for (payload, _) in raw {
                match Message::decode(payload) {
                    Ok(m) => batch.push(m),
                    Err(e) => tracing::error!(topic = %self.name, "failed to decode message - {e}"),
                }
            }
            if got == 0 {
                let mut st = self.state.lock();
                if st.backend_writers == 0 && self.backend.depth() <= 0 {
                    st.spill = false;
                    if st.mem.is_empty() {
                        st.pumping = false;
                        return PumpStep::Stop;
                    }
                }
                return PumpStep::Moved(PutReceipt::default());
            }
        } else {
            drop(st);
        }
        self.deliver(PumpBatch {
            msgs: batch,
            todo: chans.to_vec(),
        })
    }

    /// Hands a batch to the channels still to get it; keeps it for a retry if one refuses.
    fn deliver(&self, mut b: PumpBatch) -> PumpStep {
        let mut receipt = PutReceipt::default();
        let failed = fan_out(&b.todo, &b.msgs, &mut receipt);
        if failed.is_empty() {
            return PumpStep::Moved(receipt);
        }
        b.todo = failed.into_iter().map(|(c, _)| c).collect();
        *self.stalled.lock() = Some(b);
        PumpStep::Stalled
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
        let ch = Channel::new(
            Arc::downgrade(self),
            &self.name,
            name,
            self.opts.clone(),
            self.health.clone(),
            backend,
            self.reserve.clone(),
        );
        st.channels.insert(name.to_string(), ch.clone());
        st.fanout = st.channels.values().cloned().collect();
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
    }

    pub fn unpause(self: &Arc<Self>) {
        self.paused.store(false, Ordering::Release);
        self.ensure_pump();
    }

    /// Discards the topic's own queue (channels keep theirs).
    pub fn empty(&self) -> Result<(), BackendError> {
        let _guard = self.pump_lock.write();
        {
            let mut st = self.state.lock();
            st.mem.clear();
            st.spill = false;
            self.stalled.lock().take();
        }
        self.backend.set_read_watermark(None);
        self.backend.empty()
    }

    /// Deletion: refuse puts, delete every channel, discard the queue and its files.
    pub(crate) fn delete(&self) {
        self.exiting.store(true, Ordering::Release);
        let _guard = self.pump_lock.write();
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
        {
            let mut st = self.state.lock();
            st.mem.clear();
            st.spill = false;
            self.stalled.lock().take();
        }
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
        if let Some(b) = self.stalled.lock().take() {
            for ch in &b.todo {
                if let Err(e) = ch.receive(&b.msgs, &mut PutReceipt::default()) {
                    tracing::error!(topic = %self.name, channel = %ch.name(), "failed to put message to channel - {e}");
                    settled = false;
                }
            }
        }
        let (channels, msgs) = {
            let mut st = self.state.lock();
            let msgs: Vec<Message> = st.mem.take_all().collect();
            (st.channels.values().cloned().collect::<Vec<_>>(), msgs)
        };
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
            let mine = if self.ephemeral { 0 } else { st.mem.bytes() };
            (mine, st.fanout.clone())
        };
        mine + channels.iter().map(|c| c.held_bytes()).sum::<u64>()
    }

    // ---- stats --------------------------------------------------------------------------

    pub fn depth(&self) -> i64 {
        self.state.lock().mem.len() as i64 + self.backend.depth()
    }

    pub fn stats(&self) -> TopicStats {
        let (mem, channels) = {
            let st = self.state.lock();
            (st.mem.len(), st.channels.values().cloned().collect())
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
