//! Request and publish timings (nsq_to_http, nsq_to_nsq), logged every `status_every` requests (github.com/bitly/timer_metrics,
//! `TimerMetrics`): a ring of the last `status_every` durations; each time the ring wraps
//! (the `status_every + 1`-th sample, then every `status_every` more) one line
//! `<prefix> finished <n> - 99th: <x>ms - 95th: <x>ms - avg: <x>ms` goes to the Go logger,
//! computed over the ring's contents including the sample that just wrapped it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One series of timings (`[aggregate]:` or `[<address>]:`).
#[derive(Debug)]
pub struct TimerMetrics {
    prefix: String,
    /// 0 disables the series; Go does not reject negative values (each sample then logs).
    status_every: i64,
    /// Short critical sections (a store and, once per `status_every`, a sort of the ring);
    /// no `.await` while held, so a blocking mutex is right.
    ring: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    timings: Vec<Duration>,
    /// 1-based position of the last sample written.
    position: i64,
}

/// The figures of one line (`timer_metrics.Stats`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub prefix: String,
    pub count: usize,
    pub avg: Duration,
    pub p95: Duration,
    pub p99: Duration,
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        write!(
            f,
            "{} finished {} - 99th: {:.2}ms - 95th: {:.2}ms - avg: {:.2}ms",
            self.prefix,
            self.count,
            ms(self.p99),
            ms(self.p95),
            ms(self.avg)
        )
    }
}

impl TimerMetrics {
    /// `NewTimerMetrics`: a positive `status_every` below 100 logs the reference's warning.
    pub fn new(status_every: i64, prefix: impl Into<String>) -> TimerMetrics {
        if status_every > 0 && status_every < 100 {
            crate::log(&format!(
                "Warning: use more than 100 status values for accurate percentiles (configured with {status_every})"
            ));
        }
        let cap = usize::try_from(status_every.clamp(0, 1 << 16)).unwrap_or(0);
        TimerMetrics {
            prefix: prefix.into(),
            status_every,
            ring: Mutex::new(Ring {
                timings: Vec::with_capacity(cap),
                position: 0,
            }),
        }
    }

    /// `Status`: records the time since `start` and logs a line when the ring wraps.
    pub fn status(&self, start: Instant) {
        if self.status_every == 0 {
            return;
        }
        if let Some(stats) = self.record(start.elapsed()) {
            crate::log(&stats.to_string());
        }
    }

    /// `StatusDuration` without the logging: the line's figures when this sample wrapped
    /// the ring.
    pub fn record(&self, d: Duration) -> Option<Stats> {
        if self.status_every == 0 {
            return None;
        }
        let mut ring = self.ring.lock().unwrap_or_else(|e| e.into_inner());
        ring.position += 1;
        let looped = ring.position > self.status_every;
        if looped {
            ring.position = 1;
        }
        let pos = usize::try_from(ring.position).unwrap_or(1);
        if pos > ring.timings.len() {
            ring.timings.push(d);
        } else {
            ring.timings[pos - 1] = d;
        }
        looped.then(|| self.stats(&ring.timings))
    }

    fn stats(&self, timings: &[Duration]) -> Stats {
        let total: Duration = timings.iter().sum();
        let mut sorted = timings.to_vec();
        sorted.sort_unstable();
        let avg = if sorted.is_empty() {
            Duration::ZERO
        } else {
            Duration::from_nanos((total.as_nanos() / sorted.len() as u128) as u64)
        };
        Stats {
            prefix: self.prefix.clone(),
            count: timings.len(),
            avg,
            p95: percentile(95.0, &sorted),
            p99: percentile(99.0, &sorted),
        }
    }
}

/// timer_metrics' `percentile`: index `ceil(perc/100 × len + 0.5)`, at most `len - 1`.
fn percentile(perc: f64, sorted: &[Duration]) -> Duration {
    let len = sorted.len();
    if len == 0 {
        return Duration::ZERO;
    }
    let idx = ((perc / 100.0) * len as f64 + 0.5).ceil() as usize;
    sorted[idx.min(len - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn ring_of_the_last_n_logged_when_it_wraps() {
        // timer_metrics_test.go, TestMetrics: 1s..11s through a ring of 5.
        let m = TimerMetrics::new(5, "prefix");
        let mut lines = Vec::new();
        for n in 1..=11u32 {
            if let Some(s) = m.record(S * n) {
                lines.push((n, s));
            }
        }
        let at: Vec<u32> = lines.iter().map(|(n, _)| *n).collect();
        assert_eq!(at, [6, 11]);
        let last = &lines[1].1;
        assert_eq!(last.avg, S * 9);
        assert_eq!(last.p99, S * 11);
        assert_eq!(last.count, 5);
        // The 6th sample replaced the 1st: {6,2,3,4,5}.
        let first = &lines[0].1;
        assert_eq!(first.avg, S * 4);
        assert_eq!(
            first.to_string(),
            "prefix finished 5 - 99th: 6000.00ms - 95th: 6000.00ms - avg: 4000.00ms"
        );
    }

    #[test]
    fn percentiles_and_millisecond_format() {
        let m = TimerMetrics::new(100, "[aggregate]:");
        let mut last = None;
        for i in 1..=101u64 {
            last = m.record(Duration::from_micros(i * 1500)).or(last);
        }
        // Ring: 151.5ms (the 101st), 3ms..150ms; sorted[k] = 1.5ms × (k + 2) below 99:
        // index ceil(95.5) = 96 → 147ms, ceil(99.5) = 100 → capped at 99 → 151.5ms.
        let s = last.unwrap();
        assert_eq!(
            s.to_string(),
            "[aggregate]: finished 100 - 99th: 151.50ms - 95th: 147.00ms - avg: 77.25ms"
        );
    }

    #[test]
    fn zero_disables() {
        let m = TimerMetrics::new(0, "");
        for _ in 0..1000 {
            assert!(m.record(S).is_none());
        }
    }
}
