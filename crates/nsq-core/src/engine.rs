//! The engine: the set of topics, how their backends are made, and the hooks through which the
//! daemon hears about creations and deletions (lookupd registration, metadata writes).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::RwLock;
use rustc_hash::FxHashMap;

use crate::backend::{BackendError, BackendQueue, DropSink};
use crate::channel::{Channel, Returning};
use crate::diskqueue::{DiskQueue, DiskQueueOptions};
use crate::options::{Health, Options};
use crate::replicator::Replicator;
use crate::reserve::Reserve;
use crate::topic::Topic;

/// Notifications the daemon acts on. Called without engine, topic or channel locks held.
pub trait Hooks: Send + Sync + 'static {
    fn topic_created(&self, _topic: &str) {}
    fn topic_deleted(&self, _topic: &str) {}
    fn channel_created(&self, _topic: &str, _channel: &str) {}
    fn channel_deleted(&self, _topic: &str, _channel: &str) {}
    /// Something the metadata file keeps changed outside the daemon's API (a takeover gave a
    /// topic the settings of the copy it took over).
    fn metadata_changed(&self) {}
}

/// Hooks that do nothing (tests, tools).
#[derive(Debug, Default)]
pub struct NoHooks;
impl Hooks for NoHooks {}

/// All topics of one daemon.
pub struct Engine {
    opts: Arc<Options>,
    health: Arc<Health>,
    hooks: Arc<dyn Hooks>,
    /// Read-mostly: every publish looks its topic up here; writes only on create/delete.
    topics: RwLock<FxHashMap<String, Arc<Topic>>>,
    /// Bumped on every channel creation/deletion so the queue scanner picks up new channels at
    /// its next tick instead of waiting for its periodic refresh.
    channels_generation: AtomicU64,
    /// While true (metadata loading), new topics are not started: see [`Engine::finish_loading`].
    loading: AtomicBool,
    /// With `Options::reserve` (and a memory queue): the disk space memory must fit in.
    reserve: Option<Arc<Reserve>>,
    /// Set once, before metadata loading, when replication is on (crate::replicator).
    replicator: OnceLock<Arc<dyn Replicator>>,
    /// A returning origin's delivery hold and skip set (replication, `channel/skips.rs`).
    returning: Arc<Returning>,
    me: Weak<Engine>,
}

impl Engine {
    pub fn new(opts: Options, hooks: Arc<dyn Hooks>) -> Arc<Self> {
        let reserve = (opts.reserve && opts.mem_queue_size > 0)
            .then(|| match Reserve::open(&opts.data_path) {
                Ok(r) => Some(Arc::new(r)),
                Err(e) => {
                    tracing::error!("failed to open the memory reserve, memory queues are not bounded by it - {e}");
                    None
                }
            })
            .flatten();
        let engine = Arc::new_cyclic(|me| Engine {
            opts: Arc::new(opts),
            health: Arc::new(Health::default()),
            hooks,
            topics: RwLock::new(FxHashMap::default()),
            channels_generation: AtomicU64::new(0),
            loading: AtomicBool::new(false),
            reserve,
            replicator: OnceLock::new(),
            returning: Arc::new(Returning::new()),
            me: me.clone(),
        });
        if let Some(r) = &engine.reserve {
            let (r, me) = (r.clone(), Arc::downgrade(&engine));
            std::thread::Builder::new()
                .name("nsqd-reserve".into())
                .spawn(move || {
                    // Renews the reserve's budget from what memory holds (crate::reserve).
                    let mut seen = r.admitted();
                    while let Some(asked) = r.wait() {
                        if me.strong_count() == 0 {
                            return;
                        }
                        let before = r.admitted();
                        if !asked && before == seen {
                            continue;
                        }
                        seen = before;
                        let Some(e) = me.upgrade() else { return };
                        let held = e.held_bytes();
                        drop(e);
                        r.renew(before, held);
                    }
                })
                .expect("spawn the reserve thread");
        }
        engine
    }

    /// What a shutdown would have to write that is on disk nowhere else (see
    /// [`crate::reserve`]).
    pub fn held_bytes(&self) -> u64 {
        self.topics().iter().map(|t| t.held_bytes()).sum()
    }

    /// The memory reserve, when there is one.
    pub fn reserve(&self) -> Option<&Reserve> {
        self.reserve.as_deref()
    }

