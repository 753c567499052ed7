//! The replication core (docs/replication.md, "The core"): every decision of a replication
//! group member — membership, acknowledgement, fencing, takeover, handoff and return — as a
//! synchronous state machine with no lock, no task, no clock of its own and no randomness.
//!
//! A [`Member`] is one node's view of its group. The driver feeds it [`Event`]s, each with
//! the time (a `Duration` since an arbitrary start of this node's monotonic clock), and
//! carries out the [`Command`]s it returns: frames to send, publishes to acknowledge or
//! fail, delivery to fence or unfence, takeovers to run, backlogs to drop or hand off,
//! manifests to apply. The data plane stays in the driver: the log's PUB/FIN/… frames, the
//! catch-up's STATE items, the replica store and the manifest's IDs; the core sees their
//! effect as facts (`Published`, `Stored`, `TakeoverDone`, …).
//!
//! The deterministic simulation (`crates/nsq-core/tests/sim/`) runs a whole group of these
//! with an abstract model of the messages, the network and nsqlookupd, under faults.
//!
//! NSQ has no replication; where a rule leans on NSQ's own behaviour (nsqlookupd's
//! `last_update`, nsqd's lookup PINGs), the module that uses it cites the Go source.

mod chooser;
mod holder;
mod member;

pub mod gone;
pub mod group;
pub mod ring;

#[cfg(test)]
mod tests;

use std::time::Duration;

pub use gone::GoneWatch;
pub use group::{Group, Join};
pub use member::Member;
pub use ring::Ring;

/// Which of the two links between two members: on [`Link::Out`] this node is the origin (it
/// dialled, its log goes out), on [`Link::In`] the peer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Link {
    Out,
    In,
}

/// A backlog's state in STATUS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BacklogState {
    /// A session of its origin, of this epoch, is live.
    Replicating,
    /// No session is; the origin is not (yet) gone for the sender.
    Detached,
    /// The origin is gone for the sender, which takes it over if it is the first candidate.
    Gone,
    TakingOver,
    /// Taken over (the manifest kept, or recently applied by the origin).
    TakenOver,
}

/// One backlog in a STATUS frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusEntry {
    pub origin: u64,
    pub epoch: u64,
    pub state: BacklogState,
    pub last_seq: u64,
    /// Its catch-up ended: it holds every message of the epoch unsettled at `last_seq`.
    pub complete: bool,
    /// While `Replicating`: the stamp of the newest PING the sender received from the origin
    /// (the origin's clock) — the origin's proof that a member heard it then.
    pub echo: Duration,
}

/// The meaning of a link frame, as the core sends and receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    // origin → replica (the origin's Out link)
    /// `previous_unclean`: the origin's epochs up to this one ended with an unclean stop.
    Hello {
        epoch: u64,
        previous_unclean: Option<u64>,
        stamp: Duration,
    },
    /// A heartbeat carrying the origin's clock; answered with [`Msg::Pong`].
    Ping {
        stamp: Duration,
    },
    ManifestApplied {
        epoch: u64,
    },
    /// The receiver is outside the origin's replica set for `epoch`, which is settled
    /// without it: it deletes what it holds of `epoch` and keeps the session (PING,
    /// STATUS). The driver's session deletes the stored copy as it reads the frame, in
    /// order with the log frames around it (a catch-up may follow on the same session when
    /// the receiver joins the set later); the core forgets the backlog.
    Standby {
        epoch: u64,
    },
    /// Epochs up to `epoch` were taken over by `taker` (whose manifest the origin applied):
    /// a copy of them goes to `taker` as a handoff, never to a second takeover.
    Drop {
        epoch: u64,
        taker: u64,
    },
    // replica → origin (the replica's In link)
    /// `resume`: the replica holds a complete copy up to this seq.
    Welcome {
        epoch: u64,
        resume: Option<u64>,
        echo: Duration,
    },
    Pong {
        stamp: Duration,
    },
    Ack {
        seq: u64,
    },
    /// Epoch `epoch` was taken over by the sender, from its copy up to `last_seq`; its
    /// manifest follows (driver).
    TakenOver {
        epoch: u64,
        last_seq: u64,
    },
    /// The taker stored (and replicated) the sender's handoff of `(origin, epoch)`.
    HandoffDone {
        origin: u64,
        epoch: u64,
    },
    // either direction
    Status(Vec<StatusEntry>),
}

