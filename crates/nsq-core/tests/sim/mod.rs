//! A deterministic simulation of a replication group (docs/replication.md, "The
//! simulation"): 3–5 nodes each running the real core (`nsq_core::replication::Member`), a
//! producer, consumers, nsqlookupds, and an abstract model of the messages — each node's
//! unsettled set, its log, its replica backlogs (with what was synced), its manifests — all
//! driven from one seed. Faults: frame delays (FIFO per session, as TCP), sessions broken by
//! cuts, partitions, asymmetric and one-way cuts, node↔lookupd cuts, crashes (kill or power
//! loss: unsynced replica writes lost), wiped disks (a new node ID at the old address),
//! clock-rate skew, lookupds that stop answering or answer a frozen snapshot, strangers.
//!
//! Asserted per run: no acknowledged message lost; nothing delivered that was never
//! published; nothing of a stranger stored or delivered; without partitions, no epoch with two
//! takers; duplicate deliveries by class within their bounds, two takers heard of each other
//! soon after their link is back, replica copies following their origin, a permanently dead
//! origin drained in time (`dups.rs`).
//!
//! Used by `tests/replication_sim.rs` (CI: many short seeds) and
//! `examples/replication_sim.rs` (the long form).

#![allow(dead_code, unreachable_pub)]

mod dups;
mod net;
mod node;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Duration;

pub use dups::{DupStats, Src};
pub use net::Frame;
use net::{Lookupd, Session};
use node::Node;

/// splitmix64: a small deterministic PRNG.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}

/// What one run is made of.
#[derive(Debug, Clone)]
pub struct Params {
    pub seed: u64,
    pub nodes: usize,
    pub replicas: usize,
    pub lookupds: usize,
    pub takeover_timeout: Duration,
    /// Simulated time with producers and faults, before the final phase.
    pub run_for: Duration,
    /// Partitions and cuts (otherwise only crashes, wipes, delays, skew, lookupd faults).
    pub partitions: bool,
    /// Clock rates within ±this per mille.
    pub skew_per_mille: u64,
}

impl Params {
    /// A run shaped by its seed.
    pub fn from_seed(seed: u64, run_for: Duration) -> Params {
        let mut r = Rng::new(seed ^ 0x5eed);
        let nodes = 3 + r.below(3) as usize;
        let replicas = if nodes >= 4 && r.chance(400) { 3 } else { 2 };
        Params {
            seed,
            nodes,
            replicas,
            lookupds: r.below(3) as usize,
            takeover_timeout: Duration::from_secs(3 + r.below(8)),
            run_for,
            partitions: r.chance(500),
            skew_per_mille: if r.chance(500) { 100 } else { 0 },
        }
    }
}

/// What a run measured.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub steps: u64,
    pub published: u64,
    pub acked: u64,
    pub delivered: u64,
    pub duplicates: u64,
    pub max_copies: u32,
    pub takeovers: u64,
    /// Epochs taken over by more than one member.
    pub double_takers: u64,
    pub handoffs: u64,
    pub crashes: u64,
    pub wipes: u64,
    pub cuts: u64,
    pub refused_strangers: u64,
    /// Deliveries by an origin of a message some taker had adopted already (the overlap).
    pub overlap_deliveries: u64,
    /// From a permanent death to the last of its acknowledged messages delivered.
    pub dead_origin_drained: Option<Duration>,
    /// At the end, the most members holding a live origin's current epoch.
    pub max_holders: usize,
    /// Planned leaves begun, and those whose node had handed every message over (and
    /// exited); the longest such handover.
    pub leaves: u64,
    pub leaves_done: u64,
    pub longest_leave: Duration,
    /// Duplicate deliveries by class.
    pub dups: DupStats,
    /// The longest time two takers of one epoch were both alive without having heard of each
    /// other's claim.
    pub two_taker_window: Duration,
    /// Windows of two takers that ended with one takeover dropped (its origin came back into
    /// the same epoch first).
    pub dropped_takeovers: u64,
    /// The longest lag of a `PartitionUnstreamed` duplicate in a run with nsqlookupds.
    pub partition_lag_lookupds: Duration,
    /// Second takers that started while a session to the first was up (its claim not heard).
    pub linked_second_takers: u64,
    pub failures: Vec<String>,
}

