//! Destination selection for nsq_to_nsq (nsq's apps/nsq_to_nsq/nsq_to_nsq.go,
//! `PublishHandler.HandleMessage`): `round-robin` (a shared counter incremented before use, so
//! the first message goes to index 1 of several), or go-hostpool's standard (`hostpool`) or
//! epsilon-greedy (`epsilon-greedy`) pool, the same [`crate::hostpool::HostPool`] nsq_to_http
//! uses, fed with the clock and `rand`'s numbers.

use std::time::{Duration, Instant};

use crate::hostpool::HostPool;

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

/// Picks the destination of each message; `None` pool is round-robin.
#[derive(Debug)]
pub struct Selector {
    hosts: usize,
    counter: u64,
    pool: Option<HostPool>,
}

impl Selector {
    pub fn new(mode: Mode, hosts: usize) -> Selector {
        let now = Instant::now();
        let pool = match mode {
            Mode::RoundRobin => None,
            Mode::HostPool => Some(HostPool::new(hosts, now)),
            Mode::EpsilonGreedy => Some(HostPool::epsilon_greedy(hosts, now)),
        };
        Selector {
            hosts: hosts.max(1),
            counter: 0,
            pool,
        }
    }

    /// The destination for the next message.
    pub fn pick(&mut self, now: Instant) -> usize {
        match self.pool.as_mut() {
            Some(pool) => pool.get(now, rand::random::<f32>(), rand::random::<f64>()),
            None => {
                self.counter = self.counter.wrapping_add(1);
                (self.counter % self.hosts as u64) as usize
            }
        }
    }

    /// The outcome of a publish to `host` that took `took` (ignored in round-robin mode).
    /// Whether a host pool picks (hostpool, epsilon-greedy): failures mark hosts down and
    /// later picks avoid them. Round-robin only counts.
    pub fn is_pool(&self) -> bool {
        self.pool.is_some()
    }

    pub fn mark(&mut self, host: usize, ok: bool, took: Duration, now: Instant) {
        if let Some(pool) = self.pool.as_mut() {
            pool.mark(host, ok, took, now);
        }
    }
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
