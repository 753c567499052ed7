//! The driver of the replication core (docs/replication.md, "The core"): one task owns this
//! node's [`Member`] (`nsq_core::replication`), the sans-I/O state machine that decides every
//! rule of the group — membership, acknowledgement, fencing, the answer to a HELLO, when an
//! origin is gone and who takes it over, handoff, return — and carries out its commands. The
//! link sessions (`origin.rs` dials, `replica.rs` serves) and the nsqlookupd loop only report
//! to it ([`Input`]) and run what it routes to them; it ticks the core every [`TICK`]. Time is
//! this node's monotonic clock ([`Replication::clock`]), the one PING stamps carry.
//!
//! What stays with the sessions is the data plane: the log's frames and the catch-up going
//! out (`origin.rs`), their append to the replica store and its ACK (`replica.rs`, the core's
//! rule — a copy acknowledges only once complete — applied per append without a round trip
//! through this task), PING and DROP on the origin's side and the manifest's application
//! (`returning.rs`). The core hears of each as a fact (`Stored`, `Logged`, `ManifestApplied`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use nsq_core::replication::{
    self as core, Command, Config, Event, HeldBacklog, Link, Member, Msg, Start,
};
use nsq_protocol::replication::{self as wire, Frame};
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::Replication;

/// The core is ticked this often (it asks for at least every 100 ms).
const TICK: Duration = Duration::from_millis(100);

/// What the sessions and tasks tell the driver.
pub(crate) enum Input {
    /// An event for the core as it is.
    Core(Event),
    /// A served link's origin proved its membership (`replica.rs`): its session `session`
    /// takes the commands for the In link from `origin`.
    InUp {
        origin: u64,
        addr: String,
        session: u64,
        tx: mpsc::UnboundedSender<SessionCmd>,
    },
    InDown {
        origin: u64,
        session: u64,
    },
    /// A dialled link's replica proved its membership (`origin.rs`).
    OutUp {
        peer: u64,
        addr: String,
        session: u64,
        tx: mpsc::UnboundedSender<SessionCmd>,
        bulk: mpsc::Sender<Bytes>,
    },
    OutDown {
        peer: u64,
        session: u64,
    },
    /// A frame of session `session` with `peer`, as the core reads it (dropped when that
    /// session is not the current one any more).
    Frame {
        peer: u64,
        link: Link,
        session: u64,
        msg: Msg,
    },
}

/// What the driver asks of one session.
#[derive(Debug)]
pub(crate) enum SessionCmd {
    /// Send this frame.
    Frame(Frame),
    /// Served link: welcome the origin into `epoch` (open its backlog, WELCOME with what the
    /// store holds).
    Welcome { epoch: u64 },
    /// Origin's link: the replica joined the replica set; stream the log to it from `from`
    /// (its copy is complete up to the seq before), or catch it up first (`None`).
    Stream { from: Option<u64> },
    /// Served link: TAKEN_OVER of `epoch` and its manifest.
    Manifest { epoch: u64, last_seq: u64 },
    /// End the session (a new one may follow).
    Close,
    /// ERROR `not in group` and close.
    Refuse,
}

/// Feeds the core's task. The channel exists from the start, so nothing sent before the task
/// runs (it waits for the replay of the replica backlogs) is lost.
pub(crate) struct Driver {
    tx: mpsc::UnboundedSender<Input>,
    rx: Mutex<Option<mpsc::UnboundedReceiver<Input>>>,
}

