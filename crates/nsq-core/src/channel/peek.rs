//! Peeking at a channel (crate::queue_settings; nsqd's `GET /channel/peek`): the next
//! messages a consumer would get, those in flight and the deferred ones, read without
//! changing anything — no message is taken, no attempt counted, no record settled.

use std::time::Instant;

use super::Channel;
use crate::backend::{BackendError, RecordPos};
use crate::message::{now_nanos, Message};

/// Where a peeked message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeekState {
    /// In the memory queue, or unread on disk: what a consumer gets next, in this order.
    Queued,
    /// Delivered to consumer `client_id`, not yet FINed or requeued.
    InFlight { client_id: u64 },
    /// Waiting for its defer or requeue delay.
    Deferred,
}

/// A peeked message.
#[derive(Debug, Clone)]
pub struct Peeked {
    pub msg: Message,
    pub state: PeekState,
    /// Unix nanoseconds: when an in-flight message times out or a deferred one is due.
    pub due: Option<i64>,
}

/// Bytes of disk records read per scan step.
const SCAN_BYTES: usize = 64 << 10;

impl Channel {
    /// Up to `n` queued messages in delivery order (the memory queue, then the unread disk
    /// records), up to `n` in flight (soonest timeout first) and up to `n` deferred (soonest
    /// due first). Holds the channel lock meanwhile (readers read under it), the disk part
    /// included: keep `n` small.
    pub fn peek(&self, n: usize) -> Result<Vec<Peeked>, BackendError> {
        let now = Instant::now();
        let wall = now_nanos();
        let at = |i: Instant| -> i64 {
            let ahead = i.saturating_duration_since(now).as_nanos();
            wall.saturating_add(i64::try_from(ahead).unwrap_or(i64::MAX))
        };
        let g = self.lock();
        let mut out: Vec<Peeked> = g
            .state
            .queued()
            .take(n)
            .map(|m| Peeked {
                msg: m.clone(),
                state: PeekState::Queued,
                due: None,
            })
            .collect();
        let mut left = n - out.len();
        if left > 0 && self.backend.depth() > 0 {
            let mut from: Option<RecordPos> = None;
            loop {
                let step = self.backend.scan_step(from, SCAN_BYTES, &mut |payload| {
                    if left == 0 {
                        return;
                    }
                    if let Ok(m) = Message::decode(payload) {
                        out.push(Peeked {
                            msg: m,
                            state: PeekState::Queued,
                            due: None,
                        });
                        left -= 1;
                    }
                })?;
                if step.done || left == 0 {
                    break;
                }
                from = Some(step.next);
            }
        }
        let mut flight: Vec<(Instant, u64, &Message)> = g
            .state
            .in_flight_entries()
            .map(|e| (e.deadline, e.client_id, &e.msg))
            .collect();
        flight.sort_by_key(|(d, _, m)| (*d, m.id.0));
        out.extend(flight.into_iter().take(n).map(|(d, client_id, m)| Peeked {
            msg: m.clone(),
            state: PeekState::InFlight { client_id },
            due: Some(at(d)),
        }));
        let mut deferred: Vec<(Instant, &Message)> = g.state.deferred_messages().collect();
        deferred.sort_by_key(|(d, m)| (*d, m.id.0));
        out.extend(deferred.into_iter().take(n).map(|(d, m)| Peeked {
            msg: m.clone(),
            state: PeekState::Deferred,
            due: Some(at(d)),
        }));
        Ok(out)
    }
}