/// What the driver tells the core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Time passes (the driver ticks at least every 100 ms).
    Tick,
    /// A session with `peer` (its node ID proven by the handshake), at `addr`, is up.
    LinkUp {
        peer: u64,
        addr: String,
        link: Link,
    },
    /// That session ended (closed, or no frame for the link timeout).
    LinkDown {
        peer: u64,
        link: Link,
    },
    Received {
        from: u64,
        link: Link,
        msg: Msg,
    },
    /// The handshake found a new node ID at the address of `old` (a wiped disk, a replaced
    /// host): `old`'s identity ended uncleanly. (`LinkUp` detects it too.)
    IdentityEnded {
        old: u64,
    },
    /// The nsqlookupds configured changed (`PUT /config/nsqlookupd_tcp_addresses`): there
    /// are `count` now. Every backlog's gone rule starts again with them (fail closed: a
    /// lookupd's earlier answers say nothing of the new list's).
    LookupdsChanged {
        count: usize,
    },
    /// nsqlookupd `lookupd` answered this node's PING sent at `sent_at`.
    LookupdPong {
        lookupd: usize,
        sent_at: Duration,
    },
    /// nsqlookupd `lookupd` answered a poll: its clock, and the producers it lists (address,
    /// `last_update` on its clock).
    LookupdAnswer {
        lookupd: usize,
        clock: Duration,
        producers: Vec<(String, Duration)>,
    },
    /// This node leaves on purpose (a drain): its log ends at `seq` (no more publishes). The
    /// core fences its delivery for good and, once its replica set acknowledged `seq`, moves
    /// to the next epoch: the new sessions' HELLO ends the old epoch for its holders, which
    /// take it over at once (no takeover timeout), and their manifest takes the messages
    /// off this node (Return) — a planned takeover.
    Leave {
        seq: u64,
    },
    /// A publish of this node was logged at `seq` and waits for N−1 acknowledgements.
    Published {
        seq: u64,
    },
    /// Another frame of this node's log (settlement, administration) at `seq`.
    Logged {
        seq: u64,
    },
    /// The replica store of `(origin, epoch)` holds the log up to `last_seq`; `complete`: its
    /// catch-up ended.
    Stored {
        origin: u64,
        epoch: u64,
        last_seq: u64,
        complete: bool,
    },
    /// A takeover ended: the manifest written, the messages put and replicated (`ok`), or not.
    TakeoverEnded {
        origin: u64,
        epoch: u64,
        ok: bool,
    },
    /// A holder's handoff of `(origin, epoch)` arrived whole.
    HandoffReceived {
        from: u64,
        origin: u64,
        epoch: u64,
    },
    /// The adopted handoff is stored and replicated.
    HandoffStored {
        from: u64,
        origin: u64,
        epoch: u64,
    },
    /// The manifest of `epoch` from `taker` is applied to this node's engine.
    ManifestApplied {
        taker: u64,
        epoch: u64,
    },
}

/// What the core asks the driver to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Send {
        to: u64,
        link: Link,
        msg: Msg,
    },
    /// ERROR `not in group` and close; nothing of it is stored.
    Refuse {
        peer: u64,
        link: Link,
    },
    /// End this session (it reconnects).
    Close {
        peer: u64,
        link: Link,
    },
    /// Origin: stream a catch-up on the Out link to `peer`, then the live log.
    StartCatchup {
        peer: u64,
    },
    /// Origin: stream the log from `from` on.
    Resume {
        peer: u64,
        from: u64,
    },
    AckPublish {
        seq: u64,
    },
    FailPublish {
        seq: u64,
    },
    /// Stop (resume) delivering this node's replicated messages.
    Fence,
    Unfence,
    /// Poll every nsqlookupd (answers come back as `LookupdAnswer`).
    PollLookupds,
    StartTakeover {
        origin: u64,
        epoch: u64,
    },
    /// Send this node's copy of `(origin, epoch)` to `to` (HANDOFF items, HANDOFF_END).
    SendHandoff {
        to: u64,
        origin: u64,
        epoch: u64,
    },
    /// Adopt the handoff `from` sent (put its messages here, as a takeover does).
    AdoptHandoff {
        from: u64,
        origin: u64,
        epoch: u64,
    },
    DropBacklog {
        origin: u64,
        epoch: u64,
    },
    /// Send the manifest of `(origin, epoch)` on the In link from `origin` (after TAKEN_OVER).
    SendManifest {
        origin: u64,
        epoch: u64,
    },
    /// Apply the manifest `taker` sent for this node's `epoch`: a listed message leaves
    /// this node only if it took it (published, adopted) in an earlier epoch or in `epoch`
    /// at or before `last_seq` — one that came back later (adopted again) stays.
    ApplyManifest {
        taker: u64,
        epoch: u64,
        last_seq: u64,
    },
    DeleteManifest {
        origin: u64,
        epoch: u64,
    },
    /// This node's epoch is now `epoch` (persist it before any session uses it).
    NewEpoch {
        epoch: u64,
    },
    /// A planned leave is done: the manifest of the epoch it handed over, from a copy that
    /// held its whole log, is applied. Everything this node still holds was in that copy and
    /// is delivered by the taker: the driver empties its queues (the drain then exits).
    Left,
}

