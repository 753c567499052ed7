//! Destination selection for nsq_to_nsq (nsq's apps/nsq_to_nsq/nsq_to_nsq.go,
//! `PublishHandler.HandleMessage`): `round-robin` (a shared counter incremented before use, so
//! the first message goes to index 1 of several), or a host pool after bitly/go-hostpool
//! (hostpool.go): `hostpool` is its standard pool, `epsilon-greedy` its epsilon-greedy pool.
//!
//! The standard pool hands out the live hosts in turn; a host marked failed is dead for 30 s,
//! then offered once again (each retry doubling its delay, up to 15 min) until a success
//! revives it; when every host is dead, all are revived (`getRoundRobin`, `markFailed`,
//! `markSuccess`, `willRetryHost`). The epsilon-greedy pool explores (the standard choice) with
//! a probability that starts at 0.3 and decays by 0.9 per exploration down to 0.01, and
//! otherwise picks among the usable hosts at random weighted by 1 / their average response
//! time in whole milliseconds; hosts without a positive average are not candidates, so on a
//! fast network it behaves like the standard pool (`getEpsilonGreedy`). The reference keeps
//! 120 decaying buckets of times over 5 minutes; here an exponentially weighted average of the
//! same millisecond values stands in for them.

use std::time::{Duration, Instant};

use rand::Rng;

/// go-hostpool's `initialRetryDelay`.
const INITIAL_RETRY_DELAY: Duration = Duration::from_secs(30);
/// go-hostpool's `maxRetryInterval`.
const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(900);
const INITIAL_EPSILON: f64 = 0.3;
const EPSILON_DECAY: f64 = 0.9;
const MIN_EPSILON: f64 = 0.01;
/// Weight of a new sample in the response-time average.
const EWMA_WEIGHT: f64 = 0.1;

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    RoundRobin,
    HostPool,
    EpsilonGreedy,
}

impl Mode {
    /// `round-robin`, `hostpool`, `epsilon-greedy`; any other text behaves like round-robin
    /// (the reference's `selectedMode` stays at its zero value, ModeRoundRobin).
    pub fn parse(s: &str) -> Mode {
        match s {
            "hostpool" => Mode::HostPool,
            "epsilon-greedy" => Mode::EpsilonGreedy,
            _ => Mode::RoundRobin,
        }
    }
}

#[derive(Debug, Clone)]
struct Host {
    dead: bool,
    next_retry: Instant,
    retry_delay: Duration,
    /// Average response time in milliseconds (epsilon-greedy), 0 until measured.
    avg_ms: f64,
}

/// Chooses destination indexes. One owner (the caller keeps it behind a short lock).
#[derive(Debug, Clone)]
pub struct Selector {
    mode: Mode,
    counter: u64,
    hosts: Vec<Host>,
    next_index: usize,
    epsilon: f64,
}

impl Selector {
    pub fn new(mode: Mode, hosts: usize) -> Selector {
        let now = Instant::now();
        Selector {
            mode,
            counter: 0,
            hosts: vec![
                Host {
                    dead: false,
                    next_retry: now,
                    retry_delay: INITIAL_RETRY_DELAY,
                    avg_ms: 0.0,
                };
                hosts
            ],
            next_index: 0,
            epsilon: INITIAL_EPSILON,
        }
    }

    /// The destination for the next message.
    pub fn pick(&mut self, now: Instant) -> usize {
        match self.mode {
            Mode::RoundRobin => {
                self.counter = self.counter.wrapping_add(1);
                (self.counter % self.hosts.len() as u64) as usize
            }
            Mode::HostPool => self.round_robin(now),
            Mode::EpsilonGreedy => self.epsilon_greedy(now),
        }
    }

    /// The outcome of a publish to `host` that took `took` (ignored in round-robin mode).
    pub fn mark(&mut self, host: usize, ok: bool, took: Duration, now: Instant) {
        if self.mode == Mode::RoundRobin {
            return;
        }
        let h = &mut self.hosts[host];
        if ok {
            h.dead = false;
            let ms = took.as_millis() as f64;
            h.avg_ms = if h.avg_ms == 0.0 {
                ms
            } else {
                h.avg_ms + EWMA_WEIGHT * (ms - h.avg_ms)
            };
        } else if !h.dead {
            h.dead = true;
            h.retry_delay = INITIAL_RETRY_DELAY;
            h.next_retry = now + h.retry_delay;
        }
    }

