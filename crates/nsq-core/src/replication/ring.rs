//! The ring and the chooser's order (docs/replication.md, "The chooser"), sans-I/O.
//!
//! [`taker`] is the rule the nsqd driver (`crates/nsqd/src/replication/takeover.rs`) still
//! applies: each member escalates on its own clock. The core ([`super::Member`]) orders the
//! candidates with [`Ring::after`] and escalates through gossip instead.

use std::time::Duration;

/// The group's members ordered by node ID; "after X" walks on from X and wraps around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    ids: Vec<u64>,
}

impl Ring {
    /// The ring of these node IDs (order and repeats do not matter).
    pub fn new(ids: impl IntoIterator<Item = u64>) -> Self {
        let mut ids: Vec<u64> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        Ring { ids }
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Every member but `origin`, starting with the first after it in ring order. `origin`
    /// need not be a member (an origin that left the configuration).
    pub fn after(&self, origin: u64) -> impl Iterator<Item = u64> + '_ {
        let start = self.ids.partition_point(|&id| id <= origin);
        self.ids[start..]
            .iter()
            .chain(&self.ids[..start])
            .copied()
            .filter(move |&id| id != origin)
    }
}

/// Who takes an origin's epoch over: the first member after the origin in ring order that is
/// alive (this node, or linked to it) and holds a backlog of that epoch. If it has not
/// announced "taking over" one timeout after the origin was found gone (it may not reach a
/// lookupd), the next such member takes over, and so on: every member computes the same
/// answer from the same ring and the same STATUS gossip, without a vote.
///
/// `gone_for` is how long the origin has been gone as this member sees it.
pub fn taker(
    ring: &Ring,
    origin: u64,
    alive: impl Fn(u64) -> bool,
    holds: impl Fn(u64) -> bool,
    gone_for: Duration,
    timeout: Duration,
) -> Option<u64> {
    let candidates: Vec<u64> = ring
        .after(origin)
        .filter(|&m| alive(m) && holds(m))
        .collect();
    if candidates.is_empty() {
        return None;
    }
    let step = if timeout.is_zero() {
        0
    } else {
        (gone_for.as_nanos() / timeout.as_nanos()) as usize
    };
    Some(candidates[step.min(candidates.len() - 1)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_after_wraps_and_skips_the_origin() {
        let r = Ring::new([30, 10, 20, 40, 20]);
        assert_eq!(r.len(), 4);
        assert_eq!(r.after(20).collect::<Vec<_>>(), [30, 40, 10]);
        assert_eq!(r.after(40).collect::<Vec<_>>(), [10, 20, 30]);
        assert_eq!(
            r.after(25).collect::<Vec<_>>(),
            [30, 40, 10, 20],
            "not a member"
        );
        assert_eq!(Ring::new([]).after(1).count(), 0);
    }

    #[test]
    fn taker_is_the_first_live_holder_after_the_origin_then_the_next() {
        let r = Ring::new([1, 2, 3, 4]);
        let t = Duration::from_secs(30);
        let alive = |m| m != 3;
        let holds = |m| m != 4;
        // Origin 2: 3 is dead, 4 holds nothing, 1 it is.
        assert_eq!(taker(&r, 2, alive, holds, Duration::ZERO, t), Some(1));
        // Origin 4: 1 then 2 (3 is dead).
        assert_eq!(taker(&r, 4, alive, holds, Duration::ZERO, t), Some(1));
        assert_eq!(taker(&r, 4, alive, holds, t, t), Some(2), "1 silent for T");
        assert_eq!(
            taker(&r, 4, alive, holds, t * 5, t),
            Some(2),
            "the last stays"
        );
        assert_eq!(taker(&r, 4, |_| false, holds, Duration::ZERO, t), None);
    }
}
