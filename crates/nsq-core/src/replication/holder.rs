//! The holder's side of [`Member`]: the backlogs this node keeps of other origins, when one
//! is gone, who takes it over, HANDOFF, and the answer to a returning origin's HELLO.
//!
//! **The chooser, through gossip.** The candidates for `(O, e)` are the members alive to
//! this node (itself included) whose STATUS lists a copy, ordered: complete copies first,
//! then the highest `last_seq`, then ring order after O. A member takes over when it is the
//! first candidate and O is gone for it. It passes over an earlier candidate only on that
//! candidate's own word — a STATUS received T + 5 s after this node found O gone that still
//! says `detached` (it cannot confirm O's absence: it reaches no lookupd, say), or `gone` for
//! T + 5 s after its own predecessors could be passed, without `taking over` — or when the
//! candidate is not alive to it. (Not at once: the candidates' timers differ by the link
//! timeout's detection and their clock rates, and a STATUS can arrive late.) Two takers of one epoch therefore need two
//! members that each think the other dead (partitioned survivors): the documented window.
//!
//! **HANDOFF.** A holder that sees another member take `(O, e)` over (STATUS `taking over`
//! or `taken over`, or the origin's DROP naming the taker) sends its copy to that taker —
//! unless the taker's copy is complete with a `last_seq` at least its own, which holds
//! everything its copy does — and deletes it only on HANDOFF_DONE (or, dominated, on
//! `taken over`). The taker adopts what it lacks. So the union of the holders is delivered.

use std::time::Duration;

use super::member::Member;
use super::{BacklogState, Command, Config, GoneWatch, Link, Msg, StatusEntry};

/// A link with no frame for this long is dead (docs/replication.md, fixed constants).
pub(super) const LINK_TIMEOUT: Duration = Duration::from_secs(5);

/// One backlog this node holds.
#[derive(Debug, Clone)]
pub(super) struct Backlog {
    pub addr: Option<String>,
    pub last_seq: u64,
    pub complete: bool,
    pub watch: GoneWatch,
    /// The origin said (HELLO of a later epoch, DROP) or its identity's end showed that this
    /// epoch ended: gone at once.
    pub ended: bool,
    pub state: BacklogState,
    /// When this node found the origin gone.
    pub gone_since: Option<Duration>,
    /// The member this copy was last sent to (HANDOFF), while it takes the epoch over.
    pub handoff_to: Option<u64>,
    /// The taker the origin's DROP named.
    pub dropped_to: Option<u64>,
    pub handoff_sent: Option<Duration>,
    /// The `last_seq` of the copy that was sent: HANDOFF_DONE covers that much.
    pub handoff_seq: u64,
    /// A failed takeover is retried from then.
    pub retry_at: Duration,
    pub retry: bool,
}

impl Backlog {
    pub(super) fn new(cfg: &Config, now: Duration, addr: Option<String>) -> Backlog {
        Backlog {
            addr,
            last_seq: 0,
            complete: false,
            watch: GoneWatch::new(cfg.takeover_timeout, cfg.lookupds, now),
            ended: false,
            state: BacklogState::Detached,
            gone_since: None,
            handoff_to: None,
            dropped_to: None,
            handoff_sent: None,
            handoff_seq: 0,
            retry_at: now,
            retry: false,
        }
    }
}

/// A link from an origin.
#[derive(Debug, Clone)]
pub(super) struct InLink {
    pub addr: String,
    /// The epoch its session was welcomed for.
    pub epoch: Option<u64>,
    /// A HELLO not answered yet (its epoch and stamp).
    pub hello: Option<(u64, Duration)>,
    /// The newest PING stamp received.
    pub ping: Duration,
    /// TAKEN_OVER of this epoch was sent; the HELLO is answered again once the origin
    /// applied its manifest.
    pub awaiting: Option<u64>,
}

impl InLink {
    pub(super) fn new(addr: String) -> InLink {
        InLink {
            addr,
            epoch: None,
            hello: None,
            ping: Duration::ZERO,
            awaiting: None,
        }
    }
}

