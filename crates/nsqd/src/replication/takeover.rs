//! Taking a lost origin's backlog over (docs/replication.md, "Takeover"): one task per node
//! watches every backlog it holds with a [`GoneWatch`] per `(origin, epoch)` — the origin's
//! link (a live session, or down since it ended or since this node started) and the
//! origin's `client::` entry in the `/debug` of every nsqlookupd this node is connected to,
//! polled every second while it holds a backlog (nsqlookupd/http.go, `doDebug`; the entry's
//! `last_update` is refreshed by the origin's PINGs, nsqd/lookup.go `lookupLoop`). Once the
//! origin has been gone for `--replication-takeover-timeout` and the chooser names this node,
//! the backlog is delivered here: the manifest is written (fsynced), every topic and channel
//! of the backlog is created (pause flags kept), every unsettled message is put with its
//! original ID, timestamp, attempts and remaining deferral (`Topic::adopt`, replicated like a
//! publish), and the backlog is deleted once this node's own replicas hold the messages.
//!
//! An epoch the origin itself declared ended (HELLO with PREVIOUS_UNCLEAN) is gone at once.
//! NSQ has no counterpart.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nsq_core::receipt::PutReceipt;
use nsq_core::replica::manifest;
use nsq_core::replication::ring::{taker, Ring};
use nsq_core::replication::GoneWatch;
use nsq_protocol::replication::{BacklogState, StatusEntry};

use super::deliver::{deliver, Taken};
use super::lookupd_debug::poll_debug;
use super::{Backlog, Replication};
use crate::lookup::Lookup;

/// How often the watch looks: a lost link is seen, and an origin found gone, this soon.
const TICK: Duration = Duration::from_millis(250);
/// How often nsqlookupd is polled while this node holds a backlog (links up or down).
const POLL_EVERY: Duration = Duration::from_secs(1);
/// How long an epoch whose manifest the origin applied is still announced as taken over.
const RETIRED_FOR: Duration = Duration::from_secs(600);
/// How soon a takeover whose messages are not yet synced or replicated tries again.
const CONFIRM_RETRY: Duration = Duration::from_secs(1);

/// How a takeover goes ahead ([`Replication::take_over`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taking {
    /// Not if the origin's link is live again, nor if another member takes it over.
    UnlessLive,
    /// Not if another member takes it over (its origin ended the epoch).
    Alone,
    /// Beside the member that took it over, whose copy may lack some of this one's: the
    /// union of the holders is delivered (duplicates of what both hold, never loss).
    Beside,
}

/// A member that took, or is taking, an epoch over, as its STATUS says.
#[derive(Debug, Clone, Copy)]
struct OtherTaker {
    member: u64,
    state: BacklogState,
    /// The copy it took: up to this seq, and whether its catch-up had ended.
    last_seq: u64,
    complete: bool,
}

impl OtherTaker {
    /// Its copy holds every message of this node's copy, which ends at `mine`: a complete
    /// copy holds every message of the epoch unsettled at its `last_seq`, so one at least as
    /// far holds all of it. Otherwise this node's copy is delivered too (there is no
    /// HANDOFF: each holder delivers its own, docs/replication.md "Takeover").
    fn subsumes(&self, mine: u64) -> bool {
        self.complete && self.last_seq >= mine
    }
}