/// A scheduled happening.
#[derive(Debug, Clone)]
pub(crate) enum Ev {
    Tick(usize, u64),
    Deliver {
        sid: u64,
        to_dialer: bool,
        frame: Frame,
    },
    Publish,
    Fault,
    LookupdPing(usize, usize),
    Restart(usize),
    /// A leaving node checks whether its messages were handed over (then it exits).
    LeaveCheck(usize, u64),
    Heal(usize, usize),
    Stranger,
}

#[derive(Debug)]
struct Queued(Reverse<(Duration, u64)>, Ev);

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        self.0 == o.0
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.cmp(&o.0)
    }
}

/// A taker: its node ID, node index and run (incarnation).
pub type Taker = (u64, usize, u64);

/// A live replica's copy may lag its origin by the frames of this long (the longest frame
/// delay, 2.5 s, and a tick).
pub const FOLLOW_WITHIN: Duration = Duration::from_millis(3000);

/// Message IDs a stranger publishes start here; none may ever be stored or delivered.
pub const STRANGER_IDS: u64 = 1 << 60;

/// The whole simulated world.
pub struct World {
    pub p: Params,
    pub rng: Rng,
    pub now: Duration,
    queue: BinaryHeap<Queued>,
    next_seq: u64,
    pub(crate) nodes: Vec<Node>,
    pub(crate) lookupds: Vec<Lookupd>,
    pub(crate) sessions: BTreeMap<u64, Session>,
    next_sid: u64,
    /// cut[a][b]: frames from endpoint a to b are lost (nodes, then lookupds).
    pub(crate) cut: Vec<Vec<u32>>,
    next_msg: u64,
    pub published: BTreeSet<u64>,
    /// Acknowledged messages and their origin's node index.
    pub acked: BTreeMap<u64, usize>,
    pub deliveries: BTreeMap<u64, u32>,
    /// Every delivery of each message.
    pub delivered: BTreeMap<u64, Vec<dups::Delivery>>,
    /// (node ID, message) → where that node took a message delivered before (epoch, seq).
    pub retaken: BTreeMap<(u64, u64), Vec<(u64, u64)>>,
    /// (node ID, epoch) → when each seq was logged.
    pub log_at: BTreeMap<(u64, u64), Vec<(u64, Duration)>>,
    /// (origin, epoch) → the members that started taking it over (node ID, index, run).
    pub takers: BTreeMap<(u64, u64), Vec<Taker>>,
    /// Epochs with two takers alive at once (a taker that died mid-takeover excepted).
    pub concurrent_takers: BTreeSet<(u64, u64)>,
    /// Open windows of two takers of one epoch that have not heard of each other's claim:
    /// (origin, epoch, taker, taker) → since.
    pub two_takers: BTreeMap<(u64, u64, u64, u64), Duration>,
    /// (lower node ID, higher node ID) → when a session between them last opened.
    pub relinked: BTreeMap<(u64, u64), Duration>,
    /// Host faults: until when each node counts as failed (None: not failed).
    failed_until: Vec<Option<Duration>>,
    pub final_phase: bool,
    pub dead_forever: Option<(usize, Duration)>,
    pub last_dead_delivery: Option<Duration>,
    pub report: Report,
    /// Print what happens (SIM_TRACE=1).
    pub trace: bool,
    /// A message ID whose every move is printed (SIM_WATCH).
    pub watch: Option<u64>,
}

impl World {
    pub fn new(p: Params) -> World {
        let mut rng = Rng::new(p.seed);
        let n = p.nodes;
        let eps = n + p.lookupds;
        let mut w = World {
            rng: rng.clone(),
            now: Duration::ZERO,
            queue: BinaryHeap::new(),
            next_seq: 0,
            nodes: Vec::new(),
            lookupds: (0..p.lookupds).map(|_| Lookupd::new(&mut rng)).collect(),
            sessions: BTreeMap::new(),
            next_sid: 1,
            cut: vec![vec![0; eps]; eps],
            next_msg: 1,
            published: BTreeSet::new(),
            acked: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            delivered: BTreeMap::new(),
            log_at: BTreeMap::new(),
            retaken: BTreeMap::new(),
            takers: BTreeMap::new(),
            concurrent_takers: BTreeSet::new(),
            two_takers: BTreeMap::new(),
            relinked: BTreeMap::new(),
            failed_until: vec![None; n],
            final_phase: false,
            dead_forever: None,
            last_dead_delivery: None,
            report: Report::default(),
            trace: std::env::var("SIM_TRACE").is_ok(),
            watch: std::env::var("SIM_WATCH").ok().and_then(|v| v.parse().ok()),
            p,
        };
        w.rng = rng;
        for i in 0..n {
            let node = Node::new(i, &mut w);
            w.nodes.push(node);
        }
        for i in 0..n {
            w.start_node(i);
            for l in 0..w.p.lookupds {
                let at = w.rng.ms(0, 15_000);
                w.at(at, Ev::LookupdPing(i, l));
            }
        }
        w.at(Duration::from_millis(5), Ev::Publish);
        w.at(Duration::from_secs(2), Ev::Fault);
        w.at(Duration::from_secs(3), Ev::Stranger);
        w
    }

