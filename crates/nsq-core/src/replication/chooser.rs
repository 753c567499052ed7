//! The chooser of [`Member`]: when a backlog's origin is gone, who takes it over, and the
//! handing off of a copy to a taker elsewhere (see the module docs of `holder.rs`).

use super::holder::LINK_TIMEOUT;
use super::member::Member;
use super::ring::Ring;
use super::{BacklogState, Command, Link, StatusEntry};

impl Member {
    /// The candidates to take `(origin, epoch)` over, best first (see the module docs);
    /// empty while a live member's STATUS is still unknown.
    pub(super) fn candidates(&self, origin: u64, epoch: u64) -> Vec<u64> {
        let key = (origin, epoch);
        let mut ids: Vec<u64> = vec![self.cfg.me];
        ids.extend(self.addrs.values().copied());
        ids.extend(self.gossip.keys().copied());
        let ring = Ring::new(ids.into_iter().filter(|id| !self.ended.contains(id)));
        let mut c: Vec<(bool, u64, usize, u64)> = Vec::new();
        for (pos, m) in ring.after(origin).enumerate() {
            if !self.alive(m) {
                continue;
            }
            let (complete, last_seq) = if m == self.cfg.me {
                match self.backlogs.get(&key) {
                    Some(b) => (b.complete, b.last_seq),
                    None => continue,
                }
            } else {
                if !self.gossip.contains_key(&m) {
                    return Vec::new();
                }
                match self.entry_of(m, key) {
                    Some(e) if e.state != BacklogState::TakenOver => (e.complete, e.last_seq),
                    _ => continue,
                }
            };
            c.push((!complete, u64::MAX - last_seq, pos, m));
        }
        c.sort_unstable();
        c.into_iter().map(|(_, _, _, m)| m).collect()
    }

    /// Another member taking or having taken `(origin, epoch)` over, and its entry.
    pub(super) fn other_taker(&self, key: (u64, u64)) -> Option<(u64, StatusEntry)> {
        let mut taking = None;
        for (&m, g) in &self.gossip {
            for e in g.entries.iter().filter(|e| (e.origin, e.epoch) == key) {
                match e.state {
                    // Only a live taker counts: one dead for good never sends its manifest,
                    // and its origin's epoch would wait for it forever (unwelcomed, fenced).
                    BacklogState::TakenOver if self.alive(m) => return Some((m, *e)),
                    BacklogState::TakingOver if self.alive(m) => taking = Some((m, *e)),
                    _ => {}
                }
            }
        }
        taking
    }

