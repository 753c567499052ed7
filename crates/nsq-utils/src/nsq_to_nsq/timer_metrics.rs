//! Publish timing lines (bitly/timer_metrics, timer_metrics.go, as nsq_to_nsq and nsq_to_http
//! use it): every `status_every` recorded durations one log line
//! `<prefix> finished <n> - 99th: <x>ms - 95th: <x>ms - avg: <x>ms`. The window is a ring of
//! the last `status_every` durations; the line is logged when the ring wraps, i.e. on the
//! (status_every + 1)-th record and every status_every records after that, as the reference
//! does. 0 disables it; a value below 100 logs a warning when created.

use std::time::Duration;

use crate::golog::log;

/// One series of timings. One owner (the caller keeps it behind a short lock).
#[derive(Debug, Clone)]
pub struct TimerMetrics {
    prefix: String,
    status_every: usize,
    timings: Vec<Duration>,
    position: usize,
}

impl TimerMetrics {
    /// `NewTimerMetrics(statusEvery, prefix)`.
    pub fn new(status_every: i64, prefix: &str) -> TimerMetrics {
        let status_every = usize::try_from(status_every).unwrap_or(0);
        if status_every > 0 && status_every < 100 {
            log(&format!(
                "Warning: use more than 100 status values for accurate percentiles (configured with {status_every})"
            ));
        }
        TimerMetrics {
            prefix: prefix.to_string(),
            status_every,
            timings: Vec::with_capacity(status_every),
            position: 0,
        }
    }

    /// Records one duration (`StatusDuration`); returns the status line when one is due (the
    /// caller logs it, outside its lock).
    pub fn record(&mut self, d: Duration) -> Option<String> {
        if self.status_every == 0 {
            return None;
        }
        self.position += 1;
        let looped = self.position > self.status_every;
        if looped {
            self.position = 1;
        }
        if self.position > self.timings.len() {
            self.timings.push(d);
        } else {
            self.timings[self.position - 1] = d;
        }
        looped.then(|| self.line())
    }

    /// `Stats.String()` of the current window.
    fn line(&self) -> String {
        let mut sorted = self.timings.clone();
        sorted.sort_unstable();
        let total: Duration = sorted.iter().sum();
        let avg = if sorted.is_empty() {
            Duration::ZERO
        } else {
            total / sorted.len() as u32
        };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        format!(
            "{} finished {} - 99th: {:.2}ms - 95th: {:.2}ms - avg: {:.2}ms",
            self.prefix,
            sorted.len(),
            ms(percentile(99.0, &sorted)),
            ms(percentile(95.0, &sorted)),
            ms(avg)
        )
    }
}

/// timer_metrics.go, `percentile`: index `ceil(perc/100 × n + 0.5)`, capped at the last.
fn percentile(perc: f64, sorted: &[Duration]) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((perc / 100.0) * sorted.len() as f64 + 0.5).ceil() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_when_the_ring_wraps() {
        let mut m = TimerMetrics::new(100, "[aggregate]:");
        for i in 1..=100u64 {
            assert_eq!(m.record(Duration::from_millis(i)), None);
        }
        // The 101st replaces the first (1 ms) with 500 ms and reports the window.
        let line = m.record(Duration::from_millis(500)).unwrap();
        assert_eq!(
            line,
            "[aggregate]: finished 100 - 99th: 500.00ms - 95th: 98.00ms - avg: 55.49ms"
        );
        for _ in 0..99 {
            assert_eq!(m.record(Duration::from_millis(1)), None);
        }
        assert!(m.record(Duration::from_millis(1)).is_some());
    }

    #[test]
    fn zero_disables() {
        let mut m = TimerMetrics::new(0, "");
        for _ in 0..1000 {
            assert_eq!(m.record(Duration::from_millis(1)), None);
        }
    }
}