    pub(crate) fn at(&mut self, after: Duration, ev: Ev) {
        self.next_seq += 1;
        self.queue
            .push(Queued(Reverse((self.now + after, self.next_seq)), ev));
    }

    pub(crate) fn members(&self) -> Vec<String> {
        (0..self.p.nodes).map(Node::addr_of).collect()
    }

    pub(crate) fn new_msg(&mut self) -> u64 {
        self.next_msg += 1;
        self.next_msg
    }

    pub(crate) fn log_event(&self, what: impl FnOnce() -> String) {
        if self.trace {
            println!("{:>12.3?} {}", self.now, what());
        }
    }

    pub(crate) fn watch(&self, ids: &[u64], what: impl FnOnce() -> String) {
        if self.watch.is_some_and(|w| ids.contains(&w)) {
            println!("{:>12.3?} WATCH {}", self.now, what());
        }
    }

    pub(crate) fn fail(&mut self, msg: String) {
        if self.report.failures.len() < 20 {
            self.report
                .failures
                .push(format!("t={:?}: {msg}", self.now));
        }
    }

    /// Runs the whole scenario: faults for `run_for`, then everything healed (one node may
    /// die for good) and time for takeovers; then the end checks.
    pub fn run(mut self) -> Report {
        let run_end = self.p.run_for;
        let t = self.p.takeover_timeout;
        let settle = t * 3 + Duration::from_secs(30);
        while let Some(Queued(Reverse((when, _)), ev)) = self.queue.pop() {
            if !self.final_phase && when >= run_end {
                self.now = run_end;
                self.begin_final_phase();
            }
            if when >= run_end + settle {
                break;
            }
            self.now = when;
            self.report.steps += 1;
            self.step(ev);
            if self.report.failures.len() >= 20 {
                break;
            }
        }
        self.end_checks();
        self.report
    }

    fn step(&mut self, ev: Ev) {
        match ev {
            Ev::Tick(i, gen) => self.tick(i, gen),
            Ev::Deliver {
                sid,
                to_dialer,
                frame,
            } => self.deliver(sid, to_dialer, frame),
            Ev::Publish => {
                if !self.final_phase {
                    let i = self.rng.below(self.p.nodes as u64) as usize;
                    let k = 1 + self.rng.below(3) as usize;
                    self.publish(i, k);
                    let next = self.rng.ms(5, 60);
                    self.at(next, Ev::Publish);
                }
            }
            Ev::Fault => {
                if !self.final_phase {
                    self.fault();
                    let next = self.rng.ms(500, 6000);
                    self.at(next, Ev::Fault);
                }
            }
            Ev::LookupdPing(i, l) => {
                self.lookupd_ping(i, l);
                self.at(Duration::from_secs(15), Ev::LookupdPing(i, l));
            }
            Ev::Restart(i) => self.restart(i),
            Ev::LeaveCheck(i, gen) => self.leave_check(i, gen),
            Ev::Heal(a, b) => {
                self.cut[a][b] = self.cut[a][b].saturating_sub(1);
            }
            Ev::Stranger => {
                self.stranger();
                if !self.final_phase {
                    let next = self.rng.ms(2000, 20_000);
                    self.at(next, Ev::Stranger);
                }
            }
        }
    }

    /// Host faults allowed now: fewer than N−1 hosts failed or recovering.
    fn may_fail_host(&self) -> bool {
        let failed = self
            .failed_until
            .iter()
            .filter(|f| f.is_some_and(|u| u > self.now))
            .count();
        failed + 1 < self.p.replicas
    }

    fn recovery_window(&self) -> Duration {
        self.p.takeover_timeout * 3 + Duration::from_secs(60)
    }

