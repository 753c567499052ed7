//! Where duplicate deliveries come from, and the bounds the simulation asserts
//! (docs/replication.md, "Safety model"). Every delivery is recorded with where the
//! delivering node's copy came from ([`Src`]); a delivery of a message delivered before is
//! put in one [`Class`], and each class is checked against its bound as it happens.

use std::collections::BTreeMap;
use std::time::Duration;

use nsq_core::replication::{BacklogState, StatusEntry};

use super::net::LINK_TIMEOUT;
use super::{World, STRANGER_IDS};

/// How a node came to hold a message it delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Src {
    /// Published to it.
    Published,
    /// Adopted by its takeover of `(origin, epoch)` from a copy holding the origin's log up to
    /// `upto`; `origin_alive`: the origin was running that epoch then (a partition, not a
    /// crash).
    Taken {
        origin: u64,
        epoch: u64,
        upto: u64,
        origin_alive: bool,
        /// The copy's catch-up had ended.
        complete: bool,
    },
    /// Adopted from `from`'s HANDOFF of `(origin, epoch)`.
    Handoff { from: u64, origin: u64, epoch: u64 },
}

/// One delivery.
#[derive(Debug, Clone, Copy)]
pub struct Delivery {
    pub at: Duration,
    pub node: u64,
    pub src: Src,
    /// The delivering node's epoch and the seq of the FIN it logged for it.
    pub epoch: u64,
    pub fin: u64,
}

/// The classes of duplicate deliveries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// A taker re-delivers what the crashed origin settled after the last frame its copy
    /// holds.
    CrashUnstreamed,
    /// A taker re-delivers what the cut-off origin settled after the last frame its copy
    /// holds, before it fenced.
    PartitionUnstreamed,
    /// Two takers of one epoch each delivered it (a second taker while the first was cut off
    /// from it, or after the first died mid-takeover).
    TwoTakers,
    /// A takeover of a copy whose catch-up had not ended (it still holds what the origin
    /// settled before the catch-up began, until CATCHUP_END) re-delivers what its origin
    /// delivered.
    IncompleteCopy,
    /// The same node adopted it again (a retried takeover, a takeover of a copy of its own
    /// earlier adoption) after delivering it.
    Readopted,
    /// A HANDOFF brought back a message the taker (or another) had delivered already.
    Handoff,
    /// A taker of an epoch re-delivers a message delivered by a node other than that epoch's
    /// origin (a chain: the origin had adopted it from an earlier epoch, another taker of it
    /// delivered it…).
    Chain,
    /// An origin delivered a message another node had delivered already: the manifest it
    /// applied did not list it (adopted from a HANDOFF after the manifest was sent, or a
    /// takeover dropped when its origin came back into the same epoch before it ended).
    OriginKept,
}

impl Class {
    pub const ALL: [Class; 8] = [
        Class::CrashUnstreamed,
        Class::PartitionUnstreamed,
        Class::TwoTakers,
        Class::IncompleteCopy,
        Class::Readopted,
        Class::Handoff,
        Class::Chain,
        Class::OriginKept,
    ];
}

/// Per class: how many, and the longest lag (from the origin logging the copy's last frame
/// to the earlier delivery that the copy missed).
#[derive(Debug, Clone, Default)]
pub struct DupStats {
    pub count: BTreeMap<Class, u64>,
    pub max_lag: BTreeMap<Class, Duration>,
}

impl DupStats {
    pub fn add(&mut self, o: &DupStats) {
        for (k, v) in &o.count {
            *self.count.entry(*k).or_default() += v;
        }
        for (k, v) in &o.max_lag {
            let e = self.max_lag.entry(*k).or_default();
            *e = (*e).max(*v);
        }
    }
}

impl std::fmt::Display for DupStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for c in Class::ALL {
            let n = self.count.get(&c).copied().unwrap_or(0);
            if n > 0 {
                write!(f, "{c:?} {n}")?;
                if let Some(l) = self.max_lag.get(&c) {
                    write!(f, " (lag ≤ {l:.1?})")?;
                }
                write!(f, "; ")?;
            }
        }
        Ok(())
    }
}

