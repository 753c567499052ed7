//! A returning origin (replication, issue 22: docs/replication.md, "Return"): what a peer took
//! over of this node's messages must not be delivered here again, and after an unclean stop
//! nothing is delivered until the peers have said what they took.
//!
//! [`Returning`] is the engine's (one per daemon): the delivery hold, and the skip set built
//! from the manifests applied — per topic the IDs that were pending on the topic itself
//! (they cover every channel, the message may have been fanned out since) and per channel the
//! IDs taken over from it. Applying a manifest ([`crate::engine::Engine::apply_manifest`])
//! settles at once what a channel holds in flight or deferred, as a FIN would; what waits in
//! a memory queue or unread in a diskqueue stays in the skip set and is dropped when a take
//! meets it, through the path a sampled-out message takes (consumed, its record settled, not
//! delivered; nsqd/protocol_v2.go `messagePump` drops those likewise). So every durability
//! rule of the channel (read watermark, journal) is the existing one. A channel's entries are
//! trimmed to what it still holds when the manifest is applied, so the set empties as the
//! messages are met.
//!
//! NSQ has no counterpart.

use std::sync::atomic::{AtomicBool, Ordering};

use nsq_protocol::replication::Manifest;
use nsq_protocol::MessageId;
use parking_lot::{Mutex, MutexGuard};
use rustc_hash::{FxHashMap, FxHashSet};

use super::Channel;
use crate::message::Message;

/// The delivery hold and the skip set of a returning origin (see the module docs).
#[derive(Debug, Default)]
pub struct Returning {
    /// Channels hand nothing to consumers while set.
    hold: AtomicBool,
    /// The replication core's fence (docs/replication.md, The core, "Fencing"): while set,
    /// replicated channels hand nothing to consumers — this origin cannot prove a member or
    /// nsqlookupd heard it lately, or a member claims its epoch, so a peer may be delivering
    /// the same messages. Channels without a replicator (ephemeral ones, or replication of
    /// this node's publishes off) deliver as before: no peer holds their messages.
    fence: AtomicBool,
    /// The skip set is not empty (a take looks at it only then).
    active: AtomicBool,
    skips: Mutex<Skips>,
}

#[derive(Debug, Default)]
pub(crate) struct Skips {
    topics: FxHashMap<String, TopicSkips>,
}

/// One topic's part of the skip set.
#[derive(Debug, Default)]
pub(crate) struct TopicSkips {
    /// Pending on the topic at the origin when taken over: skipped on every channel, kept
    /// until a manifest is applied again while they are no longer pending on the topic.
    pub(crate) on_topic: FxHashSet<MessageId>,
    /// Per channel: forgotten once met.
    pub(crate) channels: FxHashMap<String, FxHashSet<MessageId>>,
}

impl TopicSkips {
    /// Whether `id` is to be dropped on `channel` (a channel entry is forgotten then).
    fn take(&mut self, channel: &str, id: &MessageId) -> bool {
        if let Some(s) = self.channels.get_mut(channel) {
            if s.remove(id) {
                if s.is_empty() {
                    self.channels.remove(channel);
                }
                return true;
            }
        }
        self.on_topic.contains(id)
    }

    fn is_empty(&self) -> bool {
        self.on_topic.is_empty() && self.channels.is_empty()
    }

    fn len(&self) -> usize {
        self.on_topic.len() + self.channels.values().map(FxHashSet::len).sum::<usize>()
    }
}

impl Skips {
    pub(crate) fn topic_mut(&mut self, topic: &str) -> Option<&mut TopicSkips> {
        self.topics.get_mut(topic)
    }

    pub(crate) fn forget_topic(&mut self, topic: &str) {
        self.topics.remove(topic);
    }

    /// Drops empty entries.
    pub(crate) fn tidy(&mut self, topic: &str) {
        if let Some(t) = self.topics.get_mut(topic) {
            t.channels.retain(|_, s| !s.is_empty());
            if t.is_empty() {
                self.topics.remove(topic);
            }
        }
    }
}

impl Returning {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether channels hold delivery now.
    pub fn is_holding(&self) -> bool {
        self.hold.load(Ordering::Acquire)
    }

    pub(crate) fn set_hold(&self, hold: bool) {
        self.hold.store(hold, Ordering::Release);
    }

    /// Whether replicated channels are fenced now.
    pub fn is_fenced(&self) -> bool {
        self.fence.load(Ordering::Acquire)
    }

    pub(crate) fn set_fence(&self, fence: bool) {
        self.fence.store(fence, Ordering::Release);
    }

    /// IDs still to be skipped (topic entries count once).
    pub fn pending(&self) -> usize {
        self.skips.lock().topics.values().map(TopicSkips::len).sum()
    }

    /// The topics the skip set names.
    pub(crate) fn topics(&self) -> Vec<String> {
        self.skips.lock().topics.keys().cloned().collect()
    }

    /// Whether every entry left is a topic entry (messages still pending on their topic when
    /// last applied: [`crate::engine::Engine::reapply_skips`] may find them fanned out).
    pub fn only_topic_entries(&self) -> bool {
        let s = self.skips.lock();
        !s.topics.is_empty() && s.topics.values().all(|t| t.channels.is_empty())
    }

    /// Forgets a channel's entries (it was emptied or deleted).
    pub(crate) fn forget_channel(&self, topic: &str, channel: &str) {
        let mut s = self.skips.lock();
        if let Some(t) = s.topics.get_mut(topic) {
            t.channels.remove(channel);
        }
        s.tidy(topic);
        self.refresh(&s);
    }

