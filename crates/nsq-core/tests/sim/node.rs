//! One simulated nsqd: the real core plus an abstract engine (its unsettled messages, its
//! log), replica store (backlogs, with the part synced), manifests, and the driver that
//! carries the core's commands out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use nsq_core::replication::{
    BacklogState, Command, Config, Event, HeldBacklog, Link, Member, Msg, Start,
};

use super::net::Frame;
use super::{Ev, Src, World, STRANGER_IDS};

const TICK: Duration = Duration::from_millis(250);

/// What an own log entry waits for.
#[derive(Debug, Clone)]
pub enum Pending {
    Publish(Vec<u64>),
    Takeover(u64, u64),
    Handoff(u64, u64, u64),
}

/// A replica backlog in the abstract: the IDs it holds.
#[derive(Debug, Clone, Default)]
pub struct Bl {
    pub ids: BTreeSet<u64>,
    pub last_seq: u64,
    pub complete: bool,
    pub catching: Option<BTreeSet<u64>>,
    pub addr: String,
}

pub struct Node {
    pub idx: usize,
    pub addr: String,
    pub alive: bool,
    pub wiped: bool,
    pub id: u64,
    pub rate: u64,
    pub offset: Duration,
    pub core: Option<Member>,
    pub tick_gen: u64,
    pub ticks: u64,
    pub epoch: u64,
    pub seq: u64,
    pub log: Vec<(u64, Frame)>,
    /// When its latest log frames went out, with how many message IDs each carried.
    pub recent: VecDeque<(Duration, usize)>,
    /// Unsettled messages: ID → the epoch and seq at which this node took it (published,
    /// adopted).
    pub own: BTreeMap<u64, (u64, u64)>,
    /// Where each adopted message of `own` came from (none: published here).
    pub src: BTreeMap<u64, Src>,
    pub pubs: BTreeMap<u64, Pending>,
    pub fenced: bool,
    pub backlogs: BTreeMap<(u64, u64), Bl>,
    pub synced: BTreeMap<(u64, u64), Bl>,
    pub manifests: BTreeMap<(u64, u64), Vec<u64>>,
    /// The last_seq of the copy each manifest was taken from.
    pub manifest_seq: BTreeMap<(u64, u64), u64>,
    pub adopted: BTreeMap<(u64, u64), BTreeSet<u64>>,
    pub handoffs_in: BTreeMap<(u64, u64, u64), Vec<u64>>,
    pub applying: BTreeSet<(u64, u64, u64)>,
    /// Manifests applied (persisted): (epoch, taker).
    pub applied: BTreeSet<(u64, u64)>,
    pub out_sids: BTreeMap<u64, u64>,
    pub in_sids: BTreeMap<u64, u64>,
    pub dial_after: Vec<Duration>,
    /// A planned leave began then (publishes are refused from then on).
    pub leaving: Option<Duration>,
}

impl Node {
    pub fn addr_of(i: usize) -> String {
        format!("10.0.0.{}:4150", i + 1)
    }

    pub fn new(idx: usize, w: &mut World) -> Node {
        let skew = w.p.skew_per_mille;
        Node {
            idx,
            addr: Node::addr_of(idx),
            alive: true,
            wiped: false,
            id: w.rng.next() | 1,
            rate: 1000 - skew + w.rng.below(2 * skew + 1),
            offset: Duration::from_secs(w.rng.below(1_000_000)),
            core: None,
            tick_gen: 0,
            ticks: 0,
            epoch: 1,
            seq: 0,
            log: Vec::new(),
            recent: VecDeque::new(),
            own: BTreeMap::new(),
            src: BTreeMap::new(),
            pubs: BTreeMap::new(),
            fenced: false,
            backlogs: BTreeMap::new(),
            synced: BTreeMap::new(),
            manifests: BTreeMap::new(),
            manifest_seq: BTreeMap::new(),
            adopted: BTreeMap::new(),
            handoffs_in: BTreeMap::new(),
            applying: BTreeSet::new(),
            applied: BTreeSet::new(),
            out_sids: BTreeMap::new(),
            in_sids: BTreeMap::new(),
            dial_after: vec![Duration::ZERO; w.p.nodes],
            leaving: None,
        }
    }