/// Watches the backlogs until the daemon stops (see the module comment).
pub async fn run(repl: Arc<Replication>, lookup: Lookup, client: nsq_http::client::HttpClient) {
    let mut stop = repl.stopping();
    let timeout = repl.settings.takeover_timeout;
    let mut watches: HashMap<(u64, u64), GoneWatch> = HashMap::new();
    // When (this node's clock) each watched backlog was first found gone, for the chooser's
    // escalation.
    let mut gone_at: HashMap<(u64, u64), Instant> = HashMap::new();
    // The configured lookupds the watches count (a change starts every watch again).
    let mut configured: Vec<String> = Vec::new();
    // The last "someone else takes it over" logged per backlog (logged on change only).
    let mut announced: HashMap<(u64, u64), Option<u64>> = HashMap::new();
    // The last nsqlookupd poll (every POLL_EVERY while this node holds a backlog).
    let mut last_poll: Option<Instant> = None;
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
        }
        let lookupds = lookup.lookupds();
        let tcp: Vec<String> = lookupds.iter().map(|(t, _)| t.clone()).collect();
        if tcp != configured {
            configured = tcp;
            watches.clear();
        }
        let backlogs: Vec<Arc<Backlog>> = repl.backlogs.lock().values().cloned().collect();
        watches.retain(|k, _| backlogs.iter().any(|b| (b.origin, b.epoch) == *k));
        let now = repl.clock();
        let mut down = Vec::new();
        for b in &backlogs {
            if b.taking_over.load(Ordering::Acquire) {
                continue;
            }
            let w = watches
                .entry((b.origin, b.epoch))
                .or_insert_with(|| GoneWatch::new(timeout, configured.len(), now));
            let link = b.link();
            match link.down_since {
                None => w.link_up(),
                Some(at) => {
                    w.link_down(at.saturating_duration_since(repl.clock_base));
                    down.push((b.clone(), link.ended));
                }
            }
        }
        // nsqlookupd is polled while links are up too: an entry's `last_update` is then seen
        // at most a poll after each PING. Every configured lookupd counts (fail closed): one
        // not identified or not answering blocks the takeover (`GoneWatch`).
        if !configured.is_empty()
            && !backlogs.is_empty()
            && last_poll.is_none_or(|t: Instant| t.elapsed() >= POLL_EVERY)
        {
            last_poll = Some(Instant::now());
            for (i, (_, http)) in lookupds.iter().enumerate() {
                let Some(http) = http else { continue };
                let Some(answer) = poll_debug(&client, http).await else {
                    continue;
                };
                let at = repl.clock();
                for b in &backlogs {
                    // An entry at its address is another member's once a member with
                    // another node ID answers there (Node identity): not this origin's.
                    let address = b.address.lock().clone();
                    let address = address.filter(|(h, p)| !repl.replaced_at(b.origin, h, *p));
                    let entry = address.and_then(|(host, port)| {
                        answer
                            .producers
                            .iter()
                            .find(|p| p.broadcast_address == host && p.tcp_port == i64::from(port))
                            .map(|p| {
                                Duration::from_nanos(u64::try_from(p.last_update).unwrap_or(0))
                            })
                    });
                    if let Some(w) = watches.get_mut(&(b.origin, b.epoch)) {
                        w.lookupd_answer(i, at, answer.clock, entry);
                    }
                }
            }
        }
        let now = repl.clock();
        for (k, w) in &watches {
            if w.is_gone(now) {
                gone_at.entry(*k).or_insert_with(Instant::now);
            } else {
                gone_at.remove(k);
            }
        }
        gone_at.retain(|k, _| watches.contains_key(k));
        if down.is_empty() {
            continue;
        }
        let now = Instant::now();
        for (b, ended) in down {
            let key = (b.origin, b.epoch);
            // Another member's STATUS says it took this epoch over (or is doing so): this
            // copy is not needed if the taker's holds all of it, else it is delivered here
            // too (below); while the other takes over, this one waits.
            match repl.other_taker(b.origin, b.epoch) {
                Some(t) if t.state == BacklogState::TakenOver => {
                    let mine = b.store.lock().last_seq();
                    if t.subsumes(mine) {
                        tracing::info!(
                            "REPLICATION: {:016x} took over {:016x} epoch {}; dropping this copy",
                            t.member,
                            b.origin,
                            b.epoch
                        );
                        repl.drop_copy(b.origin, b.epoch).await;
                    } else {
                        let why = format!(
                            "{:016x} took it over from a copy that may lack some of this one's ({}, up to seq {}; this one up to {mine})",
                            t.member,
                            if t.complete { "complete" } else { "incomplete" },
                            t.last_seq
                        );
                        if !repl
                            .take_over(b.origin, b.epoch, &why, Taking::Beside)
                            .await
                        {
                            continue;
                        }
                    }
                    watches.remove(&key);
                    announced.remove(&key);
                    continue;
                }
                Some(_) => continue,
                None => {}
            }
            // An epoch its origin declared ended is gone from then, without the timeout.
            let Some(gone_at) = ended.or_else(|| gone_at.get(&key).copied()) else {
                continue;
            };
            let chosen = repl.taker(b.origin, b.epoch, now.saturating_duration_since(gone_at));
            if chosen == Some(repl.identity.node_id) {
                let why = if ended.is_some() {
                    "its previous epoch ended unclean".to_string()
                } else {
                    format!("gone for {}", nsq_go::duration::format(timeout))
                };
                let taking = if ended.is_none() {
                    Taking::UnlessLive
                } else {
                    Taking::Alone
                };
                if repl.take_over(b.origin, b.epoch, &why, taking).await {
                    watches.remove(&key);
                    announced.remove(&key);
                }
            } else if announced.get(&key) != Some(&chosen) {
                announced.insert(key, chosen);
                match chosen {
                    Some(m) => tracing::info!(
                        "REPLICATION: {:016x} epoch {} is gone; {m:016x} takes it over",
                        b.origin,
                        b.epoch
                    ),
                    None => tracing::warn!(
                        "REPLICATION: {:016x} epoch {} is gone; no member to take it over",
                        b.origin,
                        b.epoch
                    ),
                }
            }
        }
    }
}