    /// Adds a manifest's entries: an empty channel name means pending on the topic.
    pub(crate) fn add(&self, manifest: &[Manifest]) {
        let mut s = self.skips.lock();
        for m in manifest {
            let t = s.topics.entry(m.topic.clone()).or_default();
            if m.channel.is_empty() {
                t.on_topic.extend(m.ids.iter().copied());
            } else {
                t.channels
                    .entry(m.channel.clone())
                    .or_default()
                    .extend(m.ids.iter().copied());
            }
            self.active.store(true, Ordering::Release);
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Skips> {
        self.skips.lock()
    }

    /// Recomputes whether a take must look at the skip set.
    pub(crate) fn refresh(&self, s: &Skips) {
        self.active.store(!s.topics.is_empty(), Ordering::Release);
    }

    /// The skip set to consult during a take, if it has anything.
    pub(super) fn active(&self) -> Option<MutexGuard<'_, Skips>> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        Some(self.skips.lock())
    }
}

/// What a take consults: `Some` while the skip set has entries of this channel's topic.
pub(super) struct TakeSkips<'a> {
    guard: MutexGuard<'a, Skips>,
    topic: &'a str,
    channel: &'a str,
    /// The IDs dropped by this take.
    pub(super) dropped: Vec<MessageId>,
}

impl<'a> TakeSkips<'a> {
    pub(super) fn new(ret: &'a Returning, topic: &'a str, channel: &'a str) -> Option<Self> {
        let guard = ret.active()?;
        if !guard.topics.contains_key(topic) {
            return None;
        }
        Some(TakeSkips {
            guard,
            topic,
            channel,
            dropped: Vec::new(),
        })
    }

    /// Whether `m` is to be dropped instead of delivered.
    pub(super) fn skip(&mut self, m: &Message) -> bool {
        let Some(t) = self.guard.topics.get_mut(self.topic) else {
            return false;
        };
        if t.take(self.channel, &m.id) {
            self.dropped.push(m.id);
            return true;
        }
        false
    }

    /// Drops empty entries; call once the take is done.
    pub(super) fn finish(mut self, ret: &Returning) -> Vec<MessageId> {
        if !self.dropped.is_empty() {
            self.guard.tidy(self.topic);
            ret.refresh(&self.guard);
        }
        self.dropped
    }
}

impl Channel {
    /// The engine's [`Returning`] (`None` for a channel made without an engine, in tests).
    pub(super) fn returning(&self) -> Option<&std::sync::Arc<Returning>> {
        self.parent.returning.as_ref()
    }

    /// Applies the skip set to this channel (a manifest was applied): every listed message
    /// in flight or deferred here is settled at once, as a FIN would (its consumer's
    /// in-flight count drops as after a timeout); the entries of this channel are then
    /// trimmed to what waits in its memory queue or unread in its diskqueue, dropped when a
    /// take meets them. Returns how many messages were settled at once. Blocking: reads the
    /// diskqueue's unread files (as a replication catch-up does), under the channel lock.
    pub(crate) fn apply_skips(&self, ret: &Returning) -> usize {
        // Writes still outstanding after the wait: the view may miss a message being
        // written, so the entries are kept whole (as when the scan fails below).
        let (mut g, settled_view) = match self.lock_settled() {
            Some(g) => (g, true),
            None => (self.lock(), false),
        };
        // What the channel holds that a take may still meet.
        let mut held: FxHashSet<MessageId> = g.state.queued().map(|m| m.id).collect();
        let r = self.backend.scan_unread(&mut |payload| {
            if let Ok(m) = Message::decode(payload) {
                held.insert(m.id);
            }
        });
        if let Err(e) = &r {
            // Its entries are kept whole: nothing is delivered that might be listed.
            tracing::error!(channel = %self.name, topic = %self.topic_name, "failed to read the backend to apply a manifest - {e}");
        }
        let scanned = r.is_ok() && settled_view;
        let mut settled = Vec::new();
        let mut owners = Vec::new();
        let mut journal_del = Vec::new();
        {
            let mut s = ret.lock();
            let Some(t) = s.topic_mut(&self.topic_name) else {
                return 0;
            };
            let mine = t.channels.remove(&self.name).unwrap_or_default();
            let mut keep = FxHashSet::default();
            for id in mine.iter().chain(t.on_topic.iter()) {
                if let Some(owner) = g.state.in_flight_owner(id) {
                    if g.state.finish(owner, id).is_ok() {
                        owners.push(owner);
                        settled.push(*id);
                    }
                } else if let Some(del) = g.state.drop_deferred(id) {
                    journal_del.extend(del);
                    settled.push(*id);
                }
            }
            let gone: FxHashSet<MessageId> = settled.iter().copied().collect();
            for id in mine {
                if !gone.contains(&id) && (!scanned || held.contains(&id)) {
                    keep.insert(id);
                }
            }
            if !keep.is_empty() {
                t.channels.insert(self.name.clone(), keep);
            }
            s.tidy(&self.topic_name);
            ret.refresh(&s);
        }
        if let (Some(r), false) = (&self.repl, settled.is_empty()) {
            // Under the lock, as a FIN is: the replicas of this epoch drop them too.
            r.finish(&self.topic_name, &self.name, &settled);
        }
        let consumers: Vec<_> = owners
            .iter()
            .filter_map(|id| g.consumers.iter().find(|c| c.id() == *id).cloned())
            .collect();
        drop(g);
        self.journal_del(journal_del);
        for c in consumers {
            c.on_timeout();
        }
        settled.len()
    }
}
