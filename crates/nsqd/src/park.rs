//! Parked reads: when a consumer's socket is read on a timer instead of on readiness. Every
//! decision of the policy lives here, free of sockets and clocks so it can be tested as is;
//! the reader (`protocol_v2.rs`, `read_loop`) asks [`ParkPolicy::next_read`] before each read
//! and does what it says, the socket side (`transport.rs`, `FdReader::park`,
//! `FdReader::read_parked`) only knows how to park and how much to read at most.
//!
//! Why: go-nsq writes and flushes every FIN on its own, so a consumer working through a large
//! RDY window sends one TCP segment per message, and each segment that arrives for a
//! descriptor registered with epoll wakes the daemon's runtime thread — a wake-up costs more
//! than all of nsqd's own work for the message. A *saturated* consumer (most of a large RDY
//! window in flight: it has plenty to work on and no hurry for a refill) is therefore read
//! with its socket out of the reactor, once per [`ParkPolicy::POLL`], so its FINs are
//! collected a millisecond's worth at a time and the refill they free goes out in one write.
//! Measured 6.9 → ~0.8 µs/msg of daemon CPU for a go-nsq-like consumer (bench/README.md,
//! "Parked reads"). Other commands on such a connection wait up to ~2 ms longer; unsaturated
//! connections (the latency mode) never park. NSQ has no counterpart (Go's netpoller wakes for
//! every segment too).
//!
//! `--parked-reads=false` turns it off: every read then waits for readiness.

use std::time::Duration;

/// `FIN <16-byte id>\n`: the bytes one FIN takes on the wire.
const FIN_LEN: usize = 21;

/// What the policy needs to know of the connection before a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Load {
    /// The plain TCP socket is still in place (not TLS, snappy or deflate, which may hold
    /// decoded bytes internally and have no socket of their own to park).
    pub(crate) plain_tcp: bool,
    /// SUB succeeded and CLS has not been sent.
    pub(crate) subscribed: bool,
    /// The client's RDY count.
    pub(crate) ready: i64,
    /// Messages in flight to the client.
    pub(crate) in_flight: i64,
}

impl Load {
    /// The consumer has most of a large RDY window in flight (>= 3/4 of an RDY >= 64): it is
    /// busy with its messages, and its FINs can be collected on a short timer.
    pub(crate) fn saturated(&self) -> bool {
        self.subscribed && self.ready >= 64 && self.in_flight * 4 >= self.ready * 3
    }
}

/// One connection's parking state: whether the last read was parked, how many bytes it
/// brought, and how many reads remain before parking is allowed again.
#[derive(Debug, Clone)]
pub(crate) struct ParkPolicy {
    enabled: bool,
    parked_last: bool,
    last_read: usize,
    unparked_left: u32,
}

impl ParkPolicy {
    /// How long a parked socket sleeps between reads (tokio's timer: 1–2 ms in practice).
    pub(crate) const POLL: Duration = Duration::from_millis(1);
    /// At most this much is read from a parked socket at once (`FdReader::read_parked` reads
    /// until the socket is empty or this is reached).
    pub(crate) const MAX_READ: usize = 1024 * 1024;
    /// Reads without parking after a parked read found a fast client (see
    /// [`ParkPolicy::next_read`]).
    pub(crate) const UNPARKED_READS: u32 = 256;

    /// A new connection's policy; `enabled` is `--parked-reads`.
    pub(crate) fn new(enabled: bool) -> Self {
        ParkPolicy {
            enabled,
            parked_last: false,
            last_read: 0,
            unparked_left: 0,
        }
    }

