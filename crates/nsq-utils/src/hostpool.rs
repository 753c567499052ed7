//! go-hostpool (github.com/bitly/go-hostpool, hostpool.go), the `--mode hostpool` and
//! `--mode epsilon-greedy` destination choice of nsq_to_http and nsq_to_nsq, without I/O: the caller passes
//! the clock and the random numbers.
//!
//! * Standard pool (`hostpool.New`): hosts in turn; a host whose request failed is dead for
//!   30 s, then tried once, and if it fails again the wait doubles (up to 900 s). When every
//!   host is dead and none is due, all are revived and the first is used.
//! * Epsilon-greedy (`hostpool.NewEpsilonGreedy` with the linear calculator): with
//!   probability ε (0.3, decaying ×0.9 per exploration down to 0.01) the standard choice,
//!   otherwise a random host weighted by 1 / its average response time over the last five
//!   minutes (120 buckets, older buckets weigh less); hosts without a measured time (or only
//!   sub-millisecond ones, which count as 0 ms) are left to the standard choice.

use std::time::{Duration, Instant};

const INITIAL_RETRY_DELAY: Duration = Duration::from_secs(30);
const MAX_RETRY_INTERVAL: Duration = Duration::from_secs(900);
const EPSILON_BUCKETS: usize = 120;
const EPSILON_DECAY: f32 = 0.90;
const MIN_EPSILON: f32 = 0.01;
const INITIAL_EPSILON: f32 = 0.3;
const DECAY_DURATION: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone)]
struct HostEntry {
    dead: bool,
    next_retry: Instant,
    retry_delay: Duration,
    /// Per bucket: successful requests and their summed milliseconds (epsilon-greedy only).
    counts: Vec<i64>,
    values: Vec<i64>,
    index: usize,
}

impl HostEntry {
    fn can_try(&self, now: Instant) -> bool {
        !self.dead || self.next_retry < now
    }

    /// `willRetryHost`: the retry that is about to happen pushes the next one further out.
    fn will_retry(&mut self, now: Instant) {
        self.retry_delay = (self.retry_delay * 2).min(MAX_RETRY_INTERVAL);
        self.next_retry = now + self.retry_delay;
    }

    /// `getWeightedAverageResponseTime`, in milliseconds.
    fn weighted_average(&self) -> f64 {
        let (mut value, mut last) = (0.0, 0.0);
        for i in 1..=EPSILON_BUCKETS {
            let pos = (self.index + i) % EPSILON_BUCKETS;
            let weight = i as f64 / EPSILON_BUCKETS as f64;
            if self.counts[pos] > 0 {
                last = self.values[pos] as f64 / self.counts[pos] as f64;
            }
            value += last * weight;
        }
        value
    }
}

#[derive(Debug, Clone)]
struct Epsilon {
    epsilon: f32,
    /// When the buckets were last rotated (go-hostpool rotates from a ticker every
    /// 5 min / 120; here the rotations that are due happen on the next call).
    last_decay: Instant,
}

/// A pool over `hosts` (indexes into the caller's address list).
#[derive(Debug, Clone)]
pub struct HostPool {
    hosts: Vec<HostEntry>,
    next: usize,
    epsilon: Option<Epsilon>,
}

impl HostPool {
    /// `hostpool.New`.
    pub fn new(hosts: usize, now: Instant) -> HostPool {
        let entry = HostEntry {
            dead: false,
            next_retry: now,
            retry_delay: INITIAL_RETRY_DELAY,
            counts: Vec::new(),
            values: Vec::new(),
            index: 0,
        };
        HostPool {
            hosts: vec![entry; hosts.max(1)],
            next: 0,
            epsilon: None,
        }
    }

    /// `hostpool.NewEpsilonGreedy(hosts, 0, &LinearEpsilonValueCalculator{})`.
    pub fn epsilon_greedy(hosts: usize, now: Instant) -> HostPool {
        let mut p = HostPool::new(hosts, now);
        for h in &mut p.hosts {
            h.counts = vec![0; EPSILON_BUCKETS];
            h.values = vec![0; EPSILON_BUCKETS];
        }
        p.epsilon = Some(Epsilon {
            epsilon: INITIAL_EPSILON,
            last_decay: now,
        });
        p
    }

