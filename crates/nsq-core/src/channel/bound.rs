//! A channel's bounds (crate::queue_settings): `max_depth` and `max_bytes` with
//! `overflow=drop_oldest` drop the oldest queued messages after a put takes the channel past
//! one of them (`refuse` is the topic's check before the put: `Topic::check_bounds`), and the
//! channel's own memory queue size (`mem_queue_size`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use nsq_protocol::MessageId;

use super::state::Verdict;
use super::Channel;

/// A queue's bounds, 0 for none: messages (`max_depth`) and bytes (`max_bytes`: each queued
/// message's record size, 4 + 26 + body bytes, in memory or unread on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bound {
    pub depth: u64,
    pub bytes: u64,
}

impl Bound {
    pub fn is_none(&self) -> bool {
        self.depth == 0 && self.bytes == 0
    }

    /// Whether a queue of `depth` messages and `bytes` bytes is past one of the bounds.
    pub fn passed(&self, depth: u64, bytes: u64) -> bool {
        (self.depth > 0 && depth > self.depth) || (self.bytes > 0 && bytes > self.bytes)
    }

    /// What a queue of `depth` messages and `bytes` bytes must drop to hold both bounds:
    /// (messages, bytes), `None` when it holds them.
    pub(crate) fn excess(&self, depth: u64, bytes: u64) -> Option<(usize, u64)> {
        if !self.passed(depth, bytes) {
            return None;
        }
        let over = |v: u64, max: u64| if max > 0 { v.saturating_sub(max) } else { 0 };
        let n = usize::try_from(over(depth, self.depth)).unwrap_or(usize::MAX);
        Some((n, over(bytes, self.bytes)))
    }

    /// How it reads in a log line: `max_depth 3, max_bytes 100`.
    pub(crate) fn describe(&self) -> String {
        match (self.depth, self.bytes) {
            (d, 0) => format!("max_depth {d}"),
            (0, b) => format!("max_bytes {b}"),
            (d, b) => format!("max_depth {d}, max_bytes {b}"),
        }
    }
}

/// A topic's or channel's effective bounds, set when settings change and read on the put
/// path without a lock: `refuse` the ones a publish may not pass, `drop` the ones past which
/// the oldest are dropped (0: none).
#[derive(Debug, Default)]
pub(crate) struct Bounds {
    refuse_depth: AtomicU64,
    refuse_bytes: AtomicU64,
    drop_depth: AtomicU64,
    drop_bytes: AtomicU64,
    /// A drop bound is set: the one load a put pays without one.
    drops: AtomicBool,
}

impl Bounds {
    pub(crate) fn set(&self, refuse: Bound, drop: Bound) {
        self.refuse_depth.store(refuse.depth, Ordering::Release);
        self.refuse_bytes.store(refuse.bytes, Ordering::Release);
        self.drop_depth.store(drop.depth, Ordering::Release);
        self.drop_bytes.store(drop.bytes, Ordering::Release);
        self.drops.store(!drop.is_none(), Ordering::Release);
    }

    /// The bounds a publish may not pass, if any.
    pub(crate) fn refuse(&self) -> Option<Bound> {
        let b = Bound {
            depth: self.refuse_depth.load(Ordering::Acquire),
            bytes: self.refuse_bytes.load(Ordering::Acquire),
        };
        (!b.is_none()).then_some(b)
    }

    /// The bounds past which the oldest are dropped, if any.
    pub(crate) fn drop_bound(&self) -> Option<Bound> {
        if !self.drops.load(Ordering::Acquire) {
            return None;
        }
        let b = Bound {
            depth: self.drop_depth.load(Ordering::Acquire),
            bytes: self.drop_bytes.load(Ordering::Acquire),
        };
        (!b.is_none()).then_some(b)
    }
}

impl Channel {
    /// The effective bounds (see [`Bounds::set`]), set by the topic.
    pub(crate) fn set_bound(&self, refuse: Bound, drop: Bound) {
        self.bounds.set(refuse, drop);
    }

    /// The bounds a publish to this channel's topic may not take it past, if any.
    pub(crate) fn refuse_bound(&self) -> Option<Bound> {
        self.bounds.refuse()
    }

    /// The messages and bytes queued: the memory queue and the unread part of the backend
    /// (not in flight, not deferred). One lock.
    pub fn queued(&self) -> (u64, u64) {
        let g = self.lock();
        let depth = g.state.mem_len() as u64 + u64::try_from(self.backend.depth()).unwrap_or(0);
        (depth, g.state.mem_bytes() + self.backend.unread_bytes())
    }

    /// The memory queue's size from now on (the node's `--mem-queue-size` or the channel's
    /// own `mem_queue_size`); a journaled channel keeps 0 (everything it holds is on disk).
    pub(crate) fn set_mem_queue_size(&self, n: usize) {
        if self.store.is_some() {
            return;
        }
        self.lock().state.set_mem_queue_size(n);
    }

    /// After a put: with `overflow=drop_oldest`, drops what is queued past `max_depth` or
    /// `max_bytes`, oldest first (memory, then the unread disk records), until both hold,
    /// counted and logged. Returns how many.
    pub(super) fn trim_to_bound(&self) -> usize {
        let Some(bound) = self.bounds.drop_bound() else {
            return 0;
        };
        let now = std::time::Instant::now();
        let mut dropped: Vec<MessageId>;
        {
            let mut g = self.lock();
            let depth = g.state.mem_len() as u64 + u64::try_from(self.backend.depth()).unwrap_or(0);
            let bytes = g.state.mem_bytes() + self.backend.unread_bytes();
            let Some((want_n, want_b)) = bound.excess(depth, bytes) else {
                return 0;
            };
            let (ids, mut dropped_b, more) = g.state.discard_front(want_n, want_b);
            dropped = ids;
            let mut more = more;
            // The rest from the backend: by count in one read; by bytes one record at a time
            // (a record's size is known once read), so no newer message goes than must.
            while more && (dropped.len() < want_n || dropped_b < want_b) {
                let asked = if dropped_b < want_b {
                    1
                } else {
                    want_n - dropped.len()
                };
                let mut raw = Vec::with_capacity(asked);
                self.backend.read_batch_pos(asked, &mut raw);
                let got = raw.len();
                dropped_b += raw.iter().map(|(p, _)| 4 + p.len() as u64).sum::<u64>();
                let empty = got < asked && self.backend.depth() <= 0;
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
                more = got == asked;
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
                "CHANNEL({}:{}): dropped the {} oldest messages ({}, overflow drop_oldest)",
                self.topic_name,
                self.name,
                dropped.len(),
                bound.describe()
            );
        }
        dropped.len()
    }
}