impl Replication {
    /// This node's backlogs and their states, for STATUS: every backlog, `complete` once its
    /// catch-up ended (only complete ones count as holders for the chooser, see
    /// [`Replication::holds`]; the others still tell a taker's other holders what they
    /// hold); a kept manifest as `taken over` with the `last_seq` and completeness of the
    /// copy taken.
    pub(crate) fn status_entries(&self) -> Vec<StatusEntry> {
        // Epochs taken over here whose manifest the origin applied (`retired`) are still
        // announced as taken over for a while: a holder that did not see this node's takeover
        // before the manifest went must not take the epoch over again. One whose origin
        // applied the manifest is announced as complete to the end of the epoch (the origin
        // keeps every message the manifest did not take: no holder's copy is needed); one
        // whose origin is gone for good, as the copy taken was.
        let retired: Vec<StatusEntry> = {
            let mut r = self.retired.lock();
            r.retain(|_, (at, _)| at.elapsed() < RETIRED_FOR);
            r.iter()
                .map(|(&(origin, epoch), (_, t))| StatusEntry {
                    origin,
                    epoch,
                    state: BacklogState::TakenOver,
                    last_seq: t.last_seq,
                    messages: 0,
                    bytes: 0,
                    complete: t.complete,
                    echo: 0,
                })
                .collect()
        };
        // A backlog still here is announced as it is (`taking over` until its takeover is
        // confirmed), not as taken over: the other holders keep their copies until then.
        let held: Vec<(u64, u64)> = self.backlogs.lock().keys().copied().collect();
        let retired: Vec<StatusEntry> = retired
            .into_iter()
            .filter(|e| !held.contains(&(e.origin, e.epoch)))
            .collect();
        let echoes: HashMap<(u64, u64), u64> = self
            .backlogs
            .lock()
            .iter()
            .map(|(&k, b)| (k, b.ping_echo.load(Ordering::Acquire)))
            .collect();
        let taken = self.taken_seq.lock().clone();
        self.backlogs()
            .into_iter()
            .map(|b| {
                let state = match b.state {
                    "replicating" => BacklogState::Replicating,
                    "taking over" => BacklogState::TakingOver,
                    "taken over" => BacklogState::TakenOver,
                    _ => BacklogState::Detached,
                };
                // A kept manifest (no backlog): the copy it was taken from. Not known for one
                // whose record is lost (incomplete, 0: every other holder delivers its copy
                // too — duplicates, never loss).
                let (last_seq, complete) = if state == BacklogState::TakenOver {
                    taken
                        .get(&(b.origin, b.epoch))
                        .map_or((0, false), |t| (t.last_seq, t.complete))
                } else {
                    (b.last_seq, !b.catching_up)
                };
                StatusEntry {
                    origin: b.origin,
                    epoch: b.epoch,
                    state,
                    last_seq,
                    messages: b.messages,
                    bytes: b.bytes,
                    complete,
                    echo: if state == BacklogState::Replicating {
                        echoes.get(&(b.origin, b.epoch)).copied().unwrap_or(0)
                    } else {
                        0
                    },
                }
            })
            .chain(retired)
            .take(usize::from(u16::MAX))
            .collect()
    }

