//! The events the model check drives the channel state with, and their random generation.

use proptest::prelude::*;

use super::CLIENTS;

#[derive(Debug, Clone)]
pub(super) enum Op {
    Publish {
        n: usize,
        defer_ms: u32,
    },
    Take {
        client: usize,
        rdy: usize,
    },
    /// A take by a consumer with a sample rate: every other message is consumed and dropped.
    Sample {
        client: usize,
        rdy: usize,
    },
    /// A take on a channel with `max_attempts` (crate::queue_settings): a message already
    /// delivered that many times is consumed and dropped instead.
    Limited {
        client: usize,
        rdy: usize,
        max_attempts: u16,
        /// With a dead-letter topic: such a message is held (in flight for the dead-letter
        /// hand-off) instead of dropped.
        dead_letter: bool,
    },
    /// The k-th held message's copy in the dead-letter topic is stored: it is FINed.
    DeadLettered(usize),
    /// `overflow=drop_oldest`: the oldest queued messages are dropped (memory, then disk)
    /// until at least `k` of them and `bytes` of them are (`max_depth`, `max_bytes`).
    DropOldest {
        k: usize,
        bytes: u64,
    },
    /// The channel's `mem_queue_size` changes: later puts and restores use it (a journaled
    /// channel keeps 0, as the driver does).
    MemQueueSize(usize),
    /// A take on a channel with a `ttl`: a message published more than `ttl_ms` ago is
    /// consumed and dropped instead.
    Expiring {
        client: usize,
        rdy: usize,
        ttl_ms: u64,
    },
    Advance(usize),
    Fin {
        client: usize,
        k: usize,
    },
    Req {
        client: usize,
        k: usize,
        delay_ms: u64,
    },
    Touch {
        client: usize,
        k: usize,
    },
    Tick(u64),
    /// A returning origin's manifest lists the k-th deferred message (by ID): it is dropped
    /// as if delivered and FINed (replication's Return).
    DropDeferred(usize),
    DiskSync,
    Settle,
    Compact,
    FailWrites(bool),
    Admit(bool),
    Crash {
        power: bool,
    },
}

pub(super) fn op(crashes: bool) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..4, prop_oneof![4 => Just(0u32), 1 => 1u32..2500]).prop_map(|(n, defer_ms)| Op::Publish { n, defer_ms }),
        6 => (0..CLIENTS, 1usize..5).prop_map(|(client, rdy)| Op::Take { client, rdy }),
        1 => (0..CLIENTS, 1usize..5).prop_map(|(client, rdy)| Op::Sample { client, rdy }),
        1 => (0..CLIENTS, 1usize..5, 1u16..4, proptest::bool::ANY).prop_map(|(client, rdy, max_attempts, dead_letter)| Op::Limited { client, rdy, max_attempts, dead_letter }),
        1 => (0usize..4).prop_map(Op::DeadLettered),
        1 => (0usize..4, prop_oneof![Just(0u64), 1u64..120]).prop_map(|(k, bytes)| Op::DropOldest { k: if bytes == 0 { k.max(1) } else { k }, bytes }),
        1 => (0usize..4).prop_map(Op::MemQueueSize),
        1 => (0..CLIENTS, 1usize..5, 0u64..3000).prop_map(|(client, rdy, ttl_ms)| Op::Expiring { client, rdy, ttl_ms }),
        8 => (0usize..8).prop_map(Op::Advance),
        6 => (0..CLIENTS, 0usize..8).prop_map(|(client, k)| Op::Fin { client, k }),
        3 => (0..CLIENTS, 0usize..8, prop_oneof![Just(0u64), 1u64..2500]).prop_map(|(client, k, delay_ms)| Op::Req { client, k, delay_ms }),
        1 => (0..CLIENTS, 0usize..8).prop_map(|(client, k)| Op::Touch { client, k }),
        4 => (0u64..1500).prop_map(Op::Tick),
        1 => (0usize..8).prop_map(Op::DropDeferred),
        3 => Just(Op::DiskSync),
        3 => Just(Op::Settle),
        1 => Just(Op::Compact),
        1 => proptest::bool::weighted(0.3).prop_map(Op::FailWrites),
        1 => proptest::bool::weighted(0.7).prop_map(Op::Admit),
        2 => proptest::bool::ANY.prop_map(move |power| if crashes { Op::Crash { power } } else { Op::Settle }),
    ]
}
