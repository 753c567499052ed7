//! What `/stats`, `/metrics`, nsqadmin and the tests see of replication: backlogs per origin,
//! peers and their lag, counters.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Backlog, Replication};

/// A backlog as `/stats` and tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BacklogInfo {
    pub origin: u64,
    pub epoch: u64,
    pub messages: u64,
    pub bytes: u64,
    pub last_seq: u64,
    pub segments: usize,
    pub catching_up: bool,
    /// `replicating`, `detached`, `taking over`, or `taken over` (a manifest kept; the
    /// backlog itself is gone and `messages` counts the IDs taken over).
    pub state: &'static str,
}

/// A peer as `/stats` and tests see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    pub address: String,
    pub node_id: u64,
    pub connected: bool,
    pub in_replica_set: bool,
    pub catching_up: bool,
    pub acked_seq: u64,
    pub last_seen_ms: Option<u64>,
}

impl PeerInfo {
    /// How far the peer is behind this node's log (`last_seq`, [`OriginLog::last_seq`]): the
    /// frames it has not acknowledged, while connected; 0 when it is not (`/stats`
    /// `lag_frames`, `/metrics` `nsq_nsqd_replication_peer_lag_frames`).
    pub fn lag_frames(&self, last_seq: u64) -> u64 {
        if self.connected {
            last_seq.saturating_sub(self.acked_seq)
        } else {
            0
        }
    }
}

impl Replication {
    /// The topics and channels (pause flags, queue settings) this node's backlogs of
    /// `origin` hold, epoch by epoch: what a takeover of them would create.
    pub fn backlog_topics(
        &self,
        origin: u64,
    ) -> Vec<(u64, Vec<nsq_protocol::replication::TopicItem>)> {
        let list: Vec<Arc<Backlog>> = self
            .backlogs
            .lock()
            .values()
            .filter(|b| b.origin == origin)
            .cloned()
            .collect();
        let mut v: Vec<_> = list
            .iter()
            .map(|b| {
                let mut topics = b.store.lock().topics();
                topics.sort_by(|x, y| x.topic.cmp(&y.topic));
                (b.epoch, topics)
            })
            .collect();
        v.sort_by_key(|(epoch, _)| *epoch);
        v
    }

    // ---- views -------------------------------------------------------------------------

    /// The backlogs held, by origin and epoch.
    pub fn backlogs(&self) -> Vec<BacklogInfo> {
        let list: Vec<Arc<Backlog>> = self.backlogs.lock().values().cloned().collect();
        let mut v: Vec<BacklogInfo> = list
            .iter()
            .map(|b| {
                let state = b.state();
                // A takeover holds the store's lock while it delivers (seconds for a large
                // backlog): the view does not wait for it (the numbers are then 0).
                let s = if b.taking_over.load(Ordering::Acquire) {
                    b.store.try_lock()
                } else {
                    Some(b.store.lock())
                };
                BacklogInfo {
                    origin: b.origin,
                    epoch: b.epoch,
                    messages: s.as_ref().map_or(0, |s| s.index().messages()),
                    bytes: s.as_ref().map_or(0, |s| s.bytes()),
                    last_seq: s.as_ref().map_or(0, |s| s.last_seq()),
                    segments: s.as_ref().map_or(0, |s| s.segments()),
                    catching_up: s.as_ref().is_some_and(|s| s.index().catching_up()),
                    state,
                }
            })
            .collect();
        // A manifest whose backlog is still here (its takeover not yet confirmed) shows as
        // that backlog, `taking over`.
        let held: Vec<(u64, u64)> = list.iter().map(|b| (b.origin, b.epoch)).collect();
        v.extend(
            self.taken
                .lock()
                .iter()
                .filter(|(k, _)| !held.contains(k))
                .map(|(&(origin, epoch), &ids)| BacklogInfo {
                    origin,
                    epoch,
                    messages: ids,
                    bytes: 0,
                    last_seq: 0,
                    segments: 0,
                    catching_up: false,
                    state: "taken over",
                }),
        );
        v.sort_by_key(|b| (b.origin, b.epoch));
        v
    }

    /// The peers, in `--replication-peer` order, then the members found through nsqlookupd
    /// in the order found; without the dropped ones (this very node, or a second address of
    /// a node another entry links to).
    pub fn peers(&self) -> Vec<PeerInfo> {
        let g = self.group.lock();
        g.peers
            .iter()
            .filter(|p| !p.dropped)
            .map(|p| PeerInfo {
                address: p.addr.clone(),
                node_id: p.node_id,
                connected: p.live,
                in_replica_set: p.in_set,
                catching_up: p.catching_up,
                acked_seq: p.acked,
                last_seen_ms: p.last_seen.map(|t| t.elapsed().as_millis() as u64),
            })
            .collect()
    }

    /// Publishes waiting for replica acknowledgements now.
    pub fn publish_waiting(&self) -> u64 {
        self.publish_waiting.load(Ordering::Relaxed)
    }

    /// Publishes failed for want of replica acknowledgements.
    pub fn publish_failures(&self) -> u64 {
        self.publish_failures.load(Ordering::Relaxed)
    }

    /// Peers' backlogs this node took over since it started.
    pub fn takeovers(&self) -> u64 {
        self.takeovers.load(Ordering::Relaxed)
    }

    /// Link sessions to peers that began with a catch-up since this node started.
    pub fn catchups(&self) -> u64 {
        self.catchups.load(Ordering::Relaxed)
    }

    /// A link session began with a catch-up (origin.rs, `session`).
    pub(crate) fn count_catchup(&self) {
        self.catchups.fetch_add(1, Ordering::Relaxed);
    }
}
