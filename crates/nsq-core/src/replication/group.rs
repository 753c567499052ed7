//! The origin's replica set and acknowledgements (docs/replication.md, "Who holds which
//! origin's messages", "Acknowledgement"), sans-I/O. nsqd's views (`/stats`) and its outbox
//! read this set through the driver (crates/nsqd/src/replication/driver.rs).
//!
//! Only the set holds a copy: the origin streams its log to the N−1 members of its set and
//! to no other member. A member outside the set keeps its link (PING, STATUS: it still
//! proves the origin alive and takes part in takeovers of others) and is told STANDBY once
//! the set is settled — full, and every member's catch-up ended — so that the copy it may
//! still hold (from a session in which it was in the set) is deleted only when the set holds
//! every acknowledged message without it.

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
    /// The log is streamed to it in this session (it joined the set).
    pub streaming: bool,
    /// Its WELCOME offered to resume after this seq; used only if it joins the set at once.
    pub offer: Option<u64>,
    /// STANDBY was sent in this session: it holds nothing of this epoch.
    pub released: bool,
}

/// How the origin starts streaming to a member that joined its set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// From this seq on (its copy is complete up to the seq before).
    Resume { from: u64 },
    /// A catch-up, then the live log.
    Catchup,
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

    /// A session with `id` began; `offer`: its copy is complete up to that seq (resumable).
    /// Returns the members that joined the set, `id` among them if it did.
    pub fn session_up(&mut self, id: u64, offer: Option<u64>) -> Vec<(u64, Join)> {
        let p = self.peers.entry(id).or_default();
        *p = PeerAcks {
            live: true,
            offer,
            ..PeerAcks::default()
        };
        let joined = self.refill();
        // Not in the set now: if it joins later, the log may not continue its copy any more.
        if let Some(p) = self.peers.get_mut(&id) {
            p.offer = None;
        }
        joined
    }

    /// `id` acknowledged `seq` (after its catch-up, if any).
    pub fn ack(&mut self, id: u64, seq: u64) {
        if let Some(p) = self.peers.get_mut(&id).filter(|p| p.live && p.streaming) {
            p.acked = p.acked.max(seq);
            p.catching_up = false;
        }
    }

    /// `id`'s session ended: it leaves the set, the next live peer in ring order joins.
    pub fn session_down(&mut self, id: u64) -> Vec<(u64, Join)> {
        if let Some(p) = self.peers.get_mut(&id) {
            *p = PeerAcks::default();
        }
        self.refill()
    }

    /// Every session ended together (the origin moved to a new epoch): nobody joins.
    pub fn reset(&mut self) {
        for p in self.peers.values_mut() {
            *p = PeerAcks::default();
        }
    }

    /// `id` is no more (its identity ended): forgotten.
    pub fn forget(&mut self, id: u64) -> Vec<(u64, Join)> {
        self.peers.remove(&id);
        self.refill()
    }

    fn refill(&mut self) -> Vec<(u64, Join)> {
        let members = self.peers.values().filter(|p| p.in_set).count();
        if members >= self.need {
            return Vec::new();
        }
        let me = self.me;
        let mut free: Vec<u64> = self
            .peers
            .iter()
            .filter(|(_, p)| p.live && !p.in_set)
            .map(|(&k, _)| k)
            .collect();
        free.sort_by_key(|&k| k.wrapping_sub(me));
        let mut joined = Vec::new();
        for k in free.into_iter().take(self.need - members) {
            if let Some(p) = self.peers.get_mut(&k) {
                p.in_set = true;
                p.streaming = true;
                // Only an offer made just now resumes (`session_up` forgets it otherwise).
                let join = match p.offer.take() {
                    Some(s) => {
                        p.acked = s;
                        Join::Resume { from: s + 1 }
                    }
                    None => {
                        p.acked = 0;
                        p.catching_up = true;
                        Join::Catchup
                    }
                };
                joined.push((k, join));
            }
        }
        joined
    }

    /// The set is full and every member's catch-up ended: together they hold every
    /// acknowledged unsettled message, so no copy outside the set is needed.
    pub fn settled(&self) -> bool {
        let set: Vec<&PeerAcks> = self.peers.values().filter(|p| p.in_set).collect();
        set.len() >= self.need && set.iter().all(|p| !p.catching_up)
    }

    /// Live members outside the set not yet told STANDBY, when the set is settled; each is
    /// marked told. Its offer goes with its copy.
    pub fn release(&mut self) -> Vec<u64> {
        if !self.settled() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (&k, p) in self.peers.iter_mut() {
            if p.live && !p.in_set && !p.released {
                p.released = true;
                p.offer = None;
                out.push(k);
            }
        }
        out
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
        assert_eq!(g.session_up(10, None), vec![(10, Join::Catchup)]);
        assert!(g.session_up(60, None).is_empty());
        // Ring order from 50: 60 before 10 — but 10 came first and stays (sticky).
        assert!(g.peer(10).unwrap().in_set);
        assert!(!g.peer(60).unwrap().in_set);
        assert!(
            !g.peer(60).unwrap().streaming,
            "nothing streams outside the set"
        );
        assert_eq!(g.committed(), Some(0));
        g.ack(10, 5);
        g.ack(60, 9);
        assert_eq!(g.committed(), Some(5), "only the set's ACKs count");
        assert_eq!(g.session_down(10), vec![(60, Join::Catchup)]);
        assert!(g.peer(60).unwrap().in_set);
        assert_eq!(g.committed(), Some(0), "60 catches up first");
        g.ack(60, 9);
        assert_eq!(g.committed(), Some(9));
        assert_eq!(g.acked_by(9), 1);
        assert!(g.session_down(60).is_empty());
        assert_eq!(g.committed(), None, "the set is not full");
    }

    #[test]
    fn a_resumed_session_counts_from_its_floor() {
        let mut g = Group::new(1, 2);
        assert_eq!(
            g.session_up(2, Some(7)),
            vec![(2, Join::Resume { from: 8 })]
        );
        assert_eq!(g.session_up(3, None), vec![(3, Join::Catchup)]);
        assert_eq!(g.committed(), Some(0), "3 catches up");
        g.ack(3, 8);
        assert_eq!(g.committed(), Some(7));
        g.forget(2);
        assert_eq!(g.committed(), None);
    }

    #[test]
    fn members_outside_the_set_are_released_once_it_is_settled() {
        let mut g = Group::new(50, 1);
        g.session_up(60, Some(4));
        g.session_up(10, Some(4));
        assert!(g.settled(), "60 resumed: its copy is complete");
        assert_eq!(g.release(), vec![10]);
        assert!(g.release().is_empty(), "told once per session");
        // 60 goes: 10 joins, and catches up (its copy was released).
        assert_eq!(g.session_down(60), vec![(10, Join::Catchup)]);
        assert!(!g.settled());
        // 60 comes back while 10 catches up: not released before 10 holds everything.
        assert!(g.session_up(60, Some(4)).is_empty());
        assert!(g.release().is_empty());
        g.ack(10, 12);
        assert_eq!(g.release(), vec![60]);
        // A released member that joins later catches up, whatever it offered.
        assert_eq!(g.session_down(10), vec![(60, Join::Catchup)]);
    }
}