impl Driver {
    pub(crate) fn new() -> Driver {
        let (tx, rx) = mpsc::unbounded_channel();
        Driver {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Dropped inputs (the task ended at shutdown) do not matter.
    pub(crate) fn send(&self, i: Input) {
        let _ = self.tx.send(i);
    }
}

/// A session of the Out link to `peer` as the core knows it: up from [`CoreLink::up`] (the
/// replica proved its membership) until dropped (the session ended, however it ended).
pub(crate) struct CoreLink<'a> {
    repl: &'a Replication,
    peer: u64,
    session: u64,
}

impl<'a> CoreLink<'a> {
    /// `addr`: the replica's own `broadcast_address:tcp_port` (its CHALLENGE).
    pub(crate) fn up(
        repl: &'a Replication,
        peer: u64,
        addr: String,
        tx: mpsc::UnboundedSender<SessionCmd>,
        bulk: mpsc::Sender<Bytes>,
    ) -> CoreLink<'a> {
        let session = repl.next_session();
        repl.input(Input::OutUp {
            peer,
            addr,
            session,
            tx,
            bulk,
        });
        CoreLink {
            repl,
            peer,
            session,
        }
    }

    /// The log's last seq now (before the session's WELCOME: a resume point is within it).
    pub(crate) fn logged(&self, seq: u64) {
        self.repl.core_event(Event::Logged { seq });
    }

    /// A frame of this session, as the core reads it.
    pub(crate) fn received(&self, msg: Msg) {
        self.repl.input(Input::Frame {
            peer: self.peer,
            link: Link::Out,
            session: self.session,
            msg,
        });
    }
}

impl Drop for CoreLink<'_> {
    fn drop(&mut self) {
        self.repl.input(Input::OutDown {
            peer: self.peer,
            session: self.session,
        });
    }
}

/// A served link's session as the core knows it: up from [`InLink::up`], down when dropped.
pub(crate) struct InLink {
    repl: Arc<Replication>,
    pub(crate) origin: u64,
    pub(crate) session: u64,
}

impl InLink {
    pub(crate) fn up(
        repl: &Arc<Replication>,
        origin: u64,
        addr: String,
        tx: mpsc::UnboundedSender<SessionCmd>,
    ) -> InLink {
        let session = repl.next_session();
        repl.input(Input::InUp {
            origin,
            addr,
            session,
            tx,
        });
        InLink {
            repl: repl.clone(),
            origin,
            session,
        }
    }

    pub(crate) fn received(&self, msg: Msg) {
        self.repl.input(Input::Frame {
            peer: self.origin,
            link: Link::In,
            session: self.session,
            msg,
        });
    }
}