    /// A member other than this node whose STATUS says it took `(origin, epoch)` over, or is
    /// taking it over (only believed of a member alive now); a member that took it over
    /// first.
    fn other_taker(&self, origin: u64, epoch: u64) -> Option<OtherTaker> {
        let me = self.identity.node_id;
        let gossip = self.gossip.lock().clone();
        let mut taking = None;
        for (m, entries) in gossip {
            if m == me {
                continue;
            }
            for e in entries
                .iter()
                .filter(|e| e.origin == origin && e.epoch == epoch)
            {
                let t = OtherTaker {
                    member: m,
                    state: e.state,
                    last_seq: e.last_seq,
                    complete: e.complete,
                };
                match e.state {
                    BacklogState::TakenOver => return Some(t),
                    BacklogState::TakingOver if self.alive(m) => taking = Some(t),
                    _ => {}
                }
            }
        }
        taking
    }

    /// Deletes this node's copy of `(origin, epoch)` (another member took it over).
    async fn drop_copy(self: &Arc<Self>, origin: u64, epoch: u64) {
        let _g = self.takeover_lock.lock().await;
        let Some(b) = self.backlogs.lock().remove(&(origin, epoch)) else {
            return;
        };
        b.session.fetch_add(1, Ordering::AcqRel);
        let dir = b.store.lock().dir().to_path_buf();
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await;
        if let Ok(Err(e)) = removed {
            tracing::error!("REPLICATION: failed to delete a backlog - {e}");
        }
        self.status_change();
    }

    /// Whether member `m` is alive as this node sees it: this node, a peer with a live
    /// session in either direction.
    pub(crate) fn alive(&self, m: u64) -> bool {
        if m == self.identity.node_id {
            return true;
        }
        if self
            .group
            .lock()
            .peers
            .iter()
            .any(|p| p.live && p.node_id == m)
        {
            return true;
        }
        self.backlogs
            .lock()
            .values()
            .any(|b| b.origin == m && b.link.lock().live.is_some())
    }

    /// The members this node knows the IDs of: itself, the peers it linked to, the origins of
    /// its backlogs and manifests.
    fn ring(&self) -> Ring {
        let mut ids = vec![self.identity.node_id];
        ids.extend(self.group.lock().peers.iter().map(|p| p.node_id));
        ids.extend(self.backlogs.lock().keys().map(|(o, _)| *o));
        ids.extend(self.taken.lock().keys().map(|(o, _)| *o));
        ids.extend(self.gossip.lock().keys().copied());
        Ring::new(ids.into_iter().filter(|&id| id != 0))
    }

    /// Who takes `origin`'s `epoch` over, gone for `gone_for`: the chooser over the ring this
    /// node knows, alive members, and what their STATUS says they hold.
    pub(crate) fn taker(&self, origin: u64, epoch: u64, gone_for: Duration) -> Option<u64> {
        taker(
            &self.ring(),
            origin,
            |m| self.alive(m),
            |m| self.holds(m, origin, epoch),
            gone_for,
            self.settings.takeover_timeout,
        )
    }