    pub fn options(&self) -> &Options {
        &self.opts
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Tells the daemon that the metadata changed ([`Hooks::metadata_changed`]).
    pub fn metadata_changed(&self) {
        self.hooks.metadata_changed();
    }

    pub(crate) fn hooks(&self) -> &dyn Hooks {
        &*self.hooks
    }

    /// Turns replication on (crate::replicator): topics created from now on report to `r`.
    /// Call before any topic exists. `false` if one was set already.
    pub fn set_replicator(&self, r: Arc<dyn Replicator>) -> bool {
        self.replicator.set(r).is_ok()
    }

    /// The replicator, when replication is on.
    pub fn replicator(&self) -> Option<&Arc<dyn Replicator>> {
        self.replicator.get()
    }

    /// Metadata loading begins: topics created from now on hold their messages until
    /// [`Engine::finish_loading`], so every channel listed for them exists first.
    pub fn begin_loading(&self) {
        self.loading.store(true, Ordering::Release);
    }

    /// Metadata loading is done: start every topic.
    pub fn finish_loading(&self) {
        self.loading.store(false, Ordering::Release);
        for t in self.topics() {
            t.start();
        }
    }

    /// Changes whenever a channel is created or deleted anywhere.
    pub fn channels_generation(&self) -> u64 {
        self.channels_generation.load(Ordering::Acquire)
    }

    pub(crate) fn channels_changed(&self) {
        self.channels_generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Opens the backend for a queue name (`topic` or `topic:channel`).
    pub(crate) fn make_backend(
        &self,
        name: &str,
        durable: bool,
    ) -> Result<Arc<dyn BackendQueue>, BackendError> {
        if !durable {
            return Ok(Arc::new(DropSink));
        }
        let dq = DiskQueue::open(
            name,
            DiskQueueOptions {
                data_path: self.opts.data_path.clone(),
                max_bytes_per_file: self.opts.max_bytes_per_file,
                min_msg_size: nsq_protocol::MESSAGE_HEADER_LEN as i32,
                max_msg_size: (self.opts.max_msg_size + nsq_protocol::MESSAGE_HEADER_LEN as i64)
                    as i32,
                sync_every: self.opts.sync_every,
                sync_timeout: self.opts.sync_timeout,
            },
        )?;
        Ok(dq)
    }

    /// Gets or creates a topic; `true` when created by this call. Name validity is the
    /// caller's job (it owns the error text).
    pub fn get_or_create_topic(&self, name: &str) -> Result<(Arc<Topic>, bool), BackendError> {
        self.get_or_create_topic_with(name, true)
    }

    /// Like [`Engine::get_or_create_topic`]; a topic created here with `start == false` holds
    /// its messages until [`Topic::start`] (the daemon first pre-creates the channels that
    /// nsqlookupd knows of). Topics created while loading metadata are never started here.
    pub fn get_or_create_topic_with(
        &self,
        name: &str,
        start: bool,
    ) -> Result<(Arc<Topic>, bool), BackendError> {
        if let Some(t) = self.topics.read().get(name) {
            return Ok((t.clone(), false));
        }
        let topic = {
            let mut topics = self.topics.write();
            if let Some(t) = topics.get(name) {
                return Ok((t.clone(), false));
            }
            let durable = !nsq_protocol::names::is_ephemeral(name);
            let backend = self.make_backend(name, durable)?;
            let repl = self.replicator.get().filter(|_| durable).cloned();
            let t = Topic::new(
                name,
                self.me.clone(),
                self.opts.clone(),
                self.health.clone(),
                backend,
                start && !self.loading.load(Ordering::Acquire),
                self.reserve.clone(),
                repl,
            );
            topics.insert(name.to_string(), t.clone());
            // Under the map's lock: before anyone can publish to the topic.
            if let Some(r) = t.replicator() {
                r.admin(nsq_protocol::replication::AdminOp::Create, name, "");
            }
            t
        };
        self.hooks.topic_created(name);
        Ok((topic, true))
    }

    pub fn get_topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    /// All topics, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<_> = self.topics.read().values().cloned().collect();
        v.sort_by(|a, b| a.name().cmp(b.name()));
        v
    }

    /// Every channel of every topic (the queue scanner's list).
    pub fn channels(&self) -> Vec<Arc<Channel>> {
        self.topics
            .read()
            .values()
            .flat_map(|t| t.channels())
            .collect()
    }

    /// Deletes a topic and its channels; `false` if unknown.
    pub fn delete_topic(&self, name: &str) -> bool {
        self.delete_topic_matching(name, None)
    }

    pub(crate) fn delete_topic_if(&self, name: &str, t: &Topic) {
        self.delete_topic_matching(name, Some(t));
    }

    fn delete_topic_matching(&self, name: &str, only: Option<&Topic>) -> bool {
        let topic = {
            let mut topics = self.topics.write();
            match topics.get(name) {
                None => return false,
                Some(t) if only.is_some_and(|o| !std::ptr::eq(Arc::as_ptr(t), o)) => return false,
                Some(_) => {}
            }
            topics.remove(name).expect("checked above")
        };
        self.hooks.topic_deleted(name);
        topic.delete();
        {
            // Nothing of it is left to skip.
            let mut s = self.returning.lock();
            s.forget_topic(name);
            self.returning.refresh(&s);
        }
        true
    }

    // ---- a returning origin (replication: docs/replication.md, "Return") -----------------

    /// The delivery hold and skip set.
    pub fn returning(&self) -> &Arc<Returning> {
        &self.returning
    }

    /// Channels stop handing messages to consumers until [`Engine::release_delivery`] (an
    /// origin restarted after an unclean stop waits for its peers' manifests).
    pub fn hold_delivery(&self) {
        self.returning.set_hold(true);
    }

    /// Ends [`Engine::hold_delivery`] and wakes every consumer.
    pub fn release_delivery(&self) {
        self.returning.set_hold(false);
        for c in self.channels() {
            c.wake_consumers();
        }
    }

    /// Fences delivery of replicated messages (the replication core's `Fence`: see
    /// [`Returning::is_fenced`]): channels with a replicator hand nothing to consumers until
    /// [`Engine::unfence_delivery`]. Messages already in flight stay so (their FIN, REQ and
    /// timeout work as ever).
    pub fn fence_delivery(&self) {
        self.returning.set_fence(true);
    }

    /// Ends [`Engine::fence_delivery`] and wakes every consumer.
    pub fn unfence_delivery(&self) {
        self.returning.set_fence(false);
        for c in self.channels() {
            c.wake_consumers();
        }
    }

    /// Applies a manifest of what a peer took over (`manifest`: its MANIFEST frames): none of
    /// the listed messages is delivered here afterwards. Messages in flight or deferred are
    /// settled at once (as a FIN); those waiting in a memory queue or unread in a diskqueue
    /// are dropped when a take meets them; an entry with an empty channel (pending on the
    /// topic at the origin) covers every channel of the topic. Several manifests add up.
    /// Returns how many messages were settled at once. Blocking: reads the unread part of
    /// the named topics' and channels' diskqueues.
    pub fn apply_manifest(&self, manifest: &[nsq_protocol::replication::Manifest]) -> usize {
        self.returning.add(manifest);
        let mut names: Vec<String> = manifest.iter().map(|m| m.topic.clone()).collect();
        names.sort_unstable();
        names.dedup();
        self.apply_skips(names)
    }

    /// Applies the skip set again to every topic it names (as [`Engine::apply_manifest`]
    /// does with a new manifest): what was pending on a topic and has been fanned out since
    /// becomes entries of its channels, trimmed to what they hold. Blocking, as
    /// `apply_manifest`.
    pub fn reapply_skips(&self) -> usize {
        let names = self.returning.topics();
        self.apply_skips(names)
    }

    fn apply_skips(&self, names: Vec<String>) -> usize {
        let ret = &self.returning;
        let mut settled = 0;
        for name in &names {
            let name = name.as_str();
            let Some(topic) = self.get_topic(name) else {
                // Nothing of it here to deliver.
                let mut s = ret.lock();
                s.forget_topic(name);
                ret.refresh(&s);
                continue;
            };
            // Entries pending on the topic that it no longer holds were fanned out (before
            // the scan: it holds the pump lock): they become entries of every channel.
            let pending = topic.pending_ids();
            let channels = topic.channels();
            {
                let mut s = ret.lock();
                if let (Some(t), Ok(pending)) = (s.topic_mut(name), &pending) {
                    let out: Vec<_> = t
                        .on_topic
                        .iter()
                        .filter(|id| !pending.contains(id))
                        .copied()
                        .collect();
                    for id in &out {
                        t.on_topic.remove(id);
                    }
                    if !out.is_empty() {
                        for c in &channels {
                            t.channels
                                .entry(c.name().to_string())
                                .or_default()
                                .extend(out.iter().copied());
                        }
                    }
                    // Entries of channels that do not exist here: nothing to skip.
                    t.channels
                        .retain(|c, _| channels.iter().any(|ch| ch.name() == c));
                }
                s.tidy(name);
                ret.refresh(&s);
            }
            if let Err(e) = pending {
                tracing::error!(topic = %name, "failed to read the topic's backend to apply a manifest, its entries are kept - {e}");
            }
            for c in channels {
                settled += c.apply_skips(ret);
            }
        }
        settled
    }

    /// Graceful shutdown: every topic flushes its queues (and its channels' memory, in-flight
    /// and deferred messages) to disk and closes its backends.
    pub fn close(&self) {
        // The reserve's space is what the flush below needs when the disk is full.
        if let Some(r) = &self.reserve {
            r.release();
        }
        for t in self.topics() {
            if let Err(e) = t.close() {
                tracing::error!(topic = %t.name(), "failed to close topic - {e}");
            }
        }
    }
}
