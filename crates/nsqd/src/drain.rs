//! Drain mode (the RFC of nsqio/nsq #1302, also #1254): for a node that is going away
//! (autoscaling, Kubernetes, Fargate), stop taking work but finish what is queued.
//!
//! A draining nsqd
//! * refuses new messages: TCP `PUB`/`MPUB`/`DPUB` fail with `E_PUB_FAILED`/`E_MPUB_FAILED`/
//!   `E_DPUB_FAILED` `... failed nsqd is draining: publish to another nsqd`, HTTP `/pub` and
//!   `/mpub` (`/pub?defer=` included) answer `503 {"message":"DRAINING"}`;
//! * refuses to create topics and channels: `SUB` to a topic or channel that does not exist
//!   fails with `E_SUB_FAILED SUB failed nsqd is draining: no new topics or channels`,
//!   `/topic/create` and `/channel/create` answer `503 {"message":"DRAINING"}`;
//! * unregisters every topic and channel from nsqlookupd and then disconnects from it, so
//!   lookupd stops listing the node and discovery moves on (`PUT
//!   /config/nsqlookupd_tcp_addresses` is refused with the 503 from then on);
//! * keeps delivering to its consumers (SUB to existing channels, RDY, FIN, REQ, TOUCH work as
//!   before) until every topic and channel is empty with nothing in flight or deferred, then
//!   shuts down cleanly (exit status 0).
//!
//! It starts with SIGTERM under `--sigterm=drain` (the default, `--sigterm=shutdown`, keeps
//! SIGTERM a clean shutdown), or with `PUT /config/drain`; `GET /config/drain` tells whether
//! the node is draining, and so do `/info` and `/stats` (`"draining"`, the last key).
//! `PUT /config/shutdown` shuts down cleanly at once. During a drain a second SIGTERM, or a
//! SIGINT, shuts down cleanly at once: what is left is persisted to disk, as in any clean
//! shutdown, and served after a restart.
//!
//! A drain waits as long as it takes: a channel without consumers, a paused topic or channel,
//! or a topic with messages and no channel keeps it waiting (the log names what is left every
//! few seconds) until consumers come, it is unpaused, emptied or deleted, or a second signal
//! arrives.
//!
//! Where the pieces are: this module holds the drain state ([`Drain`], in `Nsqd::drain`),
//! what a draining node refuses over TCP (`check_tcp`) and what it still waits for
//! (`remaining`); `--sigterm` is `options.rs` ([`crate::options::SigtermMode`]), the HTTP
//! endpoints are `http/drain.rs`, and the daemon's run loop that reacts to signals and ends a
//! finished drain is `server.rs` (`run_until_exit`). None of them needs the others' internals.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use nsq_core::Engine;
use nsq_protocol::command::Command;
use nsq_protocol::error::{ErrorCode, NsqError};
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

use crate::lookup::Lookup;

/// Why a publish is refused (after the reference's `PUB failed ` prefix).
const REFUSED_PUB: &str = "nsqd is draining: publish to another nsqd";
/// Why a SUB that would create a topic or channel is refused.
const REFUSED_SUB: &str = "SUB failed nsqd is draining: no new topics or channels";

/// The daemon's drain state: set once, never cleared (a drain ends with the process).
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    shutdown: AtomicBool,
    /// Wakes the run loop (`server.rs`): a drain started, or a shutdown was requested over
    /// HTTP.
    wake: Notify,
}

impl Drain {
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Starts draining; `false` if the node was draining already. Every topic and channel is
    /// unregistered from nsqlookupd, which is then disconnected.
    pub fn start(&self, engine: &Engine, lookup: &Lookup) -> bool {
        if self.draining.swap(true, Ordering::SeqCst) {
            return false;
        }
        tracing::info!(
            "DRAIN: draining started: refusing new messages, topics and channels; delivering what is queued, then exiting"
        );
        // Channels first, then their topic (the reference's REGISTER order reversed), then
        // drop the connections: lookupd forgets a producer whose connection closes, and a
        // reconnect would re-register everything.
        for t in engine.topics() {
            for c in t.channels() {
                lookup.unregister(t.name(), Some(c.name()));
            }
            lookup.unregister(t.name(), None);
        }
        lookup.set_addresses(Vec::new());
        self.wake.notify_one();
        true
    }

    /// `PUT /config/shutdown`: the run loop shuts the daemon down cleanly.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub(crate) fn shutdown_requested(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Resolves when a drain starts or a shutdown is requested.
    pub(crate) fn notified(&self) -> Notified<'_> {
        self.wake.notified()
    }
}

/// The TCP commands a draining node refuses (called only while draining).
pub(crate) fn check_tcp(engine: &Engine, cmd: &Command) -> Result<(), NsqError> {
    match cmd {
        Command::Pub { .. } => Err(NsqError::pub_failed(REFUSED_PUB)),
        Command::Mpub { .. } => Err(NsqError::mpub_failed(REFUSED_PUB)),
        Command::Dpub { .. } => Err(NsqError::dpub_failed(REFUSED_PUB)),
        Command::Sub { topic, channel } => {
            let exists = engine
                .get_topic(topic)
                .is_some_and(|t| t.get_channel(channel).is_some());
            if exists {
                Ok(())
            } else {
                Err(NsqError::new(ErrorCode::SubFailed, REFUSED_SUB))
            }
        }
        _ => Ok(()),
    }
}

/// What a drain still waits for.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Remaining {
    queued: i64,
    in_flight: usize,
    deferred: usize,
    /// `topic` or `topic:channel` of everything not yet empty.
    places: Vec<String>,
}

impl Remaining {
    /// Messages delivered and not yet finished.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queued == 0 && self.in_flight == 0 && self.deferred == 0
    }
}

/// `3 queued, 1 in flight, 0 deferred messages in t, t:c` (the drain's progress log).
impl fmt::Display for Remaining {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} queued, {} in flight, {} deferred messages in {}",
            self.queued,
            self.in_flight,
            self.deferred,
            self.places.join(", ")
        )
    }
}

/// What is left in every topic and channel.
pub(crate) fn remaining(engine: &Engine) -> Remaining {
    let mut r = Remaining::default();
    for t in engine.topics() {
        let ts = t.stats();
        if ts.depth != 0 {
            r.queued += ts.depth;
            r.places.push(ts.name.clone());
        }
        for c in &ts.channels {
            let cs = c.stats();
            if cs.depth != 0 || cs.in_flight_count != 0 || cs.deferred_count != 0 {
                r.queued += cs.depth;
                r.in_flight += cs.in_flight_count;
                r.deferred += cs.deferred_count;
                r.places.push(format!("{}:{}", ts.name, cs.name));
            }
        }
    }
    r
}