    /// The origin's HELLO says its epochs up to `previous` ended with an unclean stop: they
    /// are gone now. Takes them over at once when the chooser names this node (so that the
    /// answer to that HELLO can be the manifest); otherwise the watch sees them gone.
    pub(crate) async fn epochs_ended(self: &Arc<Self>, origin: u64, previous: u64) {
        let ended: Vec<Arc<Backlog>> = self
            .backlogs
            .lock()
            .values()
            .filter(|b| b.origin == origin && b.epoch <= previous)
            .cloned()
            .collect();
        for b in ended {
            b.link.lock().ended.get_or_insert_with(Instant::now);
            if self.taker(origin, b.epoch, Duration::ZERO) == Some(self.identity.node_id) {
                self.take_over(
                    origin,
                    b.epoch,
                    "its previous epoch ended unclean",
                    Taking::Alone,
                )
                .await;
            }
        }
    }

    /// Takes the backlog of `(origin, epoch)` over (see the module comment): `true` once its
    /// messages are delivered here (the backlog is deleted once they are confirmed stored,
    /// [`Replication::confirmed`], at once or by [`Replication::confirm_takeover`]), `false`
    /// when that did not happen (gone already, being taken over here or — unless
    /// [`Taking::Beside`] — by another member, the origin came back when
    /// [`Taking::UnlessLive`], or it failed).
    pub(crate) async fn take_over(
        self: &Arc<Self>,
        origin: u64,
        epoch: u64,
        why: &str,
        taking: Taking,
    ) -> bool {
        let g = self.takeover_lock.lock().await;
        let Some(b) = self.backlogs.lock().get(&(origin, epoch)).cloned() else {
            return false;
        };
        if b.taking_over.load(Ordering::Acquire) {
            // Delivered already, its confirmation running ([`Replication::confirm_takeover`]).
            return false;
        }
        if taking == Taking::UnlessLive && b.link().live.is_some() {
            return false;
        }
        match self.other_taker(origin, epoch) {
            // Beside a taker whose copy may lack some of this one's (the watch's decision).
            Some(t) if taking == Taking::Beside && t.state == BacklogState::TakenOver => {}
            Some(t) => {
                // Another member took it over (or is doing so) meanwhile: the watch decides
                // once that member says it is done.
                tracing::info!(
                    "REPLICATION: not taking over {origin:016x} epoch {epoch}: {:016x} is ({:?})",
                    t.member,
                    t.state
                );
                return false;
            }
            None => {}
        }
        let Some(engine) = self.engine().cloned() else {
            tracing::error!("REPLICATION: cannot take over {origin:016x} epoch {epoch}: no engine");
            return false;
        };
        b.taking_over.store(true, Ordering::Release);
        self.status_change();
        // A session still writing to it stores nothing more.
        b.session.fetch_add(1, Ordering::AcqRel);
        // The copy taken ends here (TAKEN_OVER tells the origin how far it went, STATUS the
        // other holders, with whether it was complete).
        let (last_seq, complete) = {
            let s = b.store.lock();
            (s.last_seq(), !s.index().catching_up())
        };
        let began = std::time::Instant::now();
        tracing::info!("REPLICATION: taking over {origin:016x} epoch {epoch} ({why})");
        let path = manifest::manifest_path(&self.data_path, origin, epoch);
        let (bb, p) = (b.clone(), path.clone());
        let taken = Taken { last_seq, complete };
        let delivered = tokio::task::spawn_blocking(move || deliver(&engine, &bb, &p, taken)).await;
        let done = match delivered {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => {
                tracing::error!(
                    "REPLICATION: taking over {origin:016x} epoch {epoch} failed - {e}"
                );
                b.taking_over.store(false, Ordering::Release);
                self.status_change();
                return false;
            }
            Err(e) => {
                tracing::error!(
                    "REPLICATION: taking over {origin:016x} epoch {epoch} failed - {e}"
                );
                b.taking_over.store(false, Ordering::Release);
                self.status_change();
                return false;
            }
        };
        // The messages are in this node's queues: from now on a returning origin is answered
        // with the manifest (so that it drops them), also while the backlog is kept below.
        self.taken.lock().insert((origin, epoch), done.ids);
        self.taken_seq.lock().insert((origin, epoch), taken);
        drop(g);
        let summary = format!(
            "{} messages ({} puts) in {} topics, {} unreadable",
            done.messages, done.ids, done.topics, done.unreadable
        );
        let seq = done.receipt.replication_seq();
        match self.confirmed(&done.receipt, seq).await {
            Ok(()) => self.finish_takeover(&b, began, &summary).await,
            Err(e) => {
                tracing::warn!(
                    "REPLICATION: taken-over messages of {origin:016x} epoch {epoch} {e}; the backlog is kept, trying again"
                );
                let me = self.clone();
                tokio::spawn(async move {
                    me.confirm_takeover(b, done.receipt, began, summary, e)
                        .await
                });
            }
        }
        true
    }