impl World {
    /// The time `node` (ID) logged `seq` in `epoch`.
    pub(crate) fn logged_at(&self, node: u64, epoch: u64, seq: u64) -> Option<Duration> {
        let v = self.log_at.get(&(node, epoch))?;
        let i = v.partition_point(|(s, _)| *s < seq);
        v.get(i).filter(|(s, _)| *s == seq).map(|(_, t)| *t)
    }

    /// Records a delivery of `id` by node `i`; classifies and checks it if it is a duplicate.
    pub(crate) fn record_delivery(&mut self, i: usize, id: u64) {
        let me = self.nodes[i].id;
        let src = self.nodes[i].src.remove(&id).unwrap_or(Src::Published);
        let d = Delivery {
            at: self.now,
            node: me,
            src,
            epoch: self.nodes[i].epoch,
            fin: self.nodes[i].seq + 1,
        };
        let prior: Vec<Delivery> = self.delivered.get(&id).cloned().unwrap_or_default();
        self.delivered.entry(id).or_default().push(d);
        if prior.is_empty() {
            return;
        }
        let (class, lag) = match src {
            Src::Published => (Class::OriginKept, None),
            Src::Handoff { .. } => (Class::Handoff, None),
            Src::Taken {
                origin,
                epoch,
                upto,
                origin_alive,
                complete,
            } => {
                if !complete && prior.iter().any(|p| p.node == origin) {
                    (Class::IncompleteCopy, None)
                } else if let Some(p) = prior.iter().rev().find(|p| p.node == origin) {
                    // Unless the origin took it again after that delivery (an adoption takes
                    // every message again), and the copy holds that later take.
                    let retaken = self.retaken.get(&(origin, id)).is_some_and(|v| {
                        v.iter().any(|&(e, s)| e == epoch && s > p.fin && s <= upto)
                    });
                    if p.epoch == epoch && p.fin <= upto && !retaken {
                        self.fail(format!(
                            "n{i} re-delivered {id} from its copy of {origin:x}.{epoch} up to \
                             seq {upto}, which the origin settled at seq {}",
                            p.fin
                        ));
                    }
                    let class = if origin_alive {
                        Class::PartitionUnstreamed
                    } else {
                        Class::CrashUnstreamed
                    };
                    let lag = self
                        .logged_at(origin, epoch, upto)
                        .map(|t| p.at.saturating_sub(t));
                    (class, lag)
                } else if prior.iter().any(|p| p.node == me) {
                    (Class::Readopted, None)
                } else if prior.iter().any(|p| {
                    self.takers
                        .get(&(origin, epoch))
                        .is_some_and(|t| t.iter().any(|(tid, _, _)| *tid == p.node))
                }) {
                    (Class::TwoTakers, None)
                } else {
                    (Class::Chain, None)
                }
            }
        };
        if let (Class::CrashUnstreamed, Some(l), false) = (class, lag, self.p.partitions) {
            let bound = self.crash_lag_bound();
            if l > bound {
                self.fail(format!(
                    "n{i} re-delivered {id}, which the crashed origin settled {l:?} after the \
                     last frame of the copy taken (bound {bound:?})"
                ));
            }
        }
        if let (Class::PartitionUnstreamed, Some(l), true) = (class, lag, self.p.lookupds > 0) {
            // With nsqlookupds, a member takes over only once every lookupd had the origin
            // absent for T, while the origin unfenced on a lookupd's answer is listed there.
            let r = &mut self.report;
            r.partition_lag_lookupds = r.partition_lag_lookupds.max(l);
        }
        let s = &mut self.report.dups;
        *s.count.entry(class).or_default() += 1;
        if let Some(l) = lag {
            let e = s.max_lag.entry(class).or_default();
            *e = (*e).max(l);
        }
        if self.trace && std::env::var_os("SIM_DUPS").is_some() {
            println!(
                "{:>12.3?} DUP {id} n{i} {class:?} lag {lag:?} prior {prior:x?}",
                self.now
            );
        }
        self.watch(&[id], || {
            format!("n{i} re-delivers it: {class:?} lag {lag:?} prior {prior:x?}")
        });
    }
}

