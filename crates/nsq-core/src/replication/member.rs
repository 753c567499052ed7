//! [`Member`]: the event loop, membership and the origin's side — acknowledgement, fencing,
//! return. The holder's side (backlogs, takeover, handoff) is `holder.rs`.
//!
//! **Fencing.** An origin delivers its replicated messages only while it has proof, fresher
//! than `fence_after` (F, default T/2) on its own clock, that a member of its group or an
//! nsqlookupd heard it: a PONG answering a PING it sent at stamp `s`, a STATUS whose entry
//! for its epoch says `replicating` with echo `s`, a WELCOME echoing its HELLO's stamp, an
//! nsqlookupd's answer to a PING sent at `s` — each proves the peer heard it at or after
//! `s`. A member starts a takeover only after it has heard nothing from the origin for T on
//! its clock (`gone.rs`: every frame it got from the origin was sent before its link loss),
//! and after every lookupd had the origin absent for T on the lookupd's clock, so with clock
//! rates within ±(T−F)/(T+F) of each other (±33 % at F = T/2), the origin fenced before
//! any takeover could begin, whatever the network delays. It fences also at once when a
//! live member's STATUS says its epoch is gone or taken over. It unfences only on a
//! member's proof (a lookupd does not know about takeovers) and while no live member
//! claims its epoch.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::holder::{Backlog, Gossip, InLink};
use super::{BacklogState, Command, Config, Event, Group, Join, Link, Msg, Start};

/// One node's replication core (see the module docs of `replication`).
pub struct Member {
    pub(super) cfg: Config,
    pub(super) now: Duration,
    pub(super) out: Vec<Command>,
    /// The node ID proven at each member address.
    pub(super) addrs: BTreeMap<String, u64>,
    /// Identities that ended (a new node ID appeared at their address).
    pub(super) ended: BTreeSet<u64>,
    /// Live sessions.
    pub(super) links: BTreeSet<(u64, Link)>,
    // ---- the origin's side
    epoch: u64,
    previous_unclean: Option<u64>,
    last_seq: u64,
    group: Group,
    /// Publishes waiting for acknowledgements, in seq order, with when they were logged.
    waiting: VecDeque<(u64, Duration)>,
    /// Out-link peers whose session of the current epoch was welcomed.
    welcomed: BTreeSet<u64>,
    heard_member: Duration,
    heard_lookupd: Duration,
    fenced: bool,
    /// TAKEN_OVERs received whose manifests are not applied yet: (epoch, taker). Fenced while
    /// one of a live taker is here (the taker delivers those messages).
    taken: BTreeSet<(u64, u64)>,
    /// Epochs this node left because a live member claimed them (`taking over`, `taken
    /// over`), with when, until a manifest of each is applied: fenced while a live member
    /// still claims one, and for the link timeout after leaving it (its sessions start
    /// again; see [`Member::leave_claimed_epoch`]).
    left: BTreeMap<u64, Duration>,
    /// The last time a live member claimed the current epoch (`gone`, `taking over`, `taken
    /// over`): the fence holds for the link timeout after the claimant's session ends (it
    /// may still deliver what it takes; the origin's next session usually hears of it again).
    claimed: Option<(u64, Duration)>,
    /// The manifests this node applied: (its epoch, the taker). Applied once: a message
    /// listed may have come back since (adopted in a takeover of a later epoch).
    applied: BTreeSet<(u64, u64)>,
    /// A planned leave ([`Event::Leave`]): the epoch it began in and the log's last seq;
    /// `true` once the node moved on to hand that epoch over.
    leave: Option<(u64, u64, bool)>,
    /// The taker whose TAKEN_OVER of the leave's epoch covers the leave's seq: once its
    /// manifest is applied, the leave is done ([`Command::Left`]).
    leave_taker: Option<u64>,
    /// This node adopted messages (a takeover or handoff of another origin) since the leave
    /// began: they are not in the copy handed over, so the leave goes round again.
    leave_adopted: bool,
    next_ping: Duration,
    // ---- the holder's side (holder.rs)
    pub(super) backlogs: BTreeMap<(u64, u64), Backlog>,
    /// Epochs taken over here: (last_seq, complete, when the origin applied the manifest).
    pub(super) manifests: BTreeMap<(u64, u64), (u64, bool, Option<Duration>)>,
    pub(super) in_links: BTreeMap<u64, InLink>,
    pub(super) gossip: BTreeMap<u64, Gossip>,
    pub(super) next_status: Duration,
    pub(super) next_poll: Duration,
    pub(super) status_dirty: bool,
}