    fn fault(&mut self) {
        let n = self.p.nodes;
        let roll = self.rng.below(100);
        let i = self.rng.below(n as u64) as usize;
        let t = self.p.takeover_timeout;
        match roll {
            0..=29 if self.may_fail_host() && self.nodes[i].alive => {
                let wipe = self.rng.chance(300);
                let power = self.rng.chance(500);
                self.crash(i, power, wipe);
                self.failed_until[i] = Some(Duration::MAX);
                let back = self.rng.ms(200, (t * 4).as_millis() as u64 + 5000);
                self.at(back, Ev::Restart(i));
            }
            30..=64 if self.p.partitions => {
                // A cut: one-way, both ways, or a whole node isolated (lookupds included).
                let j = (i + 1 + self.rng.below(n as u64 - 1) as usize) % n;
                let dur = self.rng.ms(500, (t * 3).as_millis() as u64 + 10_000);
                self.report.cuts += 1;
                match self.rng.below(4) {
                    0 => self.cut_for(i, j, dur),
                    1 => {
                        self.cut_for(i, j, dur);
                        self.cut_for(j, i, dur);
                    }
                    _ => {
                        for k in 0..n + self.p.lookupds {
                            if k != i {
                                self.cut_for(i, k, dur);
                                if self.rng.chance(800) {
                                    self.cut_for(k, i, dur);
                                }
                            }
                        }
                    }
                }
            }
            80..=87 if self.may_fail_host() && self.nodes[i].alive => self.start_leave(i),
            65..=79 if self.p.lookupds > 0 => {
                let l = self.rng.below(self.p.lookupds as u64) as usize;
                let dur = self.rng.ms(1000, (t * 3).as_millis() as u64 + 30_000);
                if self.rng.chance(500) {
                    let ep = n + l;
                    let who = if self.p.partitions { i } else { usize::MAX };
                    for k in 0..n {
                        if who == usize::MAX || k == who {
                            self.cut_for(k, ep, dur);
                            self.cut_for(ep, k, dur);
                        }
                    }
                } else {
                    self.freeze_lookupd(l, dur);
                }
            }
            _ => {}
        }
    }

    /// A planned leave (a drain): no more publishes to `i`; its core fences it and hands its
    /// epoch over once its replica set holds the whole log.
    fn start_leave(&mut self, i: usize) {
        if self.nodes[i].leaving.is_some() || self.nodes[i].core.is_none() {
            return;
        }
        self.report.leaves += 1;
        self.nodes[i].leaving = Some(self.now);
        let seq = self.nodes[i].seq;
        self.log_event(|| format!("n{i} LEAVES at seq {seq}"));
        self.failed_until[i] = Some(Duration::MAX);
        self.core_event(i, nsq_core::replication::Event::Leave { seq });
        let gen = self.nodes[i].tick_gen;
        self.at(Duration::from_millis(250), Ev::LeaveCheck(i, gen));
    }

    /// A leaving node exits once its messages are handed over (its queues empty: the taker's
    /// manifest took them off); it comes back later, as after any stop.
    fn leave_check(&mut self, i: usize, gen: u64) {
        let n = &self.nodes[i];
        if !n.alive || n.tick_gen != gen {
            return;
        }
        let Some(began) = n.leaving else { return };
        if n.own.is_empty() && n.applying.is_empty() {
            let took = self.now.saturating_sub(began);
            self.report.leaves_done += 1;
            self.report.longest_leave = self.report.longest_leave.max(took);
            self.log_event(|| format!("n{i} LEFT after {took:?}"));
            self.crash(i, false, false);
            let t = self.p.takeover_timeout;
            let back = self.rng.ms(200, (t * 4).as_millis() as u64 + 5000);
            self.at(back, Ev::Restart(i));
        } else {
            self.at(Duration::from_millis(250), Ev::LeaveCheck(i, gen));
        }
    }

    fn cut_for(&mut self, a: usize, b: usize, dur: Duration) {
        self.log_event(|| format!("CUT {a}->{b} for {dur:?}"));
        self.cut[a][b] += 1;
        self.at(dur, Ev::Heal(a, b));
    }