/// A member's last STATUS.
#[derive(Debug, Clone)]
pub(super) struct Gossip {
    pub at: Duration,
    pub entries: Vec<StatusEntry>,
    /// Per `(origin, epoch)` it says is gone: since when it has said so (this node's clock).
    pub gone_from: Vec<((u64, u64), Duration)>,
}

impl Member {
    pub(super) fn status_entries(&self) -> Vec<StatusEntry> {
        let mut v: Vec<StatusEntry> = self
            .backlogs
            .iter()
            .map(|(&(origin, epoch), b)| StatusEntry {
                origin,
                epoch,
                state: b.state,
                last_seq: b.last_seq,
                complete: b.complete,
                echo: match (b.state, self.in_links.get(&origin)) {
                    (BacklogState::Replicating, Some(l)) => l.ping,
                    _ => Duration::ZERO,
                },
            })
            .collect();
        v.extend(
            self.manifests
                .iter()
                .map(|(&(origin, epoch), &(last_seq, complete, _))| StatusEntry {
                    origin,
                    epoch,
                    state: BacklogState::TakenOver,
                    last_seq,
                    complete,
                    echo: Duration::ZERO,
                }),
        );
        v.truncate(usize::from(u16::MAX));
        v
    }

    pub(super) fn status(&mut self, from: u64, entries: Vec<StatusEntry>) {
        let now = self.now;
        let prev = self.gossip.remove(&from);
        let mut gone_from = Vec::new();
        for e in &entries {
            if e.state == BacklogState::Gone {
                let key = (e.origin, e.epoch);
                let since = prev
                    .as_ref()
                    .and_then(|g| g.gone_from.iter().find(|(k, _)| *k == key))
                    .map_or(now, |(_, t)| *t);
                gone_from.push((key, since));
            }
            if e.origin == self.cfg.me && e.state == BacklogState::Replicating {
                self.note_heard(e.epoch, e.echo);
            }
        }
        self.gossip.insert(
            from,
            Gossip {
                at: now,
                entries,
                gone_from,
            },
        );
    }

    pub(super) fn entry_of(&self, m: u64, key: (u64, u64)) -> Option<&StatusEntry> {
        self.gossip
            .get(&m)?
            .entries
            .iter()
            .find(|e| (e.origin, e.epoch) == key)
    }

    pub(super) fn hello(&mut self, origin: u64, epoch: u64, unclean: Option<u64>, stamp: Duration) {
        for ((o, e), b) in self.backlogs.iter_mut() {
            if *o == origin && (*e < epoch || unclean.is_some_and(|u| *e <= u)) && !b.ended {
                b.ended = true;
                self.status_dirty = true;
            }
        }
        self.unwelcome(origin);
        if let Some(l) = self.in_links.get_mut(&origin) {
            l.hello = Some((epoch, stamp));
        }
        self.answer_hello(origin);
    }