    /// Whether the messages a takeover put (`receipt`, up to log seq `seq`) are stored as a
    /// publish's must be before its OK: synced in durable mode, and acknowledged by this
    /// node's own replica set (`--replication-ack-timeout`); `Err` says which is not.
    async fn confirmed(&self, receipt: &PutReceipt, seq: u64) -> Result<(), String> {
        receipt
            .clone()
            .durable()
            .await
            .map_err(|e| format!("not synced - {e}"))?;
        self.wait_replicated(seq)
            .await
            .map_err(|e| format!("not replicated - {e}"))
    }

    /// The end of a takeover whose first confirmation failed: the backlog is deleted only once
    /// the messages delivered here are confirmed stored ([`Replication::confirmed`]). Until
    /// then it stays `taking over` (STATUS says so, so the other holders keep their copies)
    /// and the confirmation is tried again every [`CONFIRM_RETRY`]; the manifest stays, so the
    /// origin's return drops what was delivered here. A stop ends the wait with the backlog
    /// and the manifest kept (the restarted node takes the epoch over again: duplicates, never
    /// loss).
    async fn confirm_takeover(
        self: Arc<Self>,
        b: Arc<Backlog>,
        receipt: PutReceipt,
        began: std::time::Instant,
        summary: String,
        mut last_error: String,
    ) {
        let (origin, epoch) = (b.origin, b.epoch);
        let seq = receipt.replication_seq();
        let mut stop = self.stopping();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(CONFIRM_RETRY) => {}
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
            }
            let r = tokio::select! {
                r = self.confirmed(&receipt, seq) => r,
                _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
            };
            match r {
                Ok(()) => break,
                Err(e) if e != last_error => {
                    tracing::warn!(
                        "REPLICATION: taken-over messages of {origin:016x} epoch {epoch} {e}; the backlog is kept, trying again"
                    );
                    last_error = e;
                }
                Err(_) => {}
            }
        }
        self.finish_takeover(&b, began, &summary).await;
    }

    /// A takeover is confirmed: the backlog is deleted.
    async fn finish_takeover(&self, b: &Arc<Backlog>, began: std::time::Instant, summary: &str) {
        let (origin, epoch) = (b.origin, b.epoch);
        {
            let _g = self.takeover_lock.lock().await;
            let mut m = self.backlogs.lock();
            if m.get(&(origin, epoch)).is_some_and(|x| Arc::ptr_eq(x, b)) {
                m.remove(&(origin, epoch));
            }
        }
        let dir = b.store.lock().dir().to_path_buf();
        let removed = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(&dir)).await;
        if let Ok(Err(e)) = removed {
            tracing::error!("REPLICATION: failed to delete the taken-over backlog - {e}");
        }
        self.takeovers.fetch_add(1, Ordering::Relaxed);
        self.status_change();
        tracing::info!(
            "REPLICATION: took over {origin:016x} epoch {epoch}: {summary}, in {:?}",
            began.elapsed()
        );
    }
}
