//! A channel's bound (crate::queue_settings): `max_depth` with `overflow=drop_oldest` drops
//! the oldest queued messages after a put takes the channel past it (`refuse` is the topic's
//! check before the put: `Topic::check_bounds`).

use std::sync::atomic::Ordering;

use nsq_protocol::MessageId;

use super::state::Verdict;
use super::Channel;

impl Channel {
    /// The effective bound: `refuse_at` is the `max_depth` a publish may not pass (0: none),
    /// `drop_at` the one past which the oldest are dropped (0: none).
    pub(crate) fn set_bound(&self, refuse_at: u64, drop_at: u64) {
        self.refuse_at.store(refuse_at, Ordering::Release);
        self.drop_at.store(drop_at, Ordering::Release);
    }

    /// The `max_depth` a publish to this channel's topic may not take it past, if any.
    pub(crate) fn refuse_at(&self) -> Option<u64> {
        Some(self.refuse_at.load(Ordering::Acquire)).filter(|&n| n > 0)
    }

    /// After a put: with `overflow=drop_oldest`, drops what is queued past `max_depth`, oldest
    /// first (memory, then the unread disk records), counted and logged. Returns how many.
    pub(super) fn trim_to_bound(&self) -> usize {
        let max = self.drop_at.load(Ordering::Acquire);
        if max == 0 {
            return 0;
        }
        let depth = u64::try_from(self.depth()).unwrap_or(0);
        if depth <= max {
            return 0;
        }
        let excess = usize::try_from(depth - max).unwrap_or(usize::MAX);
        let now = std::time::Instant::now();
        let mut dropped: Vec<MessageId>;
        {
            let mut g = self.lock();
            let (ids, read) = g.state.discard_front(excess);
            dropped = ids;
            if let Some(asked) = read {
                let mut raw = Vec::with_capacity(asked);
                self.backend.read_batch_pos(asked, &mut raw);
                let empty = raw.len() < asked && self.backend.depth() <= 0;
                let mut keep = |m: &crate::message::Message| {
                    dropped.push(m.id);
                    Verdict::Drop
                };
                // No consumer gets them: a take that drops everything it reads.
                g.state.take_backend(
                    raw,
                    asked,
                    empty,
                    super::DEAD_LETTER_CLIENT,
                    now,
                    std::time::Duration::ZERO,
                    &mut keep,
                    &mut |_| {},
                );
            }
            if let (Some(r), false) = (&self.repl, dropped.is_empty()) {
                r.finish(&self.topic_name, &self.name, &dropped);
            }
        }
        if !dropped.is_empty() {
            self.counters
                .dropped_count
                .fetch_add(dropped.len() as u64, Ordering::Relaxed);
            tracing::info!(
                "CHANNEL({}:{}): dropped the {} oldest messages (max_depth {max}, overflow drop_oldest)",
                self.topic_name,
                self.name,
                dropped.len()
            );
        }
        dropped.len()
    }
}