    /// This node's clock at the world's `now`.
    pub fn clock(&self, now: Duration) -> Duration {
        self.offset + now * self.rate as u32 / 1000
    }
}

impl World {
    pub(crate) fn start_node(&mut self, i: usize) {
        let n = &self.nodes[i];
        let mut cfg = Config::new(
            n.id,
            self.p.replicas,
            self.members(),
            self.p.takeover_timeout,
        );
        cfg.lookupds = self.p.lookupds;
        let held = n
            .backlogs
            .iter()
            .map(|(&(origin, epoch), b)| HeldBacklog {
                origin,
                epoch,
                last_seq: b.last_seq,
                complete: b.complete,
                addr: Some(b.addr.clone()),
            })
            .collect();
        let unclean = (n.epoch > 1 && !n.wiped).then(|| n.epoch - 1);
        let manifests = n
            .manifests
            .keys()
            .map(|&(o, e)| (o, e, n.manifest_seq.get(&(o, e)).copied().unwrap_or(0)))
            .collect();
        let now = n.clock(self.now);
        let start = Start {
            now,
            epoch: n.epoch,
            start_seq: 0,
            previous_unclean: unclean,
            held,
            manifests,
            applied: n.applied.iter().copied().collect(),
        };
        let core = Member::new(cfg, start);
        let n = &mut self.nodes[i];
        n.core = Some(core);
        n.tick_gen += 1;
        let gen = n.tick_gen;
        let first = self.rng.ms(0, 250);
        self.at(first, Ev::Tick(i, gen));
    }

    pub(crate) fn tick(&mut self, i: usize, gen: u64) {
        if !self.nodes[i].alive || self.nodes[i].tick_gen != gen {
            return;
        }
        self.net_tick(i);
        if !self.nodes[i].fenced {
            let k = if self.final_phase {
                500
            } else {
                self.rng.below(12) as usize
            };
            let ids: Vec<u64> = self.nodes[i].own.keys().take(k).copied().collect();
            if !ids.is_empty() {
                self.consume(i, ids);
            }
        }
        self.core_event(i, Event::Tick);
        self.check_claims(i);
        if self.nodes[i].ticks.is_multiple_of(8) {
            self.check_follows(i);
        }
        let n = &mut self.nodes[i];
        n.ticks += 1;
        if n.ticks.is_multiple_of(4) {
            n.synced = n.backlogs.clone();
        }
        let next = TICK * 1000 / n.rate as u32;
        self.at(next, Ev::Tick(i, gen));
    }

    fn consume(&mut self, i: usize, ids: Vec<u64>) {
        self.watch(&ids, || format!("n{i} delivers"));
        for &id in &ids {
            if !self.published.contains(&id) || id >= STRANGER_IDS {
                self.fail(format!("n{i} delivered {id}, never published by a member"));
            }
            *self.deliveries.entry(id).or_insert(0) += 1;
            self.record_delivery(i, id);
            if let Some((d, _)) = self.dead_forever {
                if self.acked.get(&id) == Some(&d) {
                    self.last_dead_delivery = Some(self.now);
                }
            }
            self.nodes[i].own.remove(&id);
        }
        self.log(i, |seq| Frame::Fin(seq, ids));
    }

    /// Appends a frame to `i`'s log and streams it; returns its seq.
    fn log(&mut self, i: usize, f: impl FnOnce(u64) -> Frame) -> u64 {
        let n = &mut self.nodes[i];
        n.seq += 1;
        let seq = n.seq;
        let frame = f(seq);
        n.log.push((seq, frame.clone()));
        let (id, epoch) = (n.id, n.epoch);
        let ids = match &frame {
            Frame::Pub(_, v) | Frame::Fin(_, v) => v.len(),
            _ => 0,
        };
        n.recent.push_back((self.now, ids));
        while n
            .recent
            .front()
            .is_some_and(|(t, _)| self.now.saturating_sub(*t) > super::FOLLOW_WITHIN)
        {
            n.recent.pop_front();
        }
        self.log_at
            .entry((id, epoch))
            .or_default()
            .push((seq, self.now));
        let sids: Vec<u64> = n.out_sids.values().copied().collect();
        for sid in sids {
            if self.sessions.get(&sid).is_some_and(|s| s.streaming) {
                self.send(sid, i, frame.clone());
            }
        }
        if !matches!(frame, Frame::Pub(..)) {
            self.core_event(i, Event::Logged { seq });
        }
        seq
    }