    fn round_robin(&mut self, now: Instant) -> usize {
        let n = self.hosts.len();
        for i in 0..n {
            let idx = (i + self.next_index) % n;
            let h = &mut self.hosts[idx];
            if !h.dead {
                self.next_index = idx + 1;
                return idx;
            }
            if h.next_retry < now {
                will_retry(h, now);
                self.next_index = idx + 1;
                return idx;
            }
        }
        // Every host is down: revive them all.
        for h in &mut self.hosts {
            h.dead = false;
        }
        self.next_index = 0;
        0
    }

    fn epsilon_greedy(&mut self, now: Instant) -> usize {
        let mut rng = rand::thread_rng();
        if rng.gen::<f64>() < self.epsilon {
            self.epsilon = (self.epsilon * EPSILON_DECAY).max(MIN_EPSILON);
            return self.round_robin(now);
        }
        let usable = |h: &Host| !h.dead || h.next_retry < now;
        let total: f64 = self
            .hosts
            .iter()
            .filter(|h| usable(h) && h.avg_ms > 0.0)
            .map(|h| 1.0 / h.avg_ms)
            .sum();
        if total <= 0.0 {
            return self.round_robin(now);
        }
        let pick = rng.gen::<f64>() * total;
        let mut ceiling = 0.0;
        for (i, h) in self.hosts.iter_mut().enumerate() {
            if !(usable(h) && h.avg_ms > 0.0) {
                continue;
            }
            ceiling += 1.0 / h.avg_ms;
            if pick <= ceiling {
                if h.dead {
                    will_retry(h, now);
                }
                return i;
            }
        }
        self.round_robin(now)
    }
}

/// `willRetryHost`: the next retry of a dead host comes after twice the last delay.
fn will_retry(h: &mut Host, now: Instant) {
    h.retry_delay = (h.retry_delay * 2).min(MAX_RETRY_INTERVAL);
    h.next_retry = now + h.retry_delay;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names() {
        assert_eq!(Mode::parse("round-robin"), Mode::RoundRobin);
        assert_eq!(Mode::parse("hostpool"), Mode::HostPool);
        assert_eq!(Mode::parse("epsilon-greedy"), Mode::EpsilonGreedy);
        assert_eq!(Mode::parse("all"), Mode::RoundRobin);
    }

    #[test]
    fn round_robin_starts_at_index_one() {
        let mut s = Selector::new(Mode::RoundRobin, 3);
        let now = Instant::now();
        let picks: Vec<usize> = (0..5).map(|_| s.pick(now)).collect();
        assert_eq!(picks, [1, 2, 0, 1, 2]);
        // Failures do not change round-robin.
        s.mark(0, false, Duration::ZERO, now);
        assert_eq!(s.pick(now), 0);
    }

    #[test]
    fn hostpool_skips_dead_hosts_and_retries_them_later() {
        let mut s = Selector::new(Mode::HostPool, 2);
        let t0 = Instant::now();
        assert_eq!((s.pick(t0), s.pick(t0), s.pick(t0)), (0, 1, 0));
        s.mark(0, false, Duration::ZERO, t0);
        for _ in 0..5 {
            assert_eq!(s.pick(t0), 1);
        }
        // After 30 s the dead host is offered once, then waits 60 s more.
        let t1 = t0 + Duration::from_secs(31);
        let picks: Vec<usize> = (0..4).map(|_| s.pick(t1)).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 0).count(), 1, "{picks:?}");
        let t2 = t1 + Duration::from_secs(59);
        assert!((0..4).all(|_| s.pick(t2) == 1));
        // A success revives it.
        s.mark(0, true, Duration::ZERO, t2);
        let picks: Vec<usize> = (0..4).map(|_| s.pick(t2)).collect();
        assert_eq!(picks.iter().filter(|&&i| i == 0).count(), 2, "{picks:?}");
    }

    #[test]
    fn hostpool_revives_all_when_all_are_dead() {
        let mut s = Selector::new(Mode::HostPool, 2);
        let t0 = Instant::now();
        s.mark(0, false, Duration::ZERO, t0);
        s.mark(1, false, Duration::ZERO, t0);
        // All revived, and the next turn starts over at the first (so it is picked twice,
        // as in go-hostpool).
        assert_eq!(s.pick(t0), 0);
        assert_eq!(s.pick(t0), 0);
        assert_eq!(s.pick(t0), 1);
    }

    #[test]
    fn epsilon_greedy_prefers_the_faster_host() {
        let mut s = Selector::new(Mode::EpsilonGreedy, 2);
        let now = Instant::now();
        s.mark(0, true, Duration::from_millis(1), now);
        s.mark(1, true, Duration::from_millis(100), now);
        let fast = (0..2000).filter(|_| s.pick(now) == 0).count();
        assert!(fast > 1500, "{fast}");
        s.mark(0, false, Duration::ZERO, now);
        assert!((0..100).all(|_| s.pick(now) == 1));
    }
}