impl Drop for InLink {
    fn drop(&mut self) {
        self.repl.input(Input::InDown {
            origin: self.origin,
            session: self.session,
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
    /// Tells the core `ev`.
    pub(crate) fn core_event(&self, ev: Event) {
        self.input(Input::Core(ev));
    }

    pub(crate) fn input(&self, i: Input) {
        self.driver.send(i);
    }

    /// A new session number (sessions of one peer and link supersede each other).
    pub(crate) fn next_session(&self) -> u64 {
        self.sessions.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Starts the task that owns the core (with replication configured, whatever
    /// `--replicas`: a node with `--replicas=1` still holds and takes over its peers'
    /// backlogs). `lookup` and `client` poll nsqlookupd for the gone rule.
    pub(super) fn start_driver(
        self: &Arc<Self>,
        lookup: crate::lookup::Lookup,
        client: nsq_http::client::HttpClient,
    ) {
        let Some(rx) = self.driver.rx.lock().take() else {
            return;
        };
        let r = self.clone();
        let t = tokio::spawn(async move {
            // The backlogs held are part of what the core starts with.
            if r.replayed().await {
                run(r, rx, lookup, client).await;
            }
        });
        self.tasks.lock().push(t);
    }

    /// What this node persisted, as the core starts with it (after the replay).
    fn core_start(&self) -> Start {
        let held = self
            .backlogs
            .lock()
            .values()
            .map(|b| {
                let s = b.store.lock();
                HeldBacklog {
                    origin: b.origin,
                    epoch: b.epoch,
                    last_seq: s.last_seq(),
                    complete: !s.index().catching_up(),
                    addr: b.address.lock().as_ref().map(|(h, p)| format!("{h}:{p}")),
                }
            })
            .collect();
        let seqs = self.taken_seq.lock().clone();
        let manifests = self
            .taken
            .lock()
            .keys()
            .map(|&(o, e)| (o, e, seqs.get(&(o, e)).map_or(0, |t| t.last_seq)))
            .collect();
        Start {
            now: self.clock(),
            epoch: self.epoch(),
            start_seq: self.log.last_seq(),
            previous_unclean: self
                .identity
                .previous_unclean
                .filter(|&e| e > self.taken_epoch()),
            held,
            manifests,
            applied: self.applied_manifests(),
        }
    }

    /// What the nsqlookupd loop reports to the core: each answered PING is a proof that this
    /// node is heard (fencing), sent several times per fencing interval.
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

use super::commands::{Exec, Sessions};

async fn run(
    repl: Arc<Replication>,
    mut rx: mpsc::UnboundedReceiver<Input>,
    lookup: crate::lookup::Lookup,
    client: nsq_http::client::HttpClient,
) {
    let s = &repl.settings;
    let mut cfg = Config::new(
        repl.identity.node_id,
        s.replicas,
        s.peers.clone(),
        s.takeover_timeout,
    );
    cfg.ack_timeout = s.ack_timeout;
    // As in the simulation: an origin leaves an epoch a live member claims at once (its
    // sessions start again in the next, fenced until the manifest is applied), since the
    // taker never welcomes it back into the epoch it takes over.
    cfg.leave_claimed_epoch = true;
    // Membership is proven by the handshake (`membership.rs`) before a link is reported up;
    // members report their own `broadcast_address:tcp_port`, not the peer list's spelling.
    cfg.check_addresses = false;
    cfg.status_every = repl.ping_every();
    cfg.lookupds = lookup.lookupds().len();
    let mut member = Member::new(cfg, repl.core_start());
    let mut sessions = Sessions::default();
    let mut stop = repl.stopping();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let exec = Exec {
        repl: repl.clone(),
        lookup,
        client,
    };
    let mut lookupds = exec.lookup.lookupds().len();
    // Applied manifests are retired now and then (`takeover.rs`).
    let mut retired_at = std::time::Instant::now();
    loop {
        let input = tokio::select! {
            i = rx.recv() => match i {
                Some(i) => i,
                None => return,
            },
            _ = tick.tick() => Input::Core(Event::Tick),
            _ = async { stop.wait_for(|s| *s).await.is_ok() } => return,
        };
        let tick = matches!(input, Input::Core(Event::Tick));
        let mut events = sessions.events(input);
        // The lookupd list is looked at once per tick (not per publish's event).
        if tick && retired_at.elapsed() >= Duration::from_secs(60) {
            retired_at = std::time::Instant::now();
            let r = repl.clone();
            tokio::task::spawn_blocking(move || r.retire_applied());
        }
        if tick {
            let now_lookupds = exec.lookup.lookupds().len();
            if now_lookupds != lookupds {
                lookupds = now_lookupds;
                events.insert(0, Event::LookupdsChanged { count: lookupds });
            }
        }
        for ev in events {
            // Acknowledgements and failures are published once per event (one wake-up of the
            // waiting publishes, however many seqs it settles).
            let (mut acked, mut failed) = (0, 0);
            // The replica set as the views and the outbox see it follows the core's.
            let regroup = !matches!(ev, Event::Published { .. } | Event::Logged { .. });
            tracing::trace!("REPLICATION: core <- {ev:?}");
            for c in member.handle(repl.clock(), ev) {
                tracing::trace!("REPLICATION: core -> {c:?}");
                match c {
                    Command::AckPublish { seq } => acked = acked.max(seq),
                    Command::FailPublish { seq } => failed = failed.max(seq),
                    c => exec.run(&mut sessions, c),
                }
            }
            raise(&repl.committed, acked);
            raise(&repl.failed, failed);
            if regroup {
                repl.sync_group(member.group());
            }
        }
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