    pub(crate) fn publish(&mut self, i: usize, k: usize) {
        if !self.nodes[i].alive || self.nodes[i].leaving.is_some() {
            return;
        }
        let ids: Vec<u64> = (0..k).map(|_| self.new_msg()).collect();
        self.published.extend(ids.iter().copied());
        self.watch(&ids, || format!("n{i} publishes"));
        let at = (self.nodes[i].epoch, self.nodes[i].seq + 1);
        self.nodes[i].own.extend(ids.iter().map(|&id| (id, at)));
        let seq = self.log(i, |seq| Frame::Pub(seq, ids.clone()));
        self.nodes[i].pubs.insert(seq, Pending::Publish(ids));
        self.core_event(i, Event::Published { seq });
    }

    fn adopt(&mut self, i: usize, key: (u64, u64), ids: Vec<u64>, why: Pending) {
        let n = &mut self.nodes[i];
        let adopted = n.adopted.entry(key).or_default();
        // Every one is taken (again): one pending here already stays one message but its
        // take point moves on, so a manifest of an older take (this node's epoch taken over
        // meanwhile) leaves it; one taken before and settled since comes back (a duplicate —
        // a retried takeover, a late handoff — never a loss).
        let new: Vec<u64> = ids;
        adopted.extend(new.iter().copied());
        let at = (n.epoch, n.seq + 1);
        n.own.extend(new.iter().map(|&id| (id, at)));
        let (origin, epoch) = key;
        let src = match why {
            Pending::Handoff(from, ..) => Src::Handoff {
                from,
                origin,
                epoch,
            },
            _ => Src::Taken {
                origin,
                epoch,
                upto: n.backlogs.get(&key).map_or(0, |b| b.last_seq),
                origin_alive: false,
                complete: n.backlogs.get(&key).is_some_and(|b| b.complete),
            },
        };
        let src = match src {
            Src::Taken {
                origin,
                epoch,
                upto,
                complete,
                ..
            } => Src::Taken {
                origin,
                epoch,
                upto,
                complete,
                origin_alive: self
                    .nodes
                    .iter()
                    .any(|o| o.alive && o.id == origin && o.epoch == epoch),
            },
            s => s,
        };
        let n = &mut self.nodes[i];
        n.src.extend(new.iter().map(|&id| (id, src)));
        let me = n.id;
        for &id in &new {
            if self.deliveries.contains_key(&id) {
                self.retaken.entry((me, id)).or_default().push(at);
            }
        }
        self.watch(&new, || format!("n{i} adopts for {key:x?} ({why:?})"));
        if new.iter().any(|&id| id >= STRANGER_IDS) {
            self.fail(format!("n{i} adopted a stranger's message"));
        }
        let seq = self.log(i, |seq| Frame::Pub(seq, new));
        self.nodes[i].pubs.insert(seq, why);
        self.core_event(i, Event::Published { seq });
    }

    pub(crate) fn core_event(&mut self, i: usize, ev: Event) {
        if i >= self.nodes.len() || !self.nodes[i].alive {
            return;
        }
        let now = self.nodes[i].clock(self.now);
        let Some(core) = self.nodes[i].core.as_mut() else {
            return;
        };
        let taking = |c: &Member| -> Vec<(u64, u64)> {
            c.status_now()
                .iter()
                .filter(|e| e.state == BacklogState::TakingOver)
                .map(|e| (e.origin, e.epoch))
                .collect()
        };
        let before = taking(core);
        let cmds = core.handle(now, ev);
        if !before.is_empty() {
            // A takeover should end only as `taken over` (or by a restart, which builds a
            // new core): one that stops silently leaves origin and taker both delivering.
            let after = core.status_now();
            let dropped: Vec<(u64, u64)> = before
                .into_iter()
                .filter(|&k| {
                    !after.iter().any(|e| {
                        (e.origin, e.epoch) == k
                            && matches!(e.state, BacklogState::TakingOver | BacklogState::TakenOver)
                    })
                })
                .collect();
            for (o, e) in dropped {
                self.fail(format!(
                    "n{i} dropped its takeover of ({o:x}, {e}) without `taken over`"
                ));
            }
        }
        for c in cmds {
            self.exec(i, c);
        }
    }