    /// Decides whether the next read is parked (sleep [`ParkPolicy::POLL`] out of the reactor,
    /// then read what arrived) or waits for readiness as usual.
    ///
    /// * Only a saturated consumer ([`Load::saturated`]) on plain TCP is parked.
    /// * A parked read that brought FINs for a quarter of the RDY window came from a client
    ///   fast enough to run its window dry before the next period: it is read on readiness
    ///   for the next [`ParkPolicy::UNPARKED_READS`] reads (its FINs batch up anyway while the
    ///   daemon works), so parking never caps its throughput.
    /// * A parked period that brings nothing ends in a wait for readiness (the reader's side:
    ///   the client went quiet), and the policy is asked again after that read.
    pub(crate) fn next_read(&mut self, load: Load) -> bool {
        let quarter = (load.ready.max(0) as usize / 4) * FIN_LEN;
        if self.parked_last && self.last_read >= quarter {
            self.unparked_left = Self::UNPARKED_READS;
        }
        let park = self.enabled && load.plain_tcp && self.unparked_left == 0 && load.saturated();
        self.unparked_left = self.unparked_left.saturating_sub(1);
        self.parked_last = park;
        park
    }

    /// A read (parked or not) brought `n` bytes.
    pub(crate) fn read_done(&mut self, n: usize) {
        self.last_read = n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(ready: i64, in_flight: i64) -> Load {
        Load {
            plain_tcp: true,
            subscribed: true,
            ready,
            in_flight,
        }
    }

    #[test]
    fn saturated_means_three_quarters_of_a_large_window() {
        assert!(load(64, 48).saturated());
        assert!(load(2500, 1875).saturated());
        assert!(load(100, 100).saturated());
        assert!(!load(64, 47).saturated(), "less than 3/4 in flight");
        assert!(!load(63, 63).saturated(), "RDY below 64");
        assert!(!load(0, 0).saturated());
        let mut l = load(100, 100);
        l.subscribed = false;
        assert!(!l.saturated(), "not subscribed (before SUB, after CLS)");
    }

    #[test]
    fn parks_only_a_saturated_plain_tcp_consumer() {
        let mut p = ParkPolicy::new(true);
        assert!(!p.next_read(load(100, 10)));
        assert!(p.next_read(load(100, 100)));
        let mut tls = load(100, 100);
        tls.plain_tcp = false;
        assert!(!p.next_read(tls));
    }

    #[test]
    fn disabled_never_parks() {
        let mut p = ParkPolicy::new(false);
        for _ in 0..1000 {
            assert!(!p.next_read(load(2500, 2500)));
            p.read_done(21);
        }
    }

    #[test]
    fn a_slow_parked_client_stays_parked() {
        let mut p = ParkPolicy::new(true);
        for _ in 0..1000 {
            assert!(p.next_read(load(2500, 2500)));
            // 100 FINs per period: less than a quarter of 2,500.
            p.read_done(100 * FIN_LEN);
        }
    }

    #[test]
    fn a_fast_parked_client_is_read_on_readiness_for_a_while() {
        let mut p = ParkPolicy::new(true);
        assert!(p.next_read(load(2500, 2500)));
        // A quarter of the window FINed within one period.
        p.read_done(625 * FIN_LEN);
        for i in 0..ParkPolicy::UNPARKED_READS {
            assert!(!p.next_read(load(2500, 2500)), "read {i}");
            // Big unparked reads do not extend the period: only parked ones count.
            p.read_done(1000 * FIN_LEN);
        }
        assert!(p.next_read(load(2500, 2500)), "parks again afterwards");
        p.read_done(FIN_LEN);
        assert!(p.next_read(load(2500, 2500)));
    }

    #[test]
    fn the_quarter_is_of_the_current_window() {
        let mut p = ParkPolicy::new(true);
        assert!(p.next_read(load(2500, 2500)));
        p.read_done(16 * FIN_LEN);
        // RDY lowered to 64 meanwhile: 16 FINs are a quarter of it.
        assert!(!p.next_read(load(64, 64)));
    }

    #[test]
    fn an_unsaturated_read_does_not_trigger_the_quarter_rule() {
        let mut p = ParkPolicy::new(true);
        assert!(!p.next_read(load(2500, 10)));
        p.read_done(2500 * FIN_LEN);
        assert!(p.next_read(load(2500, 2500)), "the big read was not parked");
    }
}
