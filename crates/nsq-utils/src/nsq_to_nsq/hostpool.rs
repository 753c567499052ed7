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
//! otherwise picks among the usable hosts at random weighted by 1 / their weighted average
//! response time in whole milliseconds over 120 buckets spanning 5 minutes (newer buckets
//! weigh more); hosts without a positive average are not candidates, so on a fast network it
//! behaves like the standard pool (`getEpsilonGreedy`, `getWeightedAverageResponseTime`,
//! `performEpsilonGreedyDecay`, `LinearEpsilonValueCalculator`). The reference advances the
//! buckets from a ticker goroutine; here they are advanced lazily when the pool is used.

use std::time::{Duration, Instant};

use rand::Rng;

/// go-hostpool's `initialRetryDelay`.
const INITIAL_RETRY_DELAY: Duration = Duration::from_secs(30);
/// go-hostpool's `maxRetryInterval`.
const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(900);
const INITIAL_EPSILON: f64 = 0.3;
const EPSILON_DECAY: f64 = 0.9;
const MIN_EPSILON: f64 = 0.01;
/// go-hostpool's `epsilonBuckets`.
const BUCKETS: usize = 120;
/// go-hostpool's `defaultDecayDuration` / `epsilonBuckets`: how long one bucket lasts.
const BUCKET_SPAN: Duration = Duration::from_millis(5 * 60 * 1000 / BUCKETS as u64);

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
    /// Epsilon-greedy: per bucket, how many successes and their summed whole milliseconds.
    counts: Vec<i64>,
    values: Vec<i64>,
}

impl Host {
    /// `getWeightedAverageResponseTime`: oldest bucket first, weights 1/120 … 120/120; an
    /// empty bucket repeats the last value seen.
    fn weighted_average_ms(&self, index: usize) -> f64 {
        let (mut value, mut last) = (0.0, 0.0);
        for i in 1..=BUCKETS {
            let pos = (index + i) % BUCKETS;
            let weight = i as f64 / BUCKETS as f64;
            if self.counts[pos] > 0 {
                last = self.values[pos] as f64 / self.counts[pos] as f64;
            }
            value += last * weight;
        }
        value
    }
}

/// Chooses destination indexes. One owner (the caller keeps it behind a short lock).
#[derive(Debug, Clone)]
pub struct Selector {
    mode: Mode,
    counter: u64,
    hosts: Vec<Host>,
    next_index: usize,
    epsilon: f64,
    /// The current bucket, and when it started.
    bucket: usize,
    bucket_start: Instant,
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
                    counts: if mode == Mode::EpsilonGreedy {
                        vec![0; BUCKETS]
                    } else {
                        Vec::new()
                    },
                    values: if mode == Mode::EpsilonGreedy {
                        vec![0; BUCKETS]
                    } else {
                        Vec::new()
                    },
                };
                hosts
            ],
            next_index: 0,
            epsilon: INITIAL_EPSILON,
            bucket: 0,
            bucket_start: now,
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
        if self.mode == Mode::EpsilonGreedy {
            self.decay(now);
        }
        let bucket = self.bucket;
        let h = &mut self.hosts[host];
        if ok {
            h.dead = false;
            if self.mode == Mode::EpsilonGreedy {
                h.counts[bucket] += 1;
                h.values[bucket] += took.as_millis() as i64;
            }
        } else if !h.dead {
            h.dead = true;
            h.retry_delay = INITIAL_RETRY_DELAY;
            h.next_retry = now + h.retry_delay;
        }
    }

    /// `performEpsilonGreedyDecay` for every bucket span that has passed: move to the next
    /// bucket and empty it.
    fn decay(&mut self, now: Instant) {
        let mut steps = 0;
        while now.saturating_duration_since(self.bucket_start) >= BUCKET_SPAN && steps < BUCKETS {
            self.bucket_start += BUCKET_SPAN;
            self.bucket = (self.bucket + 1) % BUCKETS;
            for h in &mut self.hosts {
                h.counts[self.bucket] = 0;
                h.values[self.bucket] = 0;
            }
            steps += 1;
        }
        if steps == BUCKETS {
            // Idle for longer than the whole window: everything is empty already.
            self.bucket_start = now;
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
        self.decay(now);
        let mut rng = rand::thread_rng();
        if rng.gen::<f64>() < self.epsilon {
            self.epsilon = (self.epsilon * EPSILON_DECAY).max(MIN_EPSILON);
            return self.round_robin(now);
        }
        // LinearEpsilonValueCalculator: value = 1 / average, for usable hosts with an average.
        let bucket = self.bucket;
        let values: Vec<Option<f64>> = self
            .hosts
            .iter()
            .map(|h| {
                let usable = !h.dead || h.next_retry < now;
                let v = h.weighted_average_ms(bucket);
                (usable && v > 0.0).then(|| 1.0 / v)
            })
            .collect();
        let total: f64 = values.iter().flatten().sum();
        if total > 0.0 {
            let pick = rng.gen::<f64>();
            let mut ceiling = 0.0;
            for (i, v) in values.iter().enumerate() {
                let Some(v) = v else { continue };
                ceiling += v / total;
                if pick <= ceiling {
                    let h = &mut self.hosts[i];
                    if h.dead {
                        will_retry(h, now);
                    }
                    return i;
                }
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

    #[test]
    fn epsilon_greedy_buckets_decay_over_five_minutes() {
        let mut s = Selector::new(Mode::EpsilonGreedy, 2);
        let t0 = Instant::now();
        s.mark(0, true, Duration::from_millis(10), t0);
        assert_eq!(s.hosts[0].weighted_average_ms(s.bucket), 10.0);
        // One bucket later the (now older) value still counts, and an empty newer bucket
        // repeats it, as getWeightedAverageResponseTime does.
        s.decay(t0 + BUCKET_SPAN);
        let v = s.hosts[0].weighted_average_ms(s.bucket);
        assert!((v - 10.0 * (1.0 + 119.0 / 120.0)).abs() < 1e-9, "{v}");
        // After the whole window nothing is left: no host has an average, so the choice is
        // the standard pool's turn.
        s.decay(t0 + Duration::from_secs(301));
        assert_eq!(s.hosts[0].weighted_average_ms(s.bucket), 0.0);
        // Whole milliseconds: sub-millisecond answers give no average either.
        s.mark(
            1,
            true,
            Duration::from_micros(900),
            t0 + Duration::from_secs(301),
        );
        assert_eq!(s.hosts[1].weighted_average_ms(s.bucket), 0.0);
    }
}