    fn sid(&self, i: usize, peer: u64, link: Link) -> Option<u64> {
        let n = &self.nodes[i];
        match link {
            Link::Out => n.out_sids.get(&peer).copied(),
            Link::In => n.in_sids.get(&peer).copied(),
        }
    }

    fn exec(&mut self, i: usize, c: Command) {
        if !self.nodes[i].alive {
            return;
        }
        if !matches!(
            c,
            Command::Send {
                msg: Msg::Status(_) | Msg::Ping { .. } | Msg::Pong { .. } | Msg::Ack { .. },
                ..
            } | Command::AckPublish { .. }
                | Command::PollLookupds
        ) {
            self.log_event(|| format!("n{i} {:x}: {c:x?}", self.nodes[i].id));
        }
        let me = self.nodes[i].id;
        match c {
            Command::Send { to, link, msg } => {
                let Some(sid) = self.sid(i, to, link) else {
                    return;
                };
                if let Msg::Welcome { epoch, .. } = msg {
                    if let Some(s) = self.sessions.get_mut(&sid) {
                        s.epoch = Some(epoch);
                    }
                }
                self.send(sid, i, Frame::Core(msg));
            }
            Command::Refuse { peer, link } | Command::Close { peer, link } => {
                if let Some(sid) = self.sid(i, peer, link) {
                    self.close_end(sid, i);
                }
            }
            Command::StartCatchup { peer } => {
                let Some(sid) = self.sid(i, peer, Link::Out) else {
                    return;
                };
                let seq = self.nodes[i].seq;
                let ids: Vec<u64> = self.nodes[i].own.keys().copied().collect();
                self.send(sid, i, Frame::CatchupBegin(seq));
                for chunk in ids.chunks(8) {
                    self.send(sid, i, Frame::State(chunk.to_vec()));
                }
                self.send(sid, i, Frame::CatchupEnd(seq));
                if let Some(s) = self.sessions.get_mut(&sid) {
                    s.streaming = true;
                    s.opened = self.now;
                }
            }
            Command::Resume { peer, from } => {
                let Some(sid) = self.sid(i, peer, Link::Out) else {
                    return;
                };
                let n = &self.nodes[i];
                let first = n.log.first().map_or(n.seq + 1, |(s, _)| *s);
                if from < first {
                    self.fail(format!(
                        "n{i} asked to resume from {from}, log starts {first}"
                    ));
                    return;
                }
                let frames: Vec<Frame> = n
                    .log
                    .iter()
                    .filter(|(s, _)| *s >= from)
                    .map(|(_, f)| f.clone())
                    .collect();
                for f in frames {
                    self.send(sid, i, f);
                }
                if let Some(s) = self.sessions.get_mut(&sid) {
                    s.streaming = true;
                    s.opened = self.now;
                }
            }
            Command::AckPublish { seq } => match self.nodes[i].pubs.remove(&seq) {
                Some(Pending::Publish(ids)) => {
                    for id in ids {
                        self.acked.insert(id, i);
                    }
                }
                Some(Pending::Takeover(o, e)) => {
                    let ids = self.nodes[i]
                        .adopted
                        .get(&(o, e))
                        .cloned()
                        .unwrap_or_default();
                    let last = self.nodes[i]
                        .backlogs
                        .get(&(o, e))
                        .map_or(0, |b| b.last_seq);
                    self.nodes[i].manifest_seq.entry((o, e)).or_insert(last);
                    let m = self.nodes[i].manifests.entry((o, e)).or_default();
                    m.extend(ids);
                    m.sort_unstable();
                    m.dedup();
                    self.core_event(
                        i,
                        Event::TakeoverEnded {
                            origin: o,
                            epoch: e,
                            ok: true,
                        },
                    );
                }
                Some(Pending::Handoff(from, o, e)) => {
                    self.report.handoffs += 1;
                    let ev = Event::HandoffStored {
                        from,
                        origin: o,
                        epoch: e,
                    };
                    self.core_event(i, ev);
                }
                None => {}
            },
            Command::FailPublish { seq } => {
                if let Some(Pending::Takeover(o, e)) = self.nodes[i].pubs.remove(&seq) {
                    let ev = Event::TakeoverEnded {
                        origin: o,
                        epoch: e,
                        ok: false,
                    };
                    self.core_event(i, ev);
                }
            }
            Command::Fence => self.nodes[i].fenced = true,
            Command::Unfence => self.nodes[i].fenced = false,
            Command::PollLookupds => self.lookupd_poll(i),
            Command::StartTakeover { origin, epoch } => {
                let run = self.nodes[i].tick_gen;
                let earlier = self.takers.entry((origin, epoch)).or_default();
                let alive: Vec<u64> = earlier
                    .iter()
                    .filter(|&&(id, n, r)| {
                        // Alive, and its claim still stands (a takeover its origin's return
                        // into the same epoch dropped is no claim).
                        id != me
                            && self.nodes[n].alive
                            && self.nodes[n].tick_gen == r
                            && self.nodes[n].core.as_ref().is_some_and(|c| {
                                c.status_now().iter().any(|e| {
                                    (e.origin, e.epoch) == (origin, epoch)
                                        && matches!(
                                            e.state,
                                            BacklogState::TakingOver | BacklogState::TakenOver
                                        )
                                })
                            })
                    })
                    .map(|&(id, _, _)| id)
                    .collect();
                let concurrent = !alive.is_empty();
                // A retry of this member's takeover is no new decision.
                let retry = earlier.iter().any(|&(id, _, r)| id == me && r == run);
                earlier.push((me, i, run));
                for first in alive.into_iter().filter(|_| !retry) {
                    self.second_taker(origin, epoch, me, first);
                }
                if concurrent {
                    self.concurrent_takers.insert((origin, epoch));
                }
                self.log_event(|| {
                    let c = self.nodes[i].core.as_ref();
                    format!(
                        "n{i} candidates {:x?}\n{}",
                        c.map(|c| c.candidates_for(origin, epoch)),
                        c.map(|c| c.describe()).unwrap_or_default()
                    )
                });
                self.log_event(|| {
                    format!(
                        "n{i} takes over {:?}",
                        self.nodes[i].backlogs.get(&(origin, epoch)).map(|b| (
                            b.ids.len(),
                            b.complete,
                            b.last_seq
                        ))
                    )
                });
                let ids: Vec<u64> = self.nodes[i]
                    .backlogs
                    .get(&(origin, epoch))
                    .map(|b| b.ids.iter().copied().collect())
                    .unwrap_or_default();
                self.adopt(i, (origin, epoch), ids, Pending::Takeover(origin, epoch));
            }
            Command::SendHandoff { to, origin, epoch } => {
                let Some(sid) = self.sid(i, to, Link::Out) else {
                    return;
                };
                let ids: Vec<u64> = self.nodes[i]
                    .backlogs
                    .get(&(origin, epoch))
                    .map(|b| b.ids.iter().copied().collect())
                    .unwrap_or_default();
                self.send(sid, i, Frame::Handoff(origin, epoch, ids));
            }
            Command::AdoptHandoff {
                from,
                origin,
                epoch,
            } => {
                let ids = self.nodes[i]
                    .handoffs_in
                    .remove(&(from, origin, epoch))
                    .unwrap_or_default();
                let why = Pending::Handoff(from, origin, epoch);
                self.adopt(i, (origin, epoch), ids, why);
            }
            Command::DropBacklog { origin, epoch } => {
                let n = &mut self.nodes[i];
                n.backlogs.remove(&(origin, epoch));
                n.synced.remove(&(origin, epoch));
            }
            Command::SendManifest { origin, epoch } => {
                let Some(sid) = self.sid(i, origin, Link::In) else {
                    return;
                };
                let ids = self.nodes[i]
                    .manifests
                    .get(&(origin, epoch))
                    .cloned()
                    .unwrap_or_default();
                self.send(sid, i, Frame::Manifest(epoch, ids));
            }
            Command::ApplyManifest {
                taker,
                epoch,
                last_seq,
            } => {
                self.nodes[i].applying.insert((taker, epoch, last_seq));
            }
            Command::DeleteManifest { origin, epoch } => {
                self.nodes[i].manifests.remove(&(origin, epoch));
                self.nodes[i].manifest_seq.remove(&(origin, epoch));
            }
            Command::NewEpoch { epoch } => {
                let n = &mut self.nodes[i];
                n.epoch = epoch;
                n.log.clear();
            }
            Command::Left => {
                // The driver empties its queues: the taker holds all of it.
                let ids: Vec<u64> = std::mem::take(&mut self.nodes[i].own).into_keys().collect();
                self.watch(&ids, || format!("n{i} drops it: left"));
                self.log(i, |seq| Frame::Fin(seq, ids));
            }
        }
    }