impl Member {
    /// A member starting with what this node persisted (see [`Start`]).
    pub fn new(cfg: Config, start: Start) -> Member {
        let need = cfg.replicas.saturating_sub(1);
        let now = start.now;
        let mut m = Member {
            group: Group::new(cfg.me, need),
            cfg,
            now,
            out: Vec::new(),
            addrs: BTreeMap::new(),
            ended: BTreeSet::new(),
            links: BTreeSet::new(),
            epoch: start.epoch,
            previous_unclean: start.previous_unclean,
            last_seq: start.start_seq,
            waiting: VecDeque::new(),
            welcomed: BTreeSet::new(),
            heard_member: now,
            heard_lookupd: now,
            fenced: false,
            taken: BTreeSet::new(),
            left: BTreeMap::new(),
            claimed: None,
            applied: start.applied.into_iter().collect(),
            leave: None,
            leave_taker: None,
            leave_adopted: false,
            next_ping: now,
            backlogs: BTreeMap::new(),
            manifests: BTreeMap::new(),
            in_links: BTreeMap::new(),
            gossip: BTreeMap::new(),
            next_status: now,
            next_poll: now,
            status_dirty: false,
        };
        for h in start.held {
            let mut b = Backlog::new(&m.cfg, now, h.addr);
            b.last_seq = h.last_seq;
            b.complete = h.complete;
            m.backlogs.insert((h.origin, h.epoch), b);
        }
        for (origin, epoch, last_seq) in start.manifests {
            m.manifests.insert((origin, epoch), (last_seq, false, None));
        }
        m
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    pub fn me(&self) -> u64 {
        self.cfg.me
    }

    /// The backlogs and manifests as STATUS lists them (for `/stats`).
    pub fn status_now(&self) -> Vec<super::StatusEntry> {
        self.status_entries()
    }

    /// The takeover candidates for `(origin, epoch)`, best first (diagnostics).
    pub fn candidates_for(&self, origin: u64, epoch: u64) -> Vec<u64> {
        self.candidates(origin, epoch)
    }

    /// A dump of the member's view, for diagnostics.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "me {:x} epoch {} fenced {} links {:x?}\n",
            self.cfg.me, self.epoch, self.fenced, self.links
        );
        for (k, b) in &self.backlogs {
            s += &format!("  backlog {k:x?}: {b:?}\n");
        }
        for (m, g) in &self.gossip {
            s += &format!("  gossip {m:x} at {:?}: {:x?}\n", g.at, g.entries);
        }
        s
    }

    /// Applies one event at `now` (never earlier than the previous one's) and returns the
    /// commands, in order.
    pub fn handle(&mut self, now: Duration, ev: Event) -> Vec<Command> {
        self.now = self.now.max(now);
        match ev {
            Event::Tick => self.tick(),
            Event::LinkUp { peer, addr, link } => self.link_up(peer, addr, link),
            Event::LinkDown { peer, link } => self.link_down(peer, link),
            Event::Received { from, link, msg } => {
                if self.links.contains(&(from, link)) {
                    self.received(from, link, msg);
                }
            }
            Event::IdentityEnded { old } => self.end_identity(old),
            Event::LookupdsChanged { count } => self.lookupds_changed(count),
            Event::LookupdPong { sent_at, .. } => {
                self.heard_lookupd = self.heard_lookupd.max(sent_at);
            }
            Event::LookupdAnswer {
                lookupd,
                clock,
                producers,
            } => self.lookupd_answer(lookupd, clock, &producers),
            Event::Published { seq } => {
                self.last_seq = self.last_seq.max(seq);
                if self.group.need() == 0 {
                    self.out.push(Command::AckPublish { seq });
                } else {
                    self.waiting.push_back((seq, self.now));
                    self.commit();
                }
            }
            Event::Logged { seq } => self.last_seq = self.last_seq.max(seq),
            Event::Leave { seq } => {
                if self.leave.is_none() && self.group.need() > 0 {
                    self.leave = Some((self.epoch, seq, false));
                    // A takeover still running here adopts after `seq`.
                    self.leave_adopted = self
                        .backlogs
                        .values()
                        .any(|b| b.state == BacklogState::TakingOver);
                    self.leave_step();
                }
            }
            Event::Stored {
                origin,
                epoch,
                last_seq,
                complete,
            } => self.stored(origin, epoch, last_seq, complete),
            Event::TakeoverEnded { origin, epoch, ok } => self.takeover_ended(origin, epoch, ok),
            Event::HandoffReceived {
                from,
                origin,
                epoch,
            } => self.handoff_received(from, origin, epoch),
            Event::HandoffStored {
                from,
                origin,
                epoch,
            } => self.out.push(Command::Send {
                to: from,
                link: Link::In,
                msg: Msg::HandoffDone { origin, epoch },
            }),
            Event::ManifestApplied { taker, epoch } => self.manifest_applied(taker, epoch),
        }
        self.check_fence();
        std::mem::take(&mut self.out)
    }

    /// Whether `m` is alive as this node sees it: itself, or a live session either way.
    pub(super) fn alive(&self, m: u64) -> bool {
        m == self.cfg.me
            || self.links.contains(&(m, Link::Out))
            || self.links.contains(&(m, Link::In))
    }

    // ---- membership --------------------------------------------------------------------

    fn link_up(&mut self, peer: u64, addr: String, link: Link) {
        let stranger = peer == 0
            || peer == self.cfg.me
            || self.ended.contains(&peer)
            || (self.cfg.check_addresses && !self.cfg.members.contains(&addr));
        if stranger {
            self.out.push(Command::Refuse { peer, link });
            return;
        }
        if let Some(old) = self.addrs.insert(addr.clone(), peer) {
            if old != peer {
                self.end_identity(old);
            }
        }
        // Also an origin known only from a backlog kept on disk (its HELLO gave the address).
        let stale: Vec<u64> = self
            .backlogs
            .iter()
            .filter(|((o, _), b)| *o != peer && b.addr.as_deref() == Some(addr.as_str()))
            .map(|((o, _), _)| *o)
            .collect();
        for old in stale {
            self.end_identity(old);
        }
        self.links.insert((peer, link));
        match link {
            Link::Out => self.out.push(Command::Send {
                to: peer,
                link,
                msg: Msg::Hello {
                    epoch: self.epoch,
                    previous_unclean: self.previous_unclean,
                    stamp: self.now,
                },
            }),
            Link::In => {
                self.in_links.insert(peer, InLink::new(addr));
            }
        }
        let entries = self.status_entries();
        self.out.push(Command::Send {
            to: peer,
            link,
            msg: Msg::Status(entries),
        });
    }

    fn link_down(&mut self, peer: u64, link: Link) {
        if !self.links.remove(&(peer, link)) {
            return;
        }
        match link {
            Link::Out => {
                let joined = self.group.session_down(peer);
                self.welcomed.remove(&peer);
                self.join(joined);
                self.commit();
            }
            Link::In => self.in_link_down(peer),
        }
    }

    /// `old`'s identity ended (its address answers with a new node ID): its backlogs are
    /// taken over as after an unclean stop, at once.
    pub(super) fn end_identity(&mut self, old: u64) {
        if !self.ended.insert(old) {
            return;
        }
        self.gossip.remove(&old);
        let joined = self.group.forget(old);
        self.join(joined);
        self.welcomed.remove(&old);
        self.addrs.retain(|_, id| *id != old);
        for ((o, _), b) in self.backlogs.iter_mut() {
            if *o == old {
                b.ended = true;
            }
        }
        self.retire_manifests_of(old);
        self.status_dirty = true;
        self.commit();
    }

    fn received(&mut self, from: u64, link: Link, msg: Msg) {
        match msg {
            Msg::Status(entries) => {
                self.status(from, entries);
                self.leave_claimed_epoch();
            }
            // origin → replica
            Msg::Hello {
                epoch,
                previous_unclean,
                stamp,
            } if link == Link::In => self.hello(from, epoch, previous_unclean, stamp),
            Msg::Ping { stamp } if link == Link::In => self.ping(from, stamp),
            Msg::ManifestApplied { epoch } if link == Link::In => self.origin_applied(from, epoch),
            Msg::Drop { epoch, taker } if link == Link::In => self.dropped(from, epoch, taker),
            Msg::Standby { epoch } if link == Link::In => self.standby(from, epoch),
            // replica → origin
            Msg::Welcome {
                epoch,
                resume,
                echo,
            } if link == Link::Out => self.welcome(from, epoch, resume, echo),
            Msg::Pong { stamp } if link == Link::Out && self.welcomed.contains(&from) => {
                self.heard_member = self.heard_member.max(stamp);
            }
            Msg::Ack { seq } if link == Link::Out => {
                self.group.ack(from, seq);
                self.commit();
            }
            Msg::TakenOver { epoch, last_seq } if link == Link::Out => {
                if self.applied.contains(&(epoch, from)) {
                    // Applied already (the taker missed MANIFEST_APPLIED): said again only.
                    self.out.push(Command::Send {
                        to: from,
                        link: Link::Out,
                        msg: Msg::ManifestApplied { epoch },
                    });
                    return;
                }
                self.taken.insert((epoch, from));
                if self
                    .leave
                    .is_some_and(|(e, seq, _)| e == epoch && last_seq >= seq)
                {
                    self.leave_taker = Some(from);
                }
                self.out.push(Command::ApplyManifest {
                    taker: from,
                    epoch,
                    last_seq,
                });
            }
            Msg::HandoffDone { origin, epoch } if link == Link::Out => {
                self.handoff_done(from, origin, epoch)
            }
            _ => {}
        }
    }

    // ---- the origin's side -------------------------------------------------------------

    fn welcome(&mut self, peer: u64, epoch: u64, resume: Option<u64>, echo: Duration) {
        if epoch != self.epoch || !self.welcomed.insert(peer) {
            return;
        }
        self.heard_member = self.heard_member.max(echo);
        let joined = self
            .group
            .session_up(peer, resume.filter(|&s| s <= self.last_seq));
        self.join(joined);
        for &(epoch, taker) in &self.applied {
            self.out.push(Command::Send {
                to: peer,
                link: Link::Out,
                msg: Msg::Drop { epoch, taker },
            });
        }
        self.commit();
    }

    /// The origin streams its log to the members that joined its set (only they store it).
    fn join(&mut self, joined: Vec<(u64, Join)>) {
        for (peer, join) in joined {
            self.out.push(match join {
                Join::Resume { from } => Command::Resume { peer, from },
                Join::Catchup => Command::StartCatchup { peer },
            });
        }
    }

    /// Members outside a settled set delete their copies of this epoch (STANDBY).
    fn release(&mut self) {
        for peer in self.group.release() {
            self.out.push(Command::Send {
                to: peer,
                link: Link::Out,
                msg: Msg::Standby { epoch: self.epoch },
            });
        }
    }

    /// The origin's replica set and acknowledgements (for `/stats`).
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// A planned leave hands the epoch over once the replica set holds the whole log: the
    /// set settled (every member caught up) and its acknowledgements reach the leave's seq.
    /// Moving to the next epoch is how the holders learn the epoch ended (the HELLO of the
    /// new sessions); the one holder first in ring order takes it over at once.
    fn leave_step(&mut self) {
        let Some((epoch, seq, false)) = self.leave else {
            return;
        };
        if self.epoch != epoch {
            // A member claimed the epoch meanwhile: it is being taken over already.
            self.leave = Some((epoch, seq, true));
            return;
        }
        if self.group.settled() && self.group.committed().is_some_and(|c| c >= seq) {
            self.leave = Some((epoch, seq, true));
            self.move_to(epoch + 1);
        }
    }

    fn commit(&mut self) {
        self.release();
        self.leave_step();
        let Some(c) = self.group.committed() else {
            return;
        };
        while let Some(&(seq, _)) = self.waiting.front() {
            if seq > c {
                break;
            }
            self.waiting.pop_front();
            self.out.push(Command::AckPublish { seq });
        }
    }

    fn manifest_applied(&mut self, taker: u64, epoch: u64) {
        if self.leave_taker == Some(taker) && self.leave.is_some_and(|(e, _, _)| e == epoch) {
            self.leave_taker = None;
            if self.leave_adopted {
                // What it adopted meanwhile is not in that copy: another round, from the
                // log's end now, in the epoch it moved to.
                self.leave_adopted = self
                    .backlogs
                    .values()
                    .any(|b| b.state == BacklogState::TakingOver);
                self.leave = Some((self.epoch, self.last_seq, false));
            } else {
                self.out.push(Command::Left);
            }
        }
        self.out.push(Command::Send {
            to: taker,
            link: Link::Out,
            msg: Msg::ManifestApplied { epoch },
        });
        self.applied.insert((epoch, taker));
        if self.previous_unclean.is_some_and(|p| epoch >= p) {
            self.previous_unclean = None;
        }
        self.taken.remove(&(epoch, taker));
        self.left.remove(&epoch);
        if epoch >= self.epoch {
            self.move_to(epoch + 1);
        }
    }

    /// This node's epoch becomes `next`: persisted by the driver, every session starts again
    /// in it (with a catch-up), and the publishes still waiting fail (the copies they waited
    /// for belong to the epoch that ended).
    fn move_to(&mut self, next: u64) {
        self.epoch = next;
        self.out.push(Command::NewEpoch { epoch: next });
        let peers: Vec<u64> = self
            .links
            .iter()
            .filter(|(_, l)| *l == Link::Out)
            .map(|(p, _)| *p)
            .collect();
        // Every session of the old epoch ends at once: none joins the set on the way (a
        // catch-up of the old epoch to a member outside its set would make a new holder of
        // it just as it ends).
        self.group.reset();
        for peer in peers {
            self.links.remove(&(peer, Link::Out));
            self.welcomed.remove(&peer);
            self.out.push(Command::Close {
                peer,
                link: Link::Out,
            });
        }
        while let Some((seq, _)) = self.waiting.pop_front() {
            self.out.push(Command::FailPublish { seq });
        }
    }

    /// A live member's STATUS says it takes (or took) this node's current epoch over: this
    /// node moves on to the next epoch at once, so that its sessions are welcomed again while
    /// the taker finishes (a taker never welcomes its origin back into the epoch it takes
    /// over: both would deliver the copy), and stays fenced until the manifest is applied.
    fn leave_claimed_epoch(&mut self) {
        if !self.cfg.leave_claimed_epoch {
            return;
        }
        let me = self.cfg.me;
        let claimed = self.gossip.iter().any(|(&m, g)| {
            self.alive(m)
                && g.entries.iter().any(|e| {
                    e.origin == me
                        && e.epoch == self.epoch
                        && matches!(e.state, BacklogState::TakingOver | BacklogState::TakenOver)
                })
        });
        if claimed {
            self.left.insert(self.epoch, self.now);
            self.move_to(self.epoch + 1);
        }
    }

    /// A planned leave runs.
    pub(super) fn leaving(&self) -> bool {
        self.leave.is_some()
    }

    /// Messages of another origin are adopted here (a takeover or a handoff).
    pub(super) fn note_adoption(&mut self) {
        if self.leave.is_some() {
            self.leave_adopted = true;
        }
    }

    /// A member proved it heard this node at `stamp` (this node's clock).
    pub(super) fn note_member_proof(&mut self, stamp: Duration) {
        self.heard_member = self.heard_member.max(stamp);
    }

    /// Whether a live member's STATUS says this node's current epoch is gone, taken or being
    /// taken over.
    fn claims_current(&self) -> bool {
        let me = self.cfg.me;
        self.gossip.iter().any(|(&m, g)| {
            self.alive(m)
                && g.entries.iter().any(|e| {
                    e.origin == me
                        && e.epoch == self.epoch
                        && matches!(
                            e.state,
                            BacklogState::Gone | BacklogState::TakingOver | BacklogState::TakenOver
                        )
                })
        })
    }

    /// Whether a live member claims messages this node still delivers: its STATUS says this
    /// node's current epoch is gone, taken or being taken over; or that it is taking over an
    /// earlier epoch whose manifest from it is not applied here (this node still holds those
    /// messages), or took over one this node left for it ([`Member::leave_claimed_epoch`]);
    /// or it sent TAKEN_OVER whose manifest is not applied yet.
    fn threatened(&self) -> bool {
        let me = self.cfg.me;
        let claims = |m: u64, e: &super::StatusEntry| {
            e.origin == me
                && match e.state {
                    BacklogState::Gone => e.epoch == self.epoch,
                    BacklogState::TakingOver => {
                        e.epoch == self.epoch
                            || (e.epoch < self.epoch && !self.applied.contains(&(e.epoch, m)))
                    }
                    BacklogState::TakenOver => {
                        e.epoch == self.epoch
                            || (self.left.contains_key(&e.epoch)
                                && !self.applied.contains(&(e.epoch, m)))
                    }
                    _ => false,
                }
        };
        let now = self.now;
        self.taken.iter().any(|&(_, m)| self.alive(m))
            || self
                .left
                .values()
                .any(|&at| now.saturating_sub(at) < super::holder::LINK_TIMEOUT)
            || self
                .gossip
                .iter()
                .any(|(&m, g)| self.alive(m) && g.entries.iter().any(|e| claims(m, e)))
    }

    fn check_fence(&mut self) {
        if self.cfg.replicas < 2 {
            return;
        }
        if self.leave.is_some() {
            // Leaving: nothing replicated is delivered here again (its holders take it).
            if !self.fenced {
                self.fenced = true;
                self.out.push(Command::Fence);
            }
            return;
        }
        let f = self.cfg.fence_after;
        let heard = self.heard_member.max(self.heard_lookupd);
        if self.claims_current() {
            self.claimed = Some((self.epoch, self.now));
        }
        let recently = self.claimed.is_some_and(|(e, at)| {
            e == self.epoch && self.now.saturating_sub(at) < super::holder::LINK_TIMEOUT
        });
        let threatened = recently || self.threatened();
        if !self.fenced {
            if self.now.saturating_sub(heard) >= f || threatened {
                self.fenced = true;
                self.out.push(Command::Fence);
            }
        } else if !threatened && self.now.saturating_sub(self.heard_member) < f {
            self.fenced = false;
            self.out.push(Command::Unfence);
        }
    }

    fn tick(&mut self) {
        self.leave_step();
        let timeout = self.cfg.ack_timeout;
        while let Some(&(seq, at)) = self.waiting.front() {
            if self.now.saturating_sub(at) < timeout {
                break;
            }
            self.waiting.pop_front();
            self.out.push(Command::FailPublish { seq });
        }
        if self.now >= self.next_ping {
            self.next_ping = self.now + self.cfg.status_every;
            for &peer in &self.welcomed {
                self.out.push(Command::Send {
                    to: peer,
                    link: Link::Out,
                    msg: Msg::Ping { stamp: self.now },
                });
            }
        }
        self.holder_tick();
    }
}
