//! When an origin is gone and who takes its backlog over (docs/replication.md, "Takeover"),
//! without I/O: the driver feeds in what it observes (link events, nsqlookupd answers, peers'
//! STATUS) with the time, and asks.
//!
//! NSQ has no takeover; the absence test reads what nsqlookupd already keeps for every
//! producer (nsqlookupd/registration_db.go, `PeerInfo.lastUpdate`, refreshed by the nsqd's
//! PING every 15 s: nsqd/lookup.go, `lookupLoop`), exposed by nsqlookupd's `/debug`
//! (nsqlookupd/http.go, `doDebug`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub use crate::replication::ring::{taker, Ring};

/// A producer whose `last_update` has not changed for this long is absent from that
/// nsqlookupd: nsqd PINGs every 15 s, so 20 s without a change is a missed PING plus slack.
/// Comparing one lookupd's value with its own earlier value needs no synchronised clocks.
pub const STALE_AFTER: Duration = Duration::from_secs(20);

/// Whether an origin is gone, as one member sees it: its link lost AND absent from every
/// nsqlookupd that answers, both for the takeover timeout; and, when lookupds are configured,
/// at least one of them answered within the timeout (a member that reaches none may be the
/// one cut off, and must not take over).
#[derive(Debug, Clone)]
pub struct GoneWatch {
    timeout: Duration,
    /// Some: the link from the origin is down, since then.
    link_down_since: Option<Instant>,
    /// Per lookupd (its address): what it last said of the origin.
    lookupds: BTreeMap<String, LookupdView>,
    /// Whether any lookupd is configured at all (without them, the link alone counts).
    lookupds_configured: bool,
}

#[derive(Debug, Clone, Default)]
struct LookupdView {
    /// The last time this lookupd answered.
    answered_at: Option<Instant>,
    /// The origin's `last_update` in its last answer and when that value was first seen.
    seen: Option<(i64, Instant)>,
    /// Some: the answers have not listed the origin since then.
    unlisted_since: Option<Instant>,
}

impl LookupdView {
    /// Since when the origin counts as absent from this lookupd (None: present now).
    fn absent_since(&self, now: Instant) -> Option<Instant> {
        self.answered_at?;
        if let Some(since) = self.unlisted_since {
            // Not listed (unregistered, or never there).
            return Some(since);
        }
        let (_, changed) = self.seen?;
        let stale = changed + STALE_AFTER;
        (now >= stale).then_some(stale)
    }
}

impl GoneWatch {
    /// A watch on an origin whose link is up now.
    pub fn new(timeout: Duration, lookupds_configured: bool) -> Self {
        GoneWatch {
            timeout,
            link_down_since: None,
            lookupds: BTreeMap::new(),
            lookupds_configured,
        }
    }

    /// A frame (or a new session) came from the origin.
    pub fn link_up(&mut self) {
        self.link_down_since = None;
    }

    /// The origin's link was lost (closed, or 5 s without a frame) at `at`. A second call
    /// keeps the first time.
    pub fn link_down(&mut self, at: Instant) {
        self.link_down_since.get_or_insert(at);
    }

    /// One lookupd answered at `now`: `last_update` is the origin's entry in its `/debug`
    /// (None: not listed).
    pub fn lookupd_answer(&mut self, lookupd: &str, now: Instant, last_update: Option<i64>) {
        let v = self.lookupds.entry(lookupd.to_string()).or_default();
        v.answered_at = Some(now);
        match last_update {
            None => {
                v.unlisted_since.get_or_insert(now);
            }
            Some(u) => {
                v.unlisted_since = None;
                match v.seen {
                    Some((old, _)) if old == u => {}
                    _ => v.seen = Some((u, now)),
                }
            }
        }
    }

