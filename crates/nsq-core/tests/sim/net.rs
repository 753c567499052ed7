//! The simulated network: link sessions (FIFO per direction, as TCP; a cut loses frames and
//! the session dies by the 5 s link timeout or a close), nsqlookupds, strangers.

use std::collections::BTreeMap;
use std::time::Duration;

use nsq_core::replication::{Event, Link, Msg};

use super::{Ev, Rng, World, STRANGER_IDS};

/// The link timeout (docs/replication.md, fixed constants).
pub const LINK_TIMEOUT: Duration = Duration::from_secs(5);

/// A frame on a link: the core's messages and the driver's data plane.
#[derive(Debug, Clone)]
pub enum Frame {
    Core(Msg),
    Heartbeat,
    Close,
    CatchupBegin(u64),
    State(Vec<u64>),
    CatchupEnd(u64),
    /// PUB (or an adoption) at seq with these message IDs.
    Pub(u64, Vec<u64>),
    Fin(u64, Vec<u64>),
    Manifest(u64, Vec<u64>),
    Handoff(u64, u64, Vec<u64>),
}

/// A link session: `dialer` is the origin (its Out link), `acceptor` the replica.
#[derive(Debug, Clone)]
pub struct Session {
    pub dialer: usize,
    pub acceptor: usize,
    /// Node IDs at the time it was made.
    pub dialer_id: u64,
    pub acceptor_id: u64,
    /// Each end still has it open.
    pub open: [bool; 2],
    /// When each end last received a frame.
    pub last_recv: [Duration; 2],
    pub last_sent: [Duration; 2],
    /// The latest arrival scheduled per direction (FIFO).
    pub last_arrival: [Duration; 2],
    /// The epoch the acceptor welcomed it for.
    pub epoch: Option<u64>,
    /// The dialer streams its log on it (after WELCOME).
    pub streaming: bool,
    pub stranger: bool,
    /// A frame from this end met a cut: the stream is broken (as a TCP connection that
    /// gave up), nothing more from it arrives; the other end times out.
    pub broken: [bool; 2],
    /// When it was opened, and again when the origin's stream on it began (catch-up, resume).
    pub opened: Duration,
}

impl Session {
    pub fn end(&self, node: usize) -> usize {
        if node == self.dialer {
            0
        } else {
            1
        }
    }
}

/// A frozen lookupd: until when, its clock then, and its producers then.
pub type Frozen = (Duration, Duration, Vec<(String, Duration)>);

/// One nsqlookupd.
#[derive(Debug, Clone)]
pub struct Lookupd {
    pub rate: u64,
    pub offset: Duration,
    /// Producers: address → last_update (its clock).
    pub regs: BTreeMap<String, Duration>,
    /// Answers a frozen snapshot until then.
    pub frozen: Option<Frozen>,
}

impl Lookupd {
    pub fn new(rng: &mut Rng) -> Lookupd {
        Lookupd {
            rate: 950 + rng.below(101),
            offset: Duration::from_secs(rng.below(100_000)),
            regs: BTreeMap::new(),
            frozen: None,
        }
    }
    pub fn clock(&self, now: Duration) -> Duration {
        self.offset + now * self.rate as u32 / 1000
    }
}

impl World {
    /// Sends `frame` from `from` on session `sid`; lost when the path is cut.
    pub(crate) fn send(&mut self, sid: u64, from: usize, frame: Frame) {
        let Some(s) = self.sessions.get(&sid) else {
            return;
        };
        let e = s.end(from);
        if !s.open[e] {
            return;
        }
        let to = if e == 0 { s.acceptor } else { s.dialer };
        let to_ep = if s.stranger && e == 1 { usize::MAX } else { to };
        if s.broken[e] {
            return;
        }
        if to_ep != usize::MAX && from < self.cut.len() && self.cut[from][to_ep] > 0 {
            self.sessions.get_mut(&sid).expect("present").broken[e] = true;
            return;
        }
        let delay = if self.rng.chance(20) {
            self.rng.ms(50, 2500)
        } else {
            self.rng.ms(0, 30)
        };
        let s = self.sessions.get_mut(&sid).expect("present");
        let arrive = (self.now + delay).max(s.last_arrival[e]);
        s.last_arrival[e] = arrive;
        s.last_sent[e] = self.now;
        let after = arrive - self.now;
        self.at(
            after,
            Ev::Deliver {
                sid,
                to_dialer: e == 1,
                frame,
            },
        );
    }

