//! Adopting messages taken over from another node's replica backlog (docs/replication.md,
//! "Takeover", "Delivering"): into the topic like a publish, or straight into a channel.

use std::sync::Arc;

use super::{PutError, Topic};
use crate::backend::BackendError;
use crate::message::{now_nanos, Message};
use crate::receipt::PutReceipt;

impl Topic {
    /// Adopts messages taken over from another node's replica backlog (docs/replication.md,
    /// "Takeover", "Delivering"): each keeps its ID, timestamp and attempts, and waits its own
    /// `defer_ms` (what was left of its deferral). With `channel` they go straight into that
    /// channel of this topic (created if needed) — they were pending there at the origin;
    /// without, into the topic, to be fanned out to its channels like a publish.
    ///
    /// Replicated like a publish (one PUB frame per distinct deferral; the PUB lists the
    /// channel), so this node's own replicas hold what it adopted: the receipt's replication
    /// seq is the last frame's. Attempts are not in a PUB frame, so this node's replicas
    /// start them over. NSQ has no counterpart (a message never changes node there).
    pub fn adopt(
        self: &Arc<Self>,
        channel: Option<&str>,
        msgs: Vec<Message>,
    ) -> Result<PutReceipt, PutError> {
        if self.is_exiting() {
            return Err(BackendError::Exiting);
        }
        let mut receipt = PutReceipt::default();
        for group in by_defer(msgs) {
            let defer_ms = group[0].defer_ms;
            let due = if defer_ms == 0 {
                0
            } else {
                now_nanos().saturating_add(i64::from(defer_ms) * 1_000_000)
            };
            let mut r = match channel {
                None => self.put_built(group, due)?,
                Some(name) => self.adopt_into_channel(name, group, due)?,
            };
            receipt.absorb(&mut r);
        }
        Ok(receipt)
    }

    fn adopt_into_channel(
        self: &Arc<Self>,
        name: &str,
        msgs: Vec<Message>,
        due: i64,
    ) -> Result<PutReceipt, PutError> {
        let (ch, _) = self.get_or_create_channel(name)?;
        let mut receipt = PutReceipt::default();
        if let (Some(r), false) = (&self.repl, ch.is_ephemeral()) {
            let encoded = r.encode_messages(&msgs);
            // Under the topic lock, as a direct publish: the PUB frame (listing the channel)
            // is in the log before a consumer can see the messages, so a FIN can only follow.
            let _st = self.state.lock();
            let seq = r.publish(&self.name, due, Some(std::slice::from_ref(&ch)), encoded);
            receipt.set_replication_seq(seq);
        }
        ch.receive(&msgs, &mut receipt)?;
        Ok(receipt)
    }
}

/// Splits messages into runs of equal `defer_ms` (each run is one PUB frame), in order.
fn by_defer(msgs: Vec<Message>) -> Vec<Vec<Message>> {
    let mut out: Vec<Vec<Message>> = Vec::new();
    for m in msgs {
        match out.last_mut() {
            Some(run) if run[0].defer_ms == m.defer_ms => run.push(m),
            _ => out.push(vec![m]),
        }
    }
    out
}