    /// Answers a pending HELLO: TAKEN_OVER with the oldest manifest not applied, or waits for
    /// a takeover of an older epoch that runs or is about to, or WELCOME.
    fn answer_hello(&mut self, origin: u64) {
        let Some((epoch, stamp)) = self
            .in_links
            .get(&origin)
            .filter(|l| l.awaiting.is_none())
            .and_then(|l| l.hello)
        else {
            return;
        };
        let manifest = self
            .manifests
            .iter()
            .find(|(&(o, e), m)| o == origin && e <= epoch && m.2.is_none())
            .map(|(&(_, e), m)| (e, m.0));
        if let Some((e, last_seq)) = manifest {
            if let Some(l) = self.in_links.get_mut(&origin) {
                l.awaiting = Some(e);
            }
            self.out.push(Command::Send {
                to: origin,
                link: Link::In,
                msg: Msg::TakenOver { epoch: e, last_seq },
            });
            self.out.push(Command::SendManifest { origin, epoch: e });
            return;
        }
        if self.manifests.contains_key(&(origin, epoch)) {
            // Taken over here and applied by the origin (a HELLO sent before it moved on):
            // never a new copy of it; its next HELLO is of a later epoch.
            return;
        }
        if self
            .other_taker((origin, epoch))
            .is_some_and(|(_, e)| e.state == BacklogState::TakenOver)
        {
            // Taken over elsewhere: no new copies of it; the taker's manifest moves the
            // origin on to its next epoch.
            return;
        }
        if self
            .backlogs
            .get(&(origin, epoch))
            .is_some_and(|b| b.state == BacklogState::TakingOver)
        {
            // Taken over here: welcomed back into it, the origin would deliver what this node
            // puts. Its STATUS (sent at link up) moves it on to its next epoch, which is
            // welcomed (below) while the takeover runs.
            return;
        }
        let me = self.cfg.me;
        let older: Vec<u64> = self
            .backlogs
            .range((origin, 0)..(origin, epoch))
            .map(|(&(_, e), _)| e)
            .collect();
        for e in older {
            if self.other_taker((origin, e)).is_some() {
                // Taken over elsewhere: this copy goes there as a HANDOFF, so no wait (one
                // left the origin's next epoch unwelcomed while that taker needed it).
                continue;
            }
            // About to be taken over here: TAKEN_OVER answers first. One already being taken
            // over here does not wait: its adoptions may need this origin's acknowledgements
            // (two members taking over each other's epochs waited for each other), and
            // TAKEN_OVER follows on this session once it is done ([`Member::tell_taken`]).
            let b = &self.backlogs[&(origin, e)];
            if b.state != BacklogState::TakingOver
                && b.dropped_to.is_none()
                && self.candidates(origin, e).first() == Some(&me)
            {
                return;
            }
        }
        if let Some(l) = self.in_links.get_mut(&origin) {
            l.hello = None;
            l.epoch = Some(epoch);
        }
        let addr = self.in_links.get(&origin).map(|l| l.addr.clone());
        let (cfg, now) = (&self.cfg, self.now);
        let b = self
            .backlogs
            .entry((origin, epoch))
            .or_insert_with(|| Backlog::new(cfg, now, addr.clone()));
        b.addr = addr;
        b.watch.link_up();
        b.state = BacklogState::Replicating;
        b.gone_since = None;
        let resume = (b.complete && b.last_seq > 0).then_some(b.last_seq);
        self.status_dirty = true;
        self.out.push(Command::Send {
            to: origin,
            link: Link::In,
            msg: Msg::Welcome {
                epoch,
                resume,
                echo: stamp,
            },
        });
    }

    /// Sends TAKEN_OVER and the manifest of the oldest epoch of `origin` taken over here and
    /// not applied yet on its session of a later epoch (welcomed while the takeover ran),
    /// one at a time.
    pub(super) fn tell_taken(&mut self, origin: u64) {
        let Some(welcomed) = self
            .in_links
            .get(&origin)
            .filter(|l| l.awaiting.is_none() && l.hello.is_none())
            .and_then(|l| l.epoch)
        else {
            return;
        };
        let Some((epoch, last_seq)) = self
            .manifests
            .iter()
            .find(|(&(o, e), m)| o == origin && e < welcomed && m.2.is_none())
            .map(|(&(_, e), m)| (e, m.0))
        else {
            return;
        };
        if let Some(l) = self.in_links.get_mut(&origin) {
            l.awaiting = Some(epoch);
        }
        self.out.push(Command::Send {
            to: origin,
            link: Link::In,
            msg: Msg::TakenOver { epoch, last_seq },
        });
        self.out.push(Command::SendManifest { origin, epoch });
    }

    pub(super) fn ping(&mut self, origin: u64, stamp: Duration) {
        if let Some(l) = self.in_links.get_mut(&origin) {
            l.ping = l.ping.max(stamp);
            if l.epoch.is_some() {
                self.out.push(Command::Send {
                    to: origin,
                    link: Link::In,
                    msg: Msg::Pong { stamp },
                });
            }
        }
    }

    pub(super) fn in_link_down(&mut self, origin: u64) {
        self.unwelcome(origin);
        self.in_links.remove(&origin);
    }

    /// The origin's session no longer writes the epoch it was welcomed for: that backlog's
    /// link is down from now.
    pub(super) fn unwelcome(&mut self, origin: u64) {
        let Some(e) = self.in_links.get_mut(&origin).and_then(|l| l.epoch.take()) else {
            return;
        };
        if let Some(b) = self.backlogs.get_mut(&(origin, e)) {
            b.watch.link_down(self.now);
            if b.state == BacklogState::Replicating {
                b.state = BacklogState::Detached;
            }
            self.status_dirty = true;
        }
    }

