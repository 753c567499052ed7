//! A planned leave (docs/replication.md, "Leaving on purpose"): a draining nsqd whose
//! publishes are replicated hands its unsettled messages to its replica set at once instead
//! of waiting for its consumers to finish them. Delivery stops (the consumers FIN what they
//! hold for up to [`SETTLE`]); then the core ([`Event::Leave`]) waits until the replica set
//! holds the whole log, and moves this node to its next epoch: the holder first in ring
//! order takes the old epoch over at once — it does not wait for the takeover timeout, the
//! HELLO of the new epoch says the old one ended — and answers this node's next session with
//! TAKEN_OVER and its manifest. Once a manifest of that epoch from a copy holding the whole
//! log is applied ([`Command::Left`](nsq_core::replication::Command::Left)), everything this
//! node still holds is the taker's to deliver: its queues are emptied, the drain finds them
//! empty and the node exits (`server.rs`, `run_until_exit`). Without a replica set that
//! holds the log (no member linked, or acknowledging) the node stays fenced and the drain
//! waits; a second SIGTERM stops it, keeping its messages for its restart.

use std::sync::Arc;
use std::time::Duration;

use nsq_core::replication::Event;

use super::Replication;

/// How long the consumers get to finish what they hold before the log's end is taken: what
/// is still in flight then is delivered again by the taker (at-least-once).
const SETTLE: Duration = Duration::from_secs(1);

impl Replication {
    /// Starts a planned leave (the drain began); nothing with `--replicas=1`.
    pub fn leave(self: &Arc<Self>) {
        if !self.replicates_own() {
            return;
        }
        let Some(engine) = self.engine().cloned() else {
            return;
        };
        let r = self.clone();
        tokio::spawn(async move {
            engine.fence_delivery();
            let began = tokio::time::Instant::now();
            while began.elapsed() < SETTLE && crate::drain::remaining(&engine).in_flight() > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let seq = r.log.last_seq();
            tracing::info!(
                "REPLICATION: leaving: this node's messages go to its replica set once it holds seq {seq} (in flight: {})",
                crate::drain::remaining(&engine).in_flight()
            );
            r.core_event(Event::Leave { seq });
        });
    }

    /// The leave is done: every queue is emptied (the taker delivers it all). Blocking.
    pub(super) fn left(&self) {
        let Some(engine) = self.engine() else { return };
        let mut n = 0;
        for t in engine.topics() {
            for c in t.channels() {
                n += c.depth().max(0);
                if let Err(e) = c.empty() {
                    tracing::error!("REPLICATION: leaving: cannot empty {} - {e}", c.name());
                }
            }
            n += t.depth().max(0);
            if let Err(e) = t.empty() {
                tracing::error!("REPLICATION: leaving: cannot empty {} - {e}", t.name());
            }
        }
        tracing::info!("REPLICATION: left: the replica set took this node's messages over ({n} queued here emptied)");
    }
}
