//! The driver of the replication core (docs/replication.md, "The core"): one task owns this
//! node's [`Member`] (`nsq_core::replication`), the sans-I/O state machine that decides, and
//! carries out its commands; the link tasks feed it events over a channel, and it ticks every
//! [`TICK`]. Time is this node's monotonic clock ([`Replication::clock`]), the one PING
//! stamps carry.
//!
//! As wired so far the core decides the origin's side: **fencing** and the **publish
//! acknowledgement**; its `NewEpoch` is persisted as Return persists an epoch (its move out
//! of a claimed epoch is off here, see [`Replication::start_driver`]). Its link sessions (`origin.rs`) report the sessions (up once the
//! replica proved its membership, down when they end), the WELCOME (with the log's position
//! before it, whether the session resumes, and as its echo the local time HELLO was sent:
//! the answer proves the replica heard it after that), each ACK, PONG, STATUS and
//! TAKEN_OVER; the return (`returning.rs`) each manifest applied; a publish that has to wait
//! its seq ([`Replication::wait_replicated`]: one event, no round trip). The core answers
//! `Fence`/`Unfence`, carried out by the engine's delivery fence
//! ([`nsq_core::Engine::fence_delivery`]), and `AckPublish`/`FailPublish`, published to the
//! waiting publishes as the highest seq acknowledged and the highest failed. The holder's
//! decisions (takeover, handoff, the answer to HELLO) are still made by the rest of this
//! module; the core's commands for them are not carried out here, and the PINGs are sent by
//! the sessions' writers at the core's pace ([`Replication::ping_every`]) with the same
//! clock.

use std::sync::Arc;
use std::time::Duration;

use nsq_core::replication::{self as core, Command, Config, Event, Link, Member, Msg, Start};
use nsq_protocol::replication as wire;
use tokio::sync::mpsc;

use super::Replication;

/// The core is ticked this often (it asks for at least every 100 ms).
const TICK: Duration = Duration::from_millis(100);

/// Feeds the core's task; dropped events (the task ended at shutdown) do not matter.
pub(crate) struct Driver {
    tx: mpsc::UnboundedSender<Event>,
}

impl Driver {
    pub(crate) fn send(&self, ev: Event) {
        let _ = self.tx.send(ev);
    }
}

/// A session of the Out link to `peer` as the core knows it: up from [`CoreLink::up`] (the
/// replica proved its membership) until dropped (the session ended, however it ended).
pub(crate) struct CoreLink<'a> {
    repl: &'a Replication,
    peer: u64,
}

impl<'a> CoreLink<'a> {
    pub(crate) fn up(repl: &'a Replication, peer: u64, addr: &str) -> CoreLink<'a> {
        repl.core_event(Event::LinkUp {
            peer,
            addr: addr.to_string(),
            link: Link::Out,
        });
        CoreLink { repl, peer }
    }

    /// The log's last seq now (before the session's WELCOME: a resume point is within it).
    pub(crate) fn logged(&self, seq: u64) {
        self.repl.core_event(Event::Logged { seq });
    }

    /// A frame of this session, as the core reads it.
    pub(crate) fn received(&self, msg: Msg) {
        self.repl.core_event(Event::Received {
            from: self.peer,
            link: Link::Out,
            msg,
        });
    }
}

impl Drop for CoreLink<'_> {
    fn drop(&mut self) {
        self.repl.core_event(Event::LinkDown {
            peer: self.peer,
            link: Link::Out,
        });
    }
}

/// A STATUS entry as the core reads it.
pub(crate) fn status_entry(e: &wire::StatusEntry) -> core::StatusEntry {
    core::StatusEntry {
        origin: e.origin,
        epoch: e.epoch,
        state: match e.state {
            wire::BacklogState::Replicating => core::BacklogState::Replicating,
            wire::BacklogState::Detached => core::BacklogState::Detached,
            wire::BacklogState::Gone => core::BacklogState::Gone,
            wire::BacklogState::TakingOver => core::BacklogState::TakingOver,
            wire::BacklogState::TakenOver => core::BacklogState::TakenOver,
        },
        last_seq: e.last_seq,
        complete: e.complete,
        echo: Duration::from_nanos(e.echo),
    }
}

impl Replication {
    /// Starts the task that owns the core (`--replicas` ≥ 2: the origin's side is what it
    /// decides so far).
    pub(super) fn start_driver(self: &Arc<Self>) {
        let s = &self.settings;
        let mut cfg = Config::new(
            self.identity.node_id,
            s.replicas,
            s.peers.clone(),
            s.takeover_timeout,
        );
        cfg.ack_timeout = s.ack_timeout;
        // nsqd's holders (replica.rs, takeover.rs) answer a HELLO of an epoch they take over
        // with TAKEN_OVER once the takeover put its messages, and a takeover that fails
        // leaves the epoch to its origin's next session: the origin stays in a claimed epoch
        // (fenced) until the manifest moves it on.
        cfg.leave_claimed_epoch = false;
        cfg.status_every = self.ping_every();
        let start = Start {
            now: self.clock(),
            epoch: self.epoch(),
            start_seq: self.log.last_seq(),
            previous_unclean: self.identity.previous_unclean,
            ..Start::default()
        };
        let member = Member::new(cfg, start);
        let (tx, rx) = mpsc::unbounded_channel();
        if self.driver.set(Driver { tx }).is_err() {
            return;
        }
        let t = tokio::spawn(run(self.clone(), member, rx));
        self.tasks.lock().push(t);
    }