    /// `to` received `frame` from node `from` on `sid`.
    pub(crate) fn node_frame(&mut self, to: usize, _from: usize, sid: u64, frame: Frame) {
        let s = &self.sessions[&sid];
        let dialer = s.dialer == to;
        let (peer, link) = if dialer {
            (s.acceptor_id, Link::Out)
        } else {
            (s.dialer_id, Link::In)
        };
        let epoch = s.epoch;
        if self.sid(to, peer, link) != Some(sid) {
            return;
        }
        match frame {
            Frame::Core(msg) => {
                if let (Msg::Standby { epoch: e }, false, Some(ep)) = (&msg, dialer, epoch) {
                    // The driver's session deletes the copy as it reads STANDBY.
                    if *e == ep {
                        self.nodes[to].backlogs.remove(&(peer, ep));
                        self.nodes[to].synced.remove(&(peer, ep));
                    }
                }
                if let Msg::Status(entries) = &msg {
                    let to_id = self.nodes[to].id;
                    self.saw_status(to_id, peer, entries);
                }
                self.core_event(
                    to,
                    Event::Received {
                        from: peer,
                        link,
                        msg,
                    },
                );
            }
            Frame::Heartbeat | Frame::Close => {}
            Frame::Manifest(e, ids) if dialer => {
                let Some(&(_, _, upto)) = self.nodes[to]
                    .applying
                    .iter()
                    .find(|(t, ep, _)| (*t, *ep) == (peer, e))
                else {
                    return;
                };
                self.nodes[to].applying.remove(&(peer, e, upto));
                let removed: Vec<u64> = ids
                    .into_iter()
                    .filter(|id| {
                        // A manifest of epoch e covers what this node held in epochs ≤ e,
                        // not a message that came back since (adopted in a later epoch).
                        let own = &mut self.nodes[to].own;
                        own.get(id)
                            .is_some_and(|&(ep, seq)| ep < e || (ep == e && seq <= upto))
                            && own.remove(id).is_some()
                    })
                    .collect();
                self.watch(&removed, || {
                    format!("n{to} drops it: manifest of {peer:x}.{e}")
                });
                self.log(to, |seq| Frame::Fin(seq, removed));
                self.nodes[to].applied.insert((e, peer));
                self.core_event(
                    to,
                    Event::ManifestApplied {
                        taker: peer,
                        epoch: e,
                    },
                );
            }
            Frame::Handoff(o, e, ids) if !dialer => {
                self.nodes[to].handoffs_in.insert((peer, o, e), ids);
                let ev = Event::HandoffReceived {
                    from: peer,
                    origin: o,
                    epoch: e,
                };
                self.core_event(to, ev);
            }
            f if !dialer => {
                let Some(epoch) = epoch else {
                    return;
                };
                let key = (peer, epoch);
                let addr = Node::addr_of(self.sessions[&sid].dialer);
                let b = self.nodes[to].backlogs.entry(key).or_insert_with(|| Bl {
                    addr,
                    ..Bl::default()
                });
                match f {
                    Frame::CatchupBegin(seq) => {
                        b.catching = Some(BTreeSet::new());
                        b.complete = false;
                        b.last_seq = seq;
                    }
                    Frame::State(ids) => {
                        b.ids.extend(ids.iter().copied());
                        if let Some(c) = b.catching.as_mut() {
                            c.extend(ids);
                        }
                    }
                    Frame::CatchupEnd(seq) => {
                        if let Some(c) = b.catching.take() {
                            b.ids.retain(|id| c.contains(id));
                            b.complete = true;
                            b.last_seq = seq;
                        }
                    }
                    Frame::Pub(seq, ids) => {
                        b.ids.extend(ids);
                        b.last_seq = seq;
                    }
                    Frame::Fin(seq, ids) => {
                        for id in ids {
                            b.ids.remove(&id);
                        }
                        b.last_seq = seq;
                    }
                    _ => return,
                }
                let (last_seq, complete) = (b.last_seq, b.complete);
                let ev = Event::Stored {
                    origin: peer,
                    epoch,
                    last_seq,
                    complete,
                };
                self.core_event(to, ev);
            }
            _ => {}
        }
    }

