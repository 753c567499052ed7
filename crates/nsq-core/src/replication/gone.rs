//! Whether an origin is gone, as one member sees it (docs/replication.md, "Takeover"), with
//! the fail-closed rule for nsqlookupd.
//!
//! The origin `O` is gone for member `P` when, for the takeover timeout `T`:
//! 1. P has had no live link from O (measured on P's clock), and
//! 2. when nsqlookupds are configured, **every** configured lookupd answered P within `T`
//!    with an answer newer than its previous one (its own clock advanced), and each has had O
//!    absent for at least `T` measured on **that lookupd's clock**: unlisted since the first
//!    answer that did not list it, or listed with a `last_update` older than
//!    [`STALE_AFTER`] (nsqd PINGs every 15 s: nsqd/lookup.go, `lookupLoop`; nsqlookupd
//!    refreshes `PeerInfo.lastUpdate` on each: nsqlookupd/registration_db.go).
//!
//! Fail closed: a lookupd that does not answer, or answers with a clock that does not move
//! (a replayed or cached answer), blocks the takeover — it may be the one the origin still
//! reaches, and an asymmetric cut must not look like a death. The availability cost: while a
//! configured lookupd is unreachable from every member that holds O's backlog, a lost O is
//! not taken over (a second fault on top of O's loss); the lookupd's return unblocks it.
//!
//! Measuring the absence on the lookupd's own clock needs no synchronised clocks (one clock
//! compared with itself), and it makes a delayed answer safe: the origin's last PING that
//! reached the lookupd is at or before its `last_update`, so `T` on the lookupd's clock
//! after it is at least `T` after the origin last heard that lookupd (see `Member`'s fence).

use std::time::Duration;

/// A producer whose `last_update` is this much older than the lookupd's clock is absent
/// from that lookupd: nsqd PINGs every 15 s, so 20 s is a missed PING plus slack.
pub const STALE_AFTER: Duration = Duration::from_secs(20);

/// One lookupd's view of one origin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct View {
    /// When (this member's clock) the lookupd last gave a fresh answer.
    answered_at: Option<Duration>,
    /// The lookupd's clock in that answer.
    clock: Option<Duration>,
    /// Some: on the lookupd's clock, the origin has been absent since then.
    absent_from: Option<Duration>,
}

/// The "gone" watch of one `(origin, epoch)` backlog (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoneWatch {
    timeout: Duration,
    /// Some: the link from the origin is down, since then (this member's clock).
    link_down_since: Option<Duration>,
    /// One per configured lookupd (none configured: the link alone counts).
    lookupds: Vec<View>,
}

impl GoneWatch {
    /// A watch whose link is down since `now` (no session of the origin yet), with
    /// `lookupds` lookupds configured.
    pub fn new(timeout: Duration, lookupds: usize, now: Duration) -> Self {
        GoneWatch {
            timeout,
            link_down_since: Some(now),
            lookupds: vec![View::default(); lookupds],
        }
    }

    pub fn link_up(&mut self) {
        self.link_down_since = None;
    }

    /// The link was lost at `at`; a second call keeps the first time.
    pub fn link_down(&mut self, at: Duration) {
        self.link_down_since.get_or_insert(at);
    }

    pub fn link_is_up(&self) -> bool {
        self.link_down_since.is_none()
    }

    /// Lookupd `i` answered at `now` (this member's clock) with its own clock `clock` and
    /// the origin's `last_update` (its clock; None: not listed). An answer whose clock is not
    /// after the previous answer's is ignored.
    pub fn lookupd_answer(
        &mut self,
        i: usize,
        now: Duration,
        clock: Duration,
        last_update: Option<Duration>,
    ) {
        let Some(v) = self.lookupds.get_mut(i) else {
            return;
        };
        if v.clock.is_some_and(|c| clock <= c) {
            return;
        }
        v.clock = Some(clock);
        v.answered_at = Some(now);
        match last_update {
            None => {
                v.absent_from.get_or_insert(clock);
            }
            Some(u) => {
                let stale = u + STALE_AFTER;
                v.absent_from = (clock >= stale).then_some(stale);
            }
        }
    }

    /// Whether the origin is gone at `now` (see the module docs).
    pub fn is_gone(&self, now: Duration) -> bool {
        let Some(down) = self.link_down_since else {
            return false;
        };
        if now.saturating_sub(down) < self.timeout {
            return false;
        }
        self.lookupds.iter().all(|v| {
            let (Some(at), Some(clock), Some(from)) = (v.answered_at, v.clock, v.absent_from)
            else {
                return false;
            };
            now.saturating_sub(at) <= self.timeout && clock.saturating_sub(from) >= self.timeout
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn without_lookupds_the_link_alone_counts() {
        let mut w = GoneWatch::new(s(10), 0, s(0));
        assert!(!w.is_gone(s(9)));
        assert!(w.is_gone(s(10)));
        w.link_up();
        assert!(!w.is_gone(s(30)));
        w.link_down(s(30));
        w.link_down(s(35));
        assert!(w.is_gone(s(40)), "the first loss counts");
    }

    #[test]
    fn absence_is_measured_on_the_lookupds_clock() {
        let mut w = GoneWatch::new(s(10), 1, s(0));
        // The lookupd's clock is 1000 s ahead of ours; the origin PINGed at 995 (its clock).
        w.lookupd_answer(0, s(1), s(1001), Some(s(995)));
        assert!(!w.is_gone(s(20)), "listed, fresh");
        // Stale from 1015 on the lookupd's clock; gone once that clock reads 1025.
        w.lookupd_answer(0, s(24), s(1024), Some(s(995)));
        assert!(!w.is_gone(s(24)));
        w.lookupd_answer(0, s(25), s(1025), Some(s(995)));
        assert!(w.is_gone(s(25)));
        // A PING arrives again: present.
        w.lookupd_answer(0, s(26), s(1026), Some(s(1026)));
        assert!(!w.is_gone(s(26)));
    }

    #[test]
    fn a_lookupd_that_stops_answering_blocks_the_takeover() {
        let mut w = GoneWatch::new(s(10), 2, s(0));
        w.lookupd_answer(0, s(1), s(1), None);
        w.lookupd_answer(1, s(1), s(1), Some(s(1)));
        // Lookupd 1 falls silent; lookupd 0 keeps saying "not listed".
        for t in 2..100 {
            w.lookupd_answer(0, s(t), s(t), None);
        }
        assert!(
            !w.is_gone(s(99)),
            "lookupd 1 may be the one the origin reaches"
        );
        // It answers again, still listing the origin's old PING: stale since 21, gone.
        w.lookupd_answer(1, s(100), s(100), Some(s(1)));
        assert!(w.is_gone(s(100)));
        // ...and silent for longer than the timeout: blocked again.
        w.lookupd_answer(0, s(120), s(120), None);
        assert!(!w.is_gone(s(120)));
    }

    #[test]
    fn a_replayed_answer_does_not_count() {
        let mut w = GoneWatch::new(s(10), 1, s(0));
        w.lookupd_answer(0, s(1), s(50), Some(s(0)));
        assert!(
            !w.is_gone(s(1)),
            "stale since 20, absent 30 s, but link down only 1 s"
        );
        // The same answer again and again (a cache): its clock does not move.
        for t in 2..40 {
            w.lookupd_answer(0, s(t), s(50), Some(s(0)));
        }
        assert!(w.is_gone(s(10)));
        assert!(
            !w.is_gone(s(39)),
            "no fresh answer for longer than the timeout"
        );
    }
}
