//! End-to-end processing latency (`--e2e-processing-latency-percentile`): publish → FIN time,
//! kept in two rolling half-window sample streams per channel and queried as quantiles.
//!
//! The reference uses a CKMS streaming estimator; we keep a bounded reservoir per half window
//! and answer exact quantiles of it, which always returns a recorded sample as the reference
//! does and 0 for an empty window.

use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use tokio::time::Instant;

/// Samples kept per half window before reservoir sampling starts replacing them.
const RESERVOIR: usize = 4096;

struct Stream {
    samples: Vec<i64>,
    seen: u64,
}

impl Stream {
    fn new() -> Self {
        Stream {
            samples: Vec::new(),
            seen: 0,
        }
    }

    fn insert(&mut self, v: i64) {
        self.seen += 1;
        if self.samples.len() < RESERVOIR {
            self.samples.push(v);
        } else {
            let j = rand::thread_rng().gen_range(0..self.seen);
            if (j as usize) < RESERVOIR {
                self.samples[j as usize] = v;
            }
        }
    }

    fn clear(&mut self) {
        self.samples.clear();
        self.seen = 0;
    }
}

struct Windows {
    streams: [Stream; 2],
    current: usize,
    last_switch: Instant,
}

/// One channel's (or a merged topic's) latency window. A no-op when no percentiles are set.
pub struct E2eLatency {
    percentiles: Vec<f64>,
    half_window: Duration,
    inner: Option<Mutex<Windows>>,
}

/// A query result: sample count and `(quantile, value_ns)` pairs in configured order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct E2eSnapshot {
    pub count: u64,
    pub percentiles: Vec<(f64, f64)>,
}

impl E2eLatency {
    pub fn new(percentiles: &[f64], window: Duration) -> Self {
        let inner = (!percentiles.is_empty()).then(|| {
            Mutex::new(Windows {
                streams: [Stream::new(), Stream::new()],
                current: 0,
                last_switch: Instant::now(),
            })
        });
        E2eLatency {
            percentiles: percentiles.to_vec(),
            half_window: window / 2,
            inner,
        }
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    fn rotate(&self, w: &mut Windows) {
        let half = self.half_window.max(Duration::from_millis(1));
        let now = Instant::now();
        while now.duration_since(w.last_switch) >= half {
            w.current ^= 1;
            w.streams[w.current].clear();
            w.last_switch += half;
        }
    }

    /// Records one publish → FIN latency in nanoseconds.
    pub fn record(&self, latency_ns: i64) {
        if let Some(inner) = &self.inner {
            let mut w = inner.lock();
            self.rotate(&mut w);
            let cur = w.current;
            w.streams[cur].insert(latency_ns);
        }
    }

    /// Appends this window's samples (for merging into a topic's view).
    pub fn collect(&self, out: &mut Vec<i64>) -> u64 {
        let Some(inner) = &self.inner else { return 0 };
        let mut w = inner.lock();
        self.rotate(&mut w);
        let mut count = 0;
        for s in &w.streams {
            out.extend_from_slice(&s.samples);
            count += s.seen;
        }
        count
    }

    /// Quantiles over the samples of this window.
    pub fn snapshot(&self) -> Option<E2eSnapshot> {
        self.inner.as_ref()?;
        let mut v = Vec::new();
        let count = self.collect(&mut v);
        Some(quantiles(&self.percentiles, count, v))
    }
}

/// Computes `(q, value)` for each configured quantile over `samples` (0 when empty).
pub fn quantiles(percentiles: &[f64], count: u64, mut samples: Vec<i64>) -> E2eSnapshot {
    samples.sort_unstable();
    let percentiles = percentiles
        .iter()
        .map(|&q| {
            let v = if samples.is_empty() {
                0.0
            } else {
                let idx = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1;
                samples[idx] as f64
            };
            (q, v)
        })
        .collect();
    E2eSnapshot { count, percentiles }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_is_none() {
        let e = E2eLatency::new(&[], Duration::from_secs(600));
        e.record(5);
        assert!(e.snapshot().is_none());
    }

    #[tokio::test]
    async fn quantiles_are_samples_and_ordered() {
        let e = E2eLatency::new(&[1.0, 0.99, 0.5], Duration::from_secs(600));
        assert_eq!(
            e.snapshot().unwrap().percentiles,
            vec![(1.0, 0.0), (0.99, 0.0), (0.5, 0.0)]
        );
        for v in 1..=100 {
            e.record(v);
        }
        let s = e.snapshot().unwrap();
        assert_eq!(s.count, 100);
        assert_eq!(s.percentiles, vec![(1.0, 100.0), (0.99, 99.0), (0.5, 50.0)]);
    }

    #[tokio::test(start_paused = true)]
    async fn window_rolls_over() {
        let e = E2eLatency::new(&[1.0], Duration::from_secs(10));
        e.record(7);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(e.snapshot().unwrap().count, 1, "still within the window");
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(
            e.snapshot().unwrap().count,
            0,
            "aged out after a full window"
        );
    }
}