    /// `Get`: the host for the next request. `r32`/`r64` are uniform in [0, 1) (Go's
    /// `rand.Float32`, `rand.Float64`); only epsilon-greedy uses them.
    pub fn get(&mut self, now: Instant, r32: f32, r64: f64) -> usize {
        let Some(eps) = self.epsilon.as_mut() else {
            return self.round_robin(now);
        };
        if r32 < eps.epsilon {
            eps.epsilon = (eps.epsilon * EPSILON_DECAY).max(MIN_EPSILON);
            return self.round_robin(now);
        }
        self.decay(now);
        // (host, 1/avg) of every host that may be tried and has a measured time.
        let candidates: Vec<(usize, f64)> = self
            .hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| h.can_try(now))
            .filter_map(|(i, h)| {
                let v = h.weighted_average();
                (v > 0.0).then(|| (i, 1.0 / v))
            })
            .collect();
        let sum: f64 = candidates.iter().map(|(_, v)| v).sum();
        let mut ceiling = 0.0;
        let chosen = candidates.iter().find_map(|&(i, v)| {
            ceiling += v / sum;
            (r64 <= ceiling).then_some(i)
        });
        match chosen {
            Some(i) => {
                if self.hosts[i].dead {
                    self.hosts[i].will_retry(now);
                }
                i
            }
            None => self.round_robin(now),
        }
    }

    /// `Mark(nil)` / `Mark(err)` for a request to `host` that took `elapsed`.
    pub fn mark(&mut self, host: usize, ok: bool, elapsed: Duration, now: Instant) {
        let epsilon = self.epsilon.is_some();
        if epsilon {
            self.decay(now);
        }
        let Some(h) = self.hosts.get_mut(host) else {
            return;
        };
        if ok {
            h.dead = false;
            if epsilon {
                h.counts[h.index] += 1;
                // go-hostpool stores whole milliseconds: `int64(duration.Seconds() * 1000)`.
                h.values[h.index] += (elapsed.as_secs_f64() * 1000.0) as i64;
            }
        } else if !h.dead {
            h.dead = true;
            h.retry_delay = INITIAL_RETRY_DELAY;
            h.next_retry = now + h.retry_delay;
        }
    }

    /// `getRoundRobin`.
    fn round_robin(&mut self, now: Instant) -> usize {
        let n = self.hosts.len();
        for i in 0..n {
            let cur = (i + self.next) % n;
            let h = &mut self.hosts[cur];
            if !h.dead {
                self.next = cur + 1;
                return cur;
            }
            if h.next_retry < now {
                h.will_retry(now);
                self.next = cur + 1;
                return cur;
            }
        }
        // All hosts are down: revive them all.
        for h in &mut self.hosts {
            h.dead = false;
        }
        self.next = 0;
        0
    }

    /// `performEpsilonGreedyDecay`, once per elapsed bucket period.
    fn decay(&mut self, now: Instant) {
        let Some(eps) = self.epsilon.as_mut() else {
            return;
        };
        let per_bucket = DECAY_DURATION / EPSILON_BUCKETS as u32;
        let mut rotations = 0;
        while now.saturating_duration_since(eps.last_decay) >= per_bucket {
            eps.last_decay += per_bucket;
            rotations += 1;
            if rotations > EPSILON_BUCKETS {
                // Everything is cleared already; skip the rest of a long idle time.
                eps.last_decay = now;
                break;
            }
            for h in &mut self.hosts {
                h.index = (h.index + 1) % EPSILON_BUCKETS;
                h.counts[h.index] = 0;
                h.values[h.index] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_pool_rotates_and_skips_dead_hosts() {
        let t0 = Instant::now();
        let mut p = HostPool::new(3, t0);
        let picks: Vec<usize> = (0..4).map(|_| p.get(t0, 0.0, 0.0)).collect();
        assert_eq!(picks, [0, 1, 2, 0]);
        // Host 1 fails: skipped until its 30 s are over.
        p.mark(1, false, Duration::ZERO, t0);
        let picks: Vec<usize> = (0..4).map(|_| p.get(t0, 0.0, 0.0)).collect();
        assert_eq!(picks, [2, 0, 2, 0]);
        let later = t0 + Duration::from_secs(31);
        assert_eq!(p.get(later, 0.0, 0.0), 1, "due for a retry");
        // Still dead (no success yet) and the next retry is 60 s out.
        assert_eq!(p.get(later, 0.0, 0.0), 2);
        assert_eq!(p.get(later, 0.0, 0.0), 0);
        assert_eq!(p.get(later, 0.0, 0.0), 2);
        p.mark(1, true, Duration::ZERO, later);
        assert_eq!(p.get(later, 0.0, 0.0), 0);
        assert_eq!(p.get(later, 0.0, 0.0), 1);
    }

    #[test]
    fn all_dead_revives_everyone() {
        let t0 = Instant::now();
        let mut p = HostPool::new(2, t0);
        p.mark(0, false, Duration::ZERO, t0);
        p.mark(1, false, Duration::ZERO, t0);
        assert_eq!(p.get(t0, 0.0, 0.0), 0);
        // go-hostpool leaves the rotation at 0 after a revival: host 0 again, then 1.
        assert_eq!(p.get(t0, 0.0, 0.0), 0);
        assert_eq!(p.get(t0, 0.0, 0.0), 1);
    }

    #[test]
    fn epsilon_greedy_prefers_the_faster_host() {
        let t0 = Instant::now();
        let mut p = HostPool::epsilon_greedy(2, t0);
        p.mark(0, true, Duration::from_millis(10), t0);
        p.mark(1, true, Duration::from_millis(40), t0);
        // Exploitation (r32 ≥ ε): weights 1/10 and 1/40 → host 0 below 0.8, host 1 above.
        assert_eq!(p.get(t0, 0.99, 0.5), 0);
        assert_eq!(p.get(t0, 0.99, 0.79), 0);
        assert_eq!(p.get(t0, 0.99, 0.81), 1);
        // Exploration (r32 < ε) is the standard rotation.
        assert_eq!(p.get(t0, 0.0, 0.5), 0);
        assert_eq!(p.get(t0, 0.0, 0.5), 1);
        // After five idle minutes the measurements are gone: back to rotation.
        let later = t0 + Duration::from_secs(301);
        assert_eq!(p.get(later, 0.99, 0.99), 0);
    }
}