    pub(crate) fn deliver(&mut self, sid: u64, to_dialer: bool, frame: Frame) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let e = if to_dialer { 0 } else { 1 };
        if !s.open[e] {
            return;
        }
        s.last_recv[e] = self.now;
        let (to, from) = if to_dialer {
            (s.dialer, s.acceptor)
        } else {
            (s.acceptor, s.dialer)
        };
        if s.stranger && !to_dialer {
            // A stranger's frame reached a member: the session was refused at LinkUp, so
            // this cannot happen.
            self.fail(format!("a stranger's frame reached n{to}: {frame:?}"));
            return;
        }
        if let Frame::Close = frame {
            self.close_end(sid, to);
            return;
        }
        if s.stranger {
            return;
        }
        self.node_frame(to, from, sid, frame);
    }

    /// Closes `node`'s end of `sid` (its core is told), and sends a close to the other end.
    pub(crate) fn close_end(&mut self, sid: u64, node: usize) {
        let Some(s) = self.sessions.get_mut(&sid) else {
            return;
        };
        let e = s.end(node);
        if !s.open[e] {
            return;
        }
        s.open[e] = false;
        let (peer_id, link) = if e == 0 {
            (s.acceptor_id, Link::Out)
        } else {
            (s.dialer_id, Link::In)
        };
        let stranger = s.stranger;
        if s.open == [false, false] {
            self.sessions.remove(&sid);
        } else {
            // The close reaches the other end if the path is up (sent before the end closed).
            let s = self.sessions.get_mut(&sid).expect("present");
            s.open[e] = true;
            self.send(sid, node, Frame::Close);
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.open[e] = false;
            }
        }
        let _ = stranger;
        if self.node_session_closed(node, sid) {
            self.core_event(
                node,
                Event::LinkDown {
                    peer: peer_id,
                    link,
                },
            );
        }
    }

    /// Every session of `node`: its end vanishes (a crash). With `rst`, the other ends hear
    /// it (a killed process's sockets are closed); without, they time out.
    pub(crate) fn drop_sessions_of(&mut self, node: usize, rst: bool) {
        let sids: Vec<u64> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.dialer == node || (s.acceptor == node && !s.stranger))
            .map(|(&k, _)| k)
            .collect();
        for sid in sids {
            let s = self.sessions.get_mut(&sid).expect("present");
            let e = s.end(node);
            if rst && s.open[e] {
                self.send(sid, node, Frame::Close);
            }
            if let Some(s) = self.sessions.get_mut(&sid) {
                s.open[e] = false;
                if s.open == [false, false] {
                    self.sessions.remove(&sid);
                }
            }
        }
    }

    /// At a tick of `node`: heartbeats, link timeouts, and dialling the members it has no
    /// session to.
    pub(crate) fn net_tick(&mut self, node: usize) {
        let now = self.now;
        let mine: Vec<(u64, usize)> = self
            .sessions
            .iter()
            .filter(|(_, s)| !s.stranger && (s.dialer == node || s.acceptor == node))
            .map(|(&k, s)| (k, s.end(node)))
            .collect();
        for (sid, e) in mine {
            let s = &self.sessions[&sid];
            if !s.open[e] {
                continue;
            }
            if now.saturating_sub(s.last_recv[e]) >= LINK_TIMEOUT {
                self.close_end(sid, node);
                continue;
            }
            if now.saturating_sub(s.last_sent[e]) >= Duration::from_secs(1) {
                self.send(sid, node, Frame::Heartbeat);
            }
        }
        // Dial: one session per (dialer, acceptor) pair.
        for j in 0..self.p.nodes {
            if j == node || self.nodes[node].dial_after[j] > now {
                continue;
            }
            let exists = self
                .sessions
                .values()
                .any(|s| !s.stranger && s.dialer == node && s.acceptor == j && s.open[0]);
            if exists {
                continue;
            }
            self.nodes[node].dial_after[j] = now + Duration::from_millis(500);
            if !self.nodes[j].alive || self.cut[node][j] > 0 || self.cut[j][node] > 0 {
                continue;
            }
            self.open_session(node, j);
        }
    }

    fn open_session(&mut self, a: usize, b: usize) {
        let sid = self.next_sid;
        self.next_sid += 1;
        let (aid, bid) = (self.nodes[a].id, self.nodes[b].id);
        self.sessions.insert(
            sid,
            Session {
                dialer: a,
                acceptor: b,
                dialer_id: aid,
                acceptor_id: bid,
                open: [true, true],
                last_recv: [self.now; 2],
                last_sent: [self.now; 2],
                last_arrival: [self.now; 2],
                epoch: None,
                streaming: false,
                stranger: false,
                broken: [false; 2],
                opened: self.now,
            },
        );
        self.relinked.insert((aid.min(bid), aid.max(bid)), self.now);
        let (aaddr, baddr) = (self.nodes[a].addr.clone(), self.nodes[b].addr.clone());
        self.node_session_opened(a, sid, b, true);
        self.node_session_opened(b, sid, a, false);
        self.core_event(
            b,
            Event::LinkUp {
                peer: aid,
                addr: aaddr,
                link: Link::In,
            },
        );
        if self
            .sessions
            .get(&sid)
            .is_some_and(|s| s.open == [true, true])
        {
            self.core_event(
                a,
                Event::LinkUp {
                    peer: bid,
                    addr: baddr,
                    link: Link::Out,
                },
            );
        }
    }

    /// A stranger (not a member; node ID random, 0 sometimes) dials a member, sends HELLO
    /// and a PUB.
    pub(crate) fn stranger(&mut self) {
        let b = self.rng.below(self.p.nodes as u64) as usize;
        if !self.nodes[b].alive {
            return;
        }
        let sid = self.next_sid;
        self.next_sid += 1;
        let id = if self.rng.chance(300) {
            0
        } else {
            self.rng.next()
        };
        let bid = self.nodes[b].id;
        self.sessions.insert(
            sid,
            Session {
                dialer: usize::MAX,
                acceptor: b,
                dialer_id: id,
                acceptor_id: bid,
                open: [true, true],
                last_recv: [self.now; 2],
                last_sent: [self.now; 2],
                last_arrival: [self.now; 2],
                epoch: None,
                streaming: false,
                stranger: true,
                broken: [false; 2],
                opened: self.now,
            },
        );
        let addr = if self.rng.chance(500) {
            "stranger:4150".to_string()
        } else {
            format!("10.9.9.{}:4150", self.rng.below(200))
        };
        self.node_session_opened(b, sid, usize::MAX, false);
        self.core_event(
            b,
            Event::LinkUp {
                peer: id,
                addr,
                link: Link::In,
            },
        );
        let m = STRANGER_IDS + self.rng.below(1 << 20);
        self.published.insert(m);
        for f in [
            Frame::Core(Msg::Hello {
                epoch: 1,
                previous_unclean: Some(0),
                stamp: Duration::ZERO,
            }),
            Frame::Pub(1, vec![m]),
        ] {
            self.send(sid, usize::MAX, f);
        }
        if self.sessions.get(&sid).is_some_and(|s| s.open[1]) {
            self.fail(format!("n{b} kept a stranger's session open"));
        } else {
            self.report.refused_strangers += 1;
        }
        if let Some(s) = self.sessions.get_mut(&sid) {
            s.open[0] = false;
            if s.open == [false, false] {
                self.sessions.remove(&sid);
            }
        }
    }

    // ---- nsqlookupd --------------------------------------------------------------------

    fn lookupd_reachable(&self, node: usize, l: usize, both: bool) -> bool {
        let ep = self.p.nodes + l;
        self.cut[node][ep] == 0 && (!both || self.cut[ep][node] == 0)
    }

    /// `node`'s PING to lookupd `l` (nsqd/lookup.go, `lookupLoop`, every 15 s).
    pub(crate) fn lookupd_ping(&mut self, node: usize, l: usize) {
        if !self.nodes[node].alive || !self.lookupd_reachable(node, l, false) {
            return;
        }
        let clock = self.lookupds[l].clock(self.now);
        let addr = self.nodes[node].addr.clone();
        self.lookupds[l].regs.insert(addr, clock);
        if self.lookupd_reachable(node, l, true) {
            let sent_at = self.nodes[node].clock(self.now);
            self.core_event(
                node,
                Event::LookupdPong {
                    lookupd: l,
                    sent_at,
                },
            );
        }
    }

    /// A killed node's lookupd connections close: it is unregistered where the path is up.
    pub(crate) fn lookupd_unregister(&mut self, node: usize) {
        for l in 0..self.p.lookupds {
            if self.lookupd_reachable(node, l, false) {
                let addr = self.nodes[node].addr.clone();
                self.lookupds[l].regs.remove(&addr);
            }
        }
    }

    /// `node` polls every lookupd's `/debug`.
    pub(crate) fn lookupd_poll(&mut self, node: usize) {
        for l in 0..self.p.lookupds {
            if !self.lookupd_reachable(node, l, true) {
                continue;
            }
            let lk = &self.lookupds[l];
            let (clock, producers) = match &lk.frozen {
                Some((until, clock, snap)) if *until > self.now => (*clock, snap.clone()),
                _ => (
                    lk.clock(self.now),
                    lk.regs.iter().map(|(a, u)| (a.clone(), *u)).collect(),
                ),
            };
            self.core_event(
                node,
                Event::LookupdAnswer {
                    lookupd: l,
                    clock,
                    producers,
                },
            );
        }
    }

    /// Lookupd `l` answers a snapshot of now for `dur`.
    pub(crate) fn freeze_lookupd(&mut self, l: usize, dur: Duration) {
        let lk = &self.lookupds[l];
        let snap = lk.regs.iter().map(|(a, u)| (a.clone(), *u)).collect();
        let clock = lk.clock(self.now);
        self.lookupds[l].frozen = Some((self.now + dur, clock, snap));
    }
}