    /// One backlog's decision at a tick (see the module docs).
    pub(super) fn decide(&mut self, key: (u64, u64)) {
        let (origin, epoch) = key;
        let now = self.now;
        let me = self.cfg.me;
        let t = self.cfg.takeover_timeout;
        let Some(b) = self.backlogs.get(&key) else {
            return;
        };
        if b.state == BacklogState::TakingOver {
            if b.retry && now >= b.retry_at {
                let b = self.backlogs.get_mut(&key).expect("present");
                b.retry = false;
                self.note_adoption();
                self.out.push(Command::StartTakeover { origin, epoch });
            }
            return;
        }
        let my_seq = b.last_seq;
        let dominates = |e: &StatusEntry| e.complete && e.last_seq >= my_seq;
        // 1. Someone else takes it over (its STATUS says so now, or the origin's DROP named
        //    it): hand the copy off, or drop a copy it holds entirely.
        let target = match self.other_taker(key) {
            Some((m, e)) => Some((m, Some(e))),
            // A taker whose identity ended (wiped) will never adopt this copy: it is taken
            // over again instead.
            None => b
                .dropped_to
                .filter(|m| !self.ended.contains(m))
                .map(|m| (m, self.entry_of(m, key).copied())),
        };
        if let Some((to, entry)) = target {
            let dominated = entry.filter(|e| dominates(e));
            if dominated.is_some_and(|e| e.state == BacklogState::TakenOver) {
                self.drop_backlog(key);
                return;
            }
            // Taken over elsewhere: this copy stops growing (the origin's session ends).
            // Not while the takeover runs: the origin's epoch may carry that taker's own
            // adoptions, whose acknowledgements it needs (a cycle of takers waited forever).
            let done = entry.is_some_and(|e| e.state == BacklogState::TakenOver);
            if done
                && self
                    .in_links
                    .get(&origin)
                    .is_some_and(|l| l.epoch == Some(epoch))
            {
                self.unwelcome(origin);
                self.out.push(Command::Close {
                    peer: origin,
                    link: Link::In,
                });
            }
            let retry = self.cfg.handoff_retry;
            let alive = self.alive(to);
            let b = self.backlogs.get_mut(&key).expect("present");
            if b.state != BacklogState::Detached {
                b.state = BacklogState::Detached;
                self.status_dirty = true;
            }
            if b.handoff_to != Some(to) {
                b.handoff_to = Some(to);
                b.handoff_sent = None;
            }
            let due = b
                .handoff_sent
                .is_none_or(|s| now.saturating_sub(s) >= retry);
            if dominated.is_none() && alive && due {
                b.handoff_sent = Some(now);
                b.handoff_seq = b.last_seq;
                self.out.push(Command::SendHandoff { to, origin, epoch });
            }
            return;
        }
        self.backlogs.get_mut(&key).expect("present").handoff_to = None;
        // 2. Gone?
        let replicating_elsewhere = self.gossip.iter().any(|(&m, g)| {
            m != me
                && self.alive(m)
                && g.entries
                    .iter()
                    .any(|e| (e.origin, e.epoch) == key && e.state == BacklogState::Replicating)
        });
        let b = &self.backlogs[&key];
        let live = b.watch.link_is_up();
        let gone = !live && (b.ended || (b.watch.is_gone(now) && !replicating_elsewhere));
        let state = if live {
            BacklogState::Replicating
        } else if gone {
            BacklogState::Gone
        } else {
            BacklogState::Detached
        };
        let retry_at = b.retry_at;
        let b = self.backlogs.get_mut(&key).expect("present");
        if b.state != state {
            b.state = state;
            self.status_dirty = true;
        }
        if !gone {
            b.gone_since = None;
            return;
        }
        let since = *b.gone_since.get_or_insert(now);
        if now < retry_at {
            return;
        }
        // Rank on settled facts: every live member's STATUS must come from after this
        // node found O gone and list no copy of it still growing (its last_seq final).
        let settled = self.gossip.iter().all(|(&m, g)| {
            !self.alive(m)
                || (g.at > since
                    && g.entries.iter().all(|e| {
                        (e.origin, e.epoch) != key || e.state != BacklogState::Replicating
                    }))
        });
        if !settled {
            return;
        }
        // 3. The first candidate that has not passed takes it over. `free_from`: when the
        //    candidates passed so far could be passed (a later one waits T from then).
        // A STATUS can lag (a slow link delivers late but in order): passing waits T plus
        // the link timeout, beyond which a link that lags is dead anyway.
        let wait = t + LINK_TIMEOUT;
        let mut free_from = since;
        for c in self.candidates(origin, epoch) {
            if c == me {
                if self.leaving() {
                    // A leaving node takes nothing new over (its leave would have to hand it
                    // on again): the next candidate passes it over after T + 5 s.
                    return;
                }
                let b = self.backlogs.get_mut(&key).expect("present");
                b.state = BacklogState::TakingOver;
                self.status_dirty = true;
                self.out.push(Command::StartTakeover { origin, epoch });
                return;
            }
            let Some(g) = self.gossip.get(&c) else {
                return;
            };
            let Some(e) = g.entries.iter().find(|e| (e.origin, e.epoch) == key) else {
                continue;
            };
            let passed = match e.state {
                BacklogState::Gone => {
                    let from = g
                        .gone_from
                        .iter()
                        .find(|(k, _)| *k == key)
                        .map_or(now, |(_, f)| *f)
                        .max(free_from);
                    free_from = from + wait;
                    now >= from + wait
                }
                BacklogState::Detached => {
                    free_from = free_from.max(since + wait);
                    g.at >= since + wait
                }
                _ => false,
            };
            if !passed {
                return;
            }
        }
    }
}