    /// Tells the core `ev` (nothing without a driver: `--replicas=1`).
    pub(crate) fn core_event(&self, ev: Event) {
        if let Some(d) = self.driver.get() {
            d.send(ev);
        }
    }

    /// What the nsqlookupd loop reports to the core: each answered PING is a proof that this
    /// node is heard (fencing), sent several times per fencing interval. Also with
    /// `--replicas=1` (no core to tell): the takeover watch reads each lookupd's clock from
    /// the newest `last_update` it lists, which this node's own PINGs keep fresh.
    pub fn lookup_proof(self: &Arc<Self>) -> Option<crate::lookup::LookupProof> {
        let me = Arc::downgrade(self);
        Some(crate::lookup::LookupProof {
            every: (self.settings.takeover_timeout / 8)
                .clamp(Duration::from_millis(250), Duration::from_secs(15)),
            heard: Box::new(move |lookupd, sent| {
                if let Some(r) = me.upgrade() {
                    let sent_at = sent.saturating_duration_since(r.clock_base);
                    r.core_event(Event::LookupdPong { lookupd, sent_at });
                }
            }),
        })
    }

    /// Whether the core fenced this node's delivery of replicated messages.
    pub fn fenced(&self) -> bool {
        self.engine().is_some_and(|e| e.returning().is_fenced())
    }
}

async fn run(repl: Arc<Replication>, mut member: Member, mut rx: mpsc::UnboundedReceiver<Event>) {
    let mut stop = repl.stopping();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            ev = rx.recv() => match ev {
                Some(ev) => ev,
                None => return,
            },
            _ = tick.tick() => Event::Tick,
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
        };
        if let Event::Received {
            msg: Msg::Welcome { epoch, .. },
            from,
            ..
        } = &ev
        {
            if *epoch != member.epoch() {
                tracing::warn!(
                    "REPLICATION: core: WELCOME from {from:016x} for epoch {epoch}, the core is at epoch {}",
                    member.epoch()
                );
            }
        }
        // Acknowledgements and failures are published once per event (one wake-up of the
        // waiting publishes, however many seqs it settles).
        let (mut acked, mut failed) = (0, 0);
        for c in member.handle(repl.clock(), ev) {
            match c {
                Command::AckPublish { seq } => acked = acked.max(seq),
                Command::FailPublish { seq } => failed = failed.max(seq),
                c => execute(&repl, c),
            }
        }
        raise(&repl.committed, acked);
        raise(&repl.failed, failed);
    }
}

/// Moves a watched seq up to `seq` (never down), waking its waiters only then.
fn raise(w: &tokio::sync::watch::Sender<u64>, seq: u64) {
    w.send_if_modified(|v| {
        let up = seq > *v;
        if up {
            *v = seq;
        }
        up
    });
}

/// Carries out one command of the core (see the module docs for what is wired).
fn execute(repl: &Arc<Replication>, c: Command) {
    match c {
        Command::NewEpoch { epoch } => {
            // The core moved on to `epoch`: persisted as Return persists it, and every session
            // starts again in it. After a manifest applied by Return (the only move while
            // `leave_claimed_epoch` is off) the epoch is there already: nothing to do.
            let r = repl.clone();
            tokio::task::spawn_blocking(move || match r.advance_epoch(epoch - 1) {
                Ok(true) => tracing::warn!(
                    "REPLICATION: epoch {} claimed by a member: now epoch {epoch}, every link starts again",
                    epoch - 1
                ),
                Ok(false) => {}
                Err(e) => tracing::error!(
                    "REPLICATION: failed to move to epoch {epoch} - {e}"
                ),
            });
        }
        Command::Fence => {
            if let Some(e) = repl.engine() {
                e.fence_delivery();
            }
            tracing::warn!(
                "REPLICATION: delivery of replicated messages fenced: no member heard this node within {:?}, or one claims its epoch {}",
                repl.settings.takeover_timeout / 2,
                repl.epoch()
            );
        }
        Command::Unfence => {
            if let Some(e) = repl.engine() {
                e.unfence_delivery();
            }
            tracing::info!("REPLICATION: delivery of replicated messages unfenced");
        }
        // Still decided and carried out by the rest of this module (see the module docs); a
        // new epoch ends the Out sessions the core closes (`origin.rs` watches the epoch).
        Command::Send { .. }
        | Command::Refuse { .. }
        | Command::Close { .. }
        | Command::StartCatchup { .. }
        | Command::Resume { .. }
        // Published by `run` (above).
        | Command::AckPublish { .. }
        | Command::FailPublish { .. }
        | Command::PollLookupds
        | Command::StartTakeover { .. }
        | Command::SendHandoff { .. }
        | Command::AdoptHandoff { .. }
        | Command::DropBacklog { .. }
        | Command::SendManifest { .. }
        | Command::ApplyManifest { .. }
        | Command::DeleteManifest { .. } => {}
    }
}