/// The core's settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub me: u64,
    /// `--replicas` (N).
    pub replicas: usize,
    /// The members' addresses (`--replication-peer`); a link from any other address is
    /// refused.
    pub members: Vec<String>,
    /// `--replication-takeover-timeout` (T).
    pub takeover_timeout: Duration,
    /// Silence after which an origin fences its delivery; must be well under T (default T/2).
    pub fence_after: Duration,
    pub ack_timeout: Duration,
    /// How many nsqlookupds are configured.
    pub lookupds: usize,
    /// STATUS, PING and lookupd polls go out this often.
    pub status_every: Duration,
    /// A holder resends a handoff not confirmed within this.
    pub handoff_retry: Duration,
    /// A taken-over epoch is still announced this long after its manifest was applied.
    pub retired_for: Duration,
    /// The origin leaves an epoch a live member claims (`taking over`, `taken over`) at once
    /// (`NewEpoch`), so that its sessions are welcomed again while the takeover runs (this
    /// core's holders never welcome an origin back into an epoch they take over). Off for a
    /// driver whose own holders answer a HELLO of a claimed epoch with TAKEN_OVER once the
    /// takeover put its messages (nsqd until its holder side is this core's): the origin then
    /// stays in the epoch, fenced, until the manifest moves it on.
    pub leave_claimed_epoch: bool,
    /// A link is refused unless its address is one of `members`. Off for a driver that
    /// proves membership itself before it reports a link up (nsqd: a shared secret, or the
    /// peer list by IP), whose members' addresses need not be listed.
    pub check_addresses: bool,
}

impl Config {
    /// The defaults for member `me` with `replicas` and takeover timeout `t`.
    pub fn new(me: u64, replicas: usize, members: Vec<String>, t: Duration) -> Config {
        Config {
            me,
            replicas,
            members,
            takeover_timeout: t,
            fence_after: t / 2,
            ack_timeout: Duration::from_secs(10),
            lookupds: 0,
            status_every: Duration::from_secs(1),
            handoff_retry: t,
            retired_for: Duration::from_secs(600),
            leave_claimed_epoch: true,
            check_addresses: true,
        }
    }
}

/// A backlog this node holds at startup (from its replica store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBacklog {
    pub origin: u64,
    pub epoch: u64,
    pub last_seq: u64,
    pub complete: bool,
    /// The origin's address, as its HELLO gave it (`origin.json`).
    pub addr: Option<String>,
}

/// What a member starts with: what its node persisted.
#[derive(Debug, Clone, Default)]
pub struct Start {
    /// This node's clock now.
    pub now: Duration,
    pub epoch: u64,
    pub start_seq: u64,
    /// Its epochs up to this one ended with an unclean stop (said in every HELLO until a
    /// manifest of it is applied).
    pub previous_unclean: Option<u64>,
    /// The backlogs in its replica store.
    pub held: Vec<HeldBacklog>,
    /// The manifests it keeps as a taker: (origin, epoch, last_seq of the copy taken).
    pub manifests: Vec<(u64, u64, u64)>,
    /// The manifests it applied as an origin: (its epoch, the taker).
    pub applied: Vec<(u64, u64)>,
}