    pub(super) fn origin_applied(&mut self, origin: u64, epoch: u64) {
        if let Some(m) = self.manifests.get_mut(&(origin, epoch)) {
            if m.2.is_none() {
                m.2 = Some(self.now);
                self.out.push(Command::DeleteManifest { origin, epoch });
            }
        }
        if let Some(l) = self.in_links.get_mut(&origin) {
            if l.awaiting == Some(epoch) {
                l.awaiting = None;
            }
        }
        self.answer_hello(origin);
        self.tell_taken(origin);
    }

    /// `origin`'s identity ended (a new node ID at its address): it never applies a manifest,
    /// so those kept here are deleted and announced as taken over for a while longer, as
    /// after MANIFEST_APPLIED.
    pub(super) fn retire_manifests_of(&mut self, origin: u64) {
        let now = self.now;
        for (&(o, epoch), m) in self.manifests.iter_mut() {
            if o == origin && m.2.is_none() {
                m.2 = Some(now);
                self.out.push(Command::DeleteManifest { origin, epoch });
            }
        }
    }

    pub(super) fn dropped(&mut self, origin: u64, epoch: u64, taker: u64) {
        for ((o, e), b) in self.backlogs.iter_mut() {
            if *o == origin && *e <= epoch && taker != self.cfg.me {
                b.ended = true;
                b.dropped_to = Some(taker);
            }
        }
    }

    /// The origin's session of `epoch` carries no copy to this node (STANDBY): the copy is
    /// forgotten (the driver's session deleted it as it read the frame); the session stays.
    pub(super) fn standby(&mut self, origin: u64, epoch: u64) {
        let welcomed = self
            .in_links
            .get(&origin)
            .is_some_and(|l| l.epoch == Some(epoch));
        let key = (origin, epoch);
        if welcomed
            && self
                .backlogs
                .get(&key)
                .is_some_and(|b| b.state == BacklogState::Replicating)
        {
            self.backlogs.remove(&key);
            self.status_dirty = true;
        }
    }

    pub(super) fn stored(&mut self, origin: u64, epoch: u64, last_seq: u64, complete: bool) {
        let live = self
            .in_links
            .get(&origin)
            .is_some_and(|l| l.epoch == Some(epoch));
        if live && !self.backlogs.contains_key(&(origin, epoch)) {
            // A member told STANDBY that joined the origin's set later: a new copy.
            let addr = self.in_links.get(&origin).map(|l| l.addr.clone());
            let mut b = Backlog::new(&self.cfg, self.now, addr);
            b.watch.link_up();
            b.state = BacklogState::Replicating;
            self.backlogs.insert((origin, epoch), b);
            self.status_dirty = true;
        }
        let Some(b) = self.backlogs.get_mut(&(origin, epoch)) else {
            return;
        };
        if b.complete != complete {
            self.status_dirty = true;
        }
        b.last_seq = last_seq;
        b.complete = complete;
        if complete && live {
            self.out.push(Command::Send {
                to: origin,
                link: Link::In,
                msg: Msg::Ack { seq: last_seq },
            });
        }
    }

    pub(super) fn lookupd_answer(
        &mut self,
        i: usize,
        clock: Duration,
        producers: &[(String, Duration)],
    ) {
        let now = self.now;
        for b in self.backlogs.values_mut() {
            let listed = b
                .addr
                .as_ref()
                .and_then(|a| producers.iter().find(|(p, _)| p == a).map(|(_, u)| *u));
            b.watch.lookupd_answer(i, now, clock, listed);
        }
    }

    /// The lookupds configured changed: each backlog's gone rule starts again with `count`
    /// of them, its link as it is (down from now if it is down).
    pub(super) fn lookupds_changed(&mut self, count: usize) {
        if count == self.cfg.lookupds {
            return;
        }
        self.cfg.lookupds = count;
        let (t, now) = (self.cfg.takeover_timeout, self.now);
        for b in self.backlogs.values_mut() {
            let up = b.watch.link_is_up();
            b.watch = GoneWatch::new(t, count, now);
            if up {
                b.watch.link_up();
            } else {
                b.watch.link_down(now);
            }
        }
    }