impl World {
    /// `me` started taking `(origin, epoch)` over while another taker of it is alive: a window
    /// with two takers opens, until they hear of each other's claim or one of them dies.
    pub(crate) fn second_taker(&mut self, origin: u64, epoch: u64, me: u64, first: u64) {
        if self.linked(me, first) {
            // Counted, not failed: seen (seed 9000043) when the first taker's `taking over`
            // had not reached the second yet (a delayed STATUS); see the report.
            self.report.linked_second_takers += 1;
            self.log_event(|| {
                format!("{me:x} takes {origin:x}.{epoch} over while linked to its taker {first:x}")
            });
        }
        self.two_takers
            .entry((origin, epoch, me.min(first), me.max(first)))
            .or_insert(self.now);
    }

    /// Node `to` received a STATUS from `from`: a window of two takers that learn of each
    /// other closes.
    pub(crate) fn saw_status(&mut self, to: u64, from: u64, entries: &[StatusEntry]) {
        if self.two_takers.is_empty() {
            return;
        }
        let pair = (to.min(from), to.max(from));
        let closing: Vec<(u64, u64, u64, u64)> = self
            .two_takers
            .keys()
            .filter(|&&(o, e, a, b)| {
                (a, b) == pair
                    && entries.iter().any(|s| {
                        (s.origin, s.epoch) == (o, e)
                            && matches!(s.state, BacklogState::TakingOver | BacklogState::TakenOver)
                    })
            })
            .copied()
            .collect();
        for k in closing {
            self.close_two_takers(k);
        }
    }

    /// Node `id` died: its windows close.
    pub(crate) fn taker_died(&mut self, id: u64) {
        let closing: Vec<(u64, u64, u64, u64)> = self
            .two_takers
            .keys()
            .filter(|k| k.2 == id || k.3 == id)
            .copied()
            .collect();
        for k in closing {
            self.close_two_takers(k);
        }
    }

    /// At node `i`'s tick: a window of two takers closes when one of them no longer claims
    /// the epoch (its takeover dropped when the origin came back into the same epoch).
    pub(crate) fn check_claims(&mut self, i: usize) {
        if self.two_takers.is_empty() {
            return;
        }
        let id = self.nodes[i].id;
        let Some(core) = self.nodes[i].core.as_ref() else {
            return;
        };
        let status = core.status_now();
        let dropped: Vec<(u64, u64, u64, u64)> = self
            .two_takers
            .keys()
            .filter(|k| {
                (k.2 == id || k.3 == id)
                    && !status.iter().any(|e| {
                        (e.origin, e.epoch) == (k.0, k.1)
                            && matches!(e.state, BacklogState::TakingOver | BacklogState::TakenOver)
                    })
            })
            .copied()
            .collect();
        for k in dropped {
            if let Some(since) = self.two_takers.remove(&k) {
                let w = self.now.saturating_sub(since);
                self.report.two_taker_window = self.report.two_taker_window.max(w);
                self.report.dropped_takeovers += 1;
            }
        }
    }

    /// Whether a session between nodes `a` and `b` (IDs) is open at both ends.
    pub(crate) fn linked(&self, a: u64, b: u64) -> bool {
        self.sessions.values().any(|s| {
            !s.stranger
                && s.open == [true, true]
                && ((s.dialer_id, s.acceptor_id) == (a, b)
                    || (s.dialer_id, s.acceptor_id) == (b, a))
        })
    }

