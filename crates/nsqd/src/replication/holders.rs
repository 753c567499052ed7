//! Which members hold an origin's epoch, for the takeover chooser (`takeover.rs`,
//! [`Replication::taker`]): what this node knows of each member's copy from its STATUS
//! gossip, trusting a STATUS only from after the origin was lost here. Code moved out of
//! takeover.rs unchanged. NSQ has no counterpart.

use std::sync::atomic::Ordering;

use super::Replication;

impl Replication {
    /// Whether member `m` holds a backlog of `(origin, epoch)` to take over: another member
    /// does if its last STATUS lists a complete one, or when it sent none (not known:
    /// assumed); this node does, unless its copy's catch-up has not ended and a live member
    /// lists a complete one.
    ///
    /// Of the holders, only those that hold the most of the epoch count (the highest
    /// `last_seq` this node knows of among live holders, its own included): a member that
    /// lagged behind the origin (outside its replica set, its ACKs not waited for) must not
    /// take over while one that holds more drops its copy.
    pub(super) fn holds(&self, m: u64, origin: u64, epoch: u64) -> bool {
        if !self.holds_any(m, origin, epoch) {
            return false;
        }
        let Some(mine) = self.held_seq(m, origin, epoch) else {
            // Not known (no STATUS from it yet): assumed, as above.
            return true;
        };
        let mut members: Vec<u64> = self.gossip.lock().keys().copied().collect();
        members.push(self.identity.node_id);
        let best = members
            .into_iter()
            .filter(|&n| self.alive(n) && self.holds_any(n, origin, epoch))
            .filter_map(|n| self.held_seq(n, origin, epoch))
            .max()
            .unwrap_or(0);
        mine >= best
    }

    /// The last seq of `(origin, epoch)` member `m` holds, as far as this node knows. Another
    /// member's is known only from a STATUS that arrived after this node lost the origin (or
    /// heard that its epoch ended): an older one may predate the last frames it stored, and
    /// two holders each reading the other's stale `last_seq` as smaller both took over (a
    /// wiped origin back within milliseconds, tests/python/test_replication_netns.py
    /// `test_wiped_disk_return`). Unknown, it is assumed as high as any (ring order decides,
    /// the same on both).
    fn held_seq(&self, m: u64, origin: u64, epoch: u64) -> Option<u64> {
        if m == self.identity.node_id {
            let b = self.backlogs.lock().get(&(origin, epoch)).cloned()?;
            let seq = b.store.lock().last_seq();
            return Some(seq);
        }
        self.settled_gossip(m, origin, epoch).and_then(|entries| {
            entries
                .iter()
                .find(|e| e.origin == origin && e.epoch == epoch && e.complete)
                .map(|e| e.last_seq)
        })
    }

    /// Member `m`'s last STATUS, if it arrived after this node lost `origin`'s `epoch` (its
    /// link went down, or the epoch was declared ended): one from before may predate the
    /// last frames `m` stored and the end of its catch-up (see [`Replication::held_seq`]).
    fn settled_gossip(
        &self,
        m: u64,
        origin: u64,
        epoch: u64,
    ) -> Option<Vec<nsq_protocol::replication::StatusEntry>> {
        let lost = self
            .backlogs
            .lock()
            .get(&(origin, epoch))
            .map(|b| b.link())
            .and_then(|l| match (l.ended, l.down_since) {
                (Some(e), Some(d)) => Some(e.min(d)),
                (e, d) => e.or(d),
            });
        let heard = self.gossip_at.lock().get(&m).copied();
        if let (Some(lost), Some(heard)) = (lost, heard) {
            if heard <= lost {
                return None;
            }
        }
        self.gossip.lock().get(&m).cloned()
    }

    /// [`Replication::holds`] without the comparison of how much each holds.
    fn holds_any(&self, m: u64, origin: u64, epoch: u64) -> bool {
        // Not known (no STATUS since the origin was lost here): assumed.
        let lists = |m: u64| {
            self.settled_gossip(m, origin, epoch).is_none_or(|entries| {
                entries
                    .iter()
                    .any(|e| e.origin == origin && e.epoch == epoch && e.complete)
            })
        };
        let me = self.identity.node_id;
        if m != me {
            return lists(m);
        }
        let Some(b) = self.backlogs.lock().get(&(origin, epoch)).cloned() else {
            return false;
        };
        if b.taking_over.load(Ordering::Acquire) || !b.store.lock().index().catching_up() {
            return true;
        }
        let listed: Vec<u64> = self.gossip.lock().keys().copied().collect();
        !listed
            .into_iter()
            .any(|n| n != me && self.alive(n) && lists(n))
    }
}