    pub(super) fn note_heard(&mut self, epoch: u64, echo: Duration) {
        if epoch == self.epoch() {
            self.note_member_proof(echo);
        }
    }

    pub(super) fn takeover_ended(&mut self, origin: u64, epoch: u64, ok: bool) {
        let key = (origin, epoch);
        let Some(b) = self.backlogs.get_mut(&key) else {
            return;
        };
        if b.state != BacklogState::TakingOver {
            return;
        }
        self.status_dirty = true;
        if ok {
            let (last_seq, complete) = (b.last_seq, b.complete);
            self.drop_backlog(key);
            self.manifests.insert(key, (last_seq, complete, None));
            if self.ended.contains(&origin) {
                self.retire_manifests_of(origin);
            }
            self.answer_hello(origin);
            self.tell_taken(origin);
        } else {
            // Still this member's takeover (what it put stays put): it goes on announcing
            // `taking over` and tries again, so the others hand off to it.
            b.retry = true;
            b.retry_at = self.now + self.cfg.status_every;
        }
    }

    pub(super) fn handoff_received(&mut self, from: u64, origin: u64, epoch: u64) {
        let key = (origin, epoch);
        let taker = self.manifests.contains_key(&key)
            || self
                .backlogs
                .get(&key)
                .is_some_and(|b| b.state == BacklogState::TakingOver);
        if taker {
            self.note_adoption();
            self.out.push(Command::AdoptHandoff {
                from,
                origin,
                epoch,
            });
        }
    }

    pub(super) fn handoff_done(&mut self, from: u64, origin: u64, epoch: u64) {
        let key = (origin, epoch);
        let Some(b) = self.backlogs.get_mut(&key) else {
            return;
        };
        if b.handoff_to != Some(from) {
            return;
        }
        if b.last_seq > b.handoff_seq {
            // More arrived after the copy was sent: send it again.
            b.handoff_sent = None;
            return;
        }
        self.drop_backlog(key);
    }

    /// Deletes the copy of `key`; a session of that epoch still writing to it ends (the
    /// origin's next HELLO is not welcomed into an epoch taken over).
    pub(super) fn drop_backlog(&mut self, key: (u64, u64)) {
        let (origin, epoch) = key;
        if self.backlogs.remove(&key).is_none() {
            return;
        }
        self.status_dirty = true;
        self.out.push(Command::DropBacklog { origin, epoch });
        if let Some(l) = self.in_links.get_mut(&origin) {
            if l.epoch == Some(epoch) {
                l.epoch = None;
                self.out.push(Command::Close {
                    peer: origin,
                    link: Link::In,
                });
            }
        }
    }

    pub(super) fn holder_tick(&mut self) {
        let now = self.now;
        if self.cfg.lookupds > 0
            && now >= self.next_poll
            && self.backlogs.values().any(|b| !b.watch.link_is_up())
        {
            self.next_poll = now + self.cfg.status_every;
            self.out.push(Command::PollLookupds);
        }
        let keys: Vec<(u64, u64)> = self.backlogs.keys().copied().collect();
        for key in keys {
            self.decide(key);
        }
        let origins: Vec<u64> = self
            .in_links
            .iter()
            .filter(|(_, l)| l.hello.is_some())
            .map(|(&o, _)| o)
            .collect();
        for o in origins {
            self.answer_hello(o);
        }
        let retired_for = self.cfg.retired_for;
        self.manifests
            .retain(|_, m| m.2.is_none_or(|at| now.saturating_sub(at) < retired_for));
        if self.status_dirty || now >= self.next_status {
            self.status_dirty = false;
            self.next_status = now + self.cfg.status_every;
            let entries = self.status_entries();
            for &(peer, link) in &self.links {
                self.out.push(Command::Send {
                    to: peer,
                    link,
                    msg: Msg::Status(entries.clone()),
                });
            }
        }
    }
}