    /// A window of two takers closes: it lasted from the second start; once the two are
    /// linked again (their partition healed), it closes within [`World::two_taker_bound`].
    pub(crate) fn close_two_takers(&mut self, k: (u64, u64, u64, u64)) {
        if let Some(since) = self.two_takers.remove(&k) {
            let w = self.now.saturating_sub(since);
            self.report.two_taker_window = self.report.two_taker_window.max(w);
            let relinked = self
                .relinked
                .get(&(k.2, k.3))
                .copied()
                .filter(|&t| t >= since)
                .map(|t| self.now.saturating_sub(t));
            let bound = self.two_taker_bound();
            if relinked.is_some_and(|r| r > bound) {
                self.fail(format!(
                    "two takers of {:x}.{} ({:x}, {:x}) still unaware of each other {relinked:?} \
                     after their link came back (bound {bound:?})",
                    k.0, k.1, k.2, k.3
                ));
            }
        }
    }
}

/// The bounds asserted (docs/replication.md, "Safety model").
impl World {
    /// Two takers of one epoch hear of each other's claim at most this long after a session
    /// between them is up again (the STATUS sent at link-up, a delayed frame): a second taker
    /// starts only while the two are not linked (each thinks the other dead).
    pub(crate) fn two_taker_bound(&self) -> Duration {
        LINK_TIMEOUT
    }

    /// Without partitions, a takeover after a crash re-delivers only what the origin settled
    /// at most this long after the last frame of the copy taken: a link that was dying (the
    /// link timeout) plus the longest frame delay.
    pub(crate) fn crash_lag_bound(&self) -> Duration {
        LINK_TIMEOUT + Duration::from_millis(2500)
    }

    /// A permanently dead origin's acknowledged messages are all delivered within this of its
    /// death: found gone (T on the slower clock, after the link timeout, or after nsqlookupd's
    /// 20 s staleness and a poll), one candidate passed (T + 5 s), STATUS and delivery.
    pub(crate) fn drain_bound(&self) -> Duration {
        self.p.takeover_timeout * 2 + Duration::from_secs(30)
    }
}

impl World {
    /// Node `i`'s replica store follows each origin it replicates live: a complete copy of
    /// the origin's current epoch, on a session whose stream began longer than
    /// [`super::FOLLOW_WITHIN`], differs from the origin's unsettled messages by at most the
    /// message IDs of the frames the origin logged within that time (frames in flight); and
    /// no copy holds a stranger's message.
    pub(crate) fn check_follows(&mut self, i: usize) {
        let n = &self.nodes[i];
        let mut bad = Vec::new();
        for (&(o, e), b) in &n.backlogs {
            if b.ids.range(STRANGER_IDS..).next().is_some() {
                bad.push(format!(
                    "n{i}'s copy of {o:x}.{e} holds a stranger's message"
                ));
            }
            if !b.complete {
                continue;
            }
            let Some(j) = self
                .nodes
                .iter()
                .position(|x| x.alive && x.id == o && x.epoch == e)
            else {
                continue;
            };
            let live = n
                .in_sids
                .get(&o)
                .and_then(|sid| self.sessions.get(sid))
                .is_some_and(|s| {
                    s.epoch == Some(e)
                        && s.streaming
                        && s.open == [true, true]
                        && s.broken == [false, false]
                        && self.now.saturating_sub(s.opened) > super::FOLLOW_WITHIN
                });
            if !live {
                continue;
            }
            let own = &self.nodes[j].own;
            let diff = b.ids.iter().filter(|id| !own.contains_key(id)).count()
                + own.keys().filter(|id| !b.ids.contains(id)).count();
            let slack: usize = self.nodes[j].recent.iter().map(|(_, k)| k).sum();
            if diff > slack {
                bad.push(format!(
                    "n{i}'s copy of {o:x}.{e} differs from the origin's unsettled messages by \
                     {diff} (slack {slack}: the frames of the last {:?})",
                    super::FOLLOW_WITHIN
                ));
            }
        }
        for f in bad {
            self.fail(f);
        }
    }
}