    /// A session of `node` to or from `peer_node` opened: it supersedes an older one.
    pub(crate) fn node_session_opened(
        &mut self,
        node: usize,
        sid: u64,
        _peer: usize,
        dialer: bool,
    ) {
        let s = &self.sessions[&sid];
        let peer_id = if dialer { s.acceptor_id } else { s.dialer_id };
        let old = if dialer {
            self.nodes[node].out_sids.get(&peer_id).copied()
        } else {
            self.nodes[node].in_sids.get(&peer_id).copied()
        };
        if let Some(old) = old {
            self.close_end(old, node);
        }
        let n = &mut self.nodes[node];
        if dialer {
            n.out_sids.insert(peer_id, sid);
        } else {
            n.in_sids.insert(peer_id, sid);
        }
    }

    /// `node`'s end of `sid` closed; whether it was its current session with that peer.
    pub(crate) fn node_session_closed(&mut self, node: usize, sid: u64) -> bool {
        let Some(n) = self.nodes.get_mut(node) else {
            return false;
        };
        let before = n.out_sids.len() + n.in_sids.len();
        n.out_sids.retain(|_, s| *s != sid);
        n.in_sids.retain(|_, s| *s != sid);
        n.out_sids.len() + n.in_sids.len() != before
    }

    pub(crate) fn crash(&mut self, i: usize, power: bool, wipe: bool) {
        self.log_event(|| {
            format!(
                "n{i} CRASH power={power} wipe={wipe} own={}",
                self.nodes[i].own.len()
            )
        });
        self.report.crashes += 1;
        let id = self.nodes[i].id;
        self.taker_died(id);
        if wipe {
            self.report.wipes += 1;
        }
        self.drop_sessions_of(i, !power);
        if !power {
            self.lookupd_unregister(i);
        }
        let n = &mut self.nodes[i];
        n.alive = false;
        n.core = None;
        n.own.clear();
        n.src.clear();
        n.pubs.clear();
        n.adopted.clear();
        n.handoffs_in.clear();
        n.applying.clear();
        n.fenced = false;
        n.out_sids.clear();
        n.in_sids.clear();
        n.log.clear();
        n.leaving = None;
        if power {
            n.backlogs = n.synced.clone();
        }
        if wipe {
            n.backlogs.clear();
            n.synced.clear();
            n.manifests.clear();
            n.manifest_seq.clear();
            n.applied.clear();
            n.wiped = true;
        }
    }

    pub(crate) fn restart(&mut self, i: usize) {
        if self.nodes[i].alive || self.dead_forever.is_some_and(|(d, _)| d == i) {
            return;
        }
        let id = self.rng.next() | 1;
        let n = &mut self.nodes[i];
        n.alive = true;
        if n.wiped {
            n.id = id;
            n.epoch = 1;
        } else {
            n.epoch += 1;
        }
        n.seq = 0;
        self.failed_until[i] = Some(self.now + self.recovery_window());
        self.log_event(|| {
            format!(
                "n{i} RESTART as {:x} epoch {}",
                self.nodes[i].id, self.nodes[i].epoch
            )
        });
        self.start_node(i);
        self.nodes[i].wiped = false;
    }
}