    fn begin_final_phase(&mut self) {
        self.log_event(|| "FINAL PHASE".to_string());
        self.final_phase = true;
        for row in self.cut.iter_mut() {
            row.iter_mut().for_each(|c| *c = 0);
        }
        for l in self.lookupds.iter_mut() {
            l.frozen = None;
        }
        for i in 0..self.p.nodes {
            if self.nodes[i].leaving.is_some() {
                // An operator ends a leave that did not finish (a second SIGTERM).
                self.crash(i, false, false);
            }
            if !self.nodes[i].alive {
                self.restart(i);
            }
        }
        // One node dies for good (a power loss), if no other host is recovering.
        let others_ok = self
            .failed_until
            .iter()
            .all(|f| f.is_none_or(|u| u <= self.now));
        if others_ok && self.rng.chance(600) {
            let i = self.rng.below(self.p.nodes as u64) as usize;
            self.crash(i, true, false);
            self.dead_forever = Some((i, self.now));
        }
    }

    /// Only the replica set stores: once the group has settled, no live origin's current
    /// epoch is held by more than N−1 members.
    fn check_copies(&mut self) {
        let need = self.p.replicas - 1;
        for o in 0..self.p.nodes {
            let n = &self.nodes[o];
            if !n.alive || n.core.is_none() {
                continue;
            }
            let key = (n.id, n.epoch);
            let holders: Vec<usize> = (0..self.p.nodes)
                .filter(|&j| j != o && self.nodes[j].alive)
                .filter(|&j| self.nodes[j].backlogs.contains_key(&key))
                .collect();
            self.report.max_holders = self.report.max_holders.max(holders.len());
            if holders.len() > need {
                self.fail(format!(
                    "n{o} {:x} epoch {} is held by {} members (n{holders:?}), more than N-1 = {need}",
                    key.0,
                    key.1,
                    holders.len()
                ));
            }
        }
    }

    fn end_checks(&mut self) {
        let open: Vec<_> = self.two_takers.keys().copied().collect();
        for k in open {
            self.close_two_takers(k);
        }
        let mut missing = Vec::new();
        for (&id, &origin) in &self.acked {
            if !self.deliveries.contains_key(&id) {
                missing.push((id, origin));
            }
        }
        if !missing.is_empty() && self.trace {
            for n in &self.nodes {
                if let Some(c) = &n.core {
                    println!("n{}: {}", n.idx, c.describe());
                }
            }
            for &(id, _) in missing.iter().take(3) {
                for n in &self.nodes {
                    let own = n.own.contains_key(&id);
                    let bl: Vec<_> = n
                        .backlogs
                        .iter()
                        .filter(|(_, b)| b.ids.contains(&id))
                        .map(|(k, b)| (*k, b.complete))
                        .collect();
                    let ad: Vec<_> = n
                        .adopted
                        .iter()
                        .filter(|(_, b)| b.contains(&id))
                        .map(|(k, _)| *k)
                        .collect();
                    println!("missing {id}: n{} alive={} fenced={} own={own} backlogs={bl:x?} adopted={ad:x?}", n.idx, n.alive, n.fenced);
                }
            }
        }
        if !missing.is_empty() {
            let list: Vec<String> = missing
                .iter()
                .take(8)
                .map(|(id, o)| format!("{id}@n{o}"))
                .collect();
            self.fail(format!(
                "{} acknowledged messages never delivered: {}",
                missing.len(),
                list.join(" ")
            ));
        }
        if let Some((_, at)) = self.dead_forever {
            let drained = self.last_dead_delivery.unwrap_or(at).saturating_sub(at);
            self.report.dead_origin_drained = Some(drained);
            let bound = self.drain_bound();
            if drained > bound {
                self.fail(format!(
                    "the dead origin's last acknowledged message was delivered {drained:?} after \
                     its death (bound {bound:?})"
                ));
            }
        }
        self.check_copies();
        let r = &mut self.report;
        r.published = self.published.len() as u64;
        r.acked = self.acked.len() as u64;
        r.delivered = self.deliveries.len() as u64;
        r.duplicates = self.deliveries.values().map(|&c| u64::from(c - 1)).sum();
        r.max_copies = self.deliveries.values().copied().max().unwrap_or(0);
        r.takeovers = self.takers.values().map(|s| s.len() as u64).sum();
        r.double_takers = self.concurrent_takers.len() as u64;
        if !self.p.partitions && r.double_takers > 0 {
            let list: Vec<String> = self
                .concurrent_takers
                .iter()
                .map(|(o, e)| format!("{o:x}.{e} by {:x?}", self.takers[&(*o, *e)]))
                .collect();
            self.fail(format!(
                "two takers without a partition: {}",
                list.join(", ")
            ));
        }
    }
}
