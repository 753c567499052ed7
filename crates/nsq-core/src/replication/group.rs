//! The origin's replica set and acknowledgements (docs/replication.md, "Who holds which
//! origin's messages", "Acknowledgement"), sans-I/O: the rule nsqd's `Group`
//! (crates/nsqd/src/replication/mod.rs) applies, keyed by the peers' node IDs.

use std::collections::BTreeMap;

/// One peer of this origin: the link this node dialled to it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerAcks {
    /// A session is up (WELCOME received).
    pub live: bool,
    /// The highest seq it acknowledged in this session.
    pub acked: u64,
    pub catching_up: bool,
    pub in_set: bool,
}

/// The replica set: exactly N−1 members, sticky, refilled in ring order from the origin.
#[derive(Debug, Clone, Default)]
pub struct Group {
    me: u64,
    need: usize,
    peers: BTreeMap<u64, PeerAcks>,
}

impl Group {
    /// The group of origin `me` that needs `need` (N−1) acknowledgements.
    pub fn new(me: u64, need: usize) -> Self {
        Group {
            me,
            need,
            peers: BTreeMap::new(),
        }
    }

    pub fn need(&self) -> usize {
        self.need
    }

    pub fn peer(&self, id: u64) -> Option<&PeerAcks> {
        self.peers.get(&id)
    }

    pub fn peers(&self) -> impl Iterator<Item = (u64, &PeerAcks)> {
        self.peers.iter().map(|(&k, v)| (k, v))
    }

    /// A session with `id` began; `resumed`: it holds the log up to `floor` already.
    pub fn session_up(&mut self, id: u64, floor: u64, resumed: bool) {
        let p = self.peers.entry(id).or_default();
        p.live = true;
        p.acked = if resumed { floor } else { 0 };
        p.catching_up = !resumed;
        self.refill();
    }

    /// `id` acknowledged `seq` (after its catch-up, if any).
    pub fn ack(&mut self, id: u64, seq: u64) {
        if let Some(p) = self.peers.get_mut(&id).filter(|p| p.live) {
            p.acked = p.acked.max(seq);
            p.catching_up = false;
        }
    }

    /// `id`'s session ended: it leaves the set, the next live peer in ring order joins.
    pub fn session_down(&mut self, id: u64) {
        if let Some(p) = self.peers.get_mut(&id) {
            p.live = false;
            p.in_set = false;
            p.catching_up = false;
        }
        self.refill();
    }

    /// `id` is no more (its identity ended): forgotten.
    pub fn forget(&mut self, id: u64) {
        self.peers.remove(&id);
        self.refill();
    }

    fn refill(&mut self) {
        let members = self.peers.values().filter(|p| p.in_set).count();
        if members >= self.need {
            return;
        }
        let me = self.me;
        let mut free: Vec<u64> = self
            .peers
            .iter()
            .filter(|(_, p)| p.live && !p.in_set)
            .map(|(&k, _)| k)
            .collect();
        free.sort_by_key(|&k| k.wrapping_sub(me));
        for k in free.into_iter().take(self.need - members) {
            if let Some(p) = self.peers.get_mut(&k) {
                p.in_set = true;
            }
        }
    }

    /// The highest seq that N−1 members of the set acknowledged, if the set is full.
    pub fn committed(&self) -> Option<u64> {
        if self.need == 0 {
            return None;
        }
        let acks: Vec<u64> = self
            .peers
            .values()
            .filter(|p| p.in_set)
            .map(|p| p.acked)
            .collect();
        (acks.len() >= self.need).then(|| acks.into_iter().min().unwrap_or(0))
    }

    /// How many members of the set acknowledged `seq`.
    pub fn acked_by(&self, seq: u64) -> usize {
        self.peers
            .values()
            .filter(|p| p.in_set && p.acked >= seq)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_set_is_sticky_and_refilled_in_ring_order() {
        let mut g = Group::new(50, 1);
        g.session_up(10, 0, false);
        g.session_up(60, 0, false);
        // Ring order from 50: 60 before 10 — but 10 came first and stays (sticky).
        assert!(g.peer(10).unwrap().in_set);
        assert!(!g.peer(60).unwrap().in_set);
        assert_eq!(g.committed(), Some(0));
        g.ack(10, 5);
        g.ack(60, 9);
        assert_eq!(g.committed(), Some(5), "only the set's ACKs count");
        g.session_down(10);
        assert!(g.peer(60).unwrap().in_set);
        assert_eq!(g.committed(), Some(9));
        assert_eq!(g.acked_by(9), 1);
        g.session_down(60);
        assert_eq!(g.committed(), None, "the set is not full");
    }

    #[test]
    fn a_resumed_session_counts_from_its_floor() {
        let mut g = Group::new(1, 2);
        g.session_up(2, 7, true);
        g.session_up(3, 7, false);
        assert_eq!(g.committed(), Some(0), "3 catches up");
        g.ack(3, 8);
        assert_eq!(g.committed(), Some(7));
        g.forget(2);
        assert_eq!(g.committed(), None);
    }
}