    /// Since when the origin has been gone, if it is (the later of the link loss and the
    /// absence from every answering lookupd), judged at `now`.
    pub fn gone_since(&self, now: Instant) -> Option<Instant> {
        let link = self.link_down_since?;
        let mut since = link;
        if self.lookupds_configured {
            let recent = |v: &&LookupdView| {
                v.answered_at
                    .is_some_and(|a| now.saturating_duration_since(a) <= self.timeout)
            };
            let answering: Vec<&LookupdView> = self.lookupds.values().filter(recent).collect();
            if answering.is_empty() {
                return None;
            }
            for v in answering {
                since = since.max(v.absent_since(now)?);
            }
        }
        (now.saturating_duration_since(since) >= self.timeout).then_some(since + self.timeout)
    }

    pub fn is_gone(&self, now: Instant) -> bool {
        self.gone_since(now).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gone_needs_the_link_lost_and_absence_both_for_the_timeout() {
        let t = Duration::from_secs(30);
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = GoneWatch::new(t, true);
        w.lookupd_answer("l1", s(0), Some(100));
        assert!(!w.is_gone(s(0)));
        w.link_down(s(1));
        // Still listed and refreshed every 15 s: present.
        w.lookupd_answer("l1", s(15), Some(115));
        w.lookupd_answer("l1", s(30), Some(130));
        assert_eq!(w.gone_since(s(40)), None);
        // Its PINGs stop after 30: stale at 50, gone at 80.
        w.lookupd_answer("l1", s(45), Some(130));
        w.lookupd_answer("l1", s(79), Some(130));
        assert_eq!(w.gone_since(s(79)), None);
        w.lookupd_answer("l1", s(80), Some(130));
        assert_eq!(w.gone_since(s(80)), Some(s(80)));
        // The link comes back: not gone.
        w.link_up();
        assert!(!w.is_gone(s(81)));
    }

    #[test]
    fn unregistered_origin_counts_absent_from_the_answer_and_a_kill_waits_the_timeout() {
        let t = Duration::from_secs(10);
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = GoneWatch::new(t, true);
        w.lookupd_answer("l1", s(0), Some(1));
        // Killed at 2: the lookupd drops the producer with its connection.
        w.link_down(s(2));
        w.lookupd_answer("l1", s(3), None);
        w.lookupd_answer("l1", s(12), None);
        assert!(
            !w.is_gone(s(12)),
            "absent only since the first unlisted answer (3)"
        );
        assert_eq!(w.gone_since(s(13)), Some(s(13)));
        // Listed again (re-registered): present, and a new absence starts over.
        w.lookupd_answer("l1", s(14), Some(2));
        assert!(!w.is_gone(s(14)));
    }

    #[test]
    fn no_lookupd_answering_means_no_takeover_unless_none_is_configured() {
        let t = Duration::from_secs(10);
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = GoneWatch::new(t, true);
        w.link_down(s(0));
        assert!(
            !w.is_gone(s(100)),
            "cut off from every lookupd: maybe we are the island"
        );
        w.lookupd_answer("l1", s(1), None);
        assert!(!w.is_gone(s(100)), "its answer is older than the timeout");
        w.lookupd_answer("l1", s(100), None);
        assert!(w.is_gone(s(100)));

        let mut w = GoneWatch::new(t, false);
        w.link_down(s(0));
        assert!(!w.is_gone(s(9)));
        assert_eq!(w.gone_since(s(10)), Some(s(10)));
    }

    #[test]
    fn every_answering_lookupd_must_miss_it() {
        let t = Duration::from_secs(10);
        let t0 = Instant::now();
        let s = |n: u64| t0 + Duration::from_secs(n);
        let mut w = GoneWatch::new(t, true);
        w.link_down(s(0));
        w.lookupd_answer("l1", s(1), None);
        // l2 still sees fresh PINGs (the origin is cut off from us, not from it).
        for i in 0..5 {
            w.lookupd_answer("l2", s(1 + i * 5), Some(i as i64));
        }
        assert!(!w.is_gone(s(21)));
        // l2 stops answering; l1 alone (answering, not listing) decides.
        w.lookupd_answer("l1", s(40), None);
        assert!(w.is_gone(s(40)));
    }
}
